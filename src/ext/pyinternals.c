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
 *
 * The sampler thread also peeks at the main thread's innermost frames
 * without the GIL (calx_peek_frames_sigsafe): it copies them with
 * process_vm_readv (cal_vmread), which fails instead of faulting on a frame
 * popped and unmapped meanwhile, takes every pointer it reads as an
 * untrusted number (a frame can be overwritten while it is read), and
 * compares what it read only as addresses until the main thread's own walk
 * finds the same frames still on its stack.
 */
#define Py_BUILD_CORE 1
#include <Python.h>

#include "pyinternals.h"
#include "cal_vmread.h"

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

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The frame chain, one set of helpers per version: the innermost frame,
   the next one out, its code, whether the walk skips it, and the line of
   an instruction (-1 if `at` is not one of code's instructions). */
#if PY_VERSION_HEX >= 0x030B0000
typedef _PyInterpreterFrame frame_t;
#define FRAME_LOCALS localsplus

static int line_at(PyCodeObject *code, intptr_t at)
{
    intptr_t lasti = (const _Py_CODEUNIT *)at - _PyCode_CODE(code);
    if (lasti < 0 || lasti >= Py_SIZE(code))
        return -1;
    return PyCode_Addr2Line(code, (int)lasti * (int)sizeof(_Py_CODEUNIT));
}
#if PY_VERSION_HEX >= 0x030D0000
#define INSTR(f) ((intptr_t)(f)->instr_ptr)
#define CODE_OF(f) ((f)->f_executable)
static frame_t *first_frame(const PyThreadState *ts) { return ts->current_frame; }
static int skipped(frame_t *f)
{
    /* incomplete includes FRAME_OWNED_BY_CSTACK */
    return _PyFrame_IsIncomplete(f) || !f->f_executable || !PyCode_Check(f->f_executable);
}
#else
#define INSTR(f) ((intptr_t)(f)->prev_instr)
#define CODE_OF(f) ((f)->f_code)
static frame_t *first_frame(const PyThreadState *ts)
{
    return ts->cframe ? ts->cframe->current_frame : NULL;
}
static int skipped(frame_t *f)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (f->owner == FRAME_OWNED_BY_CSTACK)
        return 1;
#endif
    return _PyFrame_IsIncomplete(f);
}
#endif
static frame_t *next_frame(frame_t *f) { return f->previous; }
static PyCodeObject *code_of(frame_t *f) { return (PyCodeObject *)CODE_OF(f); }
static int live_line(frame_t *f)
{
    return PyCode_Addr2Line(code_of(f), _PyInterpreterFrame_LASTI(f) * (int)sizeof(_Py_CODEUNIT));
}
#else
typedef PyFrameObject frame_t;
#define INSTR(f) ((intptr_t)(f)->f_lasti)
#define CODE_OF(f) ((f)->f_code)
#define FRAME_LOCALS f_localsplus
#if PY_VERSION_HEX >= 0x030A0000
#define LASTI_UNIT 2 /* 3.10 counts f_lasti in code units, 3.9 in bytes */
#else
#define LASTI_UNIT 1
#endif
static int line_at(PyCodeObject *code, intptr_t at)
{
    if (at < 0 || at * LASTI_UNIT >= PyBytes_GET_SIZE(code->co_code))
        return -1;
    return PyCode_Addr2Line(code, (int)(at * LASTI_UNIT));
}
static frame_t *first_frame(const PyThreadState *ts) { return ts->frame; }
static int skipped(frame_t *f) { (void)f; return 0; }
static frame_t *next_frame(frame_t *f) { return f->f_back; }
static PyCodeObject *code_of(frame_t *f) { return f->f_code; }
static int live_line(frame_t *f) { return PyFrame_GetLineNumber(f); }
#endif

/* Where `f`, a live frame, was at the peek: its index there, or -1 if the
   peek did not see it.  A frame's address can be reused by a later call,
   so its code and the frames out from it must match the peek too. */
static int peeked_at(frame_t *f, const calx_peek *pk)
{
    for (int i = 0; i < pk->n; i++) {
        if (pk->f[i].frame != (const void *)f)
            continue;
        frame_t *g = f;
        for (int k = i; k < pk->n && g; k++, g = next_frame(g))
            if (pk->f[k].frame != (const void *)g || pk->f[k].code != (const void *)CODE_OF(g))
                return -1;
        return i;
    }
    return -1;
}

int calx_thread_frames(PyThreadState *ts, const calx_peek *at, calx_frame *out, int max)
{
    frame_t *f = first_frame(ts);
    int i = -1; /* the index in the peek of the frame f, or -1 */
    if (at && at->n > 0) {
        /* Frames called since the peek are not part of its sample: start at
           the innermost frame that it saw and that is still there. */
        for (frame_t *g = f; g; g = next_frame(g)) {
            if ((i = peeked_at(g, at)) >= 0) {
                f = g;
                break;
            }
        }
    }
    int n = 0;
    for (; f && n < max; f = next_frame(f), i = i >= 0 && i + 1 < at->n ? i + 1 : -1) {
        if (skipped(f))
            continue;
        PyCodeObject *code = code_of(f);
        int line = i >= 0 ? line_at(code, at->f[i].at) : -1;
        out[n].code = code;
        out[n].line = line >= 0 ? line : live_line(f);
        n++;
    }
    return n;
}

static int peek_off; /* process_vm_readv is not allowed here */
static cal_vmread peek_window; /* the sampler thread's only */

void calx_peek_frames_sigsafe(const PyThreadState *ts, calx_peek *out)
{
    out->n = 0;
    if (!ts || __atomic_load_n(&peek_off, __ATOMIC_RELAXED))
        return;
    int saved = errno;
    cal_vmread *w = &peek_window;
    cal_vmread_reset_sigsafe(w, getpid());
    /* The thread state outlives the thread's frames; its fields are read
       as they are. */
#if PY_VERSION_HEX >= 0x030D0000
    frame_t *f = __atomic_load_n(&ts->current_frame, __ATOMIC_RELAXED);
    int rc = 0;
#elif PY_VERSION_HEX >= 0x030B0000
    _PyCFrame *cf = __atomic_load_n(&ts->cframe, __ATOMIC_RELAXED);
    frame_t *f = NULL;
    int rc = cf ? cal_vmread_sigsafe(w, &cf->current_frame, &f, sizeof(f)) : -1;
#else
    frame_t *f = __atomic_load_n(&ts->frame, __ATOMIC_RELAXED);
    int rc = 0;
#endif
    for (int k = 0; rc == 0 && f && k < CALX_PEEK_FRAMES; k++) {
        union {
            frame_t fr;
            char raw[sizeof(frame_t)];
        } u;
        if ((rc = cal_vmread_sigsafe(w, f, &u, offsetof(frame_t, FRAME_LOCALS))) != 0)
            break;
        out->f[k].frame = f;
        out->f[k].code = CODE_OF(&u.fr);
        out->f[k].at = INSTR(&u.fr);
        out->n = k + 1;
        f = next_frame(&u.fr);
    }
    if (rc != 0 && (errno == ENOSYS || errno == EPERM))
        __atomic_store_n(&peek_off, 1, __ATOMIC_RELAXED);
    errno = saved;
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

int calx_thread_ident_sigsafe(struct cal_vmread *w, const PyThreadState *ts,
                              unsigned long *ident)
{
    unsigned long id;
    if (cal_vmread_sigsafe(w, &ts->thread_id, &id, sizeof(id)) != 0)
        return -1;
    *ident = id;
    return 0;
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
