/*
 * cputicks — see cputicks.h.
 *
 * WHY
 *
 * With a GIL, passes come when the GIL changes hands and find the other
 * threads where they wait for it: where they let it go, at a backward
 * jump or a call after their switch interval, not where their CPU went.
 * A worker alternating json.loads (C that keeps the GIL from start to
 * end) with a Python loop let it go only in the loop, and the loop line
 * read up to 1.4x its CPU (3.13), the json line as little as 0.78x.  (On
 * 3.14t with its GIL switched on the passes still place the CPU.)  A thread's own tick
 * is drawn from its CPU time alone.
 *
 * Without a GIL the sampler reads other threads wherever they are, and a
 * thread that is runnable but preempted sits where the scheduler stopped
 * it: not a place drawn at random from its CPU time (sampler.c, OFF-CPU
 * SAMPLES).  Reading its CPU clock before and after the walk tells a
 * thread found off a CPU from one found running, but on a loaded machine
 * few passes find a thread running, and those that do find it mostly just
 * after it was put back on a CPU: where it had been preempted.  A sample
 * taken by the thread itself when its CPU clock crosses the next interval
 * is taken on a CPU, at a moment drawn from its CPU time and from nothing
 * else: the CPU time since the previous one is credited there, an
 * unbiased estimate whatever the scheduler does.
 *
 * HOW
 *
 * Each armed thread has a POSIX timer on its own CPU clock that signals
 * the thread itself (SIGEV_THREAD_ID).  The handler records, with its CPU
 * clock, into its slot's ring (nothing dereferenced but through
 * process_vm_readv, no lock, no allocation): without a GIL a copy of the
 * thread's frames (calx_frames_copy), which the pass checks against the
 * code table as it checks frames it reads itself; with one, a peek at
 * its innermost frames (calx_peek_own_frames_sigsafe, of its thread
 * state now: PyGILState_GetThisThreadState, pthread_getspecific, as
 * faulthandler reads it in its handler), whether it holds the GIL, and
 * if so whether it has run C code since gilwatch's last probe (which the
 * tick makes too).  The pass reads the peek against the thread's live
 * stack, or alone if the thread has left those frames since.
 *
 * Safety:
 *   - No EINTR: since Linux 5.11 on x86-64 (POSIX_CPU_TIMERS_TASK_WORK) a
 *     CPU timer's expiry is handled on the thread's way back to user mode,
 *     after the system call it was in has returned, so the signal never
 *     interrupts one.  Elsewhere the ticks stay off and the sampler reads
 *     threads where it finds them.
 *   - The signal is a real-time one at its default action when the first
 *     thread is armed (the highest free of SIGRTMAX-7..SIGRTMAX; a program
 *     with no thread besides the main one never has it).  A program that
 *     later handles that same signal itself gets our ticks until the next
 *     pass sees it (calx_cputicks_taken_over), deletes the timers and arms
 *     the threads again on another free signal.  A signal that did not
 *     come from a timer is given its default action, as without us.
 *   - The handler stays installed once installed: a tick may still be
 *     pending after its timer is deleted, and it must not kill the process.
 *   - Slots are never freed, and a tick names its slot and the slot's
 *     generation: a tick for a disarmed slot, or one armed again for
 *     another thread, is ignored.
 *   - Timers are not inherited across fork(); a child starts with none.
 */

#include "cputicks.h"

#include "runtime.h" /* Python.h first: it defines _GNU_SOURCE */

#include "cal_clock.h"
#include "cal_vmread.h"
#include "gilwatch.h"

#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

#define MAX_SLOTS 1024
/* Ticks a slot holds until a pass takes them: with a GIL a tick is a peek
   (~0.5 KB), and passes can be rare (3.9-3.11, the main thread blocked,
   the sampler thread waiting for the GIL); without one, a copy of up to
   256 frames (6 KB), and passes are independent of the threads. */
#ifdef Py_GIL_DISABLED
#define RING 8
#else
#define RING 64
#endif
#define CLOCK_SCHED_ 2

