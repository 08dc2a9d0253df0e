/*
 * heapdump — heap scans saved to files and loaded back (calipers.heap's
 * Heap.save and load; the file is src/core/cal_heapfile's, docs/FORMAT.md
 * "Heap dump files").  A loaded heap is a calx_heap like a scan's, with
 * its `file` set: its addresses belong to the moment (and the process)
 * of the scan, so nothing dereferences them, and the allocation lines are
 * the file's.  Called with the GIL held; the graph and the file's bytes
 * are the profiler's memory (allocated under the shim's guard).
 */
#define PY_SSIZE_T_CLEAN
#include "heapdump.h" /* Python.h first */

#include "heap_state.h"
#include "runtime.h"

#include "cal_binfile.h"
#include "cal_snapshot.h"
#include "cal_utf8.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A copy of `s` that a heap dump can hold: each byte that does not start
   valid UTF-8, and each NUL, becomes '?'.  NULL when out of memory. */
static char *clean_copy(const char *s)
{
    size_t len = strlen(s), i = 0;
    char *c = malloc(len + 1);
    if (!c)
        return NULL;
    memcpy(c, s, len + 1);
    while (i < len) {
        size_t n = cal_utf8_decode(c + i, len - i, NULL);
        if (n == 0) {
            c[i++] = '?';
            continue;
        }
        i += n;
    }
    return c;
}

/* The strings of a file being built, each once (by content, after
   cleaning), in the order first added: the same heap saves the same
   bytes, and a loaded heap saves again as it was saved. */
typedef struct strtab {
    char **v;
    size_t n, cap;
    cal_map by_text; /* cal_hash_bytes(text) -> index */
} strtab;

/* The index of (a clean copy of) `s`.  CAL_MAP_NONE when out of memory. */
static uint32_t strtab_add(strtab *t, const char *s)
{
    char *c = clean_copy(s);
    if (!c)
        return CAL_MAP_NONE;
    uint64_t key = cal_hash_bytes(c, strlen(c));
    size_t cursor = 0;
    uint32_t k;
    while ((k = cal_map_find(&t->by_text, key, &cursor)) != CAL_MAP_NONE)
        if (strcmp(t->v[k], c) == 0) {
            free(c);
            return k;
        }
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        char **v = realloc(t->v, cap * sizeof *v);
        if (!v) {
            free(c);
            return CAL_MAP_NONE;
        }
        t->v = v;
        t->cap = cap;
    }
    if (t->n >= CAL_MAP_NONE - 1 ||
        cal_map_put(&t->by_text, key, (uint32_t)t->n) != 0) {
        free(c);
        return CAL_MAP_NONE;
    }
    t->v[t->n] = c;
    return (uint32_t)t->n++;
}

static void strtab_free(strtab *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i]);
    free(t->v);
    cal_map_clear(&t->by_text);
}

/* The file's view of heap h (its graph borrowed, the rest built), in *f
   with its strings in *t.  0, or -1 when out of memory.  Free with
   view_free. */
