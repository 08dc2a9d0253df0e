/*
 * cal_export — the entry point of the exports (see cal_export.h) and the
 * reading of the stack table the writers share.
 *
 * The gate (cal_view_check) has checked the types and ranges of every
 * member, but not that the table's indices hold together: a node's parent
 * must come before it (so walking parents ends), its frame and thread must
 * exist.  A hand-edited profile may break any of these, so they are
 * checked here, before a writer follows an index, and the export is
 * refused with one line that names the node.
 *
 * Times become whole nanoseconds once, here (python+native+system is the
 * CPU time, + waiting the wall time), so every writer rounds the same way
 * and their totals agree with one another.
 */
#include "cal_export.h"

#include "cal_stacks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const FORMATS[CAL_EXPORT_NFORMATS] = {
    "pprof", "speedscope", "collapsed", "collapsed-alloc", "firefox",
};

/* The node columns are the writer's (cal_stacks_node_fields), in order. */
_Static_assert(CAL_EXN_NFIELDS == CAL_STACKS_NODE_FIELDS, "one column list");

int cal_export_format_named(const char *name)
{
    for (int f = 0; f < CAL_EXPORT_NFORMATS; f++)
        if (name && strcmp(name, FORMATS[f]) == 0)
            return f;
    return -1;
}

const char *cal_export_format_name(int f)
{
    return f >= 0 && f < CAL_EXPORT_NFORMATS ? FORMATS[f] : "?";
}

static int64_t ns_of(double s) { return (int64_t)llround(s * 1e9); }

static double num_at(const cal_jv *node, int field)
{
    return cal_jv_num(cal_jv_at(node, (size_t)field), 0);
}

/* Thread i's display name (malloc'd), or NULL when out of memory. */
static char *thread_name(const cal_jv *root, size_t i, int64_t pid)
{
    const cal_jv *th = cal_jv_at(cal_jv_get(root, "threads"), i);
    const char *name = cal_jv_getstr(th, "name", NULL);
    cal_buf b;
    cal_buf_init(&b);
    if (name)
        cal_buf_printf(&b, "%s (pid %lld)", name, (long long)pid);
    else
        cal_buf_printf(&b, "thread %lld (pid %lld)",
                       (long long)cal_jv_getnum(th, "tid", 0), (long long)pid);
    cal_buf_add(&b, "", 1);
    if (!cal_buf_ok(&b)) {
        cal_buf_free(&b);
        return NULL;
    }
    return b.data;
}

const char *cal_extable_frame_name(const cal_extable *t, size_t i)
{
    return cal_jv_getstr(cal_jv_at(t->frames, i), "name", "?");
}

const char *cal_extable_frame_file(const cal_extable *t, size_t i)
{
    return cal_jv_getstr(cal_jv_at(t->frames, i), "file", "?");
}

int64_t cal_extable_frame_line(const cal_extable *t, size_t i)
{
    return (int64_t)cal_jv_getnum(cal_jv_at(t->frames, i), "first_line", 0);
}

