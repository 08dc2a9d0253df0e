/*
 * pyinternals — see pyinternals.h.  This is the only file compiled with
 * Py_BUILD_CORE: it includes the internal headers shipped with each CPython
 * (include/pythonX.Y/internal), so struct layouts come from the interpreter
 * we are built against, never from guesses.
 *
 * Frame chains per version:
 *   3.9, 3.10  tstate->frame (PyFrameObject), f_back, PyFrame_GetLineNumber
 *   3.11, 3.12 tstate->cframe->current_frame (_PyInterpreterFrame), previous
 *   3.13       tstate->current_frame, f_executable may not be a code object
 */
#define Py_BUILD_CORE 1
#include <Python.h>

#include "pyinternals.h"

#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#else
#include <frameobject.h>
#endif
#if PY_VERSION_HEX < 0x030D0000
#include "internal/pycore_interp.h"
#endif
#include "internal/pycore_runtime.h"
#include "internal/pycore_gil.h"
#if PY_VERSION_HEX >= 0x030C0000
#include "internal/pycore_pystate.h"
#include "internal/pycore_obmalloc.h"   /* _PyObject_DebugMallocStats */
#elif PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_pymem.h"      /* _PyObject_DebugMallocStats */
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if PY_VERSION_HEX >= 0x030B0000
static int frame_line(_PyInterpreterFrame *f, PyCodeObject *code)
{
    int addr = _PyInterpreterFrame_LASTI(f) * (int)sizeof(_Py_CODEUNIT);
    return PyCode_Addr2Line(code, addr);
}
#endif

int calx_thread_frames(PyThreadState *ts, calx_frame *out, int max)
{
    int n = 0;
#if PY_VERSION_HEX >= 0x030D0000
    for (_PyInterpreterFrame *f = ts->current_frame; f && n < max; f = f->previous) {
        if (_PyFrame_IsIncomplete(f)) /* includes FRAME_OWNED_BY_CSTACK */
            continue;
        PyObject *exe = f->f_executable;
        if (!exe || !PyCode_Check(exe))
            continue;
        out[n].code = (PyCodeObject *)exe;
        out[n].line = frame_line(f, (PyCodeObject *)exe);
        n++;
    }
#elif PY_VERSION_HEX >= 0x030B0000
    _PyCFrame *cf = ts->cframe;
    for (_PyInterpreterFrame *f = cf ? cf->current_frame : NULL; f && n < max;
         f = f->previous) {
#if PY_VERSION_HEX >= 0x030C0000
        if (f->owner == FRAME_OWNED_BY_CSTACK)
            continue;
#endif
        if (_PyFrame_IsIncomplete(f))
            continue;
        out[n].code = f->f_code;
        out[n].line = frame_line(f, f->f_code);
        n++;
    }
#else
    for (PyFrameObject *f = ts->frame; f && n < max; f = f->f_back) {
        out[n].code = f->f_code;
        out[n].line = PyFrame_GetLineNumber(f);
        n++;
    }
#endif
    return n;
}

void calx_poke_main_thread_sigsafe(void)
{
#if PY_VERSION_HEX < 0x030D0000
    PyInterpreterState *interp = PyInterpreterState_Main();
    _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
#endif
}

/* 3.13's HEAD_LOCK calls a function libpython does not export; the public
   PyMutex_Lock may release the GIL while it waits, which is harmless here
   (nothing has been read yet). */
void calx_threads_lock(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyMutex_Lock(&_PyRuntime.interpreters.mutex);
#elif PY_VERSION_HEX >= 0x030C0000
    HEAD_LOCK(&_PyRuntime);
#else
    PyThread_acquire_lock(_PyRuntime.interpreters.mutex, WAIT_LOCK);
#endif
}

void calx_threads_unlock(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyMutex_Unlock(&_PyRuntime.interpreters.mutex);
#elif PY_VERSION_HEX >= 0x030C0000
    HEAD_UNLOCK(&_PyRuntime);
#else
    PyThread_release_lock(_PyRuntime.interpreters.mutex);
#endif
}

PyThreadState *calx_gil_holder_sigsafe(PyInterpreterState *interp)
{
#if PY_VERSION_HEX >= 0x030D0000
    struct _gil_runtime_state *gil = interp->ceval.gil;
    if (!gil || !__atomic_load_n(&gil->locked, __ATOMIC_RELAXED))
        return NULL;
    return __atomic_load_n(&gil->last_holder, __ATOMIC_RELAXED);
#else
#if PY_VERSION_HEX >= 0x030C0000
    struct _gil_runtime_state *gil = interp->ceval.gil;
#else
    (void)interp;
    struct _gil_runtime_state *gil = &_PyRuntime.ceval.gil;
#endif
    if (!gil || !_Py_atomic_load_relaxed(&gil->locked))
        return NULL;
    return (PyThreadState *)_Py_atomic_load_relaxed(&gil->last_holder);
#endif
}

PyThreadState *calx_current_if_gil_held(void)
{
    PyThreadState *mine = PyGILState_GetThisThreadState();
    if (!mine)
        return NULL;
    /* 3.9-3.11: the runtime's current thread state, which only the GIL's
       holder sets (to itself) and clears before it lets go.  3.12+: this
       thread's attached thread state, NULL while it is detached. */
#if PY_VERSION_HEX >= 0x030D0000
    PyThreadState *cur = PyThreadState_GetUnchecked();
#else
    PyThreadState *cur = _PyThreadState_UncheckedGet();
#endif
    return cur == mine ? mine : NULL;
}

int64_t calx_pymalloc_arena_bytes(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (!out)
        return 0;
    int have = _PyObject_DebugMallocStats(out);
    fclose(out);
    int64_t bytes = 0;
    /* "N arenas * M bytes/arena = X,XXX,XXX" (0 when pymalloc is off). */
    const char *at = have && text ? strstr(text, " bytes/arena") : NULL;
    if (at && (at = strchr(at, '='))) {
        for (at++; *at; at++) {
            if (*at >= '0' && *at <= '9')
                bytes = bytes * 10 + (*at - '0');
            else if (*at != ',' && *at != ' ')
                break;
        }
    }
    free(text);
    return bytes;
}
