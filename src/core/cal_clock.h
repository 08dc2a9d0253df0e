/*
 * cal_clock — wall and per-thread CPU clocks, in nanoseconds.
 *
 * Linux encodes a thread's CPU clock id as (~tid << 3) | 4 | which, where
 * which is 0 (user+system, "PROF"), 1 (user, "VIRT") or 2 (scheduler run time,
 * "SCHED").  glibc's pthread_getcpuclockid() only hands out SCHED; we derive
 * the other two from it so one thread's user/system split costs three
 * clock_gettime() calls and no /proc parsing.
 *
 * Safety: every function here is async-signal-safe and allocation-free.
 */
#ifndef CAL_CLOCK_H
#define CAL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t cal_clock_now_ns(void);

/* CPU times of one thread, cumulative since the thread started. */
typedef struct cal_thread_times {
    int64_t cpu_ns;    /* precise scheduler run time (user + system) */
    int64_t system_ns; /* kernel time, at the kernel's accounting granularity */
} cal_thread_times;

/* The clock id base of the thread whose SCHED clock id is sched_clock
   (as returned by pthread_getcpuclockid). */
clockid_t cal_clock_thread_base(clockid_t sched_clock);

/* The clock base of the thread with kernel thread id `tid` (of this
   process): lets us read threads that pthread does not know, such as
   those a native library created with clone(). */
clockid_t cal_clock_thread_base_for_tid(int tid);

/* The kernel thread id encoded in a thread clock base. */
int cal_clock_thread_tid(clockid_t base);

/* Read the CPU times of the thread with clock base `base`.
   On success return 0; return -1 if the thread no longer exists. */
int cal_clock_thread_times_sigsafe(clockid_t base, cal_thread_times *out);

/* Only the precise total: cheaper when the split is not needed.
   Returns -1 if the thread no longer exists, else the run time in ns. */
int64_t cal_clock_thread_cpu_sigsafe(clockid_t base);

/* The calling thread's CPU time in ns (0 if it cannot be read). */
int64_t cal_clock_own_cpu_ns(void);

/* Wait, at most 50 ms, until the thread with kernel id `tid` has left the
   process; 0 once it has (or for tid <= 0, unknown), -1 at the limit.  pthread_join()
   returns when the kernel clears the thread's id, a moment before the kernel stops
   counting the thread (the count /proc/self/stat shows, which Python 3.12+
   reads to warn about forking with threads); the thread's CPU clock stops
   resolving at the same point as that count drops. */
int cal_clock_wait_thread_gone(int tid);

/* How long the thread `tid` (of this process) has been runnable but not
   running, in ns: the run-queue delay the scheduler accounts for it
   (/proc/self/task/TID/schedstat's second field).  -1 if it cannot be
   read (the thread is gone, or the kernel keeps no such figure).
   Async-signal-safe; opens and closes a file (never keeps one). */
int64_t cal_clock_thread_run_delay(int tid);

/* Whether the thread `tid` (of this process) is runnable: running, or
   waiting for a CPU (state R in /proc/self/task/TID/stat), as opposed to
   sleeping, blocked or stopped.  1 or 0; -1 if it cannot be read.
   Async-signal-safe; opens and closes a file. */
int cal_clock_thread_runnable(int tid);

/* Whether the thread `tid` (of this process) is blocked in a futex wait
   (a lock, a condition variable) right now, and on which word: 1 and
   *addr set; 0 if it runs or is in another system call or none; -1 if
   it cannot be read (/proc/self/task/TID/syscall).  Async-signal-safe;
   opens and closes a file. */
int cal_clock_thread_futex_wait(int tid, uintptr_t *addr);

#endif
