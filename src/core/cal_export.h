/*
 * cal_export — the profile's stack table (docs/FORMAT.md, "stacks") written
 * in the formats other tools read, from a parsed profile that has passed
 * cal_view_check, like the report renderers:
 *
 *   cal_export.c      the entry point, the formats' names, and the reading
 *                     of the stack table that the writers share (its
 *                     indices checked, each node's thread and process, the
 *                     display names of frames and threads);
 *   cal_pprof.c       pprof's perftools.profiles.Profile (protobuf, not
 *                     gzipped: the caller compresses it);
 *   cal_speedscope.c  speedscope's JSON file format;
 *   cal_collapsed.c   collapsed ("folded") stacks, one line per stack, as
 *                     flamegraph.pl and inferno read them;
 *   cal_firefox.c     the Firefox Profiler's processed profile format, with
 *                     the samples in time when the profile has a timeline
 *                     of them (stacks.timeline).
 *
 * Deterministic: the same profile gives the same bytes.  Pure functions of
 * their input; no global state.
 */
#ifndef CAL_EXPORT_H
#define CAL_EXPORT_H

#include "cal_buf.h"
#include "cal_jsonr.h"

#include <stddef.h>
#include <stdint.h>

typedef enum cal_export_format {
    CAL_EXPORT_PPROF,           /* protobuf bytes (gzip them for a .pb.gz) */
    CAL_EXPORT_SPEEDSCOPE,      /* JSON */
    CAL_EXPORT_COLLAPSED,       /* time, integer microseconds */
    CAL_EXPORT_COLLAPSED_ALLOC, /* bytes allocated */
    CAL_EXPORT_FIREFOX,         /* JSON */
    CAL_EXPORT_NFORMATS
} cal_export_format;

/* The format called `name` ("pprof", "speedscope", "collapsed",
   "collapsed-alloc", "firefox"), or -1. */
int cal_export_format_named(const char *name);
/* The name of format `f` (a cal_export_format). */
const char *cal_export_format_name(int f);

/* Append the export of `root` (a profile checked by cal_view_check) in
   format `f` to out.  On success return 0 (check cal_buf_ok(out) for
   memory); on error return -1 with a one-line reason in err: the profile
   has no stack table (written before calipers 0.2), or its table does not
   hold together (a node whose parent, frame or thread is out of range; for
   "firefox", a timeline sample whose node is not of its thread, ...). */
int cal_export(const cal_jv *root, int f, cal_buf *out, char *err, size_t cap);

/* ---- the stack table, read (for the writers) ----------------------------- */

/* The node columns the writers read, in docs/FORMAT.md's order. */
enum {
    CAL_EXN_PARENT,
    CAL_EXN_FRAME,
    CAL_EXN_LINE,
    CAL_EXN_THREAD,
    CAL_EXN_PYTHON,
    CAL_EXN_NATIVE,
    CAL_EXN_SYSTEM,
    CAL_EXN_WAITING,
    CAL_EXN_SAMPLES,
    CAL_EXN_ALLOC_PY,
    CAL_EXN_ALLOC_NAT,
    CAL_EXN_COPIED,
    CAL_EXN_ALLOC_SAMPLES,
    CAL_EXN_NFIELDS
};

typedef struct cal_exnode {
    int64_t parent; /* -1 for a thread's root */
    int64_t frame;  /* -1 for a thread's root */
    int64_t line;
    int64_t thread;
    int64_t cpu_ns, wall_ns; /* self: python+native+system, and + waiting */
    int64_t samples;
    int64_t alloc_bytes; /* self: Python + native */
    int64_t alloc_samples;
} cal_exnode;

typedef struct cal_extable {
    const cal_jv *root;   /* the profile */
    const cal_jv *frames; /* stacks.frames */
    size_t nframes;
    cal_exnode *nodes;
    size_t nnodes;
    size_t nthreads;
    int64_t *thread_pid; /* per thread: its process's pid */
    /* Per thread, its display name (malloc'd): "MainThread (pid 4080)", or
       "thread <tid> (pid 4080)" for a thread without a name. */
    char **thread_names;
} cal_extable;

/* The name of the frame that stands for a thread's root self time: what
   a thread did with no Python frame on its stack (a C thread between its
   calls into Python, a native thread). */
#define CAL_EXPORT_NO_FRAME "(no Python frame)"

/* Frame i's qualified name, file and first line. */
const char *cal_extable_frame_name(const cal_extable *t, size_t i);
const char *cal_extable_frame_file(const cal_extable *t, size_t i);
int64_t cal_extable_frame_line(const cal_extable *t, size_t i);

/* The writers, each with a checked table. */
void cal_pprof_write(const cal_extable *t, cal_buf *out);
void cal_speedscope_write(const cal_extable *t, cal_buf *out);
void cal_collapsed_write(const cal_extable *t, int alloc, cal_buf *out);
/* The Firefox writer also reads the timeline (stacks.timeline), which the
   gate does not check: 0, or -1 with one line in err when it does not hold
   together or memory ran out. */
int cal_firefox_write(const cal_extable *t, cal_buf *out, char *err, size_t cap);

/* ---- protobuf wire encoding (cal_pprof.c; exposed for its unit tests) ----
   https://protobuf.dev/programming-guides/encoding/ */

/* A base-128 varint: 7 bits a byte, least significant first, the high bit
   set on every byte but the last.  Negative int64 values take 10 bytes. */
void cal_pb_varint(cal_buf *b, uint64_t v);
/* A field's key: (field << 3) | wire type (0 varint, 2 length-delimited). */
void cal_pb_key(cal_buf *b, uint32_t field, uint32_t wire);
/* A varint field (written even when 0). */
void cal_pb_uint(cal_buf *b, uint32_t field, uint64_t v);
/* A length-delimited field: key, length as a varint, the bytes. */
void cal_pb_bytes(cal_buf *b, uint32_t field, const void *data, size_t n);

#endif
