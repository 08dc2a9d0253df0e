/*
 * cal_view — the check every profile passes before it is rendered or
 * merged (see cal_view.h): the schema's name, then the shape of the whole
 * document, member by member, against the description below.
 *
 * WHY.  A profile is a file the user names: it may have been edited, cut
 * short or made by hand.  The C renderers read it through accessors that
 * answer a default for a missing or mistyped value, so they never crash;
 * but the HTML viewer's script runs in a browser on the same document, and
 * a string where it reads a number, or null where it reads an object,
 * throws there and leaves a blank page after "HTML report written".  So
 * the gate is here, in C, before either renderer runs: a document whose
 * members have the wrong type is refused with one line that names the
 * member ("files[0].lines[3].line: expected a whole number, not a
 * string").
 *
 * WHAT IS CHECKED.  The types of every member the renderers or the page's
 * script read (docs/FORMAT.md, and the JSON Schema shipped in the package,
 * which this follows); numbers are also kept within ranges that no real
 * profile leaves and inside which the renderers' arithmetic is exact and
 * their casts defined (a line number fits an int, bytes are within
 * +-2^53, an index is not negative, a duration at most 10^9 s).  Members
 * are required as the schema requires them, except those added after the
 * first readers of calipers/1 (the processes, a thread's process, the GPU
 * records, the collector, the allocated types, the heap at exit), which
 * older profiles lack.  Members not described here are
 * ignored: a newer calipers/1 may add some.  Duplicate member names and NUL
 * in member names were already refused by the parser (cal_jsonr.c), so C
 * and a browser read the same member.
 */
#include "cal_view.h"

#include "cal_timeline.h"
#include "cal_utf8.h"

#include <stdio.h>
#include <string.h>

/* ---- ranges ------------------------------------------------------------- */

#define MAX_SECONDS 1e9                /* 31 years of one record's time */
#define MAX_BYTES 9007199254740992.0   /* 2^53: exact in a double, and in JS */
#define MAX_LINE 2147483647.0          /* an int */
#define MAX_INDEX 4294967295.0         /* an index into "processes" */
#define MAX_IDENT 0x1.fffffffffffffp63 /* the largest double below 2^64 */
#define MAX_UNIX 4e9                   /* the year 2096: a start time */
#define MAX_RATE 1e18                  /* bytes per second */

/* ---- leaves -------------------------------------------------------------- */

static const cal_jshape STR = {.types = CAL_JT_STR};
static const cal_jshape STR_OR_NULL = {.types = CAL_JT_STR | CAL_JT_NULL};
static const cal_jshape BOOLEAN = {.types = CAL_JT_BOOL};
static const cal_jshape SECONDS = {.types = CAL_JT_NUM, .min = 0, .max = MAX_SECONDS};
static const cal_jshape SECONDS_OR_NULL = {.types = CAL_JT_NUM | CAL_JT_NULL,
                                           .max = MAX_SECONDS};
static const cal_jshape COUNT = {.types = CAL_JT_NUM, .whole = 1, .max = MAX_BYTES};
/* Bytes may be below zero: a forked child's figures leave out what it
   inherited, so its profile (merged by the main process) can hold a
   footprint that fell below where it began. */
static const cal_jshape BYTES = {
    .types = CAL_JT_NUM, .whole = 1, .min = -MAX_BYTES, .max = MAX_BYTES};
static const cal_jshape BYTES_OR_NULL = {
    .types = CAL_JT_NUM | CAL_JT_NULL, .whole = 1, .min = -MAX_BYTES, .max = MAX_BYTES};
static const cal_jshape LINE_NO = {
    .types = CAL_JT_NUM, .whole = 1, .min = -MAX_LINE - 1, .max = MAX_LINE};
static const cal_jshape SOURCE_LINE_NO = {
    .types = CAL_JT_NUM, .whole = 1, .min = 1, .max = MAX_LINE};
static const cal_jshape ID = {.types = CAL_JT_NUM,
                              .whole = 1,
                              .min = -MAX_LINE - 1,
                              .max = MAX_LINE}; /* a pid or tid */
