/*
 * cal_firefox — the stack table, and the timeline of samples when the
 * profile has one, in the Firefox Profiler's processed profile format
 * (profiler.firefox.com: drop the file on it, or "Load a profile from file").
 *
 * THE FORMAT.  Processed profile version 62 (meta.preprocessedProfileVersion;
 * meta.version, the Gecko format's, 34, its value when 62 was current).
 * github.com/firefox-devtools/profiler: src/types/profile.ts (the types are
 * the format's documentation), docs-developer/CHANGELOG-formats.md (60: the
 * stack, frame, func, resource and native symbol tables and the strings are
 * shared by all threads, in profile.shared; 62: a counter has `display`),
 * src/profile-logic/processed-profile-versioning.ts (the upgraders: a
 * profile of any older version is brought to the current one on load).
 * mstange/samply, fxprof-processed-profile/tests/integration_tests/
 * snapshots/ (the .snap files): complete version-62 files.  Tables are
 * columns: one array per field, all of `length` entries.
 *
 * WHAT GOES WHERE.  A func per frame of the table (its qualified name; its
 * file as a source; its first line), and one for CAL_EXPORT_NO_FRAME.  A
 * frame per (func, line executing, category): a stack's category is its
 * innermost frame's, so the innermost frame of a sample says what the
 * sample was.  Categories: Other (the default the format requires), Python,
 * Native, System, Waiting (transparent, as Firefox draws idle time: the
 * thread was off the CPU), each with subcategory Library for frames outside
 * the profiled files, and Memory (Python allocator, native allocation).
 * Calling frames are Python.  One thread per profile thread (pid and tid as
 * strings, each process's main thread marked).
 *
 * With stacks.timeline (docs/FORMAT.md): each CPU sample is a sample at its
 * time (ms since the run's start), its stack the node's, its category its
 * kind, weighing its nanoseconds times the stride `every`, as "tracing-ms":
 * the Firefox call tree adds weights, so its running times are the
 * profile's (exactly when `every` is 1).  Allocation samples go to the
 * thread's nativeAllocations table (bytes times `every`), which the
 * profiler offers as the call tree of "Native Allocations".  Copy samples
 * are left out (no table holds them; the other exports leave them out too).
 *
 * Without it (a profile written before the timeline): each node's four
 * times are four samples weighing them, laid end to end in the order of the
 * tree, starting at 0 (the format's own way of holding traced self times);
 * its allocations are samples at the node's start.  The call tree is right;
 * the track is not a timeline, and an interval marker over each thread says
 * so.  The footprint (summary.memory.timeline) is a Memory counter in both.
 *
 * The timeline is checked here before it is followed (the gate does not
 * know it): a sample's node must be a node of its thread.  Deterministic:
 * the same profile gives the same bytes.
 */
#include "cal_export.h"

#include "cal_json.h"
#include "cal_map.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROCESSED_VERSION 62
#define GECKO_VERSION 34
#define MAX_WHOLE 9007199254740992.0 /* 2^53 */

/* What a sample was: the timeline's kinds, by name. */
enum { K_PYTHON, K_NATIVE, K_SYSTEM, K_WAITING, K_ALLOC_PY, K_ALLOC_NAT, K_COPY, K_N };
#define K_STACKS K_COPY /* the kinds that have stacks here */
static const char *const KIND_NAMES[K_N] = {
    "python", "native", "system", "waiting", "alloc_python", "alloc_native", "copy",
};

/* meta.categories, by index; every one has "Other" first, as required. */
enum { C_OTHER, C_PYTHON, C_NATIVE, C_SYSTEM, C_WAITING, C_MEMORY, C_N };
static const struct {
    const char *name, *color, *subs[3];
} CATEGORIES[C_N] = {
    {"Other", "grey", {"Other", NULL, NULL}},
    {"Python", "yellow", {"Other", "Library", NULL}},
    {"Native", "blue", {"Other", "Library", NULL}},
    {"System", "orange", {"Other", "Library", NULL}},
    {"Waiting", "transparent", {"Other", "Library", NULL}},
    {"Memory", "red", {"Other", "Python allocator", "Native allocation"}},
};
static const int KIND_CATEGORY[K_STACKS] = {C_PYTHON,  C_NATIVE, C_SYSTEM,
                                            C_WAITING, C_MEMORY, C_MEMORY};

#define NOTE_SCHEMA "CalipersNote"

typedef struct ffframe {
    int64_t func, line;
    int cat, sub;
} ffframe;

typedef struct ffstack {
    int64_t frame, prefix; /* prefix -1: a root */
} ffstack;

typedef struct ffsample {
    int64_t t_ns;
    int64_t stack;
    double weight; /* ns, or bytes */
    size_t thread, seq;
    int alloc;
} ffsample;

