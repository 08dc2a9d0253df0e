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
 *   3.14       f_executable is a tagged _PyStackRef (the low bits say how it
 *              is counted; the pointer is the rest); frames owned by the
 *              interpreter (entry frames) and by the C stack are skipped;
 *              the free-threaded build runs per-thread copies of the
 *              bytecode (instr_ptr points into the frame's copy)
 *
 * From 3.13 on the runtime publishes _Py_DebugOffsets (the structure
 * out-of-process profilers read): at start we check its cookie, its
 * version and that every offset the peek and the walk use equals the one
 * we were compiled with, and read no frame if any differs (an extension
 * built against one release's headers, loaded by another whose layout
 * moved).  The peek, the one reader that works like an out-of-process
 * profiler, takes its offsets from it.
 *
 * An interpreter newer than the last one this file knows
 * (CALX_NEWEST_KNOWN_MINOR) is compiled without any internal header: the
 * extension builds and loads, frames are not read (time and memory are
 * not credited to lines), and calx_limits() says so.
 *
 * The sampler thread also peeks at the main thread's innermost frames
 * without the GIL (calx_peek_frames_sigsafe): it copies them with
 * process_vm_readv (cal_vmread), which fails instead of faulting on a frame
 * popped and unmapped meanwhile, takes every pointer it reads as an
 * untrusted number (a frame can be overwritten while it is read), and
 * compares what it read only as addresses until the main thread's own walk
 * finds the same frames still on its stack.
 */
/* The newest CPython whose layouts this file knows; a build option can
   lower it to test what a newer interpreter gets (meson -Dnewest_known_python). */
#ifndef CALX_NEWEST_KNOWN_MINOR
#define CALX_NEWEST_KNOWN_MINOR 14
#endif
#include <patchlevel.h>
#if PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION <= CALX_NEWEST_KNOWN_MINOR
#define CALX_KNOWN_LAYOUT 1
#define Py_BUILD_CORE 1
#endif
#include <Python.h>

#include "pyinternals.h"
#include "cal_vmread.h"

#ifdef CALX_KNOWN_LAYOUT
/* The interpreter's own headers are not written for -Wextra (3.14's have
   inline functions with unused parameters): their warnings are not ours. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_frame.h" /* the generators' frame states */
#include "internal/pycore_interpframe.h"
#include "internal/pycore_stackref.h"
#elif PY_VERSION_HEX >= 0x030B0000
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
#include "internal/pycore_obmalloc.h" /* _PyObject_DebugMallocStats */
#elif PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_pymem.h" /* _PyObject_DebugMallocStats */
#endif
#if PY_VERSION_HEX >= 0x030C0000
#include "internal/pycore_ceval.h" /* _PyEval_AddPendingCall, _Py_set_eval_breaker_bit */
#endif
#pragma GCC diagnostic pop
#endif /* CALX_KNOWN_LAYOUT */

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set once at import (calx_layout_check), read-only after: why frames are
   not read, or NULL when they are. */
static const char *layout_problem;

#ifdef CALX_KNOWN_LAYOUT

/* The frame chain, one set of helpers per version: the innermost frame,
   the next one out, its code, whether the walk skips it, and the offset of
   an instruction (NO_OFFSET if `at` is not one of the frame's). */
#define NO_OFFSET INT_MIN
#if PY_VERSION_HEX >= 0x030B0000
typedef _PyInterpreterFrame frame_t;
#define FRAME_LOCALS localsplus

#if PY_VERSION_HEX >= 0x030E0000
/* A stack reference's pointer, whatever its tag (3.14: the low bits count
   how it is owned; objects are at least 8-byte aligned). */
#define CODE_OF(f) ((PyObject *)((f)->f_executable.bits & ~(uintptr_t)7))
#elif PY_VERSION_HEX >= 0x030D0000
#define CODE_OF(f) ((PyObject *)(f)->f_executable)
#else
#define CODE_OF(f) ((PyObject *)(f)->f_code)
#endif
/* The bytecode `instr_ptr` points into: the code's own, or on the
   free-threaded build this frame's thread-local copy (3.14). */
static const _Py_CODEUNIT *bytecode_of(frame_t *f)
{
#if PY_VERSION_HEX >= 0x030E0000
    return _PyFrame_GetBytecode(f);
#else
    return _PyCode_CODE((PyCodeObject *)CODE_OF(f));
#endif
}

static PyCodeObject *code_of(frame_t *f) { return (PyCodeObject *)CODE_OF(f); }
/* The offset of instruction `at` in code's own bytecode (NO_OFFSET if it
   is not one of its instructions: on the free-threaded build a thread's
   copy of the bytecode is another array). */
static int code_offset(PyCodeObject *code, intptr_t at)
{
    intptr_t lasti = (const _Py_CODEUNIT *)at - _PyCode_CODE(code);
    if (lasti < 0 || lasti >= Py_SIZE(code))
        return NO_OFFSET;
    return (int)lasti * (int)sizeof(_Py_CODEUNIT);
}
/* Whether a frame at this offset has started (_PyFrame_IsIncomplete's
   test, for a frame no longer there: a generator's frame always has). */
static int started_at(PyCodeObject *code, int offset)
{
    return offset / (int)sizeof(_Py_CODEUNIT) >= code->_co_firsttraceable ||
           (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR));
}
static int offset_at(frame_t *f, intptr_t at)
{
    PyCodeObject *code = code_of(f);
    intptr_t lasti = (const _Py_CODEUNIT *)at - bytecode_of(f);
    if (lasti < 0 || lasti >= Py_SIZE(code))
        return NO_OFFSET;
    return (int)lasti * (int)sizeof(_Py_CODEUNIT);
}
#if PY_VERSION_HEX >= 0x030D0000
#define INSTR(f) ((intptr_t)(f)->instr_ptr)
static frame_t *first_frame(const PyThreadState *ts) { return ts->current_frame; }
static int skipped(frame_t *f)
{
    /* Entry frames (3.14: owned by the interpreter) and shims on the C
       stack carry no code of the program; neither does a frame whose
       executable is not a code object (3.13's shims).  Only then is it
       safe to ask whether the frame has started. */
#if PY_VERSION_HEX >= 0x030E0000
    if (f->owner >= FRAME_OWNED_BY_INTERPRETER)
        return 1;
#else
    if (f->owner >= FRAME_OWNED_BY_CSTACK)
        return 1;
#endif
    PyObject *exe = CODE_OF(f);
    return !exe || !PyCode_Check(exe) || _PyFrame_IsIncomplete(f);
}
#else
#define INSTR(f) ((intptr_t)(f)->prev_instr)
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
static int live_offset(frame_t *f)
{
    return _PyInterpreterFrame_LASTI(f) * (int)sizeof(_Py_CODEUNIT);
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
static int code_offset(PyCodeObject *code, intptr_t at)
{
    if (at < 0 || at * LASTI_UNIT >= PyBytes_GET_SIZE(code->co_code))
        return NO_OFFSET;
    return (int)(at * LASTI_UNIT);
}
static int started_at(PyCodeObject *code, int offset)
{
    (void)code, (void)offset;
    return 1; /* f_lasti is -1 before the first instruction: not an offset */
}
static int offset_at(frame_t *f, intptr_t at) { return code_offset(f->f_code, at); }
static frame_t *first_frame(const PyThreadState *ts) { return ts->frame; }
static int skipped(frame_t *f)
{
    (void)f;
    return 0;
}
static frame_t *next_frame(frame_t *f) { return f->f_back; }
static PyCodeObject *code_of(frame_t *f) { return f->f_code; }
/* f_lasti before the first instruction is -1: Addr2Line gives the first
   line for any offset before 0, as PyFrame_GetLineNumber does. */
static int live_offset(frame_t *f) { return f->f_lasti * LASTI_UNIT; }
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
            if (pk->f[k].frame != (const void *)g ||
                pk->f[k].code != (const void *)CODE_OF(g))
                return -1;
        return i;
    }
    return -1;
}

