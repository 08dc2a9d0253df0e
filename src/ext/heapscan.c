/*
 * heapscan — the heap scanner behind calipers.heap: walks every object
 * reachable from the roots once, through tp_traverse, into a
 * cal_heapgraph (the questions asked of it are heapquery.c's).  GIL held
 * throughout; refuses free-threaded builds (other threads would mutate the
 * heap mid-walk).
 *
 * HOW IT WORKS (docs/INTERNALS.md, "Heap scanner", says more)
 *
 * Roots.  First the explicit roots, sys.modules and the builtins dict,
 * and everything they reach (breadth first: the graph's node array is the
 * queue).  Then every object the garbage collector tracks that was not
 * reached (PyUnstable_GC_VisitObjects from 3.12, gc.get_objects() with the
 * collector paused before), and what those reach.  Of these, the ones no
 * other scanned object refers to become roots (held by a running frame, by
 * C code, by the interpreter), and then one object per cycle still
 * unreached (garbage awaiting the collector, or a cycle held from C).
 *
 * Safety.  During the walk nothing runs Python code and nothing creates a
 * Python object but the int results of C __sizeof__ methods of the
 * interpreter and its standard library (called through their PyMethodDef,
 * never by name; freed at once, not tracked by the collector, so no
 * collection can start).  Static types are never passed to tp_traverse
 * (type_traverse is fatal for them: PyObject_IS_GC asks tp_is_gc).  The
 * graph is the profiler's memory: allocated and freed under the shim's
 * guard.  A sizer callable (a rule) runs after the walk, on objects held
 * for the while.
 */
#include "heapscan.h" /* Python.h first */

#include "cal_heapgraph.h"
#include "heap_state.h"
#include "cal_map.h"
#include "memory.h"
#include "pyinternals.h"
#include "runtime.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One rule as given (heap_scan's rules). */
typedef struct rule {
    PyTypeObject *tp;
    int subclasses, kind;
    Py_ssize_t size;
    PyObject *sizer;
} rule;

/* Nodes expanded together (expand_all). */
#define EXPAND_BATCH 256

typedef struct scan {
    calx_heap *h;
    rule *rules;
    size_t nrules;
    cal_map ignored; /* object addresses whose rule is "ignore" */
    PyTypeObject *ndarray;
    PyObject *skip; /* gc.get_objects()'s list (3.9-3.11) */
    PyObject *sizeof_name, *name_name, *module_name; /* interned */
    const void *core_base;
    uint64_t *virt; /* (owner node, dict address) pairs */
    size_t nvirt, virt_cap;
    uint32_t *sized; /* nodes with a sizer callable */
    size_t nsized, sized_cap;
    uint64_t *buf; /* the batch's children (expand_all) */
    size_t nbuf, buf_cap;
    uint32_t deg[EXPAND_BATCH]; /* of each node of the batch */
    int sampled;                /* the memory engine is attached */
    size_t sample_cap;          /* of h->sample */
    int failed;                 /* out of memory */
} scan;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Append to a malloc'd array of elements of `elem` bytes.  0 or -1. */
static int push(void **arr, size_t *n, size_t *cap, size_t elem, const void *v)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        void *p = realloc(*arr, c * elem);
        if (!p)
            return -1;
        *arr = p;
        *cap = c;
    }
    memcpy((char *)*arr + *n * elem, v, elem);
    (*n)++;
    return 0;
}

void calx_heap_free(calx_heap *h)
{
    if (!h)
        return;
    int guard = calx_runtime_guard_enter();
    cal_heapgraph_free(&h->g);
    if (h->file) {
        cal_heapfile_free(h->file);
        free(h->file);
    }
    for (uint32_t t = 0; t < h->ntypes; t++)
        free(h->types[t].name);
    free(h->types);
    cal_map_clear(&h->type_index);
    free(h->sample);
    cal_map_clear(&h->named);
    for (size_t i = 0; i < h->nnames; i++)
        free(h->names[i]);
    free(h->names);
    free(h);
    calx_runtime_guard_leave(guard);
}

/* The result object: a plain object holding the heap, not a capsule.  A
   capsule is allocated by the collector (PyObject_GC_New, even untracked),
   and so counts as one more object in the youngest generation: a scan
   would move gc.get_count(), and a collection could start one object
   sooner than without it.  This type is not the collector's: a scan
   leaves the collector's counts as they were. */
