/* cal_report — see cal_report.h. */
#define _GNU_SOURCE /* qsort_r */
#include "cal_report.h"
#include "cal_leak.h"

#include "cal_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- totals ------------------------------------------------------------ */

typedef struct totals {
    cal_times all; /* every thread, attributed or not */
    cal_times unattributed;
    int64_t attributed_samples;
} totals;

static void compute_totals(const cal_profile *p, totals *t)
{
    memset(t, 0, sizeof(*t));
    for (size_t i = 0; i < cal_profile_nthreads(p); i++) {
        const cal_thread_stat *th = cal_profile_thread_at(p, i);
        cal_times_add(&t->all, &th->t);
        cal_times_add(&t->unattributed, &th->unattributed);
    }
    t->attributed_samples = t->all.samples - t->unattributed.samples;
}

/* ---- notes ------------------------------------------------------------- */

static void join_patterns(cal_buf *out, const char *const *pats, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i)
            cal_buf_puts(out, ",");
        cal_buf_puts(out, pats[i]);
    }
}

size_t cal_report_notes(const cal_profile *p, const cal_meta *m, cal_buf *out)
{
    totals t;
    compute_totals(p, &t);
    size_t n = 0;
    double wall_ms = (double)cal_profile_wall(p) / 1e6;
    double interval_ms = (double)m->interval_ns / 1e6;
    if (t.all.samples == 0) {
        cal_buf_printf(out,
                       "No samples were taken: the program ran for %.1f ms, about the "
                       "sampling interval (%.1f ms) or less. Profile a longer run, or "
                       "sample more often with --interval %g.\n",
                       wall_ms, interval_ms, interval_ms / 10 / 1000);
        n++;
    } else if (t.attributed_samples == 0 && !m->lines_off) {
        /* (with lines_off frames were not read: the owner's note says why) */
        if (m->nprofile_only) {
            cal_buf_printf(out,
                           "%lld samples were taken but none had a line from a file "
                           "matching --profile-only ",
                           (long long)t.all.samples);
            join_patterns(out, m->profile_only, m->nprofile_only);
            cal_buf_puts(out, " on the stack. Check the patterns (they match any part "
                              "of the file path), or use --profile-all.\n");
        } else if (!m->profile_all) {
            cal_buf_printf(
                out,
                "%lld samples were taken but none had a line from the "
                "program's own files on the stack: all time was spent in the "
                "standard library, site-packages or other filtered code. Use "
                "--profile-all to include library code, or --profile-only "
                "PATTERN to choose files.\n",
                (long long)t.all.samples);
        } else {
            cal_buf_printf(
                out,
                "%lld samples were taken but no Python line was on the stack "
                "in any of them (the time was spent starting up or shutting "
                "down the interpreter).\n",
                (long long)t.all.samples);
        }
        if (m->nprofile_exclude) {
            cal_buf_puts(out, "Files matching --profile-exclude ");
            join_patterns(out, m->profile_exclude, m->nprofile_exclude);
            cal_buf_puts(out, " were left out.\n");
            n++;
        }
        n++;
    } else if (t.all.samples < 10) {
        cal_buf_printf(out,
                       "Only %lld samples were taken (the program ran for %.1f ms): "
                       "the figures are rough. Sample more often with --interval.\n",
                       (long long)t.all.samples, wall_ms);
        n++;
    }
    if (m->dropped) {
        cal_buf_printf(out, "%lld samples were dropped because memory ran out.\n",
                       (long long)m->dropped);
        n++;
    }
    /* A torn sample's interval goes to its thread's next one: time is not
       lost, only placed a little later.  Worth a word only when that
       happened often enough to blur where the threads were: a twentieth
       of the samples (threads in parallel tear about 1% of their walks,
       which said nothing worth a note and flipped tests asking for none). */
    if (m->torn > 0 && m->torn * 20 >= t.all.samples) {
        cal_buf_printf(out,
                       "%lld samples (%.0f%%) of threads running in parallel were "
                       "dropped: their stacks changed while being read; their time "
                       "went to the same threads' next samples.\n",
                       (long long)m->torn,
                       100.0 * (double)m->torn / (double)(t.all.samples + m->torn));
        n++;
    }
    const cal_gpu_summary *gpu = cal_profile_gpu_at(p);
    if (gpu->reason != CAL_PROFILE_NONE) {
        if (gpu->state == CAL_GPU_ON && gpu->stopped_at >= 0)
            cal_buf_printf(out, "GPU sampling stopped at %.1f s: %s.\n",
                           (double)gpu->stopped_at / 1e9,
                           cal_profile_string_at(p, gpu->reason));
        else
            cal_buf_printf(out, "No GPU figures: %s.\n",
                           cal_profile_string_at(p, gpu->reason));
        n++;
    }
    if (gpu->state == CAL_GPU_ON && gpu->fallback != CAL_PROFILE_NONE) {
        cal_buf_printf(out, "%s.\n", cal_profile_string_at(p, gpu->fallback));
        n++;
    }
    for (size_t i = 0; i < m->nnotes; i++) {
        cal_buf_printf(out, "%s\n", m->notes[i]);
        n++;
    }
    return n;
}

