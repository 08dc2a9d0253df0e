/*
 * heapquery — the questions calipers.heap asks of a scan (heapscan.h
 * declares them): totals by type and by allocation line, one node, the
 * largest, a node by object, the nodes of a type, and the path from a
 * root with the objects along it still alive.  They read the graph
 * (calx_heap, heap_state.h) a scan made or a dump loaded; only heap_find
 * and heap_path look at live objects, and never those of a loaded heap.
 * GIL held; each returns NULL with an exception set on error.
 */
#include "heapscan.h" /* Python.h first */

#include "heap_state.h"
#include "pyinternals.h"
#include "runtime.h"
#include "session.h"

#include "cal_heapgraph.h"
#include "cal_map.h"
#include "cal_profile.h"
#include "cal_stacks.h"

#include <stdlib.h>
#include <string.h>

PyObject *calx_heap_info(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O:heap_info", &cap))
        return NULL;
    calx_heap *h = calx_heap_of(cap);
    if (!h)
        return NULL;
    size_t bytes = cal_heapgraph_bytes(&h->g) + h->ntypes * sizeof(type_info) +
                   (h->sample ? h->g.n * 4 : 0);
    int sampled = h->file ? h->file->line_of != NULL : h->sample != NULL;
    return Py_BuildValue(
        "{s:n,s:n,s:n,s:n,s:n,s:d,s:d,s:O,s:O}", "nodes", (Py_ssize_t)h->g.n, "edges",
        (Py_ssize_t)h->g.nedges, "roots", (Py_ssize_t)h->g.nroots, "bytes",
        (Py_ssize_t)bytes, "peak_bytes",
        (Py_ssize_t)(h->peak_bytes > bytes ? h->peak_bytes : bytes), "walk_seconds",
        h->walk_s, "analysis_seconds", h->analysis_s, "sampled",
        sampled ? Py_True : Py_False, "loaded", h->file ? Py_True : Py_False);
}

PyObject *calx_heap_types(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O:heap_types", &cap))
        return NULL;
    calx_heap *h = calx_heap_of(cap);
    if (!h)
        return NULL;
    PyObject *list = PyList_New(h->ntypes);
    for (uint32_t t = 0; list && t < h->ntypes; t++) {
        PyObject *s = PyUnicode_DecodeUTF8(
            h->types[t].name, (Py_ssize_t)strlen(h->types[t].name), "replace");
        if (!s) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, t, s);
    }
    return list;
}

PyObject *calx_heap_by_type(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O:heap_by_type", &cap))
        return NULL;
    calx_heap *h = calx_heap_of(cap);
    if (!h)
        return NULL;
    uint32_t nt = h->ntypes;
    int guard = calx_runtime_guard_enter();
    uint64_t *c = calloc(nt + 1, 8), *sz = calloc(nt + 1, 8), *r = calloc(nt + 1, 8);
    int rc = c && sz && r ? cal_heapgraph_by_type(&h->g, nt, c, sz, r) : -1;
    calx_runtime_guard_leave(guard);
    PyObject *list = rc == 0 ? PyList_New(0) : PyErr_NoMemory();
    for (uint32_t t = 0; list && t < nt; t++) {
        if (!c[t])
            continue;
        PyObject *row =
            Py_BuildValue("(IKKK)", t, (unsigned long long)c[t],
                          (unsigned long long)sz[t], (unsigned long long)r[t]);
        if (!row || PyList_Append(list, row) != 0)
            Py_CLEAR(list);
        Py_XDECREF(row);
    }
    guard = calx_runtime_guard_enter();
    free(c);
    free(sz);
    free(r);
    calx_runtime_guard_leave(guard);
    return list;
}

const char *calx_heap_node_line(const calx_heap *h, size_t i, int *line)
{
    if (h->file) {
        const cal_heapfile *f = h->file;
        if (!f->line_of || !f->line_of[i])
            return NULL;
        const uint32_t *l = f->lines + 2 * (f->line_of[i] - 1);
        *line = (int32_t)l[1];
        return f->strings[l[0]];
    }
    if (!h->sample || !h->sample[i])
        return NULL;
    const cal_profile *p = calx_session_profile();
    const cal_stacks *st = p ? cal_profile_stacks_at(p) : NULL;
    uint32_t node = h->sample[i] - 1;
    if (!st || node >= st->nnodes)
        return NULL;
    /* the innermost Python frame of the allocating stack */
    for (uint32_t k = node; k != CAL_STACKS_NONE; k = st->nodes[k].parent)
        if (st->nodes[k].frame != CAL_STACKS_NONE) {
            *line = st->nodes[k].line;
            return cal_profile_string_at(p, st->frames[st->nodes[k].frame].file);
        }
    return NULL;
}

