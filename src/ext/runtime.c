/* runtime — see runtime.h.  No Python.h: it must stay usable without the GIL. */
#define _GNU_SOURCE /* RTLD_DEFAULT, pthread_getcpuclockid */
#include "runtime.h"

#include "cal_clock.h"

#include <dlfcn.h>
#include <signal.h>
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

int calx_runtime_thread_start_unsignalled(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits it */
    int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
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
