/*
 * cal_pprof — the stack table as pprof's profile.proto: a serialised
 * perftools.profiles.Profile, written by hand (no protobuf library).  The
 * bytes are not compressed: pprof files are conventionally gzipped, which
 * the Python side does with the standard library.
 *
 * THE FORMAT.  github.com/google/pprof, proto/profile.proto (proto3); the
 * messages and field numbers used here:
 *
 *   Profile    1 sample_type (ValueType)   2 sample (Sample)
 *              4 location (Location)       5 function (Function)
 *              6 string_table (string)     9 time_nanos   10 duration_nanos
 *              11 period_type (ValueType)  12 period      14 default_sample_type
 *   ValueType  1 type (string index)       2 unit (string index)
 *   Sample     1 location_id (packed uint64, the leaf first)
 *              2 value (packed int64, one per sample_type)   3 label (Label)
 *   Label      1 key   2 str (string indices)   3 num
 *   Location   1 id    4 line (Line)
 *   Line       1 function_id   2 line
 *   Function   1 id    2 name   4 filename (string indices)   5 start_line
 *
 * (system_name, 3, is left out: pprof takes a function whose system_name
 * is its name for one to demangle, and its C++ demangler turns "<module>"
 * into nothing.)
 *
 * The string table starts with "" (index 0), as the format requires; ids
 * start at 1 (0 means none).  Proto3 fields may come in any order; these
 * are written in field order, each message whole.
 *
 * WHAT GOES WHERE.  Four sample types: cpu/nanoseconds (Python + native +
 * system), wall/nanoseconds (cpu + waiting), alloc_space/bytes (Python +
 * native bytes allocated) and alloc_samples/count (the allocation samples
 * behind them: byte samples, not objects).  One Sample per node of the
 * tree with a non-zero self figure, labelled with its thread ("thread":
 * "MainThread (pid 4080)") and process ("pid", a number).  A Function per
 * frame of the table (the synthetic CAL_EXPORT_NO_FRAME for the time a
 * thread spent with no Python frame: its root's self figures), a Location
 * per (frame, line) the tree holds.  period_type cpu/nanoseconds and
 * period the mean sampling interval; duration_nanos the run's wall time;
 * time_nanos its start; default_sample_type cpu.
 */
#include "cal_export.h"

#include "cal_map.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the wire format ------------------------------------------------------ */

void cal_pb_varint(cal_buf *b, uint64_t v)
{
    char tmp[10];
    size_t n = 0;
    while (v >= 0x80) {
        tmp[n++] = (char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    tmp[n++] = (char)v;
    cal_buf_add(b, tmp, n);
}

void cal_pb_key(cal_buf *b, uint32_t field, uint32_t wire)
{
    cal_pb_varint(b, ((uint64_t)field << 3) | wire);
}

void cal_pb_uint(cal_buf *b, uint32_t field, uint64_t v)
{
    cal_pb_key(b, field, 0);
    cal_pb_varint(b, v);
}

void cal_pb_bytes(cal_buf *b, uint32_t field, const void *data, size_t n)
{
    cal_pb_key(b, field, 2);
    cal_pb_varint(b, n);
    cal_buf_add(b, data, n);
}

/* A submessage from `msg`, then msg emptied for the next one. */
static void put_msg(cal_buf *b, uint32_t field, cal_buf *msg)
{
    if (!cal_buf_ok(msg))
        b->failed = 1;
    cal_pb_bytes(b, field, msg->data ? msg->data : "", msg->len);
    msg->len = 0;
}

/* ---- the string table ------------------------------------------------------ */

typedef struct strtab {
    char **s;
    size_t n, cap;
    cal_map index; /* hash of the text -> index */
    int failed;
} strtab;

/* The index of `s` in the table, added on first use (0 on failure). */
static uint64_t str_id(strtab *t, const char *s)
{
    size_t len = strlen(s);
    uint64_t h = cal_hash_bytes(s, len);
    size_t cursor = 0;
    uint32_t i;
    while ((i = cal_map_find(&t->index, h, &cursor)) != CAL_MAP_NONE)
        if (strcmp(t->s[i], s) == 0)
            return i;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        char **grown = realloc(t->s, cap * sizeof *grown);
        if (!grown) {
            t->failed = 1;
            return 0;
        }
        t->s = grown;
        t->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy || cal_map_put(&t->index, h, (uint32_t)t->n) != 0) {
        free(copy);
        t->failed = 1;
        return 0;
    }
    memcpy(copy, s, len + 1);
    t->s[t->n] = copy;
    return t->n++;
}

static void strtab_free(strtab *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->s[i]);
    free(t->s);
    cal_map_clear(&t->index);
}

