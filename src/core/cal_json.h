/*
 * cal_json — a streaming JSON writer over cal_buf.  It tracks nesting so
 * commas are placed for the caller, escapes strings per RFC 8259 (invalid
 * UTF-8 becomes U+FFFD) and prints numbers deterministically: durations as
 * fixed-point seconds with microsecond precision, never through %g.
 */
#ifndef CAL_JSON_H
#define CAL_JSON_H

#include "cal_buf.h"

#include <stdint.h>

#define CAL_JSON_MAX_DEPTH 32

typedef struct cal_json {
    cal_buf *out;
    int depth;
    int count[CAL_JSON_MAX_DEPTH]; /* values written at each level */
    int indent;                    /* spaces per level; 0 = compact */
    int after_key;
    int flat_depth; /* values at this depth and deeper go on one line; 0: none */
} cal_json;

void cal_json_init(cal_json *j, cal_buf *out, int indent);
/* The next array or object opened, and all inside it, is written on one
   line (long lists of small items: timelines, source lines).  Ends when
   that container is closed. */
void cal_json_flat(cal_json *j);
void cal_json_object_begin(cal_json *j);
void cal_json_object_end(cal_json *j);
void cal_json_array_begin(cal_json *j);
void cal_json_array_end(cal_json *j);
void cal_json_key(cal_json *j, const char *key);
void cal_json_string(cal_json *j, const char *s);
void cal_json_int(cal_json *j, int64_t v);
void cal_json_bool(cal_json *j, int v);
void cal_json_null(cal_json *j);
/* A duration in nanoseconds, written as seconds: 1500 -> 0.000002 (rounded). */
void cal_json_seconds(cal_json *j, int64_t ns);
/* A number with a fixed count of decimals (0..9). */
void cal_json_fixed(cal_json *j, double v, int decimals);

/* A value already written as JSON (one line), put as it is: the caller
   vouches that it is one valid JSON value. */
void cal_json_raw(cal_json *j, const char *json);

/* Escape `s` as a JSON string body (no quotes) into `out`. */
void cal_json_escape(cal_buf *out, const char *s);

#endif