static const cal_jshape INDEX = {.types = CAL_JT_NUM, .whole = 1, .max = MAX_INDEX};
static const cal_jshape IDENT = {.types = CAL_JT_NUM, .whole = 1, .max = MAX_IDENT};
static const cal_jshape SIGNAL_OR_NULL = {
    .types = CAL_JT_NUM | CAL_JT_NULL, .whole = 1, .max = 1024};
static const cal_jshape PERCENT = {.types = CAL_JT_NUM, .max = 100};
static const cal_jshape FRACTION = {.types = CAL_JT_NUM, .max = 1};
static const cal_jshape RATE = {.types = CAL_JT_NUM, .max = MAX_RATE};
static const cal_jshape GROWTH = {
    .types = CAL_JT_NUM, .min = -MAX_RATE, .max = MAX_RATE};
static const cal_jshape UNIX_TIME = {.types = CAL_JT_NUM, .max = MAX_UNIX};
static const cal_jshape STRINGS = {.types = CAL_JT_ARR, .items = &STR};

/* [seconds, bytes] points. */
static const cal_jshape *const POINT_AT[] = {&SECONDS, &BYTES, NULL};
static const cal_jshape POINT = {.types = CAL_JT_ARR, .tuple = POINT_AT};
static const cal_jshape TIMELINE = {.types = CAL_JT_ARR, .items = &POINT};

/* ---- records ------------------------------------------------------------- */

static const cal_jmember TIMES_M[] = {
    {"python_s", 1, &SECONDS},    {"native_s", 1, &SECONDS}, {"system_s", 1, &SECONDS},
    {"waiting_s", 1, &SECONDS},   {"samples", 1, &COUNT},    {"gc_s", 0, &SECONDS},
    {"preempted_s", 0, &SECONDS}, {NULL, 0, NULL},
};
static const cal_jshape TIMES = {.types = CAL_JT_OBJ, .members = TIMES_M};

static const cal_jmember LINE_REF_M[] = {
    {"path", 1, &STR},
    {"line", 1, &LINE_NO},
    {"function", 0, &STR_OR_NULL},
    {NULL, 0, NULL},
};
static const cal_jshape LINE_REF = {.types = CAL_JT_OBJ | CAL_JT_NULL,
                                    .members = LINE_REF_M};

static const cal_jmember GPU_USAGE_M[] = {
    {"utilization_avg_percent", 1, &PERCENT},
    {"memory_avg_bytes", 1, &BYTES},
    {"memory_peak_bytes", 1, &BYTES},
    {"samples", 1, &COUNT},
    {NULL, 0, NULL},
};
static const cal_jshape GPU_USAGE = {.types = CAL_JT_OBJ | CAL_JT_NULL,
                                     .members = GPU_USAGE_M};

static const cal_jmember VOLUME_M[] = {
    {"alloc_python_bytes", 1, &BYTES},
    {"alloc_native_bytes", 1, &BYTES},
    {"alloc_samples", 1, &COUNT},
    {"copied_bytes", 1, &BYTES},
    {NULL, 0, NULL},
};
static const cal_jshape VOLUME = {.types = CAL_JT_OBJ, .members = VOLUME_M};

/* ---- program, config, summary -------------------------------------------- */

static const cal_jmember PROGRAM_M[] = {
    {"argv", 1, &STRINGS},
    {"script", 1, &STR_OR_NULL},
    {"module", 1, &STR_OR_NULL},
    {"cwd", 1, &STR},
    {"pid", 1, &ID},
    {"python_version", 1, &STR},
    {"python_executable", 1, &STR},
    {"python_build", 0, &STR},
    {"start_time_unix", 1, &UNIX_TIME},
    {NULL, 0, NULL},
};
static const cal_jshape PROGRAM = {.types = CAL_JT_OBJ, .members = PROGRAM_M};

