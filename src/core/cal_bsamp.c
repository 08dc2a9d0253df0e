/* cal_bsamp — see cal_bsamp.h. */
#include "cal_bsamp.h"

static uint64_t next(cal_bsamp *s)
{
    uint64_t x = s->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [mean/2, mean/2 + mean]: mean gap `mean`. */
static int64_t gap(cal_bsamp *s)
{
    uint64_t u = (uint64_t)(((unsigned __int128)next(s) * (uint64_t)(s->mean + 1)) >> 64);
    return s->mean / 2 + (int64_t)u;
}

void cal_bsamp_init(cal_bsamp *s, int64_t mean, uint64_t seed)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    s->rng = z ? z : 0x2545F4914F6CDD1Dull;
    s->mean = mean > 0 ? mean : 0;
    /* The first point falls uniformly in the first mean bytes: the
       stationary start of the renewal process. */
    s->left = s->mean ? 1 + (int64_t)(((unsigned __int128)next(s) * (uint64_t)s->mean) >> 64)
                      : INT64_MAX;
}

uint64_t cal_bsamp_count_slow(cal_bsamp *s)
{
    if (!s->mean) {
        s->left = INT64_MAX;
        return 0;
    }
    uint64_t k = 0;
    /* A huge allocation (gigabytes at a 256 KiB mean) would need thousands
       of draws: take all but the last 32 gaps at their mean, which changes
       the variance negligibly and the expectation not at all. */
    int64_t deficit = -s->left;
    if (deficit > 64 * s->mean) {
        uint64_t bulk = (uint64_t)(deficit / s->mean) - 32;
        s->left += (int64_t)bulk * s->mean;
        k += bulk;
    }
    while (s->left <= 0) {
        s->left += gap(s);
        k++;
    }
    return k;
}
