/*
 * sampler — see sampler.h.
 *
 * HOW IT WORKS
 *
 * A native thread (not a Python thread, all signals blocked) wakes at
 * exponentially distributed intervals of mean q, so the ticks form a Poisson
 * process that cannot alias with the program's loops.  At each tick it queues
 * a call with Py_AddPendingCall(), sets the eval breaker (pyinternals.c), then
 * stamps the time and the main thread's CPU clock, and waits up to
 * TAKEOVER_NS for the main thread to run the call.
 *
 * The main thread runs the call at its next bytecode boundary: within
 * microseconds if it was executing bytecode, only when the function returns
 * if it was inside C.  The seed paper's insight, without a signal: the main
 * thread was in native code at the tick if it needed more than SERVICE_NS
 * of its own CPU time to answer (CPU time, so that being preempted or
 * waiting for the GIL does not count), or (with a GIL) if it answers from
 * inside the call instruction the tick's peek found it at (a C call of a
 * few microseconds: still_in_call).  The call samples every thread while
 * holding the GIL; the main thread where the tick found it: the tick peeks
 * at its innermost frames (pyinternals.c), since from 3.10 on a call queued
 * during a native operator (a @ b) is served only at the next call, on
 * another line.
 *
 * If the main thread does not answer in time it is blocked (sleep, join,
 * I/O), in native code without the GIL, waiting for the GIL, or in native
 * code holding the GIL.  In the first two cases the other threads are
 * sampled without it: by the thread that holds the GIL, asked with a call
 * any thread may run (3.12+), or by the sampler thread, which takes the
 * GIL itself (nobody holds it, or no such call exists); the main thread's
 * interval is accounted when it finally runs the call, to the line it was
 * blocked on.  In the last two (the main thread is blocked on a futex word
 * inside the GIL's state, or holds the GIL) it will answer as soon as it
 * can, and asking for the GIL would only stall the ticks: this thread
 * would queue behind the threads running bytecode, which the GIL does not
 * serve in order, for tens to hundreds of milliseconds (two threads
 * running Python lost a third of a second of ticks at a time on 3.9-3.13,
 * and every sample of a 0.1 s function with them).  It waits for the next
 * tick.
 *
 * The ticks keep their own timeline: each is drawn from the previous tick,
 * not from the service, and ticks go on while a call waits (they poke
 * again).  The main thread's interval ends at the last tick before its
 * service (E.cut: the time and its CPU clocks, read by the sampler thread),
 * so its interval boundaries are tick times, like everyone's; ending them at
 * a delayed service instead would move every caught native-to-Python
 * transition onto a boundary and credit native with the Python time before
 * each native call.
 *
 * A sample of a thread credits the time since that thread's previous sample:
 *   cpu     = delta of its scheduler CPU clock (exact)
 *   system  = delta of the kernel's system-time accounting (tick granular;
 *             carried over so that it never exceeds cpu and sums correctly)
 *   waiting = wall delta - cpu (off-CPU: sleeping, blocked, waiting for GIL)
 *   user    = cpu - system, split into Python and native:
 *     main thread: all native or all Python, by the delay test above;
 *     others: in the proportion gilwatch.c watched since the previous sample
 *     (CPU used while holding the GIL is Python, without it native);
 * to the innermost line of profiled code on the thread's stack, and the
 * inclusive time to every profiled function on it.  Where the kernel
 * allows, a thread other than the main one keeps only its waiting at a
 * pass: its CPU goes to its own ticks (WORKER TICKS, below).  Labelling each interval
 * by the state observed at its end is an unbiased estimator of the time
 * spent in each state because the ticks are independent of the program
 * (PASTA); the per-thread totals are exact.
 *
 * WORKER TICKS
 *
 * With a GIL, passes come when the GIL changes hands, and find the other
 * threads where they wait for it: where they let it go (a backward jump
 * or a call, after their switch interval), which is not where their CPU
 * went (a json.loads that never lets it go).  So threads other than the
 * main one sample themselves on a timer of their own CPU clock
 * (cputicks.h): a pass credits their waiting and holds their CPU
 * (held_cpu), and the ticks take it (take_ticks), each the CPU since the
 * one before, where it found the thread: moments drawn from the thread's
 * CPU time alone, the same unbiased estimator as wall-clock ticks, in CPU
 * time.  Each tick is labelled by the thread's state then: without the
 * GIL native; holding it bytecode, unless it ran C since gilwatch's last
 * probe (3.13+) or was collecting.  Where ticks cannot run (an older
 * kernel, no free signal, a thread that blocks it), gilwatch's split and
 * the passes' places stand.
 *
 * OFF-CPU SAMPLES (the free-threaded build, its GIL off)
 *
 * With no GIL the passes are independent of the other threads, and read
 * them wherever they are, running or not.  A thread that is runnable but
 * preempted sits where the scheduler stopped it, and that is not a place
 * drawn at random from its CPU time: the kernel (EEVDF, Linux 6.6+)
 * checks a thread's slice whenever its clock is updated, so a thread
 * that reads its own CPU clock (time.thread_time(), a system call) is
 * preempted right there far more often than anywhere else.  Four threads
 * on two cores running `while thread_time() < t: for ...: total += i`
 * had half their CPU on the `while` line, which runs 1% of it.  So a
 * pass reads each thread's CPU clock before and after walking its stack:
 * if it stood still, the thread was off every CPU, and its sample keeps
 * only the waiting (it was there, waiting, which wall-clock sampling
 * estimates without bias); the CPU of the interval is held (held_cpu).
 * Where the kernel allows, threads other than the main one tick (WORKER
 * TICKS, above), and every pass holds their CPU for the ticks.  Elsewhere
 * the held CPU goes to the next pass that
 * finds the thread on a CPU (or after HOLD_PASSES that do not); on a
 * loaded machine few do, and those mostly just after it was put back on
 * a CPU, where it had been preempted, so the bias comes back in part.
 * What is still held when a thread ends goes with its last stretch
 * (credit_tail), and the final pass credits everything.  With the GIL
 * switched on at run time (an extension module that does not declare it
 * runs without it), passes hold the GIL again, everyone else waits for it
 * off a CPU, and the rules of a build with a GIL and no ticks apply
 * (E.gil_free).
 *
 * LIMITATIONS
 *   - A worker thread in native code that keeps the GIL counts as Python
 *     on 3.14t with its GIL off, and before 3.13 (no per-thread eval
 *     breaker to probe) when no other thread has asked it for the GIL
 *     (calx_gil_drop_asked_sigsafe) and its tick interrupts the interpreter's
 *     own code: the builtins (sorted() of a big list), and the half of a
 *     library's time spent in the interpreter's API (json's scanner
 *     building objects); a tick in a library's own code is native
 *     (calx_peek_in_c_call).  The main thread's rules do tell these apart.
 *   - A worker's CPU is a sample of its ticks: one per interval of its
 *     CPU (10 ms by default, at the kernel's tick, 4 ms here), so a line's
 *     share of a short-lived worker is as noisy as that few samples make
 *     it (30 ticks: +-16% on a line with a third of the time).
 *   - In threads other than the main one, a line that blocks right after
 *     busy code inherits the CPU used since the previous sample (one
 *     interval on average), and the line after the block its waiting after
 *     the last sample in it.  The main thread answers late when blocked: a
 *     tick that finds it off the CPU since the tick that asked (or a late
 *     answer with no CPU used since) marks the cut blocked, its interval
 *     then ends at the answer, and the CPU used before the asking tick goes
 *     to where a sample last found it.  A block that ends between two
 *     ticks and is followed by C work is not seen as one.
 *   - In the main thread, a native call's last microseconds (from the
 *     tick's peek to the queued call: 0.5-3 us here) count as Python, and
 *     so does native work shorter than SERVICE_NS that is not a call
 *     (an operator: a @ b on small arrays), which is answered elsewhere.
 *     On the free-threaded build, native calls shorter than SERVICE_NS
 *     count as Python.
 *   - The main thread's peek reads its frames while it runs on another
 *     CPU; a read that sees them change (a generator found suspended,
 *     the innermost frame moved three times) is given up, and the sample
 *     goes where the thread answers, at an eval-breaker check: a tight
 *     loop's `for` line loses to its body.  How often depends on whether
 *     the scheduler put the sampler thread on the main thread's CPU (a
 *     2 us function's `for` line read 0.06-0.26 of it unpinned, 0.16-0.21
 *     on one CPU, py-spy 0.18-0.21; INTERNALS, "Frames that change
 *     faster than a read").
 *   - Without ticks, a thread found outside Python (a C thread between its
 *     calls into it) has the Python it ran since its previous sample
 *     credited to where a sample last found it in Python: right for a
 *     thread calling the same callback, a guess for one calling several.
 */
#include "sampler.h" /* Python.h first: it defines _GNU_SOURCE */

#include "cal_clock.h"
#include "cal_rand.h"
#include "cputicks.h"
#include "gcstats.h"
#include "gilwatch.h"
#include "gpu.h"
#include "memory.h"
#include "nogil.h"
#include "pyinternals.h"
#include "runtime.h"
#include "session.h"
#include "signals.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SERVICE_NS 50000       /* a service needing more main-thread CPU is "delayed" */
#define TAKEOVER_NS 1000000    /* how long to wait for the main thread */
#define PROBE_NS 30000         /* 3.14t: when to see if it looked meanwhile */
#define PROBES_AGAIN 3         /* 3.14t: looks again while it has not run */
#define MIN_WATCHED_NS 2000000 /* CPU watched before a thread's split is updated */
#define GPU_PERIOD_NS 50000000 /* at most one NVML reading per 50 ms */
#define HOLD_PASSES 8          /* off-CPU samples in a row that may hold CPU */
#define TICKLESS_NS 200000000  /* CPU a thread may use before its first tick */
/* Where still_in_call can tell a call from one revisited (its comment). */
#if !defined(Py_GIL_DISABLED)
#define STILL_RULE 1
#else
#define STILL_RULE 0
#endif

#define PLACE_FUNCS 64

/* A line to credit, and the profiled functions around it (innermost
   first; deeper stacks keep their innermost PLACE_FUNCS). */
typedef struct place {
    uint32_t file, func;
    int32_t line;
    uint32_t node;       /* in the stack table */
    int folded;          /* ... which was full: the stack stops short */
    double native_share; /* of the user time credited there by the sample */
    size_t nfuncs;
    uint32_t funcs[PLACE_FUNCS];
} place;

typedef struct calx_thread {
    unsigned long ident;
    clockid_t clock; /* per-thread clock base */
    uint32_t stat;   /* thread index in the profile */
    int is_main;
    int seen;
    int name_tries;
    double native_share; /* of its CPU, last seen by gilwatch */
    double gc_share;     /* ... and the garbage collector's share of it */
    const void *ts;      /* its latest thread state (gilwatch's fallback, if
                            the holder's thread id cannot be read) */
    int64_t last_wall, last_cpu, last_sys;
    int64_t sys_carry;
    int64_t last_delay;         /* its run-queue delay (cal_clock_thread_run_delay)
                                   credited up to, or -1: none could be read */
    int64_t unsplit;            /* of the waiting credited at left since the
                                   place changed, what is not preempted so far */
    place left;                 /* where a sample last found it in Python (file NONE:
                                   in no profiled code) */
    int left_set;               /* a sample has found it in Python */
    cal_times unplaced;         /* Python it ran before any sample found it in
                                   Python: for the first place one does */
    int64_t held_cpu, held_sys; /* free-threaded build: CPU read at samples
                                   that found it off a CPU, for the next
                                   sample that finds it on one (credit) */
    int held_passes;            /* ... and how many samples in a row did */
    int tick_slot;              /* free-threaded build: its CPU-time ticks
                                   (cputicks.h), or -1 */
    int64_t ticks_taken;        /* ... how many so far */
    int tickless;               /* ... none came (it blocks their signal), or
                                   it could not be armed */
} calx_thread;

/* A thread of the process that is not a Python thread (BLAS, OpenMP or
   other native workers): its CPU is native work done on behalf of the
   program, credited to where the main thread is. */
typedef struct native_thread {
    int tid;
    clockid_t clock;
    uint32_t stat;
    int seen;
    int64_t last_cpu, last_sys, sys_carry; /* credited up to */
    int fresh;                             /* seen once, born since profiling started */
    cal_thread_times first;                /* its clocks then */
} native_thread;

/* Per-pass scratch entry: one thread's clocks and where it is. */
typedef struct pass_entry {
    size_t ti; /* index in E.threads (which may move while a pass adds) */
    cal_thread_times times;
    uint32_t file, func;
    int32_t line;
    uint32_t node;                 /* its stack, in the stack table */
    int folded;                    /* ... cut short: the table was full */
    size_t funcs_at, nfuncs;       /* its functions in E.pass_funcs */
    int loop_idle;                 /* in an asyncio event loop, between callbacks */
    int frameless;                 /* outside Python: no frame at all */
    const cal_thread_times *asked; /* the main thread, blocked since the
                                      tick that asked: its clocks then */
    int attached;                  /* free-threaded build: its thread state was attached
                                      at the pass (1), detached (0), or neither (-1) */
    int off_cpu;                   /* free-threaded build, not the main thread: its CPU
                                      clock stood still while it was read (it was
                                      preempted or blocked): its CPU waits (credit) */
    int ticked;                    /* ... or it ticks (cputicks.h): its CPU always
                                      waits, for its ticks */
    double gc_share;               /* of its CPU since its previous sample, the
                                      garbage collector's (gcstats.h) */
    int64_t delay;                 /* its run-queue delay at the end of its interval
                                      (DELAY_UNREAD: not read there; DELAY_AT_CREDIT:
                                      the interval ends at the pass, read then) */
} pass_entry;

/* Waiting seen in an idle asyncio event loop, to credit to the lines its
   tasks are awaiting (credit_awaiting, after a pass).  Asking the loop for
   its tasks costs time in proportion to all its tasks (a millisecond for
   ten thousand), so the waiting is gathered over passes and handed out
   only once it is AWAIT_FACTOR times what the last asking cost: at most
   1/AWAIT_FACTOR of the time the loop waited, which is time the program
   did not use, and once per pass for a loop with few tasks.  The tasks
   are then those awaiting at that moment: the loop's waiting over the
   gathering is split by a sample taken at a time independent of where it
   falls, so each line's expected share stays its share of the waiting. */