/* The frames the peek saw inside its innermost live one, at[0..upto),
   into out (at most max): the thread has left them since (returned, or a
   generator suspended), but the tick found it there.  Only if every one
   has a code object that `known` says is alive and an instruction inside
   that code's bytecode (else none: a torn or freed frame); entry frames,
   shims and frames not yet started are left out, as the walk leaves them
   out. */
static int left_frames(const calx_peek *at, int upto, int (*known)(const void *code),
                       calx_frame *out, int max)
{
    if (!known || upto > max)
        return 0;
    for (int k = 0; k < upto; k++)
        if (!at->f[k].shim &&
            (!known(at->f[k].code) || !PyCode_Check((PyObject *)at->f[k].code) ||
             code_offset((PyCodeObject *)at->f[k].code, at->f[k].at) == NO_OFFSET))
            return 0;
    int n = 0;
    for (int k = 0; k < upto; k++) {
        if (at->f[k].shim)
            continue;
        PyCodeObject *code = (PyCodeObject *)at->f[k].code;
        int offset = code_offset(code, at->f[k].at);
        if (!started_at(code, offset))
            continue;
        out[n].code = code;
        out[n].offset = offset;
        out[n].line = CALX_LINE_UNRESOLVED;
        n++;
    }
    return n;
}

int calx_thread_frames(PyThreadState *ts, const calx_peek *at,
                       int (*known)(const void *code), calx_frame *out, int max)
{
    if (layout_problem)
        return 0;
    frame_t *f = first_frame(ts);
    int i = -1; /* the index in the peek of the frame f, or -1 */
    int n = 0;
    if (at && at->n > 0) {
        /* Frames called since the peek are not part of its sample: start at
           the innermost frame that it saw and that is still there. */
        for (frame_t *g = f; g; g = next_frame(g)) {
            if ((i = peeked_at(g, at)) >= 0) {
                f = g;
                break;
            }
        }
        if (i > 0)
            n = left_frames(at, i, known, out, max);
    }
    for (; f && n < max; f = next_frame(f), i = i >= 0 && i + 1 < at->n ? i + 1 : -1) {
        if (skipped(f))
            continue;
        int offset = i >= 0 ? offset_at(f, at->f[i].at) : NO_OFFSET;
        out[n].code = code_of(f);
        out[n].offset = offset != NO_OFFSET ? offset : live_offset(f);
        out[n].line = CALX_LINE_UNRESOLVED;
        n++;
    }
    return n;
}

int calx_peek_frames_known(const calx_peek *at, int (*known)(const void *code),
                           calx_frame *out, int max)
{
    if (layout_problem || at->n <= 0)
        return 0;
    return left_frames(at, at->n, known, out, max);
}

int calx_peek_on_stack(PyThreadState *ts, const calx_peek *at)
{
    if (layout_problem)
        return 0;
    for (frame_t *g = first_frame(ts); g; g = next_frame(g))
        if (peeked_at(g, at) >= 0)
            return 1;
    return 0;
}

static uint8_t call_opcodes[256]; /* calx_set_call_opcodes */

void calx_set_call_opcodes(const uint8_t flags[256])
{
    memcpy(call_opcodes, flags, sizeof call_opcodes);
}

/* The opcode of the instruction at `at` in f's bytecode; -1 if `at` is
   not one of its instructions. */
static int opcode_at(frame_t *f, intptr_t at)
{
#if PY_VERSION_HEX >= 0x030B0000
    int offset = offset_at(f, at);
    /* A code unit is its opcode, then its argument. */
    return offset == NO_OFFSET ? -1 : ((const uint8_t *)bytecode_of(f))[offset];
#else
    int offset = code_offset(f->f_code, at);
    return offset == NO_OFFSET ? -1
                               : (uint8_t)PyBytes_AS_STRING(f->f_code->co_code)[offset];
#endif
}

int calx_peek_in_c_call(const calx_peek *at, int (*known)(const void *code),
                        int own_code)
{
#if PY_VERSION_HEX < 0x030D0000
    if (layout_problem || at->n <= 0 || at->f[0].shim || !known(at->f[0].code))
        return -1;
    PyCodeObject *code = (PyCodeObject *)at->f[0].code;
    int offset = code_offset(code, at->f[0].at);
    if (offset == NO_OFFSET)
        return -1;
#if PY_VERSION_HEX >= 0x030B0000
    int op = ((const uint8_t *)_PyCode_CODE(code))[offset];
#else
    int op = (uint8_t)PyBytes_AS_STRING(code->co_code)[offset];
#endif
    if (call_opcodes[op] == 0 || call_opcodes[op] == CALX_CALL_PYTHON)
        return 0;
    return own_code < 0 ? -1 : !own_code;
#else
    (void)at, (void)known, (void)own_code;
    return -1;
#endif
}

int calx_peek_still_in_call(const PyThreadState *ts, const calx_peek *at)
{
    if (layout_problem || at->n == 0)
        return 0;
    frame_t *f = first_frame(ts);
    if (!f || peeked_at(f, at) != 0 || INSTR(f) != at->f[0].at || skipped(f))
        return 0;
    int op = opcode_at(f, at->f[0].at);
    return op >= 0 && call_opcodes[op];
}

void calx_frames_resolve(calx_frame *frames, int n)
{
    for (int i = 0; i < n; i++)
        if (frames[i].line == CALX_LINE_UNRESOLVED)
            frames[i].line = PyCode_Addr2Line(frames[i].code, frames[i].offset);
}