typedef struct ff {
    const cal_extable *t;
    const char **str; /* the string array */
    size_t nstr, capstr;
    cal_map strmap;
    int64_t *src_str; /* the sources table: each source's file name */
    size_t nsrc, capsrc;
    cal_map srcmap; /* file name's string index -> source */
    int64_t *func_src;
    ffframe *fr;
    size_t nfr, capfr;
    cal_map frmap;
    ffstack *st;
    size_t nst, capst;
    int64_t *memo; /* node * K_STACKS + kind -> stack, or -1 */
    ffsample *smp;
    size_t nsmp, capsmp;
    uint64_t every;    /* the timeline's stride; 0: no timeline */
    int64_t note_name; /* the string of the note markers' name */
    int failed;        /* out of memory */
} ff;

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * size);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* The index of string s in the string array (added once). */
static int64_t intern(ff *x, const char *s)
{
    uint64_t h = cal_hash_bytes(s, strlen(s));
    size_t cur = 0;
    for (uint32_t v; (v = cal_map_find(&x->strmap, h, &cur)) != CAL_MAP_NONE;)
        if (strcmp(x->str[v], s) == 0)
            return v;
    if (grow((void **)&x->str, &x->capstr, x->nstr + 1, sizeof *x->str) != 0 ||
        cal_map_put(&x->strmap, h, (uint32_t)x->nstr) != 0) {
        x->failed = 1;
        return 0;
    }
    x->str[x->nstr] = s;
    return (int64_t)x->nstr++;
}

/* The source whose file name is string `name`. */
static int64_t source(ff *x, int64_t name)
{
    uint32_t v = cal_map_get(&x->srcmap, (uint64_t)name);
    if (v != CAL_MAP_NONE)
        return v;
    if (grow((void **)&x->src_str, &x->capsrc, x->nsrc + 1, sizeof *x->src_str) != 0 ||
        cal_map_put(&x->srcmap, (uint64_t)name, (uint32_t)x->nsrc) != 0) {
        x->failed = 1;
        return 0;
    }
    x->src_str[x->nsrc] = name;
    return (int64_t)x->nsrc++;
}

/* The frame of (func, line, category, subcategory) (added once). */
static int64_t frame(ff *x, int64_t func, int64_t line, int cat, int sub)
{
    uint64_t h =
        cal_hash_u64((uint64_t)func * 0x9e3779b97f4a7c15u ^
                     cal_hash_u64((uint64_t)line) ^ (uint64_t)(cat * 8 + sub) << 56);
    size_t cur = 0;
    for (uint32_t v; (v = cal_map_find(&x->frmap, h, &cur)) != CAL_MAP_NONE;) {
        const ffframe *f = &x->fr[v];
        if (f->func == func && f->line == line && f->cat == cat && f->sub == sub)
            return v;
    }
    if (grow((void **)&x->fr, &x->capfr, x->nfr + 1, sizeof *x->fr) != 0 ||
        cal_map_put(&x->frmap, h, (uint32_t)x->nfr) != 0) {
        x->failed = 1;
        return 0;
    }
    x->fr[x->nfr] = (ffframe){func, line, cat, sub};
    return (int64_t)x->nfr++;
}

static int64_t new_stack(ff *x, int64_t fr, int64_t prefix)
{
    if (grow((void **)&x->st, &x->capst, x->nst + 1, sizeof *x->st) != 0) {
        x->failed = 1;
        return 0;
    }
    x->st[x->nst] = (ffstack){fr, prefix};
    return (int64_t)x->nst++;
}

static int is_library(const cal_extable *t, int64_t f)
{
    return f >= 0 &&
           cal_jv_bool(cal_jv_get(cal_jv_at(t->frames, (size_t)f), "library"), 0);
}

/* The stack of node n whose innermost frame says `kind`.  Every node with
   a frame already has its Python stack (made in node order, so a prefix
   always comes before its stack): the others are made here, on demand. */
static int64_t stack_of(ff *x, size_t n, int kind)
{
    int64_t *m = &x->memo[n * K_STACKS + (size_t)kind];
    if (*m >= 0)
        return *m;
    const cal_exnode *nd = &x->t->nodes[n];
    int64_t func = nd->frame >= 0 ? nd->frame : (int64_t)x->t->nframes;
    int sub = kind == K_ALLOC_PY    ? 1
              : kind == K_ALLOC_NAT ? 2
                                    : is_library(x->t, nd->frame);
    int64_t prefix = -1;
    if (nd->parent >= 0 && x->t->nodes[nd->parent].frame >= 0)
        prefix = x->memo[(size_t)nd->parent * K_STACKS + K_PYTHON];
    int64_t fr =
        frame(x, func, nd->frame >= 0 ? nd->line : 0, KIND_CATEGORY[kind], sub);
    *m = new_stack(x, fr, prefix);
    return *m;
}

static void add_sample(ff *x, size_t thread, int64_t t_ns, size_t node, int kind,
                       double weight)
{
    if (grow((void **)&x->smp, &x->capsmp, x->nsmp + 1, sizeof *x->smp) != 0) {
        x->failed = 1;
        return;
    }
    int alloc = kind == K_ALLOC_PY || kind == K_ALLOC_NAT;
    x->smp[x->nsmp] =
        (ffsample){t_ns, stack_of(x, node, kind), weight, thread, x->nsmp, alloc};
    x->nsmp++;
}

