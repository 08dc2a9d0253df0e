/*
 * libcalipers_shim.so — the allocation and copy shim, preloaded into the
 * profiled program by `calipers run`, or loaded by calipers.start() with
 * dlopen, when the libraries' GOT entries are redirected to the functions
 * below instead (redirect.c).  No libpython, no Python headers.
 *
 * WHAT IT DOES
 *
 * Interposes malloc, calloc, realloc, reallocarray, free, posix_memalign,
 * aligned_alloc, memalign, valloc, pvalloc, memcpy and memmove.  Each call is
 * forwarded to the next definition (glibc's), then counted:
 *   - live bytes, native or Python, exact (malloc_usable_size on both sides,
 *     so frees of blocks allocated before anyone attached balance too);
 *   - bytes allocated and copied, exact;
 *   - a byte sampler per thread (cal_bsamp.h) picks the allocations and
 *     copies the extension hears about, and the allocations it tracks until
 *     they are freed;
 *   - every THRESHOLD bytes of footprint change (the seed paper's threshold
 *     sampling) the extension is told the new footprint.
 * Python's own allocator reaches the shim through the PyMem/arena hooks at
 * the end of this file, which the extension installs with ctx pointing at
 * the original allocator.  They mark the thread "inside Python's allocator"
 * so the malloc calls pymalloc makes underneath are counted as Python bytes
 * and never sampled twice; no block gets a header.  Where pymalloc serves
 * PyMem and PyObject, the raw domain's free is hooked too, and it is what
 * marks the free() under a pymalloc free as Python's: the hook on the
 * other two frees is then a tail call with nothing set around it.
 *
 * THE HOT ZONE (every function here)
 *   - never allocates through the hooked functions, never takes the GIL,
 *     never uses stdio, never calls Python;
 *   - re-entry is guarded by an initial-exec TLS flag: while it is set (the
 *     profiler's own work, the callbacks) calls are forwarded uncounted;
 *   - dlsym() may allocate while the real functions are being looked up:
 *     those requests are served from a static arena, and free() of such a
 *     pointer is ignored;
 *   - errno is saved around everything that is not the forwarded call;
 *   - a failure (tracking table cannot grow, a callback fails) drops the
 *     sample and counts it; the host's call never fails because of us;
 *   - fork(): the one lock is taken around fork() (pthread_atfork) so the
 *     child never inherits it held; the child keeps counting.
 *   - in a process that is not Python (no Py_Initialize symbol) every hook
 *     only forwards.
 * Per-thread footprint deltas are batched (FLUSH_BYTES) to keep atomics off
 * the common path; a thread's remainder is flushed when it exits.
 */
#define _GNU_SOURCE
#include "calipers_shim.h"

#include "cal_bsamp.h"
#include "redirect.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define TLS __thread __attribute__((tls_model("initial-exec")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
/* The slow paths: kept out of line, so that the hot functions calling them
   stay short and need no callee-saved registers on their common path. */
#define COLD __attribute__((noinline, cold))

#define FLUSH_BYTES (256 << 10) /* per-thread footprint batch */
#define RECHECK_BYTES (1 << 20) /* unattached: look again after this many */
#define BOOT_ARENA (64 << 10)
#define FILTER_BITS 18

/* ---- the real functions ------------------------------------------------ */

typedef struct real_fns {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void (*free)(void *);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    size_t (*usable)(void *);
    void *(*memcpy)(void *, const void *, size_t);
    void *(*memmove)(void *, const void *, size_t);
} real_fns;

/* Written once by resolve() (in the constructor, or by the first call if
   that comes earlier, when the process has one thread), read-only after. */
static real_fns R;
static int inert;

/* Requests made by dlsym() while R is being filled. */
static _Alignas(16) char boot_arena[BOOT_ARENA];
static atomic_size_t boot_used;

/* ---- per-thread state ---------------------------------------------------- */

typedef struct thread_state {
    uint8_t guard;     /* the profiler's own call: forward uncounted */
    uint8_t in_py;     /* inside Python's allocator (the PyMem hooks) */
    uint8_t resolving; /* inside dlsym() during resolve() */
    uint8_t keyed;     /* the exit destructor is registered */
    uint8_t unsampled; /* counted, never sampled (api_set_unsampled): its
                          allocations and copies */
    unsigned gen;      /* attach generation the samplers were set up for */
    /* The block py_free_direct last handed to pymalloc (raw_free). */
    const void *freeing;
    /* Sample points on the bytes allocated by native code, by Python's
       allocator, and copied: three streams, each sampled on its own.  Each
       sampler counts the bytes it was given, exactly: those are the
       thread's totals, added to the process's at each slow path
       (flush_totals), so the fast path keeps no counter of its own. */
    cal_bsamp native, python, copy;
    int64_t banked_native, banked_python, banked_copy; /* added to G already */
    int64_t pend_native, pend_python;                  /* unflushed live deltas */
} thread_state;

static TLS thread_state T;

/* ---- shared state --------------------------------------------------------- */

/* Atomics; the hooks and config are written by attach() before `attached`
   is set (release) and read after it is seen (acquire). */
static struct {
    _Atomic int64_t live_native, live_python, peak, peak_python;
    _Atomic int64_t mark_peak; /* highest live since api_reset_mark_peak */
    _Atomic int64_t alloc_native, alloc_python, copied, dropped;
    _Atomic int64_t last_event, event_peak;
    atomic_int attached;
    atomic_int inflight; /* callbacks running */
    atomic_uint gen;
    cal_shim_hooks hooks;
    cal_shim_config config;
    pthread_key_t exit_key;
    int have_key;
    /* CALIPERS_SAMPLER_SEED as read by the last attach(): every thread's
       samplers start from it instead of from the time and thread id, so
       that a test can replay the same sample points (have_seed 0: unset). */
    uint64_t seed;
    int have_seed;
} G;

