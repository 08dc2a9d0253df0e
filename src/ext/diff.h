/*
 * diff — the binding of `calipers diff` (src/core/cal_diff.c).
 */
#ifndef CALX_DIFF_H
#define CALX_DIFF_H

#include <Python.h>

/* diff(old, new, options) -> str: see diff_doc in module.c.  NULL with an
   exception set on error. */
PyObject *calx_diff(PyObject *self, PyObject *args);

#endif