typedef struct awaiting_stash {
    uint32_t stat;
    unsigned long ident;
    int64_t waiting_ns;  /* gathered, not credited yet */
    uint32_t file, func; /* where it goes if no task is awaiting: where */
    int32_t line;        /* the loop last waited */
    uint32_t node;       /* the loop's stack then: its tasks' stacks hang here */
    int64_t cost_ns;     /* of the last asking (this thread's CPU time) */
    int64_t seen_wall;   /* when the loop was last found idle */
} awaiting_stash;

#define MAX_LOOPS 16                /* idle loops tracked; more keep their waiting */
#define AWAIT_FACTOR 20             /* waiting gathered per unit of asking cost */
#define LOOP_FORGET_NS 5000000000LL /* a loop not idle for this long is dropped */

enum pass_kind { PASS_MAIN, PASS_SAMPLER, PASS_FINAL };

/* Where the main thread's sampled interval ends: the time, its CPU clocks
   and its innermost frames at a tick (wall 0: at the pass itself); and
   whether a tick found it off the CPU since the tick that asked (blocked),
   with its clocks at that tick. */
typedef struct main_cut {
    int64_t wall;
    cal_thread_times times;
    calx_peek peek;
    int64_t peek_cpu; /* its CPU clock just before the peek (-1: unread) */
    int running;      /* on a CPU at the tick */
    int looked;       /* it looked at its eval breaker from the
                         peek to the poke (1), or not (0); -1: unknown */
    int blocked;
    cal_thread_times asked;
    calx_gc_tick gc; /* what it saw of the collector in the main thread */
    int64_t delay;   /* its run-queue delay with its clocks (DELAY_UNREAD) */
} main_cut;

typedef struct listed_state {
    const PyThreadState *ts;
    unsigned long ident;
} listed_state;

typedef struct engine {
    /* Protected by the GIL; on the free-threaded build by the engine lock
       (nogil.h), which every pass holds. */
    calx_thread *threads;
    size_t nthreads, cap;
    pass_entry *pass;
    size_t pass_cap;
    calx_frame frames[CALX_FRAMES_MAX];
    uint32_t *pass_funcs;
    size_t pass_nfuncs, pass_funcs_cap;
    PyObject *threading_active; /* threading._active, for thread names */
    int threads_changed;        /* the registry changed since gilwatch was told */
    native_thread *natives;
    size_t nnatives, natives_cap;
    int64_t native_scans; /* scans of /proc/self/task so far */
    int sampler_tid;      /* our own threads, never counted */
    PyObject *awaiting;   /* awaiting(ident) -> coroutine chains, or NULL */
    awaiting_stash loops[MAX_LOOPS];
    size_t nloops;
    int in_pass;          /* a pass is running (it may call Python) */
    int gil_free;         /* the current pass: the free-threaded build, its GIL off
                             (an import can switch it on: calx_gil_enabled) */
    listed_state *listed; /* the thread states, for take_ticks (list_states) */
    size_t nlisted, listed_cap;
    int64_t dropped;
    int64_t torn; /* free-threaded: samples whose stack changed under the read */
    int ticks_on; /* threads other than the main one tick (cputicks.h) */

    /* Set at start, read-only afterwards. */
    PyInterpreterState *interp;
    const PyThreadState *main_ts;
    unsigned long main_ident;
    clockid_t main_clock;
    int64_t interval_ns;
    int gpu_mode; /* CALX_GPU_*: only the run's first process polls */
    pid_t pid;
    pthread_t thread;
    int thread_started;
    int paused_for_fork; /* the sampler's threads are stopped for forks (F) */

    /* Periodic writes and requests (set before the thread starts, or with
       the GIL; read by the sampler thread). */
    PyObject *periodic; /* callback(reason), or NULL */
    struct periodic_job {
        int64_t ns;         /* 0: only on request */
        char *request_path; /* a file whose existence is a request, or NULL */
        int64_t next, next_check;
    } jobs[CALX_PERIODIC_JOBS];

    /* The handshake. */
    atomic_int active; /* profiling in this process */
    atomic_int stopping;
    atomic_int leaving;          /* with stopping: the process is ending, the
                                    thread ends without touching the GIL */
    atomic_uint generation;      /* of the sampler thread: one left running by
                                    a leaving stop ends if another starts */
    atomic_int call_queued;      /* a pending call is queued, not yet run */
    atomic_int answering;        /* ... and the main thread has begun to run it */
    int64_t tick_main_cpu;       /* E.mu: the main thread's CPU clock at the
                                    tick that queued the call (-1: unread) */
    int64_t tick_wall;           /* E.mu: and when */
    cal_thread_times tick_times; /* E.mu: and its clocks */
    main_cut cut;                /* E.mu: the latest tick while it was queued */
    int main_looked;             /* E.mu: 3.14t: it looked at its eval breaker
                                    since and did not answer (the probe) */
    int main_asleep;             /* E.mu: found blocked (not runnable) when its
                                    answer was TAKEOVER_NS late */
    int64_t delay;               /* E.mu: its run-queue delay as a tick last
                                    read it (DELAY_UNREAD) */
    int64_t delay_cpu;           /* E.mu: and its CPU clock then */
    int64_t delay_wall;          /* E.mu: and when */
    atomic_ullong served;        /* count of serviced calls */
    atomic_ullong others_asked;  /* calls any thread may run (ask_holder) */
    atomic_ullong others_served; /* and how many of them ran */
    unsigned long sampler_ident; /* GIL: the sampler thread's pthread id
                                    while its thread state exists */
    int sampler_ready;           /* E.mu: it has its thread state and ticks */

    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled on service, on stop and when ready */
} engine;

static engine E = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- thread registry (GIL) -------------------------------------------- */

/* Make room for one more element in the array *v of *cap elements holding
   len.  Returns 0, or -1 if memory ran out (the array is unchanged). */
