/*
 * signals — see signals.h.
 *
 * HOW IT WORKS
 *
 * Python leaves SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGALRM at
 * their default action, which ends the process without running atexit, so
 * a program ended that way would lose its profile.  For each of those
 * still at SIG_DFL when profiling starts we install a C handler.  The
 * Python signal module caches what it saw when it was imported (at
 * interpreter start-up, before calipers), so signal.getsignal() still
 * answers SIG_DFL, and a handler the program installs later simply
 * replaces ours: the program keeps its own signal semantics.
 *
 * The handler is async-signal-safe: it records the signal and writes one
 * byte to a pipe.  A helper thread (all signals blocked, so the kernel
 * never picks it to run a handler) reads the pipe, takes the GIL, calls
 * the agent's callback, which writes the profile, then restores SIG_DFL
 * and sends the signal to the process again, still holding the GIL so no
 * more Python runs: the process ends exactly as it would have, with the
 * same signal in its status.  Taking the GIL may wait for a long native
 * call; a watchdog ends the process as it would have after
 * WATCHDOG_SECONDS in any case, so a wedged program stays killable.
 *
 * A forked child inherits the handler but not the helper thread: in the
 * child the handler notices the pid changed and takes the default action
 * itself, until the child restarts profiling (signals.h).
 */
#include "signals.h" /* Python.h first */

#include "cal_clock.h"
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WATCHDOG_SECONDS 10

static const int watched[] = {SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM};
#define NWATCHED (sizeof watched / sizeof watched[0])

static struct {
    /* Written before the handlers are installed; read by them. */
    int pipe[2];
    pid_t pid;
    unsigned ours; /* bit i: watched[i] has our handler */
    /* Set by the handler. */
    atomic_int caught;
    /* Protected by the GIL. */
    PyObject *callback;
    pthread_t helper;
    int running;
    int paused; /* the helper stopped for a fork (handlers still ours) */
    atomic_int helper_tid;
    atomic_int handling; /* the helper is handling a signal: it never ends */
} S = {.pipe = {-1, -1}};

/* Restore the default action and deliver `sig` to the process again. */
static void die_by_sigsafe(int sig)
{
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    kill(getpid(), sig);
}

static void on_signal_sigsafe(int sig)
{
    int saved = errno;
    if (getpid() != S.pid) {
        /* A forked child that has not restarted: as if we were not here. */
        die_by_sigsafe(sig);
        errno = saved;
        return;
    }
    int expected = 0;
    if (atomic_compare_exchange_strong(&S.caught, &expected, sig)) {
        char byte = 1;
        ssize_t n;
        do
            n = write(S.pipe[1], &byte, 1);
        while (n < 0 && errno == EINTR);
    }
    errno = saved;
}

static void *watchdog_main(void *arg)
{
    int sig = (int)(intptr_t)arg;
    struct timespec ts = {WATCHDOG_SECONDS, 0};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    die_by_sigsafe(sig);
    return NULL;
}

static void *helper_main(void *arg)
{
    (void)arg;
    atomic_store(&S.helper_tid, (int)gettid());
    char byte;
    for (;;) {
        ssize_t n = read(S.pipe[0], &byte, 1);
        if (n == 1)
            break;
        if (n == 0 || (n < 0 && errno != EINTR))
            return NULL; /* the pipe was closed: stopping */
    }
    /* A zero byte asks it to end for a fork (calx_signals_fork_ask), even
       if a signal was caught since: its byte waits in the pipe for the
       helper that starts after the fork (the stopping thread joins this
       one and must not wait for a signal to be handled). */
    int sig = byte ? atomic_load(&S.caught) : 0;
    if (sig == 0)
        return NULL; /* woken by calx_signals_stop, or for a fork */
    atomic_store(&S.handling, 1);
    pthread_t wd;
    pthread_create(&wd, NULL, watchdog_main, (void *)(intptr_t)sig);
    PyGILState_STATE gs = PyGILState_Ensure();
    if (S.callback) {
        PyObject *r = PyObject_CallFunction(S.callback, "i", sig);
        if (r)
            Py_DECREF(r);
        else
            PyErr_Clear();
    }
    /* Still holding the GIL: nothing else runs Python from here on. */
    die_by_sigsafe(sig);
    for (;;)
        pause();
    PyGILState_Release(gs); /* not reached */
    return NULL;
}

/* The helper blocks every signal, so the kernel never picks it to run a
   handler.  Returns pthread_create's status. */
static int start_helper(void)
{
    int rc = calx_runtime_thread_start_near(&S.helper, helper_main, NULL);
    /* Its kernel id now, not when it first runs: the native-thread scan
       must never take it for one of the program's. */
    int tid = rc == 0 ? calx_runtime_thread_tid(S.helper) : 0;
    if (tid)
        atomic_store(&S.helper_tid, tid);
    return rc;
}

