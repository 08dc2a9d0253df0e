/*
 * memory — see memory.h.
 *
 * HOW IT WORKS
 *
 * The shim (src/shim/shim.c) counts every byte exactly and samples a few
 * allocations (cal_bsamp.h: each sample stands for `weight` bytes, an
 * unbiased estimate).  For each sampled allocation this engine finds the
 * allocating thread's innermost profiled line and credits the weight to
 * the line's allocated bytes (Python or native), to every profiled
 * function on the stack, and to the node of the whole stack in the stack
 * table (whether or not a profiled line is on it), which puts it on the
 * timeline of samples too; the line's "live"
 * bytes grow by the weight and shrink by it when the shim reports the
 * block freed, giving an unbiased estimate of the memory each line holds
 * at any moment, its peak, and what it still holds at the end.  Copies
 * are sampled the same way.
 *
 * Every `threshold` bytes of footprint change (the seed paper's threshold
 * sampling) the shim calls back: the point goes on the footprint timeline,
 * the running line's footprint peak is raised, and when the footprint is
 * above every earlier event the line is the program's peak line and the
 * leak detector takes a step.  Each CPU sample pass adds a timeline point
 * too, and credits the current footprint to the lines it finds running
 * (their average and peak footprint).
 *
 * LEAKS (seed paper 000, section 3.4, with two changes).  Each time the
 * footprint rises by a threshold the detector watches one allocation: when
 * it is freed the line it came from scores a free.  A line's leak likelihood is
 * Laplace's rule of succession over its watched allocations: the
 * probability that the next one is not freed, (unfreed + 1) / (watched + 2).
 * The seed watches the allocation that crossed the threshold; we watch the
 * most recent sampled allocation that is still alive and was made before
 * the previous peak, i.e. one that already survived a whole growth step.
 * Churn (allocate, free) at a busy line then never gets watched, while
 * with the seed's choice it takes most of the watches (it allocates most
 * of the bytes), so a slow leak next to heavy churn needs far longer to be
 * seen.  And the seed steps only at new all-time peaks, so a leak that
 * starts after a larger transient peak is never watched at all; stepping
 * at every rising threshold crossing sees it.  Reported (by the writer,
 * cal_report.c) at >= 95% when the line's live bytes still grew in the
 * second half of the run, with its leak rate (the slope of its live
 * bytes): data that is built once and then kept is not a leak.
 *
 * LIMITATIONS
 *   - A sampled allocation made by a thread without the GIL is attributed
 *     through the code objects the CPU sampler has already seen (the thread's
 *     stack is copied, but a code object we never saw may be gone by the
 *     time the GIL is ours); it is credited but not tracked until freed.
 *     Its whole stack is copied while the queue's frame area has room for
 *     it (QUEUE_FRAMES); with less, its innermost frames are, and the tree
 *     gets it at its thread's root, as folded.
 *   - Allocations in threads that never ran Python (no Python stack) count
 *     in the program's totals and at their thread's root in the tree, in
 *     no line.
 */
#include "memory.h" /* Python.h first */

#include "alloctypes.h"
#include "calipers_shim.h"
#include "nogil.h"
#include "pyinternals.h"
#include "runtime.h"
#include "session.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#define QUEUE_CAP 4096         /* events from threads without the GIL */
#define QUEUE_FRAMES (1 << 17) /* the frames they hold, all together (2 MiB) */
#define RECENT 256             /* recent tracked allocations (leak candidates) */

enum qkind { Q_ALLOC, Q_FREE, Q_COPY, Q_FOOTPRINT };

typedef struct qevent {
    uint8_t kind, python, flags;
    uint8_t cut;         /* its stack was cut short: the frames ran out */
    int nframes;         /* its stack: M.frames[frame0 .. frame0 + nframes) */
    size_t frame0;       /* ... innermost first */
    unsigned long ident; /* the thread: threading.get_ident(), 0 if none */
    int tid;             /* ... and its kernel id */
    uint64_t cookie;     /* Q_FREE: the allocation's cookie */
    int64_t a;           /* alloc, free, copy: weight; footprint: live */
    int64_t t;
    const void *ptr;   /* Q_FREE: the block (alloctypes) */
    int64_t clock, gc; /* Q_FREE: allocation clock and collections then */
    size_t size;       /* Q_ALLOC: the block's size */
} qevent;

typedef struct recent_alloc {
    const void *ptr;
    uint32_t line;
    int64_t t;
} recent_alloc;

static struct {
    /* Set at start, read-only while attached. */
    const cal_shim_api *api;
    cal_profile *profile;
    calx_memory_config config;
    int64_t base_alloc_python, base_alloc_native, base_copied;
    int64_t base_live, base_python; /* inherited at fork, left out */

    /* Protected by the GIL; on the free-threaded build by the engine lock
       (nogil.h), which the hooks only try: busy, they queue. */
    int attached;
    uint32_t epoch;    /* tracing epoch (calx_memory_mark), 15 bits */
    int64_t mark_live; /* the footprint at the mark */
    int hooked;        /* our PyMem and arena hooks are installed */
    recent_alloc recent[RECENT];
    size_t recent_next;
    int64_t last_peak_t;
    /* The window since the mark (calx_memory_window): the sampled bytes
       each profiled line allocated, by line index (win_bytes[0 .. win_cap)),
       with the nonzero ones listed in win_touched, so that a mark clears
       and a query reads only those; and the bytes ever allocated at the
       mark.  Allocated with the shim's guard set (the profiler's memory). */
    int64_t *win_bytes;
    size_t win_cap;
    uint32_t *win_touched;
    size_t win_ntouched, win_touched_cap;
    int64_t mark_alloc;