typedef struct heap_object {
    PyObject_HEAD calx_heap *h;
} heap_object;

static void heap_object_dealloc(PyObject *op)
{
    calx_heap_free(((heap_object *)op)->h);
    PyObject_Free(op);
}

/* Not formatted: PyVarObject_HEAD_INIT ends in a comma clang-format
   cannot see. */
/* clang-format off */
static PyTypeObject heap_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "calipers._calipers.HeapGraph",
    .tp_basicsize = sizeof(heap_object),
    .tp_dealloc = heap_object_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A heap scan's graph (calipers.heap.Heap holds it).",
};
/* clang-format on */

int calx_heap_ready(void) { return PyType_Ready(&heap_type); }

PyObject *calx_heap_new_graph(calx_heap *h)
{
    heap_object *o = PyObject_New(heap_object, &heap_type);
    if (!o) {
        calx_heap_free(h);
        return NULL;
    }
    o->h = h;
    return (PyObject *)o;
}

calx_heap *calx_heap_of(PyObject *op)
{
    if (!PyObject_TypeCheck(op, &heap_type)) {
        PyErr_Format(PyExc_TypeError, "expected a heap graph, not %.100s",
                     Py_TYPE(op)->tp_name);
        return NULL;
    }
    return ((heap_object *)op)->h;
}

/* ---- the walk ------------------------------------------------------------ */

/* A copy of the UTF-8 of an ASCII str (no encoding cache is built), or of
   `fallback`. */
static char *ascii_copy(PyObject *s, const char *fallback)
{
    if (s && PyUnicode_Check(s) && PyUnicode_IS_ASCII(s))
        return strdup((const char *)PyUnicode_DATA(s));
    return strdup(fallback);
}

static int is_trusted(const scan *s, PyCFunction fn)
{
    void *p;
    memcpy(&p, &fn, sizeof p);
    Dl_info info;
    if (!dladdr(p, &info))
        return 0;
    return info.dli_fbase == s->core_base ||
           (info.dli_fname && strstr(info.dli_fname, "/lib-dynload/"));
}

/* The name a report shows for a type. */
static char *type_name(scan *s, PyTypeObject *tp)
{
    if (!(tp->tp_flags & Py_TPFLAGS_HEAPTYPE))
        return strdup(tp->tp_name);
    PyHeapTypeObject *ht = (PyHeapTypeObject *)tp;
    PyObject *mod = tp->tp_dict ? PyDict_GetItem(tp->tp_dict, s->module_name) : NULL;
    char *q = ascii_copy(ht->ht_qualname, tp->tp_name);
    if (!q || !mod || !PyUnicode_Check(mod) || !PyUnicode_IS_ASCII(mod) ||
        strcmp((const char *)PyUnicode_DATA(mod), "builtins") == 0)
        return q;
    const char *m = (const char *)PyUnicode_DATA(mod);
    char *full = malloc(strlen(m) + strlen(q) + 2);
    if (full)
        sprintf(full, "%s.%s", m, q);
    free(q);
    return full;
}

/* The type id of tp, its info found on first sight.  NULL when out of
   memory. */
