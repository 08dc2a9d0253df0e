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
#include "pyinternals.h"

/* Start sampling every `interval_ns` on average, and the GPU poller in
   gpu_mode (CALX_GPU_*, gpu.h).  Takes ownership of the filter.  Caller
   holds the GIL (and is the main thread).  On success return 0; on error
   set an exception and return -1. */
int calx_sampler_start(int64_t interval_ns, int gpu_mode, calx_filter *filter_steal);

/* Stop the sampler thread and take a last sample of every thread.  Caller
   holds the GIL.  Safe to call twice.  leaving: the process is about to end
   without finalising the interpreter (os._exit, exec, a signal), so the
   profiler's threads are told to end but not waited for.  Returns 0, or -1
   with an exception. */
int calx_sampler_stop(int leaving);

/* In a forked child of a profiled process (GIL held): drop the parent's
   profile and start a fresh one with the same settings.  On success return
   0; on error set an exception and return -1. */
int calx_sampler_restart_in_child(void);

/* os.register_at_fork(before=..., after_in_parent=...): the sampler and
   GIL-watcher threads stop before a fork and start again after it in the
   parent (GIL held; the profile goes on), and the signal helper's thread
   with them.  On the main thread
   they start once os.fork() has returned (a pending call).  No thread of
   ours is copied mid-way through a lock, and CPython 3.12+ does not count
   ours when it warns that fork() is called in a multi-threaded process. */
int calx_sampler_fork_before(void);
void calx_sampler_fork_after_parent(void);

/* calx_signals_stop(leaving), never while a fork in another thread stops
   or starts the signal helper (GIL held). */
void calx_sampler_unwatch_signals(int leaving);

/* Switching profiling off and on.  While off, samples only move the
   threads' baselines and allocations are not credited to lines (memory.c);
   wall time, the footprint timeline and the exact totals go on.  Off while
   the file at `path` exists (checked ten times a second by the sampler
   thread, and now; NULL: no file), or as set_paused says last. */
int calx_sampler_set_switch(const char *path);
void calx_sampler_set_paused(int off);
int calx_sampler_paused(void);
/* How long profiling has been off. */
int64_t calx_sampler_paused_ns(void);

/* Move the profile's time origin since_ns back (right after starting). */
void calx_sampler_set_origin(int64_t since_ns);

/* callback(ident) -> list of coroutine chains (lists of (code, line),
   outermost first), one per task the asyncio loop run by thread `ident`
   awaits; the sampler credits that loop's idle waiting to them, evenly.
   NULL: waiting stays where the loop waits.  GIL held. */
void calx_sampler_set_awaiting(PyObject *callback);

/* Call callback(reason) from the sampler thread, with the GIL, every
   interval_ns (0: never) with reason "interval", and whenever the file
   request_path (or NULL) exists with reason "request" (looked for ten times
   a second; the callback removes it).  callback NULL turns it off.  GIL
   held.  Returns 0, or -1 with an exception set. */
int calx_sampler_set_periodic(PyObject *callback, int64_t interval_ns,
                              const char *request_path);

/* Bring the figures that are otherwise computed at the end (wall time,
   memory totals and peak) up to now, for a profile written while the
   program runs.  GIL held. */
void calx_sampler_snapshot(void);

/* Is a profile being collected by this process (not a forked child)? */
int calx_sampler_running(void);

/* Where a thread is, for the memory engine: the innermost profiled line and
   the profiled functions on the stack (once each).  file == func ==
   CAL_PROFILE_NONE when no profiled code is on it. */
typedef struct calx_where {
    uint32_t file, func;
    int32_t line;
    const uint32_t *funcs; /* valid until the next call */
    size_t nfuncs;
} calx_where;

/* Where thread `ts` is.  Caller holds the GIL and is `ts` or has it
   stopped.  0, or -1 on allocation failure. */
int calx_sampler_where(PyThreadState *ts, calx_where *w);

/* The same from frames captured earlier, whose code objects may be gone:
   only code objects the sampler has cached (and so kept alive) are used.
   Caller holds the GIL. */
void calx_sampler_where_cached(const calx_frame *frames, int n, calx_where *w);

/* Nanoseconds since the profile started. */
int64_t calx_sampler_elapsed_ns(void);

/* The profile collected so far (owned by the engine; GIL held). */
cal_profile *calx_sampler_profile(void);
int64_t calx_sampler_dropped(void);

#endif