/* ---- JSON -------------------------------------------------------------- */

static void json_times_fields(cal_json *j, const cal_times *t)
{
    cal_json_key(j, "python_s");
    cal_json_seconds(j, t->python_ns);
    cal_json_key(j, "native_s");
    cal_json_seconds(j, t->native_ns);
    cal_json_key(j, "system_s");
    cal_json_seconds(j, t->system_ns);
    cal_json_key(j, "waiting_s");
    cal_json_seconds(j, t->waiting_ns);
    cal_json_key(j, "samples");
    cal_json_int(j, t->samples);
    cal_json_key(j, "gc_s");
    cal_json_seconds(j, t->gc_ns);
    cal_json_key(j, "preempted_s");
    cal_json_seconds(j, t->preempted_ns);
}

static void json_times_object(cal_json *j, const char *key, const cal_times *t)
{
    cal_json_key(j, key);
    cal_json_object_begin(j);
    json_times_fields(j, t);
    cal_json_object_end(j);
}

static void json_string_array(cal_json *j, const char *key, const char *const *v,
                              size_t n)
{
    cal_json_key(j, key);
    cal_json_array_begin(j);
    for (size_t i = 0; i < n; i++)
        cal_json_string(j, v[i]);
    cal_json_array_end(j);
}

static void json_string_or_null(cal_json *j, const char *key, const char *s)
{
    cal_json_key(j, key);
    if (s)
        cal_json_string(j, s);
    else
        cal_json_null(j);
}

static void json_int_or_null(cal_json *j, const char *key, int64_t v, int present)
{
    cal_json_key(j, key);
    if (present)
        cal_json_int(j, v);
    else
        cal_json_null(j);
}

/* Sorting: index arrays ordered with qsort_r, the profile as context. */
static int cmp_line(const void *a, const void *b, void *ctx)
{
    const cal_profile *p = ctx;
    const cal_line_stat *x = cal_profile_line_at(p, *(const size_t *)a);
    const cal_line_stat *y = cal_profile_line_at(p, *(const size_t *)b);
    int c =
        strcmp(cal_profile_string_at(p, x->file), cal_profile_string_at(p, y->file));
    if (c)
        return c;
    return (x->line > y->line) - (x->line < y->line);
}

static int cmp_func(const void *a, const void *b, void *ctx)
{
    const cal_profile *p = ctx;
    const cal_func_stat *x = cal_profile_func_at(p, *(const size_t *)a);
    const cal_func_stat *y = cal_profile_func_at(p, *(const size_t *)b);
    int c =
        strcmp(cal_profile_string_at(p, x->file), cal_profile_string_at(p, y->file));
    if (c)
        return c;
    if (x->first_line != y->first_line)
        return (x->first_line > y->first_line) - (x->first_line < y->first_line);
    return strcmp(cal_profile_string_at(p, x->name), cal_profile_string_at(p, y->name));
}

static size_t *sorted_index(const cal_profile *p, size_t n,
                            int (*cmp)(const void *, const void *, void *))
{
    size_t *idx = malloc((n ? n : 1) * sizeof(*idx));
    if (!idx)
        return NULL;
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    qsort_r(idx, n, sizeof(*idx), cmp, (void *)p);
    return idx;
}

/* ---- memory in the JSON ------------------------------------------------ */

#define TIMELINE_POINTS 100

static void json_timeline(cal_json *j, const char *key, const cal_series *s)
{
    cal_point pts[CAL_SERIES_CAP];
    size_t n = s ? s->n : 0;
    if (n)
        memcpy(pts, s->p, n * sizeof(*pts));
    n = cal_rdp_reduce(pts, n, TIMELINE_POINTS);
    cal_json_key(j, key);
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = 0; i < n; i++) {
        cal_json_array_begin(j);
        cal_json_seconds(j, pts[i].t);
        cal_json_int(j, pts[i].v < 0 ? 0 : pts[i].v);
        cal_json_array_end(j);
    }
    cal_json_array_end(j);
}

static void json_volume_fields(cal_json *j, const cal_volume *v)
{
    cal_json_key(j, "alloc_python_bytes");
    cal_json_int(j, v->alloc_python);
    cal_json_key(j, "alloc_native_bytes");
    cal_json_int(j, v->alloc_native);
    cal_json_key(j, "alloc_samples");
    cal_json_int(j, v->samples);
    cal_json_key(j, "copied_bytes");
    cal_json_int(j, v->copied);
}