    /* Protected by mu. */
    pthread_mutex_t mu;
    qevent *queue;
    size_t qhead, qlen;
    calx_frame *frames;  /* the queued events' stacks, in queue order */
    size_t frames_used;  /* back to 0 whenever the queue is empty */
    const void *watched; /* the leak detector's allocation */
    uint32_t watched_line;
    atomic_int watched_freed;
    atomic_int queued; /* qlen, readable without mu */
    atomic_llong dropped;
} M = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The originals, which the hooks call through (their ctx); static because
   a hook someone else installed on top of ours may outlive the profile. */
static cal_shim_pymem orig_mem, orig_obj;
/* PYMEM_DOMAIN_RAW, its free hooked where pymalloc serves the other two
   (cal_shim_api.raw_hooks): its original, and the allocator put in. */
static cal_shim_pymem orig_raw, raw_hook;
static cal_shim_arena orig_arena;

/* Without preload: what the shim's GOT redirection did at the last start
   (objects redirected, -1 none; the names of those it could not).
   Protected by the GIL. */
static int redirected = -1;
static char redirect_failed[512];

_Static_assert(sizeof(cal_shim_pymem) == sizeof(PyMemAllocatorEx),
               "PyMemAllocatorEx layout");
_Static_assert(sizeof(cal_shim_arena) == sizeof(PyObjectArenaAllocator),
               "PyObjectArenaAllocator layout");

int calx_memory_available(void) { return calx_runtime_shim() != NULL; }

/* ---- crediting (GIL) ------------------------------------------------------ */

static cal_line_stat *line_of(const calx_where *w, uint32_t *index)
{
    if (w->file == CAL_PROFILE_NONE)
        return NULL;
    uint32_t i = cal_profile_line(M.profile, w->file, w->line, w->func);
    if (i == CAL_PROFILE_NONE) {
        atomic_fetch_add(&M.dropped, 1);
        return NULL;
    }
    *index = i;
    return cal_profile_line_mut(M.profile, i);
}

/* ---- cookies ---------------------------------------------------------------
 * A tracked allocation's cookie says what to undo when it is freed and
 * what a snapshot reports of it: bits 0-27 its line index + 1 (0: no
 * profiled line, or one past the 2^28 - 2 that fit), 28-47 its stack node
 * + 1 (0: none), 48-62 the tracing epoch it was made in, 63 whether
 * Python's allocator made it. */

#define COOKIE_LINE_MASK 0xfffffffu
#define COOKIE_NODE_SHIFT 28
#define COOKIE_NODE_MASK 0xfffffu
#define COOKIE_EPOCH_SHIFT 48
#define COOKIE_EPOCH_MASK 0x7fffu
#define COOKIE_PYTHON (1ull << 63)

_Static_assert(CAL_STACKS_MAX_NODES < COOKIE_NODE_MASK, "a stack node fits a cookie");

static uint64_t cookie_make(uint32_t line, uint32_t node, int python)
{
    uint64_t c = 0;
    if (line < COOKIE_LINE_MASK - 1)
        c |= (uint64_t)line + 1;
    if (node != CAL_STACKS_NONE)
        c |= ((uint64_t)node + 1) << COOKIE_NODE_SHIFT;
    if (!c)
        return 0; /* nothing to undo or report: not tracked */
    c |= (uint64_t)(M.epoch & COOKIE_EPOCH_MASK) << COOKIE_EPOCH_SHIFT;
    return python ? c | COOKIE_PYTHON : c;
}

static uint32_t cookie_line(uint64_t c)
{
    uint32_t l = (uint32_t)(c & COOKIE_LINE_MASK);
    return l ? l - 1 : CAL_PROFILE_NONE;
}

static uint32_t cookie_node(uint64_t c)
{
    uint32_t n = (uint32_t)((c >> COOKIE_NODE_SHIFT) & COOKIE_NODE_MASK);
    return n ? n - 1 : CAL_STACKS_NONE;
}

static void volume_add(cal_volume *v, int64_t weight, int python, int copy)
{
    if (copy)
        v->copied += weight;
    else if (python)
        v->alloc_python += weight;
    else
        v->alloc_native += weight;
    if (!copy)
        v->samples++;
}

/* Credit a sample's volume to the node of its whole stack in the stack
   table (w's frames; the thread's root alone when the stack was cut
   short, as folded), whether or not a profiled line is on it. */
static uint32_t credit_stack(const calx_where *w, uint32_t thread, int cut,
                             const cal_volume *v, int64_t t)
{
    int folded = 0;
    uint32_t node = CAL_STACKS_NONE;
    if (thread != CAL_PROFILE_NONE)
        node = calx_session_stack(thread, w->frames, cut ? 0 : w->nframes, &folded);
    if (node == CAL_STACKS_NONE) {
        atomic_fetch_add(&M.dropped, 1);
        return CAL_STACKS_NONE;
    }
    calx_session_stack_volume(node, v, folded || cut, t);
    return node;
}

/* Add a sampled allocation's weight to line `li`'s bytes in the window
   since the mark.  A table that cannot grow drops the sample (counted). */
