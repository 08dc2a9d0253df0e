/* gcstats — see gcstats.h. */
#include "gcstats.h"

#include "cal_clock.h"
#include "pyinternals.h"
#include "session.h"

/* GIL (the engine lock on the free-threaded build): set at start, read and
   written at passes. */
static struct {
    PyInterpreterState *interp;
    cal_profile *profile; /* NULL: not watching */
    calx_gc_state base;   /* the statistics when profiling started */
} G;

/* The sampler thread's, between its ticks: what the last one saw. */
static calx_gc_tick last_tick;

void calx_gcstats_start(PyInterpreterState *interp, cal_profile *profile)
{
    cal_gc_stats *g = cal_profile_gc(profile);
    G.interp = interp;
    G.profile = NULL;
    g->read = calx_gc_read_sigsafe(interp, &G.base) == 0;
    if (!g->read)
        return;
    for (int i = 0; i < CAL_GC_GENERATIONS; i++)
        g->gen[i] = (cal_gc_generation){.threshold = G.base.threshold[i]};
    g->seen = 0;
    g->nlongest = 0;
    G.profile = profile;
    last_tick = (calx_gc_tick){0}; /* (the sampler thread is not running yet) */
    calx_gcstats_pass();
}

void calx_gcstats_pass(void)
{
    calx_gc_state now;
    if (!G.profile || calx_gc_read_sigsafe(G.interp, &now) != 0)
        return;
    cal_gc_stats *g = cal_profile_gc(G.profile);
    int64_t t = calx_session_elapsed_ns();
    for (int i = 0; i < CAL_GC_GENERATIONS; i++) {
        cal_gc_generation *gen = &g->gen[i];
        gen->collections = now.collections[i] - G.base.collections[i];
        gen->collected = now.collected[i] - G.base.collected[i];
        gen->uncollectable = now.uncollectable[i] - G.base.uncollectable[i];
        gen->threshold = now.threshold[i];
        cal_series_add(&gen->count, t, now.count[i]);
    }
}

void calx_gcstats_stop(void)
{
    calx_gcstats_pass();
    G.profile = NULL;
}

/* Which generation a running collection collects: at its start the
   collector zeroes the counts of the generations it collects and adds one
   to the next older one's (gc_collect_main up to 3.14, gc_collect_internal
   on 3.14t), so the youngest generation with a count above zero, after the
   first, is the one after it; none (a full collection): the oldest.  The
   youngest generation's own count is not looked at (objects made during
   the collection raise it).  Wrong only in the collection's first
   instructions, before the counts are updated. */
static int generation_of(const calx_gc_state *s)
{
    for (int i = 1; i < CALX_GC_GENERATIONS; i++)
        if (s->count[i] > 0)
            return i - 1;
    return CALX_GC_GENERATIONS - 1;
}

void calx_gcstats_tick_sigsafe(PyInterpreterState *interp, const PyThreadState *ts,
                               int64_t now, calx_gc_tick *out)
{
    calx_gc_state s;
    if (!calx_gcstats_collecting_in_sigsafe(interp, ts) ||
        calx_gc_read_sigsafe(interp, &s) != 0) {
        last_tick.running = 0;
        *out = last_tick;
        return;
    }
    int gen = generation_of(&s);
    int64_t all = 0;
    for (int i = 0; i < CALX_GC_GENERATIONS; i++)
        all += s.collections[i];
    /* A generation's count of collections grows only when one ends, so
       the same counts mean no collection ended in between: the same one.
       Its own generation's count is not enough: in a young collection's
       first instructions, before the counts are updated, a young
       collection right after a full one reads as the oldest generation,
       and the next full collection, with the same count of full ones,
       was taken for it (3.14, CI: "at least 43.5 ms" for a 42.4 ms
       collection, the young one's start included). */
    if (last_tick.ticks > 0 && last_tick.generation == gen &&
        last_tick.id == s.collections[gen] && last_tick.all == all) {
        /* The same collection, still running: seen by the previous tick,
           or by an earlier one (between them the thread was not found
           collecting: on the free-threaded build a collector waiting for
           the others to stop is detached). */
        last_tick.ticks++;
        last_tick.running = 1;
    } else {
        /* Its first moment seen is read after the state, its last (below)
           is the tick's, read before: between them it surely ran, and the
           span is a lower bound of its length even when this thread was
           preempted between the tick's clock and the read (CI, 3.10: a
           40.05 ms collection read "at least 41.01 ms"). */
        last_tick = (calx_gc_tick){.running = 1,
                                   .generation = gen,
                                   .id = s.collections[gen],
                                   .all = all,
                                   .first = cal_clock_now_ns(),
                                   .ticks = 1,
                                   .collected = s.collected[gen],
                                   .uncollectable = s.uncollectable[gen]};
    }
    last_tick.last = now;
    *out = last_tick;
}

void calx_gcstats_seen(const calx_gc_tick *tick, uint32_t file, int32_t line,
                       uint32_t func)
{
    calx_gc_state now;
    if (!G.profile || !tick->running || calx_gc_read_sigsafe(G.interp, &now) != 0)
        return;
    int gen = tick->generation;
    cal_gc_seen seen = {
        .generation = gen,
        .start_ns = tick->first - calx_session_origin(),
        .span_ns = tick->last > tick->first ? tick->last - tick->first : 0,
        .ticks = tick->ticks,
        .line = file == CAL_PROFILE_NONE
                    ? CAL_PROFILE_NONE
                    : cal_profile_line(G.profile, file, line, func),
        .collected = -1,
        .uncollectable = -1,
    };
    /* Exactly one collection of its generation ended since the tick: this
       one, and the statistics grew by what it did. */
    if (now.collections[gen] == tick->id + 1) {
        seen.collected = now.collected[gen] - tick->collected;
        seen.uncollectable = now.uncollectable[gen] - tick->uncollectable;
    }
    cal_gc_add_seen(cal_profile_gc(G.profile), &seen);
}

int calx_gcstats_collecting_in_sigsafe(PyInterpreterState *interp,
                                       const PyThreadState *ts)
{
    if (!calx_gc_collecting_sigsafe(interp))
        return 0;
    if (calx_gil_enabled(interp))
        return calx_gil_holder_sigsafe(interp) == ts;
    return calx_thread_attached(ts) == 1;
}