static type_info *type_of(scan *s, PyTypeObject *tp, uint32_t *tid)
{
    calx_heap *h = s->h;
    uint32_t t = cal_map_get(&h->type_index, (uint64_t)(uintptr_t)tp);
    if (t != CAL_MAP_NONE) {
        *tid = t;
        return &h->types[t];
    }
    type_info ti;
    memset(&ti, 0, sizeof ti);
    ti.addr = (uint64_t)(uintptr_t)tp;
    ti.name = type_name(s, tp);
    if (!ti.name)
        return NULL;
    PyObject *meth = _PyType_Lookup(tp, s->sizeof_name);
    if (meth && Py_IS_TYPE(meth, &PyMethodDescr_Type)) {
        PyMethodDef *d = ((PyMethodDescrObject *)meth)->d_method;
        if ((d->ml_flags & METH_NOARGS) && is_trusted(s, d->ml_meth))
            ti.sizeof_fn = d->ml_meth;
    }
    if (PyType_IS_GC(tp))
        ti.pre += (Py_ssize_t)(2 * sizeof(void *)); /* PyGC_Head */
#if PY_VERSION_HEX >= 0x030C0000
    if (PyType_GetFlags(tp) & ((1UL << 3) | (1UL << 4))) /* MANAGED_WEAKREF|DICT */
        ti.pre += (Py_ssize_t)(2 * sizeof(PyObject *));
#elif PY_VERSION_HEX >= 0x030B0000
    if (PyType_GetFlags(tp) & (1UL << 4)) /* Py_TPFLAGS_MANAGED_DICT */
        ti.pre += (Py_ssize_t)(2 * sizeof(PyObject *));
#endif
    /* The rule: the exact type's, else the nearest class's in the MRO
       that applies to subclasses; numpy arrays have theirs by default. */
    const rule *found = NULL;
    for (size_t r = 0; r < s->nrules && !found; r++)
        if (s->rules[r].tp == tp)
            found = &s->rules[r];
    PyObject *mro = tp->tp_mro;
    for (Py_ssize_t k = 0;
         !found && mro && PyTuple_Check(mro) && k < PyTuple_GET_SIZE(mro); k++)
        for (size_t r = 0; r < s->nrules && !found; r++)
            if (s->rules[r].subclasses &&
                (PyObject *)s->rules[r].tp == PyTuple_GET_ITEM(mro, k))
                found = &s->rules[r];
    if (found) {
        ti.rule = found->kind;
        ti.size = found->size;
        ti.sizer = found->sizer;
    } else if (s->ndarray && PyType_IsSubtype(tp, s->ndarray)) {
        ti.rule = RULE_NDARRAY;
        /* numpy's array_sizeof: plain C (the header, dimensions and
           strides, and the data when the array owns it). */
        if (meth && Py_IS_TYPE(meth, &PyMethodDescr_Type) &&
            (((PyMethodDescrObject *)meth)->d_method->ml_flags & METH_NOARGS))
            ti.sizeof_fn = ((PyMethodDescrObject *)meth)->d_method->ml_meth;
    }
    size_t n = h->ntypes, cap = h->types_cap;
    if (n >= CAL_HEAP_MERGED ||
        push((void **)&h->types, &n, &cap, sizeof ti, &ti) != 0 ||
        cal_map_put(&h->type_index, ti.addr, (uint32_t)h->ntypes) != 0) {
        free(ti.name);
        return NULL;
    }
    h->ntypes = (uint32_t)n;
    h->types_cap = (uint32_t)cap;
    *tid = (uint32_t)(n - 1);
    return &h->types[n - 1];
}

/* tp_traverse's visitor: the child's address joins the batch's buffer
   (expand_all interns the batch's children together). */
static int visit(PyObject *child, void *arg)
{
    scan *s = arg;
    if (!child || child == s->skip)
        return 0;
    if (s->nbuf == s->buf_cap) {
        size_t cap = s->buf_cap ? 2 * s->buf_cap : 4096;
        uint64_t *p = realloc(s->buf, cap * sizeof *p);
        if (!p) {
            s->failed = 1;
            return -1;
        }
        s->buf = p;
        s->buf_cap = cap;
    }
    s->buf[s->nbuf++] = (uint64_t)(uintptr_t)child;
    return 0;
}

/* Where the memory engine's lookup finds an object's block: the object
   less its pre-header. */
static const void *block_of(PyObject *op, const type_info *ti)
{
    return (const char *)op - ti->pre;
}

/* The dict of an instance, read without materialising one (3.11+ keeps
   attributes in inline values until someone asks for __dict__). */
static PyObject *dict_of(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
#if PY_VERSION_HEX >= 0x030B0000
    if (PyType_GetFlags(tp) & (1UL << 4)) { /* Py_TPFLAGS_MANAGED_DICT */
        uintptr_t p = ((uintptr_t *)op)[-3];
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
        if (p & 1) /* 3.12's PyDictOrValues holds the values */
            return NULL;
#endif
        return (PyObject *)p;
    }
#endif
    if (tp->tp_dictoffset > 0)
        return *(PyObject **)((char *)op + tp->tp_dictoffset);
    return NULL;
}

