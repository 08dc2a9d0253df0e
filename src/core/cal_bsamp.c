/* cal_bsamp — see cal_bsamp.h. */
#include "cal_bsamp.h"

/* Uniform in [mean/2, mean/2 + mean]: mean gap `mean`.  A mean of 1 is
   exact tracing: every byte a sample point, each allocation's weight its
   size. */
static int64_t gap(cal_bsamp *s)
{
    if (s->mean == 1)
        return 1;
    uint64_t u = (uint64_t)(((unsigned __int128)cal_rand_next(&s->rng) *
                             (uint64_t)(s->mean + 1)) >>
                            64);
    return s->mean / 2 + (int64_t)u;
}

static void feed(cal_bsamp *s, int64_t bytes)
{
    s->left += bytes;
    s->fed += (uint64_t)bytes;
}

void cal_bsamp_init(cal_bsamp *s, int64_t mean, uint64_t seed)
{
    cal_rand_seed(&s->rng, seed);
    s->mean = mean > 0 ? mean : 0;
    /* The first point falls uniformly in the first mean bytes: the
       stationary start of the renewal process. */
    s->left = s->mean ? 1 + (int64_t)(((unsigned __int128)cal_rand_next(&s->rng) *
                                       (uint64_t)s->mean) >>
                                      64)
                      : INT64_MAX;
    s->fed = (uint64_t)s->left;
}

uint64_t cal_bsamp_count_slow(cal_bsamp *s)
{
    if (!s->mean) {
        cal_bsamp_set_left(s, INT64_MAX);
        return 0;
    }
    uint64_t k = 0;
    /* A huge allocation (gigabytes at a 256 KiB mean) would need thousands
       of draws: take all but the last 32 gaps at their mean, which changes
       the variance negligibly and the expectation not at all. */
    int64_t deficit = -s->left;
    if (deficit > 64 * s->mean) {
        uint64_t bulk = (uint64_t)(deficit / s->mean) - 32;
        feed(s, (int64_t)bulk * s->mean);
        k += bulk;
    }
    while (s->left <= 0) {
        feed(s, gap(s));
        k++;
    }
    return k;
}
