/* snapfile — see snapfile.h.  Raw traces to a cal_snapshot (checked, with
   TypeError / ValueError that name the trace), a cal_snapshot to raw
   traces (equal frames and equal tracebacks as one shared tuple each, as
   tracemalloc shares them), and the file calls around cal_snapshot. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "snapfile.h"

#include "memory.h"

#include "cal_buf.h"
#include "cal_snapshot.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char calx_snapshot_encode_doc[] =
    "snapshot_encode(raw_traces, meta_json) -> bytes\n\n"
    "A snapshot file's bytes (docs/FORMAT.md, \"Snapshot files\").  raw_traces: an\n"
    "iterable of (domain, size, frames, total_nframe, block_size, root_kept), or of\n"
    "tracemalloc's (domain, size, frames, total_nframe), read as block_size = size\n"
    "(1 for a size of 0) and root_kept = 0.  frames: a tuple of (filename, lineno),\n"
    "most recent first.  meta_json: a JSON object, as text.  A file name that is not\n"
    "valid Unicode (lone surrogates) is stored with backslash escapes.  Raises\n"
    "TypeError or ValueError, naming the trace, for what a snapshot cannot hold.";

const char calx_snapshot_decode_doc[] =
    "snapshot_decode(data) -> (raw_traces, meta_json)\n\n"
    "The traces of a snapshot file's bytes, as a list of 6-tuples (domain, size,\n"
    "frames, total_nframe, block_size, root_kept); equal frames tuples are one\n"
    "object, and so are equal (filename, lineno) tuples.  Raises ValueError with\n"
    "the one-line reason for bytes that are not a valid snapshot.";

const char calx_snapshot_write_doc[] =
    "snapshot_write(path, raw_traces, meta_json)\n\n"
    "Write snapshot_encode(raw_traces, meta_json) to path atomically (a temporary\n"
    "file renamed over it, with the mode any new file gets under the umask); a\n"
    "symbolic link, a directory or anything else that is not a regular file at\n"
    "path is not replaced.  Raises OSError on failure.";

const char calx_snapshot_read_doc[] =
    "snapshot_read(path) -> (raw_traces, meta_json)\n\n"
    "snapshot_decode of the file at path.  Raises OSError when it cannot be opened\n"
    "or read (a symbolic link is not followed; a directory is IsADirectoryError),\n"
    "ValueError when it is not a regular file, larger than 4 GiB or not a valid\n"
    "snapshot.";

/* ---- raw traces to a snapshot ------------------------------------------ */

/* An int in [min, max] from item `what` of raw trace i.  0, or -1 with
   TypeError / ValueError set. */
static int get_int(PyObject *o, Py_ssize_t i, const char *what, long long min,
                   long long max, long long *out)
{
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "raw trace %zd: %s must be an int, not %.100s", i,
                     what, Py_TYPE(o)->tp_name);
        return -1;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < min || v > max) {
        PyErr_Format(PyExc_ValueError, "raw trace %zd: %s %R is not in %lld..%lld", i,
                     what, o, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

/* The string index of file name `name`.  CAL_SNAPSHOT_NONE with an
   exception set on error. */
static uint32_t intern_name(cal_snapshot *s, PyObject *name, Py_ssize_t i)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError,
                     "raw trace %zd: a file name must be a str, not %.100s", i,
                     Py_TYPE(name)->tp_name);
        return CAL_SNAPSHOT_NONE;
    }
    PyObject *escaped = NULL;
    Py_ssize_t len;
    const char *text = PyUnicode_AsUTF8AndSize(name, &len);
    if (!text) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return CAL_SNAPSHOT_NONE;
        PyErr_Clear();
        escaped = PyUnicode_AsEncodedString(name, "utf-8", "backslashreplace");
        if (!escaped)
            return CAL_SNAPSHOT_NONE;
        text = PyBytes_AS_STRING(escaped);
        len = PyBytes_GET_SIZE(escaped);
    }
    uint32_t id = CAL_SNAPSHOT_NONE;
    if (memchr(text, '\0', (size_t)len))
        PyErr_Format(PyExc_ValueError, "raw trace %zd: file name %R holds a NUL", i,
                     name);
    else if ((id = cal_snapshot_string(s, text, (size_t)len)) == CAL_SNAPSHOT_NONE)
        PyErr_NoMemory();
    Py_XDECREF(escaped);
    return id;
}