/* ---- the tracked allocations --------------------------------------------
 * An open-addressing table of the sampled allocations not yet freed, under
 * one spinlock.  Every free() must ask "is this pointer tracked?": a
 * counting filter of 2^FILTER_BITS byte counters (incremented on insert,
 * decremented on removal, sticky at 255) answers "no" without the lock for
 * all but a few pointers.  A thread freeing p always sees p's increment: p
 * was inserted before the program could hand p to the freeing thread. */

#define KEY_EMPTY ((uintptr_t)0)
#define KEY_GONE ((uintptr_t)1)

typedef struct track_slot {
    uintptr_t key;
    uint64_t cookie;
    int64_t weight;
    uint64_t size; /* the bytes asked for */
} track_slot;

static struct {
    atomic_flag lock;
    track_slot *slots;
    size_t cap, used, live; /* used counts removed slots too */
    _Atomic uint8_t filter[1 << FILTER_BITS];
} TT = {.lock = ATOMIC_FLAG_INIT};

static inline uint64_t mix(uintptr_t p)
{
    return ((uint64_t)p >> 4) * 0x9E3779B97F4A7C15ull;
}

/* key's counter in the filter.  Every free() reads one, and a hashed index
   made that read a cache miss on most frees (2/3 of the free hook's time in
   a perf profile of two threads allocating), so the index keeps neighbours
   together: one counter per 256-byte granule, consecutive granules in
   consecutive counters, a cache line of counters for 16 KiB of heap (a
   pymalloc pool).  A tracked block makes its granule's other blocks take
   the locked lookup when freed, a share of frees of about the granule over
   the sampling interval (0.1% at 256 KiB).  The address bits above the
   filter's 64 MiB span (up to bit 43) are folded in by xor, which keeps
   each line's counters together, so that blocks 64 MiB apart do not share
   counters. */
#define GRANULE_SHIFT 8

static inline _Atomic uint8_t *filter_of(uintptr_t key)
{
    uint64_t g = (uint64_t)key >> GRANULE_SHIFT;
    return &TT.filter[(g ^ (g >> FILTER_BITS)) & ((1u << FILTER_BITS) - 1)];
}

static void tt_lock(void)
{
    int spins = 0;
    while (atomic_flag_test_and_set_explicit(&TT.lock, memory_order_acquire))
        if (++spins > 64) {
            sched_yield();
            spins = 0;
        }
}

static void tt_unlock(void)
{
    atomic_flag_clear_explicit(&TT.lock, memory_order_release);
}

static track_slot *tt_find(uintptr_t key)
{
    if (!TT.slots)
        return NULL;
    size_t mask = TT.cap - 1;
    for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
        if (TT.slots[i].key == key)
            return &TT.slots[i];
        if (TT.slots[i].key == KEY_EMPTY)
            return NULL;
    }
}

/* Rebuild into a table of 4x the live entries (at least 1024 slots). */
static int tt_rehash(void)
{
    size_t cap = 1024;
    while (cap < TT.live * 4)
        cap *= 2;
    track_slot *slots = R.calloc(cap, sizeof(*slots));
    if (!slots)
        return -1;
    for (size_t i = 0; i < TT.cap; i++) {
        uintptr_t k = TT.slots[i].key;
        if (k == KEY_EMPTY || k == KEY_GONE)
            continue;
        size_t j = mix(k) & (cap - 1);
        while (slots[j].key != KEY_EMPTY)
            j = (j + 1) & (cap - 1);
        slots[j] = TT.slots[i];
    }
    R.free(TT.slots);
    TT.slots = slots;
    TT.cap = cap;
    TT.used = TT.live;
    return 0;
}

static int tt_insert(uintptr_t key, uint64_t cookie, int64_t weight, uint64_t size)
{
    int rc = -1;
    tt_lock();
    if ((TT.used + 1) * 2 > TT.cap && tt_rehash() != 0)
        goto out;
    track_slot *s = tt_find(key);
    if (s) { /* a stale entry: the block was freed where we could not see */
        s->cookie = cookie;
        s->weight = weight;
        s->size = size;
        rc = 0;
        goto out;
    }
    size_t mask = TT.cap - 1, i = mix(key) & mask;
    while (TT.slots[i].key != KEY_EMPTY && TT.slots[i].key != KEY_GONE)
        i = (i + 1) & mask;
    if (TT.slots[i].key == KEY_EMPTY)
        TT.used++;
    TT.slots[i] = (track_slot){key, cookie, weight, size};
    TT.live++;
    _Atomic uint8_t *f = filter_of(key);
    uint8_t c = atomic_load_explicit(f, memory_order_relaxed);
    if (c < 255)
        atomic_store_explicit(f, (uint8_t)(c + 1), memory_order_relaxed);
    rc = 0;
out:
    tt_unlock();
    return rc;
}

/* Might key be tracked?  0: certainly not (the filter's answer for all but
   a few pointers). */
static inline int tt_maybe(uintptr_t key)
{
    return atomic_load_explicit(filter_of(key), memory_order_relaxed) != 0;
}

/* Remove key if tracked; returns 1 and its values if it was. */
static int tt_remove(uintptr_t key, uint64_t *cookie, int64_t *weight)
{
    _Atomic uint8_t *f = filter_of(key);
    int found = 0;
    tt_lock();
    track_slot *s = tt_find(key);
    if (s) {
        *cookie = s->cookie;
        *weight = s->weight;
        s->key = KEY_GONE;
        TT.live--;
        uint8_t c = atomic_load_explicit(f, memory_order_relaxed);
        if (c < 255)
            atomic_store_explicit(f, (uint8_t)(c - 1), memory_order_relaxed);
        found = 1;
    }
    tt_unlock();
    return found;
}

static int tt_contains(uintptr_t key)
{
    _Atomic uint8_t *f = filter_of(key);
    if (atomic_load_explicit(f, memory_order_relaxed) == 0)
        return 0;
    tt_lock();
    int found = tt_find(key) != NULL;
    tt_unlock();
    return found;
}

/* ---- callbacks ------------------------------------------------------------ */

