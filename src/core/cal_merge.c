/*
 * cal_merge — see cal_merge.h.
 *
 * HOW IT WORKS
 *
 * Times, allocation and copy volumes, samples and the leak detector's
 * counts add up.  Everything that is a level over time rather than a
 * volume (a line's live bytes, the program's footprint) is summed *in
 * time*: the child's timeline is shifted to process 0's clock (the
 * difference of the two start times) and added to the existing one point
 * by point, each curve read by linear interpolation and as zero outside
 * its own span (before a process started and after it ended it held
 * nothing).  The sum is simplified back to the series' capacity with RDP
 * (cal_series.h), which keeps peaks first.  The program's peak is then the
 * highest point of the summed timeline where that is above process 0's
 * exact peak; its line and Python share are those of the process with the
 * highest peak of its own.  Leaks are judged within each process (a line
 * that leaks in a worker is reported with that worker), never on the sums.
 *
 * LIMITATIONS
 *   - The children's timelines arrive simplified (at most 100 points), so
 *     a summed peak can miss a spike that lasted less than one of their
 *     segments.
 *   - Times in the JSON have microsecond precision; merged times are
 *     rounded to it.
 */
#include "cal_merge.h"
#include "cal_leak.h"

#include "cal_report.h"
#include "cal_view.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t ns_of(const cal_jv *obj, const char *key)
{
    return llround(cal_jv_getnum(obj, key, 0.0) * 1e9);
}

static int64_t int_of(const cal_jv *obj, const char *key)
{
    return llround(cal_jv_getnum(obj, key, 0.0));
}

static void times_of(const cal_jv *obj, cal_times *t)
{
    t->python_ns = ns_of(obj, "python_s");
    t->native_ns = ns_of(obj, "native_s");
    t->system_ns = ns_of(obj, "system_s");
    t->waiting_ns = ns_of(obj, "waiting_s");
    t->samples = int_of(obj, "samples");
    t->gc_ns = ns_of(obj, "gc_s");
    t->preempted_ns = ns_of(obj, "preempted_s");
}

static void volume_add(cal_volume *v, const cal_jv *obj)
{
    v->alloc_python += int_of(obj, "alloc_python_bytes");
    v->alloc_native += int_of(obj, "alloc_native_bytes");
    v->samples += int_of(obj, "alloc_samples");
    v->copied += int_of(obj, "copied_bytes");
}

static uint32_t string_of(cal_profile *p, const char *s)
{
    return cal_profile_string(p, s, strlen(s));
}

/* ---- timelines ---------------------------------------------------------- */

/* The value of pts at t: linear between points, zero outside them. */
static double value_at(const cal_point *pts, size_t n, int64_t t)
{
    if (!n || t < pts[0].t || t > pts[n - 1].t)
        return 0.0;
    size_t lo = 0, hi = n - 1;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (pts[mid].t <= t)
            lo = mid;
        else
            hi = mid;
    }
    const cal_point *a = &pts[lo], *b = &pts[hi];
    if (b->t == a->t)
        return (double)(t >= b->t ? b->v : a->v);
    double f = (double)(t - a->t) / (double)(b->t - a->t);
    return (double)a->v + f * (double)(b->v - a->v);
}

/* A JSON timeline ([[seconds, bytes], ...]) shifted by offset, into pts
   (cap points); returns the count. */
static size_t points_of(const cal_jv *timeline, int64_t offset, cal_point *pts,
                        size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < cal_jv_len(timeline) && n < cap; i++) {
        const cal_jv *pt = cal_jv_at(timeline, i);
        int64_t t = offset + llround(cal_jv_num(cal_jv_at(pt, 0), 0.0) * 1e9);
        if (n && t < pts[n - 1].t)
            continue; /* out of order: not ours */
        pts[n].t = t;
        pts[n].v = llround(cal_jv_num(cal_jv_at(pt, 1), 0.0));
        n++;
    }
    return n;
}

/* dst += the curve b (both zero outside their spans), simplified to the
   series' capacity.  Returns the highest value of the sum. */
