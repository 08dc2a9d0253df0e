/*
 * runtime — what the extension's engines need from the process, with no
 * Python in it: the preloaded shim's API and its recursion guard, threads
 * that never run the program's signal handlers, a thread's kernel id, and
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

/* The kernel thread id of a thread just created (0 if unknown). */
int calx_runtime_thread_tid(pthread_t t);

/* Is there an entry by that name (a request or the switch in the run
   directory)?  Its presence is the message; it is never opened, and a
   symbolic link is not followed (a dangling one counts too). */
int calx_runtime_entry_exists(const char *path);

#endif
