/*
 * pyinternals — everything that reads CPython's private structures, one
 * implementation per supported version (3.9 to 3.13), selected at compile
 * time against that version's own internal headers.
 *
 * Frame walking never allocates, never creates frame objects, never calls
 * back into Python: PyThreadState_GetFrame()/PyFrame_GetBack() would build
 * frame objects from 3.11 on, which can run the garbage collector.
 */
#ifndef CALX_PYINTERNALS_H
#define CALX_PYINTERNALS_H

#include <Python.h>

typedef struct calx_frame {
    PyCodeObject *code; /* borrowed */
    int line;
} calx_frame;

/* Fill out[0..max) with the Python frames of `ts`, innermost first; skips
   incomplete frames and C-stack shims.  Returns the number of frames stored
   (the walk stops at `max`).  Caller holds the GIL. */
int calx_thread_frames(PyThreadState *ts, calx_frame *out, int max);

/* Hold the runtime's thread-list lock (HEAD_LOCK) while iterating
   PyInterpreterState_ThreadHead()/PyThreadState_Next(): thread states can be
   created and deleted without the GIL (PyGILState_Ensure from a foreign
   thread).  Nothing called while it is held may create or delete a thread
   state.  Caller holds the GIL. */
void calx_threads_lock(void);
void calx_threads_unlock(void);

/* The thread state holding the GIL right now, or NULL if it is free.  Reads
   two words of the GIL's own state; the answer may be stale by the time the
   caller looks at it.  Callable without the GIL; async-signal-safe. */
PyThreadState *calx_gil_holder_sigsafe(PyInterpreterState *interp);

/* Make the main thread notice a call queued with Py_AddPendingCall() at its
   next bytecode boundary.  From 3.9 to 3.12 Py_AddPendingCall(), called from a
   thread that is not the main thread, leaves the eval breaker unset (it is
   recomputed for the calling thread), so the call would wait for the next
   GIL hand-off; we set it.  3.13 signals the main thread itself.
   Callable without the GIL; async-signal-safe. */
void calx_poke_main_thread_sigsafe(void);

/* This thread's thread state if it holds the GIL, else NULL.  Safe without
   the GIL and inside an allocator hook. */
PyThreadState *calx_current_if_gil_held(void);

/* Bytes of pymalloc arenas allocated right now (0 without pymalloc).
   Caller holds the GIL. */
int64_t calx_pymalloc_arena_bytes(void);

#endif