#if defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030E0000
/*
 * ANOTHER THREAD'S FRAMES WITHOUT A GIL (the free-threaded 3.14t)
 *
 * Nothing stops the thread while we read: its frames are pushed, popped
 * and overwritten under us, and a popped chunk of its frame stack may be
 * unmapped.  So every frame is copied through process_vm_readv (a freed
 * one fails instead of faulting) and every pointer in it is an untrusted
 * number until checked:
 *   - a code object is used only if `known` says the session's code table
 *     holds it: the table owns a reference, so a known address is that
 *     live code object whatever the frame we read it from has become; an
 *     unknown one is never dereferenced (CALX_WALK_UNKNOWN: the caller
 *     learns it with the world stopped, where reading frames is safe);
 *   - the instruction pointer must fall inside the frame's own bytecode
 *     copy (tlbc_index checked against the code's array) or the walk is
 *     torn;
 *   - the walk is consistent if the thread's innermost frame is the same
 *     before and after it: while a frame stays innermost, the frames out
 *     from it cannot change (they are suspended in calls).  Otherwise it
 *     is torn: the sample is dropped and counted, never credited to a
 *     mix of two moments.
 * A thread state itself stays valid while the caller holds the
 * interpreters' thread-list lock (calx_threads_lock).
 */
/* One copied frame, checked: 1 if it is stored in *out, 0 if the walk
   skips it, CALX_WALK_UNKNOWN or CALX_WALK_TORN. */
static int check_frame(const calx_raw_frame *f, int (*known)(const void *code),
                       calx_frame *out)
{
    if (f->owner >= FRAME_OWNED_BY_INTERPRETER || !f->code)
        return 0;
    if (!known(f->code))
        return CALX_WALK_UNKNOWN;
    PyObject *exe = (PyObject *)f->code;
    if (!PyCode_Check(exe))
        return 0; /* a known address is a code object (the table has only
                     those); kept for clarity */
    PyCodeObject *code = (PyCodeObject *)exe;
    _PyCodeArray *tlbc = _PyCode_GetTLBCArray(code);
    if (f->tlbc < 0 || f->tlbc >= tlbc->size || !tlbc->entries[f->tlbc])
        return CALX_WALK_TORN;
    const _Py_CODEUNIT *base = (const _Py_CODEUNIT *)tlbc->entries[f->tlbc];
    intptr_t lasti = (const _Py_CODEUNIT *)f->instr - base;
    if (lasti < 0 || lasti > Py_SIZE(code))
        return CALX_WALK_TORN;
    if (lasti < code->_co_firsttraceable && f->owner != FRAME_OWNED_BY_GENERATOR)
        return 0; /* incomplete: not started yet (_PyFrame_IsIncomplete) */
    out->code = code;
    out->offset = (int)lasti * (int)sizeof(_Py_CODEUNIT);
    out->line = CALX_LINE_UNRESOLVED;
    return 1;
}

/* Copy the frame at address f (untrusted) through the window. */
static int copy_frame_sigsafe(cal_vmread *w, const void *f, calx_raw_frame *out,
                              const void **previous)
{
    union {
        frame_t fr;
        char raw[sizeof(frame_t)];
    } u;
    if (cal_vmread_sigsafe(w, f, u.raw, offsetof(frame_t, localsplus)) != 0)
        return -1;
    *previous = u.fr.previous;
    out->code = CODE_OF(&u.fr);
    out->instr = u.fr.instr_ptr;
    out->tlbc = u.fr.tlbc_index;
    out->owner = u.fr.owner;
    return 0;
}

int calx_thread_frames_remote(PyThreadState *ts, int (*known)(const void *code),
                              calx_frame *out, int max)
{
    if (layout_problem)
        return 0;
    static __thread cal_vmread window; /* each reading thread its own */
    cal_vmread *w = &window;
    cal_vmread_reset_sigsafe(w, getpid());
    const void *first = __atomic_load_n(&ts->current_frame, __ATOMIC_ACQUIRE);
    const void *f = first;
    int n = 0;
    for (int depth = 0; f && n < max; depth++) {
        calx_raw_frame raw;
        if (depth > 4 * max || copy_frame_sigsafe(w, f, &raw, &f) != 0)
            return CALX_WALK_TORN; /* a cycle in garbage, or a freed chunk */
        int rc = check_frame(&raw, known, &out[n]);
        if (rc < 0)
            return rc;
        n += rc;
    }
    if (__atomic_load_n(&ts->current_frame, __ATOMIC_ACQUIRE) != first)
        return CALX_WALK_TORN;
    return n;
}

int calx_frames_copy_sigsafe(cal_vmread *w, const PyThreadState *ts,
                             calx_raw_frame *out, int max, int *more, int *attached)
{
    *more = 0;
    *attached = -1;
    if (layout_problem)
        return 0;
    cal_vmread_reset_sigsafe(w, getpid());
    const void *f;
    int state;
    if (cal_vmread_sigsafe(w, &ts->current_frame, &f, sizeof f) != 0 ||
        cal_vmread_sigsafe(w, &ts->state, &state, sizeof state) != 0)
        return CALX_WALK_TORN;
    *attached = state == _Py_THREAD_ATTACHED   ? 1
                : state == _Py_THREAD_DETACHED ? 0
                                               : -1;
    int n = 0;
    while (f && n < max)
        if (copy_frame_sigsafe(w, f, &out[n++], &f) != 0)
            return CALX_WALK_TORN;
    *more = f != NULL;
    return n;
}

int calx_frames_check(const calx_raw_frame *raw, int n, int (*known)(const void *code),
                      calx_frame *out)
{
    int kept = 0;
    for (int i = 0; i < n; i++) {
        int rc = check_frame(&raw[i], known, &out[kept]);
        if (rc < 0)
            return rc;
        kept += rc;
    }
    return kept;
}

int calx_thread_attached(const PyThreadState *ts)
{
    int state = __atomic_load_n(&ts->state, __ATOMIC_RELAXED);
    return state == _Py_THREAD_ATTACHED ? 1 : state == _Py_THREAD_DETACHED ? 0 : -1;
}

void calx_stop_world(PyInterpreterState *interp) { _PyEval_StopTheWorld(interp); }
void calx_start_world(PyInterpreterState *interp) { _PyEval_StartTheWorld(interp); }

