/* A C extension whose native threads call into Python: each thread takes
   the GIL with PyGILState_Ensure, calls the callback, and gives it back,
   over and over (a new thread state each time), pausing in between if asked;
   start can have each first spin in C, before its first call.
   run_in_threads waits for them without the GIL; start returns at once and
   join waits. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>

#include <time.h>

typedef struct job {
    PyObject *callback;
    long calls;
    long index;
    long pause_ms;
    long spin_ms; /* of its own CPU time, in C, before the first call */
    int failed;
} job;

static double thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void *worker(void *arg)
{
    job *j = arg;
    volatile unsigned long spun = 0;
    while (thread_cpu_ms() < (double)j->spin_ms)
        spun++;
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
        struct timespec pause = {j->pause_ms / 1000, (j->pause_ms % 1000) * 1000000};
        while (nanosleep(&pause, &pause) != 0)
            ;
    }
    return NULL;
}

/* The threads started by start(), until join(). */
static pthread_t started[16];
static job started_jobs[16];
static int nstarted;
static PyObject *started_callback;

static PyObject *start(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *callback;
    int nthreads;
    long calls, pause_ms, spin_ms = 0;
    if (!PyArg_ParseTuple(args, "Oill|l", &callback, &nthreads, &calls, &pause_ms, &spin_ms))
        return NULL;
    if (nstarted || nthreads < 1 || nthreads > 16 || pause_ms < 0) {
        PyErr_SetString(PyExc_ValueError, "1 to 16 threads, once until join()");
        return NULL;
    }
    Py_INCREF(callback);
    started_callback = callback;
    for (int i = 0; i < nthreads; i++) {
        started_jobs[i] = (job){callback, calls, i, pause_ms, spin_ms, 0};
        pthread_create(&started[i], NULL, worker, &started_jobs[i]);
    }
    nstarted = nthreads;
    Py_RETURN_NONE;
}

static PyObject *join(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < nstarted; i++) {
        pthread_join(started[i], NULL);
        failed |= started_jobs[i].failed;
    }
    Py_END_ALLOW_THREADS
    nstarted = 0;
    Py_CLEAR(started_callback);
    if (failed) {
        PyErr_SetString(PyExc_RuntimeError, "a callback raised");
        return NULL;
    }
    Py_RETURN_NONE;
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
        jobs[i] = (job){callback, calls, i, 0, 0, 0};
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
    {"start", start, METH_VARARGS,
     "start(callback, nthreads, calls, pause_ms, spin_ms=0): the same in the background, "
     "pausing pause_ms without the GIL after each call, each thread first spinning in C for "
     "spin_ms of its CPU time."},
    {"join", join, METH_NOARGS, "join(): wait for the threads start() started."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gilcall", NULL, -1, methods};

PyMODINIT_FUNC PyInit_gilcall(void)
{
    return PyModule_Create(&module);
}
