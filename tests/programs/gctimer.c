/* The truth for tests/test_gc.py: a gc.callbacks callback written in C, so
   that timing the collections runs no Python code inside them (a Python
   callback is a line of its own that a profiler sees collecting, and the
   GIL changes hands in it) and costs little (a Python one added 10-15% to
   each young collection on 3.13).

   gctimer.watch(path) appends the callback; at "start" it reads the
   collecting thread's CPU clock and the line of the innermost frame of
   `path` (the line the collection was triggered from, as a profiler credits
   the innermost profiled line); at "stop" it credits the CPU time since to
   that line.  gctimer.unwatch() removes it and returns {line: seconds}.
   Collections are one at a time (the collector's own flag), so one slot
   is enough; the totals are plain C, so the callback allocates nothing. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h> /* PyFrame_GetBack: declared there up to 3.10 */
#endif

#include <time.h>

#define MAX_LINE 4096

static PyObject *watched_path; /* str */
static PyObject *callback;     /* the callable in gc.callbacks */
static double seconds[MAX_LINE];
static long started_line = -1;
static double started_at;

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The line of the innermost frame of the watched file, or 0. */
static long watched_line(void)
{
    PyFrameObject *f = PyThreadState_GetFrame(PyThreadState_Get());
    while (f) {
        PyCodeObject *code = PyFrame_GetCode(f);
        int match = PyUnicode_Compare(code->co_filename, watched_path) == 0;
        Py_DECREF(code);
        if (match) {
            long line = PyFrame_GetLineNumber(f);
            Py_DECREF(f);
            return line;
        }
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    return 0;
}

static PyObject *on_gc(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    double now = thread_cpu_s();
    if (nargs != 2 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "on_gc(phase, info)");
        return NULL;
    }
    if (PyUnicode_CompareWithASCIIString(args[0], "start") == 0) {
        started_line = watched_line();
        started_at = now;
    } else if (started_line >= 0) {
        if (started_line < MAX_LINE)
            seconds[started_line] += thread_cpu_s() - started_at;
        started_line = -1;
    }
    Py_RETURN_NONE;
}

static PyMethodDef on_gc_def = {"on_gc", (PyCFunction)(void (*)(void))on_gc,
                                METH_FASTCALL, NULL};

static PyObject *gc_callbacks(void)
{
    PyObject *gc = PyImport_ImportModule("gc");
    if (!gc)
        return NULL;
    PyObject *list = PyObject_GetAttrString(gc, "callbacks");
    Py_DECREF(gc);
    return list;
}

static PyObject *watch(PyObject *self, PyObject *path)
{
    (void)self;
    if (!PyUnicode_Check(path) || callback) {
        PyErr_SetString(PyExc_ValueError, "watch(path): one str, once");
        return NULL;
    }
    PyObject *list = gc_callbacks();
    if (!list)
        return NULL;
    callback = PyCFunction_New(&on_gc_def, NULL);
    Py_INCREF(path);
    watched_path = path;
    int rc = callback ? PyList_Append(list, callback) : -1;
    Py_DECREF(list);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *unwatch(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *list = gc_callbacks();
    if (!list)
        return NULL;
    PyObject *r = PyObject_CallMethod(list, "remove", "O", callback);
    Py_DECREF(list);
    if (!r)
        return NULL;
    Py_DECREF(r);
    PyObject *out = PyDict_New();
    for (long line = 0; out && line < MAX_LINE; line++) {
        if (seconds[line] <= 0)
            continue;
        PyObject *k = PyUnicode_FromFormat("%ld", line),
                 *v = PyFloat_FromDouble(seconds[line]);
        if (!k || !v || PyDict_SetItem(out, k, v) < 0)
            Py_CLEAR(out);
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"watch", watch, METH_O,
     "Time each collection, by the line of `path` it came from."},
    {"unwatch", unwatch, METH_NOARGS, "Stop; return {line: seconds}."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gctimer", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_gctimer(void)
{
    PyObject *m = PyModule_Create(&module);
#ifdef Py_GIL_DISABLED
    if (m)
        PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED);
#endif
    return m;
}