/* The frame indices of raw trace i's frames into *ids (grown as needed),
   their number into *nframes.  0, or -1 with an exception set. */
static int intern_frames(cal_snapshot *s, PyObject *frames, Py_ssize_t i,
                         uint32_t **ids, size_t *cap, long long *nframes)
{
    if (!PyTuple_Check(frames)) {
        PyErr_Format(PyExc_TypeError,
                     "raw trace %zd: frames must be a tuple of (filename, lineno), not "
                     "%.100s",
                     i, Py_TYPE(frames)->tp_name);
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(frames);
    if ((size_t)n > *cap) {
        uint32_t *p = realloc(*ids, (size_t)n * sizeof(**ids));
        if (!p) {
            PyErr_NoMemory();
            return -1;
        }
        *ids = p;
        *cap = (size_t)n;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *f = PyTuple_GET_ITEM(frames, k);
        if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 2) {
            PyErr_Format(PyExc_TypeError,
                         "raw trace %zd: frame %zd must be a (filename, lineno) tuple",
                         i, k);
            return -1;
        }
        long long line;
        uint32_t file = intern_name(s, PyTuple_GET_ITEM(f, 0), i);
        if (file == CAL_SNAPSHOT_NONE ||
            get_int(PyTuple_GET_ITEM(f, 1), i, "a lineno", INT32_MIN, INT32_MAX, &line))
            return -1;
        if (((*ids)[k] = cal_snapshot_frame(s, file, (int32_t)line)) ==
            CAL_SNAPSHOT_NONE) {
            PyErr_NoMemory();
            return -1;
        }
    }
    *nframes = n;
    return 0;
}

/* What building keeps between traces: scratch space for frame indices,
   and the frames tuples already seen.  tracemalloc hands out one tuple per
   distinct traceback, so a tuple seen before (the same object: the traces
   hold it, and it cannot change while the GIL is held) has its frame
   indices copied from its first traceback instead of being interned frame
   by frame again: seven times faster on a million traces. */
typedef struct builder {
    uint32_t *ids;
    size_t cap;
    cal_map seen; /* the frames tuple's address -> index in seen_tb */
    PyObject **seen_obj;
    uint32_t *seen_tb; /* the traceback first built from it */
    size_t nseen, seen_cap;
} builder;

/* Remember that frames tuple `frames` made traceback tb.  0, or -1 on
   allocation failure (not an error: the next one interns it again). */
static int remember(builder *b, PyObject *frames, uint32_t tb)
{
    if (b->nseen == b->seen_cap) {
        size_t n = b->seen_cap ? b->seen_cap * 2 : 256;
        PyObject **o = realloc(b->seen_obj, n * sizeof(*o));
        if (!o)
            return -1;
        b->seen_obj = o;
        uint32_t *t = realloc(b->seen_tb, n * sizeof(*t));
        if (!t)
            return -1;
        b->seen_tb = t;
        b->seen_cap = n;
    }
    if (b->nseen >= CAL_MAP_NONE ||
        cal_map_put(&b->seen, cal_hash_u64((uintptr_t)frames), (uint32_t)b->nseen) != 0)
        return -1;
    b->seen_obj[b->nseen] = frames;
    b->seen_tb[b->nseen++] = tb;
    return 0;
}

/* The traceback first built from frames tuple `frames`, or CAL_SNAPSHOT_NONE. */
static uint32_t recall(const builder *b, PyObject *frames)
{
    size_t cursor = 0;
    uint32_t k;
    while ((k = cal_map_find(&b->seen, cal_hash_u64((uintptr_t)frames), &cursor)) !=
           CAL_MAP_NONE)
        if (b->seen_obj[k] == frames)
            return b->seen_tb[k];
    return CAL_SNAPSHOT_NONE;
}

