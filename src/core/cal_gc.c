/* cal_gc — see cal_gc.h. */
#include "cal_gc.h"

#include "cal_profile.h"
#include "cal_report.h"

#include <string.h>

#define GC_TIMELINE_POINTS 100

static void json_count_timeline(cal_json *j, const cal_series *s)
{
    cal_point pts[CAL_SERIES_CAP];
    size_t n = s->n;
    memcpy(pts, s->p, n * sizeof(*pts));
    n = cal_rdp_reduce(pts, n, GC_TIMELINE_POINTS);
    cal_json_key(j, "timeline");
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

/* Is a longer than b: more ticks, then the longer span, then the earlier. */
static int longer(const cal_gc_seen *a, const cal_gc_seen *b)
{
    if (a->ticks != b->ticks)
        return a->ticks > b->ticks;
    if (a->span_ns != b->span_ns)
        return a->span_ns > b->span_ns;
    return a->start_ns < b->start_ns;
}

void cal_gc_add_seen(cal_gc_stats *g, const cal_gc_seen *seen)
{
    size_t at = g->nlongest;
    for (size_t i = 0; i < g->nlongest; i++)
        if (g->longest[i].generation == seen->generation &&
            g->longest[i].start_ns == seen->start_ns) {
            at = i; /* seen again: taken out, and put back where it goes */
            break;
        }
    if (at == g->nlongest) {
        g->seen++;
        if (g->nlongest == CAL_GC_LONGEST) {
            if (!longer(seen, &g->longest[CAL_GC_LONGEST - 1]))
                return;
            at = CAL_GC_LONGEST - 1; /* the shortest goes */
        } else {
            g->nlongest++;
        }
    }
    memmove(&g->longest[at], &g->longest[at + 1],
            (g->nlongest - 1 - at) * sizeof(*g->longest));
    size_t k = 0;
    while (k < g->nlongest - 1 && !longer(seen, &g->longest[k]))
        k++;
    memmove(&g->longest[k + 1], &g->longest[k],
            (g->nlongest - 1 - k) * sizeof(*g->longest));
    g->longest[k] = *seen;
}

static void json_count_or_null(cal_json *j, const char *key, int64_t v)
{
    cal_json_key(j, key);
    if (v >= 0)
        cal_json_int(j, v);
    else
        cal_json_null(j);
}

static void json_seen(cal_json *j, const cal_profile *p, const cal_gc_stats *g)
{
    cal_json_key(j, "seen");
    cal_json_object_begin(j);
    cal_json_key(j, "collections");
    cal_json_int(j, g->seen);
    cal_json_key(j, "longest");
    cal_json_array_begin(j);
    for (size_t i = 0; i < g->nlongest; i++) {
        const cal_gc_seen *s = &g->longest[i];
        cal_json_object_begin(j);
        json_count_or_null(j, "generation", s->generation);
        cal_json_key(j, "start_s");
        cal_json_seconds(j, s->start_ns > 0 ? s->start_ns : 0);
        cal_json_key(j, "ticks");
        cal_json_int(j, s->ticks);
        cal_json_key(j, "at_least_s");
        cal_json_seconds(j, s->span_ns);
        cal_report_json_line_ref(j, "line", p, s->line);
        json_count_or_null(j, "collected", s->collected);
        json_count_or_null(j, "uncollectable", s->uncollectable);
        cal_json_object_end(j);
    }
    cal_json_array_end(j);
    cal_json_object_end(j);
}

void cal_gc_json(cal_json *j, const cal_profile *p, int64_t gc_ns, int64_t cpu_ns)
{
    const cal_gc_stats *g = cal_profile_gc_at(p);
    cal_json_key(j, "gc");
    if (!g->read) {
        cal_json_null(j);
        return;
    }
    int64_t collections = 0, collected = 0, uncollectable = 0;
    for (int i = 0; i < CAL_GC_GENERATIONS; i++) {
        collections += g->gen[i].collections;
        collected += g->gen[i].collected;
        uncollectable += g->gen[i].uncollectable;
    }
    cal_json_object_begin(j);
    cal_json_key(j, "time_s");
    cal_json_seconds(j, gc_ns);
    cal_json_key(j, "cpu_fraction");
    cal_json_fixed(j, cpu_ns > 0 ? (double)gc_ns / (double)cpu_ns : 0.0, 4);
    cal_json_key(j, "collections");
    cal_json_int(j, collections);
    cal_json_key(j, "collected");
    cal_json_int(j, collected);
    cal_json_key(j, "uncollectable");
    cal_json_int(j, uncollectable);
    cal_json_key(j, "generations");
    cal_json_array_begin(j);
    for (int i = 0; i < CAL_GC_GENERATIONS; i++) {
        const cal_gc_generation *gen = &g->gen[i];
        cal_json_object_begin(j);
        cal_json_key(j, "collections");
        cal_json_int(j, gen->collections);
        cal_json_key(j, "collected");
        cal_json_int(j, gen->collected);
        cal_json_key(j, "uncollectable");
        cal_json_int(j, gen->uncollectable);
        cal_json_key(j, "threshold");
        cal_json_int(j, gen->threshold);
        json_count_timeline(j, &gen->count);
        cal_json_object_end(j);
    }
    cal_json_array_end(j);
    json_seen(j, p, g);
    cal_json_object_end(j);
}