static int grow_one(void **v, size_t *cap, size_t len, size_t elem)
{
    if (len < *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 16;
    void *p = realloc(*v, n * elem);
    if (!p)
        return -1;
    *v = p;
    *cap = n;
    return 0;
}

static calx_thread *registry_find(unsigned long ident)
{
    for (size_t i = 0; i < E.nthreads; i++)
        if (E.threads[i].ident == ident)
            return &E.threads[i];
    return NULL;
}

static native_thread *native_find(int tid)
{
    for (size_t i = 0; i < E.nnatives; i++)
        if (E.natives[i].tid == tid)
            return &E.natives[i];
    return NULL;
}

static calx_thread *registry_add(unsigned long ident, clockid_t clock, int baseline_now)
{
    cal_profile *p = calx_session_profile();
    if (grow_one((void **)&E.threads, &E.cap, E.nthreads, sizeof(*E.threads)) != 0)
        return NULL;
    int is_main = ident == E.main_ident;
    uint32_t stat = cal_profile_thread(p, ident, cal_clock_thread_tid(clock), is_main);
    if (stat == CAL_PROFILE_NONE)
        return NULL;
    calx_thread *th = &E.threads[E.nthreads++];
    memset(th, 0, sizeof(*th));
    E.threads_changed = 1;
    th->ident = ident;
    th->clock = clock;
    th->stat = stat;
    th->is_main = is_main;
    th->tick_slot = -1;
    th->left.file = CAL_PROFILE_NONE;
    th->left.node = cal_stacks_root(cal_profile_stacks(p), stat);
    cal_thread_times now = {0, 0};
    int64_t wall = cal_clock_now_ns();
    if (baseline_now) {
        /* A thread that existed before profiling started: count from now. */
        cal_clock_thread_times_sigsafe(clock, &now);
        th->last_wall = wall;
    } else {
        /* A new thread: count its whole life, or what the native-thread
           scan has not credited of it (a C thread that ran before its
           first call into Python); we do not know how long it waited
           before, so assume it did not. */
        const native_thread *nt = native_find(cal_clock_thread_tid(clock));
        if (nt && nt->fresh) {
            /* Seen once by the scan, outside Python: what it ran until
               then is native work (to nowhere: the main thread's place is
               not known here). */
            cal_times t = {0};
            t.system_ns = nt->first.system_ns < nt->first.cpu_ns ? nt->first.system_ns
                                                                 : nt->first.cpu_ns;
            t.native_ns = nt->first.cpu_ns - t.system_ns;
            if (!calx_session_paused()) {
                if (cal_profile_add_sample(p, stat, CAL_PROFILE_NONE, 0,
                                           CAL_PROFILE_NONE, &t) != 0)
                    E.dropped++;
                else
                    calx_session_stack_times(th->left.node, &t, 0);
            }
            now = nt->first;
        } else if (nt) {
            now.cpu_ns = nt->last_cpu;
            now.system_ns = nt->last_sys;
            th->sys_carry = nt->sys_carry;
        }
        int64_t cpu = cal_clock_thread_cpu_sigsafe(clock) - now.cpu_ns;
        th->last_wall = wall - (cpu > 0 ? cpu : 0);
    }
    th->last_cpu = now.cpu_ns;
    th->last_sys = now.system_ns;
    th->last_delay = cal_clock_thread_run_delay(cal_clock_thread_tid(clock));
    if (is_main)
        cal_profile_set_thread_name(p, stat, "MainThread");
    return th;
}

static void registry_sweep(void)
{
    size_t k = 0;
    for (size_t i = 0; i < E.nthreads; i++) {
        if (E.threads[i].seen || E.threads[i].is_main)
            E.threads[k++] = E.threads[i];
        else
            calx_cputicks_disarm(E.threads[i].tick_slot);
    }
    if (k != E.nthreads)
        E.threads_changed = 1;
    E.nthreads = k;
}

/* Look up (or register) the thread behind `ts` and read its clocks. */
static calx_thread *thread_for(PyThreadState *ts, cal_thread_times *times)
{
    unsigned long ident = (unsigned long)ts->thread_id;
    calx_thread *th = registry_find(ident);
    if (th && cal_clock_thread_times_sigsafe(th->clock, times) == 0)
        return th;
    /* Unknown, or the ident now belongs to a new thread. */
    clockid_t sched;
    if (pthread_getcpuclockid((pthread_t)ident, &sched) != 0)
        return NULL;
    clockid_t clock = cal_clock_thread_base(sched);
    if (th) {
        th->ident = 0; /* retire the old entry; swept later */
        th->seen = 0;
        th->is_main = 0;
    }
    th = registry_add(ident, clock, 0);
    if (!th || cal_clock_thread_times_sigsafe(th->clock, times) != 0)
        return NULL;
    return th;
}

/* Best effort: the name of a thread from threading._active.  Runs no Python
   code for plain Thread objects (a dict lookup and an instance attribute). */
static void resolve_name(calx_thread *th)
{
    if (th->is_main || th->name_tries >= 20)
        return;
    if (!E.threading_active) {
        /* Only once the program has imported threading: never import it. */
        PyObject *name = PyUnicode_FromString("threading");
        PyObject *mod = name ? PyImport_GetModule(name) : NULL;
        Py_XDECREF(name);
        E.threading_active = mod ? PyObject_GetAttrString(mod, "_active") : NULL;
        Py_XDECREF(mod);
        if (!E.threading_active || !PyDict_Check(E.threading_active)) {
            Py_CLEAR(E.threading_active);
            PyErr_Clear();
            return;
        }
    }
    th->name_tries++;
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject *key = PyLong_FromUnsignedLong(th->ident);
    PyObject *obj = key ? PyDict_GetItemWithError(E.threading_active, key) : NULL;
    Py_XDECREF(key);
    if (obj) {
        PyObject *name = PyObject_GetAttrString(obj, "_name");
        if (name && PyUnicode_Check(name)) {
            char buf[256];
            calx_utf8(name, buf, sizeof buf);
            if (cal_profile_set_thread_name(calx_session_profile(), th->stat, buf) == 0)
                th->name_tries = 1000;
        }
        Py_XDECREF(name);
    }
    PyErr_Clear();
    PyErr_Restore(exc_type, exc_value, exc_tb);
}

/* ---- one pass over the threads (GIL) --------------------------------- */

/* Where the thread (the profile's `stat`) is, or was at the peek if not
   NULL: the innermost profiled line, every profiled function on its stack
   once (appended to E.pass_funcs), and the whole stack. */
static int known_code(const void *code)
{
    return calx_session_code_known((PyCodeObject *)code);
}

/* Where the frames E.frames[0..n) are: pe's place (file, line, function,
   functions, stack).  Returns 0, or -1 if memory ran out. */
static int locate(uint32_t stat, int n, pass_entry *pe)
{
    pe->file = CAL_PROFILE_NONE;
    pe->func = CAL_PROFILE_NONE;
    pe->line = 0;
    pe->funcs_at = E.pass_nfuncs;
    pe->nfuncs = 0;
    pe->loop_idle = 0;
    pe->frameless = n == 0;
    int loop_seen = 0;
    for (int i = 0; i < n; i++) {
        const calx_code *ci = calx_session_code(E.frames[i].code);
        if (!ci)
            return -1;
        calx_session_line(ci, &E.frames[i]);
        if (!loop_seen && ci->loop != CALX_LOOP_NONE) {
            /* The innermost of the loop's frames says whether it runs a
               callback or sits between them. */
            loop_seen = 1;
            pe->loop_idle = ci->loop == CALX_LOOP_IDLE;
        }
        if (!ci->profiled)
            continue;
        if (pe->file == CAL_PROFILE_NONE) {
            pe->file = ci->file;
            pe->line = E.frames[i].line;
            pe->func = ci->func;
        }
        uint32_t *seen = E.pass_funcs + pe->funcs_at;
        int dup = 0;
        for (size_t k = 0; k < pe->nfuncs && !dup; k++)
            dup = seen[k] == ci->func;
        if (dup)
            continue;
        if (grow_one((void **)&E.pass_funcs, &E.pass_funcs_cap, E.pass_nfuncs,
                     sizeof(*E.pass_funcs)) != 0)
            return -1;
        E.pass_funcs[E.pass_nfuncs++] = ci->func;
        pe->nfuncs++;
    }
    pe->node = calx_session_stack(stat, E.frames, n, &pe->folded);
    return 0;
}

/* Returns 0, -1 if memory ran out, or (free-threaded build, another
   thread) CALX_WALK_TORN or CALX_WALK_UNKNOWN (pyinternals.h). */
static int attribute(PyThreadState *ts, uint32_t stat, const calx_peek *peek,
                     pass_entry *pe)
{
    int n;
    if (calx_nogil_build() && ts != calx_nogil_self()) {
        /* It runs while we read (nogil.h): a copy, checked. */
        n = calx_thread_frames_remote(ts, known_code, E.frames, CALX_FRAMES_MAX);
        if (n < 0)
            return n;
    } else {
        n = calx_thread_frames(ts, peek, known_code, E.frames, CALX_FRAMES_MAX);
    }
    return locate(stat, n, pe);
}

/* The CPU and system time since the last reading, with system time carried
   over so that it never exceeds CPU time and sums to the kernel's total. */
static void cpu_delta(const cal_thread_times *now, int64_t *last_cpu, int64_t *last_sys,
                      int64_t *carry, int64_t *d_cpu, int64_t *d_sys)
{
    *d_cpu = now->cpu_ns - *last_cpu;
    if (*d_cpu < 0)
        *d_cpu = 0;
    *carry += now->system_ns - *last_sys;
    *d_sys = *carry < *d_cpu ? *carry : *d_cpu;
    if (*d_sys < 0)
        *d_sys = 0;
    *carry -= *d_sys;
    *last_cpu = now->cpu_ns;
    *last_sys = now->system_ns;
}

/* The program's footprint when the current pass began (-1: memory is not
   profiled).  GIL (the engine lock on the free-threaded build). */
static int64_t pass_footprint = -1;

/* The latest GPU reading when the current pass began, or NULL.  GIL (the
   engine lock on the free-threaded build). */
static const cal_gpu_reading *pass_gpu;

static void gpu_add(cal_gpu_line *g, const cal_gpu_reading *r)
{
    g->util_sum += r->util;
    g->memory_sum += (double)r->memory;
    g->n++;
    if (r->memory > g->memory_peak)
        g->memory_peak = r->memory;
}

/* The GPU reading a sample found running: to its line, and to every
   function on the stack. */
static void observe_gpu(const pass_entry *pe)
{
    if (!pass_gpu || pe->file == CAL_PROFILE_NONE)
        return;
    cal_profile *p = calx_session_profile();
    uint32_t li = cal_profile_line(p, pe->file, pe->line, pe->func);
    cal_line_stat *ls = cal_profile_line_mut(p, li);
    if (ls)
        gpu_add(&ls->gpu, pass_gpu);
    for (size_t k = 0; k < pe->nfuncs; k++) {
        cal_func_stat *fs = cal_profile_func_mut(p, E.pass_funcs[pe->funcs_at + k]);
        if (fs)
            gpu_add(&fs->gpu, pass_gpu);
    }
}

/* The footprint a sample found a line running at: its average and peak. */
static void observe_footprint(const pass_entry *pe)
{
    if (pass_footprint < 0 || pe->file == CAL_PROFILE_NONE)
        return;
    cal_profile *p = calx_session_profile();
    uint32_t li = cal_profile_line(p, pe->file, pe->line, pe->func);
    cal_line_stat *ls = cal_profile_line_mut(p, li);
    if (!ls)
        return;
    ls->mem.footprint_sum += (double)pass_footprint;
    ls->mem.footprint_n++;
    if (pass_footprint > ls->mem.footprint_peak)
        ls->mem.footprint_peak = pass_footprint;
}

/* Credit t to a place: its line and every function around it. */
static void credit_place(uint32_t stat, const place *at, const cal_times *t)
{
    cal_profile *p = calx_session_profile();
    if (cal_profile_add_sample(p, stat, at->file, at->line, at->func, t) != 0) {
        E.dropped++;
        return;
    }
    for (size_t k = 0; k < at->nfuncs; k++)
        cal_profile_add_func_total(p, at->funcs[k], t);
    calx_session_stack_times(at->node, t, at->folded);
}

/* Remember where a sample found a thread in Python, and how it split the
   user time it credited there. */
static void remember_place(calx_thread *th, const pass_entry *pe, double native_share)
{
    place *at = &th->left;
    th->left_set = 1;
    at->native_share = native_share;
    at->file = pe->file;
    at->func = pe->func;
    at->line = pe->line;
    at->node = pe->node;
    at->folded = pe->folded;
    at->nfuncs = pe->nfuncs < PLACE_FUNCS ? pe->nfuncs : PLACE_FUNCS;
    memcpy(at->funcs, E.pass_funcs + pe->funcs_at, at->nfuncs * sizeof(*at->funcs));
}

/* Whether a sample is at the place remembered (the same line and stack). */
static int same_place(const place *at, const pass_entry *pe)
{
    return at->file == pe->file && at->func == pe->func && at->line == pe->line &&
           at->node == pe->node && at->folded == pe->folded;
}

/* Credit what a thread ran in Python before any sample found it there to
   where it is now known to be (its place, or nowhere if it ended first). */
static void flush_unplaced(calx_thread *th)
{
    const cal_times *u = &th->unplaced;
    if (u->python_ns || u->native_ns || u->system_ns || u->waiting_ns)
        credit_place(th->stat, &th->left, u);
    memset(&th->unplaced, 0, sizeof(th->unplaced));
}

/* Set t's CPU: cpu of which sys is system time and the rest user time,
   split into native and Python by native_share. */
static void set_cpu(cal_times *t, int64_t cpu, int64_t sys, double native_share)
{
    int64_t user = cpu - sys;
    t->native_ns = (int64_t)((double)user * native_share + 0.5);
    t->python_ns = user - t->native_ns;
    t->system_ns = sys;
}

/* Credit the time since the thread's previous sample. */
/* The stash of the event loop that thread `ident` runs (made if new), or
   NULL when MAX_LOOPS loops are tracked already. */
static awaiting_stash *loop_stash(unsigned long ident)
{
    for (size_t i = 0; i < E.nloops; i++)
        if (E.loops[i].ident == ident)
            return &E.loops[i];
    if (E.nloops == MAX_LOOPS)
        return NULL;
    E.loops[E.nloops] = (awaiting_stash){.ident = ident};
    return &E.loops[E.nloops++];
}

/* A ticking thread no tick has found yet (cputicks.h): a thread whose CPU
   so far is less than one interval.  If it ends before its first tick,
   where passes found it is the best there is to credit that CPU to. */
static int untried(const calx_thread *th, const pass_entry *pe)
{
    return pe->ticked && th->ticks_taken == 0;
}

/* Of the waiting of th's interval, how long it was runnable but had no
   CPU: its run-queue delay since it was last read (0 when the kernel does
   not say).  Read with the clocks that end the interval: when it is
   credited, a few microseconds after the pass read them; the main
   thread's, whose interval ends at a tick, by that tick (pe->delay).
   (Read at the answer, it held the waits that ended between the tick and
   the answer: the next interval's.)  Reading costs an open()
   of /proc (15-20 us on a loaded machine), so it is read only for an
   interval in which the thread both ran and waited at least
   RUN_DELAY_MIN_NS: a thread that did not run at all did not move, and
   is nearly always blocked (an idle thread costs nothing); the delay of
   intervals not read is in the next one read, as far as that one's
   waiting goes (INTERNALS, "What is measured"). */
#define RUN_DELAY_MIN_NS 1000000
#define DELAY_UNREAD (-1)
#define DELAY_AT_CREDIT (-2)

static int64_t run_delay_delta(calx_thread *th, int64_t delay, int64_t cpu,
                               int64_t waiting)
{
    if (cpu <= 0 || waiting < RUN_DELAY_MIN_NS || delay == DELAY_UNREAD)
        return 0;
    int64_t now = delay == DELAY_AT_CREDIT
                      ? cal_clock_thread_run_delay(cal_clock_thread_tid(th->clock))
                      : delay;
    if (now < 0 || th->last_delay < 0) {
        th->last_delay = now;
        return 0;
    }
    int64_t d = now > th->last_delay ? now - th->last_delay : 0;
    th->last_delay += d; /* (a tick's read may be older than the last) */
    return d;
}

static void credit(pass_entry *pe, int64_t wall, double native_share, int samples)
{
    calx_thread *th = &E.threads[pe->ti];
    const cal_thread_times *now = &pe->times;
    int64_t d_wall = wall - th->last_wall, d_cpu, d_sys, prev_cpu = th->last_cpu;
    cpu_delta(now, &th->last_cpu, &th->last_sys, &th->sys_carry, &d_cpu, &d_sys);
    th->last_wall = wall;
    if (calx_session_paused()) {
        th->unsplit = 0;
        return; /* profiling is off: the interval only moves the baselines */
    }

    cal_times t = {0};
    t.waiting_ns = d_wall > d_cpu ? d_wall - d_cpu : 0;
    int64_t d_delay = run_delay_delta(th, pe->delay, d_cpu, t.waiting_ns);
    t.preempted_ns = d_delay < t.waiting_ns ? d_delay : t.waiting_ns;
    if (d_delay > t.preempted_ns && th->unsplit > 0) {
        /* The kernel adds a wait for the CPU to the delay when it ends: one
           that began in an earlier interval and ended in this one is in
           this delay, and its start in that interval's waiting, not told
           as preempted then.  It goes to the place it was credited at
           (left), as much as that place has waiting not yet told.  (Cut
           off here, a line sharing its CPU read 0.85-0.91 of its waiting
           as preempted; 0.96-0.99 since.) */
        cal_times back = {0};
        int64_t late = d_delay - t.preempted_ns;
        back.preempted_ns = late < th->unsplit ? late : th->unsplit;
        credit_place(th->stat, &th->left, &back);
        th->unsplit -= back.preempted_ns;
    }
    t.samples = samples;
    if (pe->off_cpu && !pe->ticked && ++th->held_passes >= HOLD_PASSES)
        pe->off_cpu = 0; /* starved of CPU-time samples: credited here */
    if (pe->off_cpu) {
        /* Found off a CPU (OFF-CPU SAMPLES, above): its waiting is here,
           its CPU goes to the next sample that finds it running. */
        th->held_cpu += d_cpu;
        th->held_sys += d_sys;
        d_cpu = d_sys = 0;
    } else {
        th->held_passes = 0;
        d_cpu += th->held_cpu;
        d_sys += th->held_sys;
        th->held_cpu = th->held_sys = 0;
    }
    if (pe->asked) {
        /* The main thread, off the CPU since the tick that asked for this
           sample, answering as its block ended: the CPU it used before
           that tick it used before the block, and where it was then is
           best told by where a sample last found it (the busy code before
           a blocking call), not by the blocking line, which would get one
           interval of CPU per such transition (INTERNALS, "What is
           measured").  The block's waiting, and the CPU since it ended,
           are where the tick found it. */
        int64_t before = pe->asked->cpu_ns - prev_cpu;
        before = before < 0 ? 0 : before > d_cpu ? d_cpu : before;
        int64_t sys_before =
            d_cpu > 0 ? (int64_t)((double)d_sys * (double)before / (double)d_cpu) : 0;
        cal_times used = {0};
        set_cpu(&used, before, sys_before, th->left.native_share);
        credit_place(th->stat, &th->left, &used);
        d_cpu -= before;
        d_sys -= sys_before;
    }
    set_cpu(&t, d_cpu, d_sys, native_share);

    if (pe->frameless && !pe->off_cpu) {
        /* Outside Python now: a C thread between its calls into Python
           (waiting in PyGILState_Ensure, or with no thread state at all),
           or a Python thread on its way out.  What it ran holding the GIL
           (the Python share, and as much of its system time) it ran in
           Python, and the best we know of where is the place a sample last
           found it in Python: often the tail of the call the last sample
           caught (passes come when the GIL changes hands, often right as
           such a call ends), or whole calls of the same callback made
           between two passes; or, before any sample found it in Python,
           the first place one does.  Its CPU without the GIL and its
           off-CPU time are where it is now: in the thread, outside
           Python. */
        cal_times used = {0};
        used.python_ns = t.python_ns;
        used.system_ns = (int64_t)((double)t.system_ns * (1.0 - native_share) + 0.5);
        if (th->left_set)
            credit_place(th->stat, &th->left, &used);
        else
            cal_times_add(&th->unplaced, &used);
        t.python_ns = 0;
        t.system_ns -= used.system_ns;
    }
    t.gc_ns = (int64_t)(pe->gc_share * (double)cal_times_cpu(&t) + 0.5);
    int at_left = 0; /* credited where it was last (1), or a new left (2) */
    if (!pe->frameless && (!pe->off_cpu || untried(th, pe))) {
        /* (A place found off a CPU is where it was preempted, not where
           its CPU went: not remembered for the CPU handed out there;
           unless it is all there is, for a thread that ends before its
           first tick.) */
        at_left = th->left_set && same_place(&th->left, pe) ? 1 : 2;
        remember_place(th, pe, native_share);
        flush_unplaced(th);
    }

    cal_times here = t;
    awaiting_stash *loop = NULL;
    if (pe->loop_idle && t.waiting_ns > 0 && E.awaiting)
        loop = loop_stash(th->ident);
    if (loop) {
        /* The loop waited for its tasks: that waiting belongs to the lines
           they await (credit_awaiting, after a pass). */
        loop->stat = th->stat;
        loop->waiting_ns += t.waiting_ns - t.preempted_ns;
        loop->file = pe->file;
        loop->func = pe->func;
        loop->line = pe->line;
        loop->node = pe->node;
        loop->seen_wall = wall;
        here.waiting_ns = here.preempted_ns; /* runnable, not waiting for its tasks */
    }
    cal_profile *p = calx_session_profile();
    if (cal_profile_add_sample(p, th->stat, pe->file, pe->line, pe->func, &here) != 0) {
        E.dropped++;
        return;
    }
    for (size_t k = 0; k < pe->nfuncs; k++)
        cal_profile_add_func_total(p, E.pass_funcs[pe->funcs_at + k], &t);
    calx_session_stack_times(pe->node, &here, pe->folded);
    if (at_left != 1)
        th->unsplit = 0;
    if (at_left)
        th->unsplit += here.waiting_ns - here.preempted_ns;
    if (samples) {
        observe_footprint(pe);
        observe_gpu(pe);
    }
}

/* A thread that ended since its previous sample: its CPU since then, as
   last read by the watcher (within a look, 1 ms, of its end), and the CPU
   held for a sample that found it running (free-threaded build), to where
   a sample last found it in Python; user time split as last seen, but for
   system time the kernel had reported and we had not credited yet. */
static void credit_tail(calx_thread *th)
{
    int64_t cpu, ran, used = 0, waiting = 0;
    if (calx_gilwatch_last(th->clock, &cpu, &ran) && cpu > th->last_cpu) {
        used = cpu - th->last_cpu;
        waiting = ran - th->last_wall > used ? ran - th->last_wall - used : 0;
        th->last_cpu = cpu; /* credited up to there: once */
        th->last_wall = ran > th->last_wall ? ran : th->last_wall;
    }
    int64_t sys = th->sys_carry < used ? th->sys_carry : used;
    sys = sys < 0 ? 0 : sys;
    th->sys_carry -= sys;
    sys += th->held_sys;
    used += th->held_cpu;
    th->held_cpu = th->held_sys = 0;
    if (calx_session_paused() || used + waiting <= 0)
        return;
    cal_times t = {0};
    set_cpu(&t, used, sys, th->native_share);
    t.waiting_ns = waiting;
    credit_place(th->stat, &th->left, &t);
}

static calx_cputick tick_buf; /* engine lock; one pass at a time */

/* Do threads other than the main one tick in this pass (cputicks.h)?
   Everywhere the kernel allows, but on the free-threaded build with its
   GIL switched on at run time. */
static int ticks_now(void) { return E.ticks_on && (E.gil_free || !calx_nogil_build()); }

/* The interpreter's thread states with their thread ids, sorted by
   address: what listed() looks up, read once per pass
   (calx_threads_lock held; a freed state's memory may be another's). */
static int by_state(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const listed_state *)a)->ts;
    uintptr_t y = (uintptr_t)((const listed_state *)b)->ts;
    return (x > y) - (x < y);
}

