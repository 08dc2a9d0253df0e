/*
 * traces — the live sampled allocations as calipers.memory sees them: raw
 * traces (domain, size, frames, total_nframe, block_size, root_kept), the
 * traceback of one object, the traced footprint.  See traces.h.
 *
 * HOW IT WORKS
 *
 * The memory engine (memory.c) tracks every sampled allocation until it
 * is freed, with the stack table's node of the stack that made it.  A
 * node is a unique stack: the path from it to its thread's root is the
 * allocation's traceback, so a traceback costs nothing per allocation
 * and equal stacks share one node.  Here each node met is turned into a
 * tuple of (filename, lineno) frames once per call, most recent first,
 * and every trace of that node shares the tuple.
 *
 * A stack deeper than the limit keeps both ends: the innermost
 * limit - limit/4 frames and the outermost limit/4 (root_kept).  Cutting
 * only at the root (tracemalloc) loses the frames where a program's
 * paths meet, which is what grouping by traceback needs (seed 002).
 * Below ROOT_FROM frames the limit means what tracemalloc's does, the
 * innermost frames only: start(1) asks for the allocating line, and a
 * short limit has no room for both ends to say much.
 *
 * LIMITATIONS
 *   - When the stack table is full (CAL_STACKS_MAX_NODES), a new stack is
 *     credited to its deepest known caller: its traceback stops there.
 *   - An allocation made by a thread without the GIL is credited to the
 *     profile but not tracked (memory.c), so it is in no snapshot.
 */
#include "traces.h" /* Python.h first */

#include "memory.h"
#include "session.h"

#include <stdlib.h>

/* Frames elided from a deep stack are taken from its middle: the outermost
   limit / ROOT_SHARE frames are kept, when the limit is at least ROOT_FROM
   (the default, 64, keeps 16). */
#define ROOT_SHARE 4
#define ROOT_FROM 16

/* What one call builds, so that equal nodes and frames share tuples. */
typedef struct tb_cache {
    const cal_profile *profile;
    const cal_stacks *stacks;
    int limit;
    size_t nnodes;      /* nodes when the call began (what samples name) */
    PyObject **by_node; /* (frames, total, root_kept) per node, or NULL */
    PyObject *frames;   /* (file id, line) -> (filename, lineno) */
    PyObject *unknown;  /* the traceback of an allocation with no stack */
    uint32_t *path;     /* scratch: one node's path, innermost first */
    size_t path_cap;
} tb_cache;

