/*
 * sampler — the CPU engine: a native sampler thread, the pending-call
 * handshake with the main thread, per-thread CPU clocks, attribution of
 * every sample to a line and a function; and the lifecycle of the
 * profiler's threads (start, stop, forks).  See docs/INTERNALS.md, "CPU
 * time".  The profile it fills, the code table and the switch are the
 * session's (session.h).
 *
 * One engine per process.  The thread registry is protected by the GIL;
 * the handshake with the sampler thread uses atomics and the engine's
 * mutex.
 */
#ifndef CALX_SAMPLER_H
#define CALX_SAMPLER_H

#include <Python.h>

#include "codeinfo.h"

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

/* callback(ident) -> list of coroutine chains (lists of (code, line),
   outermost first), one per task the asyncio loop run by thread `ident`
   awaits; the sampler credits that loop's idle waiting to them, evenly.
   NULL: waiting stays where the loop waits.  GIL held. */
void calx_sampler_set_awaiting(PyObject *callback);

/* Periodic jobs: 0 writes the profile, 1 a memory snapshot, 2 a heap dump. */
#define CALX_PERIODIC_JOBS 3

/* Call callback(reason) from the sampler thread, with the GIL, for job i
   every interval_ns[i] (0: never) with reason "interval" (job 1:
   "snapshot", job 2: "heap"), and whenever the file request_path[i] (or
   NULL) exists with reason "request" ("snapshot-request", "heap-request";
   looked for ten times a second; the callback removes it).  callback NULL turns it off.
   GIL held.  Returns 0, or -1 with an exception set. */
int calx_sampler_set_periodic(PyObject *callback, const int64_t interval_ns[],
                              const char *const request_path[]);

/* Bring the figures that are otherwise computed at the end (wall time,
   memory totals and peak) up to now, for a profile written while the
   program runs.  GIL held. */
void calx_sampler_snapshot(void);

/* Is a profile being collected by this process (not a forked child)? */
int calx_sampler_running(void);

/* Samples dropped so far (GIL held). */
int64_t calx_sampler_dropped(void);
/* Samples of other threads dropped on the free-threaded build because
   their stack changed while it was read (their time goes to the same
   threads' next samples).  GIL (engine lock). */
int64_t calx_sampler_torn(void);

#endif