/* Enter a callback: 0 if nobody is attached.  The caller's guard is set. */
static int hooks_enter(void)
{
    atomic_fetch_add(&G.inflight, 1);
    if (atomic_load_explicit(&G.attached, memory_order_acquire))
        return 1;
    atomic_fetch_sub(&G.inflight, 1);
    return 0;
}

static void hooks_leave(void) { atomic_fetch_sub(&G.inflight, 1); }

static void thread_exit_flush(void *arg);
static void flush_totals(void);

/* Set this thread's samplers up for the current attachment. */
static void thread_setup(unsigned gen)
{
    pid_t tid = (pid_t)syscall(SYS_gettid);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t seed =
        ((uint64_t)tid << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)&T;
    if (G.have_seed)
        seed = G.seed;
    int on = atomic_load_explicit(&G.attached, memory_order_acquire);
    flush_totals(); /* what the old samplers counted */
    cal_bsamp_init(&T.native, on ? G.config.alloc_mean : 0, seed);
    cal_bsamp_init(&T.python, on ? G.config.alloc_mean : 0, seed * 17 + 3);
    cal_bsamp_init(&T.copy, on ? G.config.copy_mean : 0, seed * 31 + 7);
    T.banked_native = T.banked_python = T.banked_copy = 0;
    if (!on) {
        cal_bsamp_set_left(&T.native, RECHECK_BYTES);
        cal_bsamp_set_left(&T.python, RECHECK_BYTES);
        cal_bsamp_set_left(&T.copy, RECHECK_BYTES);
    }
    T.gen = gen;
    if (!T.keyed && G.have_key) {
        T.keyed = 1;
        pthread_setspecific(G.exit_key, (void *)1);
    }
}

/* The sample points in n more bytes of s (the slow path of points()). */
static COLD uint64_t points_slow(cal_bsamp *s)
{
    unsigned gen = atomic_load_explicit(&G.gen, memory_order_acquire);
    if (T.gen != gen) {
        thread_setup(gen); /* banks the totals; a fresh start: not sampled */
        return 0;
    }
    flush_totals();
    if (!s->mean) {
        cal_bsamp_set_left(s, RECHECK_BYTES);
        return 0;
    }
    return cal_bsamp_count_slow(s);
}

static inline uint64_t points(cal_bsamp *s, size_t n)
{
    s->left -= (int64_t)n;
    if (LIKELY(s->left > 0))
        return 0;
    return points_slow(s);
}

/* ---- counting -------------------------------------------------------------- */

/* Add what this thread's samplers counted since the last call to the
   process's totals. */
static void bank(const cal_bsamp *s, int64_t *banked, _Atomic int64_t *total)
{
    int64_t taken = cal_bsamp_taken(s);
    if (taken != *banked)
        atomic_fetch_add_explicit(total, taken - *banked, memory_order_relaxed);
    *banked = taken;
}

static void flush_totals(void)
{
    bank(&T.native, &T.banked_native, &G.alloc_native);
    bank(&T.python, &T.banked_python, &G.alloc_python);
    bank(&T.copy, &T.banked_copy, &G.copied);
}

static void flush(void)
{
    int64_t dn = T.pend_native, dp = T.pend_python;
    T.pend_native = T.pend_python = 0;
    int64_t ln = atomic_fetch_add(&G.live_native, dn) + dn;
    int64_t lp = atomic_fetch_add(&G.live_python, dp) + dp;
    int64_t live = ln + lp;
    int64_t pk = atomic_load_explicit(&G.peak, memory_order_relaxed);
    while (live > pk)
        if (atomic_compare_exchange_weak(&G.peak, &pk, live)) {
            atomic_store_explicit(&G.peak_python, lp, memory_order_relaxed);
            break;
        }
    int64_t mk = atomic_load_explicit(&G.mark_peak, memory_order_relaxed);
    while (live > mk && !atomic_compare_exchange_weak(&G.mark_peak, &mk, live))
        ;
    if (!atomic_load_explicit(&G.attached, memory_order_relaxed))
        return;
    int64_t last = atomic_load_explicit(&G.last_event, memory_order_relaxed);
    int64_t moved = live > last ? live - last : last - live;
    if (moved < G.config.threshold ||
        !atomic_compare_exchange_strong(&G.last_event, &last, live))
        return;
    int flags = live > last ? CAL_SHIM_RISING : 0;
    int64_t ep = atomic_load(&G.event_peak);
    while (live > ep)
        if (atomic_compare_exchange_weak(&G.event_peak, &ep, live)) {
            flags |= CAL_SHIM_NEW_PEAK;
            break;
        }
    if (hooks_enter()) {
        G.hooks.footprint(live, lp, flags);
        hooks_leave();
    }
}

static COLD void account_flush(void)
{
    int saved = errno;
    uint8_t g = T.guard;
    T.guard = 1;
    flush();
    T.guard = g;
    errno = saved;
}

static inline void account(int64_t delta)
{
    int64_t *pend = T.in_py ? &T.pend_python : &T.pend_native;
    *pend += delta;
    if (UNLIKELY(*pend >= FLUSH_BYTES || *pend <= -FLUSH_BYTES))
        account_flush();
}

static COLD void sample_alloc(void *p, size_t n, uint64_t k, int python)
{
    if (T.unsampled)
        return;
    int saved = errno;
    T.guard = 1;
    int64_t weight = (int64_t)k * (python ? T.python.mean : T.native.mean);
    if (hooks_enter()) {
        uint64_t cookie = G.hooks.alloc(p, n, weight, python);
        if (cookie && tt_insert((uintptr_t)p, cookie, weight, n) != 0) {
            atomic_fetch_add(&G.dropped, 1);
            G.hooks.free(p, cookie, weight);
        }
        hooks_leave();
    }
    T.guard = 0;
    errno = saved;
}