static void json_line_memory(cal_json *j, const cal_profile *p, const cal_line_stat *ls)
{
    cal_json_key(j, "memory");
    if (!cal_profile_memory_at(p)->enabled) {
        cal_json_null(j);
        return;
    }
    cal_json_object_begin(j);
    json_volume_fields(j, &ls->mem.vol);
    /* Copy volume per second of the line's own time. */
    int64_t ns = cal_times_all(&ls->t);
    cal_json_key(j, "copy_mb_per_s");
    cal_json_fixed(
        j, ns > 0 ? (double)ls->mem.vol.copied / 1e6 / ((double)ns / 1e9) : 0.0, 3);
    cal_json_key(j, "live_peak_bytes");
    cal_json_int(j, ls->mem.live_peak);
    cal_json_key(j, "live_end_bytes");
    cal_json_int(j, ls->mem.live > 0 ? ls->mem.live : 0);
    cal_json_key(j, "footprint_avg_bytes");
    cal_json_int(j, ls->mem.footprint_n
                        ? (int64_t)(ls->mem.footprint_sum / (double)ls->mem.footprint_n)
                        : 0);
    cal_json_key(j, "footprint_peak_bytes");
    cal_json_int(j, ls->mem.footprint_peak);
    cal_json_key(j, "leak_watched");
    cal_json_int(j, ls->mem.leak_tracked);
    cal_json_key(j, "leak_freed");
    cal_json_int(j, ls->mem.leak_freed);
    json_timeline(j, "timeline", ls->live_series);
    cal_json_object_end(j);
}

static void json_func_memory(cal_json *j, const cal_profile *p, const cal_func_stat *fs)
{
    cal_json_key(j, "memory");
    if (!cal_profile_memory_at(p)->enabled) {
        cal_json_null(j);
        return;
    }
    cal_json_object_begin(j);
    cal_json_key(j, "self");
    cal_json_object_begin(j);
    json_volume_fields(j, &fs->self_vol);
    cal_json_object_end(j);
    cal_json_key(j, "total");
    cal_json_object_begin(j);
    json_volume_fields(j, &fs->total_vol);
    cal_json_object_end(j);
    cal_json_object_end(j);
}

/* ---- GPU ---------------------------------------------------------------- */

/* `count` names g->n: "samples" (a line's or function's CPU samples that
   found a reading) or "readings" (the run's NVML readings). */
static void json_gpu_fields(cal_json *j, const cal_gpu_line *g, const char *count)
{
    cal_json_key(j, "utilization_avg_percent");
    cal_json_fixed(j, g->n ? g->util_sum / (double)g->n : 0.0, 1);
    cal_json_key(j, "memory_avg_bytes");
    cal_json_int(j, g->n ? (int64_t)(g->memory_sum / (double)g->n) : 0);
    cal_json_key(j, "memory_peak_bytes");
    cal_json_int(j, g->memory_peak);
    cal_json_key(j, count);
    cal_json_int(j, g->n);
}

/* A line's or a function's "gpu": the readings its samples found, or null
   when the GPU was not sampled. */
static void json_gpu_object(cal_json *j, const cal_profile *p, const cal_gpu_line *g)
{
    cal_json_key(j, "gpu");
    if (cal_profile_gpu_at(p)->state != CAL_GPU_ON) {
        cal_json_null(j);
        return;
    }
    cal_json_object_begin(j);
    json_gpu_fields(j, g, "samples");
    cal_json_object_end(j);
}

static void json_gpu_summary(cal_json *j, const cal_profile *p)
{
    const cal_gpu_summary *g = cal_profile_gpu_at(p);
    cal_json_key(j, "gpu");
    if (g->state == CAL_GPU_OFF) {
        cal_json_null(j);
        return;
    }
    cal_json_object_begin(j);
    cal_json_key(j, "available");
    cal_json_bool(j, g->state == CAL_GPU_ON);
    json_string_or_null(
        j, "reason",
        g->reason != CAL_PROFILE_NONE ? cal_profile_string_at(p, g->reason) : NULL);
    if (g->state == CAL_GPU_ON) {
        cal_json_key(j, "stopped_at_s");
        if (g->stopped_at >= 0)
            cal_json_seconds(j, g->stopped_at);
        else
            cal_json_null(j);
        cal_json_key(j, "utilization_source");
        cal_json_string(j, g->per_process_util ? "process" : "device");
        cal_json_key(j, "memory_source");
        cal_json_string(j, g->per_process_memory ? "process" : "device");
        json_string_or_null(j, "fallback",
                            g->fallback != CAL_PROFILE_NONE
                                ? cal_profile_string_at(p, g->fallback)
                                : NULL);
        cal_gpu_line run = {g->util_sum, g->memory_sum, g->n, g->memory_peak};
        json_gpu_fields(j, &run, "readings");
        cal_json_key(j, "devices");
        cal_json_array_begin(j);
        for (int i = 0; i < g->ndevices; i++) {
            const cal_gpu_dev_stat *d = &g->dev[i];
            cal_json_object_begin(j);
            cal_json_key(j, "index");
            cal_json_int(j, i);
            cal_json_key(j, "uuid");
            cal_json_string(j, cal_profile_string_at(p, d->uuid));
            cal_json_key(j, "name");
            cal_json_string(j, cal_profile_string_at(p, d->name));
            cal_json_key(j, "memory_total_bytes");
            cal_json_int(j, d->memory_total);
            cal_json_key(j, "utilization_avg_percent");
            cal_json_fixed(j, d->n ? d->util_sum / (double)d->n : 0.0, 1);
            cal_json_key(j, "memory_peak_bytes");
            cal_json_int(j, d->memory_peak);
            cal_json_object_end(j);
        }
        cal_json_array_end(j);
        json_timeline(j, "timeline", &g->memory);
    }
    cal_json_object_end(j);
}