int calx_signals_start(PyObject *callback)
{
    if (S.running)
        return 0;
    if (pipe2(S.pipe, O_CLOEXEC) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    S.pid = getpid();
    atomic_store(&S.caught, 0);
    Py_INCREF(callback);
    Py_XSETREF(S.callback, callback);
    int rc = start_helper();
    if (rc != 0) {
        close(S.pipe[0]);
        close(S.pipe[1]);
        S.pipe[0] = S.pipe[1] = -1;
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    S.running = 1;
    S.ours = 0;
    for (size_t i = 0; i < NWATCHED; i++) {
        struct sigaction cur;
        if (sigaction(watched[i], NULL, &cur) != 0 || (cur.sa_flags & SA_SIGINFO) ||
            cur.sa_handler != SIG_DFL)
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal_sigsafe;
        sa.sa_flags = SA_RESTART;
        sigfillset(&sa.sa_mask);
        if (sigaction(watched[i], &sa, NULL) == 0)
            S.ours |= 1u << i;
    }
    return 0;
}

/* Give back the signals whose handler is still ours. */
static void restore_defaults(void)
{
    for (size_t i = 0; i < NWATCHED; i++) {
        if (!(S.ours & (1u << i)))
            continue;
        struct sigaction cur;
        if (sigaction(watched[i], NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
            cur.sa_handler == on_signal_sigsafe)
            signal(watched[i], SIG_DFL);
    }
    S.ours = 0;
}

void calx_signals_stop(int leaving)
{
    if (!S.running || getpid() != S.pid)
        return;
    restore_defaults();
    if (!S.paused && leaving && atomic_load(&S.caught) == 0) {
        /* The process is ending: the helper is left waiting in read(),
           neither woken nor waited for, with its pipe (close-on-exec). */
        pthread_detach(S.helper);
        S.pipe[0] = S.pipe[1] = -1;
        S.running = 0;
    } else if (S.paused || atomic_load(&S.caught) == 0) {
        /* Wake the helper with nothing caught; it exits. */
        close(S.pipe[1]);
        S.pipe[1] = -1;
        if (!S.paused) {
            Py_BEGIN_ALLOW_THREADS pthread_join(S.helper, NULL);
            Py_END_ALLOW_THREADS
        }
        close(S.pipe[0]);
        S.pipe[0] = -1;
        S.running = 0;
        S.paused = 0;
    }
    /* A signal is being handled: the helper owns the rest. */
}

int calx_signals_fork_ask(void)
{
    if (!S.running || S.paused || getpid() != S.pid || atomic_load(&S.caught))
        return 0;
    /* A byte with nothing caught: the helper exits.  A signal that
       arrives from now on leaves its byte in the pipe for the next one. */
    char byte = 0;
    ssize_t n;
    do
        n = write(S.pipe[1], &byte, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1)
        return 0;
    S.paused = 1; /* from now on nobody else joins it */
    return 1;
}

void calx_signals_fork_join(void)
{
    /* A signal's byte can reach the pipe before ours, and then the helper
       handles the signal (and ends the process) instead of ending: it
       will need what the stopping thread holds, so stop waiting for it. */
    for (;;) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 1000000;
        if (dl.tv_nsec >= 1000000000) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000;
        }
        int rc = pthread_timedjoin_np(S.helper, NULL, &dl);
        if (rc == 0)
            break;
        if (rc != ETIMEDOUT || atomic_load(&S.handling))
            return;
    }
    /* and until the kernel stops counting it (cal_clock.h) */
    cal_clock_wait_thread_gone(atomic_load(&S.helper_tid));
}

void calx_signals_fork_after_parent(void)
{
    if (!S.paused || getpid() != S.pid)
        return;
    S.paused = 0;
    if (start_helper() != 0) {
        /* Nobody would act on our handlers: give the signals back. */
        restore_defaults();
        S.paused = 1; /* no helper to join when stopping */
    }
}

int calx_signals_is_helper(unsigned long ident, int tid)
{
    if (!S.running)
        return 0;
    return (ident && ident == (unsigned long)S.helper) ||
           (tid && tid == atomic_load(&S.helper_tid));
}

void calx_signals_after_fork_child(void)
{
    if (!S.running)
        return;
    restore_defaults();
    if (S.pipe[0] >= 0)
        close(S.pipe[0]);
    if (S.pipe[1] >= 0)
        close(S.pipe[1]);
    S.pipe[0] = S.pipe[1] = -1;
    S.running = 0;
    S.paused = 0;
    atomic_store(&S.caught, 0);
    atomic_store(&S.helper_tid, 0);
    atomic_store(&S.handling, 0);
}