PyObject *calx_heap_by_line(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O:heap_by_line", &cap))
        return NULL;
    calx_heap *h = calx_heap_of(cap);
    if (!h)
        return NULL;
    PyObject *out = PyDict_New(); /* (file, line) -> [count, size, retained] */
    for (size_t i = 0; out && i < h->g.n; i++) {
        if (h->g.type[i] & CAL_HEAP_MERGED)
            continue;
        int sampled = h->file ? h->file->line_of && h->file->line_of[i]
                              : h->sample && h->sample[i];
        if (!sampled)
            continue;
        int line = 0;
        const char *file = calx_heap_node_line(h, i, &line);
        if (!file) {
            file = "<unknown>";
            line = 0;
        }
        PyObject *key = Py_BuildValue("(si)", file, line);
        PyObject *acc = key ? PyDict_GetItemWithError(out, key) : NULL;
        if (!acc && key && !PyErr_Occurred()) {
            acc = Py_BuildValue("[iKK]", 0, 0ULL, 0ULL);
            if (acc && PyDict_SetItem(out, key, acc) != 0)
                Py_CLEAR(acc);
            Py_XDECREF(acc); /* the dict holds it */
        }
        if (!acc) {
            Py_XDECREF(key);
            Py_CLEAR(out);
            break;
        }
        long long c = PyLong_AsLongLong(PyList_GET_ITEM(acc, 0)) + 1;
        unsigned long long sz =
            PyLong_AsUnsignedLongLong(PyList_GET_ITEM(acc, 1)) + h->g.size[i];
        unsigned long long r =
            PyLong_AsUnsignedLongLong(PyList_GET_ITEM(acc, 2)) + h->g.retained[i];
        PyObject *vc = PyLong_FromLongLong(c), *vs = PyLong_FromUnsignedLongLong(sz),
                 *vr = PyLong_FromUnsignedLongLong(r);
        Py_DECREF(key);
        if (!vc || !vs || !vr) {
            Py_XDECREF(vc);
            Py_XDECREF(vs);
            Py_XDECREF(vr);
            Py_CLEAR(out);
            break;
        }
        PyList_SetItem(acc, 0, vc);
        PyList_SetItem(acc, 1, vs);
        PyList_SetItem(acc, 2, vr);
    }
    return out;
}

PyObject *calx_heap_node(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "On:heap_node", &cap, &i))
        return NULL;
    calx_heap *h = calx_heap_of(cap);
    if (!h)
        return NULL;
    if (i < 0 || (size_t)i >= h->g.n) {
        PyErr_SetString(PyExc_IndexError, "no such node");
        return NULL;
    }
    uint32_t k = cal_map_get(&h->named, (uint64_t)i);
    const char *name = k != CAL_MAP_NONE ? h->names[k] : NULL;
    uint32_t idom = h->g.idom ? h->g.idom[i] : CAL_HEAP_NONE;
    return Py_BuildValue(
        "(KIKKns)", (unsigned long long)h->g.addr[i], h->g.type[i] & ~CAL_HEAP_MERGED,
        (unsigned long long)h->g.size[i],
        (unsigned long long)(h->g.retained ? h->g.retained[i] : 0),
        idom >= CAL_HEAP_NONE ? (Py_ssize_t)-1 : (Py_ssize_t)idom, name);
}

PyObject *calx_heap_find(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap, *obj;
    if (!PyArg_ParseTuple(args, "OO:heap_find", &cap, &obj))
        return NULL;
    calx_heap *h = calx_heap_of(cap);
    if (!h)
        return NULL;
    if (h->file) {
        PyErr_SetString(PyExc_TypeError,
                        "a heap loaded from a dump holds no live objects: pass a Node");
        return NULL;
    }
    int64_t i = cal_heapgraph_lookup(&h->g, (uint64_t)(uintptr_t)obj);
    /* The same address may hold another object now: the type must match. */
    if (i >= 0 && h->types[h->g.type[i] & ~CAL_HEAP_MERGED].addr !=
                      (uint64_t)(uintptr_t)Py_TYPE(obj))
        i = -1;
    return PyLong_FromLongLong(i);
}

static PyObject *index_list(const uint32_t *v, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t k = 0; list && k < n; k++) {
        PyObject *x = PyLong_FromUnsignedLong(v[k]);
        if (!x) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, x);
    }
    return list;
}

PyObject *calx_heap_largest(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap;
    Py_ssize_t n;
    int by_retained;
    if (!PyArg_ParseTuple(args, "Onp:heap_largest", &cap, &n, &by_retained))
        return NULL;
    calx_heap *h = calx_heap_of(cap);
    if (!h)
        return NULL;
    if (n < 0)
        n = 0;
    if ((size_t)n > h->g.n)
        n = (Py_ssize_t)h->g.n;
    uint32_t *out = PyMem_Malloc(((size_t)n + 1) * sizeof *out);
    if (!out)
        return PyErr_NoMemory();
    size_t k = cal_heapgraph_largest(&h->g, (size_t)n, by_retained, out);
    PyObject *list = index_list(out, k);
    PyMem_Free(out);
    return list;
}

