/*
 * pyinternals — everything that reads CPython's private structures, one
 * implementation per supported version (3.9 to 3.14), selected at compile
 * time against that version's own internal headers.  A newer interpreter
 * builds and loads without them, and reads no frames (calx_layout_problem).
 *
 * Frame walking never allocates, never creates frame objects, never calls
 * back into Python: PyThreadState_GetFrame()/PyFrame_GetBack() would build
 * frame objects from 3.11 on, which can run the garbage collector.
 */
#ifndef CALX_PYINTERNALS_H
#define CALX_PYINTERNALS_H

#include <Python.h>

/* Check, once at import and before any other function here is used, that
   the layouts this extension was compiled with are the running
   interpreter's (from 3.13 on against its _Py_DebugOffsets).  Returns 0,
   or -1 when frames must not be read: then calx_thread_frames finds none,
   the peek sees none, and calx_layout_problem() says why.  Caller holds
   the GIL. */
int calx_layout_check(void);

/* Why frames are not read (one clause, no trailing full stop), or NULL. */
const char *calx_layout_problem(void);

typedef struct calx_frame {
    PyCodeObject *code; /* borrowed */
    int offset;         /* of the instruction, in bytes into the code */
    int line;           /* CALX_LINE_UNRESOLVED until resolved */
} calx_frame;

/* A frame's line before it is looked up: finding the line of an offset
   scans the code's line table (thousands of instructions in a long
   function), so it is done once per code and offset where a cache can
   hold it (calx_codes_line) and here otherwise. */
#define CALX_LINE_UNRESOLVED (-2)

/* Resolve the lines of frames[0..n) (PyCode_Addr2Line), uncached.  The
   codes must be alive: caller holds the GIL, or the frames are its own
   thread's. */
void calx_frames_resolve(calx_frame *frames, int n);

/* A thread's innermost frames as another thread saw them, without the GIL,
   at one moment (a tick): each frame's address, code and instruction,
   innermost first.  Nothing in it is dereferenced until a walk of the live
   stack has found the same frame with the same code (calx_thread_frames). */
#define CALX_PEEK_FRAMES 16
typedef struct calx_peek {
    int n; /* frames read; 0 when the peek failed */
    /* It read a generator's (or coroutine's) frame on the free-threaded
       build, where such a read is trusted only for a thread that held
       still long enough (calx_peek_frames_sigsafe). */
    int fragile;
    struct {
        const void *frame;
        const void *code;
        intptr_t at; /* the instruction: a pointer (3.11+) or f_lasti */
        int shim;    /* an entry frame or shim (3.12+), which runs no code of
                        the program: the walk skips it */
    } f[CALX_PEEK_FRAMES];
} calx_peek;

/* Before peeking at ts's frames (calx_peek_frames_sigsafe): find the
   part of its frame stack that lives as long as the profile.  ts is the
   calling thread's.  GIL. */
void calx_peek_prepare(const PyThreadState *ts);

/* Peek at ts's frames.  ts must stay alive (the main thread's).  Callable
   without the GIL; async-signal-safe.  The sampler thread's only. */
void calx_peek_frames_sigsafe(const PyThreadState *ts, calx_peek *out);

/* The same through the caller's window: a thread peeking at its own
   frames (ts its own, running nothing while it reads: a signal handler). */
struct cal_vmread;
void calx_peek_own_frames_sigsafe(struct cal_vmread *w, const PyThreadState *ts,
                                  calx_peek *out);

/* Fill out[0..max) with the Python frames of `ts`, innermost first; skips
   incomplete frames and C-stack shims.  With a peek `at` (or NULL), the
   stack as it was then, as far as it still is: the walk starts at the
   innermost frame the peek saw that is still on the stack, and the frames
   the peek saw get the instructions they were on then.  Lines are left
   CALX_LINE_UNRESOLVED.  The frames the peek saw inside that one, left
   since (returned, or generators suspended), come first, from the peek,
   when `known` (or NULL) says their code objects are alive.  Returns the
   number of frames stored (the walk stops at `max`).  Caller holds the
   GIL. */
int calx_thread_frames(PyThreadState *ts, const calx_peek *at,
                       int (*known)(const void *code), calx_frame *out, int max);

/* The frames a peek saw, alone (the thread's state is gone since, or it
   left Python): all of them if `known` says every code object in it is
   alive, else none.  Returns the number stored.  Caller holds the GIL. */
int calx_peek_frames_known(const calx_peek *at, int (*known)(const void *code),
                           calx_frame *out, int max);