void cal_report_json_line_ref(cal_json *j, const char *key, const cal_profile *p,
                              uint32_t li)
{
    cal_json_key(j, key);
    const cal_line_stat *ls =
        li < cal_profile_nlines(p) ? cal_profile_line_at(p, li) : NULL;
    if (!ls) {
        cal_json_null(j);
        return;
    }
    cal_json_object_begin(j);
    cal_json_key(j, "path");
    cal_json_string(j, cal_profile_string_at(p, ls->file));
    cal_json_key(j, "line");
    cal_json_int(j, ls->line);
    cal_json_key(j, "function");
    if (ls->func < cal_profile_nfuncs(p))
        cal_json_string(
            j, cal_profile_string_at(p, cal_profile_func_at(p, ls->func)->name));
    else
        cal_json_null(j);
    cal_json_object_end(j);
}

static void json_memory_summary(cal_json *j, const cal_profile *p)
{
    const cal_memory *mem = cal_profile_memory_at(p);
    cal_json_key(j, "memory");
    if (!mem->enabled) {
        cal_json_null(j);
        return;
    }
    cal_json_object_begin(j);
    cal_json_key(j, "allocated_python_bytes");
    cal_json_int(j, mem->alloc_python);
    cal_json_key(j, "allocated_native_bytes");
    cal_json_int(j, mem->alloc_native);
    cal_json_key(j, "copied_bytes");
    cal_json_int(j, mem->copied);
    cal_json_key(j, "peak_bytes");
    cal_json_int(j, mem->peak);
    cal_json_key(j, "peak_python_fraction");
    cal_json_fixed(
        j, mem->peak > 0 ? (double)mem->peak_python / (double)mem->peak : 0.0, 3);
    cal_report_json_line_ref(j, "peak_line", p, mem->peak_line);
    cal_json_key(j, "end_bytes");
    cal_json_int(j, mem->end_live);
    cal_json_key(j, "end_python_fraction");
    cal_json_fixed(
        j, mem->end_live > 0 ? (double)mem->end_python / (double)mem->end_live : 0.0,
        3);
    cal_json_key(j, "growth_bytes_per_s");
    cal_json_fixed(j, cal_series_slope(mem->footprint.p, mem->footprint.n), 0);
    cal_json_key(j, "samples");
    cal_json_int(j, mem->samples);
    cal_json_key(j, "dropped_samples");
    cal_json_int(j, mem->dropped);
    json_timeline(j, "timeline", &mem->footprint);
    cal_json_object_end(j);
}

static int cmp_leak(const void *a, const void *b, void *ctx)
{
    const cal_leak *x = a, *y = b;
    if (x->likelihood != y->likelihood)
        return x->likelihood < y->likelihood ? 1 : -1;
    size_t lx = x->line, ly = y->line;
    int c = cmp_line(&lx, &ly, ctx);
    if (c)
        return c;
    return (x->process > y->process) - (x->process < y->process);
}

static void json_leaks(cal_json *j, const cal_profile *p)
{
    cal_json_key(j, "leaks");
    cal_json_array_begin(j);
    size_t n;
    cal_leak *leaks = cal_leak_collect(p, &n);
    if (leaks)
        qsort_r(leaks, n, sizeof(*leaks), cmp_leak, (void *)p);
    for (size_t k = 0; k < n; k++) {
        const cal_leak *lk = &leaks[k];
        const cal_line_stat *ls = cal_profile_line_at(p, lk->line);
        cal_json_object_begin(j);
        cal_json_key(j, "path");
        cal_json_string(j, cal_profile_string_at(p, ls->file));
        cal_json_key(j, "line");
        cal_json_int(j, ls->line);
        cal_json_key(j, "function");
        if (ls->func < cal_profile_nfuncs(p))
            cal_json_string(
                j, cal_profile_string_at(p, cal_profile_func_at(p, ls->func)->name));
        else
            cal_json_null(j);
        cal_json_key(j, "process");
        cal_json_int(j, lk->process);
        cal_json_key(j, "likelihood");
        cal_json_fixed(j, lk->likelihood, 3);
        cal_json_key(j, "rate_bytes_per_s");
        cal_json_fixed(j, lk->rate, 0);
        cal_json_key(j, "live_end_bytes");
        cal_json_int(j, lk->live_end);
        cal_json_key(j, "watched");
        cal_json_int(j, lk->watched);
        cal_json_key(j, "freed");
        cal_json_int(j, lk->freed);
        cal_json_object_end(j);
    }
    free(leaks);
    cal_json_array_end(j);
}

