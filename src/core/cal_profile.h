/*
 * cal_profile — the statistics store: interned strings, per-line,
 * per-function and per-thread time, the run's totals.
 *
 * Every figure is in nanoseconds and split four ways (cal_times).  A line is
 * (file, line number); a function is (file, qualified name, first line).
 * "self" time of a function is time attributed to one of its lines; "total"
 * time is time during which the function was anywhere on the stack (counted
 * once per sample however deep the recursion).
 *
 * Not thread-safe: the owner serialises access (the extension holds the GIL).
 * Allocation failure is reported (-1 / CAL_PROFILE_NONE) and the profile
 * stays consistent; the caller counts the dropped sample.
 */
#ifndef CAL_PROFILE_H
#define CAL_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "cal_atypes.h"
#include "cal_gc.h"
#include "cal_series.h"
#include "cal_stacks.h"
#include "cal_timeline.h"

#define CAL_PROFILE_NONE UINT32_MAX

typedef struct cal_times {
    int64_t python_ns;
    int64_t native_ns;
    int64_t system_ns;
    int64_t waiting_ns;
    int64_t samples;
    int64_t gc_ns;        /* of the CPU time (python + native + system), the part
                             spent in the cyclic garbage collector: not a fifth
                             kind, a label on the other three (cal_gc.h) */
    int64_t preempted_ns; /* of the waiting, the part the thread was
                             runnable but had no CPU (the scheduler's run
                             queue); the rest of it was blocked */
} cal_times;

/* Allocation and copy volume (estimates from byte sampling, in bytes). */
typedef struct cal_volume {
    int64_t alloc_python; /* through Python's allocator */
    int64_t alloc_native; /* through malloc and friends */
    int64_t copied;       /* by memcpy/memmove */
    int64_t samples;      /* allocation samples behind the two estimates */
} cal_volume;

/* What a line did to memory. */
typedef struct cal_mem {
    cal_volume vol;
    int64_t live;           /* bytes allocated here and not freed yet (sampled) */
    int64_t live_peak;      /* the most that ever was */
    double footprint_sum;   /* the program's footprint, summed over the */
    int64_t footprint_n;    /* ... samples that found this line running */
    int64_t footprint_peak; /* the highest footprint seen while it ran */
    int64_t leak_tracked;   /* leak detector: allocations watched ... */
    int64_t leak_freed;     /* ... and how many of them were freed */
} cal_mem;

/* One process's share of a line (only in a profile merged from several
   processes, cal_merge.h). */
typedef struct cal_line_proc {
    uint32_t process; /* index in the profile's processes */
    int64_t ns;       /* cal_times_all of its time here */
    int64_t alloc;    /* bytes it allocated here */
} cal_line_proc;

/* What the GPU was doing while a line ran: the GPU readings its samples
   found (like the footprint's average and peak). */
typedef struct cal_gpu_line {
    double util_sum;   /* percent, summed over the samples */
    double memory_sum; /* bytes, summed over the samples */
    int64_t n;
    int64_t memory_peak;
} cal_gpu_line;

typedef struct cal_line_stat {
    uint32_t file; /* string id of the path */
    int32_t line;
    uint32_t func; /* the function the line was last seen in */
    cal_times t;
    cal_mem mem;
    cal_gpu_line gpu;
    cal_series *live_series; /* mem.live over time, or NULL */
    cal_line_proc *procs;    /* per process, or NULL: all from process 0 */
    uint32_t nprocs;
} cal_line_stat;

typedef struct cal_func_stat {
    uint32_t file; /* string id of the path */
    uint32_t name; /* string id of the qualified name */
    int32_t first_line;
    cal_times self;
    cal_times total;
    cal_volume self_vol;
    cal_volume total_vol;
    cal_gpu_line gpu; /* readings found while it was on the stack (inclusive) */
} cal_func_stat;

/* The whole program's memory (exact counters from the shim, and what the
   extension derived).  enabled == 0 when memory was not profiled. */
typedef struct cal_memory {
    int enabled;
    int64_t alloc_mean, copy_mean, threshold;   /* the sampling settings */
    int64_t alloc_python, alloc_native, copied; /* exact totals during the run */
    int64_t peak, peak_python; /* highest footprint, and its Python part */
    uint32_t peak_line;        /* line index that reached it, or NONE */
    int64_t end_live, end_python;
    int64_t samples, dropped;
    cal_series footprint; /* the footprint over time */
    int leaks_settled;    /* process 0's leaks are in the leak list */
} cal_memory;