static void list_states(void)
{
    E.nlisted = 0;
    for (PyThreadState *t = PyInterpreterState_ThreadHead(E.interp); t;
         t = PyThreadState_Next(t)) {
        if (grow_one((void **)&E.listed, &E.listed_cap, E.nlisted, sizeof(*E.listed)) !=
            0)
            break; /* (one left out: its ticks are read from their peeks alone) */
        E.listed[E.nlisted++] = (listed_state){t, (unsigned long)t->thread_id};
    }
    qsort(E.listed, E.nlisted, sizeof(*E.listed), by_state);
}

/* Whether th's thread state is in the interpreter's list, still its own,
   as list_states() read it. */
static int listed(const calx_thread *th)
{
    listed_state key = {th->ts, 0};
    const listed_state *s = bsearch(&key, E.listed, E.nlisted, sizeof(key), by_state);
    return s && s->ident == th->ident;
}

/* Credit the CPU a ticking thread held to where its ticks found it
   (cputicks.h; WORKER TICKS above).  A tick at CPU clock c takes the CPU from
   what was last credited up to c (no further than the pass read: the
   rest waits for the next tick); a tick whose frames do not check is
   dropped, its CPU going to the next.  All of the ticks' CPU was read by
   passes (credit), so the totals stay exact.  on_list: th's thread state
   is listed() (with a GIL, the ticks' frames are then read against its
   live stack); else th is outside Python or gone, and the ticks are read
   from their peeks alone. */
static void take_ticks(calx_thread *th, int on_list)
{
    calx_cputick *k = &tick_buf;
    while (calx_cputicks_take(th->tick_slot, k)) {
        th->ticks_taken++;
        if (!ticks_now())
            continue; /* the GIL came on (3.14t): passes credit CPU again */
        int64_t upto = k->cpu_ns < th->last_cpu ? k->cpu_ns : th->last_cpu;
        int64_t cpu = th->held_cpu - (th->last_cpu - upto);
        if (cpu <= 0)
            continue;
        pass_entry at = {.ti = (size_t)(th - E.threads)};
        int n = 0, rc = 0, located = 0;
        if (E.gil_free) {
            n = calx_frames_check(k->f, k->n, known_code, E.frames);
            if (n < 0) {
                E.torn++;
                continue;
            }
        } else if (on_list && k->peek.n > 0 &&
                   calx_peek_on_stack((PyThreadState *)th->ts, &k->peek)) {
            /* With a GIL: the frames it peeked at, read against its live
               stack (for the frames out from the peek's), as the main
               thread's peek at a tick is. */
            rc = attribute((PyThreadState *)th->ts, th->stat, &k->peek, &at);
            n = !at.frameless;
            located = 1;
        } else {
            /* It has left them since (a C thread between its calls into
               Python, a function that returned): the peek alone, if its
               codes are known and it saw the whole stack (else the tick
               is dropped, not credited to a stack cut short); none: it
               was outside Python. */
            n = k->peek.n < CALX_PEEK_FRAMES
                    ? calx_peek_frames_known(&k->peek, known_code, E.frames,
                                             CALX_FRAMES_MAX)
                    : 0;
            rc = n == 0 && k->peek.n > 0;
        }
        if (rc != 0)
            continue; /* (a code not learnt yet: its CPU goes to the next) */
        int64_t sys = th->held_sys < cpu ? th->held_sys : cpu;
        th->held_cpu -= cpu;
        th->held_sys -= sys;
        if (calx_session_paused())
            continue;
        if (!located && locate(th->stat, n, &at) != 0) {
            E.dropped++;
            continue;
        }
        /* Holding the GIL (attached) is bytecode, unless it ran C since
           gilwatch's last probe (3.13+; before, another thread's request
           for the GIL stood), or (before 3.13) the tick found its
           innermost frame inside a call of C, or it collected garbage
           (C, as gilwatch counts it); without it, native code. */
        int in_c =
            k->in_c == 1 || (k->gc && !E.gil_free) ||
            (k->in_c == 0 && calx_gilwatch_stuck_after(th->clock, k->cpu_ns) == 1) ||
            (k->in_c == -1 && k->attached == 1 && n > 0 &&
             calx_peek_in_c_call(&k->peek, known_code, k->own_code) == 1);
        double share = n == 0 || k->attached == 0 ? 1.0
                       : k->attached == 1         ? (in_c ? 1.0 : 0.0)
                                                  : th->native_share;
        th->native_share = share;
        cal_times t = {0};
        set_cpu(&t, cpu, sys, share);
        t.gc_ns = k->gc ? cal_times_cpu(&t) : 0; /* the tick's label, as native's */
        if (n > 0) {
            remember_place(th, &at, share);
            flush_unplaced(th);
        }
        place here = {.file = at.file,
                      .func = at.func,
                      .line = at.line,
                      .node = at.node,
                      .folded = at.folded};
        here.nfuncs = at.nfuncs < PLACE_FUNCS ? at.nfuncs : PLACE_FUNCS;
        memcpy(here.funcs, E.pass_funcs + at.funcs_at,
               here.nfuncs * sizeof(*here.funcs));
        credit_place(th->stat, &here, &t);
    }
    if (th->tick_slot >= 0 && th->ticks_taken == 0 && th->held_cpu > TICKLESS_NS) {
        /* Its ticks do not come (a thread that blocks signals): read it
           where passes find it, as without ticks. */
        calx_cputicks_disarm(th->tick_slot);
        th->tick_slot = -1;
        th->tickless = 1;
    }
}

/* Does the thread tick (its CPU held for its ticks)? */
static int ticking(const calx_thread *th) { return ticks_now() && th->tick_slot >= 0; }

/* Free-threaded build: did the thread stay off every CPU while the pass
   read it?  `cpu` is its CPU clock read before (OFF-CPU SAMPLES).  Never
   at the final pass (it accounts the tail, held CPU included), and never
   for the main thread (its samples are the ticks', taken as it answers). */
static int stood_still(const calx_thread *th, int64_t cpu, enum pass_kind kind)
{
    if (!E.gil_free || th->is_main || kind == PASS_FINAL)
        return 0;
    return cal_clock_thread_cpu_sigsafe(th->clock) == cpu;
}

/* The threads a pass found no thread state for.  Alive, they are outside
   Python (a C thread between its calls into it, a Python thread on its way
   out): each gets a frameless entry from n on, and the count of entries is
   returned.  Gone, they get their last stretch (credit_tail) and leave the
   registry at the sweep.  The main thread is never among them. */
static size_t sample_stateless(size_t n, enum pass_kind kind)
{
    for (size_t i = 0; i < E.nthreads; i++) {
        calx_thread *th = &E.threads[i];
        if (th->seen || th->is_main)
            continue;
        cal_thread_times times;
        if (cal_clock_thread_times_sigsafe(th->clock, &times) != 0) {
            take_ticks(th, 0);
            credit_tail(th);
            flush_unplaced(th);
            continue;
        }
        if (grow_one((void **)&E.pass, &E.pass_cap, n, sizeof(*E.pass)) != 0) {
            E.dropped++;
            th->seen = 1; /* not sampled, but not gone */
            continue;
        }
        int folded;
        E.pass[n++] =
            (pass_entry){.ti = i,
                         .times = times,
                         .file = CAL_PROFILE_NONE,
                         .func = CAL_PROFILE_NONE,
                         .node = calx_session_stack(th->stat, NULL, 0, &folded),
                         .funcs_at = E.pass_nfuncs,
                         .frameless = 1,
                         .ticked = ticking(th),
                         .off_cpu = ticking(th) || stood_still(th, times.cpu_ns, kind)};
        th->seen = 1;
    }
    return n;
}

#define MAX_CHAINS 64 /* the agent sends at most 64 tasks' chains */

static place places[MAX_CHAINS]; /* GIL (engine lock); one pass at a time */

/* The code and line of a chain's item i, a (code, line) pair; NULL if it
   is not one (or memory ran out). */
static const calx_code *chain_item(PyObject *chain, Py_ssize_t i, int32_t *line)
{
    PyObject *item = PySequence_Fast_GET_ITEM(chain, i);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
        !PyCode_Check(PyTuple_GET_ITEM(item, 0)))
        return NULL;
    long n = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
    if (n < 0) {
        PyErr_Clear();
        n = 0;
    }
    *line = (int32_t)n;
    return calx_session_code((PyCodeObject *)PyTuple_GET_ITEM(item, 0));
}

/* The stack of a chain, called from `base` (the loop's), outermost first. */
static void chain_stack(PyObject *chain, uint32_t base, place *at)
{
    cal_stacks *st = cal_profile_stacks(calx_session_profile());
    at->node = base;
    at->folded = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(chain); i++) {
        int32_t line;
        const calx_code *ci = chain_item(chain, i, &line);
        if (!ci || ci->frame == CAL_STACKS_NONE)
            continue;
        uint32_t child = cal_stacks_child(st, at->node, ci->frame, line);
        if (child == CAL_STACKS_NONE) {
            at->folded = 1;
            return;
        }
        at->node = child;
    }
}

/* The place of a chain (a list of (code, line), outermost first), called
   from the stack `base`.  Returns 0 if none of it is profiled code. */
static int chain_place(PyObject *chain, uint32_t base, place *at)
{
    at->file = CAL_PROFILE_NONE;
    at->nfuncs = 0;
    if (!PyList_Check(chain) && !PyTuple_Check(chain))
        return 0;
    for (Py_ssize_t i = PySequence_Fast_GET_SIZE(chain) - 1; i >= 0; i--) {
        int32_t line;
        const calx_code *ci = chain_item(chain, i, &line);
        if (!ci || !ci->profiled)
            continue;
        if (at->file == CAL_PROFILE_NONE) {
            at->file = ci->file;
            at->func = ci->func;
            at->line = line;
        }
        int dup = 0;
        for (size_t k = 0; k < at->nfuncs && !dup; k++)
            dup = at->funcs[k] == ci->func;
        if (!dup && at->nfuncs < PLACE_FUNCS)
            at->funcs[at->nfuncs++] = ci->func;
    }
    if (at->file == CAL_PROFILE_NONE)
        return 0;
    chain_stack(chain, base, at);
    return 1;
}

/* Split an idle loop's waiting evenly over the lines its tasks await
   (tasks awaiting another task are not counted: the awaited one is).  With
   no such task the waiting stays where the loop was. */
static void credit_awaiting(const awaiting_stash *a)
{
    PyObject *chains = PyObject_CallFunction(E.awaiting, "k", a->ident);
    if (!chains)
        PyErr_Clear();
    calx_nogil_lock(); /* the code table and the profile, from here on */
    Py_ssize_t n = chains && PyList_Check(chains) ? PyList_GET_SIZE(chains) : 0;
    size_t placed = 0;
    for (Py_ssize_t i = 0; i < n && placed < MAX_CHAINS; i++)
        placed += chain_place(PyList_GET_ITEM(chains, i), a->node, &places[placed]);
    Py_XDECREF(chains);
    int64_t left = a->waiting_ns;
    for (size_t i = 0; i < placed; i++) {
        const place *at = &places[i];
        cal_times t = {0};
        t.waiting_ns = left / (int64_t)(placed - i);
        left -= t.waiting_ns;
        credit_place(a->stat, at, &t);
    }
    if (left > 0) {
        cal_times t = {0};
        t.waiting_ns = left;
        if (cal_profile_add_sample(calx_session_profile(), a->stat, a->file, a->line,
                                   a->func, &t) != 0)
            E.dropped++;
        else
            calx_session_stack_times(a->node, &t, 0);
    }
    calx_nogil_unlock();
}