static const cal_jshape INTERVAL = {.types = CAL_JT_NUM, .max = 1e6};
static const cal_jmember CONFIG_M[] = {
    {"interval_s", 1, &INTERVAL},
    {"profile_all", 1, &BOOLEAN},
    {"profile_only", 1, &STRINGS},
    {"profile_exclude", 1, &STRINGS},
    {"cpu_only", 1, &BOOLEAN},
    {"memory_interval_bytes", 1, &BYTES},
    {"copy_interval_bytes", 1, &BYTES},
    {"footprint_threshold_bytes", 1, &BYTES},
    {NULL, 0, NULL},
};
static const cal_jshape CONFIG = {.types = CAL_JT_OBJ, .members = CONFIG_M};

static const cal_jmember MEMORY_M[] = {
    {"allocated_python_bytes", 1, &BYTES},
    {"allocated_native_bytes", 1, &BYTES},
    {"copied_bytes", 1, &BYTES},
    {"peak_bytes", 1, &BYTES},
    {"peak_python_fraction", 1, &FRACTION},
    {"peak_line", 1, &LINE_REF},
    {"end_bytes", 1, &BYTES},
    {"end_python_fraction", 1, &FRACTION},
    {"growth_bytes_per_s", 1, &GROWTH},
    {"samples", 1, &COUNT},
    {"dropped_samples", 1, &COUNT},
    {"timeline", 1, &TIMELINE},
    {NULL, 0, NULL},
};
static const cal_jshape MEMORY = {.types = CAL_JT_OBJ | CAL_JT_NULL,
                                  .members = MEMORY_M};

static const cal_jmember DEVICE_M[] = {
    {"index", 1, &INDEX},
    {"uuid", 1, &STR},
    {"name", 1, &STR},
    {"memory_total_bytes", 1, &BYTES},
    {"utilization_avg_percent", 1, &PERCENT},
    {"memory_peak_bytes", 1, &BYTES},
    {NULL, 0, NULL},
};
static const cal_jshape DEVICE = {.types = CAL_JT_OBJ, .members = DEVICE_M};
static const cal_jshape DEVICES = {.types = CAL_JT_ARR, .items = &DEVICE};

/* Only `available` and `reason` in a run whose GPU could not be used. */
static const cal_jmember GPU_M[] = {
    {"available", 1, &BOOLEAN},
    {"reason", 1, &STR_OR_NULL},
    {"stopped_at_s", 0, &SECONDS_OR_NULL},
    {"utilization_source", 0, &STR},
    {"memory_source", 0, &STR},
    {"fallback", 0, &STR_OR_NULL},
    {"utilization_avg_percent", 0, &PERCENT},
    {"memory_avg_bytes", 0, &BYTES},
    {"memory_peak_bytes", 0, &BYTES},
    {"devices", 0, &DEVICES},
    {"timeline", 0, &TIMELINE},
    {"readings", 0, &COUNT},
    {NULL, 0, NULL},
};
static const cal_jshape GPU = {.types = CAL_JT_OBJ | CAL_JT_NULL, .members = GPU_M};

/* [seconds, count] points. */
static const cal_jshape *const COUNT_POINT_AT[] = {&SECONDS, &COUNT, NULL};
static const cal_jshape COUNT_POINT = {.types = CAL_JT_ARR, .tuple = COUNT_POINT_AT};
static const cal_jshape COUNT_TIMELINE = {.types = CAL_JT_ARR, .items = &COUNT_POINT};

static const cal_jmember GC_GENERATION_M[] = {
    {"collections", 1, &COUNT},       {"collected", 1, &COUNT},
    {"uncollectable", 1, &COUNT},     {"threshold", 1, &COUNT},
    {"timeline", 1, &COUNT_TIMELINE}, {NULL, 0, NULL},
};
static const cal_jshape GC_GENERATION = {.types = CAL_JT_OBJ,
                                         .members = GC_GENERATION_M};
static const cal_jshape GC_GENERATIONS = {.types = CAL_JT_ARR, .items = &GC_GENERATION};

