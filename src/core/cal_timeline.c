/* cal_timeline — see cal_timeline.h. */
#include "cal_timeline.h"

#include <stdlib.h>
#include <string.h>

const char *const cal_timeline_kinds[CAL_TL_KINDS] = {
    "python", "native", "system", "waiting", "alloc_python", "alloc_native", "copy",
};

void cal_timeline_init(cal_timeline *tl)
{
    memset(tl, 0, sizeof(*tl));
    tl->every = 1;
    tl->cap = CAL_TIMELINE_CAP;
}

void cal_timeline_free(cal_timeline *tl)
{
    for (size_t i = 0; i < tl->nthreads; i++)
        free(tl->threads[i].v);
    free(tl->threads);
    cal_timeline_init(tl);
}

/* The list of `thread`, made on first use; NULL on allocation failure. */
static cal_tl_thread *thread_list(cal_timeline *tl, uint32_t thread)
{
    if (thread >= tl->nthreads) {
        size_t n = tl->nthreads ? tl->nthreads : 8;
        while (n <= thread)
            n *= 2;
        cal_tl_thread *v = realloc(tl->threads, n * sizeof(*v));
        if (!v)
            return NULL;
        memset(v + tl->nthreads, 0, (n - tl->nthreads) * sizeof(*v));
        tl->threads = v;
        tl->nthreads = n;
    }
    return &tl->threads[thread];
}

static int push(cal_tl_thread *th, const cal_tl_sample *s)
{
    if (th->n == th->cap) {
        size_t n = th->cap ? th->cap * 2 : 64;
        cal_tl_sample *v = realloc(th->v, n * sizeof(*v));
        if (!v)
            return -1;
        th->v = v;
        th->cap = n;
    }
    th->v[th->n++] = *s;
    return 0;
}

void cal_timeline_coarsen(cal_timeline *tl, uint64_t every)
{
    while (tl->every < every) {
        /* Rank j is number j * every: the even ranks are the multiples of
           the doubled stride. */
        tl->total = 0;
        for (size_t i = 0; i < tl->nthreads; i++) {
            cal_tl_thread *th = &tl->threads[i];
            size_t k = 0;
            for (size_t j = 0; j < th->n; j += 2)
                th->v[k++] = th->v[j];
            th->n = k;
            tl->total += k;
        }
        tl->every *= 2;
    }
}

void cal_timeline_bound(cal_timeline *tl)
{
    while (tl->total > tl->cap && tl->every < (UINT64_C(1) << 62))
        cal_timeline_coarsen(tl, tl->every * 2);
}

int cal_timeline_add(cal_timeline *tl, uint32_t thread, int64_t t, uint32_t node,
                     uint32_t kind, int64_t value)
{
    cal_tl_thread *th = thread_list(tl, thread);
    if (!th)
        return -1;
    uint64_t number = th->seen++;
    if (number % tl->every != 0)
        return 0;
    cal_tl_sample s = {t, node, kind, value};
    if (push(th, &s) != 0) {
        th->seen--;
        return -1;
    }
    tl->total++;
    cal_timeline_bound(tl);
    return 0;
}

int cal_timeline_add_kept(cal_timeline *tl, uint32_t thread, uint64_t rank,
                          uint64_t every_src, const cal_tl_sample *s)
{
    cal_tl_thread *th = thread_list(tl, thread);
    if (!th)
        return -1;
    uint64_t number = rank * every_src;
    if (th->seen < number + every_src)
        th->seen = number + every_src;
    if (number % tl->every != 0)
        return 0;
    if (push(th, s) != 0)
        return -1;
    tl->total++;
    return 0;
}

uint32_t cal_timeline_cpu_kind(int64_t python_ns, int64_t native_ns, int64_t system_ns,
                               int64_t waiting_ns)
{
    int64_t v[4] = {python_ns, native_ns, system_ns, waiting_ns};
    uint32_t best = 0;
    for (uint32_t k = 1; k < 4; k++)
        if (v[k] > v[best])
            best = k;
    return best;
}