static int64_t series_sum(cal_series *dst, const cal_point *b, size_t nb)
{
    enum { MAX = 2 * CAL_SERIES_CAP + 4 };
    cal_point a[CAL_SERIES_CAP], out[MAX];
    size_t na = dst->n;
    memcpy(a, dst->p, na * sizeof(*a));
    size_t i = 0, k = 0, n = 0;
    int64_t peak = 0;
    while ((i < na || k < nb) && n < MAX) {
        int64_t t;
        if (k >= nb || (i < na && a[i].t <= b[k].t))
            t = a[i++].t;
        else
            t = b[k++].t;
        if (n && out[n - 1].t == t)
            continue;
        double v = value_at(a, na, t) + value_at(b, nb, t);
        out[n].t = t;
        out[n].v = llround(v);
        if (out[n].v > peak)
            peak = out[n].v;
        n++;
    }
    if (n > CAL_SERIES_CAP)
        n = cal_rdp_reduce(out, n, CAL_SERIES_KEEP);
    memcpy(dst->p, out, n * sizeof(*out));
    dst->n = n;
    return peak;
}

/* A child's curve, with a zero just before its first point and just after
   its last one when those are not zero (so the sum steps, rather than
   ramps, at the process's start and end). */
static size_t framed_points(const cal_jv *timeline, int64_t offset, cal_point *pts)
{
    size_t n = points_of(timeline, offset, pts + 1, CAL_SERIES_CAP);
    if (!n)
        return 0;
    size_t first = 1;
    if (pts[1].v != 0) {
        pts[0] = (cal_point){pts[1].t - 1, 0};
        first = 0;
    }
    size_t end = n + 1;
    if (pts[n].v != 0)
        pts[end++] = (cal_point){pts[n].t + 1, 0};
    if (first)
        memmove(pts, pts + 1, (end - 1) * sizeof(*pts));
    return end - first;
}

/* ---- the parts of a profile ------------------------------------------- */

/* The line index for a {path, line} reference, or NONE. */
static uint32_t line_ref(cal_profile *p, const cal_jv *ref)
{
    const char *path = cal_jv_getstr(ref, "path", NULL);
    if (!path)
        return CAL_PROFILE_NONE;
    uint32_t file = string_of(p, path);
    if (file == CAL_PROFILE_NONE)
        return CAL_PROFILE_NONE;
    /* An existing line keeps its function; a new one gets none. */
    int32_t line = (int32_t)int_of(ref, "line");
    uint32_t li = cal_profile_line_find(p, file, line);
    return li != CAL_PROFILE_NONE ? li
                                  : cal_profile_line(p, file, line, CAL_PROFILE_NONE);
}

/* The function of a file's line: the one named `name` whose first line is
   the last at or before `line` (nested functions can share a name). */
static uint32_t line_function(cal_profile *p, uint32_t file, const cal_jv *funcs,
                              const char *name, int32_t line)
{
    if (!name)
        return CAL_PROFILE_NONE;
    const cal_jv *best = NULL;
    for (size_t i = 0; i < cal_jv_len(funcs); i++) {
        const cal_jv *f = cal_jv_at(funcs, i);
        if (strcmp(cal_jv_getstr(f, "name", ""), name) != 0)
            continue;
        int64_t first = int_of(f, "line");
        if (!best || (first <= line &&
                      (int_of(best, "line") > line || first > int_of(best, "line"))))
            best = f;
    }
    uint32_t sname = string_of(p, name);
    if (sname == CAL_PROFILE_NONE)
        return CAL_PROFILE_NONE;
    return cal_profile_function(p, file, sname,
                                best ? (int32_t)int_of(best, "line") : line);
}