/* Whether ts still has any of the frames a peek saw (the same frame with
   the same code).  Caller holds the GIL. */
int calx_peek_on_stack(PyThreadState *ts, const calx_peek *at);

/* Which opcodes are calls, specialized forms included: 256 flags, as
   the interpreter's opcode module names them (calipers/_agent.py): 0 not
   a call; CALX_CALL_PYTHON a form specialized for a Python function,
   whose frame the callee runs in (CALL_PY_EXACT_ARGS ...); 1 any other
   call. */
#define CALX_CALL_PYTHON 2
void calx_set_call_opcodes(const uint8_t flags[256]);

/* Before 3.13 (no probe of a thread's own eval breaker): whether a
   thread's own tick found it in a library's C code: its innermost frame,
   as peeked at, inside a call (not one specialized for a Python function,
   which runs in a frame of its own), and the signal having interrupted a
   library's machine code (own_code 0), not the interpreter's (the
   machinery around a call: a class whose __init__ is Python; the builtins)
   nor the system's (a clock read).  1 or 0; -1 if unknown (its code not
   known to be alive, an entry frame on top, 3.13+).  Caller holds the
   GIL. */
int calx_peek_in_c_call(const calx_peek *at, int (*known)(const void *code),
                        int own_code);

/* Whether ts is still where a peek found it innermost, at a call: the
   same frame, with the same code, at the same instruction, and that
   instruction one of the calls.  ts is the caller's own.  GIL. */
int calx_peek_still_in_call(const PyThreadState *ts, const calx_peek *at);

/* Hold the runtime's thread-list lock (HEAD_LOCK) while iterating
   PyInterpreterState_ThreadHead()/PyThreadState_Next(): thread states can be
   created and deleted without the GIL (PyGILState_Ensure from a foreign
   thread).  Nothing called while it is held may create or delete a thread
   state.  Caller holds the GIL. */
void calx_threads_lock(void);
void calx_threads_unlock(void);

/* The thread state holding the GIL right now, or NULL if it is free.  Reads
   two words of the GIL's own state; the answer may be stale by the time the
   caller looks at it.  Callable without the GIL; async-signal-safe. */
PyThreadState *calx_gil_holder_sigsafe(PyInterpreterState *interp);

/* Before 3.13, with a GIL: does another thread's request that the holder
   let the GIL go stand (1) or not (0), and how many times has the GIL
   changed hands (*switches)?  A thread that waits for the GIL sets the
   request when its switch interval ends with the holder unchanged
   (take_gil, Python/ceval_gil.[ch]); a holder running bytecode answers
   at its next look at its eval breaker, within instructions, marking the
   GIL unlocked (drop_gil) before the request is reset, and the waiter's
   taking it counts a switch.  So a holder seen holding while one request
   stands, with no switch between, did not look in between.  -1 on 3.13+
   and the free-threaded build (3.13+ probes a bit of the thread's own:
   calx_probe_holder).  Async-signal-safe. */
int calx_gil_drop_asked_sigsafe(PyInterpreterState *interp, unsigned long *switches);

/* Where the GIL's state lies, [*lo, *hi): its mutexes and conditions are
   in it, so a thread blocked on a futex word there waits for the GIL (or,
   made to let it go, for another thread to take it).  0, or -1 if
   unknown. */
int calx_gil_bounds(PyInterpreterState *interp, uintptr_t *lo, uintptr_t *hi);

/* Queue a call that any thread of the interpreter may run, the first to
   look at its eval breaker: the thread that holds the GIL, within
   microseconds if it runs bytecode (3.12 sets the interpreter's eval
   breaker, which every thread reads; 3.13 on, that of the thread holding
   the GIL; Python/ceval_gil.c, _PyEval_AddPendingCall without "main
   thread only").  3.12 on, with a GIL; 0 if queued, -1 if
   not (an older Python, the free-threaded build, or the queue is full).
   Callable without the GIL. */
int calx_any_thread_call(PyInterpreterState *interp, int (*fn)(void *), void *arg);

/* 3.13+: probe whether `holder` (the GIL's holder, read a moment ago)
   looked at its eval breaker since the last probe: sets its "signals
   pending" bit, which its next look clears (a thread other than the main
   one only clears it: handle_signals, Python/ceval_gil.c).  Takes the
   runtime's thread-list lock and touches the state only if it is still in
   the interpreter's list (a state is unlinked under that lock before it is
   freed).  Returns 1 if the bit was clear (it looked), 0 if still set, -1
   if not probed (gone, or an older Python).  Callable without the GIL. */