static void expand(scan *s, uint32_t i)
{
    calx_heap *h = s->h;
    PyObject *op = (PyObject *)(uintptr_t)h->g.addr[i];
    PyTypeObject *tp = Py_TYPE(op);
    uint32_t tid;
    type_info *ti = type_of(s, tp, &tid);
    if (!ti) {
        s->failed = 1;
        return;
    }
    h->g.type[i] = tid;
    if (ti->rule == RULE_IGNORE ||
        (s->ignored.len && cal_map_get(&s->ignored, h->g.addr[i]) != CAL_MAP_NONE))
        return; /* size 0, no children */
    Py_ssize_t size = -1;
    if (ti->rule == RULE_SIZE) {
        size = ti->size;
    } else if (PyType_Check(op) &&
               !(((PyTypeObject *)op)->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        size = 0; /* a static type: not heap memory */
    } else {
        if (ti->sizeof_fn) {
            PyObject *r = ti->sizeof_fn(op, NULL);
            if (r) {
                size = PyLong_AsSsize_t(r);
                Py_DECREF(r);
            }
            if (size < 0) {
                PyErr_Clear();
                size = -1;
            }
        }
        if (size < 0) {
            size = tp->tp_basicsize;
            if (tp->tp_itemsize) {
                Py_ssize_t k = Py_SIZE(op);
                size += (k < 0 ? -k : k) * tp->tp_itemsize;
            }
        }
        size += ti->pre;
    }
    h->g.size[i] = (uint64_t)size;
    if (ti->rule == RULE_SIZER &&
        push((void **)&s->sized, &s->nsized, &s->sized_cap, sizeof i, &i) != 0)
        s->failed = 1;
    if (PyObject_IS_GC(op) && tp->tp_traverse)
        (void)tp->tp_traverse(op, visit, s);
    if (ti->rule == RULE_NDARRAY && ((np_array *)op)->base)
        (void)visit(((np_array *)op)->base, s);
#if PY_VERSION_HEX >= 0x030D0000
    /* 3.13+ visits an instance's inline values, not the dict built over
       them once someone asked for __dict__: that dict is the instance's
       too. */
    if (PyType_GetFlags(tp) & (1UL << 4)) { /* Py_TPFLAGS_MANAGED_DICT */
        PyObject *d = dict_of(op);
        if (d)
            (void)visit(d, s);
    }
#endif
    if (ti->rule == RULE_VIRTUAL) {
        PyObject *d = dict_of(op);
        uint64_t pair[2] = {i, (uint64_t)(uintptr_t)d};
        if (d &&
            push((void **)&s->virt, &s->nvirt, &s->virt_cap, sizeof pair, pair) != 0)
            s->failed = 1;
    }
    if (s->sampled) {
        if (i >= s->sample_cap) {
            size_t cap = s->sample_cap ? 2 * s->sample_cap : 4096;
            uint32_t *p = realloc(h->sample, cap * sizeof *p);
            if (!p) {
                s->failed = 1;
                return;
            }
            memset(p + s->sample_cap, 0, (cap - s->sample_cap) * sizeof *p);
            h->sample = p;
            s->sample_cap = cap;
        }
        calx_live_sample smp;
        if (calx_memory_lookup(block_of(op, ti), 0, &smp))
            h->sample[i] = smp.node + 1; /* CAL_STACKS_NONE + 1 == 0 */
    }
}

/* Expand every node not expanded yet (and those they add), a batch at a
   time: each node of the batch is sized and traversed, its children's
   addresses buffered, then the batch's edges are interned together
   (cal_heapgraph_add_batch prefetches ahead), and the next objects to
   read are prefetched while one is read.  The graph is the one that
   expanding the nodes one at a time makes: the same order. */
static void expand_all(scan *s)
{
    cal_heapgraph *g = &s->h->g;
    while (!s->failed && g->expanded < g->n) {
        size_t first = g->expanded, count = g->n - first;
        if (count > EXPAND_BATCH)
            count = EXPAND_BATCH;
        s->nbuf = 0;
        for (size_t k = 0; k < count && !s->failed; k++) {
            if (k + 4 < count)
                __builtin_prefetch((const void *)(uintptr_t)g->addr[first + k + 4]);
            size_t before = s->nbuf;
            expand(s, (uint32_t)(first + k));
            s->deg[k] = (uint32_t)(s->nbuf - before);
        }
        if (!s->failed && cal_heapgraph_add_batch(g, count, s->deg, s->buf) != 0)
            s->failed = 1;
    }
}

static int gc_visit(PyObject *op, void *arg)
{
    scan *s = arg;
    uint32_t node;
    int added;
    if (op != s->skip &&
        cal_heapgraph_intern(&s->h->g, (uint64_t)(uintptr_t)op, &node, &added) != 0) {
        s->failed = 1;
        return 0;
    }
    return 1;
}

/* Enumerate the collector's objects not reached yet, as new nodes, with
   calx_gc_visit: no allocation, no Python code, so the collector's counts
   and lists are as they were.  Where the interpreter's layout is unknown
   (3.9-3.11 built with -Dnewest_known_python lower), gc.get_objects()
   with the collector paused, so that building its list cannot start a
   collection (which could run finalizers); the list is left out of the
   graph.  0, or -1 with an exception set. */
static int add_gc_objects(scan *s)
{
    if (calx_gc_visit(gc_visit, s) == 0)
        return 0;
    PyObject *gc = PyImport_ImportModule("gc");
    if (!gc)
        return -1;
    PyObject *was = PyObject_CallMethod(gc, "isenabled", NULL);
    PyObject *r = was ? PyObject_CallMethod(gc, "disable", NULL) : NULL;
    Py_XDECREF(r);
    PyObject *list = r ? PyObject_CallMethod(gc, "get_objects", NULL) : NULL;
    int rc = -1;
    if (list && PyList_Check(list)) {
        s->skip = list;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(list) && !s->failed; k++)
            gc_visit(PyList_GET_ITEM(list, k), s);
        expand_all(s); /* while the list holds them all */
        s->skip = NULL;
        rc = 0;
    }
    Py_XDECREF(list);
    if (was == Py_True) {
        PyObject *e = PyObject_CallMethod(gc, "enable", NULL);
        if (!e)
            rc = -1;
        Py_XDECREF(e);
    }
    Py_XDECREF(was);
    Py_DECREF(gc);
    return rc;
}