static int merge_line(cal_profile *p, uint32_t file, const cal_jv *funcs,
                      const cal_jv *l, const uint32_t *procs, size_t nprocs,
                      int64_t offset, int memory)
{
    int32_t line = (int32_t)int_of(l, "line");
    uint32_t func =
        line_function(p, file, funcs, cal_jv_getstr(l, "function", NULL), line);
    uint32_t li = cal_profile_line(p, file, line, func);
    cal_line_stat *ls = cal_profile_line_mut(p, li);
    if (!ls)
        return -1;
    if (ls->nprocs == 0 &&
        (ls->t.samples || cal_times_all(&ls->t) || ls->mem.vol.samples)) {
        /* Its first merge: what it holds so far is process 0's. */
        if (cal_profile_line_proc_add(p, li, 0, cal_times_all(&ls->t),
                                      ls->mem.vol.alloc_python +
                                          ls->mem.vol.alloc_native) != 0)
            return -1;
        ls = cal_profile_line_mut(p, li);
    }
    cal_times t;
    times_of(l, &t);
    cal_times_add(&ls->t, &t);
    const cal_jv *m = cal_jv_get(l, "memory");
    int64_t alloc = 0;
    if (memory && cal_jv_is(m, CAL_JOBJ)) {
        volume_add(&ls->mem.vol, m);
        alloc = int_of(m, "alloc_python_bytes") + int_of(m, "alloc_native_bytes");
        ls->mem.live += int_of(m, "live_end_bytes");
        int64_t peak = int_of(m, "live_peak_bytes");
        if (peak > ls->mem.live_peak)
            ls->mem.live_peak = peak;
        ls->mem.footprint_sum +=
            cal_jv_getnum(m, "footprint_avg_bytes", 0) * (double)t.samples;
        ls->mem.footprint_n += t.samples;
        int64_t fpeak = int_of(m, "footprint_peak_bytes");
        if (fpeak > ls->mem.footprint_peak)
            ls->mem.footprint_peak = fpeak;
        ls->mem.leak_tracked += int_of(m, "leak_watched");
        ls->mem.leak_freed += int_of(m, "leak_freed");
        cal_point pts[CAL_SERIES_CAP + 2];
        size_t n = framed_points(cal_jv_get(m, "timeline"), offset, pts);
        if (n) {
            cal_series *s = cal_profile_line_series(p, li);
            if (!s)
                return -1;
            int64_t top = series_sum(s, pts, n);
            if (top > ls->mem.live_peak)
                ls->mem.live_peak = top;
        }
    }
    /* Which process: the child's own breakdown if it has one. */
    const cal_jv *by = cal_jv_get(l, "processes");
    if (cal_jv_len(by)) {
        for (size_t k = 0; k < cal_jv_len(by); k++) {
            const cal_jv *e = cal_jv_at(by, k);
            size_t idx = (size_t)cal_jv_num(cal_jv_at(e, 0), 0);
            if (idx >= nprocs)
                continue;
            if (cal_profile_line_proc_add(p, li, procs[idx],
                                          llround(cal_jv_num(cal_jv_at(e, 1), 0) * 1e9),
                                          llround(cal_jv_num(cal_jv_at(e, 2), 0))) != 0)
                return -1;
        }
        return 0;
    }
    return cal_profile_line_proc_add(p, li, procs[0], cal_times_all(&t), alloc);
}

static int merge_files(cal_profile *p, const cal_jv *files, const uint32_t *procs,
                       size_t nprocs, int64_t offset, int memory)
{
    for (size_t i = 0; i < cal_jv_len(files); i++) {
        const cal_jv *f = cal_jv_at(files, i);
        const char *path = cal_jv_getstr(f, "path", NULL);
        if (!path)
            continue;
        uint32_t file = string_of(p, path);
        if (file == CAL_PROFILE_NONE)
            return -1;
        const cal_jv *funcs = cal_jv_get(f, "functions");
        for (size_t k = 0; k < cal_jv_len(funcs); k++) {
            const cal_jv *fn = cal_jv_at(funcs, k);
            uint32_t name = string_of(p, cal_jv_getstr(fn, "name", "?"));
            uint32_t fi =
                name == CAL_PROFILE_NONE
                    ? CAL_PROFILE_NONE
                    : cal_profile_function(p, file, name, (int32_t)int_of(fn, "line"));
            cal_func_stat *fs = cal_profile_func_mut(p, fi);
            if (!fs)
                return -1;
            cal_times t;
            times_of(cal_jv_get(fn, "self"), &t);
            cal_times_add(&fs->self, &t);
            times_of(cal_jv_get(fn, "total"), &t);
            cal_times_add(&fs->total, &t);
            const cal_jv *m = cal_jv_get(fn, "memory");
            if (memory && cal_jv_is(m, CAL_JOBJ)) {
                volume_add(&fs->self_vol, cal_jv_get(m, "self"));
                volume_add(&fs->total_vol, cal_jv_get(m, "total"));
            }
        }
        const cal_jv *lines = cal_jv_get(f, "lines");
        for (size_t k = 0; k < cal_jv_len(lines); k++)
            if (merge_line(p, file, funcs, cal_jv_at(lines, k), procs, nprocs, offset,
                           memory) != 0)
                return -1;
    }
    return 0;
}