static void window_add(uint32_t li, int64_t weight)
{
    if (li >= M.win_cap) {
        size_t cap = M.win_cap ? M.win_cap : 256;
        while (cap <= li)
            cap *= 2;
        int g = M.api->guard_enter();
        int64_t *bytes = realloc(M.win_bytes, cap * sizeof(*bytes));
        uint32_t *touched =
            bytes ? realloc(M.win_touched, cap * sizeof(*touched)) : NULL;
        M.api->guard_leave(g);
        if (bytes)
            M.win_bytes = bytes;
        if (!bytes || !touched) {
            atomic_fetch_add(&M.dropped, 1);
            return;
        }
        memset(bytes + M.win_cap, 0, (cap - M.win_cap) * sizeof(*bytes));
        M.win_touched = touched;
        M.win_cap = M.win_touched_cap = cap;
    }
    if (!M.win_bytes[li])
        M.win_touched[M.win_ntouched++] = li; /* at most one per line: fits */
    M.win_bytes[li] += weight;
}

/* Credit a sampled allocation or copy made by the profile's thread
   `thread` (its stack `cut` short if so); returns the cookie to track the
   allocation by, or 0. */
static uint64_t credit(const calx_where *w, uint32_t thread, int cut, int64_t weight,
                       int python, int copy, int64_t t)
{
    cal_memory *mem = cal_profile_memory(M.profile);
    if (!copy)
        mem->samples++;
    cal_volume v = {0};
    volume_add(&v, weight, python, copy);
    uint32_t node = credit_stack(w, thread, cut, &v, t);
    uint32_t li = CAL_PROFILE_NONE;
    cal_line_stat *ls = line_of(w, &li);
    if (!ls)
        return copy ? 0 : cookie_make(CAL_PROFILE_NONE, node, python);
    volume_add(&ls->mem.vol, weight, python, copy);
    cal_func_stat *self = cal_profile_func_mut(M.profile, w->func);
    if (self)
        volume_add(&self->self_vol, weight, python, copy);
    for (size_t k = 0; k < w->nfuncs; k++) {
        cal_func_stat *f = cal_profile_func_mut(M.profile, w->funcs[k]);
        if (f)
            volume_add(&f->total_vol, weight, python, copy);
    }
    if (copy)
        return 0;
    window_add(li, weight);
    ls->mem.live += weight;
    if (ls->mem.live > ls->mem.live_peak)
        ls->mem.live_peak = ls->mem.live;
    if (cal_profile_line_series_add(M.profile, li, t, ls->mem.live) != 0)
        atomic_fetch_add(&M.dropped, 1);
    return cookie_make(li, node, python);
}

static void freed(uint64_t cookie, int64_t weight, int64_t t)
{
    uint32_t li = cookie_line(cookie);
    if (li == CAL_PROFILE_NONE)
        return;
    cal_line_stat *ls = cal_profile_line_mut(M.profile, li);
    if (!ls)
        return;
    ls->mem.live -= weight;
    if (cal_profile_line_series_add(M.profile, li, t, ls->mem.live) != 0)
        atomic_fetch_add(&M.dropped, 1);
}

/* The footprint rose by a threshold: the watched allocation's fate is
   sealed (it was counted as freed when it was); watch a new one. */
static void leak_step(int64_t t)
{
    const cal_shim_api *api = M.api;
    size_t pick = RECENT, fallback = RECENT;
    for (size_t k = 1; k <= RECENT && pick == RECENT; k++) {
        size_t i = (M.recent_next + RECENT - k) % RECENT;
        const recent_alloc *r = &M.recent[i];
        if (!r->ptr || !api->tracked(r->ptr))
            continue;
        if (fallback == RECENT)
            fallback = i;
        if (r->t < M.last_peak_t)
            pick = i;
    }
    if (pick == RECENT)
        pick = fallback;
    M.last_peak_t = t;
    if (pick == RECENT)
        return;
    const recent_alloc *r = &M.recent[pick];
    cal_line_stat *ls = cal_profile_line_mut(M.profile, r->line);
    if (!ls)
        return;
    ls->mem.leak_tracked++;
    pthread_mutex_lock(&M.mu);
    M.watched = r->ptr;
    M.watched_line = r->line;
    pthread_mutex_unlock(&M.mu);
    M.recent[pick].ptr = NULL; /* watched once */
}

/* The footprint from the shim's live bytes.  Without preload the base is
   an estimate (malloc's bytes in use at start, calx_memory_start): never
   below zero, whatever was freed of the blocks made before start. */
static int64_t footprint_of(int64_t live)
{
    live -= M.base_live;
    return live > 0 ? live : 0;
}

static void footprint(const calx_where *w, int64_t live, int flags, int64_t t)
{
    live = footprint_of(live);
    cal_memory *mem = cal_profile_memory(M.profile);
    cal_series_add(&mem->footprint, t, live);
    uint32_t li;
    cal_line_stat *ls = line_of(w, &li);
    if (ls && live > ls->mem.footprint_peak)
        ls->mem.footprint_peak = live;
    if (flags & CAL_SHIM_NEW_PEAK)
        mem->peak_line = ls ? li : CAL_PROFILE_NONE;
    if (flags & CAL_SHIM_RISING)
        leak_step(t);
}

/* Credit the leak detector's frees, noted under mu by any thread. */
static void settle_watched(void)
{
    if (!atomic_load(&M.watched_freed))
        return;
    cal_line_stat *ls = cal_profile_line_mut(M.profile, M.watched_line);
    if (ls)
        ls->mem.leak_freed++;
    atomic_store(&M.watched_freed, 0);
}

/* A queued event's stack while it is handled.  Protected by the GIL. */
static calx_frame drained[CALX_FRAMES_MAX];

/* Handle what threads without the GIL queued, one event at a time (the
   handlers take mu themselves).  GIL held. */