/* Add raw trace i (`t`) to s.  0, or -1 with an exception set. */
static int add_trace(cal_snapshot *s, builder *b, PyObject *t, Py_ssize_t i)
{
    Py_ssize_t n = PyTuple_Check(t) ? PyTuple_GET_SIZE(t) : -1;
    if (n != 4 && n != 6) {
        PyErr_Format(PyExc_TypeError,
                     "raw trace %zd: expected a tuple (domain, size, frames, "
                     "total_nframe[, block_size, root_kept]), not %.100s of %zd items",
                     i, Py_TYPE(t)->tp_name, n < 0 ? (Py_ssize_t)0 : n);
        return -1;
    }
    long long domain, size, nframes, total, block_size, root_kept = 0;
    PyObject *frames = PyTuple_GET_ITEM(t, 2);
    uint32_t known = recall(b, frames);
    if (known != CAL_SNAPSHOT_NONE) {
        /* Copied out: interning the traceback may move s->frame_ids. */
        const cal_snap_traceback *kt = &s->tracebacks[known];
        if (kt->nframes)
            memcpy(b->ids, s->frame_ids + kt->first, kt->nframes * sizeof(*b->ids));
        nframes = kt->nframes;
    }
    if (get_int(PyTuple_GET_ITEM(t, 0), i, "domain", 0, UINT32_MAX, &domain) ||
        get_int(PyTuple_GET_ITEM(t, 1), i, "size", 0, INT64_MAX, &size) ||
        (known == CAL_SNAPSHOT_NONE &&
         intern_frames(s, frames, i, &b->ids, &b->cap, &nframes)) ||
        get_int(PyTuple_GET_ITEM(t, 3), i, "total_nframe", nframes, UINT32_MAX, &total))
        return -1;
    if (n == 6) {
        if (get_int(PyTuple_GET_ITEM(t, 4), i, "block_size", 1, INT64_MAX,
                    &block_size) ||
            get_int(PyTuple_GET_ITEM(t, 5), i, "root_kept", 0, nframes, &root_kept))
            return -1;
    } else {
        /* tracemalloc traces every block: each stands for itself.  A
           block of 0 bytes still counts one block (block_size must be
           positive); its size stays 0. */
        block_size = size > 0 ? size : 1;
    }
    uint32_t tb = cal_snapshot_traceback(s, b->ids, (uint32_t)nframes, (uint32_t)total,
                                         (uint32_t)root_kept);
    if (tb == CAL_SNAPSHOT_NONE ||
        cal_snapshot_add(s, (uint32_t)domain, tb, size, block_size)) {
        PyErr_NoMemory();
        return -1;
    }
    if (known == CAL_SNAPSHOT_NONE)
        (void)remember(b, frames, tb);
    return 0;
}

/* Build `s` (initialised here) from the arguments.  0, or -1 with an
   exception set and s empty. */
static int build(cal_snapshot *s, PyObject *raw, PyObject *meta)
{
    cal_snapshot_init(s);
    if (!PyUnicode_Check(meta)) {
        PyErr_Format(PyExc_TypeError, "meta_json must be a str, not %.100s",
                     Py_TYPE(meta)->tp_name);
        return -1;
    }
    Py_ssize_t meta_len;
    const char *meta_text = PyUnicode_AsUTF8AndSize(meta, &meta_len);
    if (!meta_text)
        return -1;
    char err[300];
    if (cal_snapshot_check_meta(meta_text, (size_t)meta_len, err, sizeof err) != 0) {
        PyErr_Format(PyExc_ValueError, "meta_json: %s", err);
        return -1;
    }
    if (cal_snapshot_set_meta(s, meta_text, (size_t)meta_len) != 0) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *seq = PySequence_Fast(raw, "raw_traces must be an iterable of traces");
    if (!seq) {
        cal_snapshot_free(s);
        return -1;
    }
    builder b;
    memset(&b, 0, sizeof b);
    cal_map_init(&b.seen);
    int rc = 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n && rc == 0; i++)
        rc = add_trace(s, &b, PySequence_Fast_GET_ITEM(seq, i), i);
    free(b.ids);
    free(b.seen_obj);
    free(b.seen_tb);
    cal_map_clear(&b.seen);
    Py_DECREF(seq);
    if (rc != 0)
        cal_snapshot_free(s);
    return rc;
}

