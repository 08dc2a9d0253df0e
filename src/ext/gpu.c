/*
 * gpu — see gpu.h.
 *
 * The poller thread waits on G.cv until the sampler thread's tick finds a
 * reading due (every period_ns at most), reads every device with NVML
 * outside the lock, and publishes the reading with a sequence number.
 * The sampler's passes (GIL) copy what is new into the profile: the
 * state and devices once, each reading once into the run's figures and
 * its timeline, and the latest reading into the lines sampled.
 *
 * An NVML error ends polling for the run (the profile keeps what was read
 * and says when and why it stopped); the thread never touches the profile.
 */
#define _GNU_SOURCE /* gettid */
#include "gpu.h"

#include "cal_clock.h"
#include "runtime.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static struct {
    /* Protected by mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int mode;
    int64_t period_ns;
    pthread_t thread;
    int running, stopping;
    int due;
    int64_t next_due;
    cal_gpu *g;  /* used by the poller thread without mu while it runs */
    int opened;  /* cal_gpu_open was tried */
    void *lib;   /* NVML, loaded at start (calx_gpu_start) */
    int stopped; /* an NVML error ended polling */
    int64_t stopped_at;
    unsigned state_seq; /* bumped when state, devices or fallback change */
    int state;          /* CAL_GPU_OFF, _ON or _UNAVAILABLE */
    char reason[256];
    char fallback[400];
    int per_process_util, per_process_memory;
    int ndevices;
    cal_gpu_device dev[CAL_GPU_MAX_DEVICES];
    cal_gpu_reading reading;
    int64_t reading_at;
    unsigned long long seq;
    int tid;

    /* The sample passes' side: GIL. */
    unsigned seen_state_seq;
    unsigned long long seen_seq;
    cal_gpu_reading current;
    int have_current;
} G = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* mu held: copy what the open found. */
static void publish_open(cal_gpu *g, const char *err)
{
    G.state_seq++;
    if (!g) {
        /* No driver at all is not worth a word unless GPU was asked for. */
        if (err[0] || G.mode == CALX_GPU_ON) {
            G.state = CAL_GPU_UNAVAILABLE;
            snprintf(G.reason, sizeof G.reason, "%s",
                     err[0] ? err : "no NVIDIA driver (libnvidia-ml.so.1 not found)");
        }
        return;
    }
    G.state = CAL_GPU_ON;
    G.ndevices = cal_gpu_ndevices(g);
    for (int i = 0; i < G.ndevices; i++)
        G.dev[i] = *cal_gpu_device_at(g, i);
    G.per_process_util = cal_gpu_per_process_util(g);
    G.per_process_memory = cal_gpu_per_process_memory(g);
    snprintf(G.fallback, sizeof G.fallback, "%s", cal_gpu_fallback(g));
}

static void *poller_main(void *arg)
{
    (void)arg;
    (void)
        calx_runtime_guard_enter(); /* NVML's allocations are ours, not the program's */
    pthread_mutex_lock(&G.mu);
    G.tid = (int)gettid();
    if (!G.opened) {
        G.opened = 1;
        pthread_mutex_unlock(&G.mu);
        char err[256];
        cal_gpu *g = cal_gpu_open(NULL, err, sizeof err);
        pthread_mutex_lock(&G.mu);
        G.g = g;
        publish_open(g, err);
    }
    while (!G.stopping && G.g && !G.stopped) {
        while (!G.due && !G.stopping)
            pthread_cond_wait(&G.cv, &G.mu);
        if (G.stopping)
            break;
        G.due = 0;
        cal_gpu *g = G.g;
        pthread_mutex_unlock(&G.mu);
        cal_gpu_reading r;
        char err[256];
        int rc = cal_gpu_read(g, &r, err, sizeof err);
        int64_t at = cal_clock_now_ns();
        pthread_mutex_lock(&G.mu);
        if (rc != 0) {
            G.stopped = 1;
            G.stopped_at = at;
            snprintf(G.reason, sizeof G.reason, "%s", err);
            G.state_seq++;
            break;
        }
        G.reading = r;
        G.reading_at = at;
        G.seq++;
        if (G.per_process_util != cal_gpu_per_process_util(g) ||
            G.per_process_memory != cal_gpu_per_process_memory(g)) {
            G.per_process_util = cal_gpu_per_process_util(g);
            G.per_process_memory = cal_gpu_per_process_memory(g);
            snprintf(G.fallback, sizeof G.fallback, "%s", cal_gpu_fallback(g));
            G.state_seq++;
        }
    }
    pthread_mutex_unlock(&G.mu);
    return NULL;
}

/* mu held. */
static int start_thread(void)
{
    G.stopping = 0;
    G.due = 1; /* a first reading at once */
    int rc = calx_runtime_thread_start_unsignalled(&G.thread, poller_main, NULL);
    G.running = rc == 0;
    return rc;
}

int calx_gpu_start(int mode, int64_t period_ns)
{
    if (mode == CALX_GPU_OFF)
        return 0;
    pthread_mutex_lock(&G.mu);
    G.mode = mode;
    G.period_ns = period_ns;
    G.next_due = 0;
    if (!G.opened && !G.lib) {
        /* The library is looked for here, while profiling starts, not in
           the poller thread: the loader opens dozens of files looking for
           it, and each would for its moment take the lowest free number,
           which a file the program opens at the same time would then not
           get (its standard descriptors closed at start, say).  Without a
           driver there is nothing more to do; with one, NVML's own start
           (slow) is the poller's. */
        int previous = calx_runtime_guard_enter(); /* the loader's allocations */
        G.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        calx_runtime_guard_leave(previous);
        if (!G.lib) {
            G.opened = 1;
            publish_open(NULL, "");
        }
    }
    /* Not again once NVML proved unusable or failed. */
    int wanted = !G.running && (!G.opened || (G.g && !G.stopped));
    int rc = wanted ? start_thread() : 0;
    pthread_mutex_unlock(&G.mu);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return 0;
}

