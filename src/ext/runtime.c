/* runtime — see runtime.h.  No Python.h: it must stay usable without the GIL. */
#define _GNU_SOURCE /* RTLD_DEFAULT, pthread_getcpuclockid, affinity */
#include "runtime.h"

#include "cal_clock.h"

#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>

/* Set by the first calx_runtime_shim() (preloaded) or by
   calx_runtime_shim_load() (dlopen'ed); both run with the GIL held, and a
   shim once found stays (it is never unloaded). */
static const cal_shim_api *shim_api;
static int shim_looked, shim_loaded;

const cal_shim_api *calx_runtime_shim(void)
{
    if (!shim_looked) {
        const cal_shim_api *a = dlsym(RTLD_DEFAULT, CAL_SHIM_SYMBOL);
        shim_api = a && a->abi == CAL_SHIM_ABI ? a : NULL;
        shim_looked = 1;
    }
    return shim_api;
}

const cal_shim_api *calx_runtime_shim_load(const char *path, const char **error)
{
    *error = NULL;
    if (calx_runtime_shim())
        return shim_api;
    /* Local: its malloc & co. must not be found by a later lookup (they are
       reached only through the GOT entries it redirects); never unloaded:
       redirected entries and other threads may be inside it. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        *error = dlerror();
        return NULL;
    }
    const cal_shim_api *a = dlsym(h, CAL_SHIM_SYMBOL);
    if (!a || a->abi != CAL_SHIM_ABI) {
        *error = "the shim is of another version";
        return NULL;
    }
    shim_api = a;
    shim_loaded = 1;
    return a;
}

int calx_runtime_shim_in_process(void) { return shim_loaded; }

int calx_runtime_guard_enter(void)
{
    const cal_shim_api *api = calx_runtime_shim();
    return api ? api->guard_enter() : 0;
}

void calx_runtime_guard_leave(int previous)
{
    const cal_shim_api *api = calx_runtime_shim();
    if (api)
        api->guard_leave(previous);
}

int calx_runtime_guard_enter_sigsafe(void)
{
    const cal_shim_api *api = shim_looked ? shim_api : NULL;
    return api ? api->guard_enter() : 0;
}

void calx_runtime_guard_leave_sigsafe(int previous)
{
    const cal_shim_api *api = shim_looked ? shim_api : NULL;
    if (api)
        api->guard_leave(previous);
}

static int start_blocked(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
                         void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits it */
    int rc = pthread_create(t, attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int calx_runtime_thread_start_unsignalled(pthread_t *t, void *(*fn)(void *), void *arg)
{
    return start_blocked(t, NULL, fn, arg);
}

/* The CPU a forked child's threads start on (-1: none), the affinity they
   get back at the pin's end (the main thread's at the restart), and the
   kernel ids of the threads started pinned.  cpu is read without mu only
   to return early once the pin has ended; a thread is started and its id
   recorded under mu, so an end can never miss one that is starting. */
static struct {
    pthread_mutex_t mu;
    atomic_int cpu;
    cpu_set_t home;
    int tids[4];
    int ntids;
} pin = {.mu = PTHREAD_MUTEX_INITIALIZER, .cpu = -1};

void calx_runtime_pin_begin(void)
{
    /* The child's only thread: the parent's lock state means nothing. */
    pthread_mutex_init(&pin.mu, NULL);
    pin.ntids = 0;
    int cpu = sched_getcpu();
    if (cpu < 0 ||
        pthread_getaffinity_np(pthread_self(), sizeof pin.home, &pin.home) != 0)
        cpu = -1;
    atomic_store(&pin.cpu, cpu);
}

int calx_runtime_thread_start_near(pthread_t *t, void *(*fn)(void *), void *arg)
{
    if (atomic_load(&pin.cpu) < 0)
        return start_blocked(t, NULL, fn, arg);
    pthread_mutex_lock(&pin.mu);
    int cpu = atomic_load(&pin.cpu);
    pthread_attr_t attr;
    int pinned = cpu >= 0 && pin.ntids < (int)(sizeof pin.tids / sizeof pin.tids[0]) &&
                 pthread_attr_init(&attr) == 0;
    if (pinned) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_attr_setaffinity_np(&attr, sizeof one, &one);
    }
    int rc = start_blocked(t, pinned ? &attr : NULL, fn, arg);
    if (pinned) {
        pthread_attr_destroy(&attr);
        int tid = rc == 0 ? calx_runtime_thread_tid(*t) : 0;
        if (tid > 0)
            pin.tids[pin.ntids++] = tid;
    }
    pthread_mutex_unlock(&pin.mu);
    return rc;
}

void calx_runtime_pin_end(void)
{
    if (atomic_load(&pin.cpu) < 0)
        return;
    pthread_mutex_lock(&pin.mu);
    if (atomic_exchange(&pin.cpu, -1) >= 0)
        for (int i = 0; i < pin.ntids; i++)
            sched_setaffinity(pin.tids[i], sizeof pin.home, &pin.home);
    pin.ntids = 0;
    pthread_mutex_unlock(&pin.mu);
}

int calx_runtime_thread_tid(pthread_t t)
{
    clockid_t c;
    return pthread_getcpuclockid(t, &c) == 0 ? cal_clock_thread_tid(c) : 0;
}

int calx_runtime_entry_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}
