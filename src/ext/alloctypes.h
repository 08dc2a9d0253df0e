/*
 * alloctypes — what each sampled allocation was (the type of the object in
 * a block of Python's object allocator, "native" for malloc's, "buffer"
 * for PyMem's, "unknown" when it cannot be told) and how long it lived
 * (died before the next garbage collection, survived one, or was alive at
 * the end; its lifetime in bytes allocated meanwhile and in seconds).
 * Fed by memory.c's callbacks; everything here runs with the GIL held
 * unless said, inside the shim's guard (no Python object is made).
 */
#ifndef CALX_ALLOCTYPES_H
#define CALX_ALLOCTYPES_H

#include <Python.h>

#include "cal_profile.h"

/* Start afresh into `profile` (attach, or a forked child's restart).
   0, or -1 with an exception set. */
int calx_atypes_start(cal_profile *profile);

/* A sampled allocation made with the GIL held, tracked by the shim until
   it is freed: `domain` is the shim's CAL_SHIM_NATIVE/PYMEM/PYOBJ, `line`
   the profile's line index or CAL_PROFILE_NONE, `clock` the allocation
   clock (the shim's alloc_clock) and `t` the session time. */
void calx_atypes_born(const void *ptr, size_t size, int64_t weight, int domain,
                      uint32_t line, int64_t clock, int64_t t);

/* A sampled allocation that is not followed (made by a thread without the
   GIL, or not tracked): counted with its type if known without reading it
   (native) and no fate. */
void calx_atypes_unfollowed(size_t size, int64_t weight, int domain, uint32_t line);

/* A tracked block was freed (or moved by realloc), at clock, t, with the
   collector's count `gc` as the freeing thread read it.  `readable`: the
   block is still allocated and the GIL is held (a free seen as it happens,
   not one queued), so a block whose type is not known yet can be read. */
void calx_atypes_died(const void *ptr, int64_t clock, int64_t t, int64_t gc,
                      int readable);

/* A point where the GIL is held and no free is pending: read the types of
   the blocks sampled since the last one. */
void calx_atypes_settle(void);

/* The end: settle, then record every sample still alive with its fate
   (survived if a collection ran since its birth, else alive at the end). */
void calx_atypes_stop(void);

#endif