/* Name node i (taking `name`; a node keeps its first name).  0, or -1
   when out of memory. */
static int add_name(calx_heap *h, size_t i, char *name)
{
    size_t n = h->nnames, cap = h->names_cap;
    if (name && cal_map_get(&h->named, i) != CAL_MAP_NONE) {
        free(name);
        return 0;
    }
    if (!name || push((void **)&h->names, &n, &cap, sizeof name, &name) != 0 ||
        cal_map_put(&h->named, i, (uint32_t)h->nnames) != 0) {
        free(name);
        return -1;
    }
    h->nnames = n;
    h->names_cap = cap;
    return 0;
}

/* Names worth showing in paths: modules' (and their dicts'), types',
   functions', and the explicit roots'. */
static void name_nodes(scan *s)
{
    calx_heap *h = s->h;
    for (size_t i = 0; i < h->g.n && !s->failed; i++) {
        PyObject *op = (PyObject *)(uintptr_t)h->g.addr[i];
        char *name = NULL;
        if (h->g.addr[i] == h->modules) {
            name = strdup("sys.modules");
        } else if (h->g.addr[i] == h->builtins) {
            name = strdup("builtins");
        } else if (PyModule_Check(op)) {
            PyObject *d = PyModule_GetDict(op);
            PyObject *nm = d ? PyDict_GetItem(d, s->name_name) : NULL;
            name = ascii_copy(nm, "?");
            /* Its namespace gets a name too ("m.__dict__"): it is the
               module's, not the program's data (Heap.summary). */
            int64_t dn = d ? cal_heapgraph_lookup(&h->g, (uint64_t)(uintptr_t)d) : -1;
            char *dname = name && dn >= 0 ? malloc(strlen(name) + 10) : NULL;
            if (dname) {
                sprintf(dname, "%s.__dict__", name);
                if (add_name(h, (size_t)dn, dname) != 0)
                    s->failed = 1;
            }
        } else if (PyType_Check(op)) {
            uint32_t t = cal_map_get(&h->type_index, h->g.addr[i]);
            name = t != CAL_MAP_NONE ? strdup(h->types[t].name)
                                     : type_name(s, (PyTypeObject *)op);
        } else if (PyFunction_Check(op)) {
            name = ascii_copy(((PyFunctionObject *)op)->func_qualname, "?");
        } else {
            continue;
        }
        if (add_name(h, i, name) != 0) {
            s->failed = 1;
            return;
        }
    }
}