static const cal_jshape COUNT_OR_NULL = {
    .types = CAL_JT_NUM | CAL_JT_NULL, .whole = 1, .max = MAX_BYTES};
static const cal_jmember GC_SEEN_ONE_M[] = {
    {"generation", 1, &COUNT_OR_NULL},
    {"start_s", 1, &SECONDS},
    {"ticks", 1, &COUNT},
    {"at_least_s", 1, &SECONDS},
    {"line", 1, &LINE_REF},
    {"collected", 1, &COUNT_OR_NULL},
    {"uncollectable", 1, &COUNT_OR_NULL},
    {NULL, 0, NULL},
};
static const cal_jshape GC_SEEN_ONE = {.types = CAL_JT_OBJ, .members = GC_SEEN_ONE_M};
static const cal_jshape GC_SEEN_LIST = {.types = CAL_JT_ARR, .items = &GC_SEEN_ONE};
static const cal_jmember GC_SEEN_M[] = {
    {"collections", 1, &COUNT}, {"longest", 1, &GC_SEEN_LIST}, {NULL, 0, NULL}};
static const cal_jshape GC_SEEN = {.types = CAL_JT_OBJ, .members = GC_SEEN_M};

static const cal_jmember GC_M[] = {
    {"time_s", 1, &SECONDS},      {"cpu_fraction", 1, &FRACTION},
    {"collections", 1, &COUNT},   {"collected", 1, &COUNT},
    {"uncollectable", 1, &COUNT}, {"generations", 1, &GC_GENERATIONS},
    {"seen", 0, &GC_SEEN},        {NULL, 0, NULL},
};
static const cal_jshape GC = {.types = CAL_JT_OBJ | CAL_JT_NULL, .members = GC_M};

static const cal_jmember SUMMARY_M[] = {
    {"wall_s", 1, &SECONDS},
    {"paused_s", 0, &SECONDS},
    {"attributed_samples", 1, &COUNT},
    {"unattributed", 1, &TIMES},
    {"dropped_samples", 1, &COUNT},
    {"memory", 1, &MEMORY},
    {"gpu", 0, &GPU},
    {"gc", 0, &GC},
    {NULL, 0, NULL},
};
static const cal_jshape SUMMARY = {
    .types = CAL_JT_OBJ, .members = SUMMARY_M, .also = &TIMES};

/* ---- processes and threads ----------------------------------------------- */

static const cal_jmember PROCESS_M[] = {
    {"pid", 1, &ID},
    {"ppid", 1, &ID},
    {"argv", 1, &STRINGS},
    {"forked", 1, &BOOLEAN},
    {"start_s", 1, &SECONDS},
    {"wall_s", 1, &SECONDS},
    {"end", 1, &STR_OR_NULL},
    {"signal", 1, &SIGNAL_OR_NULL},
    {"peak_bytes", 1, &BYTES_OR_NULL},
    {"inherited_bytes", 1, &BYTES},
    {NULL, 0, NULL},
};
static const cal_jshape PROCESS = {
    .types = CAL_JT_OBJ, .members = PROCESS_M, .also = &TIMES};
static const cal_jshape PROCESSES = {.types = CAL_JT_ARR, .items = &PROCESS};

static const cal_jmember THREAD_M[] = {
    {"process", 0, &INDEX},    {"ident", 1, &IDENT},  {"tid", 1, &ID},
    {"name", 1, &STR_OR_NULL}, {"main", 1, &BOOLEAN}, {"unattributed", 1, &TIMES},
    {NULL, 0, NULL},
};
static const cal_jshape THREAD = {
    .types = CAL_JT_OBJ, .members = THREAD_M, .also = &TIMES};
static const cal_jshape THREADS = {.types = CAL_JT_ARR, .items = &THREAD};

/* ---- files ----------------------------------------------------------------- */

