/*
 * _calipers — the Python binding of the engine.  Thin: argument conversion
 * and error mapping only; the work is in the engines (sampler.c, session.c,
 * memory.c, signals.c) and src/core.
 *
 * Errors: every function sets a Python exception and returns NULL on failure.
 * All functions are called with the GIL held, from the calipers package.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "cal_buf.h"
#include "cal_export.h"
#include "cal_merge.h"
#include "cal_report.h"
#include "cal_view.h"
#include "codeinfo.h"
#include "diff.h"
#include "gpu.h"
#include "heapdump.h"
#include "heapscan.h"
#include "inject.h"
#include "memory.h"
#include "pyinternals.h"
#include "runtime.h"
#include "sampler.h"
#include "session.h"
#include "signals.h"
#include "snapfile.h"
#include "samplerprobe.h"
#include "traces.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Copy a list of str into a malloc'd array of malloc'd UTF-8 strings. */
static int str_list(PyObject *list, char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (list == NULL || list == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(list, "expected a list of str");
    if (!seq)
        return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    char **v = calloc((size_t)len + 1, sizeof(*v));
    if (!v) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        const char *s = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
        if (!s || !(v[i] = strdup(s))) {
            for (Py_ssize_t k = 0; k < i; k++)
                free(v[k]);
            free(v);
            Py_DECREF(seq);
            if (s)
                PyErr_NoMemory();
            return -1;
        }
    }
    Py_DECREF(seq);
    *out = v;
    *n = (size_t)len;
    return 0;
}

static void free_str_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static char *opt_strdup(const char *s) { return s ? strdup(s) : NULL; }

PyDoc_STRVAR(
    start_doc,
    "start(interval, profile_all, only, exclude, library, self_dir, cwd,\n"
    "      alloc_mean=0, copy_mean=0, threshold=0, since=0, gpu=0, shim=None,\n"
    "      calls=None)\n\n"
    "Start the CPU sampler.  interval is the mean sampling interval in seconds.\n"
    "since: the profile's clock starts that many seconds ago (a program that\n"
    "the profiled main process exec'd goes on with its clock).\n"
    "With alloc_mean > 0 (bytes between allocation samples) also profile\n"
    "memory, if the shim is loaded (shim: its path, to load it and redirect\n"
    "the allocator entries of every loaded library to it, without preload).  gpu: 0 "
    "off, 1 if an NVIDIA driver is\n"
    "there, 2 on (saying why not if it cannot be).  calls: 256 bytes, one\n"
    "per opcode, non-zero for the interpreter's call instructions (a tick\n"
    "answered from inside one is native time).  Returns whether memory\n"
    "is profiled.");

/* Why start() could not load the shim ("" if it could).  GIL. */
static char shim_load_error[256];

PyDoc_STRVAR(memory_redirected_doc,
             "memory_redirected() -> (int, str)\n\n"
             "Without preload (start(..., shim=path)): how many loaded objects the\n"
             "last start redirected to the shim (-1: none could be) and the names of\n"
             "those it could not; (-2, '') with the shim preloaded; (-3, why) when\n"
             "the shim could not be loaded.");

static PyObject *py_memory_redirected(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (shim_load_error[0] && !calx_memory_available())
        return Py_BuildValue("(is)", -3, shim_load_error);
    const char *failed;
    int n = calx_memory_redirected(&failed);
    return Py_BuildValue("(is)", n, failed);
}