int calx_probe_holder(PyInterpreterState *interp, const PyThreadState *holder);

/* 3.13+: probe the calling thread's own state ts (a signal handler of
   it): set its "signals pending" bit, as calx_probe_holder does, and say
   whether it was still set (1), or clear (0: it looked at its eval
   breaker since the last probe); -1 where there is no probe (nothing
   set).  Async-signal-safe. */
int calx_probe_own_sigsafe(PyThreadState *ts);

/* The thread (threading.get_ident()) of a thread state that another thread
   may be deleting: read through the caller's window (cal_vmread), so that
   it fails instead of faulting.  Returns 0, or -1 if it cannot be read. */
struct cal_vmread;
int calx_thread_ident_sigsafe(struct cal_vmread *w, const PyThreadState *ts,
                              unsigned long *ident);

/* Make the main thread notice a call queued with Py_AddPendingCall() at its
   next bytecode boundary.  From 3.9 to 3.12 Py_AddPendingCall(), called from a
   thread that is not the main thread, leaves the eval breaker unset (it is
   recomputed for the calling thread), so the call would wait for the next
   GIL hand-off; we set it.  3.13 signals the main thread itself, but on
   the free-threaded build any thread that runs the interpreter's pending
   calls first clears every thread's "calls to do" bit
   (unsignal_pending_calls, Python/ceval_gil.c), the main thread's too,
   and runs only the interpreter's calls, not the main thread's: our call
   would then wait until the next Py_AddPendingCall(), which the sampler
   does not make while one is queued.  There the bit is set again at every
   tick (a spurious one costs the main thread a look at an empty queue).
   Callable without the GIL; async-signal-safe. */
void calx_poke_main_thread_sigsafe(void);

/* The free-threaded build: 1 if the main thread's "calls to do" bit is
   clear (another thread cleared it, or the main thread is running the
   calls right now).  0 elsewhere.  Async-signal-safe. */
int calx_main_call_unsignalled_sigsafe(void);

/* The free-threaded 3.14t: a probe of whether the main thread runs
   bytecode, which another thread's handling of pending calls cannot hide
   (that clears and sets only the "calls to do" bits).  Sets the main
   thread's "signals pending" bit, which makes its next look at the eval
   breaker (at a call or a backward jump: microseconds apart in bytecode)
   read the signal module's "tripped" flag and clear the bit; nothing else
   clears it (PyErr_CheckSignals from C code leaves it: handle_signals,
   Python/ceval_gil.c).  Returns 1 if the bit was clear (it looked since
   the last probe), 0 if still set; -1 on other builds.
   Async-signal-safe. */
int calx_main_probe_sigsafe(void);

/* The same look, on every build: 1 if the main thread looked at its eval
   breaker since the last call (of this or of calx_main_probe_sigsafe), 0
   if not; sets the bit again.  Before 3.13 the bit is the runtime's
   "signals pending" flag, which only the main thread clears.  -1 where the
   layout is unknown.  Async-signal-safe. */
int calx_main_looked_sigsafe(void);

/* This thread's thread state if it holds the GIL, else NULL.  Safe without
   the GIL and inside an allocator hook. */
PyThreadState *calx_current_if_gil_held(void);

/* Bytes of pymalloc arenas allocated right now (0 without pymalloc).
   Caller holds the GIL. */
int64_t calx_pymalloc_arena_bytes(void);

/* Another thread's frames, innermost first, read while it runs (the
   free-threaded build, where holding a thread state stops nobody): the
   frames are copied through process_vm_readv and only code objects for
   which known(code) is true are used (pyinternals.c says why).  Returns
   the number of frames stored, CALX_WALK_TORN if the stack changed under
   the read (the sample must be dropped), or CALX_WALK_UNKNOWN if a code
   object on it is not known yet.  On the default build, the same as
   calx_thread_frames(ts, NULL, out, max).  Caller holds
   calx_threads_lock. */
#define CALX_WALK_TORN (-3) /* apart from -1, out of memory */
#define CALX_WALK_UNKNOWN (-2)
int calx_thread_frames_remote(PyThreadState *ts, int (*known)(const void *code),
                              calx_frame *out, int max);

/* A frame copied from a running thread's stack, nothing in it trusted
   yet (the free-threaded 3.14t; other builds never fill one). */
typedef struct calx_raw_frame {
    const void *code;  /* its executable's address */
    const void *instr; /* its instruction pointer */
    int32_t tlbc;      /* which copy of the bytecode that points into */
    int32_t owner;     /* who owns the frame (FRAME_OWNED_BY_*) */
} calx_raw_frame;

