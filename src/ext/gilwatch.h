/*
 * gilwatch — how each thread other than the main one splits its CPU time
 * between bytecode and native code, watched from the sampler thread every
 * millisecond, by a thread of its own, without taking the GIL.
 *
 * Between two looks at a thread, the CPU it used (its kernel CPU clock) is
 * native code if it held the GIL at neither look: a thread cannot run
 * bytecode without the GIL, and a thread that runs while another holds it
 * is in C.  Held at either, it is bytecode, unless it held the GIL at both
 * and never looked at its eval breaker in between (3.13+: each look probes
 * the holder, calx_probe_holder), or the collector ran: C code that keeps
 * the GIL (json.loads of a big document).  Looking 1000 times a second costs one
 * clock_gettime() per thread per look, on the watcher thread, which sleeps
 * while there is no thread to watch (single-threaded programs pay nothing).
 * It is a thread of its own so that it keeps looking while the sampler
 * thread waits for the GIL.
 *
 * On the free-threaded build (no GIL, no holder) it only keeps each
 * thread's last CPU reading, for the stretch a thread runs after its last
 * sample before it ends (calx_gilwatch_last).
 *
 * Own lock; set_threads and take are called from sampling passes under the
 * GIL.  Reads no thread state directly: the holder's thread id is read
 * through process_vm_readv (cal_vmread), which fails instead of faulting
 * if the holder is deleting it, and compared with each watched thread's;
 * the probe sets a bit in the holder's eval breaker only under the
 * runtime's thread-list lock, while the state is in the interpreter's list.
 */
#ifndef CALX_GILWATCH_H
#define CALX_GILWATCH_H

#include <Python.h>

#include <stddef.h>
#include <time.h>

/* Replace the set of watched threads; what was observed of threads that
   stay is kept (a thread is its clock: a C thread calling into Python gets
   a new thread state each time).  Returns 0, or -1 if memory ran out (the set is
   unchanged). */
int calx_gilwatch_set_threads(const void *const *ts, const unsigned long *idents,
                              const clockid_t *clocks, size_t n);

/* Number of watched threads (a hint, read without the lock). */
size_t calx_gilwatch_count(void);

/* Start and stop watching (GIL held).  The watcher thread itself starts
   only once there is a thread to watch (calx_gilwatch_set_threads): a
   process that never has more than its main thread never has one.  start
   returns 0 or an errno value.  Stopping in two steps lets the sampler ask all of the
   profiler's threads to end before it waits for any (one wake-up per fork, not one per
   thread): ask returns 1 if there is a thread to join, and join (GIL not
   needed) waits for it.  Start and stop are never called concurrently
   (the sampler's thread transitions are serialised). */
int calx_gilwatch_start(PyInterpreterState *interp);
int calx_gilwatch_stop_ask(void);
void calx_gilwatch_stop_join(void);
/* Instead of join, when the process is leaving: let it end on its own. */
void calx_gilwatch_stop_detach(void);
void calx_gilwatch_stop(void);

/* The share of the CPU time that the thread of `clock` used in native code
   since the last successful call for it (without the GIL; and what it used
   holding the GIL, if its last stretch with it ran C code), and the share
   it used collecting garbage (looks that found it holding the GIL while
   the collector ran: the CPU since the previous look is the collector's).
   Returns 1 and sets *native_share and *gc_share once at least min_ns of
   its CPU time has been watched; until then the last split, if any (and 0
   if none). */
int calx_gilwatch_take(clockid_t clock, int64_t min_ns, double *native_share,
                       double *gc_share);

/* The last reading of a watched thread's CPU clock, taken at most a look
   (1 ms) before it ended if it is gone, and when that clock was last seen
   to advance.  Returns 1, or 0 if there is no reading. */
int calx_gilwatch_last(clockid_t clock, int64_t *cpu_ns, int64_t *when_ns);

/* 3.13+, in a signal handler of the thread of ts, which holds the GIL,
   with its CPU clock read there: has it run C code since the watcher's
   last probe of it (1: its "signals pending" bit is still set), or can
   that not be told yet (0)?  It may have looked at its eval breaker and
   then begun a C call: the handler probes it too (sets the bit), and the
   watcher's next probe says whether it looked since
   (calx_gilwatch_stuck_after).  A bit set by a probe so recent that the
   thread has not run since says nothing either (the probe and a signal
   can both come as the thread is put back on a CPU: 8% of the ticks of a
   thread in a Python loop read C).  -1 where there is no probe.  Before
   3.13 nothing is probed: 1 if another thread's request that it let the
   GIL go stands, the watcher found it standing and the thread holding in
   the same stretch (calx_gil_drop_asked_sigsafe), and the thread has run
   since; else -1. */
int calx_gilwatch_tick_probe_sigsafe(PyThreadState *ts, int64_t cpu);

/* For a tick of the thread of `clock` at its CPU clock cpu that could
   not tell (above): the watcher's first probe of it after that, among
   those kept, found its bit still set (1: no look at its eval breaker
   since the tick: it ran C code), or clear (0); -1 if there is none
   (yet, or any more). */
int calx_gilwatch_stuck_after(clockid_t clock, int64_t cpu);

/* The watcher thread's kernel thread id (0 before it runs). */
int calx_gilwatch_tid(void);

/* Forget everything (after fork, in the child). */
void calx_gilwatch_reset(void);

#endif
