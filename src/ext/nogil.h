/*
 * nogil — what stands in for the GIL on the free-threaded build (3.13t,
 * 3.14t), where holding "the GIL" (an attached thread state) no longer
 * keeps other threads out.  The engines' state that the GIL protects on
 * the default build (the profile, the code table, the sampler's thread
 * registry, the memory engine's crediting) is protected there by one
 * recursive mutex, the engine lock.  On the default build every function
 * here is a no-op: the GIL already does the job.
 *
 * The rule that keeps it from deadlocking with CPython's stop-the-world
 * pauses (the GC's): no thread ever blocks on the engine lock while its
 * thread state is attached.  The allocator hooks only try it (and queue
 * their event when it is taken); everyone else lets go of the thread state
 * while waiting (calx_nogil_lock).  Whoever holds it runs no bytecode.
 */
#ifndef CALX_NOGIL_H
#define CALX_NOGIL_H

#include <Python.h>

/* 1 on the free-threaded build (Py_GIL_DISABLED), 0 on the default one. */
int calx_nogil_build(void);

/* The calling thread's attached thread state (free-threaded build), or
   NULL (also always on the default build). */
PyThreadState *calx_nogil_self(void);

/* Take the engine lock, detached while waiting if the caller has an
   attached thread state.  Recursive.  A no-op on the default build. */
void calx_nogil_lock(void);

/* Take the engine lock if no other thread holds it: 1 (taken, or the
   default build), 0 (busy).  Never waits: callable from allocator hooks. */
int calx_nogil_trylock(void);

void calx_nogil_unlock(void);

/* In a forked child: the lock as new (another thread may have held it at
   the fork).  No allocation. */
void calx_nogil_after_fork_child(void);

#endif
