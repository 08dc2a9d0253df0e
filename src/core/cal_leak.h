/*
 * cal_leak — the leak judgement over a profile's lines (see cal_leak.c for
 * the method).  Plain C; not for the hot zone.
 */
#ifndef CAL_LEAK_H
#define CAL_LEAK_H

#include "cal_profile.h"

#include <stddef.h>
#include <stdint.h>

/* Laplace's rule of succession: the probability that the next watched
   allocation of a line is not freed, given `freed` of `watched` were. */
double cal_leak_likelihood(int64_t watched, int64_t freed);

/* Judge process 0's lines for leaks and put those found in the profile's
   leak list (cal_profile_leak_add), for good: before other processes are
   merged into its lines (cal_merge.h).  Until then the writers judge them
   afresh each time (a profile written while the program runs).  Does
   nothing a second time, or when memory was not profiled. */
void cal_leak_settle(cal_profile *p);

/* The leaks to report: the profile's list, and process 0's lines judged
   now if they were not settled.  Returns a malloc'd array of *n leaks
   (free it), or NULL with *n = 0 when memory was not profiled or memory
   ran out. */
cal_leak *cal_leak_collect(const cal_profile *p, size_t *n);

#endif