/* Hand out the waiting the idle loops gathered, where it is worth the
   asking (awaiting_stash) or `all` of it; forget loops long not idle. */
static void credit_loops(int all, int64_t wall)
{
    size_t kept = 0;
    for (size_t i = 0; i < E.nloops; i++) {
        awaiting_stash *a = &E.loops[i];
        if (a->waiting_ns > 0 && (all || a->waiting_ns >= AWAIT_FACTOR * a->cost_ns)) {
            int64_t before = cal_clock_own_cpu_ns();
            credit_awaiting(a);
            a->waiting_ns = 0;
            a->cost_ns = cal_clock_own_cpu_ns() - before;
        }
        if (a->waiting_ns > 0 || wall - a->seen_wall < LOOP_FORGET_NS)
            E.loops[kept++] = *a;
    }
    E.nloops = kept;
}

/* Tell gilwatch which threads to watch, all but the main one, when that
   changed (GIL held). */
static void publish_known(void)
{
    if (!E.threads_changed)
        return;
    E.threads_changed = 0;
    size_t cap = E.nthreads ? E.nthreads : 1;
    const void **ts = malloc(cap * sizeof(*ts));
    unsigned long *idents = malloc(cap * sizeof(*idents));
    clockid_t *clocks = malloc(cap * sizeof(*clocks));
    if (ts && idents && clocks) {
        size_t k = 0;
        for (size_t i = 0; i < E.nthreads; i++) {
            if (E.threads[i].is_main || !E.threads[i].ident)
                continue;
            ts[k] = E.threads[i].ts;
            idents[k] = E.threads[i].ident;
            clocks[k] = E.threads[i].clock;
            k++;
        }
        calx_gilwatch_set_threads(ts, idents, clocks, k);
    }
    free(ts);
    free(idents);
    free(clocks);
}

static int is_python_tid(int tid)
{
    for (size_t i = 0; i < E.nthreads; i++)
        if (cal_clock_thread_tid(E.threads[i].clock) == tid)
            return 1;
    return 0;
}

/* Find a native thread, or start following it: the first sighting credits
   nothing, so a Python thread caught before its thread state is ready is
   never mistaken for a native one. */
static native_thread *native_find_or_add(int tid, int *is_new)
{
    *is_new = 0;
    native_thread *found = native_find(tid);
    if (found)
        return found;
    if (grow_one((void **)&E.natives, &E.natives_cap, E.nnatives, sizeof(*E.natives)) !=
        0)
        return NULL;
    native_thread *nt = &E.natives[E.nnatives++];
    memset(nt, 0, sizeof(*nt));
    nt->tid = tid;
    nt->clock = cal_clock_thread_base_for_tid(tid);
    nt->stat = CAL_PROFILE_NONE;
    *is_new = 1;
    return nt;
}

/* The profile's entry for a native thread, named as the kernel names it. */
static uint32_t native_stat(native_thread *nt)
{
    if (nt->stat != CAL_PROFILE_NONE)
        return nt->stat;
    cal_profile *p = calx_session_profile();
    nt->stat = cal_profile_thread(p, 0, nt->tid, 0);
    if (nt->stat == CAL_PROFILE_NONE)
        return nt->stat;
    char path[64], name[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", nt->tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, name, sizeof name - 1);
        close(fd);
        if (n > 0) {
            name[n] = '\0';
            name[strcspn(name, "\n")] = '\0';
        }
    }
    if (name[0])
        cal_profile_set_thread_name(p, nt->stat, name);
    return nt->stat;
}

/* /proc/self/task, opened once per process (at engine_start, while the
   agent holds any closed standard descriptor's number) and read again
   from its start at each scan: a descriptor opened by each pass would,
   for its moment, take the lowest free number, and a file the program
   opens at that moment would get another than without calipers. */
static DIR *task_dir;
static pid_t task_dir_pid;
static struct stat task_dir_st;

static DIR *open_task_dir(void)
{
    struct stat st;
    if (task_dir && task_dir_pid == getpid()) {
        if (fstat(dirfd(task_dir), &st) == 0 && st.st_dev == task_dir_st.st_dev &&
            st.st_ino == task_dir_st.st_ino) {
            rewinddir(task_dir);
            return task_dir;
        }
        /* The program closed it (a daemon closing every descriptor), and
           the number may be a file of its own now: never touched again
           (its few bytes stay allocated); opened anew. */
        task_dir = NULL;
    }
    if (task_dir)
        closedir(task_dir); /* a forked child's copy: "self" was the parent */
    task_dir = opendir("/proc/self/task");
    task_dir_pid = getpid();
    if (task_dir && fstat(dirfd(task_dir), &task_dir_st) != 0) {
        closedir(task_dir);
        task_dir = NULL;
    }
    return task_dir;
}

/* Credit the CPU of every thread that is not a Python thread (and not ours)
   as native work at the main thread's current line (main: its pass entry,
   or NULL when it was not sampled).  Reads /proc/self/task. */
static void sample_native_threads(const pass_entry *main)
{
    cal_profile *p = calx_session_profile();
    DIR *dir = open_task_dir();
    if (!dir)
        return;
    for (size_t i = 0; i < E.nnatives; i++)
        E.natives[i].seen = 0;
    int watcher = calx_gilwatch_tid(), poller = calx_gpu_tid();
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        int tid = atoi(de->d_name);
        if (tid <= 0 || tid == E.sampler_tid || tid == watcher || tid == poller ||
            is_python_tid(tid) || calx_signals_is_helper(0, tid))
            continue;
        int is_new;
        native_thread *nt = native_find_or_add(tid, &is_new);
        cal_thread_times now;
        if (!nt || cal_clock_thread_times_sigsafe(nt->clock, &now) != 0)
            continue;
        nt->seen = 1;
        if (is_new) {
            /* Not credited at its first sighting: it may be a Python thread
               whose thread state is not ready yet.  One born since the
               previous scan is counted from its birth at the next; one
               there at the first scan (at start), from then. */
            if (E.native_scans == 0) {
                nt->last_cpu = now.cpu_ns;
                nt->last_sys = now.system_ns;
            } else {
                nt->fresh = 1;
                nt->first = now;
            }
            continue;
        }
        nt->fresh = 0;
        int64_t d_cpu, d_sys;
        cpu_delta(&now, &nt->last_cpu, &nt->last_sys, &nt->sys_carry, &d_cpu, &d_sys);
        if (d_cpu == 0 || calx_session_paused())
            continue;
        uint32_t stat = native_stat(nt);
        if (stat == CAL_PROFILE_NONE) {
            E.dropped++;
            continue;
        }
        cal_times t = {0};
        t.native_ns = d_cpu - d_sys;
        t.system_ns = d_sys;
        /* In the stack view, a native thread's time is its own. */
        cal_stacks *st = cal_profile_stacks(p);
        calx_session_stack_times(cal_stacks_root(st, stat), &t, 0);
        if (!main) {
            cal_profile_add_sample(p, stat, CAL_PROFILE_NONE, 0, CAL_PROFILE_NONE, &t);
            continue;
        }
        if (cal_profile_add_sample(p, stat, main->file, main->line, main->func, &t) !=
            0) {
            E.dropped++;
            continue;
        }
        for (size_t k = 0; k < main->nfuncs; k++)
            cal_profile_add_func_total(p, E.pass_funcs[main->funcs_at + k], &t);
    }
    E.native_scans++;
    size_t k = 0;
    for (size_t i = 0; i < E.nnatives; i++)
        if (E.natives[i].seen)
            E.natives[k++] = E.natives[i];
    E.nnatives = k;
}

/* Is this the sampler thread (GIL held)?  By its pthread id, known from
   pthread_create: its thread state may be in the interpreter's list before
   the thread has said which is its own, and after it was told to end. */
static int is_sampler_ident(unsigned long ident)
{
    return ident && ident == E.sampler_ident;
}

/* Sample every thread (PASS_SAMPLER: every thread but the main one).
   main_native says how to label the main thread's user time. */
/* Free-threaded build: a walk found code objects the table does not know.
   With every other thread stopped at a safe point their frames hold
   still, as under the GIL: walk them all and learn their code objects, so
   that the walks done while they run can use them (pyinternals.c).  New
   code objects are few (each is learnt once), so the pauses are too. */
static void learn_codes_world_stopped(void)
{
    calx_stop_world(E.interp);
    calx_threads_lock();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(E.interp); ts;
         ts = PyThreadState_Next(ts)) {
        int n = calx_thread_frames(ts, NULL, NULL, E.frames, CALX_FRAMES_MAX);
        for (int i = 0; i < n; i++)
            (void)calx_session_code(E.frames[i].code);
    }
    calx_threads_unlock();
    calx_start_world(E.interp);
}

static void sample_pass(enum pass_kind kind, int main_native, const main_cut *cut)
{
    calx_nogil_lock(); /* stands for the GIL on the free-threaded build */
    if (E.in_pass) {
        calx_nogil_unlock();
        return; /* credit_awaiting runs Python, which may let another pass try */
    }
    E.in_pass = 1;
    E.gil_free = calx_nogil_build() && !calx_gil_enabled(E.interp);
    pass_footprint = calx_memory_pass();
    calx_gcstats_pass();
    pass_gpu = calx_gpu_pass(calx_session_profile(), calx_session_origin());
    int64_t wall = cal_clock_now_ns();
    size_t n = 0;
    int learnt = 0;
    if (E.ticks_on && calx_cputicks_taken_over()) {
        /* The program put a handler of its own on the ticks' signal: our
           timers go (their CPU held so far goes to the next samples), and
           threads are armed again, on another free signal. */
        for (size_t i = 0; i < E.nthreads; i++) {
            calx_cputicks_disarm(E.threads[i].tick_slot);
            E.threads[i].tick_slot = -1;
        }
    }
again:
    n = 0;
    E.pass_nfuncs = 0;
    for (size_t i = 0; i < E.nthreads; i++)
        E.threads[i].seen = 0;
    int unknown = 0;

    calx_threads_lock();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(E.interp); ts;
         ts = PyThreadState_Next(ts)) {
        if (ts->thread_id == 0 || is_sampler_ident((unsigned long)ts->thread_id) ||
            calx_signals_is_helper((unsigned long)ts->thread_id, 0))
            continue;
        int is_main = (unsigned long)ts->thread_id == E.main_ident;
        if (kind == PASS_SAMPLER && is_main)
            continue;
        if (grow_one((void **)&E.pass, &E.pass_cap, n, sizeof(*E.pass)) != 0) {
            E.dropped++;
            break;
        }
        pass_entry *pe = &E.pass[n];
        calx_thread *th = thread_for(ts, &pe->times);
        if (!th)
            continue;
        pe->ti = (size_t)(th - E.threads);
        if (th->ts != ts) {
            /* A C thread that calls PyGILState_Ensure/Release repeatedly
               gets a new thread state each time. */
            th->ts = ts;
            E.threads_changed = 1;
            calx_cputicks_retarget(th->tick_slot, ts);
        }
        if (ticks_now() && !is_main && th->tick_slot < 0 && !th->tickless &&
            kind != PASS_FINAL) {
            th->tick_slot =
                calx_cputicks_arm(ts, cal_clock_thread_tid(th->clock), th->clock);
            th->tickless = th->tick_slot < 0; /* (all slots taken: not asked again) */
        }
        /* The main thread's interval ends at the last tick (below), and
           its sample is where the tick found it: a native operator (a @ b)
           is served only at the next call or loop, on another line. */
        const calx_peek *peek = NULL;
        pe->asked = NULL;
        if (is_main && cut && cut->wall > 0 && cut->wall >= th->last_wall) {
            peek = &cut->peek;
            if (cut->blocked && cut->asked.cpu_ns >= th->last_cpu)
                pe->asked = &cut->asked;
        }
        pe->attached = calx_thread_attached(ts);
        int rc = attribute(ts, th->stat, peek, pe);
        if (rc == CALX_WALK_UNKNOWN && !learnt) {
            unknown = 1; /* learnt below, then the pass starts again */
            th->seen = 1;
            continue;
        }
        if (rc != 0) {
            /* Out of memory, or a stack that changed under the read (or
               still unknown) on the free-threaded build: this sample is
               dropped; its interval goes to the thread's next one. */
            if (rc == CALX_WALK_TORN || rc == CALX_WALK_UNKNOWN)
                E.torn++; /* still unknown: new code ran since it was learnt */
            else
                E.dropped++;
            th->seen = 1;
            continue;
        }
        /* After the walk: the clock moved while it ran if the thread was
           on a CPU, and then what the walk saw is where its CPU goes. */
        pe->ticked = ticking(th);
        pe->off_cpu = pe->ticked || stood_still(th, pe->times.cpu_ns, kind);
        th->seen = 1;
        n++;
    }
    calx_threads_unlock();
    if (unknown) {
        learnt = 1;
        learn_codes_world_stopped();
        goto again;
    }
    n = sample_stateless(n, kind);

    /* The main thread's split comes from the service delay; the others'
       from what gilwatch saw since their previous sample (or, if they used
       no CPU while watched, the split it saw last). */
    for (size_t i = 0; i < n; i++) {
        calx_thread *th = &E.threads[E.pass[i].ti];
        double share, gc_share;
        E.pass[i].gc_share = 0;
        if (th->is_main) {
            th->native_share = main_native;
            /* (labelled where its interval ends: at the tick, below) */
            if (cut && cut->wall > 0 && cut->wall >= th->last_wall &&
                !E.pass[i].asked && cut->gc.running) {
                E.pass[i].gc_share = 1;
                calx_gcstats_seen(&cut->gc, E.pass[i].file, E.pass[i].line,
                                  E.pass[i].func);
            }
        } else if (E.gil_free) {
            /* No GIL to watch: the interval is labelled by the thread's
               state at the pass (an unbiased estimate, as the main
               thread's is: the ticks are independent of the program),
               attached (bytecode) or detached (native code, which let go
               of its thread state: Py_BEGIN_ALLOW_THREADS).  A frameless
               entry, on a CPU, runs C outside Python (a C thread between
               its calls into it).  A thread found off a CPU labels
               nothing: its CPU waits for a sample that finds it on one. */
            if (E.pass[i].off_cpu && !untried(th, &E.pass[i]))
                continue;
            E.pass[i].gc_share =
                E.pass[i].attached == 1 && calx_gc_collecting_sigsafe(E.interp);
            if (E.pass[i].frameless)
                th->native_share = 1.0;
            else if (E.pass[i].attached >= 0)
                th->native_share = E.pass[i].attached ? 0.0 : 1.0;
        } else {
            if (calx_gilwatch_take(th->clock, MIN_WATCHED_NS, &share, &gc_share)) {
                th->native_share = share;
                th->gc_share = gc_share;
            }
            E.pass[i].gc_share = th->gc_share;
        }
    }

    for (size_t i = 0; i < n; i++) {
        pass_entry *pe = &E.pass[i];
        calx_thread *th = &E.threads[pe->ti];
        /* The main thread's interval ends at the tick, not at the pass: a
           delayed pass comes when the native call returns, and ending the
           interval there would credit native with the Python time before
           the call (INTERNALS, "Transitions").  But if it was blocked since
           the tick that asked, it ends here: the block's whole waiting is
           where the tick found it, and the CPU it used before that tick
           goes elsewhere (credit). */
        int64_t until = wall;
        pe->delay = DELAY_AT_CREDIT;
        if (th->is_main && cut && cut->wall >= th->last_wall && cut->wall > 0 &&
            !pe->asked) {
            until = cut->wall;
            pe->times = cut->times;
            pe->delay = cut->delay;
        }
        /* The final pass accounts the tail of the run; it is not a sample
           drawn at a random time, so it does not count as one. */
        credit(pe, until, th->native_share, kind != PASS_FINAL);
    }
    /* (With a GIL, threads' states stay listed while their ticks are read
       against them.) */
    int lock = !E.gil_free && ticks_now();
    if (lock) {
        calx_threads_lock();
        list_states();
    }
    for (size_t i = 0; i < E.nthreads; i++) {
        calx_thread *th = &E.threads[i];
        if (th->seen && th->tick_slot >= 0)
            take_ticks(th, !lock || listed(th));
    }
    if (lock)
        calx_threads_unlock();
    if (kind == PASS_FINAL)
        for (size_t i = 0; i < E.nthreads; i++) {
            /* CPU still held: a thread this pass could not sample (a torn
               walk, 3.14t), or its CPU since its last tick */
            if (calx_nogil_build() || E.ticks_on)
                credit_tail(&E.threads[i]);
            flush_unplaced(&E.threads[i]);
            calx_cputicks_disarm(E.threads[i].tick_slot);
            E.threads[i].tick_slot = -1;
        }
    for (size_t i = 0; i < n; i++)
        resolve_name(&E.threads[E.pass[i].ti]);
    if (kind != PASS_SAMPLER) {
        const pass_entry *main = NULL;
        for (size_t i = 0; i < n && !main; i++)
            if (E.threads[E.pass[i].ti].is_main)
                main = &E.pass[i];
        sample_native_threads(main);
    }
    registry_sweep();
    publish_known();
    calx_nogil_unlock();
    /* Last: the Python it runs may release the GIL (credit_awaiting takes
       the engine lock around what it credits). */
    credit_loops(kind == PASS_FINAL, wall);
    E.in_pass = 0;
}

