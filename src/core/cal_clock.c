/*
 * cal_clock — see cal_clock.h.  The encoding of per-thread CPU clock ids is
 * the kernel's (include/linux/posix-timers.h: CPUCLOCK_PERTHREAD_MASK = 4,
 * CPUCLOCK_PROF = 0, CPUCLOCK_VIRT = 1, CPUCLOCK_SCHED = 2,
 * CPUCLOCK_CLOCK_MASK = 3, the thread id negated above bit 3) and is ABI.
 */
#define _GNU_SOURCE
#include "cal_clock.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { CLOCK_PROF_ = 0, CLOCK_VIRT_ = 1, CLOCK_SCHED_ = 2, CLOCK_PERTHREAD_ = 4 };

static int64_t to_ns(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

int64_t cal_clock_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return to_ns(&ts);
}

clockid_t cal_clock_thread_base(clockid_t sched_clock)
{
    return (clockid_t)((sched_clock & ~7) | CLOCK_PERTHREAD_);
}

clockid_t cal_clock_thread_base_for_tid(int tid)
{
    return (clockid_t)((~(unsigned)tid << 3) | CLOCK_PERTHREAD_);
}

int cal_clock_thread_tid(clockid_t base) { return (int)~(base >> 3); }

int64_t cal_clock_thread_cpu_sigsafe(clockid_t base)
{
    int saved = errno;
    struct timespec ts;
    int rc = clock_gettime(base | CLOCK_SCHED_, &ts);
    errno = saved;
    return rc == 0 ? to_ns(&ts) : -1;
}

int64_t cal_clock_own_cpu_ns(void)
{
    struct timespec ts;
    return clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0 ? to_ns(&ts) : 0;
}

int cal_clock_thread_times_sigsafe(clockid_t base, cal_thread_times *out)
{
    int saved = errno;
    struct timespec sched, user, prof;
    int rc = clock_gettime(base | CLOCK_SCHED_, &sched);
    if (rc == 0)
        rc = clock_gettime(base | CLOCK_VIRT_, &user);
    if (rc == 0)
        rc = clock_gettime(base | CLOCK_PROF_, &prof);
    errno = saved;
    if (rc != 0)
        return -1;
    out->cpu_ns = to_ns(&sched);
    /* PROF and VIRT are sampled at the same tick granularity, so their
       difference is the kernel's own estimate of system time. */
    int64_t sys = to_ns(&prof) - to_ns(&user);
    out->system_ns = sys < 0 ? 0 : sys;
    return 0;
}

int cal_clock_wait_thread_gone(int tid)
{
    if (tid <= 0) /* unknown; and 0 would name the calling thread */
        return 0;
    clockid_t base = cal_clock_thread_base_for_tid(tid);
    int64_t deadline = cal_clock_now_ns() + 50000000;
    while (cal_clock_thread_cpu_sigsafe(base) >= 0) {
        if (cal_clock_now_ns() >= deadline)
            return -1;
        struct timespec gap = {0, 20000};
        nanosleep(&gap, NULL);
    }
    return 0;
}

/* Reads /proc/self/task/TID/NAME (the id written by hand: no snprintf
   here) into buf, NUL-terminated.  Returns the bytes read, or -1. */
static ssize_t read_task_file(int tid, const char *name, char *buf, size_t size)
{
    if (tid <= 0)
        return -1;
    char path[48] = "/proc/self/task/", digits[12];
    size_t at = 16, n = 0;
    for (unsigned v = (unsigned)tid; v; v /= 10)
        digits[n++] = (char)('0' + v % 10);
    while (n)
        path[at++] = digits[--n];
    path[at++] = '/';
    for (size_t i = 0; name[i] && at < sizeof path - 1; i++)
        path[at++] = name[i];
    path[at] = '\0';
    int saved = errno;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, buf, size - 1) : -1;
    if (fd >= 0)
        close(fd);
    errno = saved;
    if (got <= 0)
        return -1;
    buf[got] = '\0';
    return got;
}

int cal_clock_thread_runnable(int tid)
{
    /* "TID (comm) STATE ...": the command (15 bytes at most) may hold
       spaces and parentheses, so the state follows the last ')'; what comes
       after it is numbers. */
    char buf[64];
    if (read_task_file(tid, "stat", buf, sizeof buf) < 0)
        return -1;
    const char *close_paren = strrchr(buf, ')');
    if (!close_paren || close_paren[1] != ' ')
        return -1;
    return close_paren[2] == 'R';
}

int cal_clock_thread_futex_wait(int tid, uintptr_t *addr)
{
    /* "NR ARG1 ... ARG6 SP PC", the arguments in hex; "-1 SP PC" outside a
       system call, "running" on a CPU. */
    char buf[192];
    if (read_task_file(tid, "syscall", buf, sizeof buf) < 0)
        return -1;
    const char *c = buf;
    long nr = 0;
    if (*c < '0' || *c > '9')
        return 0;
    for (; *c >= '0' && *c <= '9'; c++)
        nr = nr * 10 + (*c - '0');
    if (nr != SYS_futex || c[0] != ' ' || c[1] != '0' || c[2] != 'x')
        return 0;
    uintptr_t v = 0;
    for (c += 3;; c++) {
        int d = *c >= '0' && *c <= '9'   ? *c - '0'
                : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10
                                         : -1;
        if (d < 0)
            break;
        v = v << 4 | (uintptr_t)d;
    }
    *addr = v;
    return 1;
}

int64_t cal_clock_thread_run_delay(int tid)
{
    char buf[96];
    if (read_task_file(tid, "schedstat", buf, sizeof buf) < 0)
        return -1;
    /* "<run time ns> <run-queue delay ns> <timeslices>\n" */
    const char *c = buf;
    while (*c >= '0' && *c <= '9')
        c++;
    if (*c != ' ')
        return -1;
    c++;
    if (*c < '0' || *c > '9')
        return -1;
    int64_t delay = 0;
    for (; *c >= '0' && *c <= '9'; c++)
        delay = delay * 10 + (*c - '0');
    return delay;
}