static int sample_cmp(const void *pa, const void *pb)
{
    const ffsample *a = pa, *b = pb;
    if (a->thread != b->thread)
        return a->thread < b->thread ? -1 : 1;
    if (a->alloc != b->alloc)
        return a->alloc - b->alloc;
    if (a->t_ns != b->t_ns)
        return a->t_ns < b->t_ns ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* ---- the samples: from the timeline, or laid end to end -------------------- */

/* v as a whole number in [lo, hi]: 0, or -1. */
static int whole(const cal_jv *v, double lo, double hi, int64_t *out)
{
    if (!cal_jv_is(v, CAL_JNUM))
        return -1;
    double d = cal_jv_num(v, 0);
    if (d != floor(d) || d < lo || d > hi)
        return -1;
    *out = (int64_t)d;
    return 0;
}

/* Read stacks.timeline into samples.  0 when there is none, 1 when read,
   -1 with the reason in err when it does not hold together. */
static int timeline_samples(ff *x, char *err, size_t cap)
{
    const cal_extable *t = x->t;
    const cal_jv *tl = cal_jv_get(cal_jv_get(t->root, "stacks"), "timeline");
    if (!tl)
        return 0;
    int64_t every = 0;
    if (!cal_jv_is(tl, CAL_JOBJ)) {
        snprintf(err, cap, "corrupt profile: stacks.timeline: expected an object");
        return -1;
    }
    if (whole(cal_jv_get(tl, "every"), 1, 0x1p62, &every) != 0) {
        snprintf(err, cap,
                 "corrupt profile: stacks.timeline.every: expected a whole "
                 "number from 1");
        return -1;
    }
    x->every = (uint64_t)every;
    /* Kinds by name (a kind this writer does not know is left out). */
    const cal_jv *kinds = cal_jv_get(tl, "kinds");
    size_t nkinds = cal_jv_len(kinds);
    int *kind_of = calloc(nkinds ? nkinds : 1, sizeof *kind_of);
    if (!kind_of || !cal_jv_is(kinds, CAL_JARR)) {
        free(kind_of);
        snprintf(err, cap,
                 kind_of ? "corrupt profile: stacks.timeline.kinds: expected "
                           "an array"
                         : "out of memory");
        return -1;
    }
    for (size_t k = 0; k < nkinds; k++) {
        const char *name = cal_jv_str(cal_jv_at(kinds, k), "");
        kind_of[k] = -1;
        for (int i = 0; i < K_N; i++)
            if (strcmp(name, KIND_NAMES[i]) == 0)
                kind_of[k] = i;
    }
    /* The columns, by name. */
    static const char *const FIELDS[4] = {"time_ns", "node", "kind", "value"};
    size_t col[4];
    const cal_jv *fields = cal_jv_get(tl, "sample_fields");
    for (int i = 0; i < 4; i++) {
        col[i] = SIZE_MAX;
        for (size_t k = 0; k < cal_jv_len(fields); k++)
            if (strcmp(cal_jv_str(cal_jv_at(fields, k), ""), FIELDS[i]) == 0)
                col[i] = k;
        if (col[i] == SIZE_MAX) {
            free(kind_of);
            snprintf(err, cap,
                     "corrupt profile: stacks.timeline.sample_fields has no \"%s\"",
                     FIELDS[i]);
            return -1;
        }
    }
    const cal_jv *threads = cal_jv_get(tl, "threads");
    if (!cal_jv_is(threads, CAL_JARR)) {
        free(kind_of);
        snprintf(err, cap,
                 "corrupt profile: stacks.timeline.threads: expected an array");
        return -1;
    }
    for (size_t i = 0; i < cal_jv_len(threads); i++) {
        const cal_jv *th = cal_jv_at(threads, i);
        const cal_jv *samples = cal_jv_get(th, "samples");
        int64_t thread;
        if (whole(cal_jv_get(th, "thread"), 0, (double)t->nthreads - 1, &thread) != 0 ||
            !cal_jv_is(samples, CAL_JARR)) {
            free(kind_of);
            snprintf(err, cap,
                     "corrupt profile: stacks.timeline.threads[%zu]: expected "
                     "{\"thread\": a thread's index, \"samples\": [...]}",
                     i);
            return -1;
        }
        for (size_t s = 0; s < cal_jv_len(samples); s++) {
            const cal_jv *v = cal_jv_at(samples, s);
            int64_t time_ns, node, kind, value;
            const char *bad = NULL;
            if (whole(cal_jv_at(v, col[0]), 0, MAX_WHOLE, &time_ns) != 0)
                bad = "time_ns: expected a whole number of nanoseconds from 0";
            else if (whole(cal_jv_at(v, col[1]), 0, (double)t->nnodes - 1, &node) != 0)
                bad = "node: no such node";
            else if (t->nodes[node].thread != thread)
                bad = "node: not a node of its thread";
            else if (whole(cal_jv_at(v, col[2]), 0, (double)nkinds - 1, &kind) != 0)
                bad = "kind: no such kind";
            else if (whole(cal_jv_at(v, col[3]), 0, MAX_WHOLE, &value) != 0)
                bad = "value: expected a whole number from 0";
            if (bad) {
                free(kind_of);
                snprintf(
                    err, cap,
                    "corrupt profile: stacks.timeline.threads[%zu].samples[%zu]: %s", i,
                    s, bad);
                return -1;
            }
            int k = kind_of[kind];
            if (k < 0 || k == K_COPY || value == 0)
                continue;
            add_sample(x, (size_t)thread, time_ns, (size_t)node, k,
                       (double)value * (double)every);
        }
    }
    free(kind_of);
    return 1;
}

static int64_t ns_of(double s) { return (int64_t)llround(s * 1e9); }

/* No timeline: each node's times laid end to end per thread (see the top). */
static void laid_out_samples(ff *x)
{
    const cal_extable *t = x->t;
    const cal_jv *nodes = cal_jv_get(cal_jv_get(t->root, "stacks"), "nodes");
    int64_t *at = calloc(t->nthreads ? t->nthreads : 1, sizeof *at);
    if (!at) {
        x->failed = 1;
        return;
    }
    for (size_t i = 0; i < t->nnodes; i++) {
        const cal_jv *v = cal_jv_at(nodes, i);
        size_t th = (size_t)t->nodes[i].thread;
        int64_t start = at[th];
        for (int k = K_PYTHON; k <= K_WAITING; k++) {
            int64_t ns =
                ns_of(cal_jv_num(cal_jv_at(v, (size_t)(CAL_EXN_PYTHON + k)), 0));
            if (ns > 0) {
                add_sample(x, th, at[th], i, k, (double)ns);
                at[th] += ns;
            }
        }
        for (int k = K_ALLOC_PY; k <= K_ALLOC_NAT; k++) {
            double b =
                cal_jv_num(cal_jv_at(v, (size_t)(k == K_ALLOC_PY ? CAL_EXN_ALLOC_PY
                                                                 : CAL_EXN_ALLOC_NAT)),
                           0);
            if (b > 0)
                add_sample(x, th, start, i, k, b);
        }
    }
    free(at);
}

/* ---- writing ---------------------------------------------------------------- */

/* A time in nanoseconds as milliseconds, to the nanosecond. */
static void ms(cal_json *j, double ns) { cal_json_fixed(j, ns / 1e6, 6); }

static void int_or_null(cal_json *j, int64_t v)
{
    if (v < 0)
        cal_json_null(j);
    else
        cal_json_int(j, v);
}

/* A column of n copies of one literal value. */
static void column_of(cal_json *j, const char *key, size_t n, const char *lit)
{
    cal_json_key(j, key);
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(lit, "null") == 0)
            cal_json_null(j);
        else if (strcmp(lit, "false") == 0)
            cal_json_bool(j, 0);
        else
            cal_json_int(j, strtoll(lit, NULL, 10));
    }
    cal_json_array_end(j);
}