/* Copy up to max frames of ts, innermost first, through the window w
   (cal_vmread): nothing is dereferenced, so ts itself may be gone.  For
   a thread reading its own stack in a signal handler (cputicks.c).  Sets
   *more if the stack goes on past max, and *attached as
   calx_thread_attached would answer.  Returns the number copied, or
   CALX_WALK_TORN if a read failed.  Async-signal-safe. */
int calx_frames_copy_sigsafe(struct cal_vmread *w, const PyThreadState *ts,
                             calx_raw_frame *out, int max, int *more, int *attached);

/* Check copied frames as calx_thread_frames_remote checks the frames it
   reads, keeping the ones a walk keeps, in out[0..n).  Returns how many,
   CALX_WALK_UNKNOWN or CALX_WALK_TORN.  Caller holds the engine lock
   (the code table's). */
int calx_frames_check(const calx_raw_frame *raw, int n, int (*known)(const void *code),
                      calx_frame *out);

/* The free-threaded build: 1 if the thread's state is attached (it may
   run bytecode), 0 if detached (in native code, or blocked), -1 if
   neither (suspended for a stop-the-world pause) or on the default
   build.  Relaxed: a hint of the moment. */
int calx_thread_attached(const PyThreadState *ts);

/* 1 if a GIL keeps the interpreter's threads apart right now: always on
   the default build; on the free-threaded build only once something
   switched it on at run time (PYTHON_GIL=1, or importing an extension
   module that does not declare Py_MOD_GIL_NOT_USED).  Relaxed: it
   changes only at such an import.  Any thread, GIL or not. */
int calx_gil_enabled(PyInterpreterState *interp);

/* The free-threaded build: stop every other thread of the interpreter at
   a safe point (CPython's own stop-the-world, as the GC does), and start
   them again.  The caller is attached and holds no lock another thread
   may wait for attached.  No-ops on the default build. */
void calx_stop_world(PyInterpreterState *interp);
void calx_start_world(PyInterpreterState *interp);

/* The usable size of a block Python's object allocator made, when its
   memory is invisible to malloc (the free-threaded build's mimalloc), for
   the shim's Python hooks to count (calipers_shim.h, set_py_usable); NULL
   when malloc or pymalloc's arenas already show it.  The function it
   returns is async-signal-safe and allocates nothing. */
typedef size_t (*calx_usable_fn)(const void *ptr);
calx_usable_fn calx_pyalloc_usable_fn(void);
/* Garbage collections of any generation so far in the main interpreter
   (each one examines the youngest generation), read from the collector's
   statistics without touching what the program can observe; -1 when this
   interpreter's layout is unknown.  Any thread, GIL or not. */
int64_t calx_gc_collections(void);

/* The cyclic garbage collector's state, as gc.get_count(),
   gc.get_threshold() and gc.get_stats() would report it, read where the
   collector keeps it (nothing is registered with it or asked of it). */
#define CALX_GC_GENERATIONS 3
typedef struct calx_gc_state {
    int64_t count[CALX_GC_GENERATIONS];
    int64_t threshold[CALX_GC_GENERATIONS];
    int64_t collections[CALX_GC_GENERATIONS];
    int64_t collected[CALX_GC_GENERATIONS];
    int64_t uncollectable[CALX_GC_GENERATIONS];
} calx_gc_state;

/* Read interp's collector state into *out.  Returns 0, or -1 when this
   interpreter's layout is unknown.  Any thread, GIL or not:
   async-signal-safe (plain reads; without the GIL a figure may be one
   collection stale). */
int calx_gc_read_sigsafe(PyInterpreterState *interp, calx_gc_state *out);

/* 1 if interp's collector is collecting right now (some thread is in a
   collection, gc.collect() included), 0 if not or unknown.  Relaxed: the
   flag of the moment.  Any thread; async-signal-safe. */
int calx_gc_collecting_sigsafe(PyInterpreterState *interp);

/* Call visit(op, arg) for each object the collector tracks (its
   generations; gc.get_objects()'s objects, not gc.freeze()'s), until it
   returns 0.  Allocates nothing and runs no Python code: visit must not
   either (the lists must not change under the walk).  3.12+: it is
   PyUnstable_GC_VisitObjects; before, a walk of the collector's own lists.
   Returns 0, or -1 when this interpreter's layout is unknown (nothing
   visited).  GIL held. */
int calx_gc_visit(int (*visit)(PyObject *op, void *arg), void *arg);

#endif
