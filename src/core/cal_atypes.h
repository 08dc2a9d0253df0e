/*
 * cal_atypes — what the sampled allocations were and how long they lived:
 * per (line, type) the samples, the bytes they stand for, their fates
 * (died before the next garbage collection, survived one, still alive at
 * the end without one, not followed) and two lifetime histograms (on the
 * allocation clock and in nanoseconds), from which the writer derives the
 * per-line and per-type figures of the profile's "allocated_types" section.
 * Plain data, no globals; the owner (the profile) serialises access.
 */
#ifndef CAL_ATYPES_H
#define CAL_ATYPES_H

#include "cal_json.h"
#include "cal_map.h"

#include <stddef.h>
#include <stdint.h>

/* Bucket k of a lifetime histogram holds lifetimes in [2^(k-1), 2^k)
   (bucket 0: 0 and below). */
#define CAL_ATYPES_BUCKETS 64

enum {
    CAL_FATE_YOUNG = 0,    /* freed before the next collection */
    CAL_FATE_SURVIVED = 1, /* alive when a collection ran (freed later or not) */
    CAL_FATE_END = 2,      /* alive at the end, no collection since its birth */
    CAL_FATE_UNTRACKED = 3 /* not followed (made by a thread without the GIL) */
};
#define CAL_FATES 4

typedef struct cal_atype_stat {
    uint32_t line; /* the profile's line index, or UINT32_MAX: no line */
    uint32_t type; /* the profile's string id of the type's name */
    int64_t samples;
    int64_t bytes;  /* the samples' weights */
    double objects; /* sum of weight / size: the objects they stand for */
    int64_t fate_bytes[CAL_FATES];
    /* Bytes of the freed samples, by their lifetime: */
    int64_t life_clock[CAL_ATYPES_BUCKETS]; /* bytes allocated meanwhile */
    int64_t life_ns[CAL_ATYPES_BUCKETS];    /* nanoseconds */
} cal_atype_stat;

typedef struct cal_atypes {
    cal_atype_stat *v;
    size_t n, cap;
    cal_map index;       /* line << 32 | type -> index in v */
    int64_t collections; /* garbage collections during the run */
} cal_atypes;

void cal_atypes_init(cal_atypes *a);
void cal_atypes_free(cal_atypes *a);

/* The histogram bucket of a lifetime. */
int cal_atypes_bucket(int64_t v);

/* Record one sample's whole story: its line and type, the bytes it stands
   for and the block's size, its fate, and (freed samples) its lifetimes.
   0, or -1 on allocation failure (nothing recorded). */
int cal_atypes_add(cal_atypes *a, uint32_t line, uint32_t type, int64_t weight,
                   int64_t size, int fate, int64_t life_clock, int64_t life_ns);

/* Add src's counts to dst (line and type kept). */
void cal_atypes_stat_merge(cal_atype_stat *dst, const cal_atype_stat *src);

/* The bytes-weighted median of a histogram: a value inside the bucket that
   holds the middle byte, interpolated within it; -1 when it is empty. */
double cal_atypes_median(const int64_t hist[CAL_ATYPES_BUCKETS]);

struct cal_profile;

/* Write the profile's "allocated_types" member (key and object) into j, or
   nothing when no allocation sample has a type (memory not profiled). */
void cal_atypes_json(cal_json *j, const struct cal_profile *p);

#endif