/* ---- the pending call (main thread, GIL) ------------------------------ */

/* Whether the main thread answers from inside the C call the tick found
   it in (INTERNALS, "Native calls without a threshold"): it is at the
   frame and instruction the tick's peek read, that instruction a call,
   it was on a CPU at the tick (a call that blocked holds the thread at
   the same place, but the interval's CPU went before it; a preempted
   thread holds still in a call of nanoseconds as in a long one), and it
   did not look at its eval breaker between the peek and the poke.  From
   3.10 the interpreter looks at its eval breaker at the end of a call,
   at that call, and otherwise only at a backward jump or a function's
   start, so a tick that finds the thread in bytecode is answered
   elsewhere, and a Python callee in its own frame.  But a call shorter
   than the time from the peek to the poke ends before it, and in a loop
   the thread may come back to the same call before its next look at the
   breaker (`while perf_counter() < end` read 63% native so): the tick
   sets the "signals pending" bit that only the main thread's look clears
   (calx_main_looked_sigsafe: its own eval breaker's from 3.13, the
   runtime's flag before), and reads it again after the poke.  (Before
   that probe, a threshold on how soon the answer came after the poke left
   such loops 15-40% native in CI on 3.9/3.10, and the rule was kept to
   3.13+.)  Not on the free-threaded build yet: there most ticks
   found the main thread preempted (a 0.80 native share read 0.32 with
   them left out, and a perf_counter loop 21% native with them in). */
static int still_in_call(const main_cut *cut)
{
    return STILL_RULE && cut->running && cut->looked == 0 &&
           calx_peek_still_in_call(E.main_ts, &cut->peek);
}

static int pending_call(void *arg)
{
    (void)arg;
    if (!atomic_load(&E.active) || getpid() != E.pid)
        return 0;
    atomic_store(&E.answering, 1);
    int64_t main_cpu = cal_clock_thread_cpu_sigsafe(E.main_clock);
    /* The sampler stamps the tick after poking, holding E.mu: a call that
       ran before that waits here, and its CPU clock (read above) is older
       than the stamp: it was prompt. */
    pthread_mutex_lock(&E.mu);
    int64_t tick_cpu = E.tick_main_cpu, tick_wall = E.tick_wall;
    main_cut cut = E.cut;
    int looked = E.main_looked, asleep = E.main_asleep;
    pthread_mutex_unlock(&E.mu);
    /* The delay in the main thread's own CPU time: immune to it being
       preempted or waiting for the GIL meanwhile (those are not native).
       Unless it looked at its eval breaker meanwhile and did not answer
       (3.14t: another thread was handling the interpreter's pending
       calls, and the main thread's look only handed the bit on to it,
       Python/ceval_gil.c's make_pending_calls): then it was in bytecode
       within PROBE_NS of the tick, and the delay is not native code. */
    int64_t delay_cpu = tick_cpu >= 0 && main_cpu >= tick_cpu ? main_cpu - tick_cpu : 0;
    int native = (delay_cpu > SERVICE_NS || still_in_call(&cut)) && !looked;
    /* A peek through generator frames on the free-threaded build is
       trusted only when the thread held still, in native code, from the
       tick to here: in Python it may have switched frames faster than the
       peek reads them, and the live stack stands (pyinternals.c). */
    if (cut.peek.fragile && !native)
        cut.peek.n = 0;
    /* Late with no CPU used since the tick that asked, and found blocked
       when it was late: off the CPU since then, even if no later tick came
       to see it (a short block).  Late with no CPU used but runnable, it
       was preempted (a loaded machine), not blocked, and the CPU before
       the tick is the line's it answers on. */
    if (!native && asleep && tick_cpu >= 0 &&
        cal_clock_now_ns() - tick_wall > TAKEOVER_NS)
        cut.blocked = 1;
    int guard = calx_runtime_guard_enter();
    sample_pass(PASS_MAIN, native, &cut);
    calx_runtime_guard_leave(guard);
    pthread_mutex_lock(&E.mu);
    atomic_store(&E.call_queued, 0);
    atomic_fetch_add(&E.served, 1);
    pthread_cond_broadcast(&E.cv);
    pthread_mutex_unlock(&E.mu);
    return 0;
}

/* The call any thread may run (3.12+ with a GIL), queued while the main
   thread is blocked: whichever thread holds the GIL samples the others. */
static int others_call(void *arg)
{
    (void)arg;
    atomic_fetch_add(&E.others_served, 1);
    if (!atomic_load(&E.active) || getpid() != E.pid)
        return 0;
    int guard = calx_runtime_guard_enter();
    sample_pass(PASS_SAMPLER, 0, NULL);
    calx_runtime_guard_leave(guard);
    return 0;
}

/* ---- the sampler thread ----------------------------------------------- */

static void abs_deadline(struct timespec *ts, int64_t from_now_ns)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    int64_t ns = ts->tv_nsec + from_now_ns;
    ts->tv_sec += ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
}

#define REQUEST_CHECK_NS 100000000 /* how often to look for a request file */

/* Is a periodic write due, or asked for?  Returns the reason, or NULL.
   Sampler thread, E.mu held. */
static const char *periodic_due(int64_t now)
{
    static const char *const reasons[CALX_PERIODIC_JOBS][2] = {
        {"interval", "request"},
        {"snapshot", "snapshot-request"},
        {"heap", "heap-request"}};
    if (!E.periodic)
        return NULL;
    for (int i = 0; i < CALX_PERIODIC_JOBS; i++) {
        struct periodic_job *j = &E.jobs[i];
        if (j->ns > 0 && now >= j->next) {
            j->next = now + j->ns;
            return reasons[i][0];
        }
        if (j->request_path && now >= j->next_check) {
            j->next_check = now + REQUEST_CHECK_NS;
            if (calx_runtime_entry_exists(j->request_path))
                return reasons[i][1];
        }
    }
    return NULL;
}

/* An exponential gap of mean q, bounded so that one unlucky draw cannot
   stall sampling for long. */
static int64_t tick_gap(cal_rand *rng)
{
    double gap = cal_rand_exp(rng, (double)E.interval_ns);
    if (gap > 10.0 * (double)E.interval_ns)
        gap = 10.0 * (double)E.interval_ns;
    return (int64_t)gap;
}

/* Wait on E.cv (E.mu held) until `until` (cal_clock_now_ns time), a stop,
   or, if served is not NULL, a service after *served. */
static void wait_until(int64_t until, const unsigned long long *served)
{
    int64_t left = until - cal_clock_now_ns();
    if (left <= 0)
        return;
    struct timespec dl;
    abs_deadline(&dl, left);
    while (!atomic_load(&E.stopping) &&
           (!served || atomic_load(&E.served) == *served) &&
           pthread_cond_timedwait(&E.cv, &E.mu, &dl) != ETIMEDOUT)
        ;
}

/* 3.14t: the probe found that the main thread looked at its eval breaker
   since it was armed (`probe`, calx_main_probe_sigsafe), and that look did
   not start the answer.  A look that ends a C call runs the call at once,
   and the sampler thread, late on a loaded machine (or holding E.mu, which
   the call waits for), saw that look and took it for one that handed the
   call on: the C call's delay then counted as Python (hashlib, zlib and
   sort lines 10-33% Python in 14 runs of 15 beside two busy processes).
   The probe is read before `answering`, which the answer sets just after
   its look. */
static int looked_not_answering(int probe)
{
    return probe == 1 && !atomic_load(&E.answering);
}

/* The main thread's CPU time since the tick that asked, in ns (INT64_MAX
   when unknown). */
static int64_t main_ran_since_tick(void)
{
    cal_thread_times now;
    if (E.tick_main_cpu < 0 || cal_clock_thread_times_sigsafe(E.main_clock, &now) != 0)
        return INT64_MAX;
    return now.cpu_ns - E.tick_main_cpu;
}

/* The main thread's run-queue delay with its clocks at a tick (E.mu
   held): read again if, since a tick last read it, it both ran and waited
   RUN_DELAY_MIN_NS (as run_delay_delta); else as read then (a busy or a
   blocked main thread costs no reads; the rest is in a later interval). */
static int64_t main_run_delay(int64_t wall, const cal_thread_times *now)
{
    int64_t cpu = now->cpu_ns - E.delay_cpu;
    if (E.delay == DELAY_UNREAD ||
        (cpu > 0 && wall - E.delay_wall - cpu >= RUN_DELAY_MIN_NS)) {
        int64_t delay = cal_clock_thread_run_delay(cal_clock_thread_tid(E.main_clock));
        if (delay >= 0) {
            E.delay = delay;
            E.delay_cpu = now->cpu_ns;
            E.delay_wall = wall;
        }
    }
    return E.delay;
}

/* One tick (E.mu held): ask the main thread for a sample, or, if it has not
   answered the last request yet, poke it again; either way the main
   thread's interval now ends here (E.cut).  The cut and the CPU clock are
   read after the poke: the first microseconds after this thread wakes up
   can be slow (a virtual CPU coming out of idle), and that is not the main
   thread's doing. */