void calx_gpu_tick(int64_t now)
{
    pthread_mutex_lock(&G.mu);
    if (G.running && !G.due && now >= G.next_due) {
        G.due = 1;
        G.next_due = now + G.period_ns;
        pthread_cond_signal(&G.cv);
    }
    pthread_mutex_unlock(&G.mu);
}

int calx_gpu_pause_ask(void)
{
    pthread_mutex_lock(&G.mu);
    int running = G.running;
    if (running) {
        G.stopping = 1;
        pthread_cond_signal(&G.cv);
    }
    pthread_mutex_unlock(&G.mu);
    return running;
}

void calx_gpu_pause_join(void)
{
    pthread_join(G.thread, NULL);
    cal_clock_wait_thread_gone(G.tid); /* joined is not yet gone (cal_clock.h) */
    pthread_mutex_lock(&G.mu);
    G.running = 0;
    G.tid = 0;
    pthread_mutex_unlock(&G.mu);
}

void calx_gpu_pause(void)
{
    if (calx_gpu_pause_ask())
        calx_gpu_pause_join();
}

void calx_gpu_close(void)
{
    calx_gpu_pause();
    pthread_mutex_lock(&G.mu);
    cal_gpu *g = G.g;
    void *lib = G.lib;
    G.g = NULL;
    G.lib = NULL;
    G.mode = CALX_GPU_OFF;
    G.opened = G.stopped = 0;
    G.state = CAL_GPU_OFF;
    G.reason[0] = G.fallback[0] = 0;
    G.ndevices = 0;
    G.have_current = 0;
    G.seen_seq = G.seq;
    G.seen_state_seq = G.state_seq;
    pthread_mutex_unlock(&G.mu);
    cal_gpu_close(g);
    if (lib)
        dlclose(lib);
}

void calx_gpu_after_fork_child(void)
{
    /* The parent's NVML state and thread are not ours: drop them unused. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cv = PTHREAD_COND_INITIALIZER;
    G.mu = fresh;
    G.cv = fresh_cv;
    G.running = G.stopping = 0;
    G.g = NULL;
    G.mode = CALX_GPU_OFF;
    G.opened = G.stopped = 0;
    G.state = CAL_GPU_OFF;
    G.tid = 0;
    G.have_current = 0;
}

int calx_gpu_tid(void) { return __atomic_load_n(&G.tid, __ATOMIC_RELAXED); }

/* mu held: the state, devices and fallback into the profile. */
static void fold_state(cal_profile *p, int64_t start_wall)
{
    cal_gpu_summary *s = cal_profile_gpu(p);
    s->state = G.state;
    s->reason = G.reason[0] ? cal_profile_string(p, G.reason, strlen(G.reason))
                            : CAL_PROFILE_NONE;
    s->stopped_at = G.stopped ? G.stopped_at - start_wall : -1;
    s->per_process_util = G.per_process_util;
    s->per_process_memory = G.per_process_memory;
    s->fallback = G.fallback[0] ? cal_profile_string(p, G.fallback, strlen(G.fallback))
                                : CAL_PROFILE_NONE;
    if (s->ndevices == 0 && G.ndevices > 0) {
        s->ndevices = G.ndevices < CAL_PROFILE_GPUS ? G.ndevices : CAL_PROFILE_GPUS;
        for (int i = 0; i < s->ndevices; i++) {
            s->dev[i].uuid =
                cal_profile_string(p, G.dev[i].uuid, strlen(G.dev[i].uuid));
            s->dev[i].name =
                cal_profile_string(p, G.dev[i].name, strlen(G.dev[i].name));
            s->dev[i].memory_total = G.dev[i].memory_total;
        }
    }
}

/* A new reading into the run's figures. */
static void fold_reading(cal_profile *p, const cal_gpu_reading *r, int64_t t)
{
    cal_gpu_summary *s = cal_profile_gpu(p);
    s->util_sum += r->util;
    s->memory_sum += (double)r->memory;
    s->n++;
    if (r->memory > s->memory_peak)
        s->memory_peak = r->memory;
    for (int i = 0; i < s->ndevices && i < r->ndevices; i++) {
        s->dev[i].util_sum += r->dev_util[i];
        s->dev[i].n++;
        if (r->dev_memory[i] > s->dev[i].memory_peak)
            s->dev[i].memory_peak = r->dev_memory[i];
    }
    cal_series_add(&s->memory, t < 0 ? 0 : t, r->memory);
}

const cal_gpu_reading *calx_gpu_pass(cal_profile *p, int64_t start_wall)
{
    if (!p)
        return NULL;
    pthread_mutex_lock(&G.mu);
    if (G.state_seq != G.seen_state_seq) {
        G.seen_state_seq = G.state_seq;
        fold_state(p, start_wall);
    }
    if (G.seq != G.seen_seq) {
        G.seen_seq = G.seq;
        G.current = G.reading;
        G.have_current = 1;
        fold_reading(p, &G.current, G.reading_at - start_wall);
    }
    int live = G.have_current && !G.stopped && G.state == CAL_GPU_ON;
    pthread_mutex_unlock(&G.mu);
    return live ? &G.current : NULL;
}