static void empty_table(cal_json *j, const char *key, const char *const *columns)
{
    cal_json_key(j, key);
    cal_json_object_begin(j);
    for (; *columns; columns++) {
        cal_json_key(j, *columns);
        cal_json_flat(j);
        cal_json_array_begin(j);
        cal_json_array_end(j);
    }
    cal_json_key(j, "length");
    cal_json_int(j, 0);
    cal_json_object_end(j);
}

static const char *program_title(const cal_jv *root)
{
    const cal_jv *program = cal_jv_get(root, "program");
    const char *title = cal_jv_getstr(program, "script", NULL);
    return title ? title : cal_jv_getstr(program, "module", "python");
}

/* The index of the main process's main thread (0 when none is marked). */
static size_t program_main_thread(const cal_extable *t)
{
    const cal_jv *threads = cal_jv_get(t->root, "threads");
    for (size_t i = 0; i < t->nthreads; i++) {
        const cal_jv *th = cal_jv_at(threads, i);
        if (cal_jv_getnum(th, "process", 0) == 0 &&
            cal_jv_bool(cal_jv_get(th, "main"), 0))
            return i;
    }
    return 0;
}

static void write_meta(ff *x, cal_json *j, double wall_ms)
{
    const cal_jv *root = x->t->root;
    cal_json_key(j, "meta");
    cal_json_object_begin(j);
    cal_json_key(j, "version");
    cal_json_int(j, GECKO_VERSION);
    cal_json_key(j, "preprocessedProfileVersion");
    cal_json_int(j, PROCESSED_VERSION);
    cal_json_key(j, "product");
    cal_buf b;
    cal_buf_init(&b);
    cal_buf_printf(&b, "calipers: %s", program_title(root));
    cal_buf_add(&b, "", 1);
    cal_json_string(j, cal_buf_ok(&b) ? b.data : "calipers");
    cal_buf_free(&b);
    cal_json_key(j, "importedFrom");
    cal_buf_init(&b);
    cal_buf_printf(&b, "calipers %s", cal_jv_getstr(root, "calipers_version", "?"));
    cal_buf_add(&b, "", 1);
    cal_json_string(j, cal_buf_ok(&b) ? b.data : "calipers");
    cal_buf_free(&b);
    cal_json_key(j, "arguments");
    cal_buf_init(&b);
    const cal_jv *argv = cal_jv_get(cal_jv_get(root, "program"), "argv");
    for (size_t i = 0; i < cal_jv_len(argv); i++)
        cal_buf_printf(&b, "%s%s", i ? " " : "", cal_jv_str(cal_jv_at(argv, i), "?"));
    cal_buf_add(&b, "", 1);
    cal_json_string(j, cal_buf_ok(&b) ? b.data : "");
    cal_buf_free(&b);
    cal_json_key(j, "startTime");
    cal_json_fixed(
        j, cal_jv_getnum(cal_jv_get(root, "program"), "start_time_unix", 0) * 1e3, 3);
    cal_json_key(j, "profilingStartTime");
    cal_json_int(j, 0);
    cal_json_key(j, "profilingEndTime");
    cal_json_fixed(j, wall_ms, 3);
    double interval = cal_jv_getnum(cal_jv_get(root, "config"), "interval_s", 0) * 1e3;
    cal_json_key(j, "interval");
    cal_json_fixed(j, interval > 0 ? interval : 1, 3);
    cal_json_key(j, "processType");
    cal_json_int(j, 0);
    cal_json_key(j, "stackwalk");
    cal_json_int(j, 1);
    cal_json_key(j, "debug");
    cal_json_bool(j, 0);
    cal_json_key(j, "symbolicated");
    cal_json_bool(j, 1);
    cal_json_key(j, "usesOnlyOneStackType");
    cal_json_bool(j, 1);
    cal_json_key(j, "sourceCodeIsNotOnSearchfox");
    cal_json_bool(j, 1);
    cal_json_key(j, "keepProfileThreadOrder");
    cal_json_bool(j, 1);
    /* Every thread that has samples is shown (the profiler would hide a
       thread with few samples next to a busy one, and all past 15; here a
       sample is a stack's whole time, not a tick), the main one selected. */
    cal_json_key(j, "initialVisibleThreads");
    cal_json_flat(j);
    cal_json_array_begin(j);
    size_t main_thread = program_main_thread(x->t);
    for (size_t i = 0, th = 0; th < x->t->nthreads; th++) {
        int any = 0;
        for (; i < x->nsmp && x->smp[i].thread == th; i++)
            any = 1;
        if (any || th == main_thread)
            cal_json_int(j, (int64_t)th);
    }
    cal_json_array_end(j);
    if (x->t->nthreads > 0) {
        cal_json_key(j, "initialSelectedThreads");
        cal_json_flat(j);
        cal_json_array_begin(j);
        cal_json_int(j, (int64_t)main_thread);
        cal_json_array_end(j);
    }
    cal_json_key(j, "sampleUnits");
    cal_json_flat(j);
    cal_json_object_begin(j);
    cal_json_key(j, "time");
    cal_json_string(j, "ms");
    cal_json_key(j, "eventDelay");
    cal_json_string(j, "ms");
    cal_json_key(j, "threadCPUDelta");
    cal_json_string(j, "ns");
    cal_json_object_end(j);
    cal_json_key(j, "categories");
    cal_json_array_begin(j);
    for (int c = 0; c < C_N; c++) {
        cal_json_flat(j);
        cal_json_object_begin(j);
        cal_json_key(j, "name");
        cal_json_string(j, CATEGORIES[c].name);
        cal_json_key(j, "color");
        cal_json_string(j, CATEGORIES[c].color);
        cal_json_key(j, "subcategories");
        cal_json_array_begin(j);
        for (int s = 0; s < 3 && CATEGORIES[c].subs[s]; s++)
            cal_json_string(j, CATEGORIES[c].subs[s]);
        cal_json_array_end(j);
        cal_json_object_end(j);
    }
    cal_json_array_end(j);
    static const char *const EXT[] = {"baseURL", "id", "name", NULL};
    empty_table(j, "extensions", EXT);
    /* The schema of the note markers (see write_thread). */
    cal_json_key(j, "markerSchema");
    cal_json_array_begin(j);
    cal_json_object_begin(j);
    cal_json_key(j, "name");
    cal_json_string(j, NOTE_SCHEMA);
    cal_json_key(j, "display");
    cal_json_flat(j);
    cal_json_array_begin(j);
    cal_json_string(j, "marker-chart");
    cal_json_string(j, "marker-table");
    cal_json_array_end(j);
    cal_json_key(j, "chartLabel");
    cal_json_string(j, "{marker.data.text}");
    cal_json_key(j, "tableLabel");
    cal_json_string(j, "{marker.data.text}");
    cal_json_key(j, "tooltipLabel");
    cal_json_string(j, "{marker.name}");
    cal_json_key(j, "description");
    cal_json_string(j, "A note from calipers on how to read this profile");
    cal_json_key(j, "fields");
    cal_json_array_begin(j);
    cal_json_flat(j);
    cal_json_object_begin(j);
    cal_json_key(j, "key");
    cal_json_string(j, "text");
    cal_json_key(j, "label");
    cal_json_string(j, "Note");
    cal_json_key(j, "format");
    cal_json_string(j, "string");
    cal_json_object_end(j);
    cal_json_array_end(j);
    cal_json_object_end(j);
    cal_json_array_end(j);
    cal_json_object_end(j);
}