static const cal_jmember LINE_MEMORY_M[] = {
    {"alloc_python_bytes", 1, &BYTES},
    {"alloc_native_bytes", 1, &BYTES},
    {"alloc_samples", 1, &COUNT},
    {"copied_bytes", 1, &BYTES},
    {"copy_mb_per_s", 1, &RATE},
    {"live_peak_bytes", 1, &BYTES},
    {"live_end_bytes", 1, &BYTES},
    {"footprint_avg_bytes", 1, &BYTES},
    {"footprint_peak_bytes", 1, &BYTES},
    {"leak_watched", 1, &COUNT},
    {"leak_freed", 1, &COUNT},
    {"timeline", 1, &TIMELINE},
    {NULL, 0, NULL},
};
static const cal_jshape LINE_MEMORY = {.types = CAL_JT_OBJ | CAL_JT_NULL,
                                       .members = LINE_MEMORY_M};

/* [process, seconds, bytes allocated] */
static const cal_jshape *const SHARE_AT[] = {&INDEX, &SECONDS, &BYTES, NULL};
static const cal_jshape SHARE = {.types = CAL_JT_ARR, .tuple = SHARE_AT};
static const cal_jshape SHARES = {.types = CAL_JT_ARR, .items = &SHARE};

static const cal_jmember LINE_M[] = {
    {"line", 1, &LINE_NO},       {"function", 1, &STR_OR_NULL},
    {"memory", 1, &LINE_MEMORY}, {"processes", 0, &SHARES},
    {"gpu", 0, &GPU_USAGE},      {NULL, 0, NULL},
};
static const cal_jshape LINE = {.types = CAL_JT_OBJ, .members = LINE_M, .also = &TIMES};
static const cal_jshape LINES = {.types = CAL_JT_ARR, .items = &LINE};

static const cal_jmember FUNC_MEMORY_M[] = {
    {"self", 1, &VOLUME},
    {"total", 1, &VOLUME},
    {NULL, 0, NULL},
};
static const cal_jshape FUNC_MEMORY = {.types = CAL_JT_OBJ | CAL_JT_NULL,
                                       .members = FUNC_MEMORY_M};

static const cal_jmember FUNCTION_M[] = {
    {"name", 1, &STR},    {"line", 1, &LINE_NO},       {"self", 1, &TIMES},
    {"total", 1, &TIMES}, {"memory", 1, &FUNC_MEMORY}, {"gpu", 0, &GPU_USAGE},
    {NULL, 0, NULL},
};
static const cal_jshape FUNCTION = {.types = CAL_JT_OBJ, .members = FUNCTION_M};
static const cal_jshape FUNCTIONS = {.types = CAL_JT_ARR, .items = &FUNCTION};

/* [line, text] */
static const cal_jshape *const SOURCE_PAIR_AT[] = {&SOURCE_LINE_NO, &STR, NULL};
static const cal_jshape SOURCE_PAIR = {.types = CAL_JT_ARR, .tuple = SOURCE_PAIR_AT};
static const cal_jshape SOURCE = {.types = CAL_JT_ARR | CAL_JT_NULL,
                                  .items = &SOURCE_PAIR};

static const cal_jmember FILE_M[] = {
    {"path", 1, &STR},      {"lines", 1, &LINES}, {"functions", 1, &FUNCTIONS},
    {"source", 0, &SOURCE}, {NULL, 0, NULL},
};
static const cal_jshape FILE_REC = {
    .types = CAL_JT_OBJ, .members = FILE_M, .also = &TIMES};
static const cal_jshape FILES = {.types = CAL_JT_ARR, .items = &FILE_REC};

static const cal_jmember LEAK_M[] = {
    {"path", 1, &STR},
    {"line", 1, &LINE_NO},
    {"function", 1, &STR_OR_NULL},
    {"likelihood", 1, &FRACTION},
    {"rate_bytes_per_s", 1, &RATE},
    {"live_end_bytes", 1, &BYTES},
    {"watched", 1, &COUNT},
    {"freed", 1, &COUNT},
    {"process", 0, &INDEX},
    {NULL, 0, NULL},
};
static const cal_jshape LEAK = {.types = CAL_JT_OBJ, .members = LEAK_M};
static const cal_jshape LEAKS = {.types = CAL_JT_ARR, .items = &LEAK};

