/*
 * signals — a profile even when the program is ended by a signal whose
 * default action is to terminate it (SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
 * SIGUSR2, SIGALRM): the profile is written, then the process ends by the
 * same signal.  Signals the program handles itself are never touched.
 * See docs/INTERNALS.md, "Signals".
 *
 * All functions are called with the GIL held.
 */
#ifndef CALX_SIGNALS_H
#define CALX_SIGNALS_H

#include <Python.h>

/* Install the handlers on the signals still at their default action, and
   start the helper thread that calls callback(signum) (with the GIL) when
   one arrives.  On success return 0; on error set an exception and return
   -1. */
int calx_signals_start(PyObject *callback);

/* Give the signals back (those whose handler is still ours) and stop the
   helper, unless it is already handling a signal.  leaving: the process is
   about to end (os._exit, exec), so the helper is not waited for. */
void calx_signals_stop(int leaving);

/* Around a fork (see calx_sampler_fork_before): the helper thread stops
   before it and starts again in the parent; a signal caught in between is
   handled then.  In two steps, so that the sampler can ask all of its
   threads to end before it waits for any: ask (GIL held) returns 1 if the
   helper was asked to end, and then join (GIL not needed) must be called
   once, to wait until it is gone.  The sampler serialises these calls
   (one stop or start at a time, whatever the number of forking threads). */
int calx_signals_fork_ask(void);
void calx_signals_fork_join(void);
void calx_signals_fork_after_parent(void);

/* Is this thread (pthread ident, or kernel tid; 0 for unknown) the helper?
   The sampler leaves it out: it is the profiler's own. */
int calx_signals_is_helper(unsigned long ident, int tid);

/* In a forked child (pthread_atfork): the helper thread is gone; give the
   signals back until calx_signals_start is called again. */
void calx_signals_after_fork_child(void);

#endif