static void drain(void)
{
    if (!atomic_load_explicit(&M.queued, memory_order_relaxed) &&
        !atomic_load(&M.watched_freed))
        return;
    pthread_mutex_lock(&M.mu);
    settle_watched();
    pthread_mutex_unlock(&M.mu);
    for (;;) {
        qevent e;
        pthread_mutex_lock(&M.mu);
        if (!M.qlen) {
            atomic_store(&M.queued, 0);
            pthread_mutex_unlock(&M.mu);
            return;
        }
        e = M.queue[M.qhead];
        M.qhead = (M.qhead + 1) % QUEUE_CAP;
        M.qlen--;
        /* Its frames are copied out, so a thread queueing now may reuse
           their room. */
        if (e.nframes > 0)
            memcpy(drained, M.frames + e.frame0, (size_t)e.nframes * sizeof(*drained));
        if (!M.qlen)
            M.frames_used = 0;
        pthread_mutex_unlock(&M.mu);

        calx_where w;
        switch (e.kind) {
        case Q_ALLOC:
        case Q_COPY: {
            calx_session_where_cached(drained, e.nframes, &w);
            uint64_t c = credit(&w, calx_session_thread(e.ident, e.tid), e.cut, e.a,
                                e.python, e.kind == Q_COPY, e.t);
            if (e.kind == Q_ALLOC)
                calx_atypes_unfollowed(e.size, e.a, e.python, cookie_line(c));
            break;
        }
        case Q_FREE:
            freed(e.cookie, e.a, e.t);
            calx_atypes_died(e.ptr, e.clock, e.t, e.gc, 0);
            break;
        case Q_FOOTPRINT:
            calx_session_where_cached(drained, e.nframes, &w);
            footprint(&w, e.a, e.flags, e.t);
            break;
        }
    }
}

/* Queue an event from a thread without the GIL, with its own whole stack
   (frozen while it runs without the GIL, so safe to read), up to
   CALX_FRAMES_MAX frames as a CPU sample's, while the queue's frames last:
   an event that finds less room than that keeps its innermost frames and
   is marked cut if they fill it; one that finds none is dropped. */
static void enqueue(const qevent *proto)
{
    pthread_mutex_lock(&M.mu);
    if (M.qlen == QUEUE_CAP || !M.queue) {
        pthread_mutex_unlock(&M.mu);
        atomic_fetch_add(&M.dropped, 1);
        return;
    }
    qevent e = *proto;
    e.nframes = 0;
    e.cut = 0;
    if (proto->kind != Q_FREE) {
        PyThreadState *mine = PyGILState_GetThisThreadState();
        e.ident = mine ? (unsigned long)mine->thread_id : 0;
        e.tid = calx_runtime_thread_tid(pthread_self());
        size_t room = QUEUE_FRAMES - M.frames_used;
        if (mine && room == 0) {
            pthread_mutex_unlock(&M.mu);
            atomic_fetch_add(&M.dropped, 1);
            return;
        }
        if (mine) {
            int max = room < CALX_FRAMES_MAX ? (int)room : CALX_FRAMES_MAX;
            e.frame0 = M.frames_used;
            e.nframes = calx_thread_frames(mine, NULL, NULL, M.frames + e.frame0, max);
            calx_frames_resolve(M.frames + e.frame0, e.nframes); /* no GIL: no cache */
            e.cut = max < CALX_FRAMES_MAX && e.nframes == max;
            M.frames_used += (size_t)e.nframes;
        }
    }
    M.queue[(M.qhead + M.qlen) % QUEUE_CAP] = e;
    M.qlen++;
    atomic_store(&M.queued, 1);
    pthread_mutex_unlock(&M.mu);
}

/* ---- the shim's callbacks (any thread, inside the shim's guard) ------------ */

/* Where the calling thread is, if it holds the GIL: handles what is queued
   first, fills *w and *thread (the profile's index of the thread) and
   returns 1, with the engine lock held (the free-threaded build: the
   caller credits, then calls calx_nogil_unlock).  Without the GIL, or
   when another thread holds the engine lock, queues `proto` with the
   thread's own stack and returns 0 (also 0 when the sample is dropped). */
static int where_now(calx_where *w, uint32_t *thread, const qevent *proto)
{
    PyThreadState *ts = calx_current_if_gil_held();
    int locked = ts && calx_nogil_trylock();
    /* The free-threaded build: the lock is held for short stretches (a
       hook's crediting, a pass); a queued allocation is credited but not
       tracked until freed, so it is worth a few tries first.  Bounded:
       the holder may be waiting for this thread to reach a safe point. */
    for (int tries = 0; ts && !locked && tries < 64; tries++) {
        sched_yield();
        locked = calx_nogil_trylock();
    }
    if (!locked) {
        enqueue(proto);
        return 0;
    }
    drain();
    if (calx_session_where(ts, w) != 0) {
        atomic_fetch_add(&M.dropped, 1);
        calx_nogil_unlock();
        return 0;
    }
    *thread = calx_session_thread((unsigned long)ts->thread_id,
                                  calx_runtime_thread_tid(pthread_self()));
    return 1;
}