/* ---- the profile --------------------------------------------------------- */

static void value_type(cal_buf *out, cal_buf *msg, uint32_t field, uint64_t type,
                       uint64_t unit)
{
    cal_pb_uint(msg, 1, type);
    cal_pb_uint(msg, 2, unit);
    put_msg(out, field, msg);
}

/* Locations: one per (frame, line) in the order the tree meets them, and
   the one for roots (no frame).  loc[i]: node i's location id. */
static int locations(const cal_extable *t, uint64_t *loc, int64_t *loc_frame,
                     int64_t *loc_line, size_t *nloc)
{
    cal_map seen;
    cal_map_init(&seen);
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; i < t->nnodes && rc == 0; i++) {
        const cal_exnode *nd = &t->nodes[i];
        int64_t frame = nd->frame < 0 ? (int64_t)t->nframes : nd->frame;
        int64_t line = nd->frame < 0 ? 0 : nd->line;
        uint64_t key = ((uint64_t)frame << 32) ^ (uint32_t)line;
        size_t cursor = 0;
        uint32_t j;
        while ((j = cal_map_find(&seen, key, &cursor)) != CAL_MAP_NONE)
            if (loc_frame[j] == frame && loc_line[j] == line)
                break;
        if (j == CAL_MAP_NONE) {
            j = (uint32_t)n++;
            loc_frame[j] = frame;
            loc_line[j] = line;
            rc = cal_map_put(&seen, key, j);
        }
        loc[i] = (uint64_t)j + 1;
    }
    cal_map_clear(&seen);
    *nloc = n;
    return rc;
}