static PyObject *py_start(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"interval",  "profile_all", "only",  "exclude",
                             "library",   "self_dir",    "cwd",   "alloc_mean",
                             "copy_mean", "threshold",   "since", "gpu",
                             "shim",      "calls",       NULL};
    double interval;
    int profile_all = 0;
    PyObject *only = NULL, *exclude = NULL, *library = NULL;
    const char *self_dir = NULL, *cwd = NULL, *shim = NULL;
    long long alloc_mean = 0, copy_mean = 0, threshold = 0;
    double since = 0;
    int gpu = CALX_GPU_OFF;
    PyObject *calls = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "d|pOOOzzLLLdizS", kwlist, &interval,
                                     &profile_all, &only, &exclude, &library, &self_dir,
                                     &cwd, &alloc_mean, &copy_mean, &threshold, &since,
                                     &gpu, &shim, &calls))
        return NULL;
    if (calls && PyBytes_GET_SIZE(calls) != 256) {
        PyErr_SetString(PyExc_ValueError, "calls must be 256 flags, one per opcode");
        return NULL;
    }
    if (gpu < CALX_GPU_OFF || gpu > CALX_GPU_ON) {
        PyErr_SetString(PyExc_ValueError, "gpu must be 0 (off), 1 (auto) or 2 (on)");
        return NULL;
    }
    if (alloc_mean < 0 || copy_mean < 0 || threshold < 0) {
        PyErr_SetString(PyExc_ValueError, "sampling sizes must not be negative");
        return NULL;
    }
    if (!(interval > 0) || interval > 60) {
        PyErr_SetString(PyExc_ValueError, "interval must be in (0, 60] seconds");
        return NULL;
    }
    if (calls)
        calx_set_call_opcodes((const uint8_t *)PyBytes_AS_STRING(calls));
    calx_filter f = {0};
    f.profile_all = profile_all;
    if (str_list(only, &f.only, &f.nonly) ||
        str_list(exclude, &f.exclude, &f.nexclude) ||
        str_list(library, &f.library, &f.nlibrary)) {
        calx_filter_free(&f);
        return NULL;
    }
    f.self_dir = opt_strdup(self_dir);
    f.cwd = opt_strdup(cwd);
    /* Without preload, the shim is loaded first: the profiler's threads
       enter its recursion guard when they start, and must find it. */
    if (alloc_mean > 0 && shim && !calx_memory_available()) {
        const char *error;
        if (!calx_runtime_shim_load(shim, &error))
            snprintf(shim_load_error, sizeof shim_load_error, "%s",
                     error ? error : "unknown error");
    }
    int guard = calx_runtime_guard_enter();
    int rc = calx_sampler_start((int64_t)(interval * 1e9), gpu, &f);
    calx_filter_free(&f); /* empty if the sampler took it */
    calx_runtime_guard_leave(guard);
    if (rc != 0)
        return NULL;
    if (since > 0)
        calx_session_set_origin((int64_t)(since * 1e9));
    if (alloc_mean == 0 || !calx_memory_available())
        Py_RETURN_FALSE;
    calx_memory_config mc = {alloc_mean, copy_mean, threshold ? threshold : 1 << 20};
    if (calx_memory_start(&mc, calx_session_profile()) != 0) {
        calx_sampler_stop(0);
        return NULL;
    }
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(
    restart_in_child_doc,
    "restart_in_child() -> bool\n\n"
    "In a forked child of a profiled process: start a fresh profile of this\n"
    "process with the parent's settings.  Returns whether memory is profiled.");

