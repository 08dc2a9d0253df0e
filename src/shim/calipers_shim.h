/*
 * calipers_shim.h — the C API between libcalipers_shim.so (preloaded into the
 * profiled program, or loaded by calipers.start(); no libpython) and the
 * _calipers extension.
 *
 * The shim counts every allocation, free and copy of the process and samples
 * a few of them; the extension attaches to it with a table of callbacks and
 * receives the samples.  The extension finds the table at run time with
 * dlsym(RTLD_DEFAULT, CAL_SHIM_SYMBOL) (or in the handle it loaded), so it
 * works (CPU only) when the shim is absent, and the shim works (forwarding
 * only) when nobody attaches.
 *
 * Callbacks run in the thread that allocated, inside the shim's recursion
 * guard: what they allocate goes straight to the allocator, uncounted.  They
 * must not take the GIL, call Python code or allocate Python objects.
 */
#ifndef CALIPERS_SHIM_H
#define CALIPERS_SHIM_H

#include <stddef.h>
#include <stdint.h>

#define CAL_SHIM_SYMBOL "calipers_shim_api"
#define CAL_SHIM_ABI 7

#define CAL_SHIM_RISING 1
#define CAL_SHIM_NEW_PEAK 2

/* hooks.alloc's `python`: which of Python's allocator domains made it. */
#define CAL_SHIM_NATIVE 0
#define CAL_SHIM_PYMEM 1 /* PyMem_* (buffers) */
#define CAL_SHIM_PYOBJ 2 /* PyObject_* (objects, and a few buffers) */

/* Exact counters since the process started (live bytes and totals are
   usable sizes for malloc'd blocks, requested sizes for Python's allocator,
   whole arenas for pymalloc's small objects). */
typedef struct cal_shim_counters {
    int64_t live_native;  /* bytes allocated and not freed, by native code */
    int64_t live_python;  /* ... by Python's allocator (arenas + large blocks) */
    int64_t peak;         /* highest live_native + live_python */
    int64_t peak_python;  /* live_python at that peak */
    int64_t mark_peak;    /* highest live since the last reset_mark_peak() */
    int64_t alloc_native; /* bytes ever allocated by native code */
    int64_t alloc_python; /* bytes ever allocated through PyMem/PyObject */
    int64_t copied;       /* bytes ever copied by memcpy/memmove */
    int64_t dropped;      /* samples lost (table full, callback failed) */
} cal_shim_counters;

/* What the extension is told.  `python` is CAL_SHIM_PYMEM or
   CAL_SHIM_PYOBJ for an allocation through Python's allocator (PyMem_*,
   PyObject_*: which domain's hook saw it), 0 for native code's malloc.
   `weight` is the number of bytes the sample stands for (cal_bsamp.h). */
typedef struct cal_shim_hooks {
    /* A sampled allocation of `size` bytes at `ptr`.  Returns a nonzero
       cookie to track it until it is freed (handed back to `free`), or 0 not
       to track it. */
    uint64_t (*alloc)(void *ptr, size_t size, int64_t weight, int python);
    /* A tracked allocation was freed (or moved by realloc). */
    void (*free)(void *ptr, uint64_t cookie, int64_t weight);
    /* A sampled memcpy/memmove. */
    void (*copy)(int64_t weight);
    /* The footprint moved by the threshold since the last call; flags:
       CAL_SHIM_RISING when it went up, CAL_SHIM_NEW_PEAK when it is above
       every footprint reported before. */
    void (*footprint)(int64_t live, int64_t live_python, int flags);
} cal_shim_hooks;

/* Layouts identical to CPython's PyMemAllocatorEx and
   PyObjectArenaAllocator, so the shim needs no Python headers. */
typedef struct cal_shim_pymem {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr);
} cal_shim_pymem;

typedef struct cal_shim_arena {
    void *ctx;
    void *(*alloc)(void *ctx, size_t size);
    void (*free)(void *ctx, void *ptr, size_t size);
} cal_shim_arena;

typedef struct cal_shim_config {
    int64_t alloc_mean;      /* mean bytes between allocation samples (0: none) */
    int64_t copy_mean;       /* mean bytes between copy samples (0: none) */
    int64_t threshold;       /* footprint change that calls hooks.footprint */
    int64_t python_baseline; /* pymalloc arena bytes that exist already */
} cal_shim_config;

/* A tracked allocation: its block, its cookie, the bytes it stands for and
   the bytes asked for. */
typedef struct cal_shim_sample {
    const void *ptr;
    uint64_t cookie;
    int64_t weight;
    uint64_t size;
} cal_shim_sample;

