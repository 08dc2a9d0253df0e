/*
 * memory — the memory engine: attaches to the preloaded shim
 * (src/shim/calipers_shim.h), installs the PyMem and arena hooks, and turns
 * the shim's samples into per-line and per-function memory statistics, the
 * footprint timeline and leak scores in the profile.  See docs/INTERNALS.md,
 * "Memory".
 *
 * Everything it writes into the profile is protected by the GIL.  The shim's
 * callbacks arrive in whichever thread allocated: with the GIL they are
 * handled at once; without it they are queued (under the engine's mutex)
 * and handled by the next thread that holds the GIL and looks (a CPU sample
 * pass, or the next sampled allocation).
 */
#ifndef CALX_MEMORY_H
#define CALX_MEMORY_H

#include <Python.h>

#include "cal_profile.h"

typedef struct calx_memory_config {
    int64_t alloc_mean; /* mean bytes between allocation samples */
    int64_t copy_mean;  /* mean bytes between copy samples */
    int64_t threshold;  /* footprint change between timeline events */
} calx_memory_config;

/* Is the shim loaded into this process? */
int calx_memory_available(void);

/* Attach to the shim and install the hooks; the profile must exist (the
   CPU sampler started).  Caller holds the GIL.  Returns 0, or -1 with an
   exception set. */
int calx_memory_start(const calx_memory_config *config, cal_profile *profile);

/* Detach, remove the hooks (if nobody wrapped them since), handle what is
   queued, and write the program's totals into the profile.  GIL held. */
void calx_memory_stop(void);

/* Write the program's totals so far into the profile (as stop does at the
   end), for a profile written while the program runs.  GIL held. */
void calx_memory_snapshot(void);

/* A CPU sample pass is starting (GIL held): handle queued events, add a
   footprint point.  Returns the footprint now, or -1 without memory
   profiling. */
int64_t calx_memory_pass(void);

/* The process forked (pthread_atfork): the child stops sampling; the
   allocator hooks stay installed and keep counting. */
void calx_memory_after_fork_child(void);

/* In a forked child that profiles afresh (GIL held): sample into
   `profile`, with the footprint measured from what the child inherited
   (calx_memory_inherited) and the peak from now.  Returns 0, or -1 with an
   exception set. */
int calx_memory_restart_in_child(cal_profile *profile);

/* Bytes live at the fork that the footprint leaves out (0 but in a
   restarted child). */
int64_t calx_memory_inherited(void);

/* ---- traces (calipers.memory, snapshots; GIL held) ------------------------
 * The sampled allocations still alive, each with the stack table's node of
 * the stack that made it.  A mark (calipers.memory.start, clear_traces)
 * begins a tracing epoch: since_mark asks for the allocations made since;
 * it also restarts the traced footprint and its peak. */

typedef struct calx_live_sample {
    uint32_t node;  /* stack table node, or CAL_STACKS_NONE */
    int python;     /* made by Python's allocator */
    int64_t weight; /* bytes it stands for */
    int64_t size;   /* bytes of the block (> 0) */
} calx_live_sample;

/* Is memory being sampled in this process? */
int calx_memory_attached(void);
/* The mean bytes between allocation samples (1: every allocation), 0 when
   not attached. */
int64_t calx_memory_alloc_mean(void);
void calx_memory_mark(void);
/* The footprint since the mark and its peak since the mark or the last
   reset_peak, exact (from the shim's counters), >= 0. */
void calx_memory_traced(int64_t *current, int64_t *peak);
void calx_memory_reset_peak(void);

/* One profiled line's sampled bytes allocated since the mark: `file` is
   the profile's string id of its path (cal_profile_string_at). */
typedef struct calx_window_line {
    uint32_t file;
    int32_t line;
    int64_t bytes;
} calx_window_line;

/* What was allocated since the mark (calx_memory_mark): *allocated, the
   bytes allocated in all (exact, from the shim's counters, freed or not),
   and *out, an array of *n lines with the sampled bytes each allocated
   (unbiased estimates; the innermost profiled line of each sample's
   stack; in no order), to be freed with calx_memory_window_free.  Not
   attached: 0 and nothing.  0, or -1 with an exception set. */
int calx_memory_window(int64_t *allocated, calx_window_line **out, size_t *n);
void calx_memory_window_free(calx_window_line *lines);
/* The live samples, into an array *out of *n (calx_memory_live_free it:
   it is the profiler's memory, not the program's).  0, or -1 with an
   exception set. */
int calx_memory_live(int since_mark, calx_live_sample **out, size_t *n);
void calx_memory_live_free(calx_live_sample *live);
/* Is `ptr` the start of a live sampled block?  1 and *out, or 0. */
int calx_memory_lookup(const void *ptr, int since_mark, calx_live_sample *out);
/* While on, this thread's allocations are not sampled (still counted):
   what calipers builds for a snapshot is not traced.  Returns the
   previous state. */
int calx_memory_set_unsampled(int on);
/* How many sampled allocations are alive (tracked). */
size_t calx_memory_tracked(void);

/* Without preload (the shim loaded by calx_runtime_shim_load): how many
   loaded objects the last start redirected to the shim (-1: none could
   be), with *failed naming those that could not be ("" if none); -2 when
   the shim is preloaded.  With the GIL held. */
int calx_memory_redirected(const char **failed);

#endif