/* The processes of the run, each with the times of its threads. */
static void json_processes(cal_json *j, const cal_profile *p)
{
    cal_json_key(j, "processes");
    cal_json_array_begin(j);
    for (size_t i = 0; i < cal_profile_nprocesses(p); i++) {
        const cal_process *pr = cal_profile_process_at(p, i);
        cal_times t = {0};
        for (size_t k = 0; k < cal_profile_nthreads(p); k++) {
            const cal_thread_stat *th = cal_profile_thread_at(p, k);
            if (th->process == i)
                cal_times_add(&t, &th->t);
        }
        cal_json_object_begin(j);
        cal_json_key(j, "pid");
        cal_json_int(j, pr->pid);
        cal_json_key(j, "ppid");
        cal_json_int(j, pr->ppid);
        cal_json_key(j, "argv");
        cal_json_array_begin(j);
        for (size_t a = 0; a < pr->argc; a++)
            cal_json_string(j, cal_profile_string_at(p, pr->argv[a]));
        cal_json_array_end(j);
        cal_json_key(j, "forked");
        cal_json_bool(j, pr->forked);
        cal_json_key(j, "start_s");
        cal_json_seconds(j, pr->start_ns);
        cal_json_key(j, "wall_s");
        cal_json_seconds(j, i == 0 && !pr->wall_ns ? cal_profile_wall(p) : pr->wall_ns);
        json_times_fields(j, &t);
        json_string_or_null(
            j, "end",
            pr->end != CAL_PROFILE_NONE ? cal_profile_string_at(p, pr->end) : NULL);
        json_int_or_null(j, "signal", pr->signal, pr->signal != 0);
        json_int_or_null(j, "peak_bytes", pr->peak, pr->peak >= 0);
        cal_json_key(j, "inherited_bytes");
        cal_json_int(j, pr->inherited);
        cal_json_object_end(j);
    }
    cal_json_array_end(j);
}

/* A line's share per process, [[process, seconds, bytes allocated], ...]:
   only in a profile of several processes. */
static void json_line_processes(cal_json *j, const cal_profile *p,
                                const cal_line_stat *ls)
{
    if (cal_profile_nprocesses(p) < 2)
        return;
    cal_json_key(j, "processes");
    cal_json_flat(j);
    cal_json_array_begin(j);
    if (!ls->nprocs) {
        cal_json_array_begin(j);
        cal_json_int(j, 0);
        cal_json_seconds(j, cal_times_all(&ls->t));
        cal_json_int(j, ls->mem.vol.alloc_python + ls->mem.vol.alloc_native);
        cal_json_array_end(j);
    }
    for (uint32_t k = 0; k < ls->nprocs; k++) {
        cal_json_array_begin(j);
        cal_json_int(j, ls->procs[k].process);
        cal_json_seconds(j, ls->procs[k].ns);
        cal_json_int(j, ls->procs[k].alloc);
        cal_json_array_end(j);
    }
    cal_json_array_end(j);
}

/* SOURCE TEXT.  The renderers read only the JSON, so a profile carries the
   text of its files, as [line, text] pairs: every line of a small file
   while the profile's budget for whole files lasts (files in path order),
   otherwise the lines within SOURCE_CONTEXT of a profiled line or of a
   function's first line.  So a run with --profile-all, which touches dozens
   of large library files, stays small.  Read at the end of the run: a file
   edited while the program ran shows its new text; a file that cannot be
   read gets null. */
#define SOURCE_WHOLE_BYTES (32u << 10)
#define SOURCE_WHOLE_BUDGET (256u << 10)
#define SOURCE_MAX_BYTES (16u << 20)
#define SOURCE_CONTEXT 3

static void json_source(cal_json *j, const cal_profile *p, const size_t *li, size_t a0,
                        size_t a1, const size_t *fi, size_t b0, size_t b1,
                        const char *path, size_t *budget)
{
    cal_json_key(j, "source");
    cal_buf text;
    cal_buf_init(&text);
    FILE *f = fopen(path, "rb");
    if (f) {
        char chunk[65536];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 &&
               text.len < SOURCE_MAX_BYTES)
            cal_buf_add(&text, chunk, n);
        fclose(f);
    }
    if (!text.data || text.len >= SOURCE_MAX_BYTES) {
        cal_buf_free(&text);
        cal_json_null(j);
        return;
    }
    size_t nlines = 1;
    for (size_t i = 0; i < text.len; i++)
        nlines += text.data[i] == '\n';
    /* keep[k]: line k + 1 is written. */
    unsigned char *keep = calloc(nlines, 1);
    if (!keep) {
        j->out->failed = 1;
        cal_buf_free(&text);
        cal_json_null(j);
        return;
    }
    if (text.len <= SOURCE_WHOLE_BYTES && text.len <= *budget) {
        memset(keep, 1, nlines);
        *budget -= text.len;
    } else {
        for (size_t k = a0; k < a1 + (b1 - b0); k++) {
            long line = k < a1
                            ? (long)cal_profile_line_at(p, li[k])->line
                            : (long)cal_profile_func_at(p, fi[b0 + k - a1])->first_line;
            for (long x = line - 1 - SOURCE_CONTEXT; x <= line - 1 + SOURCE_CONTEXT;
                 x++)
                if (x >= 0 && (size_t)x < nlines)
                    keep[x] = 1;
        }
    }
    if (text.data[text.len - 1] == '\n') /* not a line: the end of the last one */
        keep[nlines - 1] = 0;
    cal_json_flat(j);
    cal_json_array_begin(j);
    const char *s = text.data, *end = text.data + text.len;
    for (size_t k = 0; k < nlines; k++) {
        const char *e = memchr(s, '\n', (size_t)(end - s));
        if (!e)
            e = end;
        size_t n = (size_t)(e - s);
        if (n && s[n - 1] == '\r')
            n--;
        if (keep[k]) {
            char *line = strndup(s, n);
            if (line) {
                cal_json_array_begin(j);
                cal_json_int(j, (int64_t)k + 1);
                cal_json_string(j, line);
                cal_json_array_end(j);
            } else {
                j->out->failed = 1;
            }
            free(line);
        }
        s = e < end ? e + 1 : end;
    }
    cal_json_array_end(j);
    free(keep);
    cal_buf_free(&text);
}

