/*
 * traces — calipers.memory's view of the live sampled allocations: the
 * functions of the extension module behind src/calipers/memory.py (each
 * called with the GIL held; each returns NULL with an exception set on
 * error).  The data comes from the memory engine (memory.h) and the stack
 * table (cal_stacks.h).
 */
#ifndef CALX_TRACES_H
#define CALX_TRACES_H

#include <Python.h>

/* The most frames a traceback may keep (tracemalloc's own limit). */
#define CALX_TRACES_MAX_LIMIT 65535

/* memory_available() -> bool */
PyObject *calx_traces_available(PyObject *self, PyObject *noargs);
/* memory_mark(): begin a tracing epoch */
PyObject *calx_traces_mark(PyObject *self, PyObject *noargs);
/* memory_traced() -> (current, peak) */
PyObject *calx_traces_traced(PyObject *self, PyObject *noargs);
/* memory_window() -> (allocated, [(filename, lineno, bytes), ...]): the
   bytes allocated since the mark, exact, and the sampled bytes each
   profiled line allocated since then (in no order) */
PyObject *calx_traces_window(PyObject *self, PyObject *noargs);
/* memory_reset_peak() */
PyObject *calx_traces_reset_peak(PyObject *self, PyObject *noargs);
/* memory_traces(limit, since_mark) -> [(domain, size, frames, total_nframe,
   block_size, root_kept), ...] */
PyObject *calx_traces_list(PyObject *self, PyObject *args);
/* memory_object_traceback(obj, limit) -> (frames, total_nframe, root_kept)
   or None */
PyObject *calx_traces_object(PyObject *self, PyObject *args);
/* snapshot_sums(raw_traces, mean) -> [[frames, total_nframe or None,
   root_kept, size, count, var_size, var_count], ...]: the sums of the
   traces per frames object (by identity), with their variances
   (calipers.memory's statistics; docs/INTERNALS.md, "Memory snapshots");
   mean: the sampling mean, 0 if unknown or exact. */
PyObject *calx_traces_sums(PyObject *self, PyObject *args);
/* memory_info() -> {"alloc_mean", "tracked", "overhead_bytes"} */
PyObject *calx_traces_info(PyObject *self, PyObject *noargs);

#endif