/* The footprint timeline (summary.memory.timeline, [seconds, bytes]) as a
   Memory counter: the format's memory counts are changes, added up. */
static void write_counters(ff *x, cal_json *j)
{
    const cal_extable *t = x->t;
    const cal_jv *points =
        cal_jv_get(cal_jv_get(cal_jv_get(t->root, "summary"), "memory"), "timeline");
    size_t n = cal_jv_len(points);
    cal_json_key(j, "counters");
    cal_json_array_begin(j);
    if (n > 0 && t->nthreads > 0) {
        size_t main_thread = program_main_thread(t);
        cal_json_object_begin(j);
        cal_json_key(j, "name");
        cal_json_string(j, "footprint");
        cal_json_key(j, "category");
        cal_json_string(j, "Memory");
        cal_json_key(j, "description");
        cal_json_string(j,
                        "The program's footprint: the bytes it had allocated and not "
                        "freed (not RSS), all its processes together");
        cal_json_key(j, "pid");
        char pid[32];
        snprintf(pid, sizeof pid, "%lld", (long long)t->thread_pid[main_thread]);
        cal_json_string(j, pid);
        cal_json_key(j, "mainThreadIndex");
        cal_json_int(j, (int64_t)main_thread);
        cal_json_key(j, "display");
        cal_json_flat(j);
        cal_json_object_begin(j);
        cal_json_key(j, "graphType");
        cal_json_string(j, "line-accumulated");
        cal_json_key(j, "unit");
        cal_json_string(j, "bytes");
        cal_json_key(j, "color");
        cal_json_string(j, "orange");
        cal_json_key(j, "markerSchemaLocation");
        cal_json_string(j, "timeline-memory");
        cal_json_key(j, "sortWeight");
        cal_json_int(j, 20);
        cal_json_key(j, "label");
        cal_json_string(j, "Memory");
        cal_json_object_end(j);
        cal_json_key(j, "samples");
        cal_json_object_begin(j);
        cal_json_key(j, "time");
        cal_json_flat(j);
        cal_json_array_begin(j);
        for (size_t i = 0; i < n; i++)
            cal_json_fixed(j, cal_jv_num(cal_jv_at(cal_jv_at(points, i), 0), 0) * 1e3,
                           3);
        cal_json_array_end(j);
        cal_json_key(j, "count");
        cal_json_flat(j);
        cal_json_array_begin(j);
        double before = 0;
        for (size_t i = 0; i < n; i++) {
            double now = cal_jv_num(cal_jv_at(cal_jv_at(points, i), 1), 0);
            cal_json_fixed(j, now - before, 0);
            before = now;
        }
        cal_json_array_end(j);
        cal_json_key(j, "length");
        cal_json_int(j, (int64_t)n);
        cal_json_object_end(j);
        cal_json_object_end(j);
    }
    cal_json_array_end(j);
}

