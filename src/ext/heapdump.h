/*
 * heapdump — calipers.heap's dump files: a scan saved (Heap.save) and
 * loaded back (calipers.heap.load); the file is src/core/cal_heapfile's
 * (docs/FORMAT.md, "Heap dump files").  Every function is called with the
 * GIL held and returns NULL with an exception set on error: ValueError
 * for bytes that are not a valid heap dump (one line saying why),
 * OSError when the file cannot be written or read.
 */
#ifndef CALX_HEAPDUMP_H
#define CALX_HEAPDUMP_H

#include <Python.h>

/* heap_encode(graph, meta_json) -> bytes */
PyObject *calx_heap_encode(PyObject *self, PyObject *args);
/* heap_write(graph, path, meta_json): created exclusively, renamed over
   path; only a regular file is replaced */
PyObject *calx_heap_write(PyObject *self, PyObject *args);
/* heap_decode(data) -> (graph, meta_json) (METH_O) */
PyObject *calx_heap_decode(PyObject *self, PyObject *data);
/* heap_read(path) -> (graph, meta_json) (METH_O) */
PyObject *calx_heap_read(PyObject *self, PyObject *path);

#endif