typedef struct slot {
    _Atomic uint32_t gen; /* changes at every arm and disarm */
    _Atomic int tid;
    _Atomic(const PyThreadState *) ts;
    clockid_t clock; /* the thread's clock base (cal_clock.h) */
    timer_t timer;
    int armed;
    _Atomic uint32_t head; /* written by the handler */
    _Atomic uint32_t tail; /* written by the pass */
    cal_vmread window;     /* the handler's */
    calx_cputick ring[RING];
} slot;

static struct {
    _Atomic(slot *) slots[MAX_SLOTS];   /* never freed */
    int signo;                          /* 0 until the handler is installed */
    PyInterpreterState *_Atomic interp; /* whose collector a tick looks at */
    int64_t interval_ns;
    unsigned next; /* where the search for a free slot starts */
} T;

/* Asked once per process (GIL held): a forked child knows the answer, and
   reading it again cost each child's restart four copy-on-write faults. */
static int kernel_defers_cpu_timers(void)
{
#if defined(__x86_64__)
    static int known = -1;
    if (known < 0) {
        struct utsname u;
        int major = 0, minor = 0;
        known = uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
                (major > 5 || (major == 5 && minor >= 11));
    }
    return known;
#else
    return 0;
#endif
}

/* The machine code of the interpreter, of calipers and of the system:
   the object that holds the interpreter (libpython, or the python
   executable), this extension, the allocation shim, the C library and
   the vDSO; their executable segments, found once.  Before 3.13 a
   worker's tick that finds its innermost frame in a call tells a
   library's C code (json's scanner, hashlib's OpenSSL, decimal's
   libmpdec, NumPy) from the interpreter's own work around a call (a class
   whose __init__ is Python) and from short calls of the system (a clock
   read) by where the signal interrupted it (calx_peek_in_c_call). */
#define OWN_TEXTS 8
static struct {
    uintptr_t lo, hi;
} own_text[OWN_TEXTS];
static _Atomic int n_own_text;

static int add_text_of(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t addr = *(const uintptr_t *)data;
    int holds = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        holds |= ph->p_type == PT_LOAD && addr >= lo && addr - lo < ph->p_memsz;
    }
    if (!holds)
        return 0;
    int n = atomic_load(&n_own_text);
    for (int i = 0; i < info->dlpi_phnum && n < OWN_TEXTS; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            own_text[n].lo = info->dlpi_addr + ph->p_vaddr;
            own_text[n].hi = own_text[n].lo + ph->p_memsz;
            n++;
        }
    }
    atomic_store(&n_own_text, n);
    return 1;
}

static void find_own_text(void)
{
    if (atomic_load(&n_own_text))
        return; /* (the same in a forked child) */
    uintptr_t in[] = {(uintptr_t)&PyEval_EvalCode, (uintptr_t)&find_own_text,
                      (uintptr_t)calx_runtime_shim(), (uintptr_t)&getpid,
                      (uintptr_t)getauxval(AT_SYSINFO_EHDR)};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        if (in[i])
            dl_iterate_phdr(add_text_of, &in[i]);
}

/* Whether the signal interrupted the interpreter's, calipers' or the
   system's code (1) or another library's (0); -1 if unknown. */