int calx_gil_enabled(PyInterpreterState *interp)
{
    /* _PyEval_IsGILEnabled, from the interpreter rather than a thread
       state: the count of reasons it is on (INT_MAX for good). */
    const struct _gil_runtime_state *gil = interp->ceval.gil;
    return gil && __atomic_load_n(&gil->enabled, __ATOMIC_RELAXED) != 0;
}
#else
int calx_thread_frames_remote(PyThreadState *ts, int (*known)(const void *code),
                              calx_frame *out, int max)
{
    (void)known;
    return calx_thread_frames(ts, NULL, NULL, out, max);
}
int calx_frames_copy_sigsafe(cal_vmread *w, const PyThreadState *ts,
                             calx_raw_frame *out, int max, int *more, int *attached)
{
    (void)w, (void)ts, (void)out, (void)max;
    *more = 0;
    *attached = -1;
    return 0;
}
int calx_frames_check(const calx_raw_frame *raw, int n, int (*known)(const void *code),
                      calx_frame *out)
{
    (void)raw, (void)n, (void)known, (void)out;
    return 0;
}
int calx_thread_attached(const PyThreadState *ts)
{
    (void)ts;
    return -1;
}
int calx_gil_enabled(PyInterpreterState *interp)
{
    (void)interp;
    return 1;
}
void calx_stop_world(PyInterpreterState *interp) { (void)interp; }
void calx_start_world(PyInterpreterState *interp) { (void)interp; }
#endif /* Py_GIL_DISABLED */

/* What the peek copies of a frame (up to its locals) and, from 3.13 on,
   where it finds the fields it keeps: the runtime's _Py_DebugOffsets, once
   calx_layout_check has found them equal to the headers'. */
static struct {
    size_t copy, previous, executable, instr;
} peek_at = {offsetof(frame_t, FRAME_LOCALS), 0, 0, 0};

static int peek_off;           /* process_vm_readv is not allowed here */
static cal_vmread peek_window; /* the sampler thread's only */

#if PY_VERSION_HEX >= 0x030D0000
static uintptr_t word_at(const char *raw, size_t off)
{
    uintptr_t w;
    if (off + sizeof w > sizeof(frame_t))
        return 0;
    memcpy(&w, raw + off, sizeof w);
    return w;
}
#endif

/* Whether the frame at f, copied into *fr, was running when it was read.
   A generator's frame (a coroutine's too) lives in its generator object
   and keeps its address, its code and, while suspended, its instruction
   (the yield): the frames read before it may have been left since, and
   it is then not where the thread is.  Its generator's state is read
   through the same window, mostly from the block the frame came from. */
static int frame_running_sigsafe(cal_vmread *w, const void *f, const frame_t *fr)
{
#if PY_VERSION_HEX >= 0x030B0000
    if (fr->owner != FRAME_OWNED_BY_GENERATOR)
        return 1;
    int8_t state;
    const char *gen = (const char *)f - offsetof(PyGenObject, gi_iframe);
    return cal_vmread_sigsafe(w, gen + offsetof(PyGenObject, gi_frame_state), &state,
                              sizeof state) == 0 &&
           state == FRAME_EXECUTING;
#elif PY_VERSION_HEX >= 0x030A0000
    (void)w, (void)f;
    return fr->f_state == FRAME_EXECUTING;
#else
    (void)w, (void)f;
    return fr->f_executing;
#endif
}

/* Where the peek reads the main thread's frames with plain loads, in
   nanoseconds, rather than through the window (process_vm_readv: several
   microseconds here, in which a short call can return and the next call
   start at the same address: the copy read the returned frame at its
   `return`, or the next call at its first lines; a 1.5 us function's
   `for` line read 8-11% of its time, 3-5% read so; 3.13).  Two ranges
   that stay mapped while the thread lives: the first chunk of its frame
   stack (3.11+), never freed, and its C stack as mapped when the profile
   started (3.12+: each entry frame lives there, in the C frame of the
   eval loop that runs it), which may grow but does not shrink.  The peek
   then reads a thread's innermost frames within a microsecond of the
   tick, which the service's test of where the thread stood needs
   (sampler.c, still_in_call). */
static struct {
    uintptr_t lo, hi;
} plain_ranges[2];
static pid_t peek_pid; /* getpid() is a system call: once per profile */

/* The mapping that holds `addr`, from /proc/self/maps; 0 if not found. */
static int mapping_of(uintptr_t addr, uintptr_t *lo, uintptr_t *hi)
{
    FILE *maps = fopen("/proc/self/maps", "re");
    if (!maps)
        return -1;
    char line[512];
    int found = -1;
    while (found != 0 && fgets(line, sizeof line, maps)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx", &a, &b) == 2 && addr >= a && addr < b) {
            *lo = a;
            *hi = b;
            found = 0;
        }
    }
    fclose(maps);
    return found;
}

static void set_plain_range(int i, uintptr_t lo, uintptr_t hi)
{
    __atomic_store_n(&plain_ranges[i].hi, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&plain_ranges[i].lo, lo, __ATOMIC_RELAXED);
    __atomic_store_n(&plain_ranges[i].hi, hi, __ATOMIC_RELAXED);
}

void calx_peek_prepare(const PyThreadState *ts)
{
    __atomic_store_n(&peek_pid, getpid(), __ATOMIC_RELAXED);
    /* Only the main thread's: another thread that started the profile
       (calipers.start() in a worker) may end before it stops, and its
       stacks go with it; its frames are read through the window. */
    int main = PyThread_get_thread_ident() == _PyRuntime.main_thread;
#if PY_VERSION_HEX >= 0x030B0000
    const _PyStackChunk *c = main ? ts->datastack_chunk : NULL;
    while (c && c->previous)
        c = c->previous;
    set_plain_range(0, c ? (uintptr_t)c : 0, c ? (uintptr_t)c + c->size : 0);
#else
    (void)ts; /* frames are objects on the heap: read through the window */
#endif
    uintptr_t lo = 0, hi = 0;
#if PY_VERSION_HEX >= 0x030C0000
    /* The range already known still holds if this thread runs in it: a
       forked child of the main thread (reading /proc/self/maps was half
       of a child's restart), or a profile started again. */
    volatile char here = 0;
    uintptr_t at = (uintptr_t)&here;
    if (main) {
        lo = __atomic_load_n(&plain_ranges[1].lo, __ATOMIC_RELAXED);
        hi = __atomic_load_n(&plain_ranges[1].hi, __ATOMIC_RELAXED);
        if (!(at >= lo && at < hi) && mapping_of(at, &lo, &hi) != 0)
            lo = hi = 0;
    }
#else
    (void)main, (void)mapping_of;
#endif
    set_plain_range(1, lo, hi);
}

/* Copy len bytes of the frame at f (untrusted): plain loads inside the
   plain ranges, else through the window. */
static int read_frame_sigsafe(cal_vmread *w, const void *f, char *raw, size_t len)
{
    uintptr_t at = (uintptr_t)f;
    int plain = 0;
    for (int i = 0; i < 2 && !plain; i++) {
        uintptr_t lo = __atomic_load_n(&plain_ranges[i].lo, __ATOMIC_RELAXED),
                  hi = __atomic_load_n(&plain_ranges[i].hi, __ATOMIC_RELAXED);
        plain = at >= lo && at < hi && len <= hi - at;
    }
    if (!plain || at % sizeof(uintptr_t) != 0 || len % sizeof(uintptr_t) != 0)
        return cal_vmread_sigsafe(w, f, raw, len);
    for (size_t i = 0; i < len / sizeof(uintptr_t); i++) {
        uintptr_t word = __atomic_load_n((const uintptr_t *)f + i, __ATOMIC_RELAXED);
        memcpy(raw + i * sizeof word, &word, sizeof word);
    }
    return 0;
}

