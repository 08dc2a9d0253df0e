/*
 * snapfile — the Python binding of memory snapshot files (src/core/
 * cal_snapshot, docs/FORMAT.md "Snapshot files"): raw traces, as
 * tracemalloc's _get_traces() gives them or with calipers' two extra
 * fields, to a file's bytes and back.  Argument conversion and error
 * mapping only; module.c registers these functions.
 *
 * A raw trace is (domain, size, frames, total_nframe, block_size,
 * root_kept), or tracemalloc's first four; frames is a tuple of
 * (filename, lineno), most recent first.
 *
 * Errors: each function sets a Python exception and returns NULL.  Called
 * with the GIL held; the encoding, decoding and file work runs without it.
 */
#ifndef CALX_SNAPFILE_H
#define CALX_SNAPFILE_H

#include <Python.h>

extern const char calx_snapshot_encode_doc[];
extern const char calx_snapshot_decode_doc[];
extern const char calx_snapshot_write_doc[];
extern const char calx_snapshot_read_doc[];

/* snapshot_encode(raw_traces, meta_json) -> bytes (METH_VARARGS) */
PyObject *calx_snapshot_encode(PyObject *self, PyObject *args);
/* snapshot_decode(data) -> (raw_traces, meta_json) (METH_O) */
PyObject *calx_snapshot_decode(PyObject *self, PyObject *data);
/* snapshot_write(path, raw_traces, meta_json) (METH_VARARGS) */
PyObject *calx_snapshot_write(PyObject *self, PyObject *args);
/* snapshot_read(path) -> (raw_traces, meta_json) (METH_O) */
PyObject *calx_snapshot_read(PyObject *self, PyObject *path);

#endif
