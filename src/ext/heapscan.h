/*
 * heapscan — calipers.heap's engine: walks the live Python heap from the
 * roots into a cal_heapgraph (src/core/cal_heapgraph.h), with each
 * object's shallow size, type and sampled allocation (heapscan.c), then
 * answers the questions of src/calipers/heap.py (heapquery.c).  Every
 * function is called with the GIL held from the calipers package, and
 * returns NULL with an exception set on error.  See docs/INTERNALS.md,
 * "Heap scanner".
 */
#ifndef CALX_HEAPSCAN_H
#define CALX_HEAPSCAN_H

#include <Python.h>

/* heap_scan(rules, objects, ndarray) -> graph: the scan; rules: a list
   of (type, subclasses: bool, kind, value), kind 0 ignore, 1 size
   (value: int or callable), 2 virtual; objects: a list of objects whose
   rule is "ignore"; ndarray: numpy.ndarray or None. */
PyObject *calx_heap_scan(PyObject *self, PyObject *args);
/* Ready the graph objects' type (module init).  0, or -1 with an
   exception set. */
int calx_heap_ready(void);
/* heap_info(graph) -> dict: nodes, edges, roots, bytes, seconds... */
PyObject *calx_heap_info(PyObject *self, PyObject *args);
/* heap_types(graph) -> [name, ...] by type id */
PyObject *calx_heap_types(PyObject *self, PyObject *args);
/* heap_by_type(graph) -> [(type id, count, size, retained), ...] */
PyObject *calx_heap_by_type(PyObject *self, PyObject *args);
/* heap_by_line(graph) -> {(filename, lineno): [count, size, retained]}: the
   sampled objects by the innermost line of their allocation */
PyObject *calx_heap_by_line(PyObject *self, PyObject *args);
/* heap_node(graph, index) -> (address, type id, size, retained, idom,
   name or None) */
PyObject *calx_heap_node(PyObject *self, PyObject *args);
/* heap_find(graph, obj) -> index or -1 (by identity) */
PyObject *calx_heap_find(PyObject *self, PyObject *args);
/* heap_largest(graph, n, by_retained) -> [index, ...] */
PyObject *calx_heap_largest(PyObject *self, PyObject *args);
/* heap_of_type(graph, type id) -> [index, ...] */
PyObject *calx_heap_of_type(PyObject *self, PyObject *args);
/* heap_path(graph, index) -> ([index, ...], [object, ...]): a shortest
   path from a root, and the objects of its longest prefix still alive
   now, each still referring to the next (checked, so that their edges can
   be named). */
PyObject *calx_heap_path(PyObject *self, PyObject *args);

#endif