static int cache_init(tb_cache *c, int limit)
{
    memset(c, 0, sizeof *c);
    c->limit = limit;
    c->profile = calx_session_profile();
    c->stacks = c->profile ? cal_profile_stacks_at(c->profile) : NULL;
    /* What this call allocates may be sampled and add nodes meanwhile:
       the samples it reports were taken before, and name none of them. */
    c->nnodes = c->stacks ? c->stacks->nnodes : 0;
    c->by_node = PyMem_Calloc(c->nnodes ? c->nnodes : 1, sizeof(PyObject *));
    c->frames = PyDict_New();
    c->path_cap = 64;
    c->path = PyMem_Malloc(c->path_cap * sizeof(uint32_t));
    if (!c->by_node || !c->frames || !c->path) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void cache_free(tb_cache *c)
{
    for (size_t i = 0; c->by_node && i < c->nnodes; i++)
        Py_XDECREF(c->by_node[i]);
    PyMem_Free(c->by_node);
    PyMem_Free(c->path);
    Py_XDECREF(c->frames);
    Py_XDECREF(c->unknown);
}

/* The (filename, lineno) tuple of a node, shared by equal frames. */
static PyObject *frame_of(tb_cache *c, const cal_stack_node *n)
{
    const cal_stack_frame *f = &c->stacks->frames[n->frame];
    PyObject *key = Py_BuildValue("(Ii)", f->file, (int)n->line);
    if (!key)
        return NULL;
    PyObject *t = PyDict_GetItemWithError(c->frames, key);
    if (t) {
        Py_DECREF(key);
        Py_INCREF(t);
        return t;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    const char *file = cal_profile_string_at(c->profile, f->file);
    t = Py_BuildValue("(si)", file ? file : "<unknown>", (int)n->line);
    if (t && PyDict_SetItem(c->frames, key, t) != 0)
        Py_CLEAR(t);
    Py_DECREF(key);
    return t;
}

/* (frames, total_nframe, root_kept) for a stack with no Python frame. */
static PyObject *unknown_traceback(tb_cache *c)
{
    if (!c->unknown)
        c->unknown = Py_BuildValue("(((si))ii)", "<unknown>", 0, 1, 0);
    Py_XINCREF(c->unknown);
    return c->unknown;
}

/* (frames, total_nframe, root_kept) for `node`, built once per call. */
static PyObject *traceback_of(tb_cache *c, uint32_t node)
{
    if (!c->stacks || node >= c->nnodes)
        return unknown_traceback(c);
    if (c->by_node[node]) {
        Py_INCREF(c->by_node[node]);
        return c->by_node[node];
    }
    size_t total = 0;
    for (uint32_t i = node; i != CAL_STACKS_NONE; i = c->stacks->nodes[i].parent) {
        if (c->stacks->nodes[i].frame == CAL_STACKS_NONE)
            continue; /* the thread's root */
        if (total == c->path_cap) {
            uint32_t *p = PyMem_Realloc(c->path, 2 * c->path_cap * sizeof(uint32_t));
            if (!p) {
                PyErr_NoMemory();
                return NULL;
            }
            c->path = p;
            c->path_cap *= 2;
        }
        c->path[total++] = i;
    }
    if (total == 0)
        return unknown_traceback(c);
    size_t limit = (size_t)c->limit, leaf = total, root = 0;
    if (total > limit) {
        root = limit >= ROOT_FROM ? limit / ROOT_SHARE : 0;
        leaf = limit - root;
    }
    PyObject *frames = PyTuple_New((Py_ssize_t)(leaf + root));
    if (!frames)
        return NULL;
    for (size_t k = 0; k < leaf + root; k++) {
        size_t at = k < leaf ? k : total - root + (k - leaf);
        PyObject *f = frame_of(c, &c->stacks->nodes[c->path[at]]);
        if (!f) {
            Py_DECREF(frames);
            return NULL;
        }
        PyTuple_SET_ITEM(frames, (Py_ssize_t)k, f);
    }
    PyObject *tb = Py_BuildValue("(Nnn)", frames, (Py_ssize_t)total, (Py_ssize_t)root);
    if (!tb)
        return NULL;
    c->by_node[node] = tb;
    Py_INCREF(tb);
    return tb;
}

static int check_limit(int limit)
{
    if (limit < 1 || limit > CALX_TRACES_MAX_LIMIT) {
        PyErr_Format(PyExc_ValueError, "the number of frames must be in range [1; %d]",
                     CALX_TRACES_MAX_LIMIT);
        return -1;
    }
    return 0;
}

static int check_attached(void)
{
    if (calx_memory_attached())
        return 0;
    PyErr_SetString(PyExc_RuntimeError,
                    "calipers: memory is not being profiled in this process "
                    "(run the program with `calipers run`, without --cpu-only)");
    return -1;
}

PyObject *calx_traces_available(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyBool_FromLong(calx_memory_attached());
}

PyObject *calx_traces_mark(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (check_attached() != 0)
        return NULL;
    calx_memory_mark();
    Py_RETURN_NONE;
}

PyObject *calx_traces_traced(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    int64_t current, peak;
    calx_memory_traced(&current, &peak);
    return Py_BuildValue("(LL)", (long long)current, (long long)peak);
}

PyObject *calx_traces_window(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    int64_t allocated;
    calx_window_line *lines;
    size_t n;
    if (calx_memory_window(&allocated, &lines, &n) != 0)
        return NULL;
    const cal_profile *profile = calx_session_profile();
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        const char *file =
            profile ? cal_profile_string_at(profile, lines[i].file) : NULL;
        PyObject *t = Py_BuildValue("(siL)", file ? file : "<unknown>",
                                    (int)lines[i].line, (long long)lines[i].bytes);
        if (!t)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    calx_memory_window_free(lines);
    if (!list)
        return NULL;
    return Py_BuildValue("(LN)", (long long)allocated, list);
}

PyObject *calx_traces_reset_peak(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    calx_memory_reset_peak();
    Py_RETURN_NONE;
}

PyObject *calx_traces_list(PyObject *self, PyObject *args)
{
    (void)self;
    int limit, since_mark;
    if (!PyArg_ParseTuple(args, "ip:memory_traces", &limit, &since_mark))
        return NULL;
    if (check_limit(limit) != 0 || check_attached() != 0)
        return NULL;
    calx_live_sample *live;
    size_t n;
    if (calx_memory_live(since_mark, &live, &n) != 0)
        return NULL;
    /* The list is built unsampled, as tracemalloc builds its own traces
       untraced: with every allocation sampled (--memory-interval 1) the
       objects of a snapshot of millions of traces would be traced too. */
    int was = calx_memory_set_unsampled(1);
    tb_cache c;
    PyObject *out = NULL;
    if (cache_init(&c, limit) != 0)
        goto done;
    out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out && i < n; i++) {
        const calx_live_sample *s = &live[i];
        PyObject *tb = traceback_of(&c, s->node);
        PyObject *t =
            tb ? Py_BuildValue("(iLOOLO)", s->python ? 0 : 1, (long long)s->weight,
                               PyTuple_GET_ITEM(tb, 0), PyTuple_GET_ITEM(tb, 1),
                               (long long)s->size, PyTuple_GET_ITEM(tb, 2))
               : NULL;
        Py_XDECREF(tb);
        if (!t) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, t);
    }
done:
    cache_free(&c);
    calx_memory_live_free(live);
    calx_memory_set_unsampled(was);
    return out;
}

