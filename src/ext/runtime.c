/* runtime — see runtime.h.  No Python.h: it must stay usable without the GIL. */
#define _GNU_SOURCE /* RTLD_DEFAULT, pthread_getcpuclockid */
#include "runtime.h"

#include "cal_clock.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

const cal_shim_api *calx_runtime_shim(void)
{
    static const cal_shim_api *api;
    static int looked;
    if (!looked) {
        const cal_shim_api *a = dlsym(RTLD_DEFAULT, CAL_SHIM_SYMBOL);
        api = a && a->abi == CAL_SHIM_ABI ? a : NULL;
        looked = 1;
    }
    return api;
}

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
