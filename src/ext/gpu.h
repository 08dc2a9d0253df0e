/*
 * gpu — the GPU poller: a background thread that reads NVML (cal_gpu.h)
 * when the CPU sampler's clock says a reading is due, and hands the latest
 * reading to the sampler, which credits it to the lines its samples find
 * running.  NVML is never called from a hook, a handler or a Python thread.
 *
 * Only the run's first process polls: its readings count the memory and
 * utilisation of every process of the run (descendants are matched by
 * their parent chain), so workers do not each load the driver.
 */
#ifndef CALX_GPU_H
#define CALX_GPU_H

#include "cal_gpu.h"
#include "cal_profile.h"

#include <stdint.h>

enum { CALX_GPU_OFF = 0, CALX_GPU_AUTO = 1, CALX_GPU_ON = 2 };

/* Start polling, or go on after calx_gpu_pause (GIL held; mode
   CALX_GPU_OFF does nothing, and so does a run whose NVML proved unusable).
   NVML is loaded by the poller thread itself, so a slow driver does not
   delay the program.  On failure to start the thread return -1 (errno). */
int calx_gpu_start(int mode, int64_t period_ns);

/* The sampler thread, after each tick: wake the poller if a reading is
   due.  Never blocks on NVML. */
void calx_gpu_tick(int64_t now);

/* Stop the poller thread (NVML stays loaded) and wait until it is gone
   from the kernel's thread count: around a fork, and at the end. */
void calx_gpu_pause(void);
/* The same in two steps (see calx_gilwatch_stop_ask): ask returns 1 if
   there is a thread to join; join (GIL not needed) waits until it is
   gone. */
int calx_gpu_pause_ask(void);
void calx_gpu_pause_join(void);
/* At the end, after the last pass: stop and unload NVML. */
void calx_gpu_close(void);

/* In a forked child: the poller is the parent's; forget it without
   touching NVML. */
void calx_gpu_after_fork_child(void);

/* In a sample pass (GIL): fold what the poller found since the last pass
   into p (state, devices, the memory timeline at its reading times, counted
   from start_wall) and return the reading for this pass's samples, or NULL
   when there is none (not sampled, not yet, or stopped). */
const cal_gpu_reading *calx_gpu_pass(cal_profile *p, int64_t start_wall);

/* The poller's kernel thread id (0 if none): not one of the program's. */
int calx_gpu_tid(void);

#endif