typedef struct cal_shim_api {
    int abi; /* CAL_SHIM_ABI */
    /* Start sampling into `hooks` (copied).  Returns 0, or -1 if another
       client is attached. */
    int (*attach)(const cal_shim_hooks *hooks, const cal_shim_config *config);
    /* Stop calling the hooks (samples in flight finish first). */
    void (*detach)(void);
    void (*counters)(cal_shim_counters *out);
    /* The recursion guard of the calling thread: while it is set, this
       thread's allocations are forwarded uncounted (the profiler's own).
       enter returns the previous state, which leave restores. */
    int (*guard_enter)(void);
    void (*guard_leave)(int previous);
    /* Is ptr a tracked (sampled, not yet freed) allocation? */
    int (*tracked)(const void *ptr);
    /* Hooks for PyMem_SetAllocator (ctx: a cal_shim_pymem holding the
       original allocator) and PyObject_SetArenaAllocator (ctx: a
       cal_shim_arena holding the original). */
    void *(*py_malloc)(void *ctx, size_t size);
    void *(*py_calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*py_realloc)(void *ctx, void *ptr, size_t new_size);
    void (*py_free)(void *ctx, void *ptr);
    void *(*arena_alloc)(void *ctx, size_t size);
    void (*arena_free)(void *ctx, void *ptr, size_t size);
    /* In a forked child that profiles afresh (detached): forget every
       tracked allocation (their cookies belong to the parent's profile) and
       start the peak from the current footprint. */
    void (*reset)(void);
    /* Is ptr the start of a tracked allocation?  1 and *out filled, or 0. */
    int (*lookup)(const void *ptr, cal_shim_sample *out);
    /* Copy up to `cap` tracked allocations into `out` (in no particular
       order); returns how many there are (more than cap: call again with
       room for them). */
    size_t (*samples)(cal_shim_sample *out, size_t cap);
    /* Start mark_peak afresh from the current footprint. */
    void (*reset_mark_peak)(void);
    /* While on, the calling thread's allocations and copies are counted
       but never sampled (the profiler building what it hands the program, as
       tracemalloc builds its traces untraced).  Returns the previous
       state, to restore. */
    int (*set_unsampled)(int on);
    /* How to size a block of Python's allocator when malloc does not see
       its memory (the free-threaded build's mimalloc maps its own pages):
       the Python hooks then count each block's usable size, as Python
       bytes, when it is made and freed.  NULL (the default) stops it.
       Set before the hooks are installed. */
    void (*set_py_usable)(size_t (*usable)(const void *ptr));
    /* The Python hooks that do that counting (install these instead of
       py_malloc... when set_py_usable was given a function): the others
       stay as cheap as they were. */
    void *(*py_malloc_sized)(void *ctx, size_t size);
    void *(*py_calloc_sized)(void *ctx, size_t nelem, size_t elsize);
    void *(*py_realloc_sized)(void *ctx, void *ptr, size_t new_size);
    void (*py_free_sized)(void *ctx, void *ptr);
    /* The object domain's hooks (PYMEM_DOMAIN_OBJ): as py_malloc, py_calloc
       and py_realloc (py_free serves both), but their samples are reported
       as CAL_SHIM_PYOBJ. */
    void *(*py_obj_malloc)(void *ctx, size_t size);
    void *(*py_obj_calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*py_obj_realloc)(void *ctx, void *ptr, size_t new_size);
    /* The allocation clock: bytes ever allocated (native + Python), with
       the calling thread's own count exact to the byte (other threads'
       up to their next sample point).  Safe inside a callback. */
    int64_t (*alloc_clock)(void);
    /* Python's allocator is pymalloc, which serves requests up to `limit`
       bytes from its pools without calling malloc(): the hooks then send
       them straight on (a tail call, nothing set around it).  0 (the
       default): every request takes the full path.  Set before the hooks
       are installed. */
    void (*set_small_direct)(size_t limit);
    /* The object domain's hooks that count as the _sized ones do. */
    void *(*py_obj_malloc_sized)(void *ctx, size_t size);
    void *(*py_obj_calloc_sized)(void *ctx, size_t nelem, size_t elsize);
    void *(*py_obj_realloc_sized)(void *ctx, void *ptr, size_t new_size);
    /* Only for a shim loaded with dlopen (calipers.start() without
       preload): point the GOT entries of every loaded object that name
       malloc & co., memcpy, memmove and dlopen at the shim (on), and of
       every object loaded later while on; or put them back (off).
       Returns the number of objects done, or -1 when this platform cannot
       or the process's malloc is not the one the shim forwards to (another
       allocator preloaded);
       `failed` receives the names of the objects that could not be
       (", "-separated, truncated to cap bytes). */
    int (*redirect)(int on, char *failed, size_t cap);
    /* The calling thread's byte sampler for native code's allocations
       (stream CAL_SHIM_NATIVE) or for Python's allocator (any other
       value): out[0] the bytes left before its next sample point, out[1]
       the bytes it has been given since its thread was set up for this
       attachment, out[2] its mean gap (0: not sampling).  For the sampler
       fuzzer (tests/test_sampler_fuzz.py), which predicts from it which
       allocation is sampled; reads thread-local state only. */
    void (*sampler_state)(int stream, int64_t out[3]);
    /* Where pymalloc serves PyMem and PyObject (set_small_direct): the
       allocator to install for PYMEM_DOMAIN_RAW over its original `orig`
       (the original's but for its free; the shim keeps a copy of orig),
       before the other two; then the other two can free with
       py_free_direct, which sets nothing around pymalloc's free (a block
       pymalloc did not make goes on to the raw domain's free, which
       counts it as Python's).  Put the other two back first, then the raw
       domain. */
    void (*raw_hooks)(const cal_shim_pymem *orig, cal_shim_pymem *hooks);
    void (*py_free_direct)(void *ctx, void *ptr);
} cal_shim_api;

#endif