static COLD void untrack_slow(void *p)
{
    uint64_t cookie;
    int64_t weight;
    if (!tt_remove((uintptr_t)p, &cookie, &weight))
        return;
    int saved = errno;
    T.guard = 1;
    if (hooks_enter()) {
        G.hooks.free(p, cookie, weight);
        hooks_leave();
    }
    T.guard = 0;
    errno = saved;
}

/* Forget p if it is tracked (before the block is released, so the address
   cannot be handed to another thread and tracked again meanwhile). */
static inline void untrack(void *p)
{
    if (UNLIKELY(tt_maybe((uintptr_t)p)))
        untrack_slow(p);
}

/* A native allocation of n bytes (requested) returned p. */
static inline void native_alloc(void *p, size_t n)
{
    account((int64_t)R.usable(p));
    if (T.in_py)
        return; /* pymalloc's own request: counted by the Python hooks */
    uint64_t k = points(&T.native, n);
    if (UNLIKELY(k))
        sample_alloc(p, n, k, 0);
}

static inline void native_free(void *p)
{
    if (!T.in_py)
        untrack(p);
    account(-(int64_t)R.usable(p));
}

#define COUNTING() (LIKELY(!inert) && LIKELY(!T.guard))

/* ---- bootstrap ----------------------------------------------------------- */

static int from_boot(const void *p)
{
    return (const char *)p >= boot_arena && (const char *)p < boot_arena + BOOT_ARENA;
}

static void *boot_alloc(size_t n)
{
    size_t need = (n + 15) & ~(size_t)15;
    size_t at = atomic_fetch_add(&boot_used, need);
    if (at + need > BOOT_ARENA)
        return NULL;
    return boot_arena + at;
}

/* Copy without calling memcpy (which may be us, not yet resolved). */
static void *boot_copy(void *dst, const void *src, size_t n)
{
    volatile unsigned char *d = dst;
    const volatile unsigned char *s = src;
    if (d < s)
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    else
        for (size_t i = n; i > 0; i--)
            d[i - 1] = s[i - 1];
    return dst;
}

static void resolve(void)
{
    T.resolving = 1;
    real_fns r;
    r.malloc = dlsym(RTLD_NEXT, "malloc");
    r.calloc = dlsym(RTLD_NEXT, "calloc");
    r.realloc = dlsym(RTLD_NEXT, "realloc");
    r.free = dlsym(RTLD_NEXT, "free");
    r.posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    r.aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    r.memalign = dlsym(RTLD_NEXT, "memalign");
    r.valloc = dlsym(RTLD_NEXT, "valloc");
    r.pvalloc = dlsym(RTLD_NEXT, "pvalloc");
    r.usable = dlsym(RTLD_NEXT, "malloc_usable_size");
    r.memcpy = dlsym(RTLD_NEXT, "memcpy");
    r.memmove = dlsym(RTLD_NEXT, "memmove");
    T.resolving = 0;
    if (!r.malloc || !r.calloc || !r.realloc || !r.free || !r.usable || !r.memcpy ||
        !r.memmove)
        _exit(127); /* no allocator to forward to: nothing can run */
    R = r;
}

#define READY(fallback)                                                                \
    do {                                                                               \
        if (UNLIKELY(!R.malloc)) {                                                     \
            if (T.resolving)                                                           \
                return fallback;                                                       \
            resolve();                                                                 \
        }                                                                              \
    } while (0)

/* ---- the interposed functions ---------------------------------------------- */

EXPORT void *malloc(size_t n)
{
    READY(boot_alloc(n));
    void *p = R.malloc(n);
    if (p && COUNTING())
        native_alloc(p, n);
    return p;
}

EXPORT void *calloc(size_t nelem, size_t elsize)
{
    READY(boot_alloc(nelem * elsize)); /* the arena is zero-initialised */
    void *p = R.calloc(nelem, elsize);
    if (p && COUNTING())
        native_alloc(p, nelem * elsize);
    return p;
}

EXPORT void free(void *p)
{
    if (!p || UNLIKELY(from_boot(p)))
        return;
    if (UNLIKELY(!R.malloc))
        resolve(); /* not from dlsym: it frees only what it allocated */
    if (COUNTING())
        native_free(p);
    R.free(p);
}

EXPORT void *realloc(void *p, size_t n)
{
    if (UNLIKELY(p && from_boot(p))) {
        void *q = malloc(n);
        size_t room = (size_t)(boot_arena + BOOT_ARENA - (char *)p);
        if (q)
            boot_copy(q, p, n < room ? n : room);
        return q;
    }
    READY(boot_alloc(n));
    if (!COUNTING())
        return R.realloc(p, n);
    if (!p) {
        void *q = R.realloc(NULL, n);
        if (q)
            native_alloc(q, n);
        return q;
    }
    int64_t old = (int64_t)R.usable(p);
    if (!T.in_py)
        untrack(p);
    void *q = R.realloc(p, n);
    if (!q) {
        if (n == 0) /* glibc freed p */
            account(-old);
        return NULL;
    }
    account(-old);
    native_alloc(q, n);
    return q;
}

/* realloc by the shim's own definition (a hidden alias, below): in a shim
   loaded with dlopen the exported name binds to libc's. */
extern __typeof__(realloc) own_realloc __attribute__((visibility("hidden")));