/* ---- stacks ------------------------------------------------------------------ */

static const cal_jmember FRAME_M[] = {
    {"file", 1, &STR},        {"name", 1, &STR}, {"first_line", 1, &LINE_NO},
    {"library", 1, &BOOLEAN}, {NULL, 0, NULL},
};
static const cal_jshape FRAME = {.types = CAL_JT_OBJ, .members = FRAME_M};
static const cal_jshape FRAMES = {.types = CAL_JT_ARR, .items = &FRAME};
/* A node's parent or frame: an index, or -1 (a thread's root). */
static const cal_jshape REF = {
    .types = CAL_JT_NUM, .whole = 1, .min = -1, .max = MAX_INDEX};
static const cal_jshape *const NODE_AT[] = {
    &REF,     &REF,   &LINE_NO, &INDEX, &SECONDS, &SECONDS, &SECONDS,
    &SECONDS, &COUNT, &BYTES,   &BYTES, &BYTES,   &COUNT,   NULL};
static const cal_jshape NODE = {.types = CAL_JT_ARR, .tuple = NODE_AT};
static const cal_jshape NODES = {.types = CAL_JT_ARR, .items = &NODE};
static const cal_jmember FOLDED_M[] = {
    {"time_s", 1, &SECONDS},
    {"bytes", 1, &BYTES},
    {"samples", 1, &COUNT},
    {NULL, 0, NULL},
};
static const cal_jshape FOLDED = {.types = CAL_JT_OBJ, .members = FOLDED_M};
/* The timeline: [time_ns, node, kind, value] samples per thread; the
   stride a power of two (at most 2^62, as cal_timeline keeps it). */
static const cal_jshape EVERY = {
    .types = CAL_JT_NUM, .whole = 1, .min = 1, .max = 0x1p62};
static const cal_jshape TL_KIND = {
    .types = CAL_JT_NUM, .whole = 1, .min = 0, .max = CAL_TL_KINDS - 1};
static const cal_jshape TIME_NS = {.types = CAL_JT_NUM, .whole = 1, .max = MAX_BYTES};
static const cal_jshape *const TL_SAMPLE_AT[] = {&TIME_NS, &INDEX, &TL_KIND, &BYTES,
                                                 NULL};
static const cal_jshape TL_SAMPLE = {.types = CAL_JT_ARR, .tuple = TL_SAMPLE_AT};
static const cal_jshape TL_SAMPLES = {.types = CAL_JT_ARR, .items = &TL_SAMPLE};
static const cal_jmember TL_THREAD_M[] = {
    {"thread", 1, &INDEX},
    {"samples", 1, &TL_SAMPLES},
    {NULL, 0, NULL},
};
static const cal_jshape TL_THREAD = {.types = CAL_JT_OBJ, .members = TL_THREAD_M};
static const cal_jshape TL_THREADS = {.types = CAL_JT_ARR, .items = &TL_THREAD};
static const cal_jmember SAMPLE_TIMELINE_M[] = {
    {"every", 1, &EVERY},        {"kinds", 1, &STRINGS}, {"sample_fields", 1, &STRINGS},
    {"threads", 1, &TL_THREADS}, {NULL, 0, NULL},
};
static const cal_jshape SAMPLE_TIMELINE = {.types = CAL_JT_OBJ,
                                           .members = SAMPLE_TIMELINE_M};
static const cal_jmember STACKS_M[] = {
    {"frames", 1, &FRAMES}, {"node_fields", 1, &STRINGS},      {"nodes", 1, &NODES},
    {"folded", 1, &FOLDED}, {"timeline", 0, &SAMPLE_TIMELINE}, {NULL, 0, NULL},
};
static const cal_jshape STACKS = {.types = CAL_JT_OBJ, .members = STACKS_M};

/* ---- allocated types, the heap at exit ------------------------------------- */