static void json_files(cal_json *j, const cal_profile *p, int no_source)
{
    size_t nl = cal_profile_nlines(p), nf = cal_profile_nfuncs(p);
    size_t *li = sorted_index(p, nl, cmp_line);
    size_t *fi = sorted_index(p, nf, cmp_func);
    cal_json_key(j, "files");
    cal_json_array_begin(j);
    if (!li || !fi) {
        j->out->failed = 1;
        goto done;
    }
    size_t a = 0, b = 0, budget = SOURCE_WHOLE_BUDGET;
    while (a < nl || b < nf) {
        /* The next file in path order among lines and functions. */
        const char *path;
        uint32_t file;
        if (a < nl &&
            (b >= nf ||
             strcmp(cal_profile_string_at(p, cal_profile_line_at(p, li[a])->file),
                    cal_profile_string_at(p, cal_profile_func_at(p, fi[b])->file)) <=
                 0))
            file = cal_profile_line_at(p, li[a])->file;
        else
            file = cal_profile_func_at(p, fi[b])->file;
        path = cal_profile_string_at(p, file);

        cal_times file_t = {0};
        for (size_t k = a; k < nl && cal_profile_line_at(p, li[k])->file == file; k++)
            cal_times_add(&file_t, &cal_profile_line_at(p, li[k])->t);

        cal_json_object_begin(j);
        cal_json_key(j, "path");
        cal_json_string(j, path);
        json_times_fields(j, &file_t);
        size_t a0 = a, b0 = b;
        cal_json_key(j, "lines");
        cal_json_array_begin(j);
        for (; a < nl && cal_profile_line_at(p, li[a])->file == file; a++) {
            const cal_line_stat *ls = cal_profile_line_at(p, li[a]);
            cal_json_object_begin(j);
            cal_json_key(j, "line");
            cal_json_int(j, ls->line);
            cal_json_key(j, "function");
            if (ls->func < nf)
                cal_json_string(j, cal_profile_string_at(
                                       p, cal_profile_func_at(p, ls->func)->name));
            else
                cal_json_null(j);
            json_times_fields(j, &ls->t);
            json_line_processes(j, p, ls);
            json_line_memory(j, p, ls);
            json_gpu_object(j, p, &ls->gpu);
            cal_json_object_end(j);
        }
        cal_json_array_end(j);
        cal_json_key(j, "functions");
        cal_json_array_begin(j);
        for (; b < nf && cal_profile_func_at(p, fi[b])->file == file; b++) {
            const cal_func_stat *fs = cal_profile_func_at(p, fi[b]);
            cal_json_object_begin(j);
            cal_json_key(j, "name");
            cal_json_string(j, cal_profile_string_at(p, fs->name));
            cal_json_key(j, "line");
            cal_json_int(j, fs->first_line);
            json_times_object(j, "self", &fs->self);
            json_times_object(j, "total", &fs->total);
            json_func_memory(j, p, fs);
            json_gpu_object(j, p, &fs->gpu);
            cal_json_object_end(j);
        }
        cal_json_array_end(j);
        if (no_source) {
            cal_json_key(j, "source");
            cal_json_null(j);
        } else {
            json_source(j, p, li, a0, a, fi, b0, b, path, &budget);
        }
        cal_json_object_end(j);
    }
done:
    cal_json_array_end(j);
    free(li);
    free(fi);
}

static void json_ref(cal_json *j, uint32_t ref)
{
    cal_json_int(j, ref == CAL_STACKS_NONE ? -1 : (int64_t)ref);
}

/* `key`: the list of names, on one line (a table's columns or kinds). */
static void json_names(cal_json *j, const char *key, const char *const *names, size_t n)
{
    cal_json_key(j, key);
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = 0; i < n; i++)
        cal_json_string(j, names[i]);
    cal_json_array_end(j);
}

static const char *const TIMELINE_FIELDS[] = {"time_ns", "node", "kind", "value"};

/* Samples in time order; those at the same time in the order they came.
   (An allocation made without the GIL is credited when the queue is
   drained, possibly after a CPU sample taken later.) */