static void write_shared(ff *x, cal_json *j)
{
    cal_json_key(j, "shared");
    cal_json_object_begin(j);
    cal_json_key(j, "stackTable");
    cal_json_object_begin(j);
    cal_json_key(j, "frame");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = 0; i < x->nst; i++)
        cal_json_int(j, x->st[i].frame);
    cal_json_array_end(j);
    cal_json_key(j, "prefix");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = 0; i < x->nst; i++)
        int_or_null(j, x->st[i].prefix);
    cal_json_array_end(j);
    cal_json_key(j, "length");
    cal_json_int(j, (int64_t)x->nst);
    cal_json_object_end(j);

    cal_json_key(j, "frameTable");
    cal_json_object_begin(j);
    column_of(j, "address", x->nfr, "-1");
    column_of(j, "inlineDepth", x->nfr, "0");
    cal_json_key(j, "category");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = 0; i < x->nfr; i++)
        cal_json_int(j, x->fr[i].cat);
    cal_json_array_end(j);
    cal_json_key(j, "subcategory");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = 0; i < x->nfr; i++)
        cal_json_int(j, x->fr[i].sub);
    cal_json_array_end(j);
    cal_json_key(j, "func");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = 0; i < x->nfr; i++)
        cal_json_int(j, x->fr[i].func);
    cal_json_array_end(j);
    column_of(j, "nativeSymbol", x->nfr, "null");
    column_of(j, "innerWindowID", x->nfr, "0");
    cal_json_key(j, "line");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = 0; i < x->nfr; i++)
        int_or_null(j, x->fr[i].line > 0 ? x->fr[i].line : -1);
    cal_json_array_end(j);
    column_of(j, "column", x->nfr, "null");
    cal_json_key(j, "length");
    cal_json_int(j, (int64_t)x->nfr);
    cal_json_object_end(j);

    const cal_extable *t = x->t;
    size_t nfunc = t->nframes + 1;
    cal_json_key(j, "funcTable");
    cal_json_object_begin(j);
    cal_json_key(j, "name");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t f = 0; f < nfunc; f++)
        cal_json_int(j, intern(x, f < t->nframes ? cal_extable_frame_name(t, f)
                                                 : CAL_EXPORT_NO_FRAME));
    cal_json_array_end(j);
    column_of(j, "isJS", nfunc, "false");
    column_of(j, "relevantForJS", nfunc, "false");
    column_of(j, "resource", nfunc, "-1");
    cal_json_key(j, "source");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t f = 0; f < nfunc; f++)
        int_or_null(j, f < t->nframes ? x->func_src[f] : -1);
    cal_json_array_end(j);
    cal_json_key(j, "lineNumber");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t f = 0; f < nfunc; f++) {
        int64_t line = f < t->nframes ? cal_extable_frame_line(t, f) : 0;
        int_or_null(j, line > 0 ? line : -1);
    }
    cal_json_array_end(j);
    column_of(j, "columnNumber", nfunc, "null");
    cal_json_key(j, "length");
    cal_json_int(j, (int64_t)nfunc);
    cal_json_object_end(j);

    static const char *const RESOURCES[] = {"lib", "name", "host", "type", NULL};
    empty_table(j, "resourceTable", RESOURCES);
    static const char *const SYMBOLS[] = {"libIndex", "address", "name", "functionSize",
                                          NULL};
    empty_table(j, "nativeSymbols", SYMBOLS);

    cal_json_key(j, "sources");
    cal_json_object_begin(j);
    column_of(j, "id", x->nsrc, "null");
    cal_json_key(j, "filename");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = 0; i < x->nsrc; i++)
        cal_json_int(j, x->src_str[i]);
    cal_json_array_end(j);
    column_of(j, "startLine", x->nsrc, "1");
    column_of(j, "startColumn", x->nsrc, "1");
    column_of(j, "sourceMapURL", x->nsrc, "null");
    cal_json_key(j, "length");
    cal_json_int(j, (int64_t)x->nsrc);
    cal_json_object_end(j);

    /* Last: the names above were interned as they were written. */
    cal_json_key(j, "stringArray");
    cal_json_array_begin(j);
    for (size_t i = 0; i < x->nstr; i++)
        cal_json_string(j, x->str[i]);
    cal_json_array_end(j);
    cal_json_object_end(j);
}