/* The child's threads, each to its thread here (tmap[i], as many as it has
   threads). */
static int merge_threads(cal_profile *p, const cal_jv *threads, const uint32_t *procs,
                         size_t nprocs, uint32_t *tmap)
{
    for (size_t i = 0; i < cal_jv_len(threads); i++) {
        const cal_jv *th = cal_jv_at(threads, i);
        size_t pi = (size_t)cal_jv_getnum(th, "process", 0);
        if (pi >= nprocs)
            pi = 0;
        uint32_t ti = cal_profile_thread_in(
            p, procs[pi], (uint64_t)cal_jv_getnum(th, "ident", 0),
            (int32_t)int_of(th, "tid"), cal_jv_bool(cal_jv_get(th, "main"), 0));
        if (ti == CAL_PROFILE_NONE)
            return -1;
        tmap[i] = ti;
        const char *name = cal_jv_getstr(th, "name", NULL);
        if (name && cal_profile_set_thread_name(p, ti, name) != 0)
            return -1;
        cal_times t, u;
        times_of(th, &t);
        times_of(cal_jv_get(th, "unattributed"), &u);
        cal_thread_stat *ts = cal_profile_thread_mut(p, ti);
        cal_times_add(&ts->t, &t);
        cal_times_add(&ts->unattributed, &u);
    }
    return 0;
}

/* The child's timeline of samples into ours (cal_timeline.h): both at the
   coarser stride, its samples at its threads' and nodes' indices here
   (nmap: CAL_STACKS_NONE for a node left out, whose samples are too), its
   times from our start; then bounded again. */
static int merge_timeline(cal_profile *p, const cal_jv *tl, const uint32_t *tmap,
                          size_t nthreads, const uint32_t *nmap, size_t nn,
                          int64_t offset)
{
    if (!cal_jv_is(tl, CAL_JOBJ))
        return 0; /* a profile from before the timeline */
    cal_timeline *mine = cal_profile_timeline(p);
    /* Its stride, a power of two as written (the check bounds it). */
    uint64_t every = 1, said = (uint64_t)cal_jv_getnum(tl, "every", 1);
    while (every < said && every < (UINT64_C(1) << 62))
        every <<= 1;
    cal_timeline_coarsen(mine, every);
    const cal_jv *threads = cal_jv_get(tl, "threads");
    for (size_t i = 0; i < cal_jv_len(threads); i++) {
        const cal_jv *th = cal_jv_at(threads, i);
        double ti = cal_jv_getnum(th, "thread", -1);
        if (ti < 0 || ti >= (double)nthreads)
            continue;
        const cal_jv *samples = cal_jv_get(th, "samples");
        for (size_t k = 0; k < cal_jv_len(samples); k++) {
            const cal_jv *s = cal_jv_at(samples, k);
            double node = cal_jv_num(cal_jv_at(s, 1), -1);
            if (node < 0 || node >= (double)nn || nmap[(size_t)node] == CAL_STACKS_NONE)
                continue;
            cal_tl_sample one = {
                .t = llround(cal_jv_num(cal_jv_at(s, 0), 0)) + offset,
                .node = nmap[(size_t)node],
                .kind = (uint32_t)cal_jv_num(cal_jv_at(s, 2), 0),
                .value = llround(cal_jv_num(cal_jv_at(s, 3), 0)),
            };
            if (cal_timeline_add_kept(mine, tmap[(size_t)ti], k, every, &one) != 0)
                return -1;
        }
    }
    cal_timeline_bound(mine);
    return 0;
}

