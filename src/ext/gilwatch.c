/* gilwatch — see gilwatch.h. */
#include "gilwatch.h"

#include "cal_clock.h"
#include "cal_vmread.h"
#include "pyinternals.h"
#include "runtime.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOOK_NS 1000000 /* how often the watcher looks */
#define FRESH_NS 20000  /* CPU a thread needs after a probe to have looked */
#define PROBES_KEPT 16

typedef struct watched {
    const void *ts;
    unsigned long ident;
    clockid_t clock;
    int64_t last_cpu; /* -1 before the first look; kept once it is gone */
    int64_t last_ran; /* when its CPU clock was last seen to advance */
    int was_holder;
    int probed;                 /* its "signals pending" bit was set at the last look */
    int last_in_c;              /* the last stretch it held the GIL, it ran C code */
    double free_share;          /* without the GIL, at the last split (-1: none) */
    double gc_share;            /* collecting, at the last split */
    int64_t held_ns, native_ns; /* CPU with the GIL and without it */
    int64_t gc_ns;              /* of those, ended by a look that found it collecting
                                   garbage (it held the GIL, and the collector ran) */
    struct {
        int64_t cpu;       /* its CPU clock just after a probe of it */
        int stuck;         /* the probe found its bit still set */
    } probes[PROBES_KEPT]; /* the latest probes of it (calx_gilwatch_stuck_after) */
    unsigned nprobes;
} watched;

/* A gap between looks longer than this says nothing: the sampler thread was
   busy (waiting for the GIL, say) and a thread may have both held the GIL
   and run without it in between.  Such gaps are not counted. */
#define MAX_GAP_NS 3000000

/* Protected by mu. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled when there are threads to watch, or on stop */
    watched *v;
    size_t n, cap;
    int64_t last_look;
    PyInterpreterState *interp;
    pthread_t thread;
    int running, stopping;
    /* GIL: between calx_gilwatch_start and stop, the thread is wanted; it
       starts once there is a thread to watch (set_threads), so a process
       with only its main thread, such as a forked child that leaves at
       once, never pays for it. */
    int enabled;
    int tid; /* the watcher's own kernel thread id */
    struct {
        const void *ts; /* the holder at the last look, if asked to let go */
        unsigned long switches;
    } asked;
    cal_vmread window; /* the watcher's, for the holder's thread id */
} W = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int start_thread(void);

/* The latest probe of a holder (3.13+), or before 3.13 the first look
   that found a holder asked to let the GIL go (calx_gil_drop_asked_sigsafe),
   for calx_gilwatch_tick_probe_sigsafe: written by the watcher under a
   sequence count, read by signal handlers. */
static struct {
    unsigned seq; /* odd while it is written */
    const void *ts;
    int64_t cpu;            /* its CPU clock, read just after */
    unsigned long switches; /* (before 3.13) the GIL's switches then */
} P;

static void publish_probe(const void *ts, int64_t cpu, unsigned long switches)
{
    unsigned seq = __atomic_load_n(&P.seq, __ATOMIC_RELAXED);
    __atomic_store_n(&P.seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&P.ts, ts, __ATOMIC_RELAXED);
    __atomic_store_n(&P.cpu, cpu, __ATOMIC_RELAXED);
    __atomic_store_n(&P.switches, switches, __ATOMIC_RELAXED);
    __atomic_store_n(&P.seq, seq + 2, __ATOMIC_RELEASE);
}