static uint64_t on_alloc(void *ptr, size_t size, int64_t weight, int python)
{
    if (calx_session_paused())
        return 0; /* profiling is off: not credited, not tracked */
    int64_t t = calx_session_elapsed_ns();
    qevent e = {
        .kind = Q_ALLOC, .python = (uint8_t)python, .a = weight, .t = t, .size = size};
    calx_where w;
    uint32_t thread;
    if (!where_now(&w, &thread, &e))
        return 0;
    uint64_t cookie = credit(&w, thread, 0, weight, python, 0, t);
    if (cookie)
        calx_atypes_born(ptr, size, weight, python, cookie_line(cookie),
                         M.api->alloc_clock(), t);
    else
        calx_atypes_unfollowed(size, weight, python, CAL_PROFILE_NONE);
    if (cookie_line(cookie) != CAL_PROFILE_NONE) {
        M.recent[M.recent_next] = (recent_alloc){ptr, cookie_line(cookie), t};
        M.recent_next = (M.recent_next + 1) % RECENT;
    }
    calx_nogil_unlock();
    return cookie;
}

static void on_free(void *ptr, uint64_t cookie, int64_t weight)
{
    int64_t t = calx_session_elapsed_ns();
    pthread_mutex_lock(&M.mu);
    if (ptr == M.watched) {
        M.watched = NULL;
        atomic_store(&M.watched_freed, 1);
    }
    pthread_mutex_unlock(&M.mu);
    int64_t clock = M.api->alloc_clock(), gc = calx_gc_collections();
    if (!calx_current_if_gil_held() || !calx_nogil_trylock()) {
        qevent e = {.kind = Q_FREE,
                    .cookie = cookie,
                    .a = weight,
                    .t = t,
                    .ptr = ptr,
                    .clock = clock,
                    .gc = gc};
        enqueue(&e);
        return;
    }
    drain();
    freed(cookie, weight, t);
    calx_atypes_died(ptr, clock, t, gc, 1);
    calx_nogil_unlock();
}

static void on_copy(int64_t weight)
{
    if (calx_session_paused())
        return;
    int64_t t = calx_session_elapsed_ns();
    qevent e = {.kind = Q_COPY, .a = weight, .t = t};
    calx_where w;
    uint32_t thread;
    if (where_now(&w, &thread, &e)) {
        (void)credit(&w, thread, 0, weight, 0, 1, t);
        calx_nogil_unlock();
    }
}

static void on_footprint(int64_t live, int64_t live_python, int flags)
{
    (void)live_python; /* the exact counters are read at the end */
    int64_t t = calx_session_elapsed_ns();
    qevent e = {.kind = Q_FOOTPRINT, .flags = (uint8_t)flags, .a = live, .t = t};
    calx_where w;
    uint32_t thread;
    if (where_now(&w, &thread, &e)) {
        footprint(&w, live, flags, t);
        calx_nogil_unlock();
    }
}

/* ---- start, passes, stop (GIL) ------------------------------------------- */

static int hooks_are_ours(void)
{
    PyMemAllocatorEx cur;
    PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &cur);
    return cur.ctx == &orig_obj;
}

/* Everything but the allocator hooks: the state, the baselines, the
   shim's callbacks.  The shim's guard is held.  Returns 0, or -1 with an
   exception set. */
static int attach(const cal_shim_api *api, const calx_memory_config *config,
                  cal_profile *profile, int64_t python_baseline)
{
    M.api = api;
    M.profile = profile;
    M.config = *config;
    /* A forked child keeps its parent's (nothing in them is read before
       it is written): freeing 2 MiB that were mapped for them would make
       glibc serve the next large requests from the heap, zeroed by hand,
       and each child of a program that forks would fault in pages it
       never uses. */
    if (!M.queue)
        M.queue = malloc(QUEUE_CAP * sizeof(qevent));
    if (!M.frames)
        M.frames = malloc(QUEUE_FRAMES * sizeof(calx_frame));
    if (!M.queue || !M.frames) {
        free(M.queue);
        free(M.frames);
        M.queue = NULL;
        M.frames = NULL;
        PyErr_NoMemory();
        return -1;
    }
    M.qhead = M.qlen = 0;
    M.frames_used = 0;
    memset(M.recent, 0, sizeof M.recent);
    M.recent_next = 0;
    M.last_peak_t = 0;
    M.watched = NULL;
    atomic_store(&M.watched_freed, 0);
    atomic_store(&M.queued, 0);
    atomic_store(&M.dropped, 0);

    cal_shim_counters c;
    api->counters(&c);
    M.base_alloc_python = c.alloc_python;
    M.base_alloc_native = c.alloc_native;
    M.base_copied = c.copied;

    cal_memory *mem = cal_profile_memory(profile);
    mem->enabled = 1;
    mem->alloc_mean = config->alloc_mean;
    mem->copy_mean = config->copy_mean;
    mem->threshold = config->threshold;

    cal_shim_config sc = {
        .alloc_mean = config->alloc_mean,
        .copy_mean = config->copy_mean,
        .threshold = config->threshold,
        .python_baseline = python_baseline,
    };
    cal_shim_hooks hooks = {on_alloc, on_free, on_copy, on_footprint};
    if (api->attach(&hooks, &sc) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "calipers: the memory shim is in use");
        return -1;
    }
    if (calx_atypes_start(profile) != 0) {
        api->detach();
        return -1;
    }
    M.attached = 1;
    M.epoch = 0;
    api->reset_mark_peak();
    api->counters(&c);
    M.mark_live = c.live_native + c.live_python;
    return 0;
}

/* The bytes malloc has handed out and not had back, process-wide (glibc's
   mallinfo2: chunks in use in every arena, and those it mapped), or 0
   where it cannot say.  Without preload the shim has not seen the blocks
   made before start: this is their estimate, so that the footprint starts
   where the process is (as under preload, where the shim counts from the
   first allocation) and freeing them does not take it below zero.  Each
   chunk's header is included: a few bytes a block more than the usable
   sizes the shim counts. */