/* The run's GPUs (NVML, cal_gpu.h).  state: CAL_GPU_OFF when there was
   nothing to sample (no NVIDIA driver, or --no-gpu); CAL_GPU_UNAVAILABLE
   when NVML could not be used, `reason` says why; CAL_GPU_ON when sampled
   (if an NVML error stopped it, `reason` says so and stopped_at when). */
enum { CAL_GPU_OFF = 0, CAL_GPU_ON = 1, CAL_GPU_UNAVAILABLE = 2 };
#define CAL_PROFILE_GPUS 16

typedef struct cal_gpu_dev_stat {
    uint32_t uuid, name; /* string ids */
    int64_t memory_total;
    double util_sum; /* percent, over the readings */
    int64_t n;
    int64_t memory_peak; /* the run's (or the device's) highest */
} cal_gpu_dev_stat;

typedef struct cal_gpu_summary {
    int state;
    uint32_t reason;      /* string id, or CAL_PROFILE_NONE */
    int64_t stopped_at;   /* ns from the start when an error stopped it, or -1 */
    int per_process_util; /* 1: the run's own figures; 0: the devices' */
    int per_process_memory;
    uint32_t fallback; /* string id: why a figure is the device's, or NONE */
    int ndevices;
    cal_gpu_dev_stat dev[CAL_PROFILE_GPUS];
    double util_sum, memory_sum; /* over the readings */
    int64_t n;
    int64_t memory_peak;
    cal_series memory; /* GPU memory over time */
} cal_gpu_summary;

typedef struct cal_thread_stat {
    uint32_t process; /* index in the profile's processes (0: this one) */
    uint64_t ident;   /* threading.get_ident() */
    int32_t tid;      /* kernel thread id */
    int is_main;
    uint32_t name;          /* string id, or CAL_PROFILE_NONE */
    cal_times t;            /* everything this thread did */
    cal_times unattributed; /* ... of which no profiled line was on the stack */
} cal_thread_stat;

/* A process of the run.  Process 0 is the one that owns the profile;
   the others are its descendants, merged in at the end (cal_merge.h). */
typedef struct cal_process {
    int64_t pid, ppid;
    uint32_t *argv; /* string ids */
    size_t argc;
    int64_t start_ns;  /* when its profiling started, from process 0's start */
    int64_t wall_ns;   /* how long it was profiled */
    uint32_t end;      /* string id: how it ended ("exit", "os._exit", "signal",
                          "exec"), or CAL_PROFILE_NONE */
    int32_t signal;    /* the signal that ended it, or 0 */
    int forked;        /* started by fork() without exec */
    int64_t inherited; /* bytes live at the fork, left out of its footprint */
    int64_t peak;      /* its highest footprint, or -1 (memory not profiled) */
} cal_process;

/* A leak found within a merged process (cal_merge.h): the line and the
   detector's figures as that process reported them. */
typedef struct cal_leak {
    uint32_t line; /* line index */
    uint32_t process;
    double likelihood, rate;
    int64_t live_end, watched, freed;
} cal_leak;

typedef struct cal_profile cal_profile;

cal_profile *cal_profile_new(void);
void cal_profile_free(cal_profile *p);

/* Intern n bytes of UTF-8; return the string id or CAL_PROFILE_NONE. */
uint32_t cal_profile_string(cal_profile *p, const char *s, size_t n);
const char *cal_profile_string_at(const cal_profile *p, uint32_t id);

/* Find or create a function; return its index or CAL_PROFILE_NONE. */
uint32_t cal_profile_function(cal_profile *p, uint32_t file, uint32_t name,
                              int32_t first_line);

/* Find or create a thread of process 0; return its index or
   CAL_PROFILE_NONE.  A new (ident, tid) pair is a new thread even when the
   ident was seen before, except that a Python thread (ident not 0) takes
   over the entry of the native thread (ident 0) with its tid, if there is
   one: a C thread that worked before it first called into Python. */
uint32_t cal_profile_thread(cal_profile *p, uint64_t ident, int32_t tid, int is_main);
/* The same in a given process. */
uint32_t cal_profile_thread_in(cal_profile *p, uint32_t process, uint64_t ident,
                               int32_t tid, int is_main);

/* The processes.  A new profile has one, process 0, zeroed but for
   end = CAL_PROFILE_NONE and peak = -1. */
size_t cal_profile_nprocesses(const cal_profile *p);
const cal_process *cal_profile_process_at(const cal_profile *p, size_t i);
cal_process *cal_profile_process_mut(cal_profile *p, size_t i);
/* Append a process; return its index or CAL_PROFILE_NONE. */
uint32_t cal_profile_process_add(cal_profile *p);
/* Set a process's argv (copied into string ids).  0, or -1. */
int cal_profile_process_set_argv(cal_profile *p, size_t i, const char *const *argv,
                                 size_t argc);