static int by_time(const void *a, const void *b)
{
    const cal_tl_sample *x = *(const cal_tl_sample *const *)a,
                        *y = *(const cal_tl_sample *const *)b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The timeline of samples (cal_timeline.h; docs/FORMAT.md, "stacks"):
   the threads that have samples, in thread order.  `map` (or NULL: the
   table is written whole) gives each node's index in the written table,
   which may have merged it into a caller (cal_stacks_pruned). */
static void json_sample_timeline(cal_json *j, const cal_timeline *tl,
                                 const uint32_t *map, size_t nmap)
{
    cal_json_key(j, "timeline");
    cal_json_object_begin(j);
    cal_json_key(j, "every");
    cal_json_int(j, (int64_t)tl->every);
    json_names(j, "kinds", cal_timeline_kinds, CAL_TL_KINDS);
    json_names(j, "sample_fields", TIMELINE_FIELDS,
               sizeof TIMELINE_FIELDS / sizeof *TIMELINE_FIELDS);
    cal_json_key(j, "threads");
    cal_json_array_begin(j);
    for (size_t i = 0; i < tl->nthreads; i++) {
        const cal_tl_thread *th = &tl->threads[i];
        if (!th->n)
            continue;
        cal_json_object_begin(j);
        cal_json_key(j, "thread");
        cal_json_int(j, (int64_t)i);
        const cal_tl_sample **order = malloc(th->n * sizeof(*order));
        for (size_t k = 0; order && k < th->n; k++)
            order[k] = &th->v[k];
        if (order)
            qsort(order, th->n, sizeof(*order), by_time);
        cal_json_key(j, "samples");
        cal_json_flat(j);
        cal_json_array_begin(j);
        for (size_t k = 0; k < th->n; k++) {
            const cal_tl_sample *s = order ? order[k] : &th->v[k];
            cal_json_array_begin(j);
            cal_json_int(j, s->t);
            cal_json_int(j, map && s->node < nmap ? map[s->node] : s->node);
            cal_json_int(j, s->kind);
            cal_json_int(j, s->value);
            cal_json_array_end(j);
        }
        free(order);
        cal_json_array_end(j);
        cal_json_object_end(j);
    }
    cal_json_array_end(j);
    cal_json_object_end(j);
}

/* The stack table (cal_stacks.h; docs/FORMAT.md, "stacks"). */
static void json_stacks(cal_json *j, const cal_profile *p)
{
    const cal_stacks *st = cal_profile_stacks_at(p);
    cal_stacks pruned; /* the heaviest stacks, when there are too many */
    size_t nmap = st->nnodes;
    uint32_t *map = nmap > CAL_STACKS_WRITE_MAX ? malloc(nmap * sizeof(*map)) : NULL;
    int own = map && cal_stacks_pruned(st, CAL_STACKS_WRITE_MAX, &pruned, map) == 0;
    if (own)
        st = &pruned;
    else {
        free(map); /* out of memory: the table is written whole */
        map = NULL;
    }
    cal_json_key(j, "stacks");
    cal_json_object_begin(j);
    cal_json_key(j, "frames");
    cal_json_array_begin(j);
    for (size_t i = 0; i < st->nframes; i++) {
        const cal_stack_frame *f = &st->frames[i];
        cal_json_flat(j);
        cal_json_object_begin(j);
        cal_json_key(j, "file");
        cal_json_string(j, cal_profile_string_at(p, f->file));
        cal_json_key(j, "name");
        cal_json_string(j, cal_profile_string_at(p, f->name));
        cal_json_key(j, "first_line");
        cal_json_int(j, f->first_line);
        cal_json_key(j, "library");
        cal_json_bool(j, f->library);
        cal_json_object_end(j);
    }
    cal_json_array_end(j);
    /* Nodes are written as arrays, one per line, in these columns; -1 for
       a root's parent and frame. */
    json_names(j, "node_fields", cal_stacks_node_fields, CAL_STACKS_NODE_FIELDS);
    cal_json_key(j, "nodes");
    cal_json_array_begin(j);
    for (size_t i = 0; i < st->nnodes; i++) {
        const cal_stack_node *n = &st->nodes[i];
        cal_json_flat(j);
        cal_json_array_begin(j);
        json_ref(j, n->parent);
        json_ref(j, n->frame);
        cal_json_int(j, n->line);
        cal_json_int(j, n->thread);
        cal_json_seconds(j, n->python_ns);
        cal_json_seconds(j, n->native_ns);
        cal_json_seconds(j, n->system_ns);
        cal_json_seconds(j, n->waiting_ns);
        cal_json_int(j, n->samples);
        cal_json_int(j, n->alloc_python);
        cal_json_int(j, n->alloc_native);
        cal_json_int(j, n->copied);
        cal_json_int(j, n->alloc_samples);
        cal_json_array_end(j);
    }
    cal_json_array_end(j);
    cal_json_key(j, "folded");
    cal_json_flat(j);
    cal_json_object_begin(j);
    cal_json_key(j, "time_s");
    cal_json_seconds(j, st->folded_ns);
    cal_json_key(j, "bytes");
    cal_json_int(j, st->folded_bytes);
    cal_json_key(j, "samples");
    cal_json_int(j, st->folded_samples);
    cal_json_object_end(j);
    const cal_timeline *tl = cal_profile_timeline_at(p);
    if (tl->total > 0) /* no sample, no timeline: the member is optional */
        json_sample_timeline(j, tl, map, nmap);
    cal_json_object_end(j);
    if (own)
        cal_stacks_free(&pruned);
    free(map);
}

void cal_report_json(const cal_profile *p, const cal_meta *m, cal_buf *out)
{
    cal_json j;
    cal_json_init(&j, out, 1);
    totals t;
    compute_totals(p, &t);

    cal_json_object_begin(&j);
    cal_json_key(&j, "schema");
    cal_json_string(&j, CAL_SCHEMA);
    cal_json_key(&j, "calipers_version");
    cal_json_string(&j, m->calipers_version);

    cal_json_key(&j, "program");
    cal_json_object_begin(&j);
    json_string_array(&j, "argv", m->argv, m->argc);
    json_string_or_null(&j, "script", m->script);
    json_string_or_null(&j, "module", m->module);
    cal_json_key(&j, "cwd");
    cal_json_string(&j, m->cwd);
    cal_json_key(&j, "pid");
    cal_json_int(&j, m->pid);
    cal_json_key(&j, "python_version");
    cal_json_string(&j, m->python_version);
    cal_json_key(&j, "python_executable");
    cal_json_string(&j, m->python_executable);
    if (m->python_build && *m->python_build) {
        cal_json_key(&j, "python_build");
        cal_json_string(&j, m->python_build);
    }
    cal_json_key(&j, "start_time_unix");
    cal_json_fixed(&j, m->start_unix,
                   6); /* to the microsecond: merging aligns clocks by it */
    cal_json_object_end(&j);

    cal_json_key(&j, "config");
    cal_json_object_begin(&j);
    cal_json_key(&j, "interval_s");
    cal_json_seconds(&j, m->interval_ns);
    cal_json_key(&j, "profile_all");
    cal_json_bool(&j, m->profile_all);
    json_string_array(&j, "profile_only", m->profile_only, m->nprofile_only);
    json_string_array(&j, "profile_exclude", m->profile_exclude, m->nprofile_exclude);
    cal_json_key(&j, "cpu_only");
    cal_json_bool(&j, m->cpu_only);
    const cal_memory *mem = cal_profile_memory_at(p);
    cal_json_key(&j, "memory_interval_bytes");
    cal_json_int(&j, mem->enabled ? mem->alloc_mean : 0);
    cal_json_key(&j, "copy_interval_bytes");
    cal_json_int(&j, mem->enabled ? mem->copy_mean : 0);
    cal_json_key(&j, "footprint_threshold_bytes");
    cal_json_int(&j, mem->enabled ? mem->threshold : 0);
    cal_json_object_end(&j);

    cal_json_key(&j, "summary");
    cal_json_object_begin(&j);
    cal_json_key(&j, "wall_s");
    cal_json_seconds(&j, cal_profile_wall(p));
    if (cal_profile_paused(p) > 0) {
        cal_json_key(&j, "paused_s");
        cal_json_seconds(&j, cal_profile_paused(p));
    }
    json_times_fields(&j, &t.all);
    cal_json_key(&j, "attributed_samples");
    cal_json_int(&j, t.attributed_samples);
    json_times_object(&j, "unattributed", &t.unattributed);
    cal_json_key(&j, "dropped_samples");
    cal_json_int(&j, m->dropped);
    json_memory_summary(&j, p);
    json_gpu_summary(&j, p);
    cal_gc_json(&j, p, t.all.gc_ns, cal_times_cpu(&t.all));
    cal_json_object_end(&j);

    json_processes(&j, p);

    cal_json_key(&j, "threads");
    cal_json_array_begin(&j);
    for (size_t i = 0; i < cal_profile_nthreads(p); i++) {
        const cal_thread_stat *th = cal_profile_thread_at(p, i);
        cal_json_object_begin(&j);
        cal_json_key(&j, "process");
        cal_json_int(&j, th->process);
        cal_json_key(&j, "ident");
        cal_json_int(&j, (int64_t)th->ident);
        cal_json_key(&j, "tid");
        cal_json_int(&j, th->tid);
        cal_json_key(&j, "name");
        if (th->name != CAL_PROFILE_NONE)
            cal_json_string(&j, cal_profile_string_at(p, th->name));
        else
            cal_json_null(&j);
        cal_json_key(&j, "main");
        cal_json_bool(&j, th->is_main);
        json_times_fields(&j, &th->t);
        json_times_object(&j, "unattributed", &th->unattributed);
        cal_json_object_end(&j);
    }
    cal_json_array_end(&j);

    json_files(&j, p, m->no_source);
    json_leaks(&j, p);
    json_stacks(&j, p);
    cal_atypes_json(&j, p);
    if (m->heap_json) {
        cal_json_key(&j, "heap");
        cal_json_raw(&j, m->heap_json);
    }

    cal_buf notes;
    cal_buf_init(&notes);
    cal_report_notes(p, m, &notes);
    cal_json_key(&j, "notes");
    cal_json_array_begin(&j);
    for (char *s = notes.data, *nl; s && (nl = strchr(s, '\n')); s = nl + 1) {
        *nl = '\0';
        cal_json_string(&j, s);
    }
    cal_json_array_end(&j);
    cal_buf_free(&notes);

    cal_json_object_end(&j);
    cal_buf_puts(out, "\n");
}
