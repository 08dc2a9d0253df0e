/*
 * gcstats — the cyclic garbage collector, watched without being touched:
 * its statistics and counts read where the interpreter keeps them
 * (pyinternals.h, calx_gc_read_sigsafe) at every sampling pass, into the
 * profile's cal_gc_stats; and whether the thread a tick samples is the one
 * collecting, which labels that sample's CPU time as the collector's
 * (sampler.c).  Nothing is registered with the collector, so gc.callbacks,
 * gc.get_count(), the thresholds and gc.isenabled() read as without
 * calipers.  See docs/INTERNALS.md, "The garbage collector".
 *
 * start, pass and stop: GIL held (the engine lock on the free-threaded
 * build).  The _sigsafe function: any thread, no lock.
 */
#ifndef CALX_GCSTATS_H
#define CALX_GCSTATS_H

#include <Python.h>

#include "cal_profile.h"

/* Take the collector's statistics now as the run's baseline (profiling
   starts, in this process or a forked child). */
void calx_gcstats_start(PyInterpreterState *interp, cal_profile *profile);

/* At a sampling pass: the counts go on their timelines, and the profile's
   totals are brought up to date (a profile written while the program runs
   has them too). */
void calx_gcstats_pass(void);

/* The last pass's figures stay; nothing more is read. */
void calx_gcstats_stop(void);

/* Is `ts` the thread collecting garbage right now?  The collector is
   running and ts is the one thread that can run it: the GIL's holder, or
   on the free-threaded build without a GIL, attached while the others
   are stopped or running beside it (INTERNALS.md says what that costs).
   Relaxed reads of the moment, for a pass's label. */
int calx_gcstats_collecting_in_sigsafe(PyInterpreterState *interp,
                                       const PyThreadState *ts);

/* What a tick saw of the collector in the main thread. */
typedef struct calx_gc_tick {
    int running;    /* the collector was running in that thread */
    int generation; /* being collected (from the counts), or -1 */
    int64_t id;     /* that generation's collections before this one */
    int64_t all;    /* every generation's collections before this one */
    int64_t first;  /* cal_clock_now_ns of the first tick that saw it */
    int64_t last;   /* ... and of this one */
    int64_t ticks;  /* ticks that saw it, this one included */
    int64_t collected, uncollectable; /* the generation's, before it */
} calx_gc_tick;

/* The tick at `now` (cal_clock_now_ns) looks at the collector for thread
   `ts` (the main thread's).  The sampler thread only, which ticks one at a
   time: the ticks that see one collection (its generation and number)
   make one, with its first tick and their count. */
void calx_gcstats_tick_sigsafe(PyInterpreterState *interp, const PyThreadState *ts,
                               int64_t now, calx_gc_tick *out);

/* At the main thread's pass: the collection its cut's tick saw, found at
   (file, line, func), goes into the profile (cal_gc_add_seen), with the
   objects it freed when the statistics tell them exactly. */
void calx_gcstats_seen(const calx_gc_tick *tick, uint32_t file, int32_t line,
                       uint32_t func);

#endif