/* Read and check the table.  On error return -1 with the reason in err. */
static int table_read(cal_extable *t, const cal_jv *root, char *err, size_t cap)
{
    memset(t, 0, sizeof *t);
    t->root = root;
    const cal_jv *stacks = cal_jv_get(root, "stacks");
    if (!cal_jv_is(stacks, CAL_JOBJ)) {
        snprintf(err, cap,
                 "the profile has no stack table (\"stacks\": it was written by a "
                 "calipers older than 0.2); profile the program again to export it");
        return -1;
    }
    const cal_jv *fields = cal_jv_get(stacks, "node_fields");
    for (int i = 0; i < CAL_EXN_NFIELDS; i++) {
        const char *got = cal_jv_str(cal_jv_at(fields, (size_t)i), NULL);
        if (!got || strcmp(got, cal_stacks_node_fields[i]) != 0) {
            snprintf(err, cap,
                     "corrupt profile: stacks.node_fields[%d]: expected \"%s\"", i,
                     cal_stacks_node_fields[i]);
            return -1;
        }
    }
    t->frames = cal_jv_get(stacks, "frames");
    t->nframes = cal_jv_len(t->frames);
    const cal_jv *threads = cal_jv_get(root, "threads");
    t->nthreads = cal_jv_len(threads);
    const cal_jv *nodes = cal_jv_get(stacks, "nodes");
    t->nnodes = cal_jv_len(nodes);
    t->nodes = calloc(t->nnodes ? t->nnodes : 1, sizeof *t->nodes);
    t->thread_pid = calloc(t->nthreads ? t->nthreads : 1, sizeof *t->thread_pid);
    t->thread_names = calloc(t->nthreads ? t->nthreads : 1, sizeof *t->thread_names);
    if (!t->nodes || !t->thread_pid || !t->thread_names) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    /* A thread's pid: its process's, else the program's (older profiles
       have no processes). */
    const cal_jv *procs = cal_jv_get(root, "processes");
    int64_t main_pid = (int64_t)cal_jv_getnum(cal_jv_get(root, "program"), "pid", 0);
    for (size_t i = 0; i < t->nthreads; i++) {
        const cal_jv *th = cal_jv_at(threads, i);
        const cal_jv *pr = cal_jv_at(procs, (size_t)cal_jv_getnum(th, "process", 0));
        t->thread_pid[i] = pr ? (int64_t)cal_jv_getnum(pr, "pid", 0) : main_pid;
        if (!(t->thread_names[i] = thread_name(root, i, t->thread_pid[i]))) {
            snprintf(err, cap, "out of memory");
            return -1;
        }
    }
    for (size_t i = 0; i < t->nnodes; i++) {
        const cal_jv *v = cal_jv_at(nodes, i);
        cal_exnode *n = &t->nodes[i];
        n->parent = (int64_t)num_at(v, CAL_EXN_PARENT);
        n->frame = (int64_t)num_at(v, CAL_EXN_FRAME);
        n->line = (int64_t)num_at(v, CAL_EXN_LINE);
        n->thread = (int64_t)num_at(v, CAL_EXN_THREAD);
        const char *bad = NULL;
        if (n->parent >= (int64_t)i)
            bad = "its parent does not come before it";
        else if ((n->parent < 0) != (n->frame < 0))
            bad = "a thread's root has no frame, and every other node one";
        else if (n->frame >= (int64_t)t->nframes)
            bad = "no such frame";
        else if (n->thread < 0 || n->thread >= (int64_t)t->nthreads)
            bad = "no such thread";
        else if (n->parent >= 0 && t->nodes[n->parent].thread != n->thread)
            bad = "not in its parent's thread";
        if (bad) {
            snprintf(err, cap, "corrupt profile: stacks.nodes[%zu]: %s", i, bad);
            return -1;
        }
        double cpu = num_at(v, CAL_EXN_PYTHON) + num_at(v, CAL_EXN_NATIVE) +
                     num_at(v, CAL_EXN_SYSTEM);
        n->cpu_ns = ns_of(cpu);
        n->wall_ns = ns_of(cpu + num_at(v, CAL_EXN_WAITING));
        n->samples = (int64_t)num_at(v, CAL_EXN_SAMPLES);
        n->alloc_bytes =
            (int64_t)(num_at(v, CAL_EXN_ALLOC_PY) + num_at(v, CAL_EXN_ALLOC_NAT));
        n->alloc_samples = (int64_t)num_at(v, CAL_EXN_ALLOC_SAMPLES);
    }
    return 0;
}

static void table_free(cal_extable *t)
{
    for (size_t i = 0; t->thread_names && i < t->nthreads; i++)
        free(t->thread_names[i]);
    free(t->thread_names);
    free(t->nodes);
    free(t->thread_pid);
}

int cal_export(const cal_jv *root, int f, cal_buf *out, char *err, size_t cap)
{
    if (f < 0 || f >= CAL_EXPORT_NFORMATS) {
        snprintf(err, cap, "unknown export format");
        return -1;
    }
    cal_extable t;
    if (table_read(&t, root, err, cap) != 0) {
        table_free(&t);
        return -1;
    }
    int rc = 0;
    switch (f) {
    case CAL_EXPORT_PPROF:
        cal_pprof_write(&t, out);
        break;
    case CAL_EXPORT_SPEEDSCOPE:
        cal_speedscope_write(&t, out);
        break;
    case CAL_EXPORT_FIREFOX:
        rc = cal_firefox_write(&t, out, err, cap);
        break;
    default:
        cal_collapsed_write(&t, f == CAL_EXPORT_COLLAPSED_ALLOC, out);
        break;
    }
    table_free(&t);
    return rc;
}