static const cal_jshape OBJECTS = {.types = CAL_JT_NUM, .max = MAX_BYTES};
static const cal_jshape FRACTION_OR_NULL = {.types = CAL_JT_NUM | CAL_JT_NULL,
                                            .max = 1};
static const cal_jshape LIFETIME_BYTES = {.types = CAL_JT_NUM | CAL_JT_NULL,
                                          .max = MAX_BYTES};
/* Read as one figure per type and per line: the histograms are not read. */
#define ATYPE_FIGURES                                                                  \
    {"samples", 1, &COUNT}, {"bytes", 1, &BYTES}, {"objects", 1, &OBJECTS},            \
        {"died_young_bytes", 1, &BYTES}, {"survived_bytes", 1, &BYTES},                \
        {"alive_end_bytes", 1, &BYTES}, {"untracked_bytes", 1, &BYTES},                \
        {"survived_fraction", 1, &FRACTION_OR_NULL},                                   \
        {"median_lifetime_bytes", 1, &LIFETIME_BYTES},                                 \
    {                                                                                  \
        "median_lifetime_s", 1, &SECONDS_OR_NULL                                       \
    }
static const cal_jmember ATYPE_M[] = {
    {"type", 1, &STR}, ATYPE_FIGURES, {NULL, 0, NULL}};
static const cal_jshape ATYPE = {.types = CAL_JT_OBJ, .members = ATYPE_M};
static const cal_jshape ATYPES = {.types = CAL_JT_ARR, .items = &ATYPE};
static const cal_jmember ATYPE_OF_LINE_M[] = {
    {"type", 1, &STR},    {"samples", 1, &COUNT},
    {"bytes", 1, &BYTES}, {"survived_bytes", 1, &BYTES},
    {NULL, 0, NULL},
};
static const cal_jshape ATYPE_OF_LINE = {.types = CAL_JT_OBJ,
                                         .members = ATYPE_OF_LINE_M};
static const cal_jshape ATYPES_OF_LINE = {.types = CAL_JT_ARR, .items = &ATYPE_OF_LINE};
static const cal_jmember ATYPE_LINE_M[] = {
    {"file", 1, &STR}, {"line", 1, &LINE_NO}, {"types", 1, &ATYPES_OF_LINE},
    ATYPE_FIGURES,     {NULL, 0, NULL},
};
static const cal_jshape ATYPE_LINE = {.types = CAL_JT_OBJ, .members = ATYPE_LINE_M};
static const cal_jshape ATYPE_LINES = {.types = CAL_JT_ARR, .items = &ATYPE_LINE};
static const cal_jmember ALLOCATED_TYPES_M[] = {
    {"gc_collections", 1, &COUNT},
    {"types", 1, &ATYPES},
    {"lines", 1, &ATYPE_LINES},
    {NULL, 0, NULL},
};
static const cal_jshape ALLOCATED_TYPES = {.types = CAL_JT_OBJ,
                                           .members = ALLOCATED_TYPES_M};

static const cal_jmember HEAP_TYPE_M[] = {
    {"type", 1, &STR},         {"count", 1, &COUNT},
    {"size_bytes", 1, &BYTES}, {"retained_bytes", 1, &BYTES},
    {NULL, 0, NULL},
};
static const cal_jshape HEAP_TYPE = {.types = CAL_JT_OBJ, .members = HEAP_TYPE_M};
static const cal_jshape HEAP_TYPES = {.types = CAL_JT_ARR, .items = &HEAP_TYPE};
static const cal_jmember HEAP_STEP_M[] = {
    {"object", 1, &STR},
    {"edge", 1, &STR_OR_NULL},
    {NULL, 0, NULL},
};
static const cal_jshape HEAP_STEP = {.types = CAL_JT_OBJ, .members = HEAP_STEP_M};
static const cal_jshape HEAP_STEPS = {.types = CAL_JT_ARR, .items = &HEAP_STEP};
static const cal_jmember HEAP_OBJECT_M[] = {
    {"type", 1, &STR}, {"size_bytes", 1, &BYTES}, {"retained_bytes", 1, &BYTES},
    {"path", 1, &STR}, {"steps", 1, &HEAP_STEPS}, {NULL, 0, NULL},
};
static const cal_jshape HEAP_OBJECT = {.types = CAL_JT_OBJ, .members = HEAP_OBJECT_M};
static const cal_jshape HEAP_OBJECTS = {.types = CAL_JT_ARR, .items = &HEAP_OBJECT};
static const cal_jmember HEAP_M[] = {
    {"dump", 1, &STR},
    {"reason", 1, &STR},
    {"objects", 1, &COUNT},
    {"shallow_bytes", 1, &BYTES},
    {"scan_s", 1, &SECONDS},
    {"types", 1, &HEAP_TYPES},
    {"largest", 1, &HEAP_OBJECTS},
    {NULL, 0, NULL},
};
static const cal_jshape HEAP = {.types = CAL_JT_OBJ, .members = HEAP_M};