/* Virtual objects: each owner takes its dict's bytes; the dict stays in
   the graph (for paths), with no bytes, left out of the totals. */
static void merge_virtual(scan *s)
{
    cal_heapgraph *g = &s->h->g;
    for (size_t k = 0; k < s->nvirt; k++) {
        uint64_t owner = s->virt[2 * k], d = s->virt[2 * k + 1];
        int64_t dn = cal_heapgraph_lookup(g, d);
        if (dn < 0 || (uint64_t)dn == owner || (g->type[dn] & CAL_HEAP_MERGED))
            continue;
        g->size[owner] += g->size[dn];
        g->size[dn] = 0;
        g->type[dn] |= CAL_HEAP_MERGED;
    }
}

/* Sizer callables, after the walk: the objects are held while they run
   (a sizer may free others).  0, or -1 with an exception set. */
static int run_sizers(scan *s)
{
    calx_heap *h = s->h;
    if (!s->nsized)
        return 0;
    PyObject **objs = PyMem_Malloc(s->nsized * sizeof *objs);
    if (!objs) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t k = 0; k < s->nsized; k++) {
        objs[k] = (PyObject *)(uintptr_t)h->g.addr[s->sized[k]];
        Py_INCREF(objs[k]);
    }
    int rc = 0;
    for (size_t k = 0; k < s->nsized && rc == 0; k++) {
        uint32_t t = h->g.type[s->sized[k]] & ~CAL_HEAP_MERGED;
        PyObject *r = PyObject_CallOneArg(h->types[t].sizer, objs[k]);
        Py_ssize_t v = r ? PyLong_AsSsize_t(r) : -1;
        Py_XDECREF(r);
        if (v < 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError,
                             "a heap sizer returned a negative size for a %s",
                             h->types[t].name);
            rc = -1;
        } else {
            h->g.size[s->sized[k]] = (uint64_t)v;
        }
    }
    for (size_t k = 0; k < s->nsized; k++)
        Py_DECREF(objs[k]);
    PyMem_Free(objs);
    return rc;
}

/* Read heap_scan's rules into s.  0, or -1 with an exception set. */
static int read_rules(scan *s, PyObject *rules, PyObject *objects)
{
    if (!PyList_Check(rules) || !PyList_Check(objects)) {
        PyErr_SetString(PyExc_TypeError,
                        "heap_scan(rules: list, objects: list, ndarray)");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(rules);
    s->rules = PyMem_Calloc((size_t)n + 1, sizeof *s->rules);
    if (!s->rules) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *tp, *value;
        int sub, kind;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(rules, k), "O!piO;a heap rule",
                              &PyType_Type, &tp, &sub, &kind, &value))
            return -1;
        rule *r = &s->rules[s->nrules++];
        r->tp = (PyTypeObject *)tp;
        r->subclasses = sub;
        r->kind = kind == 0 ? RULE_IGNORE : kind == 2 ? RULE_VIRTUAL : RULE_SIZE;
        if (kind == 1 && PyCallable_Check(value)) {
            r->kind = RULE_SIZER;
            Py_INCREF(value); /* a sizer may change the rules list */
            r->sizer = value;
        } else if (kind == 1) {
            r->size = PyLong_AsSsize_t(value);
            if (r->size < 0) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "a heap size rule must be >= 0");
                return -1;
            }
        }
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(objects); k++)
        if (cal_map_put(&s->ignored, (uint64_t)(uintptr_t)PyList_GET_ITEM(objects, k),
                        1)) {
            PyErr_NoMemory();
            return -1;
        }
    return 0;
}

static int explicit_root(scan *s, PyObject *op)
{
    uint32_t node;
    int added;
    if (!op)
        return 0;
    if (cal_heapgraph_intern(&s->h->g, (uint64_t)(uintptr_t)op, &node, &added) != 0 ||
        (added && cal_heapgraph_add_root(&s->h->g, node) != 0)) {
        s->failed = 1;
        return -1;
    }
    return 0;
}

