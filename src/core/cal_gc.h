/*
 * cal_gc — what the cyclic garbage collector did during the run: per
 * generation the collections, the objects they collected and those they
 * found uncollectable (exact: the collector's own statistics, read at the
 * start and the end), its threshold, and its count over time (what
 * gc.get_count() returns, read at each sampling pass).  The time it took
 * is not here: it is a label on the sampled CPU time (cal_times.gc_ns),
 * credited per line, function and thread like the rest.  And the
 * collections the sampler's ticks found running in the main thread: how
 * many, and the longest of them one by one (cal_gc_seen).
 * Plain data, no globals; the owner (the profile) serialises access.
 */
#ifndef CAL_GC_H
#define CAL_GC_H

#include "cal_json.h"
#include "cal_series.h"

#include <stdint.h>

#define CAL_GC_GENERATIONS 3

typedef struct cal_gc_generation {
    int64_t collections;   /* of this generation (each collects the younger too) */
    int64_t collected;     /* objects it freed */
    int64_t uncollectable; /* objects it put in gc.garbage */
    int64_t threshold;     /* gc.get_threshold()[i] at the end */
    cal_series count;      /* gc.get_count()[i] over time */
} cal_gc_generation;

/* A collection that ticks found running: ticks at random times, so one
   that ran for D seconds is seen by about D / interval of them. */
typedef struct cal_gc_seen {
    int generation;        /* 0..2, or -1 when the counts did not tell */
    int64_t start_ns;      /* the first tick that saw it, from the run's start */
    int64_t span_ns;       /* from that tick to the last one that saw it */
    int64_t ticks;         /* how many saw it */
    uint32_t line;         /* where they found the thread: a line index, or NONE */
    int64_t collected;     /* objects it freed, or -1: not known */
    int64_t uncollectable; /* objects it put in gc.garbage, or -1 */
} cal_gc_seen;

#define CAL_GC_LONGEST 50

typedef struct cal_gc_stats {
    int read; /* 0: the collector could not be read (an interpreter whose
                 layout calipers does not know): nothing below is known */
    cal_gc_generation gen[CAL_GC_GENERATIONS];
    int64_t seen;                        /* collections ticks found running */
    cal_gc_seen longest[CAL_GC_LONGEST]; /* the longest of them, by ticks */
    size_t nlongest;
} cal_gc_stats;

/* Add a collection seen by ticks (its ticks and span so far).  The same
   collection (generation, start) seen again, by later ticks, replaces its
   record. */
void cal_gc_add_seen(cal_gc_stats *g, const cal_gc_seen *seen);

struct cal_profile;

/* Write the summary's "gc" member (key and value) into j: null when the
   collector was not read.  gc_ns and cpu_ns are the run's time in the
   collector and its CPU time (every thread), for the total and share. */
void cal_gc_json(cal_json *j, const struct cal_profile *p, int64_t gc_ns,
                 int64_t cpu_ns);

#endif