/* The published record, if read whole: 1, else 0 (being written). */
static int read_probe_sigsafe(const void **ts, int64_t *cpu, unsigned long *switches)
{
    unsigned seq = __atomic_load_n(&P.seq, __ATOMIC_ACQUIRE);
    *ts = __atomic_load_n(&P.ts, __ATOMIC_RELAXED);
    *cpu = __atomic_load_n(&P.cpu, __ATOMIC_RELAXED);
    *switches = __atomic_load_n(&P.switches, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return seq % 2 == 0 && __atomic_load_n(&P.seq, __ATOMIC_RELAXED) == seq;
}

int calx_gilwatch_tick_probe_sigsafe(PyThreadState *ts, int64_t cpu)
{
    const void *probed;
    int64_t at;
    unsigned long switches, now;
    int asked = calx_gil_drop_asked_sigsafe(ts->interp, &now);
    if (asked >= 0) {
        /* Before 3.13: asked since a look that found it holding, in the
           same stretch, and it ran since without letting go.  (A thread
           put back on a CPU after being preempted in bytecode with the
           request standing gets its signal before it answers: run since
           the look, its few microseconds say nothing.) */
        return asked == 1 && read_probe_sigsafe(&probed, &at, &switches) &&
                       probed == ts && switches == now && cpu - at >= FRESH_NS
                   ? 1
                   : -1;
    }
    int bit = calx_probe_own_sigsafe(ts);
    if (bit < 0)
        return -1;
    if (read_probe_sigsafe(&probed, &at, &switches) && probed == ts &&
        cpu - at < FRESH_NS)
        return 0; /* set by a probe it has not run since: the next probe tells */
    return bit;
}

int calx_gilwatch_set_threads(const void *const *ts, const unsigned long *idents,
                              const clockid_t *clocks, size_t n)
{
    watched *v = malloc((n ? n : 1) * sizeof(*v));
    if (!v)
        return -1;
    pthread_mutex_lock(&W.mu);
    for (size_t i = 0; i < n; i++) {
        watched w = {.ts = ts[i],
                     .ident = idents[i],
                     .clock = clocks[i],
                     .last_cpu = -1,
                     .free_share = -1.0};
        for (size_t k = 0; k < W.n; k++) {
            /* The same thread (its clock), perhaps with a new thread state:
               a C thread gets one each time it calls into Python. */
            if (W.v[k].clock == clocks[i]) {
                w = W.v[k];
                w.ts = ts[i];
                w.ident = idents[i];
                break;
            }
        }
        v[i] = w;
    }
    free(W.v);
    W.v = v;
    W.n = n;
    W.cap = n;
    if (n)
        pthread_cond_signal(&W.cv);
    pthread_mutex_unlock(&W.mu);
    if (n && W.enabled && !W.running)
        (void)start_thread(); /* failing: unwatched, tried again at the next change */
    return 0;
}

size_t calx_gilwatch_count(void) { return __atomic_load_n(&W.n, __ATOMIC_RELAXED); }

/* One look at every watched thread; W.mu held.  `holder` holds the GIL
   (or NULL), and `looked` is what a probe of it said (calx_probe_holder):
   0 when it has not looked at its eval breaker since the last probe. */
static void observe(PyInterpreterState *interp, const PyThreadState *holder, int looked,
                    int asked, unsigned long switches)
{
    /* The holder by its thread, not its thread state: a C thread calling
       into Python gets a new one for each call, and we learn of it only at
       the next pass.  (If the thread id cannot be read, by the pointer.) */
    unsigned long holder_ident = 0;
    cal_vmread_reset_sigsafe(&W.window, getpid());
    int by_ident =
        holder && calx_thread_ident_sigsafe(&W.window, holder, &holder_ident) == 0;
    /* The collector runs in the thread that holds the GIL. */
    int collecting = holder && calx_gc_collecting_sigsafe(interp);
    int64_t now = cal_clock_now_ns();
    int count = now - W.last_look <= MAX_GAP_NS;
    W.last_look = now;
    for (size_t i = 0; i < W.n; i++) {
        watched *w = &W.v[i];
        int is_holder =
            holder && (by_ident ? w->ident == holder_ident : w->ts == holder);
        int64_t cpu = cal_clock_thread_cpu_sigsafe(w->clock);
        if (cpu < 0)
            continue; /* gone: its last reading stays for calx_gilwatch_last */
        if (cpu > w->last_cpu) {
            if (count && w->last_cpu >= 0) {
                /* With the GIL at both looks and its probe still set, it
                   never looked at its eval breaker in between: it ran C
                   code holding the GIL, not bytecode.  The collector is C
                   code too (as in the main thread, whose answer it
                   delays); it runs at an eval-breaker check, which clears
                   the probe, right after the call whose allocations set it
                   off (json.loads).  The last verdict labels the thread's
                   held CPU (calx_gilwatch_take).  With no probe (before
                   3.13), holding the GIL is bytecode. */
                int collected = is_holder && collecting;
                int probed = is_holder && w->was_holder && w->probed;
                int in_c = collected || (probed && looked == 0);
                if (collected || probed || (is_holder && looked < 0))
                    w->last_in_c = in_c;
                if (is_holder || w->was_holder)
                    w->held_ns += cpu - w->last_cpu;
                else
                    w->native_ns += cpu - w->last_cpu;
                if (is_holder && collecting)
                    w->gc_ns += cpu - w->last_cpu;
            }
            w->last_ran = now;
        }
        w->last_cpu = cpu;
        w->was_holder = is_holder;
        w->probed = is_holder && looked >= 0;
        if (is_holder && asked == 1 &&
            !(W.asked.ts == holder && W.asked.switches == switches))
            publish_probe(holder, cpu, switches); /* (the first look at it asked) */
        if (w->probed) {
            publish_probe(holder, cpu, 0);
            w->probes[w->nprobes % PROBES_KEPT].cpu = cpu;
            w->probes[w->nprobes % PROBES_KEPT].stuck = looked == 0;
            w->nprobes++;
        }
    }
    W.asked.ts = asked == 1 ? holder : NULL;
    W.asked.switches = switches;
}

static void *watcher_main(void *arg)
{
    (void)arg;
    (void)calx_runtime_guard_enter(); /* what this thread allocates is ours */
    __atomic_store_n(&W.tid, (int)gettid(), __ATOMIC_RELAXED);
    pthread_mutex_lock(&W.mu);
    while (!W.stopping) {
        if (W.n == 0) {
            pthread_cond_wait(&W.cv, &W.mu);
            W.last_look = 0; /* the first look after a pause only sets baselines */
            continue;
        }
        pthread_mutex_unlock(&W.mu);
        struct timespec gap = {0, LOOK_NS};
        nanosleep(&gap, NULL);
        /* (the probe takes the thread-list lock: not under W.mu) */
        const PyThreadState *holder = calx_gil_holder_sigsafe(W.interp);
        int looked = holder ? calx_probe_holder(W.interp, holder) : -1;
        unsigned long switches = 0;
        int asked = holder ? calx_gil_drop_asked_sigsafe(W.interp, &switches) : -1;
        pthread_mutex_lock(&W.mu);
        observe(W.interp, holder, looked, asked, switches);
    }
    pthread_mutex_unlock(&W.mu);
    return NULL;
}

/* Start the watcher thread (GIL held).  Returns pthread_create's status. */
static int start_thread(void)
{
    pthread_mutex_lock(&W.mu);
    W.stopping = 0;
    W.last_look = 0; /* a gap across a stop says nothing */
    pthread_mutex_unlock(&W.mu);
    int rc = calx_runtime_thread_start_unsignalled(&W.thread, watcher_main, NULL);
    W.running = rc == 0;
    /* Its kernel id now, not when it first runs: the native-thread scan
       must never take it for one of the program's. */
    clockid_t c;
    if (W.running && pthread_getcpuclockid(W.thread, &c) == 0)
        __atomic_store_n(&W.tid, cal_clock_thread_tid(c), __ATOMIC_RELAXED);
    return rc;
}

int calx_gilwatch_start(PyInterpreterState *interp)
{
    W.interp = interp;
    /* On the free-threaded build there is no GIL to watch (the sampler
       labels each interval by the thread's state at the pass) and the
       holder always reads NULL; the watcher still runs for its other
       job: each thread's last CPU reading before it ends (credit_tail in
       sampler.c), which nothing else can read once the thread is gone. */
    W.enabled = 1;
    return __atomic_load_n(&W.n, __ATOMIC_RELAXED) ? start_thread() : 0;
}

int calx_gilwatch_stop_ask(void)
{
    W.enabled = 0;
    if (!W.running)
        return 0;
    pthread_mutex_lock(&W.mu);
    W.stopping = 1;
    pthread_cond_signal(&W.cv);
    pthread_mutex_unlock(&W.mu);
    return 1;
}

void calx_gilwatch_stop_join(void)
{
    pthread_join(W.thread, NULL);
    W.running = 0;
    /* A later thread of the program's may get its id. */
    __atomic_store_n(&W.tid, 0, __ATOMIC_RELAXED);
}

void calx_gilwatch_stop_detach(void)
{
    pthread_detach(W.thread);
    W.running = 0;
}

void calx_gilwatch_stop(void)
{
    if (calx_gilwatch_stop_ask())
        calx_gilwatch_stop_join();
}

int calx_gilwatch_tid(void) { return __atomic_load_n(&W.tid, __ATOMIC_RELAXED); }

int calx_gilwatch_take(clockid_t clock, int64_t min_ns, double *native_share,
                       double *gc_share)
{
    int found = 0;
    pthread_mutex_lock(&W.mu);
    for (size_t i = 0; i < W.n; i++) {
        watched *w = &W.v[i];
        if (w->clock != clock)
            continue;
        int64_t sum = w->held_ns + w->native_ns;
        if (sum > 0 && sum >= min_ns) {
            /* Without the GIL: native.  With it, as the thread's last
               stretch with it was: where a sample finds it is where that
               stretch ended (INTERNALS, "C code that keeps the GIL"). */
            double c = w->last_in_c ? (double)w->held_ns : 0.0;
            *native_share = ((double)w->native_ns + c) / (double)sum;
            w->free_share = (double)w->native_ns / (double)sum;
            *gc_share = w->gc_share = (double)w->gc_ns / (double)sum;
            w->held_ns = w->native_ns = w->gc_ns = 0;
            found = 1;
        } else if (w->free_share >= 0) {
            /* Too little watched for a new split: the last one, and the
               last stretch with the GIL as it was. */
            *native_share = w->free_share + (1.0 - w->free_share) * w->last_in_c;
            *gc_share = w->gc_share;
            found = 1;
        }
        break;
    }
    pthread_mutex_unlock(&W.mu);
    return found;
}

int calx_gilwatch_stuck_after(clockid_t clock, int64_t cpu)
{
    int found = -1;
    pthread_mutex_lock(&W.mu);
    for (size_t i = 0; i < W.n; i++) {
        const watched *w = &W.v[i];
        if (w->clock != clock)
            continue;
        /* The first probe after cpu, among those kept: the oldest kept
           must be before it, or the first after may be gone. */
        unsigned kept = w->nprobes < PROBES_KEPT ? w->nprobes : PROBES_KEPT;
        for (unsigned k = w->nprobes - kept; k < w->nprobes; k++) {
            if (w->probes[k % PROBES_KEPT].cpu <= cpu)
                continue;
            if (k > w->nprobes - kept || kept < PROBES_KEPT)
                found = w->probes[k % PROBES_KEPT].stuck;
            break;
        }
        break;
    }
    pthread_mutex_unlock(&W.mu);
    return found;
}

int calx_gilwatch_last(clockid_t clock, int64_t *cpu_ns, int64_t *when_ns)
{
    int found = 0;
    pthread_mutex_lock(&W.mu);
    for (size_t i = 0; i < W.n && !found; i++) {
        const watched *w = &W.v[i];
        if (w->clock == clock && w->last_cpu >= 0) {
            *cpu_ns = w->last_cpu;
            *when_ns = w->last_ran;
            found = 1;
        }
    }
    pthread_mutex_unlock(&W.mu);
    return found;
}

void calx_gilwatch_reset(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cv = PTHREAD_COND_INITIALIZER;
    W.mu = fresh;
    W.cv = fresh_cv;
    W.running = W.enabled = 0;
    W.v = NULL; /* the parent's array is leaked in the child, on purpose */
    W.n = W.cap = 0;
    W.last_look = 0;
    P.ts = NULL; /* (the parent's latest probe) */
    W.asked.ts = NULL;
}
