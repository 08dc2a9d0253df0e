/*
 * cal_timeline — a bounded timeline of samples, for exports that draw a
 * run over time (the Firefox Profiler): per thread, when each sample was
 * taken, the stack-table node it credited (cal_stacks.h) and what it was:
 * a CPU sample, by the largest of its four kinds of time, with its time,
 * or an allocation or copy sample, with its bytes.
 *
 * HOW IT IS BOUNDED
 *
 * At most `cap` samples are kept, over all threads (CAL_TIMELINE_CAP: 16,384,
 * about 0.5 MB of JSON), however long the run.  Each thread numbers its
 * samples 0, 1, 2, ... and keeps those whose number is a multiple of
 * `every`, a power of two shared by all threads.  When the kept samples
 * would exceed the cap, `every` doubles and every thread drops its kept
 * samples of odd rank (the j-th kept sample is number j * every, so those
 * of even rank are the multiples of the doubled stride).  So at any moment
 * each thread holds every every-th of its samples, evenly spread over the
 * whole run in the samples' own density (the CPU sampler's are even in
 * time; allocation samples are dense where the program allocates, as
 * they are in the line table), and each kept sample stands for `every`
 * samples.  Decimation rather than a reservoir: the same run gives the
 * same timeline, with no gaps by chance, and merging two timelines needs
 * only their strides (below).
 *
 * Merging another process's timeline (its threads are new threads here):
 * both are brought to the coarser stride (a kept sample of rank j of a
 * timeline with stride s is number j * s), then decimated again while
 * over the cap.
 *
 * Not thread-safe: the owner serialises access (the GIL, like cal_profile).
 */
#ifndef CAL_TIMELINE_H
#define CAL_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#define CAL_TIMELINE_CAP 16384

/* What a sample was (its `kind` in the JSON, an index in this order). */
enum {
    CAL_TL_PYTHON,       /* a CPU sample, mostly Python time; value: its ns */
    CAL_TL_NATIVE,       /* ... mostly native time */
    CAL_TL_SYSTEM,       /* ... mostly system time */
    CAL_TL_WAITING,      /* ... mostly waiting */
    CAL_TL_ALLOC_PYTHON, /* an allocation sample, Python's allocator; value: bytes */
    CAL_TL_ALLOC_NATIVE, /* ... native code's */
    CAL_TL_COPY,         /* a copy sample; value: bytes */
    CAL_TL_KINDS
};

/* The kinds' names, in order (for the JSON). */
extern const char *const cal_timeline_kinds[CAL_TL_KINDS];

typedef struct cal_tl_sample {
    int64_t t;     /* ns since the (main) process's start */
    uint32_t node; /* index in the stack table */
    uint32_t kind;
    int64_t value; /* ns, or bytes */
} cal_tl_sample;

typedef struct cal_tl_thread {
    cal_tl_sample *v;
    size_t n, cap;
    uint64_t seen; /* samples numbered so far */
} cal_tl_thread;

typedef struct cal_timeline {
    cal_tl_thread *threads; /* by the profile's thread index */
    size_t nthreads;
    uint64_t every; /* the stride: a power of two, 1 at first */
    size_t total;   /* samples kept, over all threads */
    size_t cap;     /* the bound on total (CAL_TIMELINE_CAP) */
} cal_timeline;

void cal_timeline_init(cal_timeline *tl);
void cal_timeline_free(cal_timeline *tl);

/* Number the next sample of `thread` and keep it if its number is a
   multiple of the stride.  0, or -1 on allocation failure (nothing kept,
   the timeline as it was). */
int cal_timeline_add(cal_timeline *tl, uint32_t thread, int64_t t, uint32_t node,
                     uint32_t kind, int64_t value);

/* The kind of a CPU sample of these times (the largest of the four; ties
   go to the first in the order above). */
uint32_t cal_timeline_cpu_kind(int64_t python_ns, int64_t native_ns, int64_t system_ns,
                               int64_t waiting_ns);

/* Bring the stride up to `every` (a power of two), dropping what it drops. */
void cal_timeline_coarsen(cal_timeline *tl, uint64_t every);

/* Merging: append a sample kept with stride `every_src` at rank `rank` of
   its thread's list to `thread`, if its number (rank * every_src) is a
   multiple of this timeline's stride, which must be at least every_src
   (cal_timeline_coarsen first).  `seen` of the thread becomes at least
   (rank + 1) * every_src.  Does not enforce the cap: call
   cal_timeline_bound after the last.  0, or -1 on allocation failure. */
int cal_timeline_add_kept(cal_timeline *tl, uint32_t thread, uint64_t rank,
                          uint64_t every_src, const cal_tl_sample *s);

/* Decimate while over the cap. */
void cal_timeline_bound(cal_timeline *tl);

#endif
