/*
 * cal_merge — adds the profile of another process of the run (a child's
 * saved JSON, already parsed) to a live cal_profile, so that one profile
 * covers every process: the child's lines, functions and threads are added
 * to the same records, each line remembers how much of it came from which
 * process, and the memory timelines are summed in time.
 *
 * Plain C; the input is a file another process wrote and is treated as
 * untrusted (missing or mistyped keys read as zero, never crash).
 */
#ifndef CAL_MERGE_H
#define CAL_MERGE_H

#include "cal_jsonr.h"
#include "cal_profile.h"

/* Add `root`, a calipers/1 profile, as new processes of p (first settling
   p's own leaks, cal_leak_settle).  start_unix is
   the time process 0's profiling started (seconds since the epoch): the
   child's timelines are shifted by the difference.  On success return 0;
   on error (not a profile, memory ran out part way) return -1 and write a
   reason into err (cap bytes); p then holds whatever was added. */
int cal_merge_add(cal_profile *p, const cal_jv *root, double start_unix, char *err,
                  size_t cap);

#endif