/* Credit a line's share to a process (a merged profile).  0, or -1. */
int cal_profile_line_proc_add(cal_profile *p, uint32_t line, uint32_t process,
                              int64_t ns, int64_t alloc);

/* Leaks found within merged processes. */
int cal_profile_leak_add(cal_profile *p, const cal_leak *leak);
size_t cal_profile_nleaks(const cal_profile *p);
const cal_leak *cal_profile_leak_at(const cal_profile *p, size_t i);
int cal_profile_set_thread_name(cal_profile *p, uint32_t thread, const char *name);

/* Credit `t` to a thread, and to the line (file, line) in function `func`.
   file == CAL_PROFILE_NONE means no profiled line was on the stack.
   On success return 0; on allocation failure return -1. */
int cal_profile_add_sample(cal_profile *p, uint32_t thread, uint32_t file, int32_t line,
                           uint32_t func, const cal_times *t);

/* Find or create the line (file, line); return its index or
   CAL_PROFILE_NONE.  Sets the line's function to func. */
uint32_t cal_profile_line(cal_profile *p, uint32_t file, int32_t line, uint32_t func);
/* The line (file, line) if it exists, else CAL_PROFILE_NONE. */
uint32_t cal_profile_line_find(const cal_profile *p, uint32_t file, int32_t line);
cal_line_stat *cal_profile_line_mut(cal_profile *p, uint32_t i);
cal_thread_stat *cal_profile_thread_mut(cal_profile *p, uint32_t i);
cal_func_stat *cal_profile_func_mut(cal_profile *p, uint32_t i);

/* Append (t, live) to a line's live-bytes series.  0, or -1 on allocation
   failure. */
int cal_profile_line_series_add(cal_profile *p, uint32_t i, int64_t t, int64_t live);
/* A line's live-bytes series, created empty if it has none; NULL on
   allocation failure. */
cal_series *cal_profile_line_series(cal_profile *p, uint32_t i);

/* The stack table (cal_stacks.h): the frames and the tree of stacks. */
cal_stacks *cal_profile_stacks(cal_profile *p);
const cal_stacks *cal_profile_stacks_at(const cal_profile *p);

/* The timeline of samples (cal_timeline.h): when each sample was taken and
   the stack node it credited. */
cal_timeline *cal_profile_timeline(cal_profile *p);
const cal_timeline *cal_profile_timeline_at(const cal_profile *p);

cal_memory *cal_profile_memory(cal_profile *p);
const cal_memory *cal_profile_memory_at(const cal_profile *p);
cal_gpu_summary *cal_profile_gpu(cal_profile *p);
/* The garbage collector's statistics (cal_gc.h): read = 0 until the owner
   fills them in. */
cal_gc_stats *cal_profile_gc(cal_profile *p);
const cal_gc_stats *cal_profile_gc_at(const cal_profile *p);
const cal_gpu_summary *cal_profile_gpu_at(const cal_profile *p);

/* Credit `t` to the total (inclusive) time of a function. */
void cal_profile_add_func_total(cal_profile *p, uint32_t func, const cal_times *t);

/* Wall-clock bounds of the run, set by the owner. */
void cal_profile_set_wall(cal_profile *p, int64_t wall_ns);
int64_t cal_profile_wall(const cal_profile *p);
/* How much of the wall time profiling was switched off. */
void cal_profile_set_paused(cal_profile *p, int64_t paused_ns);
int64_t cal_profile_paused(const cal_profile *p);

/* Read-only views for the writers. */
size_t cal_profile_nlines(const cal_profile *p);
const cal_line_stat *cal_profile_line_at(const cal_profile *p, size_t i);
size_t cal_profile_nfuncs(const cal_profile *p);
const cal_func_stat *cal_profile_func_at(const cal_profile *p, size_t i);
size_t cal_profile_nthreads(const cal_profile *p);
const cal_thread_stat *cal_profile_thread_at(const cal_profile *p, size_t i);

/* Helpers on cal_times. */
void cal_times_add(cal_times *dst, const cal_times *src);
int64_t cal_times_cpu(const cal_times *t); /* python + native + system */
int64_t cal_times_all(const cal_times *t); /* cpu + waiting */

/* The allocation types and lifetimes (cal_atypes.h), created empty on
   first use (NULL on allocation failure); the const one is NULL when none
   were recorded. */
cal_atypes *cal_profile_atypes(cal_profile *p);
const cal_atypes *cal_profile_atypes_at(const cal_profile *p);

#endif