/* ---- the document ---------------------------------------------------------- */

static const cal_jmember PROFILE_M[] = {
    {"schema", 1, &STR},      {"calipers_version", 1, &STR},
    {"program", 1, &PROGRAM}, {"config", 1, &CONFIG},
    {"summary", 1, &SUMMARY}, {"processes", 0, &PROCESSES},
    {"threads", 1, &THREADS}, {"files", 1, &FILES},
    {"leaks", 1, &LEAKS},     {"notes", 1, &STRINGS},
    {"stacks", 0, &STACKS},   {"allocated_types", 0, &ALLOCATED_TYPES},
    {"heap", 0, &HEAP},       {NULL, 0, NULL},
};
static const cal_jshape PROFILE = {.types = CAL_JT_OBJ, .members = PROFILE_M};

unsigned cal_view_control(const char *s, size_t *len)
{
    const unsigned char *p = (const unsigned char *)s;
    *len = 1;
    if (p[0] == 0)
        return 0;
    if (p[0] < 0x20 || p[0] == 0x7F)
        return p[0];
    /* The text ends with a NUL: 4 bytes may be looked at. */
    uint32_t cp;
    size_t n = cal_utf8_decode(s, 4, &cp);
    if (n != 2 && n != 3)
        return 0; /* ASCII, beyond the BMP (where none of them are), or not UTF-8 */
    if ((cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200B || cp == 0x200E ||
        cp == 0x200F || (cp >= 0x2028 && cp <= 0x202E) ||
        (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF ||
        (cp >= 0xFFF9 && cp <= 0xFFFB)) {
        *len = n;
        return cp;
    }
    return 0;
}

int cal_view_check(const cal_jv *root, char *err, size_t cap)
{
    const char *schema = cal_jv_getstr(root, "schema", NULL);
    if (!schema || strncmp(schema, "calipers/", 9) != 0) {
        snprintf(err, cap, "not a calipers profile (no \"schema\": \"%s\")",
                 CAL_VIEW_SCHEMA);
        return -1;
    }
    if (strcmp(schema, CAL_VIEW_SCHEMA) != 0) {
        char quoted[48];
        cal_jv_quote(quoted, sizeof quoted, schema, 40);
        snprintf(err, cap, "profile schema %s is not the one this calipers reads (%s)",
                 quoted, CAL_VIEW_SCHEMA);
        return -1;
    }
    /* The parts without which there is no report, named as such. */
    static const char *const need[] = {"program", "summary", "files"};
    for (size_t i = 0; i < sizeof need / sizeof *need; i++)
        if (!cal_jv_is(cal_jv_get(root, need[i]), i == 2 ? CAL_JARR : CAL_JOBJ)) {
            snprintf(err, cap, "corrupt profile: \"%s\" is missing or malformed",
                     need[i]);
            return -1;
        }
    char why[224];
    if (cal_jv_check(root, &PROFILE, "", why, sizeof why) != 0) {
        snprintf(err, cap, "corrupt profile: %s", why);
        return -1;
    }
    return 0;
}