/* The child's stack table into ours: its frames and nodes found or made
   here, their figures added.  Its nodes come parent first (the writer's
   order); a node whose parent, frame or thread is not one seen before it
   is left out, as is its subtree.  Then its timeline (merge_timeline). */
static int merge_stacks(cal_profile *p, const cal_jv *stacks, const uint32_t *tmap,
                        size_t nthreads, int64_t offset)
{
    if (!cal_jv_is(stacks, CAL_JOBJ))
        return 0; /* a profile from before stacks */
    cal_stacks *st = cal_profile_stacks(p);
    const cal_jv *frames = cal_jv_get(stacks, "frames");
    const cal_jv *nodes = cal_jv_get(stacks, "nodes");
    size_t nf = cal_jv_len(frames), nn = cal_jv_len(nodes);
    uint32_t *fmap = malloc((nf ? nf : 1) * sizeof(*fmap));
    uint32_t *nmap = malloc((nn ? nn : 1) * sizeof(*nmap));
    int rc = fmap && nmap ? 0 : -1;
    for (size_t i = 0; i < nf && rc == 0; i++) {
        const cal_jv *f = cal_jv_at(frames, i);
        uint32_t file = string_of(p, cal_jv_getstr(f, "file", ""));
        uint32_t name = string_of(p, cal_jv_getstr(f, "name", ""));
        if (file == CAL_PROFILE_NONE || name == CAL_PROFILE_NONE)
            rc = -1;
        else
            fmap[i] = cal_stacks_frame(st, file, name, (int32_t)int_of(f, "first_line"),
                                       cal_jv_bool(cal_jv_get(f, "library"), 0));
    }
    for (size_t i = 0; i < nn && rc == 0; i++) {
        const cal_jv *n = cal_jv_at(nodes, i);
        double parent = cal_jv_num(cal_jv_at(n, 0), -1);
        double frame = cal_jv_num(cal_jv_at(n, 1), -1);
        double thread = cal_jv_num(cal_jv_at(n, 3), 0);
        uint32_t here = CAL_STACKS_NONE;
        int folded = 0;
        if (parent < 0) {
            if (thread < (double)nthreads)
                here = cal_stacks_root(st, tmap[(size_t)thread]);
        } else if (parent < (double)i && frame >= 0 && frame < (double)nf &&
                   nmap[(size_t)parent] != CAL_STACKS_NONE) {
            uint32_t up = nmap[(size_t)parent];
            here = cal_stacks_child(st, up, fmap[(size_t)frame],
                                    (int32_t)cal_jv_num(cal_jv_at(n, 2), 0));
            if (here == CAL_STACKS_NONE) {
                here = up; /* full here: to its nearest caller */
                folded = 1;
            }
        }
        nmap[i] = here;
        cal_times t = {0};
        t.python_ns = llround(cal_jv_num(cal_jv_at(n, 4), 0) * 1e9);
        t.native_ns = llround(cal_jv_num(cal_jv_at(n, 5), 0) * 1e9);
        t.system_ns = llround(cal_jv_num(cal_jv_at(n, 6), 0) * 1e9);
        t.waiting_ns = llround(cal_jv_num(cal_jv_at(n, 7), 0) * 1e9);
        t.samples = llround(cal_jv_num(cal_jv_at(n, 8), 0));
        cal_volume v = {0};
        v.alloc_python = llround(cal_jv_num(cal_jv_at(n, 9), 0));
        v.alloc_native = llround(cal_jv_num(cal_jv_at(n, 10), 0));
        v.copied = llround(cal_jv_num(cal_jv_at(n, 11), 0));
        v.samples = llround(cal_jv_num(cal_jv_at(n, 12), 0));
        cal_stacks_add_times(st, here, &t, folded);
        cal_stacks_add_volume(st, here, &v, folded);
    }
    const cal_jv *folded = cal_jv_get(stacks, "folded");
    st->folded_ns += ns_of(folded, "time_s");
    st->folded_bytes += int_of(folded, "bytes");
    st->folded_samples += int_of(folded, "samples");
    if (rc == 0)
        rc = merge_timeline(p, cal_jv_get(stacks, "timeline"), tmap, nthreads, nmap, nn,
                            offset);
    free(fmap);
    free(nmap);
    return rc;
}

