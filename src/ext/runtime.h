/*
 * runtime — what the extension's engines need from the process, with no
 * Python in it: the preloaded shim's API and its recursion guard, threads
 * that never run the program's signal handlers (and a forked child's that
 * start on its main thread's CPU), a thread's kernel id, and
 * whether a file of the run directory is there.  See docs/INTERNALS.md,
 * "Source tour".
 *
 * No Python.h here, in this header or in runtime.c: nothing in it needs
 * the GIL or the interpreter, and the GPU poller, which has no Python
 * either, uses it.  Every function may be called from any thread.
 */
#ifndef CALX_RUNTIME_H
#define CALX_RUNTIME_H

#include "calipers_shim.h"

#include <pthread.h>

/* The preloaded shim's API (calipers_shim.h), or NULL when the shim is not
   loaded or is of another ABI.  Looked up once, at the first call. */
const cal_shim_api *calx_runtime_shim(void);

/* Without preload: load the shim at `path` (dlopen, local, never
   unloaded) and make it the one calx_runtime_shim() returns.  Returns its
   API (the preloaded one if there is one), or NULL with *error saying why.
   With the GIL held. */
const cal_shim_api *calx_runtime_shim_load(const char *path, const char **error);

/* Was the shim loaded by calx_runtime_shim_load (so memory needs its GOT
   redirection) rather than preloaded? */
int calx_runtime_shim_in_process(void);

/* The shim's recursion guard for this thread: the profiler's own work must
   run inside it, so that what it allocates is not counted as the
   program's.  enter returns the previous state, for leave.  No-ops without
   the shim. */
int calx_runtime_guard_enter(void);
void calx_runtime_guard_leave(int previous);

/* The same from a signal handler: only a shim already found is used (the
   first lookup, dlsym, is not async-signal-safe; the engine makes it
   before any handler of ours can run).  The guard is a byte of the
   shim's initial-exec TLS.  Async-signal-safe. */
int calx_runtime_guard_enter_sigsafe(void);
void calx_runtime_guard_leave_sigsafe(int previous);

/* Start a thread running fn(arg) with every signal blocked, so the kernel
   never picks it to run one of the program's handlers (the profiler's
   threads all are).  Returns pthread_create's status. */
int calx_runtime_thread_start_unsignalled(pthread_t *t, void *(*fn)(void *), void *arg);

/* A forked child's own threads start on the CPU its main thread is on,
 * and stay there until its first tick.
 *
 * Right after fork() every page the child writes is copied (copy-on-write),
 * a few hundred for a child that profiles itself, and while another thread
 * of the process runs on another CPU each copy also stops that CPU to
 * flush its TLB.  The sampler and signal-helper threads started in the
 * child made its start and exit about a third dearer that way
 * (bench/fork_cost.py; PERFORMANCE, "Fork"); on the main thread's CPU
 * they only run when it does not.  The pin ends at the child's first tick,
 * before the sampler reads anything: from then on they run where the
 * scheduler puts them, with the main thread's affinity.
 *
 * begin: in the child's restart, GIL held, before its threads start;
 * thread_start_near: as thread_start_unsignalled, pinned while the pin
 * lasts; end: gives every thread started pinned the main thread's
 * affinity, from the sampler thread at its tick or when the threads are
 * stopped, before they are joined; a no-op once ended, or never begun. */
void calx_runtime_pin_begin(void);
int calx_runtime_thread_start_near(pthread_t *t, void *(*fn)(void *), void *arg);
void calx_runtime_pin_end(void);

/* The kernel thread id of a thread just created (0 if unknown). */
int calx_runtime_thread_tid(pthread_t t);

/* Is there an entry by that name (a request or the switch in the run
   directory)?  Its presence is the message; it is never opened, and a
   symbolic link is not followed (a dangling one counts too). */
int calx_runtime_entry_exists(const char *path);

#endif