/* A samples-like table of samples [from, to) of one thread. */
static void write_samples(cal_json *j, const ff *x, size_t from, size_t to, int alloc)
{
    cal_json_object_begin(j);
    cal_json_key(j, "time");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = from; i < to; i++)
        ms(j, (double)x->smp[i].t_ns);
    cal_json_array_end(j);
    cal_json_key(j, "stack");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = from; i < to; i++)
        cal_json_int(j, x->smp[i].stack);
    cal_json_array_end(j);
    cal_json_key(j, "weight");
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (size_t i = from; i < to; i++) {
        if (alloc)
            cal_json_fixed(j, x->smp[i].weight, 0);
        else
            ms(j, x->smp[i].weight);
    }
    cal_json_array_end(j);
    cal_json_key(j, "weightType");
    cal_json_string(j, alloc ? "bytes" : "tracing-ms");
    cal_json_key(j, "length");
    cal_json_int(j, (int64_t)(to - from));
    cal_json_object_end(j);
}

/* One thread: its process's figures, its samples [from, mid) and its
   allocations [mid, to), and a note when the track is not a timeline. */
static void write_thread(ff *x, cal_json *j, size_t th, size_t from, size_t mid,
                         size_t to)
{
    const cal_extable *t = x->t;
    const cal_jv *thread = cal_jv_at(cal_jv_get(t->root, "threads"), th);
    const cal_jv *proc = cal_jv_at(cal_jv_get(t->root, "processes"),
                                   (size_t)cal_jv_getnum(thread, "process", 0));
    double start_ms = cal_jv_getnum(proc, "start_s", 0) * 1e3;
    double end_ms =
        proc ? start_ms + cal_jv_getnum(proc, "wall_s", 0) * 1e3
             : cal_jv_getnum(cal_jv_get(t->root, "summary"), "wall_s", 0) * 1e3;
    char num[32];
    cal_json_object_begin(j);
    cal_json_key(j, "name");
    const char *name = cal_jv_getstr(thread, "name", NULL);
    if (name) {
        cal_json_string(j, name);
    } else {
        snprintf(num, sizeof num, "thread %lld",
                 (long long)cal_jv_getnum(thread, "tid", 0));
        cal_json_string(j, num);
    }
    cal_json_key(j, "isMainThread");
    cal_json_bool(j, cal_jv_bool(cal_jv_get(thread, "main"), 0));
    cal_json_key(j, "processType");
    cal_json_string(j, "default");
    cal_json_key(j, "processName");
    cal_buf b;
    cal_buf_init(&b);
    const cal_jv *argv =
        cal_jv_get(proc ? proc : cal_jv_get(t->root, "program"), "argv");
    for (size_t i = 0; i < cal_jv_len(argv); i++)
        cal_buf_printf(&b, "%s%s", i ? " " : "", cal_jv_str(cal_jv_at(argv, i), "?"));
    cal_buf_add(&b, "", 1);
    cal_json_string(j, cal_buf_ok(&b) && b.data[0] ? b.data : "python");
    cal_buf_free(&b);
    cal_json_key(j, "pid");
    snprintf(num, sizeof num, "%lld", (long long)t->thread_pid[th]);
    cal_json_string(j, num);
    cal_json_key(j, "tid");
    snprintf(num, sizeof num, "%lld", (long long)cal_jv_getnum(thread, "tid", 0));
    cal_json_string(j, num);
    cal_json_key(j, "processStartupTime");
    cal_json_fixed(j, start_ms, 3);
    cal_json_key(j, "processShutdownTime");
    cal_json_fixed(j, end_ms, 3);
    cal_json_key(j, "registerTime");
    cal_json_fixed(j, start_ms, 3);
    cal_json_key(j, "unregisterTime");
    cal_json_null(j);
    cal_json_key(j, "pausedRanges");
    cal_json_array_begin(j);
    cal_json_array_end(j);
    cal_json_key(j, "samples");
    write_samples(j, x, from, mid, 0);
    if (to > mid) {
        cal_json_key(j, "nativeAllocations");
        write_samples(j, x, mid, to, 1);
    }
    /* The note: no timeline (the samples laid end to end), or a thinned one. */
    char text[200] = "";
    if (!x->every)
        snprintf(text, sizeof text,
                 "No timeline in this profile: each stack's times are laid end to end "
                 "(the call tree is right; the track is not a timeline)");
    else if (x->every > 1)
        snprintf(text, sizeof text,
                 "Every %llu-th sample kept: each weighs as %llu samples",
                 (unsigned long long)x->every, (unsigned long long)x->every);
    int note = text[0] && to > from;
    double last = 0;
    for (size_t i = from; i < mid; i++)
        last = fmax(last, (double)x->smp[i].t_ns + (x->every ? 0 : x->smp[i].weight));
    cal_json_key(j, "markers");
    cal_json_object_begin(j);
    cal_json_key(j, "data");
    cal_json_array_begin(j);
    if (note) {
        cal_json_flat(j);
        cal_json_object_begin(j);
        cal_json_key(j, "type");
        cal_json_string(j, NOTE_SCHEMA);
        cal_json_key(j, "text");
        cal_json_string(j, text);
        cal_json_object_end(j);
    }
    cal_json_array_end(j);
    cal_json_key(j, "name");
    cal_json_flat(j);
    cal_json_array_begin(j);
    if (note)
        cal_json_int(j, x->note_name);
    cal_json_array_end(j);
    cal_json_key(j, "startTime");
    cal_json_flat(j);
    cal_json_array_begin(j);
    if (note)
        cal_json_int(j, 0);
    cal_json_array_end(j);
    cal_json_key(j, "endTime");
    cal_json_flat(j);
    cal_json_array_begin(j);
    if (note)
        ms(j, last);
    cal_json_array_end(j);
    column_of(j, "phase", (size_t)note, "1");
    column_of(j, "category", (size_t)note, "0");
    cal_json_key(j, "length");
    cal_json_int(j, note);
    cal_json_object_end(j);
    cal_json_object_end(j);
}

