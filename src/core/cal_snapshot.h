/*
 * cal_snapshot — a memory snapshot: the live sampled allocations of one
 * moment, each with its traceback, and the file they are saved in
 * (docs/FORMAT.md, "Snapshot files").
 *
 * A snapshot is built by interning: strings (file names), frames (file,
 * line), tracebacks (frames, most recent first) and then traces (one
 * sampled allocation each: its domain, the bytes it stands for, the size
 * of the block that was sampled, its traceback).  Equal frames and equal
 * tracebacks are stored once, so a snapshot of a million traces from a
 * few hundred places is small.
 *
 * A trace is an estimate (docs/INTERNALS.md, "Memory snapshots"): `size`
 * is the bytes the sample stands for (its weight), `block_size` the bytes
 * of the one block sampled; size / block_size is the number of blocks it
 * stands for.  Traced exactly (every allocation sampled), size ==
 * block_size.
 *
 * Not thread-safe: one owner builds, writes or reads a snapshot.
 */
#ifndef CAL_SNAPSHOT_H
#define CAL_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "cal_map.h"

#define CAL_SNAPSHOT_NONE UINT32_MAX
#define CAL_SNAPSHOT_VERSION 1

/* Domains: which allocator a trace's block came from. */
#define CAL_SNAPSHOT_DOMAIN_PYTHON 0 /* PyMem / PyObject (tracemalloc's 0) */
#define CAL_SNAPSHOT_DOMAIN_NATIVE 1 /* malloc and friends from native code */

typedef struct cal_snap_frame {
    uint32_t file; /* string index */
    int32_t line;
} cal_snap_frame;

typedef struct cal_snap_traceback {
    uint32_t first;     /* its frame indices: frame_ids[first .. first + nframes) */
    uint32_t nframes;   /* ... most recent first */
    uint32_t total;     /* frames the stack had (>= nframes: some elided) */
    uint32_t root_kept; /* of the nframes, how many at the end are the root
                           end of the stack; the frames elided (total -
                           nframes) were between the two parts */
} cal_snap_traceback;

typedef struct cal_snap_trace {
    uint32_t domain;
    uint32_t traceback;
    int64_t size;       /* bytes the sample stands for */
    int64_t block_size; /* bytes of the block sampled (> 0) */
} cal_snap_trace;

typedef struct cal_snapshot {
    char **strings; /* NUL-terminated UTF-8, owned */
    size_t nstrings, strings_cap;
    cal_map string_index;
    cal_snap_frame *frames;
    size_t nframes, frames_cap;
    cal_map frame_index;
    uint32_t *frame_ids; /* the tracebacks' frames, concatenated */
    size_t nframe_ids, frame_ids_cap;
    cal_snap_traceback *tracebacks;
    size_t ntracebacks, tracebacks_cap;
    cal_map traceback_index;
    cal_snap_trace *traces;
    size_t ntraces, traces_cap;
    /* Everything else, as one JSON object (owned; "{}" when NULL): the
       traceback limit, the process, the time, the sampling mean, the
       exact counters, a user's own attributes. */
    char *meta_json;
} cal_snapshot;

void cal_snapshot_init(cal_snapshot *s);
void cal_snapshot_free(cal_snapshot *s);

/* Intern a string / frame / traceback; its index, or CAL_SNAPSHOT_NONE on
   allocation failure.  `frames` are frame indices, most recent first. */
uint32_t cal_snapshot_string(cal_snapshot *s, const char *text, size_t len);
uint32_t cal_snapshot_frame(cal_snapshot *s, uint32_t file, int32_t line);
uint32_t cal_snapshot_traceback(cal_snapshot *s, const uint32_t *frames,
                                uint32_t nframes, uint32_t total, uint32_t root_kept);

/* Add a trace.  On success return 0; on allocation failure return -1. */
int cal_snapshot_add(cal_snapshot *s, uint32_t domain, uint32_t traceback, int64_t size,
                     int64_t block_size);

/* Replace the meta JSON object with a copy of `json` (len bytes).  0 or -1. */
int cal_snapshot_set_meta(cal_snapshot *s, const char *json, size_t len);

/* Write the snapshot to `path` (cal_buf_write_file: created exclusively,
   only a regular file replaced).  On success return 0; on error return -1
   with errno set. */
int cal_snapshot_write(const cal_snapshot *s, const char *path);

/* The file's bytes, for a caller that writes them itself. 0 or -1. */
struct cal_buf;
int cal_snapshot_encode(const cal_snapshot *s, struct cal_buf *out);

/* Read a snapshot file into `out` (initialised here).  Everything is
   checked: a file that is not a snapshot, of a newer version, truncated or
   inconsistent is refused.  On success return 0; on error return -1 with
   a one-line reason in err (no trailing newline) and `out` empty. */
int cal_snapshot_read(const char *path, cal_snapshot *out, char *err, size_t errlen);
int cal_snapshot_decode(const char *data, size_t len, cal_snapshot *out, char *err,
                        size_t errlen);

/* Is this the start of a snapshot file (its magic)? */
int cal_snapshot_is_snapshot(const char *data, size_t len);

#endif