/* Whether a copied frame is an entry frame or a shim (the walk's
   skipped(), as far as it can be told without the code object). */
static int shim_owned(const frame_t *fr)
{
#if PY_VERSION_HEX >= 0x030E0000
    return fr->owner >= FRAME_OWNED_BY_INTERPRETER;
#elif PY_VERSION_HEX >= 0x030C0000
    return fr->owner >= FRAME_OWNED_BY_CSTACK;
#else
    (void)fr;
    return 0;
#endif
}

/* The thread's innermost frame now.  The thread state outlives the
   thread's frames; its fields are read as they are. */
static const void *innermost_sigsafe(const PyThreadState *ts)
{
#if PY_VERSION_HEX >= 0x030D0000
    return __atomic_load_n(&ts->current_frame, __ATOMIC_ACQUIRE);
#elif PY_VERSION_HEX >= 0x030B0000
    /* The C frame is on the thread's own stack (or in its thread state),
       mapped while the thread lives, even once that call has returned. */
    _PyCFrame *cf = __atomic_load_n(&ts->cframe, __ATOMIC_RELAXED);
    return cf ? __atomic_load_n(&cf->current_frame, __ATOMIC_ACQUIRE) : NULL;
#else
    return __atomic_load_n(&ts->frame, __ATOMIC_ACQUIRE);
#endif
}

static int peek_chain_sigsafe(cal_vmread *w, const PyThreadState *ts, calx_peek *out)
{
    out->n = 0;
    out->fragile = 0;
    pid_t pid = __atomic_load_n(&peek_pid, __ATOMIC_RELAXED);
    cal_vmread_reset_sigsafe(w, pid ? pid : getpid());
    const void *f = innermost_sigsafe(ts);
    int rc = 0;
    union {
        frame_t fr;
        char raw[sizeof(frame_t)];
    } u;
    int tries = 0;
    for (int k = 0; rc == 0 && f && k < CALX_PEEK_FRAMES; k++) {
        if ((rc = read_frame_sigsafe(w, f, u.raw, peek_at.copy)) != 0)
            break;
        if (!frame_running_sigsafe(w, f, &u.fr))
            return 1;
        /* The innermost frame must still be the thread's when its copy
           is done: one that returned meanwhile keeps its memory, at its
           `return` (a decorated 2 us function's `return x` read 3.2% of
           its time on 3.11 and 2.8% on 3.13, py-spy under 0.3%).  Read
           again from the new innermost frame, twice at most, then given
           up (the service's live stack stands); given up at once, the
           time went to the lines the service is answered at instead
           (functions' first lines). */
        const void *now = k == 0 ? innermost_sigsafe(ts) : f;
        if (now != f) {
            if (tries++ >= 2)
                return 1;
            f = now;
            k = -1;
            continue;
        }
#if defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030B0000
        out->fragile |= u.fr.owner == FRAME_OWNED_BY_GENERATOR;
#endif
        out->f[k].frame = f;
        out->f[k].shim = shim_owned(&u.fr);
#if PY_VERSION_HEX >= 0x030D0000
        /* 3.14's tagged reference: the pointer is the word less its tag
           (the same on 3.13, whose word is the pointer). */
        out->f[k].code =
            (const void *)(word_at(u.raw, peek_at.executable) & ~(uintptr_t)7);
        out->f[k].at = (intptr_t)word_at(u.raw, peek_at.instr);
        f = (const void *)word_at(u.raw, peek_at.previous);
#else
        out->f[k].code = CODE_OF(&u.fr);
        out->f[k].at = INSTR(&u.fr);
        f = next_frame(&u.fr);
#endif
        out->n = k + 1;
    }
    return rc != 0 ? -1 : 0;
}

void calx_peek_frames_sigsafe(const PyThreadState *ts, calx_peek *out)
{
    calx_peek_own_frames_sigsafe(&peek_window, ts, out);
}

void calx_peek_own_frames_sigsafe(cal_vmread *w, const PyThreadState *ts,
                                  calx_peek *out)
{
    out->n = 0;
    out->fragile = 0;
    if (!ts || layout_problem || __atomic_load_n(&peek_off, __ATOMIC_RELAXED))
        return;
    int saved = errno;
    /* A frame found suspended or finished means the thread has left the
       frames read before it (a generator yielded, a coroutine returned,
       between two reads: a read takes 1-2 us, a coroutine in a chain of
       awaits may live 2).  Reading on credited the thread's time to the
       yield or return it was no longer at (3.11 put 10-13% of a generator
       pipeline's time on its `yield x` line).  The peek is then given up
       and the service's live stack stands.  Not read again: a new try
       succeeds only where the frames outlive a read, so trying until one
       does favours the outer, long-lived frames (eight tries gave a
       coroutine chain's hot lines half their time on 3.14t, whose freed
       coroutines are not reused at once; on the other builds the next
       coroutine takes the freed one's place and reads as running).
       And on 3.14t a peek that did read a generator's frames running is
       not trusted either unless the thread held still (out->fragile: the
       service decides): it succeeds where the frames outlive its reads,
       and that is a bias of its own, away from the short-lived frames
       (a coroutine chain's hot lines 0.83-0.94 of the truth; with such
       peeks left out 0.97-0.98, as with no peeking at all). */
    int rc = peek_chain_sigsafe(w, ts, out);
    if (rc == 1)
        out->n = 0;
    else if (rc < 0 && (errno == ENOSYS || errno == EPERM))
        __atomic_store_n(&peek_off, 1, __ATOMIC_RELAXED);
    errno = saved;
}

