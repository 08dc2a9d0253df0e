/*
 * diff — the binding of `calipers diff` (src/core/cal_diff.c): one
 * function, _calipers.diff(old, new, options).  Argument conversion and
 * error mapping only.  Called with the GIL held; the work runs without it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "cal_diff.h"
#include "cal_view.h"
#include "diff.h"

#include <string.h>

/* An int option from the dict (absent: dflt).  -1 with an exception set. */
static int opt_int(PyObject *opts, const char *key, int dflt, int *out)
{
    PyObject *v = PyDict_GetItemString(opts, key); /* borrowed */
    if (!v || v == Py_None) {
        *out = dflt;
        return 0;
    }
    long x = PyLong_AsLong(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (x < 0 || x > 1000000000) {
        PyErr_Format(PyExc_ValueError, "%s: out of range", key);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* A str option from the dict: its UTF-8 (valid while opts lives), or dflt. */
static int opt_str(PyObject *opts, const char *key, const char *dflt, const char **out)
{
    PyObject *v = PyDict_GetItemString(opts, key);
    *out = dflt;
    if (!v || v == Py_None)
        return 0;
    *out = PyUnicode_AsUTF8(v);
    return *out ? 0 : -1;
}

/* The index of `s` in the NULL-ended `names`, or -1 with ValueError. */
static int named(const char *key, const char *s, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    PyErr_Format(PyExc_ValueError, "%s: unknown value %R", key, s);
    return -1;
}

/* Parse and check one profile.  0, or -1 with ValueError set (the reason,
   prefixed with which input it is). */
static int parse(const char *what, const char *text, Py_ssize_t len, cal_jdoc *doc)
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
        PyErr_Format(PyExc_ValueError, "%s: %s", what, why);
        return -1;
    }
    return 0;
}

PyObject *calx_diff(PyObject *self, PyObject *args)
{
    (void)self;
    const char *a, *b;
    Py_ssize_t alen, blen;
    PyObject *opts;
    if (!PyArg_ParseTuple(args, "y#y#O!", &a, &alen, &b, &blen, &PyDict_Type, &opts))
        return NULL;
    static const char *const bys[] = {"line", "function", "file", "traceback", NULL};
    static const char *const sorts[] = {"time", "alloc", "live", "end", NULL};
    static const char *const formats[] = {"text", "html", "json", NULL};
    const char *by, *sort, *format, *html;
    cal_diff_opts o = {0};
    if (opt_str(opts, "by", "line", &by) || opt_str(opts, "sort", "time", &sort) ||
        opt_str(opts, "format", "text", &format) ||
        opt_str(opts, "html", NULL, &html) ||
        opt_str(opts, "old_name", "old", &o.old_name) ||
        opt_str(opts, "new_name", "new", &o.new_name) ||
        opt_int(opts, "top", 20, &o.top) || opt_int(opts, "width", 100, &o.width) ||
        opt_int(opts, "tty", 0, &o.tty))
        return NULL;
    if ((o.by = named("by", by, bys)) < 0 ||
        (o.sort = named("sort", sort, sorts)) < 0 ||
        (o.format = named("format", format, formats)) < 0)
        return NULL;
    if (html)
        o.format = CAL_DIFF_HTML;

    int snap_a = cal_snapshot_is_snapshot(a, (size_t)alen);
    int snap_b = cal_snapshot_is_snapshot(b, (size_t)blen);
    if (snap_a != snap_b) {
        PyErr_Format(
            PyExc_TypeError,
            "cannot compare a %s with a %s: give two profiles or two snapshots",
            snap_a ? "memory snapshot" : "profile",
            snap_b ? "memory snapshot" : "profile");
        return NULL;
    }
    cal_buf out;
    cal_buf_init(&out);
    char err[300] = "";
    int rc = -1;
    if (snap_a) {
        cal_snapshot sa, sb;
        if (cal_snapshot_decode(a, (size_t)alen, &sa, err, sizeof err) != 0) {
            PyErr_Format(PyExc_ValueError, "%s: %s", o.old_name, err);
            return NULL;
        }
        if (cal_snapshot_decode(b, (size_t)blen, &sb, err, sizeof err) != 0) {
            cal_snapshot_free(&sa);
            PyErr_Format(PyExc_ValueError, "%s: %s", o.new_name, err);
            return NULL;
        }
        Py_BEGIN_ALLOW_THREADS rc =
            cal_diff_snapshots(&sa, &sb, &o, &out, err, sizeof err);
        Py_END_ALLOW_THREADS cal_snapshot_free(&sa);
        cal_snapshot_free(&sb);
    } else {
        cal_jdoc da, db;
        if (parse(o.old_name, a, alen, &da) != 0) {
            cal_jdoc_free(&da);
            return NULL;
        }
        if (parse(o.new_name, b, blen, &db) != 0) {
            cal_jdoc_free(&da);
            cal_jdoc_free(&db);
            return NULL;
        }
        Py_BEGIN_ALLOW_THREADS rc =
            cal_diff_profiles(da.root, db.root, &o, &out, err, sizeof err);
        Py_END_ALLOW_THREADS cal_jdoc_free(&da);
        cal_jdoc_free(&db);
    }
    if (rc != 0) {
        cal_buf_free(&out);
        if (strcmp(err, "out of memory") == 0)
            return PyErr_NoMemory();
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    if (html) {
        Py_BEGIN_ALLOW_THREADS rc = cal_buf_write_file(&out, html);
        Py_END_ALLOW_THREADS cal_buf_free(&out);
        if (rc != 0)
            return PyErr_SetFromErrnoWithFilename(PyExc_OSError, html);
        return PyUnicode_FromString("");
    }
    PyObject *r =
        PyUnicode_DecodeUTF8(out.data ? out.data : "", (Py_ssize_t)out.len, "replace");
    cal_buf_free(&out);
    return r;
}