void cal_pprof_write(const cal_extable *t, cal_buf *out)
{
    strtab st = {0};
    cal_map_init(&st.index);
    cal_buf msg, sub;
    cal_buf_init(&msg);
    cal_buf_init(&sub);
    size_t nn = t->nnodes ? t->nnodes : 1;
    uint64_t *loc = calloc(nn, sizeof *loc);
    int64_t *loc_frame = calloc(nn, sizeof *loc_frame);
    int64_t *loc_line = calloc(nn, sizeof *loc_line);
    uint64_t *path = calloc(nn, sizeof *path);
    size_t nloc = 0;
    if (!loc || !loc_frame || !loc_line || !path ||
        locations(t, loc, loc_frame, loc_line, &nloc) != 0) {
        out->failed = 1;
        goto done;
    }

    str_id(&st, "");
    uint64_t s_cpu = str_id(&st, "cpu"), s_wall = str_id(&st, "wall");
    uint64_t s_ns = str_id(&st, "nanoseconds");
    uint64_t s_space = str_id(&st, "alloc_space"), s_bytes = str_id(&st, "bytes");
    uint64_t s_asamples = str_id(&st, "alloc_samples"), s_count = str_id(&st, "count");
    uint64_t s_thread = str_id(&st, "thread"), s_pid = str_id(&st, "pid");

    /* 1: sample_type */
    value_type(out, &msg, 1, s_cpu, s_ns);
    value_type(out, &msg, 1, s_wall, s_ns);
    value_type(out, &msg, 1, s_space, s_bytes);
    value_type(out, &msg, 1, s_asamples, s_count);

    /* 2: sample, one per node with a self figure */
    uint64_t *thread_name = calloc(t->nthreads ? t->nthreads : 1, sizeof *thread_name);
    if (!thread_name) {
        out->failed = 1;
        goto done;
    }
    for (size_t i = 0; i < t->nthreads; i++)
        thread_name[i] = str_id(&st, t->thread_names[i]);
    for (size_t i = 0; i < t->nnodes; i++) {
        const cal_exnode *nd = &t->nodes[i];
        if (!nd->cpu_ns && !nd->wall_ns && !nd->alloc_bytes && !nd->alloc_samples)
            continue;
        size_t depth = 0;
        path[depth++] = loc[i];
        for (int64_t p = nd->parent; p >= 0 && t->nodes[p].parent >= 0;
             p = t->nodes[p].parent)
            path[depth++] = loc[p];
        for (size_t k = 0; k < depth; k++)
            cal_pb_varint(&sub, path[k]);
        put_msg(&msg, 1, &sub);
        cal_pb_varint(&sub, (uint64_t)nd->cpu_ns);
        cal_pb_varint(&sub, (uint64_t)nd->wall_ns);
        cal_pb_varint(&sub, (uint64_t)nd->alloc_bytes);
        cal_pb_varint(&sub, (uint64_t)nd->alloc_samples);
        put_msg(&msg, 2, &sub);
        cal_pb_uint(&sub, 1, s_thread);
        cal_pb_uint(&sub, 2, thread_name[nd->thread]);
        put_msg(&msg, 3, &sub);
        cal_pb_uint(&sub, 1, s_pid);
        cal_pb_uint(&sub, 3, (uint64_t)t->thread_pid[nd->thread]);
        put_msg(&msg, 3, &sub);
        put_msg(out, 2, &msg);
    }
    free(thread_name);

    /* 4: location */
    for (size_t j = 0; j < nloc; j++) {
        cal_pb_uint(&msg, 1, j + 1);
        cal_pb_uint(&sub, 1, (uint64_t)loc_frame[j] + 1);
        cal_pb_uint(&sub, 2, (uint64_t)loc_line[j]);
        put_msg(&msg, 4, &sub);
        put_msg(out, 4, &msg);
    }

    /* 5: function, one per frame, then the one for no frame */
    for (size_t f = 0; f <= t->nframes; f++) {
        int real = f < t->nframes;
        uint64_t name =
            str_id(&st, real ? cal_extable_frame_name(t, f) : CAL_EXPORT_NO_FRAME);
        cal_pb_uint(&msg, 1, f + 1);
        cal_pb_uint(&msg, 2, name);
        cal_pb_uint(&msg, 4, real ? str_id(&st, cal_extable_frame_file(t, f)) : 0);
        cal_pb_uint(&msg, 5, real ? (uint64_t)cal_extable_frame_line(t, f) : 0);
        put_msg(out, 5, &msg);
    }

    /* 6: string_table, complete now */
    for (size_t i = 0; i < st.n; i++)
        cal_pb_bytes(out, 6, st.s[i], strlen(st.s[i]));

    /* 9, 10: when it started, how long it ran */
    double start = cal_jv_getnum(cal_jv_get(t->root, "program"), "start_time_unix", 0);
    double wall = cal_jv_getnum(cal_jv_get(t->root, "summary"), "wall_s", 0);
    cal_pb_uint(out, 9, (uint64_t)llround(start * 1e9));
    cal_pb_uint(out, 10, (uint64_t)llround(wall * 1e9));
    /* 11, 12: what a sample is worth: the mean interval, in CPU time */
    double interval = cal_jv_getnum(cal_jv_get(t->root, "config"), "interval_s", 0);
    value_type(out, &msg, 11, s_cpu, s_ns);
    cal_pb_uint(out, 12, (uint64_t)llround(interval * 1e9));
    /* 14: what pprof shows first */
    cal_pb_uint(out, 14, s_cpu);
    if (st.failed || !cal_buf_ok(&msg) || !cal_buf_ok(&sub))
        out->failed = 1;
done:
    free(loc);
    free(loc_frame);
    free(loc_line);
    free(path);
    cal_buf_free(&msg);
    cal_buf_free(&sub);
    strtab_free(&st);
}