static void ff_free(ff *x)
{
    free(x->str);
    cal_map_clear(&x->strmap);
    free(x->src_str);
    cal_map_clear(&x->srcmap);
    free(x->func_src);
    free(x->fr);
    cal_map_clear(&x->frmap);
    free(x->st);
    free(x->memo);
    free(x->smp);
}

int cal_firefox_write(const cal_extable *t, cal_buf *out, char *err, size_t cap)
{
    ff x;
    memset(&x, 0, sizeof x);
    x.t = t;
    cal_map_init(&x.strmap);
    cal_map_init(&x.srcmap);
    cal_map_init(&x.frmap);
    x.func_src = calloc(t->nframes ? t->nframes : 1, sizeof *x.func_src);
    x.memo = malloc((t->nnodes ? t->nnodes : 1) * K_STACKS * sizeof *x.memo);
    if (!x.func_src || !x.memo) {
        ff_free(&x);
        snprintf(err, cap, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < t->nnodes * K_STACKS; i++)
        x.memo[i] = -1;
    /* The names first, in the order of the functions; then their files. */
    for (size_t f = 0; f < t->nframes; f++)
        intern(&x, cal_extable_frame_name(t, f));
    intern(&x, CAL_EXPORT_NO_FRAME);
    for (size_t f = 0; f < t->nframes; f++)
        x.func_src[f] = source(&x, intern(&x, cal_extable_frame_file(t, f)));
    /* Every node's Python stack, in node order: a parent's comes first. */
    for (size_t i = 0; i < t->nnodes; i++)
        if (t->nodes[i].frame >= 0)
            stack_of(&x, i, K_PYTHON);
    int rc = timeline_samples(&x, err, cap);
    if (rc < 0) {
        ff_free(&x);
        return -1;
    }
    if (rc == 0)
        laid_out_samples(&x);
    /* Interned before the string array is written (with the tables, before
       the threads that use it). */
    x.note_name = intern(&x, x.every ? "Thinned timeline" : "No timeline");
    if (x.nsmp > 1)
        qsort(x.smp, x.nsmp, sizeof *x.smp, sample_cmp);
    if (x.failed) {
        ff_free(&x);
        snprintf(err, cap, "out of memory");
        return -1;
    }

    double wall_ms = cal_jv_getnum(cal_jv_get(t->root, "summary"), "wall_s", 0) * 1e3;
    cal_json j;
    cal_json_init(&j, out, 1);
    cal_json_object_begin(&j);
    write_meta(&x, &j, wall_ms);
    cal_json_key(&j, "libs");
    cal_json_array_begin(&j);
    cal_json_array_end(&j);
    cal_json_key(&j, "pages");
    cal_json_array_begin(&j);
    cal_json_array_end(&j);
    cal_json_key(&j, "profilerOverhead");
    cal_json_array_begin(&j);
    cal_json_array_end(&j);
    write_counters(&x, &j);
    write_shared(&x, &j);
    cal_json_key(&j, "threads");
    cal_json_array_begin(&j);
    size_t i = 0;
    for (size_t th = 0; th < t->nthreads; th++) {
        size_t from = i;
        while (i < x.nsmp && x.smp[i].thread == th && !x.smp[i].alloc)
            i++;
        size_t mid = i;
        while (i < x.nsmp && x.smp[i].thread == th)
            i++;
        write_thread(&x, &j, th, from, mid, i);
    }
    cal_json_array_end(&j);
    cal_json_object_end(&j);
    cal_buf_add(out, "\n", 1);
    int failed = x.failed;
    ff_free(&x);
    if (failed) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    return 0;
}