static int view_of(const calx_heap *h, const char *meta, cal_heapfile *f, strtab *t)
{
    cal_heapfile_init(f);
    memset(t, 0, sizeof *t);
    cal_map_init(&t->by_text);
    f->g = h->g; /* borrowed: view_free gives it back untouched */
    f->meta_json = (char *)meta;
    size_t n = h->g.n;
    f->types = malloc((h->ntypes ? h->ntypes : 1) * sizeof *f->types);
    f->names = malloc((h->nnames ? h->nnames : 1) * 2 * sizeof *f->names);
    if (!f->types || !f->names)
        return -1;
    for (uint32_t k = 0; k < h->ntypes; k++)
        if ((f->types[k] = strtab_add(t, h->types[k].name)) == CAL_MAP_NONE)
            return -1;
    f->ntypes = h->ntypes;
    for (size_t i = 0; h->nnames && i < n; i++) {
        uint32_t k = cal_map_get(&h->named, (uint64_t)i);
        if (k == CAL_MAP_NONE)
            continue;
        uint32_t s = strtab_add(t, h->names[k]);
        if (s == CAL_MAP_NONE)
            return -1;
        f->names[2 * f->nnames] = (uint32_t)i;
        f->names[2 * f->nnames++ + 1] = s;
    }
    /* Allocation lines: one entry per distinct (file, line), found by the
       file name's address first (the same name is one pointer). */
    cal_map seen;
    cal_map_init(&seen);
    const char **src = NULL; /* per line: the file name's address */
    size_t cap = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        int line = 0;
        const char *file = calx_heap_node_line(h, i, &line);
        if (!file)
            continue;
        if (!f->line_of && !(f->line_of = calloc(n, sizeof *f->line_of))) {
            rc = -1;
            break;
        }
        uint64_t key = cal_hash_u64((uint64_t)(uintptr_t)file ^ (uint32_t)line);
        size_t cursor = 0;
        uint32_t k;
        while ((k = cal_map_find(&seen, key, &cursor)) != CAL_MAP_NONE)
            if (src[k] == file && f->lines[2 * k + 1] == (uint32_t)line)
                break;
        if (k == CAL_MAP_NONE) {
            if (f->nlines == cap) {
                cap = cap ? 2 * cap : 256;
                uint32_t *p = realloc(f->lines, cap * 2 * sizeof *p);
                if (p)
                    f->lines = p;
                const char **q = p ? realloc(src, cap * sizeof *q) : NULL;
                if (!q) {
                    rc = -1;
                    break;
                }
                src = q;
            }
            k = (uint32_t)f->nlines;
            uint32_t s = strtab_add(t, file);
            if (s == CAL_MAP_NONE || cal_map_put(&seen, key, k) != 0) {
                rc = -1;
                break;
            }
            f->lines[2 * k] = s;
            f->lines[2 * k + 1] = (uint32_t)line;
            src[k] = file;
            f->nlines++;
        }
        f->line_of[i] = k + 1;
    }
    free(src);
    cal_map_clear(&seen);
    f->strings = t->v;
    f->nstrings = t->n;
    return rc;
}

static void view_free(cal_heapfile *f, strtab *t)
{
    free(f->types);
    free(f->names);
    free(f->lines);
    free(f->line_of);
    strtab_free(t);
}

/* The bytes of heap `h` with `meta`, into *out.  0, or -1 with an
   exception set. */
static int encode(const calx_heap *h, PyObject *meta, cal_buf *out)
{
    Py_ssize_t len;
    const char *text =
        PyUnicode_Check(meta) ? PyUnicode_AsUTF8AndSize(meta, &len) : NULL;
    if (!text) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "meta_json must be a str");
        return -1;
    }
    char why[256];
    if (cal_snapshot_check_meta(text, (size_t)len, why, sizeof why) != 0) {
        PyErr_Format(PyExc_ValueError, "meta_json: %s", why);
        return -1;
    }
    cal_heapfile f;
    strtab t;
    int guard = calx_runtime_guard_enter();
    int rc = view_of(h, text, &f, &t), invalid = 0;
    if (rc == 0) {
        rc = cal_heapfile_encode(&f, out);
        invalid = rc != 0 && errno == EINVAL;
    }
    view_free(&f, &t);
    calx_runtime_guard_leave(guard);
    if (invalid) /* not expected: the view holds only what the format can */
        PyErr_SetString(PyExc_ValueError, "this heap does not fit a heap dump file");
    else if (rc != 0)
        PyErr_NoMemory();
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A heap over a decoded file (taken: *f is emptied), its dominators
   computed.  NULL when out of memory.  Under the guard. */
static calx_heap *heap_of_file(cal_heapfile *f)
{
    calx_heap *h = calloc(1, sizeof *h);
    cal_heapfile *own = malloc(sizeof *own);
    if (!h || !own) {
        free(h);
        free(own);
        return NULL;
    }
    *own = *f;
    cal_heapfile_init(f);
    h->file = own;
    h->g = own->g;
    cal_heapgraph_init(&own->g);
    h->types = calloc(own->ntypes ? own->ntypes : 1, sizeof *h->types);
    h->names = calloc(own->nnames ? own->nnames : 1, sizeof *h->names);
    if (!h->types || !h->names)
        goto fail;
    for (size_t k = 0; k < own->ntypes; k++) {
        if (!(h->types[k].name = strdup(own->strings[own->types[k]])))
            goto fail;
        h->ntypes++;
    }
    h->types_cap = h->ntypes;
    for (size_t k = 0; k < own->nnames; k++) {
        if (!(h->names[k] = strdup(own->strings[own->names[2 * k + 1]])))
            goto fail;
        h->nnames++;
        if (cal_map_put(&h->named, own->names[2 * k], (uint32_t)k) != 0)
            goto fail;
    }
    h->names_cap = h->nnames;
    double t0 = now_s();
    if (cal_heapgraph_dominators(&h->g) != 0)
        goto fail;
    h->analysis_s = now_s() - t0;
    /* The graph's peak, the dominator pass's, as a scan counts it (the
       decoder's own buffers are not counted). */
    h->peak_bytes = h->g.peak + h->ntypes * sizeof(type_info);
    return h;
fail:
    calx_heap_free(h);
    return NULL;
}

