/*
 * cputicks — samples of a thread other than the main one, taken by the
 * thread itself each time it has used another interval of CPU time.  See
 * cputicks.c for why, and docs/INTERNALS.md ("Where other threads' CPU
 * goes", "Free-threaded").
 *
 * A thread is armed with a timer on its own CPU clock; when it fires, the
 * thread (on a CPU, where it runs) records where it is into its slot: on
 * the free-threaded build a copy of its frames, which the pass checks as
 * it checks frames read from another thread (calx_frames_check); with a
 * GIL a peek at its innermost frames, which the pass reads against the
 * thread's live stack as it reads the main thread's peek at a tick
 * (calx_thread_frames), and whether it held the GIL and ran C code since
 * gilwatch's last probe (calx_gilwatch_tick_probe_sigsafe).
 */
#ifndef CALX_CPUTICKS_H
#define CALX_CPUTICKS_H

#include <Python.h>
#include <stdint.h>
#include <time.h>

#include "pyinternals.h"

#ifdef Py_GIL_DISABLED
#define CALX_TICK_FRAMES                                                               \
    256 /* frames a tick copies: deeper stacks keep their innermost */
#else
#define CALX_TICK_FRAMES 1 /* (a peek instead: calx_cputick.peek) */
#endif

typedef struct calx_cputick {
    int64_t cpu_ns; /* the thread's CPU clock at the tick */
    int attached;   /* its thread state then: 1 attached (bytecode), 0
                       detached (native code), -1 neither */
    int gc;         /* attached while the collector ran: its collection */
    int in_c;       /* with a GIL, attached: in C code since gilwatch's last
                       probe (1), or not (0); -1: no probe (before 3.13) */
    int own_code;   /* with a GIL: the signal interrupted the interpreter's,
                       calipers' or the system's machine code (1), another
                       library's (0), -1 unknown */
    int n;          /* frames copied, innermost first (free-threaded) */
    int more;       /* the stack went on past them */
    calx_raw_frame f[CALX_TICK_FRAMES]; /* the free-threaded build's */
    calx_peek peek;                     /* with a GIL: its innermost frames */
} calx_cputick;

/* Can threads be armed here (a kernel whose CPU timers cannot interrupt a
   system call)?  Returns 0, or -1 where they cannot be: the sampler then
   reads threads where it finds them.  The handler goes on a free
   real-time signal when the first thread is armed (none free: no thread
   is).  Caller holds the engine lock (the GIL on a build with one). */
int calx_cputicks_start(int64_t interval_ns, PyInterpreterState *interp);

/* Arm a thread (kernel id tid, CPU clock base `clock`, thread state ts)
   to tick every interval of its CPU time.  Returns its slot, or -1 (no
   free signal, no memory, no timer). */
int calx_cputicks_arm(const PyThreadState *ts, int tid, clockid_t clock);

/* The thread state a slot's thread now runs with (a C thread gets a new
   one for each call into Python). */
void calx_cputicks_retarget(int slot, const PyThreadState *ts);

/* Disarm a slot: its ticks not taken yet are dropped. */
void calx_cputicks_disarm(int slot);

/* Take the slot's oldest tick not taken yet into *out: 1, or 0 if none. */
int calx_cputicks_take(int slot, calx_cputick *out);

/* Whether the program has put a handler of its own on the ticks' signal
   since it was taken: then every slot is disarmed (its ticks would go to
   the program), and the next arm takes another free signal.  A system
   call; once a pass. */
int calx_cputicks_taken_over(void);

/* Disarm every slot and give the signal back. */
void calx_cputicks_stop(void);

/* In a forked child: its timers are gone (timers are not inherited). */
void calx_cputicks_after_fork_child(void);

#endif