static void tick(void)
{
    calx_gpu_tick(cal_clock_now_ns());
    main_cut cut;
    /* Where still_in_call is used: its CPU clock (a system call), and the
       look armed, both just before the peek.  (Armed just after the peek,
       the calls' share read a few points higher, 3.9 0.43-0.48 of 0.79
       against 0.30-0.45, but a coroutine's `return` line got 8.7% of its
       chain's time in one of ten runs on 3.13, against at most 4% before:
       where a peek is given up, the line is where the main thread
       answers, and the order moved that.) */
    cut.peek_cpu = STILL_RULE ? cal_clock_thread_cpu_sigsafe(E.main_clock) : -1;
    if (STILL_RULE)
        (void)calx_main_looked_sigsafe();
    calx_peek_frames_sigsafe(E.main_ts, &cut.peek); /* before it can answer */
    int queue = !atomic_load(&E.call_queued);
    if (queue) {
        atomic_store(&E.call_queued, 1);
        atomic_store(&E.answering, 0);
        if (Py_AddPendingCall(pending_call, NULL) != 0) {
            atomic_store(&E.call_queued, 0); /* queue full: skip the tick */
            return;
        }
    }
    calx_poke_main_thread_sigsafe();
    cut.looked = STILL_RULE ? calx_main_looked_sigsafe() : -1; /* (arms it again) */
    /* 3.14t: armed at the asking; a later tick that finds it spent saw
       the main thread look without answering (pyinternals.h). */
    int looked = calx_main_probe_sigsafe(); /* (and arms it again) */
    if (queue)
        E.main_looked = E.main_asleep = 0;
    else if (looked_not_answering(looked))
        E.main_looked = 1;
    cut.wall = cal_clock_now_ns();
    int read = cal_clock_thread_times_sigsafe(E.main_clock, &cut.times) == 0;
    /* Its CPU clock moved from before the peek to here: it was on a CPU. */
    cut.running = read && cut.peek_cpu >= 0 && cut.times.cpu_ns > cut.peek_cpu;
    cut.delay = read ? main_run_delay(cut.wall, &cut.times) : DELAY_UNREAD;
    if (queue) {
        E.tick_main_cpu = read ? cut.times.cpu_ns : -1;
        E.tick_wall = cut.wall;
        E.tick_times = cut.times;
    }
    /* Asked at an earlier tick, over a millisecond ago, and it has used
       (almost) no CPU since: it is off the CPU (blocked, or waiting for
       the GIL) since then, and will answer when that ends.  Unless it is
       runnable (the kernel's state R: waiting for a CPU, on a loaded
       machine), or collecting garbage (it holds the GIL and works): then
       it was preempted, not blocked, and answers as soon as it runs again.
       (Taken for blocked, its answer ended its interval there, and the
       busy line's CPU after the asking tick went to the line it answered
       on: a sleep that followed got 9.5 ms of it once in CI.) */
    calx_gcstats_tick_sigsafe(E.interp, E.main_ts, cut.wall, &cut.gc);
    cut.blocked =
        read && !queue && E.tick_main_cpu >= 0 && !cut.gc.running &&
        (E.cut.blocked ||
         (cut.wall - E.tick_wall > TAKEOVER_NS &&
          cut.times.cpu_ns - E.tick_main_cpu <= SERVICE_NS &&
          cal_clock_thread_runnable(cal_clock_thread_tid(E.main_clock)) != 1));
    cut.asked = E.tick_times;
    if (read)
        E.cut = cut;
}

/* The free-threaded build: the call asked at the last tick is still queued
   but the main thread is no longer signalled to run it (another thread
   ran the interpreter's pending calls and cleared every thread's bit:
   pyinternals.h).  The main thread was running bytecode meanwhile, not
   native code: ask again, as from now, so that the delay it answers with
   is measured from here (E.mu held). */
static void ask_again(int64_t now)
{
    calx_poke_main_thread_sigsafe();
    cal_thread_times times;
    if (cal_clock_thread_times_sigsafe(E.main_clock, &times) == 0) {
        E.tick_main_cpu = times.cpu_ns;
        E.tick_times = times;
    }
    E.tick_wall = now;
    E.main_asleep = 0;
    /* Its signal was gone for a while, and it may have left the call the
       last tick's peek found it in and come back to it since: where it
       answers says nothing of where it was then (still_in_call). */
    E.cut.looked = 1;
}

/* The sampler thread takes the GIL (E.mu not held).  Its thread state is
   made the first time, without the GIL (PyThreadState_New allows it): a
   sampler thread that never needs the GIL, such as one stopped for the
   next fork before its first tick, neither makes one nor takes the GIL to
   delete it.  Returns 0, or -1 if memory ran out (no GIL taken). */
static int sampler_take_gil(PyThreadState **own)
{
    if (!*own) {
        *own = PyThreadState_New(E.interp);
        if (!*own)
            return -1;
    }
    PyEval_RestoreThread(*own);
    return 0;
}

/* Whether the main thread is blocked on the GIL's own locks: waiting
   for it, or for another thread to take it after being made to let it
   go.  (0 where that cannot be read.) */
static int main_waits_for_gil(void)
{
    uintptr_t lo, hi, addr;
    return calx_gil_bounds(E.interp, &lo, &hi) == 0 &&
           cal_clock_thread_futex_wait(cal_clock_thread_tid(E.main_clock), &addr) ==
               1 &&
           addr >= lo && addr < hi;
}

/* The main thread is blocked: ask the thread that holds the GIL to
   sample the others, with a call any thread may run, rather than queue
   for the GIL.  Returns 1 if asked (now or at an earlier tick, not
   answered yet: it answers when it next looks at its eval breaker), 0 if
   this thread should take the GIL itself: nobody holds it (it is quick to
   take), or no such call can be queued (before 3.12, the free-threaded
   build: the caller queues for it). */
static int ask_holder(void)
{
    if (!calx_gil_holder_sigsafe(E.interp))
        return 0;
    unsigned long long asked = atomic_load(&E.others_asked);
    if (asked != atomic_load(&E.others_served))
        return 1;
    atomic_store(&E.others_asked, asked + 1); /* (before it can run) */
    if (calx_any_thread_call(E.interp, others_call, NULL) == 0)
        return 1;
    atomic_store(&E.others_asked, asked);
    return 0;
}

static void *sampler_main(void *arg)
{
    unsigned mine = (unsigned)(uintptr_t)arg;
    cal_rand rng;
    cal_rand_seed(&rng, (uint64_t)cal_clock_now_ns() ^ ((uint64_t)getpid() << 32));

    /* Everything this thread allocates is the profiler's own. */
    (void)calx_runtime_guard_enter();
    PyThreadState *own = NULL; /* this thread's, once it needs one */

    pthread_mutex_lock(&E.mu);
    E.sampler_ready = 1;
    pthread_cond_broadcast(&E.cv);
    /* The ticks are a Poisson process of their own: each is drawn from the
       previous one, whatever the main thread did in between (a tick late
       because this thread was busy restarts the process from now). */
    int64_t next_tick = cal_clock_now_ns() + tick_gap(&rng);
    int64_t takeover_at = 0; /* waiting for the main thread until then; 0: not */
    int64_t probe_at = 0;    /* 3.14t: a look at the probe is due then; 0: not */
    int probes_again = 0;    /* looks again since the tick (PROBES_AGAIN) */
    int probing = calx_main_probe_sigsafe() >= 0;
    unsigned long long served = 0;
    while (!atomic_load(&E.stopping) && atomic_load(&E.generation) == mine) {
        int64_t now = cal_clock_now_ns();
        if (!takeover_at) {
            calx_session_check_switch(now);
            const char *why = periodic_due(now);
            if (why) {
                /* The callback writes the profile: with the GIL, from here. */
                pthread_mutex_unlock(&E.mu);
                if (sampler_take_gil(&own) == 0) {
                    if (!atomic_load(&E.stopping) && atomic_load(&E.active)) {
                        PyObject *r = PyObject_CallFunction(E.periodic, "s", why);
                        if (r)
                            Py_DECREF(r);
                        else
                            PyErr_Clear();
                    }
                    PyEval_SaveThread();
                }
                pthread_mutex_lock(&E.mu);
                continue;
            }
        }
        int64_t until =
            takeover_at && takeover_at < next_tick ? takeover_at : next_tick;
        wait_until(probe_at && probe_at < until ? probe_at : until,
                   takeover_at ? &served : NULL);
        if (atomic_load(&E.stopping))
            break;
        if (takeover_at && atomic_load(&E.served) != served)
            takeover_at = probe_at = 0; /* answered */
        now = cal_clock_now_ns();
        if (now >= next_tick) {
            /* A forked child's first tick: its threads leave its CPU. */
            calx_runtime_pin_end();
            next_tick = (next_tick + 1000000 < now ? now : next_tick) + tick_gap(&rng);
            served = atomic_load(&E.served);
            tick();
            /* Found blocked since an earlier tick: it will not answer
               now, so the others are sampled at once (waiting lost them
               every tick that came within TAKEOVER_NS of the one before). */
            takeover_at = E.cut.blocked ? now : now + TAKEOVER_NS;
            probe_at = probing ? now + PROBE_NS : 0;
            probes_again = 0;
            continue;
        }
        if (probe_at && now >= probe_at) {
            /* Not answered yet: if it looked at its eval breaker since the
               tick, it is running bytecode and its answer was held up.  A
               bit still set says so only if it ran meanwhile: else (off
               a CPU since the tick, as when this thread's own wake-up took
               its CPU) it looks again a probe later, a few times only: a
               blocked main thread would have it wake every PROBE_NS. */
            probe_at = 0;
            if (atomic_load(&E.call_queued)) {
                int probe = calx_main_probe_sigsafe();
                if (looked_not_answering(probe))
                    E.main_looked = 1;
                else if (probe == 0 && probes_again < PROBES_AGAIN &&
                         main_ran_since_tick() < PROBE_NS / 3) {
                    probes_again++;
                    probe_at = now + PROBE_NS;
                }
            }
            continue;
        }
        if (!takeover_at || now < takeover_at)
            continue;
        if (atomic_load(&E.call_queued) && calx_main_call_unsignalled_sigsafe()) {
            ask_again(now); /* and wait for its answer again */
            takeover_at = now + TAKEOVER_NS;
            continue;
        }
        takeover_at = 0;
        /* Late: blocked, or preempted (runnable, on a loaded machine)?
           Read once per block: a tick that finds it blocked says so. */
        if (atomic_load(&E.call_queued) && !E.cut.blocked && !E.main_asleep)
            E.main_asleep =
                cal_clock_thread_runnable(cal_clock_thread_tid(E.main_clock)) == 0;
        /* The main thread did not answer.  If it holds the GIL it is in
           native code: nobody else can run bytecode, so there is nothing
           new to see, and asking for the GIL would only block this thread
           (and stop the ticks) until the call returns.  Otherwise it is
           blocked or runs without the GIL: sample the others ourselves. */
        if (calx_gil_holder_sigsafe(E.interp) == E.main_ts)
            continue; /* (never, without a GIL: the others run meanwhile) */
        /* Nor if it waits for the GIL: it answers as soon as it has it,
           while this thread, one more in the queue for it behind threads
           that run bytecode, would wait tens or hundreds of milliseconds
           (CPython's GIL is not fair), and the ticks with it. */
        if (main_waits_for_gil())
            continue;
        /* Nor if another thread holds it and can be asked instead. */
        if (ask_holder())
            continue;
        pthread_mutex_unlock(&E.mu);
        if (sampler_take_gil(&own) == 0) {
            if (!atomic_load(&E.stopping) && atomic_load(&E.active))
                sample_pass(PASS_SAMPLER, 0, NULL);
            PyEval_SaveThread();
        }
        pthread_mutex_lock(&E.mu);
    }
    pthread_mutex_unlock(&E.mu);

    if (!own || atomic_load(&E.leaving))
        return NULL; /* none made, or the process is ending: it goes with it */
    /* Clearing a thread state needs the GIL: whoever stops this thread
       releases it while joining. */
    PyEval_RestoreThread(own);
    if (E.sampler_ident == (unsigned long)pthread_self())
        E.sampler_ident = 0;
    PyThreadState_Clear(own);
    PyThreadState_DeleteCurrent();
    return NULL;
}

/* ---- lifecycle -------------------------------------------------------- */

/*
 * THREADS AROUND FORK
 *
 * Our threads (sampler, GIL watcher, GPU poller, signal helper) stop before
 * a fork and start again after it in the parent, so that no thread of ours
 * is copied half-way through a lock and CPython 3.12+ does not count them
 * when it warns that a multi-threaded process forks.  Several of the
 * program's threads may fork at once, each running the hooks; so:
 *   - F.forking counts the forks between their before and after_in_parent
 *     hooks: the first to arrive stops the threads, the last to leave
 *     starts them (F.stopped says they are stopped);
 *   - one thread at a time stops or starts them (F.busy, also taken by
 *     calx_sampler_stop); the others wait for it without the GIL, which
 *     the busy one needs (it releases the GIL while joining, since the
 *     sampler thread may be waiting for it, and takes it back);
 *   - F.mu is a leaf: never held while waiting for the GIL, a join or
 *     another lock, and never across fork(); the child re-initialises it
 *     (another forking thread may have held it) and starts with no fork in
 *     progress, since the threads that were forking are not in the child.
 * Stopping asks every thread first and then joins them all, so a fork
 * pays for one wake-up, not one per thread; starting does not wait for
 * the new threads to run.  The profile goes on across the pause.  A
 * forked child that profiles itself starts its sampler and signal helper
 * on its main thread's CPU until its first tick (runtime.h says why).
 */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled when busy is cleared */
    int forking;       /* forks between before and after_in_parent */
    int stopped;       /* our threads are stopped for them */
    int busy;          /* a thread is stopping or starting them */
    int resume_queued; /* a pending call will start them (main thread) */
} F = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* F.mu held, GIL held: wait until no thread is stopping or starting ours,
   without the GIL (the busy thread needs it to finish).  Returns with F.mu
   held and F.busy clear. */
static void wait_not_busy_locked(void)
{
    while (F.busy) {
        pthread_mutex_unlock(&F.mu);
        Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&F.mu);
        while (F.busy)
            pthread_cond_wait(&F.cv, &F.mu);
        pthread_mutex_unlock(&F.mu);
        Py_END_ALLOW_THREADS pthread_mutex_lock(&F.mu);
    }
}

/* End a stop or start: `stopped` is the threads' state now. */
static void transition_end(int stopped)
{
    pthread_mutex_lock(&F.mu);
    F.stopped = stopped;
    F.busy = 0;
    pthread_cond_broadcast(&F.cv);
    pthread_mutex_unlock(&F.mu);
}

static void after_fork_child(void)
{
    /* The sampler thread does not exist in a child; the parent owns the
       profile.  The child runs unprofiled unless it restarts
       (calx_sampler_restart_in_child, from Python's after_in_child hook).
       No allocation and no lock here: the other threads of the parent,
       ours or the program's, may have held any lock at fork(). */
    atomic_store(&E.active, 0);
    E.thread_started = 0;
    E.sampler_ident = 0; /* CPython deletes the other threads' states */
    E.paused_for_fork = 0;
    pthread_mutex_t fresh_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cv = PTHREAD_COND_INITIALIZER;
    F.mu = fresh_mu;
    F.cv = fresh_cv;
    F.forking = F.stopped = F.busy = F.resume_queued = 0;
    calx_gilwatch_reset();
    calx_nogil_after_fork_child();
    calx_cputicks_after_fork_child();
    calx_memory_after_fork_child();
    calx_signals_after_fork_child();
    calx_gpu_after_fork_child();
    calx_session_after_fork_child();
    E.mu = fresh_mu;
    pthread_cond_init(&E.cv, NULL);
}

