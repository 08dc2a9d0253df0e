/*
 * samplerprobe — _calipers._sampler_probe, the one step of the sampler
 * fuzzer (tests/test_sampler_fuzz.py, docs/INTERNALS.md "The sampler
 * fuzzer"): it makes, resizes or frees one real object between two
 * readings of the shim's state, so that nothing but that step's own
 * allocation falls between them and the test's model can say, from the
 * bytes left before the next sample point, whether that allocation must
 * be sampled.  Test support: it reads and changes nothing the profile
 * depends on but what the step allocates; with the GIL held.
 */
#include "samplerprobe.h" /* Python.h first */

#include "runtime.h"

#include <stddef.h>
#include <string.h>

enum {
    OP_BYTES,         /* bytes of n bytes: one block of Python's object domain */
    OP_STR,           /* an ASCII str of n characters: likewise */
    OP_PYMEM,         /* a PyMem_Malloc buffer of n bytes, in a capsule */
    OP_NATIVE,        /* a PyMem_RawMalloc (malloc) block of n bytes, in a capsule */
    OP_REALLOC,       /* the capsule in box[0] resized to n bytes */
    OP_FREE,          /* box[0] released */
    OP_OBJECT,        /* an instance of the class in box[0] (called with no
                         arguments): one block, a pre-header before the object */
    OP_AT_POINT = 16, /* + OP_BYTES..OP_NATIVE: n relative to the next point */
};

static const char PYMEM_NAME[] = "calipers.probe.pymem";
static const char NATIVE_NAME[] = "calipers.probe.native";

/* The readings around a step (all int64, in this order). */
enum {
    S_PY_LEFT,
    S_PY_TAKEN,
    S_PY_MEAN,
    S_NAT_LEFT,
    S_NAT_TAKEN,
    S_NAT_MEAN,
    S_CLOCK,
    S_LIVE,
    S_PEAK,
    S_COUNT
};

static void read_state(const cal_shim_api *api, int64_t out[S_COUNT])
{
    api->sampler_state(CAL_SHIM_PYMEM, out + S_PY_LEFT);
    api->sampler_state(CAL_SHIM_NATIVE, out + S_NAT_LEFT);
    int g = api->guard_enter();
    cal_shim_counters c;
    api->counters(&c);
    out[S_CLOCK] = api->alloc_clock();
    api->guard_leave(g);
    out[S_LIVE] = c.live_native + c.live_python;
    out[S_PEAK] = c.peak;
}

static void free_pymem(PyObject *cap)
{
    PyMem_Free(PyCapsule_GetPointer(cap, PYMEM_NAME));
}

static void free_native(PyObject *cap)
{
    PyMem_RawFree(PyCapsule_GetPointer(cap, NATIVE_NAME));
}

