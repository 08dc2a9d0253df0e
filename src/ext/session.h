/*
 * session — the profile this process is collecting, and what the CPU and
 * memory engines share to fill it: the profile itself, the code table
 * (code object -> file, function, "is it profiled?") and the filter that
 * answers it, the time origin, whether profiling is switched off, and
 * where a thread is now (its innermost profiled line and the profiled
 * functions on its stack).  See docs/INTERNALS.md, "Source tour".
 *
 * The CPU sampler (sampler.c) begins and ends sessions and credits time;
 * the memory engine (memory.c) asks where allocations are made.  The
 * profile, the code table and the filter are protected by the GIL; the
 * switch by the session's own mutex, a leaf (the sampler thread takes it
 * inside the engine's); whether profiling is off can be read by any thread.
 */
#ifndef CALX_SESSION_H
#define CALX_SESSION_H

#include <Python.h>

#include "cal_profile.h"
#include "codeinfo.h"
#include "pyinternals.h"

/* How deep a walk of a thread's stack goes: deeper stacks lose their
   outermost frames. */
#define CALX_FRAMES_MAX 4096

/* Take the filter for the sessions that begin from now on (GIL held, no
   session running).  *filter_steal is left empty. */
void calx_session_set_filter(calx_filter *filter_steal);

/* Begin a fresh profile (GIL held): an empty profile and code table, the
   time origin now, profiling on (until the switch is read again).  The
   previous profile is freed, unless `inherited`: in a forked child it is
   the parent's, left as it is (see session.c).  On success return 0; on
   error set an exception and return -1, with no profile. */
int calx_session_begin(int inherited);

/* Bring the profile's wall time and its time switched off up to now (GIL
   held): at the end, and for a profile written while the program runs. */
void calx_session_stamp(void);

/* At the end of a session, once nothing will be credited any more (GIL
   held): the profile has its own copies of every name, so the code
   objects the table kept alive can go. */
void calx_session_release_codes(void);

/* The profile collected so far, or NULL before the first session (owned by
   the session; GIL held). */
cal_profile *calx_session_profile(void);

/* The code table's answer for `code`, computed on first sight; NULL if
   memory ran out.  GIL held. */
const calx_code *calx_session_code(PyCodeObject *code);

/* Resolve the line of `f`, whose code's entry is `ci` (calx_session_code),
   through the code table's line cache.  Caller holds the GIL. */
void calx_session_line(const calx_code *ci, calx_frame *f);

/* Is `code` in the code table already?  Never dereferences it: an address
   read from a frame that another thread may be overwriting (nogil.h).
   Engine lock held. */
int calx_session_code_known(const PyCodeObject *code);

/* Move the time origin since_ns back (right after beginning: a program
   exec'd by the profiled one goes on with its clock). */
void calx_session_set_origin(int64_t since_ns);

/* When the profile started (cal_clock_now_ns time), and how long ago. */
int64_t calx_session_origin(void);
int64_t calx_session_elapsed_ns(void);

/* Switching profiling off and on.  While off, samples only move the
   threads' baselines and allocations are not credited to lines (memory.c);
   wall time, the footprint timeline and the exact totals go on.  Off while
   the file at `path` exists (checked ten times a second by the sampler
   thread, calx_session_check_switch, and now; NULL: no file), or as
   set_paused says last.  set_switch returns 0, or -1 with an exception. */
int calx_session_set_switch(const char *path);
/* Look at the switch file if it is time to (now: cal_clock_now_ns). */
void calx_session_check_switch(int64_t now);
void calx_session_set_paused(int off);
int calx_session_paused(void);
/* How long profiling has been off. */
int64_t calx_session_paused_ns(void);

/* Where a thread is, for the memory engine: the innermost profiled line and
   the profiled functions on the stack (once each), and the whole stack
   (for calx_session_stack).  file == func == CAL_PROFILE_NONE when no
   profiled code is on it. */
typedef struct calx_where {
    uint32_t file, func;
    int32_t line;
    const uint32_t *funcs; /* valid until the next call */
    size_t nfuncs;
    const calx_frame *frames; /* innermost first; valid until the next call */
    int nframes;              /* (calx_session_where_cached: the caller's) */
} calx_where;

/* Where thread `ts` is.  Caller holds the GIL and is `ts` or has it
   stopped.  0, or -1 with no profile or on allocation failure. */
int calx_session_where(PyThreadState *ts, calx_where *w);

/* The same from frames captured earlier, whose code objects may be gone:
   only code objects the code table has cached (and so kept alive) are
   used.  Caller holds the GIL. */
void calx_session_where_cached(const calx_frame *frames, int n, calx_where *w);

/* The stack table's node for the stack frames[0..n) (innermost first, each
   code seen before by calx_session_code) of the profile's thread `thread`:
   the thread's root when n is 0.  *folded is set when the table was full
   and the stack stops short at its deepest node that exists.
   CAL_STACKS_NONE if not even the root can be had.  GIL held. */
uint32_t calx_session_stack(uint32_t thread, const calx_frame *frames, int n,
                            int *folded);

/* Credit a CPU sample's times to a node of the stack table (as
   cal_stacks_add_times), and put the sample on the profile's timeline of
   samples (cal_timeline.h) at the node's thread, now, by the largest of its
   four kinds of time.  A NONE node is ignored.  GIL held. */
void calx_session_stack_times(uint32_t node, const cal_times *t, int folded);

/* The same for an allocation or copy sample's volume (one of its three
   figures), taken at t_ns (calx_session_elapsed_ns time). */
void calx_session_stack_volume(uint32_t node, const cal_volume *v, int folded,
                               int64_t t_ns);

/* The profile's index of the thread (threading.get_ident(), 0 for a thread
   that never ran Python; kernel thread id `tid`), made on first sight as
   the CPU sampler would make it (cal_profile_thread): a thread that
   allocates before its first CPU sample.  Every thread that existed when
   the session began is registered then, so a new one is never the main
   thread.  CAL_PROFILE_NONE with no profile or on allocation failure.
   GIL held. */
uint32_t calx_session_thread(unsigned long ident, int tid);

/* In a forked child (pthread_atfork; no allocation, no lock): another
   thread may have held the session's mutex at fork(). */
void calx_session_after_fork_child(void);

#endif