/* Where an object's block begins: the object less what CPython puts in
   front of it (the GC links; the managed dict and weak references from
   3.11), as tracemalloc's _PyType_PreHeaderSize. */
static const void *block_of(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    size_t pre = 0;
#ifndef Py_GIL_DISABLED
    if (PyType_IS_GC(tp))
        pre += 2 * sizeof(void *); /* PyGC_Head */
#endif
#if PY_VERSION_HEX >= 0x030C0000
    if (PyType_GetFlags(tp) & ((1UL << 3) | (1UL << 4))) /* MANAGED_WEAKREF|DICT */
        pre += 2 * sizeof(PyObject *);
#elif PY_VERSION_HEX >= 0x030B0000
    if (PyType_GetFlags(tp) & (1UL << 4)) /* Py_TPFLAGS_MANAGED_DICT */
        pre += 2 * sizeof(PyObject *);
#endif
    return (const char *)obj - pre;
}

PyObject *calx_traces_object(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj;
    int limit;
    if (!PyArg_ParseTuple(args, "Oi:memory_object_traceback", &obj, &limit))
        return NULL;
    if (check_limit(limit) != 0)
        return NULL;
    calx_live_sample s;
    if (!calx_memory_lookup(block_of(obj), 1, &s))
        Py_RETURN_NONE;
    tb_cache c;
    PyObject *tb = NULL;
    if (cache_init(&c, limit) == 0)
        tb = traceback_of(&c, s.node);
    cache_free(&c);
    return tb;
}

PyObject *calx_traces_info(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    size_t tracked = calx_memory_tracked();
    const cal_profile *p = calx_session_profile();
    const cal_stacks *st = p ? cal_profile_stacks_at(p) : NULL;
    /* The tracking table keeps its slots at most half full; the stack
       table's nodes and frames come with a map entry each. */
    size_t overhead = tracked * 2 * 32;
    if (st)
        overhead += st->nodes_cap * (sizeof(cal_stack_node) + 24) +
                    st->frames_cap * (sizeof(cal_stack_frame) + 24);
    return Py_BuildValue("{s:L,s:n,s:n}", "alloc_mean",
                         (long long)calx_memory_alloc_mean(), "tracked",
                         (Py_ssize_t)tracked, "overhead_bytes", (Py_ssize_t)overhead);
}

/* One frames object's sums (calx_traces_sums). */
typedef struct frames_sum {
    PyObject *frames, *total; /* borrowed from the traces list */
    PyObject *root_kept;
    long long size, count;
    double fcount; /* the count once a fraction was added (has_float) */
    int has_float;
    double var_size, var_count;
} frames_sum;

