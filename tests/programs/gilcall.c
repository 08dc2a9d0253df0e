/* A C extension whose native threads call into Python: each thread takes
   the GIL with PyGILState_Ensure, calls the callback, and gives it back,
   over and over (a new thread state each time), while the calling thread
   waits without the GIL. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>

typedef struct job {
    PyObject *callback;
    long calls;
    long index;
    int failed;
} job;

static void *worker(void *arg)
{
    job *j = arg;
    for (long i = 0; i < j->calls; i++) {
        PyGILState_STATE gs = PyGILState_Ensure();
        PyObject *r = PyObject_CallFunction(j->callback, "l", j->index);
        if (r)
            Py_DECREF(r);
        else {
            PyErr_Clear();
            j->failed = 1;
        }
        PyGILState_Release(gs);
    }
    return NULL;
}

static PyObject *run_in_threads(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *callback;
    int nthreads;
    long calls;
    if (!PyArg_ParseTuple(args, "Oil", &callback, &nthreads, &calls))
        return NULL;
    if (nthreads < 1 || nthreads > 16) {
        PyErr_SetString(PyExc_ValueError, "1 to 16 threads");
        return NULL;
    }
    pthread_t t[16];
    job jobs[16];
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < nthreads; i++) {
        jobs[i] = (job){callback, calls, i, 0};
        pthread_create(&t[i], NULL, worker, &jobs[i]);
    }
    for (int i = 0; i < nthreads; i++) {
        pthread_join(t[i], NULL);
        failed |= jobs[i].failed;
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_SetString(PyExc_RuntimeError, "a callback raised");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"run_in_threads", run_in_threads, METH_VARARGS,
     "run_in_threads(callback, nthreads, calls): call callback(index) calls times from each of "
     "nthreads native threads."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gilcall", NULL, -1, methods};

PyMODINIT_FUNC PyInit_gilcall(void)
{
    return PyModule_Create(&module);
}