/* ---- a snapshot to raw traces ------------------------------------------ */

/* Release the first n references of v, and v. */
static void decref_all(PyObject **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        Py_XDECREF(v[i]);
    free(v);
}

/* (raw_traces, meta_json) of s, or NULL with an exception set. */
static PyObject *to_python(const cal_snapshot *s)
{
    PyObject *result = NULL, *list = NULL;
    cal_map same_frames; /* frame id sequences to the traceback that has it */
    cal_map_init(&same_frames);
    PyObject **strings = calloc(s->nstrings + 1, sizeof(*strings));
    PyObject **frames = calloc(s->nframes + 1, sizeof(*frames));
    PyObject **tracebacks = calloc(s->ntracebacks + 1, sizeof(*tracebacks));
    if (!strings || !frames || !tracebacks) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < s->nstrings; i++)
        if (!(strings[i] = PyUnicode_DecodeUTF8(
                  s->strings[i], (Py_ssize_t)strlen(s->strings[i]), NULL)))
            goto done;
    for (size_t i = 0; i < s->nframes; i++) {
        PyObject *line = PyLong_FromLong(s->frames[i].line);
        if (!line)
            goto done;
        frames[i] = PyTuple_Pack(2, strings[s->frames[i].file], line);
        Py_DECREF(line);
        if (!frames[i])
            goto done;
    }
    /* Tracebacks that differ only in their total or root_kept share their
       frames tuple too. */
    for (size_t i = 0; i < s->ntracebacks; i++) {
        const cal_snap_traceback *t = &s->tracebacks[i];
        const uint32_t *ids = t->nframes ? s->frame_ids + t->first : NULL;
        uint64_t h = cal_hash_bytes(ids, t->nframes * sizeof(*ids));
        size_t cursor = 0;
        uint32_t j;
        while ((j = cal_map_find(&same_frames, h, &cursor)) != CAL_MAP_NONE) {
            const cal_snap_traceback *u = &s->tracebacks[j];
            if (u->nframes == t->nframes &&
                (!t->nframes ||
                 !memcmp(s->frame_ids + u->first, ids, t->nframes * sizeof(*ids))))
                break;
        }
        if (j != CAL_MAP_NONE) {
            Py_INCREF(tracebacks[j]);
            tracebacks[i] = tracebacks[j];
            continue;
        }
        if (cal_map_put(&same_frames, h, (uint32_t)i) != 0) {
            PyErr_NoMemory();
            goto done;
        }
        PyObject *tb = tracebacks[i] = PyTuple_New((Py_ssize_t)t->nframes);
        if (!tb)
            goto done;
        for (uint32_t k = 0; k < t->nframes; k++) {
            PyObject *f = frames[ids[k]];
            Py_INCREF(f);
            PyTuple_SET_ITEM(tb, k, f);
        }
    }
    if (!(list = PyList_New((Py_ssize_t)s->ntraces)))
        goto done;
    for (size_t i = 0; i < s->ntraces; i++) {
        const cal_snap_trace *t = &s->traces[i];
        const cal_snap_traceback *tb = &s->tracebacks[t->traceback];
        PyObject *item =
            Py_BuildValue("(kLOkLk)", (unsigned long)t->domain, (long long)t->size,
                          tracebacks[t->traceback], (unsigned long)tb->total,
                          (long long)t->block_size, (unsigned long)tb->root_kept);
        if (!item)
            goto done;
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    result = Py_BuildValue("(Os)", list, s->meta_json ? s->meta_json : "{}");
done:
    Py_XDECREF(list);
    cal_map_clear(&same_frames);
    decref_all(strings, s->nstrings);
    decref_all(frames, s->nframes);
    decref_all(tracebacks, s->ntracebacks);
    return result;
}