/* Start the sampler and GIL-watcher threads (GIL held).  wait_ready: until
   the sampler thread runs (at the start of profiling, so that the
   program's first milliseconds are sampled; not after a fork, which
   would pay a wake-up each time). */
static int threads_start(int wait_ready)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&E.cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_store(&E.stopping, 0);
    atomic_store(&E.leaving, 0);
    atomic_store(&E.call_queued, 0);
    /* (a call left queued from before, or lost in a fork, asks no more) */
    atomic_store(&E.others_served, atomic_load(&E.others_asked));
    atomic_store(&E.active, 1);
    E.sampler_ready = 0;

    int rc = calx_gilwatch_start(E.interp);
    if (rc != 0) {
        atomic_store(&E.active, 0);
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    /* The sampler thread must not receive the program's signals. */
    unsigned generation = atomic_fetch_add(&E.generation, 1) + 1;
    rc = calx_runtime_thread_start_near(&E.thread, sampler_main,
                                        (void *)(uintptr_t)generation);
    if (rc != 0) {
        calx_gilwatch_stop();
        atomic_store(&E.active, 0);
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    E.thread_started = 1;
    /* Known now, not once it runs: the passes and the native-thread scan
       skip it. */
    E.sampler_ident = (unsigned long)E.thread;
    E.sampler_tid = calx_runtime_thread_tid(E.thread);
    if (wait_ready) {
        Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&E.mu);
        while (!E.sampler_ready)
            pthread_cond_wait(&E.cv, &E.mu);
        pthread_mutex_unlock(&E.mu);
        Py_END_ALLOW_THREADS
    }
    if (calx_gpu_start(E.gpu_mode, GPU_PERIOD_NS > E.interval_ns ? GPU_PERIOD_NS
                                                                 : E.interval_ns) != 0)
        E.gpu_mode =
            CALX_GPU_OFF; /* no poller thread: no GPU columns, the run goes on */
    return 0;
}

enum stop_how {
    STOP_JOIN,    /* the end of profiling in a process that goes on */
    STOP_FORK,    /* before a fork: the signal helper too, and gone */
    STOP_LEAVING, /* the process is leaving (os._exit, exec, a signal) */
};

/* Stop our threads (GIL held, and F.busy: the caller's alone; the GIL is
   released while joining, since the sampler thread may be waiting for
   it).  Each is asked to end before any is waited for.  STOP_FORK: the
   signal helper too (calx_signals_fork_after_parent starts it again), and
   wait until the kernel no longer counts them, or the fork that follows
   looks multi-threaded (cal_clock.h).  STOP_LEAVING: the sampler and the
   watcher are neither woken nor waited for (a child that leaves at once
   would wait for them to have run at all): told to end while we hold the
   GIL, the sampler thread takes no more samples (it looks at E.stopping
   whenever it gets the GIL) and ends without the GIL, and the watcher
   touches nothing but its own state; unless a pass of the sampler's is
   under way (it may have let the GIL go while calling Python): then it is
   waited for, or it would go on with the profile being written.  The
   profile stays as it is. */
static void threads_stop(enum stop_how how)
{
    calx_runtime_pin_end(); /* while the ids it reads are still theirs */
    int helper = how == STOP_FORK && calx_signals_fork_ask();
    int sampler = E.thread_started;
    if (sampler) {
        int wait = how != STOP_LEAVING || E.in_pass;
        pthread_mutex_lock(&E.mu);
        atomic_store(&E.leaving, !wait);
        atomic_store(&E.stopping, 1);
        if (wait)
            pthread_cond_broadcast(&E.cv);
        pthread_mutex_unlock(&E.mu);
        if (!wait) {
            pthread_detach(E.thread);
            sampler = 0;
        }
    }
    int watcher = calx_gilwatch_stop_ask();
    int poller = calx_gpu_pause_ask(); /* always joined: NVML may be unloaded next */
    int sampler_tid = E.sampler_tid, watcher_tid = calx_gilwatch_tid();
    if (how == STOP_LEAVING) {
        if (watcher) {
            calx_gilwatch_stop_detach();
            watcher = 0;
        }
    }
    Py_BEGIN_ALLOW_THREADS if (sampler) pthread_join(E.thread, NULL);
    if (watcher)
        calx_gilwatch_stop_join();
    if (poller)
        calx_gpu_pause_join();
    if (helper)
        calx_signals_fork_join();
    if (how == STOP_FORK) {
        if (sampler)
            cal_clock_wait_thread_gone(sampler_tid);
        if (watcher)
            cal_clock_wait_thread_gone(watcher_tid);
    }
    Py_END_ALLOW_THREADS if (sampler)
    {
        E.sampler_ident = 0; /* joined: its thread state is gone */
        E.sampler_tid = 0;   /* a later thread of the program's may get its id */
    }
    E.thread_started = 0;
}

/* Start a fresh session (profile) and sample it every E.interval_ns;
   forked_child: in a forked child (calx_sampler_restart_in_child), where
   the parent's profile is left as it is. */
static int engine_start(int forked_child)
{
    if (calx_session_begin(forked_child) != 0)
        return -1;
    E.interp = PyThreadState_Get()->interp;
    E.main_ts = PyThreadState_Get();
    calx_peek_prepare(E.main_ts);
    E.main_ident = PyThread_get_thread_ident();
    E.pid = getpid();
    E.dropped = 0;
    E.torn = 0;
    E.ticks_on = calx_cputicks_start(E.interval_ns, E.interp) == 0;
    clockid_t sched;
    if (pthread_getcpuclockid(pthread_self(), &sched) != 0) {
        PyErr_SetString(PyExc_OSError, "calipers: no per-thread CPU clock");
        return -1;
    }
    E.main_clock = cal_clock_thread_base(sched);
    E.cut = (main_cut){0}; /* a parent's, after a fork */
    E.delay = DELAY_UNREAD;
    E.nloops = 0; /* and the parent's loops' waiting */
    E.tick_main_cpu = -1;

    Py_CLEAR(E.threading_active);

    /* Threads that already exist are counted from now on. */
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(E.interp); ts;
         ts = PyThreadState_Next(ts)) {
        if (ts->thread_id == 0)
            continue;
        clockid_t c;
        if (pthread_getcpuclockid((pthread_t)ts->thread_id, &c) == 0) {
            calx_thread *th =
                registry_add((unsigned long)ts->thread_id, cal_clock_thread_base(c), 1);
            if (th)
                th->ts = ts;
        }
    }
    publish_known();
    calx_gcstats_start(E.interp, calx_session_profile());
    /* And so are native ones: every thread the scans find later was born
       since profiling started.  A forked child has only the thread that
       forked: any other is born since, and there is nothing to scan. */
    E.nnatives = 0;
    E.native_scans = 0;
    if (forked_child) {
        E.native_scans = 1;
        open_task_dir();
    } else {
        sample_native_threads(NULL);
    }

    /* A child that leaves at once (a fork per task) must not pay a wake-up
       to start: its first interval just begins at the fork. */
    return threads_start(!forked_child);
}

int calx_sampler_start(int64_t interval_ns, int gpu_mode, calx_filter *filter)
{
    if (atomic_load(&E.active)) {
        PyErr_SetString(PyExc_RuntimeError, "calipers is already profiling");
        return -1;
    }
    static int atfork_done;
    if (!atfork_done) {
        pthread_atfork(NULL, NULL, after_fork_child);
        atfork_done = 1;
    }
    calx_session_set_filter(filter);
    E.interval_ns = interval_ns;
    E.gpu_mode = gpu_mode;
    return engine_start(0);
}

int calx_sampler_restart_in_child(void)
{
    if (!calx_session_profile() || getpid() == E.pid || atomic_load(&E.active)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "calipers: not a forked child of a profiled process");
        return -1;
    }
    /* The parent's profile, code cache and threads stay with the parent,
       and so do its periodic writes. */
    Py_CLEAR(E.periodic);
    E.gpu_mode = CALX_GPU_OFF; /* the parent's poller counts this process too */
    for (int i = 0; i < CALX_PERIODIC_JOBS; i++) {
        free(E.jobs[i].request_path);
        E.jobs[i] = (struct periodic_job){0};
    }
    calx_runtime_pin_begin();
    int guard = calx_runtime_guard_enter();
    /* The parent's profile and code table are left as they are, not freed
       (session.c says why). */
    Py_CLEAR(E.threading_active);
    E.nthreads = 0;
    E.nnatives = 0;
    E.threads_changed = 1;
    int rc = engine_start(1);
    calx_runtime_guard_leave(guard);
    return rc;
}

int calx_sampler_stop(int leaving)
{
    if (!calx_session_profile() || getpid() != E.pid)
        return 0;
    int guard = calx_runtime_guard_enter();
    /* Another thread may be stopping or starting our threads for a fork. */
    pthread_mutex_lock(&F.mu);
    wait_not_busy_locked();
    F.busy = 1;
    int stopped = F.stopped;
    pthread_mutex_unlock(&F.mu);
    threads_stop(leaving ? STOP_LEAVING : STOP_JOIN);
    transition_end(stopped);
    if (atomic_load(&E.active)) {
        calx_memory_stop();
        sample_pass(PASS_FINAL, 0, NULL);
        calx_gcstats_stop();
        calx_gpu_close();
        calx_session_stamp();
        atomic_store(&E.active, 0);
        /* The profile has its own copies of every name: let the code
           objects go. */
        calx_session_release_codes();
        Py_CLEAR(E.threading_active);
    }
    calx_runtime_guard_leave(guard);
    return 0;
}

void calx_sampler_unwatch_signals(int leaving)
{
    /* The signal helper stops for forks too: one at a time. */
    pthread_mutex_lock(&F.mu);
    wait_not_busy_locked();
    F.busy = 1;
    int stopped = F.stopped;
    pthread_mutex_unlock(&F.mu);
    calx_signals_stop(leaving);
    transition_end(stopped);
}

int calx_sampler_fork_before(void)
{
    pthread_mutex_lock(&F.mu);
    F.forking++;
    wait_not_busy_locked();
    int stop = !F.stopped; /* the first fork in: stop them */
    if (stop)
        F.busy = 1;
    pthread_mutex_unlock(&F.mu);
    if (!stop)
        return 0;
    int guard = calx_runtime_guard_enter();
    E.paused_for_fork = calx_sampler_running() && E.thread_started;
    threads_stop(STOP_FORK);
    calx_runtime_guard_leave(guard);
    transition_end(1);
    return 0;
}

/* Start the threads the forks stopped, if no fork is in progress any more
   (GIL held).  queued: called as the pending call. */
static int resume_after_fork(void *queued)
{
    pthread_mutex_lock(&F.mu);
    if (queued)
        F.resume_queued = 0;
    /* A fork that began since leaves them stopped; its end starts them. */
    int start = F.forking == 0 && F.stopped && !F.busy;
    if (start)
        F.busy = 1;
    pthread_mutex_unlock(&F.mu);
    if (!start)
        return 0;
    calx_signals_fork_after_parent();
    if (E.paused_for_fork && calx_sampler_running()) {
        int guard = calx_runtime_guard_enter();
        if (threads_start(0) != 0)
            PyErr_Clear(); /* no thread: the profile ends here, the program goes on */
        calx_runtime_guard_leave(guard);
    }
    E.paused_for_fork = 0;
    transition_end(0);
    return 0;
}

void calx_sampler_fork_after_parent(void)
{
    pthread_mutex_lock(&F.mu);
    if (F.forking > 0)
        F.forking--;
    int last = F.forking == 0 && F.stopped && !F.resume_queued;
    /* Python 3.13 counts the threads after the after_in_parent hooks: in
       the main thread, start ours once os.fork() has returned. */
    int queue = last && PyThread_get_thread_ident() == E.main_ident;
    if (queue)
        F.resume_queued = 1;
    pthread_mutex_unlock(&F.mu);
    if (queue) {
        if (Py_AddPendingCall(resume_after_fork, &F) == 0)
            return;
        pthread_mutex_lock(&F.mu); /* the queue is full: now, then */
        F.resume_queued = 0;
        pthread_mutex_unlock(&F.mu);
    }
    if (last)
        resume_after_fork(NULL);
}

void calx_sampler_set_awaiting(PyObject *callback)
{
    Py_XINCREF(callback);
    Py_XSETREF(E.awaiting, callback);
}

int calx_sampler_set_periodic(PyObject *callback, const int64_t interval_ns[],
                              const char *const request_path[])
{
    char *paths[CALX_PERIODIC_JOBS] = {NULL};
    for (int i = 0; i < CALX_PERIODIC_JOBS; i++)
        if (request_path[i] && !(paths[i] = strdup(request_path[i]))) {
            for (int k = 0; k < i; k++)
                free(paths[k]);
            PyErr_NoMemory();
            return -1;
        }
    pthread_mutex_lock(&E.mu);
    Py_XINCREF(callback);
    PyObject *old = E.periodic;
    E.periodic = callback;
    int64_t now = cal_clock_now_ns();
    for (int i = 0; i < CALX_PERIODIC_JOBS; i++) {
        free(E.jobs[i].request_path);
        E.jobs[i] =
            (struct periodic_job){interval_ns[i], paths[i], now + interval_ns[i], now};
    }
    pthread_mutex_unlock(&E.mu);
    Py_XDECREF(old);
    return 0;
}

void calx_sampler_snapshot(void)
{
    if (!calx_sampler_running())
        return;
    int guard = calx_runtime_guard_enter();
    calx_memory_snapshot();
    calx_session_stamp();
    calx_runtime_guard_leave(guard);
}

int calx_sampler_running(void) { return atomic_load(&E.active) && getpid() == E.pid; }

int64_t calx_sampler_dropped(void)
{
    calx_nogil_lock();
    int64_t n = E.dropped;
    calx_nogil_unlock();
    return n;
}

int64_t calx_sampler_torn(void)
{
    calx_nogil_lock();
    int64_t n = E.torn;
    calx_nogil_unlock();
    return n;
}