static PyObject *py_restart_in_child(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    int guard = calx_runtime_guard_enter();
    int rc = calx_sampler_restart_in_child();
    calx_runtime_guard_leave(guard);
    if (rc != 0)
        return NULL;
    if (!calx_memory_available() ||
        calx_memory_restart_in_child(calx_session_profile()) != 0) {
        PyErr_Clear(); /* not profiling memory in the parent either */
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(fork_before_doc,
             "fork_before()\n\n"
             "os.register_at_fork(before=...): stop the profiler's threads for the\n"
             "fork (the profile goes on; fork_after_parent starts them again).");

static PyObject *py_fork_before(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    calx_sampler_fork_before();
    Py_RETURN_NONE;
}

static PyObject *py_fork_after_parent(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    calx_sampler_fork_after_parent();
    Py_RETURN_NONE;
}

static PyObject *py_set_awaiting(PyObject *self, PyObject *callback)
{
    (void)self;
    calx_sampler_set_awaiting(callback == Py_None ? NULL : callback);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(
    watch_signals_doc,
    "watch_signals(callback)\n\n"
    "On SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 or SIGALRM, if the program\n"
    "has not set a handler for it, call callback(signum) from a helper thread\n"
    "with the GIL, then end the process by that signal.");

static PyObject *py_watch_signals(PyObject *self, PyObject *callback)
{
    (void)self;
    if (!PyCallable_Check(callback)) {
        PyErr_SetString(PyExc_TypeError, "callback must be callable");
        return NULL;
    }
    if (calx_signals_start(callback) != 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_unwatch_signals(PyObject *self, PyObject *args)
{
    (void)self;
    int leaving = 0;
    if (!PyArg_ParseTuple(args, "|p", &leaving))
        return NULL;
    calx_sampler_unwatch_signals(leaving);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(set_periodic_doc,
             "set_periodic(callback, interval, request_path, snapshot_interval=0,\n"
             "             snapshot_request_path=None, heap_interval=0,\n"
             "             heap_request_path=None)\n\n"
             "Call callback(reason) from the sampler thread, with the GIL, every\n"
             "`interval` seconds (0: never) with reason 'interval', and when the file\n"
             "request_path (or None) exists with reason 'request'; the same for\n"
             "memory snapshots with reasons 'snapshot' and 'snapshot-request', and\n"
             "for heap dumps with 'heap' and 'heap-request'.  None turns it off.");

static PyObject *py_set_periodic(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *callback;
    double interval[CALX_PERIODIC_JOBS] = {0};
    const char *path[CALX_PERIODIC_JOBS] = {NULL};
    if (!PyArg_ParseTuple(args, "Odz|dzdz", &callback, &interval[0], &path[0],
                          &interval[1], &path[1], &interval[2], &path[2]))
        return NULL;
    if (callback != Py_None && !PyCallable_Check(callback)) {
        PyErr_SetString(PyExc_TypeError, "callback must be callable or None");
        return NULL;
    }
    int64_t ns[CALX_PERIODIC_JOBS];
    for (int i = 0; i < CALX_PERIODIC_JOBS; i++) {
        if (!(interval[i] >= 0 && interval[i] < 1e9)) {
            PyErr_SetString(PyExc_ValueError, "interval must be from 0 to 1e9 seconds");
            return NULL;
        }
        ns[i] = (int64_t)(interval[i] * 1e9);
    }
    if (calx_sampler_set_periodic(callback == Py_None ? NULL : callback, ns, path) != 0)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(set_switch_doc,
             "set_switch(path)\n\n"
             "Profiling is off while the file `path` exists (None: no such file).");

static PyObject *py_set_switch(PyObject *self, PyObject *args)
{
    (void)self;
    const char *path;
    if (!PyArg_ParseTuple(args, "z", &path))
        return NULL;
    if (calx_session_set_switch(path) != 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_set_paused(PyObject *self, PyObject *arg)
{
    (void)self;
    int off = PyObject_IsTrue(arg);
    if (off < 0)
        return NULL;
    calx_session_set_paused(off);
    Py_RETURN_NONE;
}

static PyObject *py_snapshot(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    calx_sampler_snapshot();
    Py_RETURN_NONE;
}

PyDoc_STRVAR(
    merge_doc,
    "merge(profile, start_unix)\n\n"
    "Add another process's JSON profile (str or bytes) to this one; start_unix\n"
    "is when this process's profiling started.  Raises ValueError for a\n"
    "corrupt or foreign profile (nothing is added), MemoryError.");

static PyObject *py_merge(PyObject *self, PyObject *args)
{
    (void)self;
    const char *text;
    Py_ssize_t len;
    double start_unix;
    if (!PyArg_ParseTuple(args, "s#d", &text, &len, &start_unix))
        return NULL;
    cal_profile *p = calx_session_profile();
    if (!p || calx_sampler_running()) {
        PyErr_SetString(PyExc_RuntimeError, "merge() needs a stopped profile");
        return NULL;
    }
    cal_jdoc doc;
    char err[256];
    if (cal_jdoc_parse(&doc, text, (size_t)len, err, sizeof err) != 0) {
        cal_jdoc_free(&doc);
        PyErr_Format(PyExc_ValueError, "corrupt profile: %s", err);
        return NULL;
    }
    int guard = calx_runtime_guard_enter();
    int rc = cal_merge_add(p, doc.root, start_unix, err, sizeof err);
    calx_runtime_guard_leave(guard);
    cal_jdoc_free(&doc);
    if (rc != 0) {
        PyErr_SetString(
            strcmp(err, "out of memory") ? PyExc_ValueError : PyExc_MemoryError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *py_stop(PyObject *self, PyObject *args)
{
    (void)self;
    int leaving = 0;
    if (!PyArg_ParseTuple(args, "|p", &leaving))
        return NULL;
    if (calx_sampler_stop(leaving) != 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_running(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyBool_FromLong(calx_sampler_running());
}

PyDoc_STRVAR(set_thread_names_doc, "set_thread_names(names)\n\nName profiled threads: "
                                   "names maps thread ident to name.");

static PyObject *py_set_thread_names(PyObject *self, PyObject *names)
{
    (void)self;
    cal_profile *p = calx_session_profile();
    if (!p)
        Py_RETURN_NONE;
    if (!PyDict_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "expected a dict");
        return NULL;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(names, &pos, &key, &value)) {
        unsigned long ident = PyLong_AsUnsignedLong(key);
        const char *name = PyUnicode_AsUTF8(value);
        if ((ident == (unsigned long)-1 && PyErr_Occurred()) || !name)
            return NULL;
        /* The newest thread with this ident is the live one. */
        for (size_t i = cal_profile_nthreads(p); i-- > 0;) {
            const cal_thread_stat *t = cal_profile_thread_at(p, i);
            if (t->ident == ident) {
                if (t->name == CAL_PROFILE_NONE)
                    cal_profile_set_thread_name(p, (uint32_t)i, name);
                break;
            }
        }
    }
    Py_RETURN_NONE;
}

/* ---- meta ------------------------------------------------------------- */

typedef struct meta_holder {
    cal_meta m;
    char **argv, **only, **exclude, **notes;
    size_t argc, nonly, nexclude, nnotes;
} meta_holder;

static const char *meta_str(PyObject *d, const char *key)
{
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None)
        return NULL;
    return PyUnicode_AsUTF8(v);
}

static double meta_num(PyObject *d, const char *key)
{
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None)
        return 0;
    double x = PyFloat_AsDouble(v);
    if (x == -1 && PyErr_Occurred())
        PyErr_Clear();
    return x;
}

/* meta["heap"]: the heap summary of --heap-at-exit, a JSON object on one
   line (the agent's json.dumps of calipers.heap's summary), written into the
   profile as it is: so it is checked here to be one.  On success return 0;
   on error set ValueError and return -1. */
static int meta_heap(PyObject *d, cal_meta *m)
{
    const char *text = meta_str(d, "heap");
    if (!text)
        return PyErr_Occurred() ? -1 : 0;
    cal_jdoc doc;
    char err[128];
    size_t len = strlen(text);
    int ok = cal_jdoc_parse(&doc, text, len, err, sizeof err) == 0 &&
             cal_jv_is(doc.root, CAL_JOBJ) && memchr(text, '\n', len) == NULL;
    cal_jdoc_free(&doc);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError,
                        "meta[\"heap\"] is not a JSON object on one line");
        return -1;
    }
    m->heap_json = text;
    return 0;
}

static int meta_from_dict(PyObject *d, meta_holder *h)
{
    memset(h, 0, sizeof(*h));
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "meta must be a dict");
        return -1;
    }
    if (str_list(PyDict_GetItemString(d, "argv"), &h->argv, &h->argc) ||
        str_list(PyDict_GetItemString(d, "profile_only"), &h->only, &h->nonly) ||
        str_list(PyDict_GetItemString(d, "profile_exclude"), &h->exclude,
                 &h->nexclude) ||
        str_list(PyDict_GetItemString(d, "notes"), &h->notes, &h->nnotes))
        return -1;
    cal_meta *m = &h->m;
    m->calipers_version = meta_str(d, "calipers_version");
    m->python_version = meta_str(d, "python_version");
    m->python_executable = meta_str(d, "python_executable");
    m->python_build = meta_str(d, "python_build");
    m->cwd = meta_str(d, "cwd");
    m->script = meta_str(d, "script");
    m->module = meta_str(d, "module");
    if (PyErr_Occurred())
        return -1;
    if (!m->calipers_version)
        m->calipers_version = "";
    if (!m->python_version)
        m->python_version = "";
    if (!m->python_executable)
        m->python_executable = "";
    if (!m->cwd)
        m->cwd = "";
    m->argv = (const char *const *)h->argv;
    m->argc = h->argc;
    m->profile_only = (const char *const *)h->only;
    m->nprofile_only = h->nonly;
    m->profile_exclude = (const char *const *)h->exclude;
    m->nprofile_exclude = h->nexclude;
    m->notes = (const char *const *)h->notes;
    m->nnotes = h->nnotes;
    if (meta_heap(d, m) != 0)
        return -1;
    m->pid = (int64_t)meta_num(d, "pid");
    m->start_unix = meta_num(d, "start_unix");
    m->interval_ns = (int64_t)(meta_num(d, "interval") * 1e9);
    m->profile_all = meta_num(d, "profile_all") != 0;
    m->cpu_only = meta_num(d, "cpu_only") != 0;
    m->lines_off = meta_num(d, "lines_off") != 0;
    m->no_source = meta_num(d, "part") != 0;
    m->dropped = calx_sampler_dropped();
    m->torn = calx_sampler_torn();
    return 0;
}

static void meta_free(meta_holder *h)
{
    free_str_list(h->argv, h->argc);
    free_str_list(h->only, h->nonly);
    free_str_list(h->exclude, h->nexclude);
    free_str_list(h->notes, h->nnotes);
}

/* Process 0 of the profile: this process, as the agent describes it. */
static int set_process(cal_profile *p, PyObject *meta, const meta_holder *h)
{
    cal_process *pr = cal_profile_process_mut(p, 0);
    pr->pid = h->m.pid;
    pr->ppid = (int64_t)meta_num(meta, "ppid");
    pr->wall_ns = cal_profile_wall(p);
    pr->forked = meta_num(meta, "forked") != 0;
    pr->signal = (int32_t)meta_num(meta, "signal");
    const char *end = meta_str(meta, "end");
    if (PyErr_Occurred())
        return -1;
    pr->end = end ? cal_profile_string(p, end, strlen(end)) : CAL_PROFILE_NONE;
    const cal_memory *mem = cal_profile_memory_at(p);
    pr->inherited = calx_memory_inherited();
    if (cal_profile_nprocesses(p) == 1) /* else merging fixed it */
        pr->peak = mem->enabled ? mem->peak : -1;
    if (pr->argc == 0 && cal_profile_process_set_argv(
                             p, 0, (const char *const *)h->argv, h->argc) != 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* The JSON profile into b (initialised here).  On success return 0; on
   error set an exception, leave b empty and return -1. */
static int render(PyObject *meta, cal_buf *b)
{
    cal_buf_init(b);
    cal_profile *p = calx_session_profile();
    if (!p) {
        PyErr_SetString(PyExc_RuntimeError, "calipers has not profiled anything");
        return -1;
    }
    meta_holder h;
    if (meta_from_dict(meta, &h) != 0 || set_process(p, meta, &h) != 0) {
        meta_free(&h);
        return -1;
    }
    cal_report_json(p, &h.m, b);
    meta_free(&h);
    if (!cal_buf_ok(b)) {
        cal_buf_free(b);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* The buffer as a str; frees it. */
static PyObject *buf_to_str_free(cal_buf *b)
{
    PyObject *r =
        PyUnicode_DecodeUTF8(b->data ? b->data : "", (Py_ssize_t)b->len, "replace");
    cal_buf_free(b);
    return r;
}

PyDoc_STRVAR(json_doc,
             "json(meta) -> str\n\nThe profile collected so far, as JSON text.");

static PyObject *py_json(PyObject *self, PyObject *meta)
{
    (void)self;
    cal_buf b;
    if (render(meta, &b) != 0)
        return NULL;
    return buf_to_str_free(&b);
}

PyDoc_STRVAR(write_json_doc,
             "write_json(path, meta) -> str\n\nWrite the profile to path atomically (a "
             "temporary file\n"
             "renamed over it) and return its text.  Raises OSError on failure.");

static PyObject *py_write_json(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *path_obj, *meta;
    if (!PyArg_ParseTuple(args, "O&O", PyUnicode_FSConverter, &path_obj, &meta))
        return NULL;
    cal_buf b;
    if (render(meta, &b) != 0) {
        Py_DECREF(path_obj);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = cal_buf_write_file(&b, PyBytes_AS_STRING(path_obj));
    Py_END_ALLOW_THREADS if (rc != 0)
    {
        cal_buf_free(&b);
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_obj);
        Py_DECREF(path_obj);
        return NULL;
    }
    Py_DECREF(path_obj);
    return buf_to_str_free(&b);
}

/* Parse and check a profile's text.  On success return 0; on error set
   ValueError (the one-line reason) and return -1. */
static int parse_profile(const char *text, Py_ssize_t len, cal_jdoc *doc)
{
    char err[256], why[300];
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = cal_jdoc_parse(doc, text, (size_t)len, err, sizeof err);
    if (rc == 0)
        rc = cal_view_check(doc->root, why, sizeof why);
    else
        snprintf(why, sizeof why, "corrupt profile: %s", err);
    Py_END_ALLOW_THREADS if (rc != 0)
    {
        cal_jdoc_free(doc);
        PyErr_SetString(PyExc_ValueError, why);
    }
    return rc;
}

/* A renderer's output as a str; frees the document and the buffer. */
static PyObject *rendered(cal_jdoc *doc, cal_buf *b)
{
    cal_jdoc_free(doc);
    if (!cal_buf_ok(b)) {
        cal_buf_free(b);
        return PyErr_NoMemory();
    }
    return buf_to_str_free(b);
}

PyDoc_STRVAR(
    render_text_doc,
    "render_text(profile, width, tty, min_percent, max_rows, outfile,\n"
    "            hot_cpu=False, hot_main=False) -> str\n\n"
    "The terminal report of a JSON profile (str or bytes): `width` columns,\n"
    "ANSI colour and glyphs if `tty`, lines holding at least `min_percent` of\n"
    "time or memory, at most `max_rows` of them; `outfile` (or None) is named\n"
    "at the end.  hot_cpu, hot_main: the list of the hottest lines over CPU\n"
    "time only, over the main thread only.  Raises ValueError for a corrupt\n"
    "or foreign profile.");

static PyObject *py_render_text(PyObject *self, PyObject *args)
{
    (void)self;
    const char *text, *outfile;
    Py_ssize_t len;
    int width, tty, max_rows, hot_cpu = 0, hot_main = 0;
    double min_percent;
    if (!PyArg_ParseTuple(args, "s#ipdiz|pp", &text, &len, &width, &tty, &min_percent,
                          &max_rows, &outfile, &hot_cpu, &hot_main))
        return NULL;
    cal_jdoc doc;
    if (parse_profile(text, len, &doc) != 0)
        return NULL;
    cal_view_opts o = {width, tty, min_percent, max_rows, outfile, hot_cpu, hot_main};
    cal_buf b;
    cal_buf_init(&b);
    Py_BEGIN_ALLOW_THREADS cal_view_text(doc.root, &o, &b);
    Py_END_ALLOW_THREADS return rendered(&doc, &b);
}

extern const char calx_viewer_html[];
extern const size_t calx_viewer_html_len;

PyDoc_STRVAR(render_html_doc,
             "render_html(profile) -> str\n\n"
             "The self-contained HTML viewer of a JSON profile (str or bytes).\n"
             "Raises ValueError for a corrupt or foreign profile.");

static PyObject *py_render_html(PyObject *self, PyObject *args)
{
    (void)self;
    const char *text;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "s#", &text, &len))
        return NULL;
    cal_jdoc doc;
    if (parse_profile(text, len, &doc) != 0)
        return NULL;
    cal_buf b;
    cal_buf_init(&b);
    Py_BEGIN_ALLOW_THREADS cal_view_html(doc.root, text, (size_t)len, calx_viewer_html,
                                         calx_viewer_html_len, &b);
    Py_END_ALLOW_THREADS return rendered(&doc, &b);
}

PyDoc_STRVAR(export_doc,
             "export(profile, format) -> bytes\n\n"
             "The stack table of a JSON profile (str or bytes) in `format`: 'pprof'\n"
             "(a perftools.profiles.Profile, not gzipped), 'speedscope' (JSON),\n"
             "'collapsed' (folded stacks, microseconds), 'collapsed-alloc' (folded\n"
             "stacks, bytes allocated) or 'firefox' (the Firefox Profiler's JSON).\n"
             "Raises ValueError for an unknown format, a\n"
             "corrupt or foreign profile, or one without a stack table.");

static PyObject *py_export(PyObject *self, PyObject *args)
{
    (void)self;
    const char *text, *format;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "s#s", &text, &len, &format))
        return NULL;
    int f = cal_export_format_named(format);
    if (f < 0) {
        PyErr_SetString(PyExc_ValueError, "unknown export format (pprof, speedscope, "
                                          "collapsed, collapsed-alloc or firefox)");
        return NULL;
    }
    cal_jdoc doc;
    if (parse_profile(text, len, &doc) != 0)
        return NULL;
    cal_buf b;
    cal_buf_init(&b);
    char err[300];
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = cal_export(doc.root, f, &b, err, sizeof err);
    Py_END_ALLOW_THREADS cal_jdoc_free(&doc);
    if (rc != 0) {
        cal_buf_free(&b);
        PyErr_SetString(
            strcmp(err, "out of memory") ? PyExc_ValueError : PyExc_MemoryError, err);
        return NULL;
    }
    if (!cal_buf_ok(&b)) {
        cal_buf_free(&b);
        return PyErr_NoMemory();
    }
    PyObject *r = PyBytes_FromStringAndSize(b.data ? b.data : "", (Py_ssize_t)b.len);
    cal_buf_free(&b);
    return r;
}

static PyObject *py_layout_problem(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    const char *why = calx_layout_problem();
    if (!why)
        Py_RETURN_NONE;
    return PyUnicode_FromString(why);
}

static PyObject *py_inject_pending_code(PyObject *self, PyObject *args)
{
    (void)self;
    int pid;
    const char *code;
    double timeout_s;
    if (!PyArg_ParseTuple(args, "isd", &pid, &code, &timeout_s))
        return NULL;
    char err[256] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS rc =
        calx_inject_pending_code(pid, code, timeout_s, err, sizeof err);
    Py_END_ALLOW_THREADS return Py_BuildValue("is", rc, err);
}

static PyMethodDef methods[] = {
    {"layout_problem", py_layout_problem, METH_NOARGS,
     "layout_problem() -> str or None\n\nWhy this interpreter's frames are not read "
     "(then time and\n"
     "memory are not credited to lines), or None when they are."},
    {"memory_redirected", py_memory_redirected, METH_NOARGS, memory_redirected_doc},
    {"inject_pending_code", py_inject_pending_code, METH_VARARGS,
     "inject_pending_code(pid, code, timeout_s) -> (status, why)\n\n"
     "Have process pid's main thread run code (PyRun_SimpleString) as a pending\n"
     "call, queued through ptrace.  status: 0 queued, 1 failed (why says how),\n"
     "2 the process ended, 3 ptrace not permitted.  x86-64 only."},
    {"start", (PyCFunction)(void (*)(void))py_start, METH_VARARGS | METH_KEYWORDS,
     start_doc},
    {"stop", py_stop, METH_VARARGS,
     "stop(leaving=False)\n\nStop sampling; take a last sample.  leaving: the process "
     "is about\n"
     "to end without finalising (os._exit, exec, a signal), so the profiler's threads "
     "are\n"
     "not waited for."},
    {"restart_in_child", py_restart_in_child, METH_NOARGS, restart_in_child_doc},
    {"fork_before", py_fork_before, METH_NOARGS, fork_before_doc},
    {"fork_after_parent", py_fork_after_parent, METH_NOARGS,
     "fork_after_parent()\n\nos.register_at_fork(after_in_parent=...): undo "
     "fork_before."},
    {"set_awaiting", py_set_awaiting, METH_O,
     "set_awaiting(callback)\n\ncallback(thread ident) -> the coroutine chains an idle "
     "asyncio loop awaits."},
    {"watch_signals", py_watch_signals, METH_O, watch_signals_doc},
    {"unwatch_signals", py_unwatch_signals, METH_VARARGS,
     "unwatch_signals(leaving=False)\n\nUndo watch_signals; leaving: the process is "
     "about to\n"
     "end (os._exit, exec), so the helper thread is not waited for."},
    {"merge", py_merge, METH_VARARGS, merge_doc},
    {"set_periodic", py_set_periodic, METH_VARARGS, set_periodic_doc},
    {"set_switch", py_set_switch, METH_VARARGS, set_switch_doc},
    {"set_paused", py_set_paused, METH_O,
     "set_paused(off)\n\nSwitch profiling off (True) or on (False) in this process."},
    {"snapshot", py_snapshot, METH_NOARGS,
     "snapshot()\n\nBring the end-of-run figures up to now, to write the profile while "
     "running."},
    {"running", py_running, METH_NOARGS, "running() -> bool"},
    {"set_thread_names", py_set_thread_names, METH_O, set_thread_names_doc},
    {"json", py_json, METH_O, json_doc},
    {"write_json", py_write_json, METH_VARARGS, write_json_doc},
    {"render_text", py_render_text, METH_VARARGS, render_text_doc},
    {"render_html", py_render_html, METH_VARARGS, render_html_doc},
    {"export", py_export, METH_VARARGS, export_doc},
    /* calipers.memory (traces.h) */
    {"memory_available", calx_traces_available, METH_NOARGS,
     "memory_available() -> bool\n\nAre this process's allocations being sampled?"},
    {"memory_mark", calx_traces_mark, METH_NOARGS,
     "memory_mark()\n\nBegin a tracing epoch: memory_traces(limit, True) reports the "
     "allocations\nmade from now on; the traced footprint and its peak start from "
     "now."},
    {"memory_traced", calx_traces_traced, METH_NOARGS,
     "memory_traced() -> (current, peak)\n\nThe footprint since the mark and its peak, "
     "exact, in bytes."},
    {"memory_window", calx_traces_window, METH_NOARGS,
     "memory_window() -> (allocated, [(filename, lineno, bytes), ...])\n\nThe bytes "
     "allocated since the mark (exact, freed or not) and the sampled\nbytes each "
     "profiled line allocated since then (estimates, in no order)."},
    {"memory_reset_peak", calx_traces_reset_peak, METH_NOARGS,
     "memory_reset_peak()\n\nThe traced peak starts again from the current footprint."},
    {"memory_traces", calx_traces_list, METH_VARARGS,
     "memory_traces(limit, since_mark) -> list\n\nThe live sampled allocations: "
     "(domain, size, frames, total_nframe,\nblock_size, root_kept) each; frames most "
     "recent first, at most limit."},
    {"memory_object_traceback", calx_traces_object, METH_VARARGS,
     "memory_object_traceback(obj, limit) -> (frames, total_nframe, root_kept) or None"
     "\n\nWhere obj was allocated, if its block was sampled since the mark."},
    {"snapshot_sums", calx_traces_sums, METH_VARARGS,
     "snapshot_sums(raw_traces, mean) -> list\n\nThe sums of the traces per frames "
     "object: [frames, total_nframe or None,\nroot_kept, size, count, var_size, "
     "var_count] each."},
    {"_sampler_probe", (PyCFunction)(void (*)(void))calx_sampler_probe, METH_FASTCALL,
     "_sampler_probe(box, op, n) -> bytes (the sampler fuzzer's step; tests only)"},
    {"memory_info", calx_traces_info, METH_NOARGS,
     "memory_info() -> dict\n\nalloc_mean, tracked (live samples) and overhead_bytes."},
    {"snapshot_encode", calx_snapshot_encode, METH_VARARGS, calx_snapshot_encode_doc},
    {"snapshot_decode", calx_snapshot_decode, METH_O, calx_snapshot_decode_doc},
    {"snapshot_write", calx_snapshot_write, METH_VARARGS, calx_snapshot_write_doc},
    {"snapshot_read", calx_snapshot_read, METH_O, calx_snapshot_read_doc},
    {"diff", calx_diff, METH_VARARGS,
     "diff(old, new, options) -> str\n\n"
     "Compare two profiles (JSON) or two memory snapshots (bytes each);\n"
     "options: by, sort, top, format ('text', 'html', 'json'), width, tty,\n"
     "old_name, new_name, and html (a path: the page is written there and\n"
     "'' returned).  ValueError for a corrupt input or a bad option,\n"
     "TypeError for a profile and a snapshot, OSError if html cannot be\n"
     "written."},
    /* calipers.heap (heapscan.h) */
    {"heap_scan", calx_heap_scan, METH_VARARGS,
     "heap_scan(rules, objects, ndarray) -> graph\n\nScan the heap "
     "(calipers.heap.scan)."},
    {"heap_info", calx_heap_info, METH_VARARGS, "heap_info(graph) -> dict"},
    {"heap_types", calx_heap_types, METH_VARARGS, "heap_types(graph) -> [name, ...]"},
    {"heap_by_type", calx_heap_by_type, METH_VARARGS,
     "heap_by_type(graph) -> [(type id, count, size, retained), ...]"},
    {"heap_by_line", calx_heap_by_line, METH_VARARGS,
     "heap_by_line(graph) -> {(file, line): [count, size, retained]}"},
    {"heap_node", calx_heap_node, METH_VARARGS,
     "heap_node(graph, i) -> (address, type id, size, retained, idom, name)"},
    {"heap_find", calx_heap_find, METH_VARARGS, "heap_find(graph, obj) -> index or -1"},
    {"heap_largest", calx_heap_largest, METH_VARARGS,
     "heap_largest(graph, n, by_retained) -> [index, ...]"},
    {"heap_of_type", calx_heap_of_type, METH_VARARGS,
     "heap_of_type(graph, type id) -> [index, ...]"},
    {"heap_path", calx_heap_path, METH_VARARGS,
     "heap_path(graph, i) -> ([index, ...], [live object, ...])"},
    {"heap_encode", calx_heap_encode, METH_VARARGS,
     "heap_encode(graph, meta_json) -> bytes\n\nA heap dump file's bytes."},
    {"heap_write", calx_heap_write, METH_VARARGS,
     "heap_write(graph, path, meta_json)\n\nWrite a heap dump file (replaced whole)."},
    {"heap_decode", calx_heap_decode, METH_O,
     "heap_decode(data) -> (graph, meta_json)\n\nA heap dump's bytes, checked; "
     "ValueError says why they are not one."},
    {"heap_read", calx_heap_read, METH_O,
     "heap_read(path) -> (graph, meta_json)\n\nheap_decode of the file at path; "
     "OSError when it cannot be read."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    "_calipers",
    "The calipers engine (C).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__calipers(void)
{
    calx_layout_check(); /* a problem is reported by layout_problem() */
    if (calx_heap_ready() != 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m && PyModule_AddStringConstant(m, "SCHEMA", CAL_SCHEMA) != 0) {
        Py_DECREF(m);
        return NULL;
    }
#ifdef Py_GIL_DISABLED
    /* Without this, importing calipers would switch the GIL back on for
       the whole program on the free-threaded build (nogil.h says what
       protects the engines there instead). */
    if (m && PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) != 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