static int interrupted_own_sigsafe(const void *uc)
{
#if defined(__x86_64__)
    uintptr_t pc = (uintptr_t)((const ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    uintptr_t pc = (uintptr_t)((const ucontext_t *)uc)->uc_mcontext.pc;
#else
    uintptr_t pc = 0;
    (void)uc;
#endif
    int n = atomic_load(&n_own_text);
    if (!pc || n == 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (pc >= own_text[i].lo && pc < own_text[i].hi)
            return 1;
    return 0;
}

static void on_tick_sigsafe(int sig, siginfo_t *si, void *uc)
{
    if (si->si_code != SI_TIMER) {
        /* Not ours: what the signal would have done without us. */
        signal(sig, SIG_DFL);
        kill(getpid(), sig);
        return;
    }
    uintptr_t v = (uintptr_t)si->si_value.sival_ptr;
    uint32_t idx = (uint32_t)(v & 0xffffffffu), gen = (uint32_t)(v >> 32);
    slot *s = idx < MAX_SLOTS ? atomic_load(&T.slots[idx]) : NULL;
    if (!s || atomic_load(&s->gen) != gen)
        return; /* a tick of a slot disarmed since */
    int saved = errno;
    /* The profiler's own work, in the shim's guard: the reads below copy
       with memcpy, which the shim counts as the program's copying, and a
       copy sample allocates (on_copy), which a signal handler must not
       do.  A tick that came during fork() deadlocked on malloc's lock,
       held by fork for the child (3.14t, CI). */
    int guard = calx_runtime_guard_enter_sigsafe();
    if (atomic_load(&s->tid) == (int)syscall(SYS_gettid)) {
        uint32_t h = atomic_load_explicit(&s->head, memory_order_relaxed);
        uint32_t t = atomic_load_explicit(&s->tail, memory_order_acquire);
        /* (Full: a late pass.  The tick is dropped; its CPU goes to the
           next one taken.) */
        if (h - t < RING) {
            calx_cputick *k = &s->ring[h % RING];
            const PyThreadState *ts = atomic_load(&s->ts);
            PyInterpreterState *interp = atomic_load(&T.interp);
            k->cpu_ns = cal_clock_thread_cpu_sigsafe(s->clock);
#ifdef Py_GIL_DISABLED
            k->n = calx_frames_copy_sigsafe(&s->window, ts, k->f, CALX_TICK_FRAMES,
                                            &k->more, &k->attached);
            k->in_c = -1;
#else
            /* With a GIL: its innermost frames, as the sampler thread
               peeks at the main thread's (the pass reads them against its
               live stack); holding the GIL, and if so, whether it has run
               C code since gilwatch's last probe (gilwatch.h).  Its thread
               state now, not the slot's: a C thread gets a new one for
               each call into Python, and a pass sees it only later
               (pthread_getspecific, as faulthandler's handler reads it). */
            ts = PyGILState_GetThisThreadState();
            calx_peek_own_frames_sigsafe(&s->window, ts, &k->peek);
            k->n = 0; /* (frames copied: the free-threaded build's) */
            k->more = 0;
            k->attached = ts && calx_gil_holder_sigsafe(interp) == ts;
            k->in_c =
                k->attached
                    ? calx_gilwatch_tick_probe_sigsafe((PyThreadState *)ts, k->cpu_ns)
                    : -1;
#endif
            k->own_code = interrupted_own_sigsafe(uc);
            k->gc = k->attached == 1 && calx_gc_collecting_sigsafe(interp);
            if (k->n >= 0 && k->cpu_ns >= 0)
                atomic_store_explicit(&s->head, h + 1, memory_order_release);
        }
    }
    calx_runtime_guard_leave_sigsafe(guard);
    errno = saved;
}

int calx_cputicks_start(int64_t interval_ns, PyInterpreterState *interp)
{
    if (!kernel_defers_cpu_timers())
        return -1;
    T.interval_ns = interval_ns;
    atomic_store(&T.interp, interp);
    find_own_text();
    return 0;
}

/* Install the handler, the first time a thread is armed: a program that
   never has a thread besides the main one keeps every signal's
   disposition as it was.  Returns 0, or -1 if no signal is free. */
static int install_handler(void)
{
    if (T.signo)
        return 0;
    for (int sig = SIGRTMAX; sig >= SIGRTMAX - 7 && sig >= SIGRTMIN; sig--) {
        struct sigaction old;
        if (sigaction(sig, NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
            (old.sa_flags & SA_SIGINFO))
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_tick_sigsafe;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, NULL) == 0) {
            T.signo = sig;
            return 0;
        }
    }
    return -1;
}

int calx_cputicks_arm(const PyThreadState *ts, int tid, clockid_t clock)
{
    if (tid <= 0 || install_handler() != 0)
        return -1;
    for (unsigned k = 0; k < MAX_SLOTS; k++) {
        unsigned idx = (T.next + k) % MAX_SLOTS;
        slot *s = atomic_load(&T.slots[idx]);
        if (s && s->armed)
            continue;
        if (!s) {
            s = calloc(1, sizeof *s);
            if (!s)
                return -1;
            atomic_store(&T.slots[idx], s);
        }
        atomic_store(&s->head, 0);
        atomic_store(&s->tail, 0);
        atomic_store(&s->tid, tid);
        atomic_store(&s->ts, ts);
        s->clock = clock;
        uint32_t gen = atomic_load(&s->gen) + 1;
        atomic_store(&s->gen, gen);
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_THREAD_ID;
        ev.sigev_signo = T.signo;
        ev.sigev_notify_thread_id = tid;
        ev.sigev_value.sival_ptr = (void *)((uintptr_t)idx | (uintptr_t)gen << 32);
        if (timer_create(clock | CLOCK_SCHED_, &ev, &s->timer) != 0)
            return -1;
        struct itimerspec every = {
            .it_interval = {T.interval_ns / 1000000000, T.interval_ns % 1000000000}};
        every.it_value = every.it_interval;
        if (timer_settime(s->timer, 0, &every, NULL) != 0) {
            timer_delete(s->timer);
            return -1;
        }
        s->armed = 1;
        T.next = idx + 1;
        return (int)idx;
    }
    return -1;
}

static slot *armed_slot(int idx)
{
    slot *s = idx >= 0 && idx < MAX_SLOTS ? atomic_load(&T.slots[idx]) : NULL;
    return s && s->armed ? s : NULL;
}

void calx_cputicks_retarget(int idx, const PyThreadState *ts)
{
    slot *s = armed_slot(idx);
    if (s)
        atomic_store(&s->ts, ts);
}

void calx_cputicks_disarm(int idx)
{
    slot *s = armed_slot(idx);
    if (!s)
        return;
    atomic_fetch_add(&s->gen, 1);
    timer_delete(s->timer);
    s->armed = 0;
}

int calx_cputicks_take(int idx, calx_cputick *out)
{
    slot *s = armed_slot(idx);
    if (!s)
        return 0;
    uint32_t t = atomic_load_explicit(&s->tail, memory_order_relaxed);
    uint32_t h = atomic_load_explicit(&s->head, memory_order_acquire);
    if (t == h)
        return 0;
    const calx_cputick *k = &s->ring[t % RING];
    out->cpu_ns = k->cpu_ns;
    out->attached = k->attached;
    out->in_c = k->in_c;
    out->own_code = k->own_code;
    out->peek = k->peek;
    out->gc = k->gc;
    out->more = k->more;
    out->n = k->n < 0 ? 0 : k->n > CALX_TICK_FRAMES ? CALX_TICK_FRAMES : k->n;
    memcpy(out->f, k->f, (size_t)out->n * sizeof(out->f[0]));
    atomic_store_explicit(&s->tail, t + 1, memory_order_release);
    return 1;
}

int calx_cputicks_taken_over(void)
{
    struct sigaction cur;
    if (!T.signo || sigaction(T.signo, NULL, &cur) != 0 ||
        ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_tick_sigsafe))
        return 0;
    for (int i = 0; i < MAX_SLOTS; i++)
        calx_cputicks_disarm(i);
    T.signo = 0; /* (the next arm takes another) */
    return 1;
}

void calx_cputicks_stop(void)
{
    for (int i = 0; i < MAX_SLOTS; i++)
        calx_cputicks_disarm(i);
}

void calx_cputicks_after_fork_child(void)
{
    for (int i = 0; i < MAX_SLOTS; i++) {
        slot *s = atomic_load(&T.slots[i]);
        if (s && s->armed) {
            atomic_fetch_add(&s->gen, 1);
            s->armed = 0; /* its timer stayed in the parent */
        }
    }
}
