/*
 * session — see session.h.
 *
 * One session at a time per process.  A forked child that profiles itself
 * begins its own (calx_sampler_restart_in_child) and leaves the parent's
 * profile and code table as they are, unfreed: freeing them, and the code
 * objects only the table kept alive, would write to every page they are
 * on, and the child would copy them all (most of its set-up time, and
 * memory for each child); untouched, they stay shared with the parent.
 */
#include "session.h" /* Python.h first: it defines _GNU_SOURCE */

#include "cal_clock.h"
#include "runtime.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SWITCH_CHECK_NS 100000000 /* how often to look for the switch file */

static struct {
    /* Protected by the GIL (the engine lock on the free-threaded build,
       nogil.h). */
    cal_profile *profile;
    calx_codes codes;
    calx_filter filter;

    /* Set when a session begins (GIL held); read by any thread. */
    int64_t origin;

    /* Switching off and on (mu): profiling is off while switch_path
       exists (checked by the sampler thread), or as set_paused says. */
    pthread_mutex_t mu;
    char *switch_path;
    int64_t next_switch_check;
    atomic_int paused; /* also read without mu */
    int64_t paused_since, paused_ns;
    /* The switch was off at its first reading: the run was started off
       (`calipers run --off`), so it has been off since the origin, which
       set_origin may still move back to the launcher's start. */
    int switch_read, off_from_origin;
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

void calx_session_set_filter(calx_filter *filter)
{
    calx_filter_free(&S.filter);
    S.filter = *filter;
    memset(filter, 0, sizeof(*filter));
}

static void check_switch_locked(int64_t now);

int calx_session_begin(int inherited)
{
    if (!inherited)
        cal_profile_free(S.profile);
    S.profile = cal_profile_new();
    if (!S.profile) {
        PyErr_NoMemory();
        return -1;
    }
    calx_codes_init(&S.codes);
    S.origin = cal_clock_now_ns();
    atomic_store(&S.paused, 0); /* until the switch is read again */
    S.paused_ns = 0;
    S.switch_read = S.off_from_origin = 0;
    if (inherited) {
        /* A forked child keeps its parent's switch file: read it now. */
        pthread_mutex_lock(&S.mu);
        S.next_switch_check = 0;
        check_switch_locked(S.origin);
        pthread_mutex_unlock(&S.mu);
    }
    return 0;
}

void calx_session_stamp(void)
{
    cal_profile_set_wall(S.profile, cal_clock_now_ns() - S.origin);
    cal_profile_set_paused(S.profile, calx_session_paused_ns());
}

void calx_session_release_codes(void) { calx_codes_clear(&S.codes); }

cal_profile *calx_session_profile(void) { return S.profile; }

const calx_code *calx_session_code(PyCodeObject *code)
{
    return calx_codes_get(&S.codes, &S.filter, S.profile, code);
}

void calx_session_line(const calx_code *ci, calx_frame *f)
{
    if (f->line == CALX_LINE_UNRESOLVED)
        f->line = calx_codes_line(&S.codes, ci, f->offset);
}

int calx_session_code_known(const PyCodeObject *code)
{
    return calx_codes_find(&S.codes, code) != NULL;
}

void calx_session_set_origin(int64_t since_ns)
{
    pthread_mutex_lock(&S.mu);
    S.origin -= since_ns;
    if (S.off_from_origin)
        S.paused_since = S.origin;
    pthread_mutex_unlock(&S.mu);
}

int64_t calx_session_origin(void) { return S.origin; }

int64_t calx_session_elapsed_ns(void) { return cal_clock_now_ns() - S.origin; }

/* ---- switching off and on ------------------------------------------------ */

/* S.mu held. */
static void set_paused_locked(int off)
{
    off = !!off;
    if (off == atomic_load(&S.paused))
        return;
    int64_t now = cal_clock_now_ns();
    if (off)
        S.paused_since = now;
    else
        S.paused_ns += now - S.paused_since;
    S.off_from_origin = 0;
    atomic_store(&S.paused, off);
}

/* Follow the switch file (S.mu held). */
static void check_switch_locked(int64_t now)
{
    if (!S.switch_path || now < S.next_switch_check)
        return;
    S.next_switch_check = now + SWITCH_CHECK_NS;
    int off = calx_runtime_entry_exists(S.switch_path);
    int first = !S.switch_read;
    S.switch_read = 1;
    set_paused_locked(off);
    if (first && off && atomic_load(&S.paused)) {
        /* Off before the program started: not from the engine's start. */
        S.paused_since = S.origin;
        S.off_from_origin = 1;
    }
}

void calx_session_check_switch(int64_t now)
{
    pthread_mutex_lock(&S.mu);
    check_switch_locked(now);
    pthread_mutex_unlock(&S.mu);
}

int calx_session_set_switch(const char *path)
{
    char *copy = path ? strdup(path) : NULL;
    if (path && !copy) {
        PyErr_NoMemory();
        return -1;
    }
    pthread_mutex_lock(&S.mu);
    free(S.switch_path);
    S.switch_path = copy;
    S.next_switch_check = 0;
    check_switch_locked(cal_clock_now_ns());
    pthread_mutex_unlock(&S.mu);
    return 0;
}

void calx_session_set_paused(int off)
{
    pthread_mutex_lock(&S.mu);
    set_paused_locked(off);
    pthread_mutex_unlock(&S.mu);
}

int calx_session_paused(void) { return atomic_load(&S.paused); }

int64_t calx_session_paused_ns(void)
{
    pthread_mutex_lock(&S.mu);
    int64_t ns = S.paused_ns;
    if (atomic_load(&S.paused))
        ns += cal_clock_now_ns() - S.paused_since;
    pthread_mutex_unlock(&S.mu);
    return ns;
}

/* ---- where a thread is (GIL) --------------------------------------------- */

#define WHERE_FUNCS 256

/* Protected by the GIL (the engine lock on the free-threaded build): one
   answer at a time (calx_where.funcs). */
static calx_frame where_frames[CALX_FRAMES_MAX];
static uint32_t where_funcs[WHERE_FUNCS];

static void where_add(calx_where *w, const calx_code *ci, int line)
{
    if (!ci->profiled)
        return;
    if (w->file == CAL_PROFILE_NONE) {
        w->file = ci->file;
        w->func = ci->func;
        w->line = line;
    }
    for (size_t k = 0; k < w->nfuncs; k++)
        if (where_funcs[k] == ci->func)
            return;
    if (w->nfuncs < WHERE_FUNCS)
        where_funcs[w->nfuncs++] = ci->func;
}

static void where_init(calx_where *w, const calx_frame *frames)
{
    w->file = w->func = CAL_PROFILE_NONE;
    w->line = 0;
    w->funcs = where_funcs;
    w->nfuncs = 0;
    w->frames = frames;
    w->nframes = 0;
}

int calx_session_where(PyThreadState *ts, calx_where *w)
{
    where_init(w, where_frames);
    if (!S.profile)
        return -1;
    int n = calx_thread_frames(ts, NULL, NULL, where_frames, CALX_FRAMES_MAX);
    w->nframes = n;
    for (int i = 0; i < n; i++) {
        const calx_code *ci = calx_session_code(where_frames[i].code);
        if (!ci)
            return -1;
        calx_session_line(ci, &where_frames[i]);
        where_add(w, ci, where_frames[i].line);
    }
    return 0;
}

void calx_session_where_cached(const calx_frame *frames, int n, calx_where *w)
{
    where_init(w, frames);
    w->nframes = n;
    for (int i = 0; i < n; i++) {
        const calx_code *ci = calx_codes_find(&S.codes, frames[i].code);
        if (ci)
            where_add(w, ci, frames[i].line);
    }
}

uint32_t calx_session_stack(uint32_t thread, const calx_frame *frames, int n,
                            int *folded)
{
    *folded = 0;
    cal_stacks *st = cal_profile_stacks(S.profile);
    uint32_t node = cal_stacks_root(st, thread);
    for (int i = n - 1; i >= 0 && node != CAL_STACKS_NONE; i--) {
        const calx_code *ci = calx_codes_find(&S.codes, frames[i].code);
        if (!ci || ci->frame == CAL_STACKS_NONE)
            continue;
        uint32_t child = cal_stacks_child(st, node, ci->frame, frames[i].line);
        if (child == CAL_STACKS_NONE) {
            *folded = 1;
            break;
        }
        node = child;
    }
    return node;
}

void calx_session_stack_times(uint32_t node, const cal_times *t, int folded)
{
    cal_stacks *st = cal_profile_stacks(S.profile);
    if (node >= st->nnodes)
        return;
    cal_stacks_add_times(st, node, t, folded);
    int64_t all = cal_times_all(t);
    if (all == 0 && t->samples == 0)
        return;
    /* Best effort: a sample the timeline has no memory for is left out
       of it (it is credited above). */
    (void)cal_timeline_add(
        cal_profile_timeline(S.profile), st->nodes[node].thread,
        calx_session_elapsed_ns(), node,
        cal_timeline_cpu_kind(t->python_ns, t->native_ns, t->system_ns, t->waiting_ns),
        all);
}

void calx_session_stack_volume(uint32_t node, const cal_volume *v, int folded,
                               int64_t t_ns)
{
    cal_stacks *st = cal_profile_stacks(S.profile);
    if (node >= st->nnodes)
        return;
    cal_stacks_add_volume(st, node, v, folded);
    uint32_t kind = v->copied         ? CAL_TL_COPY
                    : v->alloc_python ? CAL_TL_ALLOC_PYTHON
                                      : CAL_TL_ALLOC_NATIVE;
    int64_t bytes = v->copied + v->alloc_python + v->alloc_native;
    (void)cal_timeline_add(cal_profile_timeline(S.profile), st->nodes[node].thread,
                           t_ns, node, kind, bytes);
}

uint32_t calx_session_thread(unsigned long ident, int tid)
{
    if (!S.profile)
        return CAL_PROFILE_NONE;
    return cal_profile_thread(S.profile, ident, tid, 0);
}

void calx_session_after_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    S.mu = fresh;
}
