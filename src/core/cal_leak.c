/*
 * cal_leak — which lines leak: the judgement over a profile's lines, kept
 * apart from the writers that print it.  Plain C, no Python; not for the
 * hot zone (it runs when a profile is written or merged).
 *
 * HOW IT WORKS
 * The memory engine (src/ext/memory.c) watches one sampled allocation each
 * time the footprint rises by a threshold and counts, per line, how many
 * watched allocations were freed (cal_line_mem.leak_tracked/leak_freed).
 * A line leaks when
 *   - Laplace's rule of succession, (unfreed + 1) / (watched + 2), the
 *     probability that its next watched allocation is not freed either,
 *     is at least 95% (seed 000, section 3.4), and
 *   - its live bytes grew by at least a quarter of their final value in
 *     the second half of the run: data built once and kept (a table loaded
 *     at start) is held, not leaked, and growth that stopped early is
 *     bounded as far as this run shows.
 * Its rate is the least-squares slope of its live bytes (cal_series_slope).
 *
 * LIMITATIONS
 * A list kept in a module global that grows until the very end is judged
 * a leak: reachability at exit is not looked at.
 */
#include "cal_leak.h"

#include <stdlib.h>

/* Laplace's rule of succession: the probability that the next watched
   allocation of a line is not freed, given `freed` of `watched` were. */
double cal_leak_likelihood(int64_t watched, int64_t freed)
{
    return (double)(watched - freed + 1) / (double)(watched + 2);
}

#define LEAK_LIKELIHOOD 0.95
#define LEAK_LATE_GROWTH 0.25 /* of its live bytes at the end */

/* The series' value at time t, interpolated (the first value before it). */
static double series_at(const cal_series *s, int64_t t)
{
    if (!s || !s->n || t < s->p[0].t)
        return 0.0;
    for (size_t i = 1; i < s->n; i++)
        if (s->p[i].t >= t) {
            const cal_point *a = &s->p[i - 1], *b = &s->p[i];
            double f = b->t > a->t ? (double)(t - a->t) / (double)(b->t - a->t) : 1.0;
            return (double)a->v + f * (double)(b->v - a->v);
        }
    return (double)s->p[s->n - 1].v;
}

/* A leak: its watched allocations were (almost) never freed, and it was
   still growing in the second half of the run (so data built once and
   kept is not one). */
static int is_leak(const cal_profile *p, const cal_line_stat *ls)
{
    if (ls->mem.leak_tracked == 0 || ls->mem.live <= 0 ||
        cal_leak_likelihood(ls->mem.leak_tracked, ls->mem.leak_freed) < LEAK_LIKELIHOOD)
        return 0;
    double mid = series_at(ls->live_series, cal_profile_wall(p) / 2);
    double late = (double)ls->mem.live - mid;
    return late > 0 && late >= LEAK_LATE_GROWTH * (double)ls->mem.live;
}

static double leak_rate(const cal_line_stat *ls)
{
    double r =
        ls->live_series ? cal_series_slope(ls->live_series->p, ls->live_series->n) : 0;
    return r > 0 ? r : 0;
}

static cal_leak leak_of(const cal_line_stat *ls, size_t i)
{
    cal_leak k = {
        .line = (uint32_t)i,
        .process = 0,
        .likelihood = cal_leak_likelihood(ls->mem.leak_tracked, ls->mem.leak_freed),
        .rate = leak_rate(ls),
        .live_end = ls->mem.live,
        .watched = ls->mem.leak_tracked,
        .freed = ls->mem.leak_freed,
    };
    return k;
}

void cal_leak_settle(cal_profile *p)
{
    cal_memory *mem = cal_profile_memory(p);
    if (!mem->enabled || mem->leaks_settled)
        return;
    mem->leaks_settled = 1;
    for (size_t i = 0; i < cal_profile_nlines(p); i++) {
        const cal_line_stat *ls = cal_profile_line_at(p, i);
        if (is_leak(p, ls)) {
            cal_leak k = leak_of(ls, i);
            cal_profile_leak_add(p, &k); /* out of memory: one leak fewer */
        }
    }
}

cal_leak *cal_leak_collect(const cal_profile *p, size_t *n)
{
    const cal_memory *mem = cal_profile_memory_at(p);
    size_t nl = cal_profile_nlines(p), k = 0;
    *n = 0;
    if (!mem->enabled)
        return NULL;
    cal_leak *v = malloc((cal_profile_nleaks(p) + (mem->leaks_settled ? 0 : nl) + 1) *
                         sizeof(*v));
    if (!v)
        return NULL;
    for (size_t i = 0; i < cal_profile_nleaks(p); i++)
        v[k++] = *cal_profile_leak_at(p, i);
    for (size_t i = 0; !mem->leaks_settled && i < nl; i++)
        if (is_leak(p, cal_profile_line_at(p, i)))
            v[k++] = leak_of(cal_profile_line_at(p, i), i);
    *n = k;
    return v;
}
