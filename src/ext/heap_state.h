/*
 * heap_state — a heap scan's result, as the scanner (heapscan.c) makes it
 * and the dump files (heapdump.c) save and load it: the graph object
 * behind calipers.heap.Heap.  Private to src/ext; GIL held for every use.
 */
#ifndef CALX_HEAP_STATE_H
#define CALX_HEAP_STATE_H

#include <Python.h>

#include "cal_heapfile.h"
#include "cal_heapgraph.h"
#include "cal_map.h"

enum { RULE_NONE, RULE_IGNORE, RULE_SIZE, RULE_VIRTUAL, RULE_SIZER, RULE_NDARRAY };

/* numpy's PyArrayObject_fields, as far as `base` (numpy/ndarraytypes.h:
   the layout has been the same since numpy 1.7, and numpy 2 kept it). */
typedef struct np_array {
    PyObject_HEAD char *data;
    int nd;
    Py_ssize_t *dimensions, *strides;
    PyObject *base;
} np_array;

/* What one type's objects get, found once per type. */
typedef struct type_info {
    uint64_t addr;         /* the type object (0 in a loaded heap) */
    char *name;            /* module.qualname (builtins: qualname) */
    PyCFunction sizeof_fn; /* a trusted C __sizeof__, or NULL */
    int rule;
    Py_ssize_t size; /* RULE_SIZE */
    PyObject *sizer; /* RULE_SIZER, borrowed from the scan's rules, during the scan */
    Py_ssize_t pre;  /* bytes before the object: GC head, managed dict */
} type_info;

/* The scan's result: the capsule's content. */
typedef struct calx_heap {
    cal_heapgraph g;
    type_info *types;
    uint32_t ntypes, types_cap;
    cal_map type_index; /* type address -> type id */
    uint32_t *sample;   /* per node: the allocation's stack node + 1, or 0 */
    cal_map named;      /* node -> index in names */
    char **names;       /* modules', types' and functions' names */
    size_t nnames, names_cap;
    uint64_t modules, builtins; /* the explicit roots */
    double walk_s, analysis_s;
    size_t peak_bytes;
    /* A heap read from a dump (calipers.heap.load): its addresses are
       another moment's, maybe another process's, and are never
       dereferenced; the allocation lines are the file's. */
    cal_heapfile *file;
} calx_heap;

/* The heap held by a graph object (heap_scan's, heap_read's result), or
   NULL with TypeError set. */
calx_heap *calx_heap_of(PyObject *graph);
/* A new graph object owning h (freed with it; an object the collector
   does not allocate, so that a scan leaves its counts alone), or NULL
   with an exception set and h freed. */
PyObject *calx_heap_new_graph(calx_heap *h);
void calx_heap_free(calx_heap *h);
/* The line that allocated node i (an object calipers sampled): its file
   name (borrowed) and line; NULL when unknown. */
const char *calx_heap_node_line(const calx_heap *h, size_t i, int *line);

#endif