/* (graph, meta_json) of decoded file f (taken), or NULL with an exception
   set. */
static PyObject *loaded(cal_heapfile *f)
{
    PyObject *meta = PyUnicode_DecodeUTF8(
        f->meta_json ? f->meta_json : "{}",
        f->meta_json ? (Py_ssize_t)strlen(f->meta_json) : 2, "replace");
    int guard = calx_runtime_guard_enter();
    calx_heap *h = meta ? heap_of_file(f) : NULL;
    cal_heapfile_free(f);
    calx_runtime_guard_leave(guard);
    if (!h) {
        Py_XDECREF(meta);
        return meta ? PyErr_NoMemory() : NULL;
    }
    PyObject *cap = calx_heap_new_graph(h);
    if (!cap) {
        Py_DECREF(meta);
        return NULL;
    }
    return Py_BuildValue("(NN)", cap, meta);
}

PyObject *calx_heap_encode(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap, *meta;
    if (!PyArg_ParseTuple(args, "OO:heap_encode", &cap, &meta))
        return NULL;
    calx_heap *h = calx_heap_of(cap);
    cal_buf b;
    if (!h || encode(h, meta, &b) != 0)
        return NULL;
    PyObject *bytes = PyBytes_FromStringAndSize(b.data, (Py_ssize_t)b.len);
    int guard = calx_runtime_guard_enter();
    cal_buf_free(&b);
    calx_runtime_guard_leave(guard);
    return bytes;
}

PyObject *calx_heap_write(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap, *path_arg, *path, *meta;
    if (!PyArg_ParseTuple(args, "OOO:heap_write", &cap, &path_arg, &meta))
        return NULL;
    calx_heap *h = calx_heap_of(cap);
    if (!h || !PyUnicode_FSConverter(path_arg, &path))
        return NULL;
    cal_buf b;
    if (encode(h, meta, &b) != 0) {
        Py_DECREF(path);
        return NULL;
    }
    int rc, saved;
    Py_BEGIN_ALLOW_THREADS;
    int guard = calx_runtime_guard_enter();
    rc = cal_buf_write_file(&b, PyBytes_AS_STRING(path));
    saved = errno;
    cal_buf_free(&b);
    calx_runtime_guard_leave(guard);
    Py_END_ALLOW_THREADS;
    Py_DECREF(path);
    if (rc != 0) {
        errno = saved;
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_arg);
    }
    Py_RETURN_NONE;
}

PyObject *calx_heap_decode(PyObject *self, PyObject *data)
{
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) != 0)
        return NULL;
    cal_heapfile f;
    char err[512];
    int guard = calx_runtime_guard_enter();
    int rc = cal_heapfile_decode(view.buf, (size_t)view.len, &f, err, sizeof err);
    calx_runtime_guard_leave(guard);
    PyBuffer_Release(&view);
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    return loaded(&f);
}

PyObject *calx_heap_read(PyObject *self, PyObject *path_arg)
{
    (void)self;
    PyObject *path;
    if (!PyUnicode_FSConverter(path_arg, &path))
        return NULL;
    cal_heapfile f;
    char err[1024];
    int rc, saved;
    Py_BEGIN_ALLOW_THREADS;
    int guard = calx_runtime_guard_enter();
    rc = cal_heapfile_read(PyBytes_AS_STRING(path), &f, err, sizeof err);
    saved = errno;
    calx_runtime_guard_leave(guard);
    Py_END_ALLOW_THREADS;
    Py_DECREF(path);
    if (rc != 0) {
        if (saved == ENOMEM) {
            PyErr_NoMemory();
        } else if (saved) {
            errno = saved;
            PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_arg);
        } else {
            PyErr_SetString(PyExc_ValueError, err);
        }
        return NULL;
    }
    return loaded(&f);
}