EXPORT void *reallocarray(void *p, size_t nelem, size_t elsize)
{
    size_t n;
    if (__builtin_mul_overflow(nelem, elsize, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return own_realloc(p, n);
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    READY(ENOMEM);
    int rc = R.posix_memalign(out, align, n);
    if (rc == 0 && *out && COUNTING())
        native_alloc(*out, n);
    return rc;
}

/* The rarely used aligned allocators; those this libc lacks are NULL. */
static void *aligned_done(void *p, size_t n)
{
    if (p && COUNTING())
        native_alloc(p, n);
    return p;
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    READY(NULL);
    return R.aligned_alloc ? aligned_done(R.aligned_alloc(align, n), n) : NULL;
}

EXPORT void *memalign(size_t align, size_t n)
{
    READY(NULL);
    return R.memalign ? aligned_done(R.memalign(align, n), n) : NULL;
}

EXPORT void *valloc(size_t n)
{
    READY(NULL);
    return R.valloc ? aligned_done(R.valloc(n), n) : NULL;
}

EXPORT void *pvalloc(size_t n)
{
    READY(NULL);
    return R.pvalloc ? aligned_done(R.pvalloc(n), n) : NULL;
}

static COLD void sample_copy(uint64_t k)
{
    if (T.unsampled)
        return;
    int saved = errno;
    T.guard = 1;
    if (hooks_enter()) {
        G.hooks.copy((int64_t)k * T.copy.mean);
        hooks_leave();
    }
    T.guard = 0;
    errno = saved;
}

static inline void copied(size_t n)
{
    if (!COUNTING())
        return;
    uint64_t k = points(&T.copy, n);
    if (UNLIKELY(k))
        sample_copy(k);
}

/* The rare paths of memcpy and memmove, out of line so that the common
   one keeps no frame: before the real function is resolved, and a copy
   that reaches a sample point. */
static COLD void *copy_rare(void *dst, const void *src, size_t n, int move)
{
    void *(*real)(void *, const void *, size_t) = move ? R.memmove : R.memcpy;
    if (!real)
        return boot_copy(dst, src, n);
    void *r = real(dst, src, n);
    copied(n);
    return r;
}

/* Counted before the copy, so that the copy is a tail call (a sample
   point reached is the same point whether the copy is done yet or not). */
static inline __attribute__((always_inline)) void *copy_as(void *dst, const void *src,
                                                           size_t n, int move)
{
    void *(*real)(void *, const void *, size_t) = move ? R.memmove : R.memcpy;
    if (UNLIKELY(!real))
        return copy_rare(dst, src, n, move);
    if (COUNTING()) {
        int64_t left = T.copy.left - (int64_t)n;
        if (UNLIKELY(left <= 0))
            return copy_rare(dst, src, n, move);
        T.copy.left = left;
    }
    return real(dst, src, n);
}

EXPORT void *memcpy(void *dst, const void *src, size_t n)
{
    return copy_as(dst, src, n, 0);
}

EXPORT void *memmove(void *dst, const void *src, size_t n)
{
    return copy_as(dst, src, n, 1);
}

/* ---- Python's allocator ------------------------------------------------------ */

/* The hooks below are called for every Python object: each is a test of
   the thread's flags, the call of the original with in_py set (so that the
   malloc() pymalloc makes underneath counts as Python's), and a subtraction
   and a branch (the byte sampler); everything else is out of line.  A
   nested call (the PyMem domain under the object domain), or the
   profiler's own (guard), only forwards. */

/* The usable size of Python's blocks when malloc does not see their
   memory (set_py_usable; NULL: pymalloc's arenas or malloc count it).
   Set by the extension before it installs the hooks; read relaxed. */
static size_t (*_Atomic py_usable)(const void *);

/* Count a Python block's size, made (+1) or freed (-1), if malloc cannot
   (in_py is set: Python bytes).  Only in the _sized hooks, which only the
   free-threaded build installs: the others pay nothing for it. */
static inline void py_count(int sized, const void *p, int sign)
{
    if (!sized)
        return;
    size_t (*u)(const void *) = atomic_load_explicit(&py_usable, memory_order_relaxed);
    if (UNLIKELY(u != NULL) && LIKELY(!T.guard))
        account(sign * (int64_t)u(p));
}

static void api_set_py_usable(size_t (*usable)(const void *))
{
    atomic_store(&py_usable, usable);
}

/* Requests up to this size go straight to the original allocator, in a
   tail call (api_set_small_direct): 0 until the extension says pymalloc
   serves them.  Set before the hooks are installed; read relaxed. */
static _Atomic size_t small_direct;

static void api_set_small_direct(size_t limit) { atomic_store(&small_direct, limit); }

static inline void python_alloc(void *p, size_t n, int kind)
{
    uint64_t k = points(&T.python, n);
    if (UNLIKELY(k))
        sample_alloc(p, n, k, kind);
}

/* Each hook is written once and made into one entry point per domain and
   per way of counting: `kind` (CAL_SHIM_PYMEM or CAL_SHIM_PYOBJ) and
   `sized` are constants in each, so the object domain's hooks are the same
   instructions as the PyMem domain's but for the constant the slow path
   hands on (the engine reads an object's type only from blocks of the
   object domain), and py_count is gone from the hooks that are not
   sized. */
#define INLINE static inline __attribute__((always_inline))

/* The full path of the malloc hooks, out of line so that the common one
   (below) keeps no frame. */
static __attribute__((noinline)) void *py_malloc_full(int sized, int kind, void *ctx,
                                                      size_t n)
{
    cal_shim_pymem *o = ctx;
    if (UNLIKELY(T.in_py))
        return o->malloc(o->ctx, n);
    T.in_py = 1;
    void *p = o->malloc(o->ctx, n);
    if (LIKELY(p))
        py_count(sized, p, 1);
    T.in_py = 0;
    if (LIKELY(p) && LIKELY(!T.guard))
        python_alloc(p, n, kind);
    return p;
}

/* The common case: a small object, no sample point reached.  pymalloc
   serves it from its pools and never calls malloc() for it, so in_py need
   not be set around the call, and the call is a tail call: no frame, no
   store but the sampler's countdown.  (A request that fails has then
   counted towards the next sample point: pymalloc fails a small request
   only when memory has run out.) */
INLINE void *py_malloc_as(int sized, int kind, void *ctx, size_t n)
{
    cal_shim_pymem *o = ctx;
    if (!sized &&
        LIKELY(n <= atomic_load_explicit(&small_direct, memory_order_relaxed)) &&
        LIKELY(!T.in_py) && LIKELY(!T.guard)) {
        int64_t left = T.python.left - (int64_t)n;
        if (LIKELY(left > 0)) {
            T.python.left = left;
            return o->malloc(o->ctx, n);
        }
    }
    return py_malloc_full(sized, kind, ctx, n);
}

/* The full path of the calloc hooks (the common one: py_calloc_as). */
static __attribute__((noinline)) void *py_calloc_full(int sized, int kind, void *ctx,
                                                      size_t nelem, size_t elsize)
{
    cal_shim_pymem *o = ctx;
    if (UNLIKELY(T.in_py))
        return o->calloc(o->ctx, nelem, elsize);
    T.in_py = 1;
    void *p = o->calloc(o->ctx, nelem, elsize);
    if (LIKELY(p))
        py_count(sized, p, 1);
    T.in_py = 0;
    if (LIKELY(p) && LIKELY(!T.guard))
        python_alloc(p, nelem * elsize, kind);
    return p;
}

/* As py_malloc_as: a small request with no sample point reached goes to
   pymalloc in a tail call. */
INLINE void *py_calloc_as(int sized, int kind, void *ctx, size_t nelem, size_t elsize)
{
    cal_shim_pymem *o = ctx;
    size_t n;
    if (!sized && !__builtin_mul_overflow(nelem, elsize, &n) &&
        LIKELY(n <= atomic_load_explicit(&small_direct, memory_order_relaxed)) &&
        LIKELY(!T.in_py) && LIKELY(!T.guard)) {
        int64_t left = T.python.left - (int64_t)n;
        if (LIKELY(left > 0)) {
            T.python.left = left;
            return o->calloc(o->ctx, nelem, elsize);
        }
    }
    return py_calloc_full(sized, kind, ctx, nelem, elsize);
}

INLINE void *py_realloc_as(int sized, int kind, void *ctx, void *p, size_t n)
{
    cal_shim_pymem *o = ctx;
    if (UNLIKELY(T.in_py))
        return o->realloc(o->ctx, p, n);
    if (p && LIKELY(!T.guard))
        untrack(p);
    T.in_py = 1;
    if (p)
        py_count(sized, p, -1); /* as freed; the block it becomes is counted below */
    void *q = o->realloc(o->ctx, p, n);
    if (LIKELY(q))
        py_count(sized, q, 1);
    else if (p)
        py_count(sized, p, 1); /* failed: p is as it was */
    T.in_py = 0;
    if (LIKELY(q) && LIKELY(!T.guard))
        python_alloc(q, n, kind);
    return q;
}

INLINE void py_free_as(int sized, void *ctx, void *p)
{
    cal_shim_pymem *o = ctx;
    if (UNLIKELY(T.in_py)) {
        o->free(o->ctx, p);
        return;
    }
    if (p && LIKELY(!T.guard))
        untrack(p);
    T.in_py = 1;
    if (p)
        py_count(sized, p, -1);
    o->free(o->ctx, p);
    T.in_py = 0;
}

/* The entry points: NAME (the PyMem domain), NAME_obj (the object domain),
   and each again _sized. */
#define PY_HOOKS(suffix, sized, kind)                                                  \
    static void *py_malloc##suffix(void *ctx, size_t n)                                \
    {                                                                                  \
        return py_malloc_as(sized, kind, ctx, n);                                      \
    }                                                                                  \
    static void *py_calloc##suffix(void *ctx, size_t m, size_t n)                      \
    {                                                                                  \
        return py_calloc_as(sized, kind, ctx, m, n);                                   \
    }                                                                                  \
    static void *py_realloc##suffix(void *ctx, void *p, size_t n)                      \
    {                                                                                  \
        return py_realloc_as(sized, kind, ctx, p, n);                                  \
    }
PY_HOOKS(, 0, CAL_SHIM_PYMEM)
PY_HOOKS(_obj, 0, CAL_SHIM_PYOBJ)
PY_HOOKS(_sized, 1, CAL_SHIM_PYMEM)
PY_HOOKS(_obj_sized, 1, CAL_SHIM_PYOBJ)

static void py_free(void *ctx, void *p) { py_free_as(0, ctx, p); }
static void py_free_sized(void *ctx, void *p) { py_free_as(1, ctx, p); }

/* The free hook of the domains pymalloc serves (api_raw_hooks): a block
   pymalloc did not make from its pools it hands on to PyMem_RawFree,
   whose hook (raw_free) sees the block named here and sets in_py around
   the free() under it.  So nothing need be set around this call and
   cleared after: one store, a test of the thread's flags and one load of
   the filter, then a tail call. */
static COLD void free_maybe_tracked(cal_shim_pymem *o, void *p)
{
    untrack_slow(p);
    o->free(o->ctx, p);
}

static void py_free_direct(void *ctx, void *p)
{
    cal_shim_pymem *o = ctx;
    T.freeing = p;
    if (p && LIKELY(!T.in_py) && LIKELY(!T.guard) && UNLIKELY(tt_maybe((uintptr_t)p)))
        free_maybe_tracked(o, p); /* both calls tail calls: no frame */
    else
        o->free(o->ctx, p);
}

/* PYMEM_DOMAIN_RAW's free, where the other two free with py_free_direct:
   the block it was just handed is pymalloc's, and the free() under this
   is Python's; any other is the raw domain's own (NumPy's arrays, the
   interpreter's thread states), native as it would be unhooked.  Under
   Python's debug hooks (PYTHONMALLOC=pymalloc_debug, -X dev) pymalloc
   frees the block from the start of their header, DEBUG_FRONT bytes
   before the one handed on; no other block can start there (it is the
   block's own malloc header).  (A stale `freeing` names a block of
   pymalloc's pools, which never reaches here.)
   The raw domain's malloc, calloc and realloc stay the original's.  The
   original is kept here, not in the context: PyMem_SetAllocator is not
   atomic, and a thread without the GIL freeing while the hook goes in or
   out may read it with the original's context (which is the installed
   context too, so that the original's functions read with ours are
   right as well). */
static cal_shim_pymem raw_orig;

#define DEBUG_FRONT (2 * sizeof(size_t)) /* Objects/obmalloc.c, "debug hooks" */

static void raw_free(void *ctx, void *p)
{
    (void)ctx;
    uintptr_t before = (uintptr_t)T.freeing - (uintptr_t)p;
    if (p && (before == 0 || before == DEBUG_FRONT) && !T.in_py) {
        T.freeing = NULL;
        T.in_py = 1;
        raw_orig.free(raw_orig.ctx, p);
        T.in_py = 0;
        return;
    }
    raw_orig.free(raw_orig.ctx, p);
}

static void api_raw_hooks(const cal_shim_pymem *orig, cal_shim_pymem *hooks)
{
    raw_orig = *orig;
    *hooks = *orig;
    hooks->free = raw_free;
}

/* pymalloc's arenas (mmap'ed, so invisible to malloc): Python footprint. */
static void *arena_alloc(void *ctx, size_t n)
{
    cal_shim_arena *o = ctx;
    void *p = o->alloc(o->ctx, n);
    if (p) {
        uint8_t in = T.in_py;
        T.in_py = 1;
        account((int64_t)n);
        T.in_py = in;
    }
    return p;
}

static void arena_free(void *ctx, void *p, size_t n)
{
    cal_shim_arena *o = ctx;
    o->free(o->ctx, p, n);
    uint8_t in = T.in_py;
    T.in_py = 1;
    account(-(int64_t)n);
    T.in_py = in;
}

/* ---- the API ------------------------------------------------------------------ */

static int api_attach(const cal_shim_hooks *hooks, const cal_shim_config *config)
{
    if (atomic_load(&G.attached))
        return -1;
    G.hooks = *hooks;
    G.config = *config;
    /* Tests only (documented in INTERNALS, "The sampler fuzzer"): a fixed
       seed.  getenv neither allocates nor locks; attach is never on a hot
       path. */
    const char *seed = getenv("CALIPERS_SAMPLER_SEED");
    char *end = NULL;
    G.have_seed = 0;
    if (seed && *seed) {
        unsigned long long v = strtoull(seed, &end, 0);
        if (end && *end == '\0') {
            G.seed = (uint64_t)v;
            G.have_seed = 1;
        }
    }
    if (G.config.threshold <= 0)
        G.config.threshold = 1;
    atomic_fetch_add(&G.live_python, config->python_baseline);
    int64_t live = atomic_load(&G.live_native) + atomic_load(&G.live_python);
    atomic_store(&G.last_event, live);
    atomic_store(&G.event_peak, live);
    atomic_store_explicit(&G.attached, 1, memory_order_release);
    unsigned gen = atomic_fetch_add_explicit(&G.gen, 1, memory_order_release) + 1;
    /* The attaching thread samples from its next allocation on (another
       thread from its next slow path, within RECHECK_BYTES): in a forked
       child that restarts, it is the only thread, and its first megabyte
       would otherwise go unsampled. */
    thread_setup(gen);
    return 0;
}

static void api_detach(void)
{
    atomic_store(&G.attached, 0);
    atomic_fetch_add(&G.gen, 1);
    while (atomic_load(&G.inflight) > 0)
        sched_yield();
}

static void api_counters(cal_shim_counters *out)
{
    uint8_t g = T.guard;
    T.guard = 1;
    flush_totals();
    flush();
    T.guard = g;
    out->live_native = atomic_load(&G.live_native);
    out->live_python = atomic_load(&G.live_python);
    out->peak = atomic_load(&G.peak);
    out->peak_python = atomic_load(&G.peak_python);
    out->mark_peak = atomic_load(&G.mark_peak);
    out->alloc_native = atomic_load(&G.alloc_native);
    out->alloc_python = atomic_load(&G.alloc_python);
    out->copied = atomic_load(&G.copied);
    out->dropped = atomic_load(&G.dropped);
}

static int api_guard_enter(void)
{
    int was = T.guard;
    T.guard = 1;
    return was;
}

static void api_guard_leave(int previous) { T.guard = (uint8_t)previous; }

static int api_tracked(const void *p) { return tt_contains((uintptr_t)p); }

static int api_lookup(const void *p, cal_shim_sample *out)
{
    uintptr_t key = (uintptr_t)p;
    if (!tt_maybe(key))
        return 0;
    uint8_t g = T.guard;
    T.guard = 1;
    tt_lock();
    const track_slot *s = tt_find(key);
    if (s)
        *out = (cal_shim_sample){p, s->cookie, s->weight, s->size};
    tt_unlock();
    T.guard = g;
    return s != NULL;
}

static int api_set_unsampled(int on)
{
    int was = T.unsampled;
    T.unsampled = (uint8_t)(on != 0);
    return was;
}

static size_t api_samples(cal_shim_sample *out, size_t cap)
{
    uint8_t g = T.guard;
    T.guard = 1;
    tt_lock();
    size_t n = 0;
    for (size_t i = 0; TT.slots && i < TT.cap; i++) {
        const track_slot *s = &TT.slots[i];
        if (s->key == KEY_EMPTY || s->key == KEY_GONE)
            continue;
        if (n < cap)
            out[n] =
                (cal_shim_sample){(const void *)s->key, s->cookie, s->weight, s->size};
        n++;
    }
    tt_unlock();
    T.guard = g;
    return n;
}

static void api_reset_mark_peak(void)
{
    uint8_t g = T.guard;
    T.guard = 1;
    flush();
    atomic_store(&G.mark_peak,
                 atomic_load(&G.live_native) + atomic_load(&G.live_python));
    T.guard = g;
}

static void api_reset(void)
{
    uint8_t g = T.guard;
    T.guard = 1;
    tt_lock();
    /* Only what is not already empty is written: in a forked child (the
       caller) a page written is a page copied from the parent, and the
       filter alone is 2^FILTER_BITS bytes.  A filter counter stuck at 255
       stays so (as it would in the parent): it only costs a lookup. */
    for (size_t i = 0; TT.slots && i < TT.cap; i++) {
        uintptr_t k = TT.slots[i].key;
        if (k == KEY_EMPTY)
            continue;
        if (k != KEY_GONE)
            atomic_store_explicit(filter_of(k), 0, memory_order_relaxed);
        TT.slots[i] = (track_slot){KEY_EMPTY, 0, 0, 0};
    }
    TT.used = TT.live = 0;
    tt_unlock();
    flush_totals();
    flush();
    int64_t lp = atomic_load(&G.live_python);
    atomic_store(&G.peak, atomic_load(&G.live_native) + lp);
    atomic_store(&G.peak_python, lp);
    T.guard = g;
}

static void api_sampler_state(int stream, int64_t out[3])
{
    const cal_bsamp *s = stream == CAL_SHIM_NATIVE ? &T.native : &T.python;
    out[0] = s->left;
    out[1] = cal_bsamp_taken(s);
    out[2] = s->mean;
}

static int64_t api_alloc_clock(void)
{
    uint8_t g = T.guard;
    T.guard = 1;
    flush_totals();
    T.guard = g;
    return atomic_load_explicit(&G.alloc_native, memory_order_relaxed) +
           atomic_load_explicit(&G.alloc_python, memory_order_relaxed);
}

/* Redirect only where the process's allocator is the one the shim forwards
   to: with another malloc preloaded (jemalloc, tcmalloc) the GOT entries
   point at it, and sending its blocks to libc's free would break the
   program.  The caller holds the guard (dlsym may allocate). */
static int api_redirect(int on, char *failed, size_t cap)
{
    if (on && (dlsym(RTLD_DEFAULT, "malloc") != (void *)R.malloc ||
               dlsym(RTLD_DEFAULT, "free") != (void *)R.free ||
               dlsym(RTLD_DEFAULT, "realloc") != (void *)R.realloc ||
               dlsym(RTLD_DEFAULT, "calloc") != (void *)R.calloc))
        return -1;
    return cal_redirect_set(on, failed, cap);
}

EXPORT const cal_shim_api calipers_shim_api = {
    .abi = CAL_SHIM_ABI,
    .attach = api_attach,
    .detach = api_detach,
    .counters = api_counters,
    .guard_enter = api_guard_enter,
    .guard_leave = api_guard_leave,
    .tracked = api_tracked,
    .py_malloc = py_malloc,
    .py_calloc = py_calloc,
    .py_realloc = py_realloc,
    .py_free = py_free,
    .py_malloc_sized = py_malloc_sized,
    .py_calloc_sized = py_calloc_sized,
    .py_realloc_sized = py_realloc_sized,
    .py_free_sized = py_free_sized,
    .arena_alloc = arena_alloc,
    .arena_free = arena_free,
    .reset = api_reset,
    .lookup = api_lookup,
    .samples = api_samples,
    .reset_mark_peak = api_reset_mark_peak,
    .set_unsampled = api_set_unsampled,
    .set_py_usable = api_set_py_usable,
    .set_small_direct = api_set_small_direct,
    .py_obj_malloc = py_malloc_obj,
    .py_obj_calloc = py_calloc_obj,
    .py_obj_realloc = py_realloc_obj,
    .alloc_clock = api_alloc_clock,
    .py_obj_malloc_sized = py_malloc_obj_sized,
    .py_obj_calloc_sized = py_calloc_obj_sized,
    .py_obj_realloc_sized = py_realloc_obj_sized,
    .redirect = api_redirect,
    .sampler_state = api_sampler_state,
    .raw_hooks = api_raw_hooks,
    .py_free_direct = py_free_direct,
};

/* ---- process events ------------------------------------------------------------- */

static void thread_exit_flush(void *arg)
{
    (void)arg;
    uint8_t g = T.guard;
    T.guard = 1;
    flush_totals();
    flush();
    T.guard = g;
}

static void before_fork(void) { tt_lock(); }

static void after_fork_parent(void) { tt_unlock(); }

static void after_fork_child(void)
{
    tt_unlock();
    /* The threads that were inside callbacks do not exist here. */
    atomic_store(&G.inflight, 0);
}

/* ---- without preload (redirect.c) --------------------------------------------- */

/* The shim's own definitions, by hidden aliases: in a dlopen'ed shim the
   exported names resolve to libc's.  An alias is the same function, so the
   attributes of libc's declarations (malloc, nothrow, leaf) hold for it
   too: gcc's warning that the alias lacks them does not apply. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-attributes"
#endif
#define OWN(fn)                                                                        \
    extern __typeof__(fn) own_##fn __attribute__((alias(#fn), visibility("hidden")))
OWN(malloc);
OWN(calloc);
OWN(realloc);
OWN(reallocarray);
OWN(free);
OWN(posix_memalign);
OWN(aligned_alloc);
OWN(memalign);
OWN(valloc);
OWN(pvalloc);
OWN(memcpy);
OWN(memmove);

static const cal_redirect_target redirect_targets[] = {
    {"malloc", (void *)own_malloc},
    {"calloc", (void *)own_calloc},
    {"realloc", (void *)own_realloc},
    {"reallocarray", (void *)own_reallocarray},
    {"free", (void *)own_free},
    {"posix_memalign", (void *)own_posix_memalign},
    {"aligned_alloc", (void *)own_aligned_alloc},
    {"memalign", (void *)own_memalign},
    {"valloc", (void *)own_valloc},
    {"pvalloc", (void *)own_pvalloc},
    {"memcpy", (void *)own_memcpy},
    {"memmove", (void *)own_memmove},
    {"dlopen", (void *)cal_redirect_dlopen},
    {NULL, NULL},
};

__attribute__((constructor)) static void shim_init(void)
{
    if (!R.malloc)
        resolve();
    cal_redirect_init(redirect_targets,
                      (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen"));
    if (!dlsym(RTLD_DEFAULT, "Py_Initialize")) {
        inert = 1;
        return;
    }
    G.have_key = pthread_key_create(&G.exit_key, thread_exit_flush) == 0;
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}
