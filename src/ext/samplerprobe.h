/*
 * samplerprobe — one step of the sampler fuzzer, between two readings of
 * the shim's byte samplers and counters (see samplerprobe.c).
 */
#ifndef CALX_SAMPLERPROBE_H
#define CALX_SAMPLERPROBE_H

#include <Python.h>

/* _sampler_probe(box, op, n) -> bytes: make (op 0 bytes, 1 str, 2 PyMem
   buffer, 3 malloc block; box holds None and receives it; 6 an instance
   of the class box holds, which it receives), resize (4) or release (5)
   the object in the one-item list `box`, between two readings
   of the calling thread's samplers, the allocation clock, the live bytes
   and the peak.  Returns them packed as native int64 (the model's layout is
   in tests/test_sampler_fuzz.py), then the block's address and what the
   shim tracks of it (tracked, weight, size).  NULL with an exception set on
   error. */
PyObject *calx_sampler_probe(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