PyObject *calx_heap_scan(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *rules, *objects, *ndarray;
    if (!PyArg_ParseTuple(args, "OOO:heap_scan", &rules, &objects, &ndarray))
        return NULL;
#ifdef Py_GIL_DISABLED
    PyErr_SetString(PyExc_RuntimeError,
                    "heap scans are not supported on free-threaded Python (no GIL "
                    "stops other threads from changing the heap mid-walk)");
    return NULL;
#endif
    scan s;
    memset(&s, 0, sizeof s);
    PyObject *cap = NULL;
    int guard = calx_runtime_guard_enter();
    s.h = calloc(1, sizeof *s.h);
    s.sizeof_name = PyUnicode_InternFromString("__sizeof__");
    s.name_name = PyUnicode_InternFromString("__name__");
    s.module_name = PyUnicode_InternFromString("__module__");
    if (!s.h || !s.sizeof_name || !s.name_name || !s.module_name) {
        PyErr_NoMemory();
        goto done;
    }
    cal_heapgraph_init(&s.h->g);
    if (read_rules(&s, rules, objects) != 0)
        goto done;
    s.ndarray =
        ndarray != Py_None && PyType_Check(ndarray) ? (PyTypeObject *)ndarray : NULL;
    {
        PyCFunction probe = (PyCFunction)(void (*)(void))PyObject_Malloc;
        void *p;
        memcpy(&p, &probe, sizeof p);
        Dl_info info;
        s.core_base = dladdr(p, &info) ? info.dli_fbase : NULL;
    }
    s.sampled = calx_memory_attached();
    PyObject *modules = PyImport_GetModuleDict(), *builtins = PyEval_GetBuiltins();
    s.h->modules = (uint64_t)(uintptr_t)modules;
    s.h->builtins = (uint64_t)(uintptr_t)builtins;

    double t0 = now_s();
    explicit_root(&s, modules);
    explicit_root(&s, builtins);
    expand_all(&s);
    size_t first = s.h->g.n;
    if (!s.failed && add_gc_objects(&s) != 0)
        goto done;
    expand_all(&s);
    if (!s.failed)
        merge_virtual(&s);
    if (!s.failed)
        name_nodes(&s);
    if (s.failed) {
        PyErr_NoMemory();
        goto done;
    }
    s.h->walk_s = now_s() - t0;
    calx_runtime_guard_leave(guard);
    int rc = run_sizers(&s);
    guard = calx_runtime_guard_enter();
    if (rc != 0)
        goto done;
    /* The walk's peak: the graph's then, and the largest batch of
       children beside it (both at their most, so at most this).  The
       buffer goes before the graph is finished. */
    size_t walked = s.h->g.peak + s.buf_cap * sizeof *s.buf;
    free(s.buf);
    s.buf = NULL;
    s.buf_cap = 0;
    t0 = now_s();
    if (cal_heapgraph_finish(&s.h->g, first) != 0 ||
        cal_heapgraph_dominators(&s.h->g) != 0) {
        PyErr_NoMemory();
        goto done;
    }
    s.h->analysis_s = now_s() - t0;
    /* The most the scan took at once: the graph's peak (cal_heapgraph.h:
       its arrays and the temporaries of finishing it and of the
       dominators), or the walk's, with what lives throughout beside it
       (the types, the sampled lines). */
    s.h->peak_bytes = (walked > s.h->g.peak ? walked : s.h->g.peak) +
                      s.h->types_cap * sizeof(type_info) + s.sample_cap * 4;
    cap = calx_heap_new_graph(s.h);
    s.h = NULL;
done:
    calx_runtime_guard_leave(guard);
    if (s.h)
        calx_heap_free(s.h);
    guard = calx_runtime_guard_enter();
    free(s.virt);
    free(s.sized);
    free(s.buf);
    cal_map_clear(&s.ignored);
    calx_runtime_guard_leave(guard);
    for (size_t k = 0; k < s.nrules; k++)
        Py_XDECREF(s.rules[k].sizer);
    PyMem_Free(s.rules);
    Py_XDECREF(s.sizeof_name);
    Py_XDECREF(s.name_name);
    Py_XDECREF(s.module_name);
    return cap;
}
