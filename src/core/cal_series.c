/* cal_series — see cal_series.h. */
#include "cal_series.h"

#include <string.h>

void cal_series_init(cal_series *s) { s->n = 0; }

/* The point of (lo, hi) farthest from the chord pts[lo]-pts[hi]. */
static size_t farthest(const cal_point *pts, size_t lo, size_t hi, double *dist)
{
    size_t best = lo;
    double bd = -1.0;
    double t0 = (double)pts[lo].t, v0 = (double)pts[lo].v;
    double dt = (double)pts[hi].t - t0, dv = (double)pts[hi].v - v0;
    for (size_t i = lo + 1; i < hi; i++) {
        double at = dt > 0 ? v0 + dv * (((double)pts[i].t - t0) / dt) : v0;
        double d = (double)pts[i].v - at;
        if (d < 0)
            d = -d;
        if (d > bd) {
            bd = d;
            best = i;
        }
    }
    *dist = bd;
    return best;
}

size_t cal_rdp_reduce(cal_point *pts, size_t n, size_t keep)
{
    if (keep < 2)
        keep = 2;
    if (n <= keep)
        return n;
    /* chosen[i]: point i is kept.  Segments are between consecutive chosen
       points; each round splits the segment whose farthest point is
       farthest. */
    unsigned char chosen[CAL_SERIES_CAP * 4];
    cal_point tmp[CAL_SERIES_CAP * 4];
    if (n > sizeof chosen) { /* never with cal_series; decimate evenly */
        size_t out = 0;
        for (size_t i = 0; i < keep; i++)
            pts[out++] = pts[i * (n - 1) / (keep - 1)];
        return out;
    }
    memset(chosen, 0, n);
    chosen[0] = chosen[n - 1] = 1;
    for (size_t have = 2; have < keep; have++) {
        size_t best = 0, lo = 0;
        double bd = -1.0;
        for (size_t i = 1; i < n; i++) {
            if (!chosen[i])
                continue;
            if (i - lo > 1) {
                double d;
                size_t f = farthest(pts, lo, i, &d);
                if (d > bd) {
                    bd = d;
                    best = f;
                }
            }
            lo = i;
        }
        if (bd < 0)
            break;
        chosen[best] = 1;
    }
    size_t out = 0;
    for (size_t i = 0; i < n; i++)
        if (chosen[i])
            tmp[out++] = pts[i];
    memcpy(pts, tmp, out * sizeof(*pts));
    return out;
}

void cal_series_add(cal_series *s, int64_t t, int64_t v)
{
    if (s->n == CAL_SERIES_CAP)
        s->n = cal_rdp_reduce(s->p, s->n, CAL_SERIES_KEEP);
    s->p[s->n].t = t;
    s->p[s->n].v = v;
    s->n++;
}

double cal_series_slope(const cal_point *pts, size_t n)
{
    if (n < 2)
        return 0.0;
    double mt = 0, mv = 0;
    for (size_t i = 0; i < n; i++) {
        mt += (double)pts[i].t / 1e9;
        mv += (double)pts[i].v;
    }
    mt /= (double)n;
    mv /= (double)n;
    double stt = 0, stv = 0;
    for (size_t i = 0; i < n; i++) {
        double dt = (double)pts[i].t / 1e9 - mt;
        stt += dt * dt;
        stv += dt * ((double)pts[i].v - mv);
    }
    return stt > 0 ? stv / stt : 0.0;
}
