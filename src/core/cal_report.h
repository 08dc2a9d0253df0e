/*
 * cal_report — turns a cal_profile into the versioned JSON profile.  Plain C,
 * no Python; reads the profiled source files to embed their text (the
 * renderers, cal_view.h, read only the JSON).
 *
 * Output is deterministic: files sorted by path, lines by number, functions
 * by first line and name, threads in the order first seen.
 */
#ifndef CAL_REPORT_H
#define CAL_REPORT_H

#include "cal_buf.h"
#include "cal_profile.h"

#include <stddef.h>
#include <stdint.h>

#define CAL_SCHEMA "calipers/1"

typedef struct cal_meta {
    const char *calipers_version;
    const char *python_version;
    const char *python_executable;
    const char *python_build; /* "default", "free-threaded", or NULL: not written */
    const char *cwd;
    const char *script; /* NULL when run with -m */
    const char *module; /* NULL when run as a script */
    const char *const *argv;
    size_t argc;
    int64_t pid;
    double start_unix; /* seconds since the epoch */
    int64_t interval_ns;
    int profile_all;
    const char *const *profile_only;
    size_t nprofile_only;
    const char *const *profile_exclude;
    size_t nprofile_exclude;
    int cpu_only;
    int lines_off;   /* frames could not be read: nothing is credited to lines */
    int64_t dropped; /* samples lost to allocation failure */
    int64_t
        torn; /* free-threaded: samples dropped, their stack changing under the read */
    const char *const *notes; /* the owner's own notes, appended as they are */
    size_t nnotes;
    /* The heap at exit (calipers run --heap-at-exit): its summary as one
       JSON object, the profile's "heap" (docs/FORMAT.md), built and checked
       by the caller; NULL: no "heap" member. */
    const char *heap_json;
    /* A part, for the main process to merge (cal_merge.c reads no source):
       each file's "source" is null, its file not read. */
    int no_source;
} cal_meta;

/* Why a profile is empty or thin, as sentences that say what to change.
   Each note is appended to `out` followed by '\n'; returns how many.  The
   notes go into the JSON "notes" array and into the summary. */
size_t cal_report_notes(const cal_profile *p, const cal_meta *m, cal_buf *out);

/* Append the JSON profile to `out`. */
void cal_report_json(const cal_profile *p, const cal_meta *m, cal_buf *out);

/* Write `key` and a line's reference, {path, line, function}, or null when
   li is not a line of p. */
void cal_report_json_line_ref(cal_json *j, const char *key, const cal_profile *p,
                              uint32_t li);

#endif