/* Add trace `raw` to its frames' sums.  0, or -1 with an exception set. */
static int sum_one(PyObject *raw, double mean, cal_map *index, frames_sum **sums,
                   size_t *n, size_t *cap)
{
    Py_ssize_t len = PyTuple_Check(raw) ? PyTuple_GET_SIZE(raw) : 0;
    if (len < 4) {
        PyErr_SetString(PyExc_TypeError,
                        "a raw trace is a tuple (domain, size, frames, "
                        "total_nframe[, block_size, root_kept])");
        return -1;
    }
    PyObject *frames = PyTuple_GET_ITEM(raw, 2), *total = PyTuple_GET_ITEM(raw, 3);
    int overflow;
    long long size = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(raw, 1), &overflow);
    long long block = size;
    if (len > 4 && !overflow && !PyErr_Occurred())
        block = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(raw, 4), &overflow);
    if (overflow || PyErr_Occurred()) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_OverflowError, "a trace's size does not fit 64 bits");
        return -1;
    }
    uint64_t key = (uint64_t)(uintptr_t)frames;
    size_t cursor = 0;
    uint32_t at = cal_map_find(index, cal_hash_u64(key), &cursor);
    while (at != CAL_MAP_NONE && (*sums)[at].frames != frames)
        at = cal_map_find(index, cal_hash_u64(key), &cursor);
    frames_sum *e;
    if (at == CAL_MAP_NONE) {
        if (*n == *cap) {
            size_t grown = *cap ? 2 * *cap : 64;
            frames_sum *p = PyMem_Realloc(*sums, grown * sizeof *p);
            if (!p) {
                PyErr_NoMemory();
                return -1;
            }
            *sums = p;
            *cap = grown;
        }
        if (cal_map_put(index, cal_hash_u64(key), (uint32_t)*n) != 0) {
            PyErr_NoMemory();
            return -1;
        }
        e = &(*sums)[(*n)++];
        memset(e, 0, sizeof *e);
        e->frames = frames;
        e->total = total;
        e->root_kept = len > 5 ? PyTuple_GET_ITEM(raw, 5) : NULL;
    } else {
        e = &(*sums)[at];
        if (e->total != Py_None) {
            int same = PyObject_RichCompareBool(e->total, total, Py_EQ);
            if (same < 0)
                return -1;
            if (!same)
                e->total = Py_None; /* stacks of different depths */
        }
    }
    e->size += size;
    if (block == size || block <= 0) {
        if (e->has_float)
            e->fcount += 1.0;
        else
            e->count++;
        return 0;
    }
    double s = (double)size, b = (double)block, c = s / b;
    if (!e->has_float) {
        e->fcount = (double)e->count;
        e->has_float = 1;
    }
    e->fcount += c;
    if (mean > 0 && b >= mean) {
        e->var_size += b * mean / 12.0;
        e->var_count += mean / (12.0 * b);
    } else if (s > b) {
        e->var_size += s * (s - b);
        e->var_count += c * (c - 1.0);
    }
    return 0;
}

PyObject *calx_traces_sums(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *traces;
    double mean;
    if (!PyArg_ParseTuple(args, "Od:snapshot_sums", &traces, &mean))
        return NULL;
    PyObject *seq = PySequence_Fast(traces, "raw traces must be a sequence");
    if (!seq)
        return NULL;
    /* Built unsampled, like the traces (a million traces, few sums). */
    int was = calx_memory_set_unsampled(1);
    cal_map index;
    cal_map_init(&index);
    frames_sum *sums = NULL;
    size_t n = 0, cap = 0;
    PyObject *out = NULL, *zero = PyLong_FromLong(0);
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    if (!zero)
        goto done;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < len; i++)
        if (sum_one(items[i], mean, &index, &sums, &n, &cap) != 0)
            goto done;
    out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out && i < n; i++) {
        const frames_sum *e = &sums[i];
        PyObject *count = e->has_float ? PyFloat_FromDouble(e->fcount)
                                       : PyLong_FromLongLong(e->count);
        PyObject *entry =
            count ? Py_BuildValue("[OOOLNdd]", e->frames, e->total,
                                  e->root_kept ? e->root_kept : zero,
                                  (long long)e->size, count, e->var_size, e->var_count)
                  : NULL;
        if (!entry) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, entry);
    }
done:
    Py_XDECREF(zero);
    PyMem_Free(sums);
    cal_map_clear(&index);
    Py_DECREF(seq);
    calx_memory_set_unsampled(was);
    return out;
}