/* ---- the functions ----------------------------------------------------- */

static PyObject *snapshot_encode(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *raw, *meta;
    if (!PyArg_ParseTuple(args, "OO:snapshot_encode", &raw, &meta))
        return NULL;
    cal_snapshot s;
    if (build(&s, raw, meta) != 0)
        return NULL;
    cal_buf b;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = cal_snapshot_encode(&s, &b);
    cal_snapshot_free(&s);
    Py_END_ALLOW_THREADS if (rc != 0) return PyErr_NoMemory();
    PyObject *bytes = PyBytes_FromStringAndSize(b.data, (Py_ssize_t)b.len);
    cal_buf_free(&b);
    return bytes;
}

static PyObject *snapshot_decode(PyObject *self, PyObject *data)
{
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) != 0)
        return NULL;
    cal_snapshot s;
    char err[512];
    int rc;
    Py_BEGIN_ALLOW_THREADS rc =
        cal_snapshot_decode(view.buf, (size_t)view.len, &s, err, sizeof err);
    Py_END_ALLOW_THREADS PyBuffer_Release(&view);
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    PyObject *r = to_python(&s);
    cal_snapshot_free(&s);
    return r;
}

static PyObject *snapshot_write(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *path_arg, *path, *raw, *meta;
    if (!PyArg_ParseTuple(args, "OOO:snapshot_write", &path_arg, &raw, &meta) ||
        !PyUnicode_FSConverter(path_arg, &path))
        return NULL;
    cal_snapshot s;
    if (build(&s, raw, meta) != 0) {
        Py_DECREF(path);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = cal_snapshot_write(&s, PyBytes_AS_STRING(path));
    int saved = errno;
    cal_snapshot_free(&s);
    errno = saved;
    Py_END_ALLOW_THREADS if (rc != 0)
    {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_arg);
        Py_DECREF(path);
        return NULL;
    }
    Py_DECREF(path);
    Py_RETURN_NONE;
}

static PyObject *snapshot_read(PyObject *self, PyObject *path_arg)
{
    (void)self;
    PyObject *path;
    if (!PyUnicode_FSConverter(path_arg, &path))
        return NULL;
    cal_snapshot s;
    char err[1024];
    int rc, saved;
    Py_BEGIN_ALLOW_THREADS rc =
        cal_snapshot_read(PyBytes_AS_STRING(path), &s, err, sizeof err);
    saved = errno;
    Py_END_ALLOW_THREADS if (rc != 0)
    {
        if (saved == ENOMEM)
            PyErr_NoMemory();
        else if (saved) {
            errno = saved;
            PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_arg);
        } else {
            PyErr_SetString(PyExc_ValueError, err);
        }
        Py_DECREF(path);
        return NULL;
    }
    Py_DECREF(path);
    PyObject *r = to_python(&s);
    cal_snapshot_free(&s);
    return r;
}

/* The bindings: what they build for the program (a snapshot's millions of
   tuples, the encoder's buffers) is not sampled, as tracemalloc builds its
   own untraced (calx_memory_set_unsampled). */
#define UNSAMPLED(call)                                                                \
    do {                                                                               \
        int was_ = calx_memory_set_unsampled(1);                                       \
        PyObject *r_ = (call);                                                         \
        calx_memory_set_unsampled(was_);                                               \
        return r_;                                                                     \
    } while (0)

PyObject *calx_snapshot_encode(PyObject *self, PyObject *args)
{
    UNSAMPLED(snapshot_encode(self, args));
}

PyObject *calx_snapshot_decode(PyObject *self, PyObject *data)
{
    UNSAMPLED(snapshot_decode(self, data));
}

PyObject *calx_snapshot_write(PyObject *self, PyObject *args)
{
    UNSAMPLED(snapshot_write(self, args));
}

PyObject *calx_snapshot_read(PyObject *self, PyObject *path_arg)
{
    UNSAMPLED(snapshot_read(self, path_arg));
}
