/*
 * nogil — see nogil.h.  The engine lock of the free-threaded build.
 *
 * Safety class: the lock functions are callable from any thread, attached
 * or not, and trylock from inside an allocator hook (pthread_mutex_trylock
 * neither allocates nor waits).  Nothing here runs Python code.
 */
#include "nogil.h"

#include <pthread.h>

#ifdef Py_GIL_DISABLED

/* The engine lock.  Recursive: a pass that holds it may reach code that
   takes it again (the memory engine's crediting of the pass's own work).
   Protected by itself; re-initialised in a forked child. */
static pthread_mutex_t engine_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

int calx_nogil_build(void) { return 1; }

PyThreadState *calx_nogil_self(void) { return PyThreadState_GetUnchecked(); }

void calx_nogil_lock(void)
{
    if (pthread_mutex_trylock(&engine_mu) == 0)
        return;
    /* Waiting attached would stall a stop-the-world pause that the holder
       may be waiting for (nogil.h): let go of the thread state while
       waiting.  A thread without one (a native thread) just waits. */
    if (PyThreadState_GetUnchecked() != NULL) {
        Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&engine_mu);
        Py_END_ALLOW_THREADS
    } else {
        pthread_mutex_lock(&engine_mu);
    }
}

int calx_nogil_trylock(void) { return pthread_mutex_trylock(&engine_mu) == 0; }

void calx_nogil_unlock(void) { pthread_mutex_unlock(&engine_mu); }

void calx_nogil_after_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    engine_mu = fresh;
}

#else /* the default build: the GIL protects the engines */

int calx_nogil_build(void) { return 0; }
PyThreadState *calx_nogil_self(void) { return NULL; }
void calx_nogil_lock(void) {}
int calx_nogil_trylock(void) { return 1; }
void calx_nogil_unlock(void) {}
void calx_nogil_after_fork_child(void) {}

#endif