int calx_layout_check(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    /* The runtime's own description of its layout: the first member of
       _PyRuntime, for debuggers and out-of-process profilers. */
    const _Py_DebugOffsets *d = &_PyRuntime.debug_offsets;
    static char why[160];
    uint64_t built = PY_VERSION_HEX & ~(uint64_t)0xFF,
             running = d->version & ~(uint64_t)0xFF;
    if (memcmp(d->cookie, _Py_Debug_Cookie, sizeof(d->cookie)) != 0) {
        layout_problem = "the interpreter publishes no _Py_DebugOffsets";
        return -1;
    }
    if ((running >> 16) != (built >> 16)) {
        snprintf(why, sizeof why, "built for CPython %d.%d, running on %d.%d",
                 (int)(built >> 24), (int)((built >> 16) & 0xFF), (int)(running >> 24),
                 (int)((running >> 16) & 0xFF));
        layout_problem = why;
        return -1;
    }
    struct {
        const char *name;
        uint64_t runtime, ours;
    } fields[] = {
        {"thread_state.current_frame", d->thread_state.current_frame,
         offsetof(PyThreadState, current_frame)},
        {"thread_state.thread_id", d->thread_state.thread_id,
         offsetof(PyThreadState, thread_id)},
        {"interpreter_frame.previous", d->interpreter_frame.previous,
         offsetof(frame_t, previous)},
        {"interpreter_frame.executable", d->interpreter_frame.executable,
         offsetof(frame_t, f_executable)},
        {"interpreter_frame.instr_ptr", d->interpreter_frame.instr_ptr,
         offsetof(frame_t, instr_ptr)},
        {"interpreter_frame.localsplus", d->interpreter_frame.localsplus,
         offsetof(frame_t, localsplus)},
        {"interpreter_frame.owner", d->interpreter_frame.owner,
         offsetof(frame_t, owner)},
        {"code_object.co_code_adaptive", d->code_object.co_code_adaptive,
         offsetof(PyCodeObject, co_code_adaptive)},
    };
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
        if (fields[k].runtime != fields[k].ours) {
            snprintf(why, sizeof why,
                     "the interpreter's %s is at %llu, not %llu as in the headers "
                     "calipers was built with",
                     fields[k].name, (unsigned long long)fields[k].runtime,
                     (unsigned long long)fields[k].ours);
            layout_problem = why;
            return -1;
        }
    }
    peek_at.copy = d->interpreter_frame.localsplus;
    peek_at.previous = d->interpreter_frame.previous;
    peek_at.executable = d->interpreter_frame.executable;
    peek_at.instr = d->interpreter_frame.instr_ptr;
#endif
    return 0;
}

void calx_poke_main_thread_sigsafe(void)
{
#if PY_VERSION_HEX < 0x030D0000
    PyInterpreterState *interp = PyInterpreterState_Main();
    _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
#elif defined(Py_GIL_DISABLED)
    _Py_set_eval_breaker_bit(_PyRuntime.main_tstate, _PY_CALLS_TO_DO_BIT);
#endif
}

int calx_main_looked_sigsafe(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    uintptr_t was = _Py_atomic_or_uintptr(&_PyRuntime.main_tstate->eval_breaker,
                                          _PY_SIGNALS_PENDING_BIT);
    return (was & _PY_SIGNALS_PENDING_BIT) == 0;
#else
    /* The runtime's flag, and the interpreter's one eval breaker with it,
       as SIGNAL_PENDING_SIGNALS does.  Only the main thread clears the
       flag (handle_signals); a thread that takes the GIL computes the
       breaker again, counting the flag only if it is the main thread
       (COMPUTE_EVAL_BREAKER, Python/ceval_gil.c), so the other threads
       pay at most one look each until then, as for a real signal. */
    int was = __atomic_exchange_n((int *)&_PyRuntime.ceval.signals_pending._value, 1,
                                  __ATOMIC_SEQ_CST);
    _Py_atomic_store_relaxed(&PyInterpreterState_Main()->ceval.eval_breaker, 1);
    return was == 0;
#endif
}

int calx_main_probe_sigsafe(void)
{
#if PY_VERSION_HEX >= 0x030E0000 && defined(Py_GIL_DISABLED)
    return calx_main_looked_sigsafe();
#else
    return -1;
#endif
}

int calx_main_call_unsignalled_sigsafe(void)
{
#if PY_VERSION_HEX >= 0x030D0000 && defined(Py_GIL_DISABLED)
    return !_Py_eval_breaker_bit_is_set(_PyRuntime.main_tstate, _PY_CALLS_TO_DO_BIT);
#else
    return 0;
#endif
}

/* The lock on the interpreters' thread lists, taken with the GIL held.
   3.13+: not with PyMutex_Lock, which lets go of the GIL while it waits
   and takes it back once woken, by then perhaps holding the mutex (handed
   over by its last holder): a thread that holds the GIL and waits for the
   mutex, as one deleting its thread state in PyGILState_Release does, and
   this one then wait for each other for ever (a C thread's call into
   Python ending during a pass hung 3.14 once in 400 runs).  CPython's own
   HEAD_LOCK keeps the GIL while it waits (_Py_LOCK_DONT_DETACH), through a
   function 3.13 does not export; this takes the mutex as that function's
   fast path does, and yields while another thread holds it, which is for
   a walk of the list at most, never while waiting for the GIL.
   PyMutex_Unlock wakes any thread parked on it. */