static int64_t malloc_in_use(void)
{
    struct mi2 {
        size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks,
            fordblks, keepcost;
    };
    struct mi2 (*mallinfo2_fn)(void) =
        (struct mi2(*)(void))dlsym(RTLD_DEFAULT, "mallinfo2");
    if (!mallinfo2_fn)
        return 0;
    struct mi2 m = mallinfo2_fn();
    return (int64_t)(m.uordblks + m.hblkhd);
}

int calx_memory_start(const calx_memory_config *config, cal_profile *profile)
{
    const cal_shim_api *api = calx_runtime_shim();
    if (!api) {
        PyErr_SetString(PyExc_RuntimeError, "calipers: the memory shim is not loaded "
                                            "(run the program with `calipers run`)");
        return -1;
    }
    if (M.attached || M.hooked) {
        PyErr_SetString(PyExc_RuntimeError,
                        "calipers: memory profiling already started");
        return -1;
    }
    calx_nogil_lock();
    int g = api->guard_enter();
    M.base_live = M.base_python = 0;
    if (calx_runtime_shim_in_process()) {
        /* The shim counts from its redirection on, and not between a
           stop() and this start(): the footprint is measured from here,
           and no allocation tracked before is still known to be live. */
        api->reset();
        cal_shim_counters c;
        api->counters(&c);
        M.base_live = c.live_native + c.live_python - malloc_in_use();
        M.base_python = c.live_python;
    }
    /* The free-threaded build: the other threads stop while the hooks go
       in (PyMem_SetAllocator is not atomic: a thread allocating meanwhile
       could read one hook with another's context). */
    PyInterpreterState *interp = PyInterpreterState_Get();
    calx_stop_world(interp);
    /* Count the arenas pymalloc holds already (mimalloc's blocks in use
       on the free-threaded build), then hook the allocators; nothing in
       between allocates an arena (the GIL is held, or the world stopped,
       and no Python object is made). */
    calx_usable_fn usable = calx_pyalloc_usable_fn();
    api->set_py_usable(usable);
    /* With pymalloc (its arenas are there: the interpreter has objects
       already) a request of up to 512 bytes never reaches malloc(); 32 of
       them are left for the debug hooks' header (PYTHONMALLOC=pymalloc_debug,
       -X dev), which ask pymalloc for that much more. */
    int64_t arenas = calx_pymalloc_arena_bytes();
    int direct = !usable && arenas > 0;
    api->set_small_direct(direct ? 512 - 32 : 0);
    if (attach(api, config, profile, arenas) != 0) {
        api->set_py_usable(NULL);
        calx_start_world(interp);
        api->guard_leave(g);
        calx_nogil_unlock();
        return -1;
    }
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator((PyObjectArenaAllocator *)&orig_arena);
    arena.ctx = &orig_arena;
    arena.alloc = api->arena_alloc;
    arena.free = api->arena_free;
    PyObject_SetArenaAllocator(&arena);

    /* Where pymalloc serves PyMem and PyObject, the raw domain's free
       hook goes in first: it marks what pymalloc frees through it as
       Python's, so the other two free with nothing set around the call. */
    void (*free_hook)(void *, void *) = api->py_free;
    if (direct) {
        PyMem_GetAllocator(PYMEM_DOMAIN_RAW, (PyMemAllocatorEx *)&orig_raw);
        api->raw_hooks(&orig_raw, &raw_hook);
        PyMem_SetAllocator(PYMEM_DOMAIN_RAW, (PyMemAllocatorEx *)&raw_hook);
        free_hook = api->py_free_direct;
    }
    PyMemAllocatorEx hook = {NULL, api->py_malloc, api->py_calloc, api->py_realloc,
                             free_hook};
    if (usable)
        hook = (PyMemAllocatorEx){NULL, api->py_malloc_sized, api->py_calloc_sized,
                                  api->py_realloc_sized, api->py_free_sized};
    PyMem_GetAllocator(PYMEM_DOMAIN_MEM, (PyMemAllocatorEx *)&orig_mem);
    hook.ctx = &orig_mem;
    PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &hook);
    /* The object domain's own entry points: its samples say so. */
    PyMemAllocatorEx obj_hook = {&orig_obj, api->py_obj_malloc, api->py_obj_calloc,
                                 api->py_obj_realloc, free_hook};
    if (usable)
        obj_hook = (PyMemAllocatorEx){&orig_obj, api->py_obj_malloc_sized,
                                      api->py_obj_calloc_sized,
                                      api->py_obj_realloc_sized, api->py_free_sized};
    PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, (PyMemAllocatorEx *)&orig_obj);
    PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &obj_hook);
    M.hooked = 1;
    calx_start_world(interp);
    /* The starting thread's code is cached now, not at the first sampling
       pass: an allocation it makes without the GIL (a C call through
       ctypes right after calipers.start()) is credited from the cache. */
    calx_where here;
    (void)calx_session_where(PyThreadState_Get(), &here);
    redirected = -1;
    redirect_failed[0] = '\0';
    if (calx_runtime_shim_in_process())
        redirected = api->redirect(1, redirect_failed, sizeof redirect_failed);
    api->guard_leave(g);
    calx_nogil_unlock();
    return 0;
}

int calx_memory_redirected(const char **failed)
{
    *failed = redirect_failed;
    return calx_runtime_shim_in_process() ? redirected : -2;
}

