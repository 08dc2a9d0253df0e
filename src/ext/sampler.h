/*
 * sampler — the CPU engine: a native sampler thread, the pending-call
 * handshake with the main thread, per-thread CPU clocks, attribution of
 * every sample to a line and a function.  See docs/INTERNALS.md, "CPU time".
 *
 * One engine per process.  The profile, the code cache and the thread
 * registry are protected by the GIL; the handshake with the sampler thread
 * uses atomics and the engine's mutex.
 */
#ifndef CALX_SAMPLER_H
#define CALX_SAMPLER_H

#include <Python.h>

#include "cal_profile.h"
#include "codeinfo.h"

/* Start sampling every `interval_ns` on average.  Takes ownership of the
   filter.  Caller holds the GIL (and is the main thread).  On success return
   0; on error set an exception and return -1. */
int calx_sampler_start(int64_t interval_ns, calx_filter *filter_steal);

/* Stop the sampler thread and take a last sample of every thread.  Caller
   holds the GIL.  Safe to call twice.  Returns 0, or -1 with an exception. */
int calx_sampler_stop(void);

/* Is a profile being collected by this process (not a forked child)? */
int calx_sampler_running(void);

/* The profile collected so far (owned by the engine; GIL held). */
cal_profile *calx_sampler_profile(void);
int64_t calx_sampler_dropped(void);

#endif