static void merge_memory(cal_profile *p, const cal_jv *m, int64_t offset,
                         int64_t *best_peak)
{
    cal_memory *mem = cal_profile_memory(p);
    mem->alloc_python += int_of(m, "allocated_python_bytes");
    mem->alloc_native += int_of(m, "allocated_native_bytes");
    mem->copied += int_of(m, "copied_bytes");
    mem->samples += int_of(m, "samples");
    mem->dropped += int_of(m, "dropped_samples");
    cal_point pts[CAL_SERIES_CAP + 2];
    size_t n = framed_points(cal_jv_get(m, "timeline"), offset, pts);
    int64_t top = n ? series_sum(&mem->footprint, pts, n) : 0;
    int64_t own = int_of(m, "peak_bytes");
    if (top > mem->peak)
        mem->peak = top;
    if (own > *best_peak) {
        /* The peak's line and Python share: the biggest process's. */
        *best_peak = own;
        mem->peak_python =
            llround((double)mem->peak * cal_jv_getnum(m, "peak_python_fraction", 0));
        uint32_t li = line_ref(p, cal_jv_get(m, "peak_line"));
        if (li != CAL_PROFILE_NONE)
            mem->peak_line = li;
    }
}

/* A descendant's collections add to the run's; the count timelines stay
   the first process's (counts of different heaps do not add up to one). */
static void merge_gc(cal_profile *p, const cal_jv *gc)
{
    cal_gc_stats *g = cal_profile_gc(p);
    const cal_jv *gens = cal_jv_get(gc, "generations");
    if (!g->read || !cal_jv_is(gc, CAL_JOBJ))
        return;
    for (size_t i = 0; i < CAL_GC_GENERATIONS && i < cal_jv_len(gens); i++) {
        const cal_jv *gen = cal_jv_at(gens, i);
        g->gen[i].collections += int_of(gen, "collections");
        g->gen[i].collected += int_of(gen, "collected");
        g->gen[i].uncollectable += int_of(gen, "uncollectable");
    }
}

static int merge_leaks(cal_profile *p, const cal_jv *leaks, const uint32_t *procs,
                       size_t nprocs)
{
    for (size_t i = 0; i < cal_jv_len(leaks); i++) {
        const cal_jv *l = cal_jv_at(leaks, i);
        size_t pi = (size_t)cal_jv_getnum(l, "process", 0);
        cal_leak k = {
            .line = line_ref(p, l),
            .process = procs[pi < nprocs ? pi : 0],
            .likelihood = cal_jv_getnum(l, "likelihood", 0),
            .rate = cal_jv_getnum(l, "rate_bytes_per_s", 0),
            .live_end = int_of(l, "live_end_bytes"),
            .watched = int_of(l, "watched"),
            .freed = int_of(l, "freed"),
        };
        if (k.line == CAL_PROFILE_NONE || cal_profile_leak_add(p, &k) != 0)
            return -1;
    }
    return 0;
}