int calx_memory_restart_in_child(cal_profile *profile)
{
    if (!M.hooked || M.attached || !M.api) {
        PyErr_SetString(PyExc_RuntimeError, "calipers: no memory profile to restart");
        return -1;
    }
    const cal_shim_api *api = M.api;
    calx_nogil_lock();
    int g = api->guard_enter();
    api->reset();
    cal_shim_counters c;
    api->counters(&c);
    M.base_live = c.live_native + c.live_python;
    M.base_python = c.live_python;
    /* The hooks are still installed and the arenas already counted. */
    int rc = attach(api, &M.config, profile, 0);
    api->guard_leave(g);
    calx_nogil_unlock();
    return rc;
}

/* Without preload the base is not inherited: it makes the footprint start
   from malloc's bytes in use (calx_memory_start). */
int64_t calx_memory_inherited(void)
{
    return calx_runtime_shim_in_process() ? 0 : M.base_live;
}

int64_t calx_memory_pass(void)
{
    if (!M.attached)
        return -1;
    drain();
    calx_atypes_settle();
    cal_shim_counters c;
    M.api->counters(&c);
    int64_t live = footprint_of(c.live_native + c.live_python);
    cal_series_add(&cal_profile_memory(M.profile)->footprint, calx_session_elapsed_ns(),
                   live);
    return live;
}

/* The program's totals, from the shim's exact counters (what stop()
   writes; a snapshot writes the same so far). */
static void totals(const cal_shim_counters *c)
{
    cal_memory *mem = cal_profile_memory(M.profile);
    mem->alloc_python = c->alloc_python - M.base_alloc_python;
    mem->alloc_native = c->alloc_native - M.base_alloc_native;
    mem->copied = c->copied - M.base_copied;
    mem->peak = footprint_of(c->peak);
    mem->peak_python = c->peak_python - M.base_python;
    if (mem->peak_python < 0)
        mem->peak_python = 0;
    if (mem->peak_python > mem->peak)
        mem->peak_python = mem->peak;
    mem->end_live = footprint_of(c->live_native + c->live_python);
    mem->end_python = c->live_python - M.base_python;
    if (mem->end_python < 0)
        mem->end_python = 0;
    if (mem->end_python > mem->end_live)
        mem->end_python = mem->end_live;
    mem->dropped = c->dropped + atomic_load(&M.dropped);
}

void calx_memory_snapshot(void)
{
    calx_nogil_lock();
    if (M.attached) {
        drain();
        cal_shim_counters c;
        M.api->counters(&c);
        totals(&c);
    }
    calx_nogil_unlock();
}

void calx_memory_stop(void)
{
    if (!M.attached)
        return;
    const cal_shim_api *api = M.api;
    calx_nogil_lock();
    int g = api->guard_enter();
    api->detach();
    PyInterpreterState *interp = PyInterpreterState_Get();
    calx_stop_world(interp); /* as when they went in (calx_memory_start) */
    if (hooks_are_ours()) {
        PyMem_SetAllocator(PYMEM_DOMAIN_MEM, (PyMemAllocatorEx *)&orig_mem);
        PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, (PyMemAllocatorEx *)&orig_obj);
        /* The raw domain after them (their frees count on its hook), if
           nobody hooked it over ours meanwhile. */
        PyMemAllocatorEx raw;
        PyMem_GetAllocator(PYMEM_DOMAIN_RAW, &raw);
        if (raw_hook.free && (void *)raw.free == (void *)raw_hook.free)
            PyMem_SetAllocator(PYMEM_DOMAIN_RAW, (PyMemAllocatorEx *)&orig_raw);
    }
    M.hooked = 0;
    PyObjectArenaAllocator cur;
    PyObject_GetArenaAllocator(&cur);
    if (cur.ctx == &orig_arena)
        PyObject_SetArenaAllocator((PyObjectArenaAllocator *)&orig_arena);
    calx_start_world(interp);
    if (calx_runtime_shim_in_process())
        api->redirect(0, NULL, 0); /* the blocks are libc's either way */
    drain();
    pthread_mutex_lock(&M.mu);
    settle_watched();
    pthread_mutex_unlock(&M.mu);
    calx_atypes_stop();

    cal_shim_counters c;
    api->counters(&c);
    totals(&c);
    cal_memory *mem = cal_profile_memory(M.profile);
    cal_series_add(&mem->footprint, calx_session_elapsed_ns(), mem->end_live);
    M.attached = 0;
    free(M.queue);
    free(M.frames);
    M.queue = NULL;
    M.frames = NULL;
    free(M.win_bytes);
    free(M.win_touched);
    M.win_bytes = NULL;
    M.win_touched = NULL;
    M.win_cap = M.win_touched_cap = M.win_ntouched = 0;
    api->guard_leave(g);
    calx_nogil_unlock();
}

void calx_memory_after_fork_child(void)
{
    /* Another thread may have held it at fork(). */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    M.mu = fresh;
    if (M.attached && M.api) {
        /* The hooks stay: the shim counts, nobody samples, until the
           child restarts (calx_memory_restart_in_child). */
        M.api->detach();
        M.attached = 0;
    }
}

/* ---- traces: the live sampled allocations (GIL) ---------------------------- */

int calx_memory_attached(void) { return M.attached; }

int64_t calx_memory_alloc_mean(void) { return M.attached ? M.config.alloc_mean : 0; }