PyObject *calx_heap_of_type(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap;
    unsigned int t;
    if (!PyArg_ParseTuple(args, "OI:heap_of_type", &cap, &t))
        return NULL;
    calx_heap *h = calx_heap_of(cap);
    if (!h)
        return NULL;
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list && i < h->g.n; i++) {
        if (h->g.type[i] != t)
            continue;
        PyObject *x = PyLong_FromSize_t(i);
        if (!x || PyList_Append(list, x) != 0)
            Py_CLEAR(list);
        Py_XDECREF(x);
    }
    return list;
}

/* Does `op` refer to the object at `addr` right now? */
typedef struct refers {
    PyObject *target;
    int found;
} refers;

static int refers_visit(PyObject *child, void *arg)
{
    refers *r = arg;
    if (child == r->target)
        r->found = 1;
    return 0;
}

static int refers_to(const calx_heap *h, PyObject *op, PyObject *target)
{
    refers r = {target, 0};
    if (PyObject_IS_GC(op) && Py_TYPE(op)->tp_traverse)
        (void)Py_TYPE(op)->tp_traverse(op, refers_visit, &r);
    if (!r.found) { /* numpy's base edge */
        uint32_t t = cal_map_get(&h->type_index, (uint64_t)(uintptr_t)Py_TYPE(op));
        if (t != CAL_MAP_NONE && h->types[t].rule == RULE_NDARRAY)
            r.found = ((np_array *)op)->base == target;
    }
    return r.found;
}

static int gc_find(PyObject *op, void *arg)
{
    refers *r = arg;
    if (op == r->target) {
        r->found = 1;
        return 0;
    }
    return 1;
}

/* Is the object at `addr`, a root of the scan, alive now? */
static int root_alive(const calx_heap *h, uint64_t addr)
{
    PyObject *op = (PyObject *)(uintptr_t)addr;
    if (addr == (uint64_t)(uintptr_t)PyImport_GetModuleDict() ||
        addr == (uint64_t)(uintptr_t)PyEval_GetBuiltins())
        return 1;
    if (addr == h->modules || addr == h->builtins)
        return 0; /* replaced since */
    refers r = {op, 0};
    if (calx_gc_visit(gc_find, &r) == 0)
        return r.found;
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *list = gc ? PyObject_CallMethod(gc, "get_objects", NULL) : NULL;
    for (Py_ssize_t k = 0; list && PyList_Check(list) && k < PyList_GET_SIZE(list); k++)
        if (PyList_GET_ITEM(list, k) == op)
            r.found = 1;
    Py_XDECREF(list);
    Py_XDECREF(gc);
    PyErr_Clear();
    return r.found;
}

PyObject *calx_heap_path(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap;
    Py_ssize_t target;
    if (!PyArg_ParseTuple(args, "On:heap_path", &cap, &target))
        return NULL;
    calx_heap *h = calx_heap_of(cap);
    if (!h)
        return NULL;
    if (target < 0 || (size_t)target >= h->g.n) {
        PyErr_SetString(PyExc_IndexError, "no such node");
        return NULL;
    }
    uint32_t *path;
    size_t len;
    int guard = calx_runtime_guard_enter();
    int rc = cal_heapgraph_path(&h->g, (uint32_t)target, &path, &len);
    calx_runtime_guard_leave(guard);
    if (rc != 0)
        return PyErr_NoMemory();
    PyObject *nodes = index_list(path, len), *objs = PyList_New(0);
    /* The objects along the path that are alive now, each referring to the
       next: a root still alive, then one step at a time.  None for a heap
       loaded from a dump: its addresses are not this process's now. */
    PyObject *prev = NULL;
    for (size_t k = 0; !h->file && nodes && objs && k < len; k++) {
        PyObject *op = (PyObject *)(uintptr_t)h->g.addr[path[k]];
        int ok = k == 0 ? root_alive(h, h->g.addr[path[k]]) : refers_to(h, prev, op);
        if (!ok || h->types[h->g.type[path[k]] & ~CAL_HEAP_MERGED].addr !=
                       (uint64_t)(uintptr_t)Py_TYPE(op))
            break;
        if (PyList_Append(objs, op) != 0)
            Py_CLEAR(objs);
        prev = op;
    }
    guard = calx_runtime_guard_enter();
    free(path);
    calx_runtime_guard_leave(guard);
    if (!nodes || !objs) {
        Py_XDECREF(nodes);
        Py_XDECREF(objs);
        return NULL;
    }
    return Py_BuildValue("(NN)", nodes, objs);
}