void calx_threads_lock(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyMutex *m = &_PyRuntime.interpreters.mutex;
    for (;;) {
        uint8_t v = __atomic_load_n(&m->_bits, __ATOMIC_RELAXED);
        if (!(v & _Py_LOCKED) &&
            __atomic_compare_exchange_n(&m->_bits, &v, (uint8_t)(v | _Py_LOCKED), 0,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return;
        sched_yield();
    }
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

/* The GIL's state: the interpreter's from 3.12, the runtime's before. */
static struct _gil_runtime_state *gil_state(PyInterpreterState *interp)
{
#if PY_VERSION_HEX >= 0x030C0000
    return interp->ceval.gil;
#else
    (void)interp;
    return &_PyRuntime.ceval.gil;
#endif
}

PyThreadState *calx_gil_holder_sigsafe(PyInterpreterState *interp)
{
    struct _gil_runtime_state *gil = gil_state(interp);
#if PY_VERSION_HEX >= 0x030D0000
    if (!gil || !__atomic_load_n(&gil->locked, __ATOMIC_RELAXED))
        return NULL;
    return __atomic_load_n(&gil->last_holder, __ATOMIC_RELAXED);
#else
    if (!gil || !_Py_atomic_load_relaxed(&gil->locked))
        return NULL;
    return (PyThreadState *)_Py_atomic_load_relaxed(&gil->last_holder);
#endif
}

int calx_gil_drop_asked_sigsafe(PyInterpreterState *interp, unsigned long *switches)
{
#if PY_VERSION_HEX < 0x030D0000 && !defined(Py_GIL_DISABLED)
    struct _gil_runtime_state *gil = gil_state(interp);
    if (!gil)
        return -1;
    *switches = __atomic_load_n(&gil->switch_number, __ATOMIC_RELAXED);
    return _Py_atomic_load_relaxed(&interp->ceval.gil_drop_request) != 0;
#else
    (void)interp;
    (void)switches;
    return -1;
#endif
}

int calx_gil_bounds(PyInterpreterState *interp, uintptr_t *lo, uintptr_t *hi)
{
    struct _gil_runtime_state *gil = gil_state(interp);
    if (!gil)
        return -1;
    *lo = (uintptr_t)gil;
    *hi = (uintptr_t)(gil + 1);
    return 0;
}

int calx_probe_holder(PyInterpreterState *interp, const PyThreadState *holder)
{
#if PY_VERSION_HEX >= 0x030D0000
    int found = 0;
    uintptr_t was = 0;
    if (holder == _PyRuntime.main_tstate)
        return -1; /* (its answers to the ticks tell, and 3.14t probes it) */
    calx_threads_lock();
    for (PyThreadState *t = interp->threads.head; t && !found; t = t->next)
        found = t == holder;
    if (found)
        was = _Py_atomic_or_uintptr(&((PyThreadState *)holder)->eval_breaker,
                                    _PY_SIGNALS_PENDING_BIT);
    calx_threads_unlock();
    return found ? (was & _PY_SIGNALS_PENDING_BIT) == 0 : -1;
#else
    (void)interp;
    (void)holder;
    return -1;
#endif
}

int calx_probe_own_sigsafe(PyThreadState *ts)
{
#if PY_VERSION_HEX >= 0x030D0000
    uintptr_t was = _Py_atomic_or_uintptr(&ts->eval_breaker, _PY_SIGNALS_PENDING_BIT);
    return (was & _PY_SIGNALS_PENDING_BIT) != 0;
#else
    (void)ts;
    return -1;
#endif
}

int calx_any_thread_call(PyInterpreterState *interp, int (*fn)(void *), void *arg)
{
#if PY_VERSION_HEX >= 0x030C0000 && !defined(Py_GIL_DISABLED)
    /* (3.12's last argument is "main thread only", 3.13's its flags:
       0 says neither) */
    return _PyEval_AddPendingCall(interp, fn, arg, 0) == 0 ? 0 : -1;
#else
    (void)interp;
    (void)fn;
    (void)arg;
    return -1;
#endif
}

#if defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030E0000 && defined(WITH_MIMALLOC)
/* The free-threaded build's object allocator is mimalloc, which takes its
   pages straight from mmap: malloc never sees them, and there are no
   pymalloc arenas to count.  The Python hooks count each block's usable
   size instead (calx_pyalloc_usable_sigsafe), and the footprint starts
   from the bytes of the blocks in use in every thread's heaps (each
   page's used blocks times its block size; blocks of threads that ended
   before, in abandoned pages, are not found). */
static int mimalloc_on(void)
{
    const char *name = _PyMem_GetCurrentAllocatorName();
    return name && strcmp(name, "mimalloc") == 0;
}

/* A page's block size, as mi_page_block_size() but for huge blocks (2 GiB
   and more), whose size mimalloc reads from a function it does not
   export: those count their whole segment, a few KiB more. */
static size_t mimalloc_block_size(const mi_page_t *page)
{
    size_t bsize = page->xblock_size;
    if (bsize < MI_HUGE_BLOCK_SIZE)
        return bsize;
    mi_segment_t *segment = _mi_ptr_segment(page);
    return segment->segment_slices * MI_SEGMENT_SLICE_SIZE;
}

static size_t mimalloc_usable(const void *p)
{
    const mi_segment_t *segment = _mi_ptr_segment(p);
    const mi_page_t *page = _mi_segment_page_of(segment, p);
    /* Blocks from aligned allocations (none of the Python domains makes
       them) would read a few bytes large: the same on both sides. */
    return mimalloc_block_size(page) - MI_PADDING_SIZE;
}

calx_usable_fn calx_pyalloc_usable_fn(void)
{
    return mimalloc_on() ? mimalloc_usable : NULL;
}

int64_t calx_pymalloc_arena_bytes(void)
{
    if (!mimalloc_on())
        return 0;
    int64_t bytes = 0;
    PyInterpreterState *interp = PyInterpreterState_Get();
    calx_threads_lock();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts;
         ts = PyThreadState_Next(ts)) {
        struct _mimalloc_thread_state *m = &((_PyThreadStateImpl *)ts)->mimalloc;
        for (int h = 0; h < _Py_MIMALLOC_HEAP_COUNT; h++)
            for (unsigned b = 0; b <= MI_BIN_FULL; b++)
                for (const mi_page_t *pg = m->heaps[h].pages[b].first; pg;
                     pg = pg->next)
                    bytes += (int64_t)pg->used * (int64_t)mimalloc_block_size(pg);
    }
    calx_threads_unlock();
    return bytes;
}
#else
calx_usable_fn calx_pyalloc_usable_fn(void) { return NULL; }

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
#endif /* mimalloc */

#else /* !CALX_KNOWN_LAYOUT: an interpreter newer than this file */

/* Nothing of the interpreter's internals is read: no frames (time and
   memory go to the run and its threads, not to lines), no GIL holder (the
   watcher sees the GIL as free), no pymalloc statistics.  Thread states
   are iterated under the GIL alone: it keeps them from being unlinked
   (that happens with the GIL held) but not from being added, which
   happens at the head of the list, after the new one is initialised. */
int calx_layout_check(void)
{
    static char why[96];
    snprintf(why, sizeof why,
             "calipers knows the frame layouts of CPython 3.9 to 3.%d, not %d.%d",
             CALX_NEWEST_KNOWN_MINOR, PY_MAJOR_VERSION, PY_MINOR_VERSION);
    layout_problem = why;
    return -1;
}

int calx_thread_frames(PyThreadState *ts, const calx_peek *at,
                       int (*known)(const void *code), calx_frame *out, int max)
{
    (void)ts, (void)at, (void)known, (void)out, (void)max;
    return 0;
}

int calx_peek_frames_known(const calx_peek *at, int (*known)(const void *code),
                           calx_frame *out, int max)
{
    (void)at, (void)known, (void)out, (void)max;
    return 0;
}

int calx_peek_on_stack(PyThreadState *ts, const calx_peek *at)
{
    (void)ts, (void)at;
    return 0;
}

void calx_set_call_opcodes(const uint8_t flags[256]) { (void)flags; }
int calx_peek_in_c_call(const calx_peek *at, int (*known)(const void *code),
                        int own_code)
{
    (void)at, (void)known, (void)own_code;
    return -1;
}

int calx_peek_still_in_call(const PyThreadState *ts, const calx_peek *at)
{
    (void)ts, (void)at;
    return 0;
}

void calx_frames_resolve(calx_frame *frames, int n) { (void)frames, (void)n; }

void calx_peek_prepare(const PyThreadState *ts) { (void)ts; }

void calx_peek_frames_sigsafe(const PyThreadState *ts, calx_peek *out)
{
    (void)ts;
    out->n = 0;
    out->fragile = 0;
}

void calx_peek_own_frames_sigsafe(cal_vmread *w, const PyThreadState *ts,
                                  calx_peek *out)
{
    (void)w;
    (void)ts;
    out->n = 0;
    out->fragile = 0;
}

int calx_thread_frames_remote(PyThreadState *ts, int (*known)(const void *code),
                              calx_frame *out, int max)
{
    (void)ts, (void)known, (void)out, (void)max;
    return 0;
}
int calx_frames_copy_sigsafe(cal_vmread *w, const PyThreadState *ts,
                             calx_raw_frame *out, int max, int *more, int *attached)
{
    (void)w, (void)ts, (void)out, (void)max;
    *more = 0;
    *attached = -1;
    return 0;
}
int calx_frames_check(const calx_raw_frame *raw, int n, int (*known)(const void *code),
                      calx_frame *out)
{
    (void)raw, (void)n, (void)known, (void)out;
    return 0;
}
int calx_thread_attached(const PyThreadState *ts)
{
    (void)ts;
    return -1;
}
int calx_gil_enabled(PyInterpreterState *interp)
{
    (void)interp;
#ifdef Py_GIL_DISABLED
    return 0; /* not readable without the layout: as it starts */
#else
    return 1;
#endif
}
void calx_stop_world(PyInterpreterState *interp) { (void)interp; }
void calx_start_world(PyInterpreterState *interp) { (void)interp; }
void calx_poke_main_thread_sigsafe(void) {}
int calx_main_call_unsignalled_sigsafe(void) { return 0; }
int calx_main_probe_sigsafe(void) { return -1; }
int calx_main_looked_sigsafe(void) { return -1; }
void calx_threads_lock(void) {}
void calx_threads_unlock(void) {}

PyThreadState *calx_gil_holder_sigsafe(PyInterpreterState *interp)
{
    (void)interp;
    return NULL;
}

int calx_gil_drop_asked_sigsafe(PyInterpreterState *interp, unsigned long *switches)
{
    (void)interp;
    (void)switches;
    return -1;
}

int calx_gil_bounds(PyInterpreterState *interp, uintptr_t *lo, uintptr_t *hi)
{
    (void)interp;
    (void)lo;
    (void)hi;
    return -1;
}

int calx_any_thread_call(PyInterpreterState *interp, int (*fn)(void *), void *arg)
{
    (void)interp;
    (void)fn;
    (void)arg;
    return -1;
}

int calx_probe_holder(PyInterpreterState *interp, const PyThreadState *holder)
{
    (void)interp;
    (void)holder;
    return -1;
}

int calx_probe_own_sigsafe(PyThreadState *ts)
{
    (void)ts;
    return -1;
}

int64_t calx_pymalloc_arena_bytes(void) { return 0; }
calx_usable_fn calx_pyalloc_usable_fn(void) { return NULL; }

#endif /* CALX_KNOWN_LAYOUT */

const char *calx_layout_problem(void) { return layout_problem; }

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

/* ---- the garbage collector's count of collections --------------------------
 * The interpreter's own per-generation statistics (what gc.get_stats()
 * returns), read where they are kept: nothing is registered with the
 * collector, so gc.callbacks, gc.get_count(), the thresholds and
 * gc.isenabled() read as without us.  A word read without the GIL (a
 * thread queueing a free) may be one collection stale: harmless. */
int64_t calx_gc_collections(void)
{
#ifdef CALX_KNOWN_LAYOUT
    PyInterpreterState *interp = PyInterpreterState_Main();
    if (!interp)
        return -1;
    int64_t n = 0;
    for (int i = 0; i < NUM_GENERATIONS; i++)
        n += (int64_t)interp->gc.generation_stats[i].collections;
    return n;
#else
    return -1;
#endif
}

/* ---- the garbage collector's state -----------------------------------------
 * The same fields gc.get_count(), gc.get_threshold() and gc.get_stats()
 * read (Modules/gcmodule.c), from the interpreter's GC state (3.9 on:
 * interp->gc).  The free-threaded build keeps its generations as young and
 * old[2] (3.14t), the default build as generations[3].  `collecting` is set
 * for the whole of a collection, the gc.callbacks included, on every
 * version here (gc.c: _PyObject_GC_Alloc and gc.collect() up to 3.11,
 * _Py_RunGC in 3.12, _PyGC_Collect from 3.13, gc_free_threading.c). */
#ifdef CALX_KNOWN_LAYOUT
#if defined(Py_GIL_DISABLED)
#define GC_GENERATION(gc, i) ((i) == 0 ? &(gc)->young : &(gc)->old[(i)-1])
#else
#define GC_GENERATION(gc, i) (&(gc)->generations[i])
#endif
#endif

int calx_gc_read_sigsafe(PyInterpreterState *interp, calx_gc_state *out)
{
#ifdef CALX_KNOWN_LAYOUT
    if (!interp)
        return -1;
    const struct _gc_runtime_state *gc = &interp->gc;
    for (int i = 0; i < CALX_GC_GENERATIONS; i++) {
        const struct gc_generation *gen = GC_GENERATION(gc, i);
        const struct gc_generation_stats *st = &gc->generation_stats[i];
        out->count[i] = __atomic_load_n(&gen->count, __ATOMIC_RELAXED);
        out->threshold[i] = __atomic_load_n(&gen->threshold, __ATOMIC_RELAXED);
        out->collections[i] = __atomic_load_n(&st->collections, __ATOMIC_RELAXED);
        out->collected[i] = __atomic_load_n(&st->collected, __ATOMIC_RELAXED);
        out->uncollectable[i] = __atomic_load_n(&st->uncollectable, __ATOMIC_RELAXED);
    }
    return 0;
#else
    (void)interp;
    (void)out;
    return -1;
#endif
}

int calx_gc_collecting_sigsafe(PyInterpreterState *interp)
{
#ifdef CALX_KNOWN_LAYOUT
    return interp && __atomic_load_n(&interp->gc.collecting, __ATOMIC_RELAXED) != 0;
#else
    (void)interp;
    return 0;
#endif
}

int calx_gc_visit(int (*visit)(PyObject *op, void *arg), void *arg)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyUnstable_GC_VisitObjects(visit, arg);
    return 0;
#elif defined(CALX_KNOWN_LAYOUT)
    /* gcmodule.c's own walk (append_objects): each generation is a list
       of PyGC_Head, the object right after its head. */
    PyInterpreterState *interp = PyThreadState_Get()->interp;
    for (int i = 0; i < NUM_GENERATIONS; i++) {
        PyGC_Head *list = &interp->gc.generations[i].head;
        for (PyGC_Head *g = _PyGCHead_NEXT(list); g != list; g = _PyGCHead_NEXT(g))
            if (!visit((PyObject *)(g + 1), arg))
                return 0;
    }
    return 0;
#else
    (void)visit;
    (void)arg;
    return -1;
#endif
}