void calx_memory_mark(void)
{
    if (!M.attached)
        return;
    const cal_shim_api *api = M.api;
    calx_nogil_lock();
    int g = api->guard_enter();
    M.epoch = (M.epoch + 1) & COOKIE_EPOCH_MASK;
    api->reset_mark_peak();
    cal_shim_counters c;
    api->counters(&c);
    M.mark_live = c.live_native + c.live_python;
    M.mark_alloc = c.alloc_native + c.alloc_python;
    for (size_t i = 0; i < M.win_ntouched; i++)
        M.win_bytes[M.win_touched[i]] = 0;
    M.win_ntouched = 0;
    api->guard_leave(g);
    calx_nogil_unlock();
}

void calx_memory_traced(int64_t *current, int64_t *peak)
{
    *current = *peak = 0;
    if (!M.attached)
        return;
    const cal_shim_api *api = M.api;
    int g = api->guard_enter();
    cal_shim_counters c;
    api->counters(&c);
    api->guard_leave(g);
    int64_t now = c.live_native + c.live_python - M.mark_live;
    int64_t top = c.mark_peak - M.mark_live;
    *current = now > 0 ? now : 0;
    *peak = top > *current ? top : *current;
}

int calx_memory_window(int64_t *allocated, calx_window_line **out, size_t *n)
{
    *allocated = 0;
    *out = NULL;
    *n = 0;
    if (!M.attached)
        return 0;
    calx_nogil_lock();
    drain(); /* samples queued by threads without the GIL count too */
    const cal_shim_api *api = M.api;
    int g = api->guard_enter();
    cal_shim_counters c;
    api->counters(&c);
    int64_t since = c.alloc_native + c.alloc_python - M.mark_alloc;
    *allocated = since > 0 ? since : 0;
    calx_window_line *lines =
        malloc((M.win_ntouched ? M.win_ntouched : 1) * sizeof(*lines));
    if (!lines) {
        api->guard_leave(g);
        calx_nogil_unlock();
        PyErr_NoMemory();
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < M.win_ntouched; i++) {
        uint32_t li = M.win_touched[i];
        const cal_line_stat *ls = cal_profile_line_at(M.profile, li);
        if (!ls)
            continue;
        lines[k++] = (calx_window_line){ls->file, ls->line, M.win_bytes[li]};
    }
    api->guard_leave(g);
    calx_nogil_unlock();
    *out = lines;
    *n = k;
    return 0;
}

void calx_memory_reset_peak(void)
{
    if (!M.attached)
        return;
    int g = M.api->guard_enter();
    M.api->reset_mark_peak();
    M.api->guard_leave(g);
}

static void live_of(const cal_shim_sample *s, calx_live_sample *out)
{
    out->node = cookie_node(s->cookie);
    out->python = (s->cookie & COOKIE_PYTHON) != 0;
    out->weight = s->weight;
    out->size = s->size > 0 ? (int64_t)s->size : 1;
}

int calx_memory_live(int since_mark, calx_live_sample **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!M.attached)
        return 0;
    calx_nogil_lock();
    drain();
    calx_nogil_unlock();
    const cal_shim_api *api = M.api;
    int g = api->guard_enter();
    cal_shim_sample *buf = NULL;
    size_t cap = 0, have;
    /* The table may grow between the count and the copy: ask again. */
    while ((have = api->samples(buf, cap)) > cap) {
        free(buf);
        cap = have + have / 4 + 64;
        buf = malloc(cap * sizeof(*buf));
        if (!buf) {
            api->guard_leave(g);
            PyErr_NoMemory();
            return -1;
        }
    }
    calx_live_sample *live = malloc((have ? have : 1) * sizeof(*live));
    if (!live) {
        free(buf);
        api->guard_leave(g);
        PyErr_NoMemory();
        return -1;
    }
    size_t k = 0;
    uint32_t epoch = M.epoch & COOKIE_EPOCH_MASK;
    for (size_t i = 0; i < have; i++) {
        uint32_t e =
            (uint32_t)(buf[i].cookie >> COOKIE_EPOCH_SHIFT) & COOKIE_EPOCH_MASK;
        if (since_mark && e != epoch)
            continue;
        live_of(&buf[i], &live[k++]);
    }
    free(buf);
    api->guard_leave(g);
    *out = live;
    *n = k;
    return 0;
}

int calx_memory_lookup(const void *ptr, int since_mark, calx_live_sample *out)
{
    if (!M.attached)
        return 0;
    cal_shim_sample s;
    if (!M.api->lookup(ptr, &s))
        return 0;
    uint32_t e = (uint32_t)(s.cookie >> COOKIE_EPOCH_SHIFT) & COOKIE_EPOCH_MASK;
    if (since_mark && e != (M.epoch & COOKIE_EPOCH_MASK))
        return 0;
    live_of(&s, out);
    return 1;
}

int calx_memory_set_unsampled(int on)
{
    return M.attached ? M.api->set_unsampled(on) : 0;
}

void calx_memory_live_free(calx_live_sample *live)
{
    /* Allocated with the shim's guard set, so uncounted: freed the same
       way, or the footprint would lose its size. */
    int g = M.api ? M.api->guard_enter() : 0;
    free(live);
    if (M.api)
        M.api->guard_leave(g);
}

void calx_memory_window_free(calx_window_line *lines)
{
    /* Allocated with the guard set, as calx_memory_live_free says. */
    int g = M.api ? M.api->guard_enter() : 0;
    free(lines);
    if (M.api)
        M.api->guard_leave(g);
}

size_t calx_memory_tracked(void)
{
    if (!M.attached)
        return 0;
    int g = M.api->guard_enter();
    size_t n = M.api->samples(NULL, 0);
    M.api->guard_leave(g);
    return n;
}