PyObject *calx_sampler_probe(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    const cal_shim_api *api = calx_runtime_shim();
    if (nargs != 3 || !PyList_CheckExact(args[0]) || PyList_GET_SIZE(args[0]) != 1) {
        PyErr_SetString(PyExc_TypeError, "_sampler_probe(box: [obj], op, n)");
        return NULL;
    }
    if (!api) {
        PyErr_SetString(PyExc_RuntimeError, "calipers: the memory shim is not loaded");
        return NULL;
    }
    PyObject *box = args[0];
    long op = PyLong_AsLong(args[1]);
    Py_ssize_t n = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (op >= OP_AT_POINT && op < OP_AT_POINT + OP_REALLOC) {
        /* n is an offset from the next sample point: the step's block is
           sized so that its bytes end n bytes past it (the boundary the
           sampler must get right); at least 2 bytes of content. */
        op -= OP_AT_POINT;
        int64_t state[3];
        api->sampler_state(op == OP_NATIVE ? CAL_SHIM_NATIVE : CAL_SHIM_PYMEM, state);
        Py_ssize_t header = op == OP_BYTES
                                ? (Py_ssize_t)offsetof(PyBytesObject, ob_sval) + 1
                            : op == OP_STR ? (Py_ssize_t)sizeof(PyASCIIObject) + 1
                                           : 0;
        n = (Py_ssize_t)state[0] + n - header;
        if (n < 2)
            n = 2;
    }
    PyObject *old = PyList_GET_ITEM(box, 0);
    const char *name = NULL;
    if (op == OP_REALLOC) {
        name = PyCapsule_IsValid(old, PYMEM_NAME)    ? PYMEM_NAME
               : PyCapsule_IsValid(old, NATIVE_NAME) ? NATIVE_NAME
                                                     : NULL;
        if (!name) {
            PyErr_SetString(PyExc_TypeError, "_sampler_probe: nothing to resize");
            return NULL;
        }
    }
    if ((op < OP_REALLOC && old != Py_None) ||
        (op == OP_OBJECT && !PyType_Check(old))) {
        PyErr_SetString(PyExc_ValueError, "_sampler_probe: the box must hold None");
        return NULL;
    }
    if (n < 1 || op < OP_BYTES || op > OP_OBJECT) {
        PyErr_SetString(PyExc_ValueError, "_sampler_probe: bad op or size");
        return NULL;
    }

    int64_t st[2][S_COUNT];
    PyObject *made = NULL;
    void *block = NULL;
    /* ---- the window: nothing but the step allocates in it ---- */
    read_state(api, st[0]);
    switch (op) {
    case OP_BYTES:
        made = PyBytes_FromStringAndSize(NULL, n);
        block = made;
        break;
    case OP_STR:
        made = PyUnicode_New(n, 127);
        block = made;
        break;
    case OP_PYMEM:
        block = PyMem_Malloc((size_t)n);
        break;
    case OP_NATIVE:
        block = PyMem_RawMalloc((size_t)n);
        break;
    case OP_REALLOC:
        block = name == PYMEM_NAME
                    ? PyMem_Realloc(PyCapsule_GetPointer(old, name), (size_t)n)
                    : PyMem_RawRealloc(PyCapsule_GetPointer(old, name), (size_t)n);
        if (block)
            PyCapsule_SetPointer(old, block);
        break;
    case OP_OBJECT:
        made = PyObject_CallNoArgs(old);
        block = made;
        break;
    case OP_FREE:
        Py_INCREF(Py_None);
        PyList_SET_ITEM(box, 0, Py_None);
        Py_DECREF(old);
        break;
    }
    read_state(api, st[1]);
    /* ---- what the step made is looked up and handed back unsampled ---- */
    int was = api->set_unsampled(1);
    cal_shim_sample smp = {0};
    int tracked = block && api->lookup(block, &smp);
    /* An object with a pre-header (the GC's links, a managed dict) starts
       16 or 32 bytes into its block. */
    for (int pre = 16; op == OP_OBJECT && made && !tracked && pre <= 32; pre += 16)
        if (api->lookup((char *)made - pre, &smp)) {
            block = (char *)made - pre;
            tracked = 1;
        }
    if (!block && op != OP_FREE)
        PyErr_NoMemory();
    else if (made && op != OP_OBJECT)
        memset(op == OP_STR ? PyUnicode_DATA(made) : (void *)PyBytes_AS_STRING(made),
               'a', (size_t)n);
    else if (op == OP_PYMEM || op == OP_NATIVE) {
        made = PyCapsule_New(block, op == OP_PYMEM ? PYMEM_NAME : NATIVE_NAME,
                             op == OP_PYMEM ? free_pymem : free_native);
        if (!made)
            (op == OP_PYMEM ? PyMem_Free : PyMem_RawFree)(block);
    }
    PyObject *out = NULL;
    if (!PyErr_Occurred()) {
        if (made) {
            PyList_SET_ITEM(box, 0, made); /* steals */
            Py_DECREF(old);
        }
        int64_t rec[2 * S_COUNT + 4];
        memcpy(rec, st, sizeof st);
        rec[2 * S_COUNT] = (int64_t)(uintptr_t)block;
        rec[2 * S_COUNT + 1] = tracked;
        rec[2 * S_COUNT + 2] = tracked ? smp.weight : 0;
        rec[2 * S_COUNT + 3] = tracked ? (int64_t)smp.size : 0;
        /* bytes, not a tuple: no garbage collection can start while the
           result is made (the test's model counts the collections). */
        out = PyBytes_FromStringAndSize((const char *)rec, sizeof rec);
    }
    api->set_unsampled(was);
    return out;
}
