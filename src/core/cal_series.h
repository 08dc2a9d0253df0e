/*
 * cal_series — a bounded time series (memory over time), simplified with
 * Ramer-Douglas-Peucker so that it keeps its shape in a fixed number of
 * points however long the program runs.
 *
 * HOW IT WORKS
 *
 * Points are appended until the buffer holds CAL_SERIES_CAP of them; then
 * the series is reduced to CAL_SERIES_KEEP points and appending goes on.
 * The reduction is the "top-N" form of Ramer-Douglas-Peucker (Douglas &
 * Peucker 1973): start from the first and last points and repeatedly add
 * the point farthest from the polyline chosen so far, until N points are
 * chosen.  Distance is vertical (|v - the interpolated value at t|): time
 * and bytes are different units, and a memory curve's story is its
 * vertical excursions.  Peaks and troughs are therefore kept first.
 * Each reduction costs O(N * CAP); amortised over CAP - KEEP appends.
 *
 * Plain data; the owner serialises access.
 */
#ifndef CAL_SERIES_H
#define CAL_SERIES_H

#include <stddef.h>
#include <stdint.h>

#define CAL_SERIES_CAP 200
#define CAL_SERIES_KEEP 100

typedef struct cal_point {
    int64_t t; /* nanoseconds since the run started */
    int64_t v;
} cal_point;

typedef struct cal_series {
    size_t n;
    cal_point p[CAL_SERIES_CAP];
} cal_series;

void cal_series_init(cal_series *s);

/* Append a point (t not before the previous one). */
void cal_series_add(cal_series *s, int64_t t, int64_t v);

/* Reduce pts[0..n) in place to at most keep points (keep >= 2) by top-N
   RDP; returns the new count.  The first and last points always stay. */
size_t cal_rdp_reduce(cal_point *pts, size_t n, size_t keep);

/* The least-squares slope of v over t, in units of v per second (0 with
   fewer than two distinct times). */
double cal_series_slope(const cal_point *pts, size_t n);

#endif
