/* gilwatch — see gilwatch.h. */
#include "gilwatch.h"
#include "memory.h"

#include "cal_clock.h"
#include "pyinternals.h"
#include "signals.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOOK_NS 1000000 /* how often the watcher looks */

typedef struct watched {
    const void *ts;
    clockid_t clock;
    int64_t last_cpu; /* -1 before the first look */
    int was_holder;
    int64_t python_ns, native_ns;
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
    int tid; /* the watcher's own kernel thread id */
} W = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

int calx_gilwatch_set_threads(const void *const *ts, const clockid_t *clocks, size_t n)
{
    watched *v = malloc((n ? n : 1) * sizeof(*v));
    if (!v)
        return -1;
    pthread_mutex_lock(&W.mu);
    for (size_t i = 0; i < n; i++) {
        watched w = {ts[i], clocks[i], -1, 0, 0, 0};
        for (size_t k = 0; k < W.n; k++) {
            if (W.v[k].ts == ts[i] && W.v[k].clock == clocks[i]) {
                w = W.v[k];
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
    return 0;
}

size_t calx_gilwatch_count(void)
{
    return __atomic_load_n(&W.n, __ATOMIC_RELAXED);
}

/* One look at every watched thread; W.mu held. */
static void observe(PyInterpreterState *interp)
{
    const void *holder = calx_gil_holder_sigsafe(interp);
    int64_t now = cal_clock_now_ns();
    int count = now - W.last_look <= MAX_GAP_NS;
    W.last_look = now;
    for (size_t i = 0; i < W.n; i++) {
        watched *w = &W.v[i];
        int is_holder = w->ts == holder;
        int64_t cpu = cal_clock_thread_cpu_sigsafe(w->clock);
        if (count && cpu >= 0 && w->last_cpu >= 0 && cpu > w->last_cpu) {
            if (is_holder || w->was_holder)
                w->python_ns += cpu - w->last_cpu;
            else
                w->native_ns += cpu - w->last_cpu;
        }
        w->last_cpu = cpu;
        w->was_holder = is_holder;
    }
}

static void *watcher_main(void *arg)
{
    (void)arg;
    (void)calx_memory_guard_enter(); /* what this thread allocates is ours */
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
        pthread_mutex_lock(&W.mu);
        observe(W.interp);
    }
    pthread_mutex_unlock(&W.mu);
    return NULL;
}

int calx_gilwatch_start(PyInterpreterState *interp)
{
    W.interp = interp;
    W.stopping = 0;
    int rc = calx_thread_start_unsignalled(&W.thread, watcher_main);
    W.running = rc == 0;
    return rc;
}

void calx_gilwatch_stop(void)
{
    if (!W.running)
        return;
    pthread_mutex_lock(&W.mu);
    W.stopping = 1;
    pthread_cond_signal(&W.cv);
    pthread_mutex_unlock(&W.mu);
    pthread_join(W.thread, NULL);
    W.running = 0;
}

int calx_gilwatch_tid(void)
{
    return __atomic_load_n(&W.tid, __ATOMIC_RELAXED);
}

int calx_gilwatch_take(const void *ts, int64_t min_ns, double *native_share)
{
    int found = 0;
    pthread_mutex_lock(&W.mu);
    for (size_t i = 0; i < W.n; i++) {
        watched *w = &W.v[i];
        if (w->ts != ts)
            continue;
        int64_t sum = w->python_ns + w->native_ns;
        if (sum > 0 && sum >= min_ns) {
            *native_share = (double)w->native_ns / (double)sum;
            w->python_ns = w->native_ns = 0;
            found = 1;
        }
        break;
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
    W.running = 0;
    W.v = NULL; /* the parent's array is leaked in the child, on purpose */
    W.n = W.cap = 0;
    W.last_look = 0;
}
