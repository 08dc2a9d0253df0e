/* A C extension that keeps buffers of Python's object allocator, as
   extensions do for their own arrays (ElementTree's parent stacks, say):
   blocks of PyObject_Malloc that hold no object.  keep(data, n) allocates
   n blocks, copies `data` into each and keeps them; release() frees them. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

static void **blocks;
static Py_ssize_t nblocks;

static PyObject *release(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    for (Py_ssize_t i = 0; i < nblocks; i++)
        PyObject_Free(blocks[i]);
    PyMem_Free(blocks);
    blocks = NULL;
    nblocks = 0;
    Py_RETURN_NONE;
}

static PyObject *keep(PyObject *self, PyObject *args)
{
    const char *data;
    Py_ssize_t len, n;
    if (!PyArg_ParseTuple(args, "y#n", &data, &len, &n))
        return NULL;
    void **more = PyMem_Realloc(blocks, (size_t)(nblocks + n) * sizeof *blocks);
    if (!more)
        return PyErr_NoMemory();
    blocks = more;
    for (Py_ssize_t i = 0; i < n; i++) {
        void *b = PyObject_Malloc((size_t)len);
        if (!b)
            return PyErr_NoMemory();
        memcpy(b, data, (size_t)len);
        blocks[nblocks++] = b;
    }
    return PyLong_FromSsize_t(nblocks);
}

static PyMethodDef methods[] = {
    {"keep", keep, METH_VARARGS, NULL},
    {"release", release, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "objbuffers", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_objbuffers(void) { return PyModule_Create(&module); }