/* The child's processes become new processes of p; procs maps them. */
static int add_processes(cal_profile *p, const cal_jv *root, int64_t offset,
                         uint32_t *procs, size_t nprocs)
{
    const cal_jv *list = cal_jv_get(root, "processes");
    const cal_jv *prog = cal_jv_get(root, "program");
    for (size_t i = 0; i < nprocs; i++) {
        const cal_jv *pr = cal_jv_at(list, i); /* NULL for an old profile */
        uint32_t k = cal_profile_process_add(p);
        cal_process *dst = cal_profile_process_mut(p, k);
        if (!dst)
            return -1;
        procs[i] = k;
        dst->pid = pr ? int_of(pr, "pid") : int_of(prog, "pid");
        dst->ppid = int_of(pr, "ppid");
        dst->start_ns = offset + ns_of(pr, "start_s");
        dst->wall_ns =
            pr ? ns_of(pr, "wall_s") : ns_of(cal_jv_get(root, "summary"), "wall_s");
        const char *end = cal_jv_getstr(pr, "end", NULL);
        dst->end = end ? string_of(p, end) : CAL_PROFILE_NONE;
        dst->signal = (int32_t)int_of(pr, "signal");
        dst->forked = cal_jv_bool(cal_jv_get(pr, "forked"), 0);
        dst->inherited = int_of(pr, "inherited_bytes");
        const cal_jv *peak = cal_jv_get(pr, "peak_bytes");
        dst->peak = cal_jv_is(peak, CAL_JNUM) ? llround(cal_jv_num(peak, 0)) : -1;
        const cal_jv *argv = cal_jv_get(pr ? pr : prog, "argv");
        size_t argc = cal_jv_len(argv);
        const char **v = calloc(argc ? argc : 1, sizeof(*v));
        if (!v)
            return -1;
        for (size_t a = 0; a < argc; a++)
            v[a] = cal_jv_str(cal_jv_at(argv, a), "");
        int rc = cal_profile_process_set_argv(p, k, v, argc);
        free(v);
        if (rc != 0)
            return -1;
    }
    return 0;
}

int cal_merge_add(cal_profile *p, const cal_jv *root, double start_unix, char *err,
                  size_t cap)
{
    /* The check the renderers rely on: each member read below has its type,
       and a number its range, so no conversion below is out of range. */
    if (cal_view_check(root, err, cap) != 0)
        return -1;
    cal_leak_settle(p);
    cal_process *p0 = cal_profile_process_mut(p, 0);
    if (cal_profile_nprocesses(p) == 1 && cal_profile_memory_at(p)->enabled)
        p0->peak = cal_profile_memory_at(p)->peak; /* before the sums raise it */
    double child_start =
        cal_jv_getnum(cal_jv_get(root, "program"), "start_time_unix", start_unix);
    int64_t offset = llround((child_start - start_unix) * 1e9);
    size_t nprocs = cal_jv_len(cal_jv_get(root, "processes"));
    if (nprocs == 0)
        nprocs = 1;
    uint32_t *procs = calloc(nprocs, sizeof(*procs));
    size_t nthreads = cal_jv_len(cal_jv_get(root, "threads"));
    uint32_t *tmap = calloc(nthreads ? nthreads : 1, sizeof(*tmap));
    const cal_jv *m = cal_jv_get(cal_jv_get(root, "summary"), "memory");
    int memory = cal_profile_memory_at(p)->enabled && cal_jv_is(m, CAL_JOBJ);
    int rc = -1;
    if (procs && tmap && add_processes(p, root, offset, procs, nprocs) == 0 &&
        merge_threads(p, cal_jv_get(root, "threads"), procs, nprocs, tmap) == 0 &&
        merge_stacks(p, cal_jv_get(root, "stacks"), tmap, nthreads, offset) == 0 &&
        merge_files(p, cal_jv_get(root, "files"), procs, nprocs, offset, memory) == 0 &&
        merge_leaks(p, cal_jv_get(root, "leaks"), procs, nprocs) == 0) {
        if (memory) {
            /* The processes already here (the new ones were appended
               from procs[0] on) compete for the peak line. */
            int64_t best = 0;
            for (uint32_t i = 0; i < procs[0]; i++)
                if (cal_profile_process_at(p, i)->peak > best)
                    best = cal_profile_process_at(p, i)->peak;
            merge_memory(p, m, offset, &best);
        }
        merge_gc(p, cal_jv_get(cal_jv_get(root, "summary"), "gc"));
        rc = 0;
    }
    if (rc != 0)
        snprintf(err, cap, "out of memory");
    free(procs);
    free(tmap);
    return rc;
}
