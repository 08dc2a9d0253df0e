/*
 * cal_profile — the statistics store: interned strings, per-line,
 * per-function and per-thread time, the run's totals.
 *
 * Every figure is in nanoseconds and split four ways (cal_times).  A line is
 * (file, line number); a function is (file, qualified name, first line).
 * "self" time of a function is time attributed to one of its lines; "total"
 * time is time during which the function was anywhere on the stack (counted
 * once per sample however deep the recursion).
 *
 * Not thread-safe: the owner serialises access (the extension holds the GIL).
 * Allocation failure is reported (-1 / CAL_PROFILE_NONE) and the profile
 * stays consistent; the caller counts the dropped sample.
 */
#ifndef CAL_PROFILE_H
#define CAL_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#define CAL_PROFILE_NONE UINT32_MAX

typedef struct cal_times {
    int64_t python_ns;
    int64_t native_ns;
    int64_t system_ns;
    int64_t waiting_ns;
    int64_t samples;
} cal_times;

typedef struct cal_line_stat {
    uint32_t file; /* string id of the path */
    int32_t line;
    uint32_t func; /* the function the line was last seen in */
    cal_times t;
} cal_line_stat;

typedef struct cal_func_stat {
    uint32_t file;  /* string id of the path */
    uint32_t name;  /* string id of the qualified name */
    int32_t first_line;
    cal_times self;
    cal_times total;
} cal_func_stat;

typedef struct cal_thread_stat {
    uint64_t ident; /* threading.get_ident() */
    int32_t tid;    /* kernel thread id */
    int is_main;
    uint32_t name;  /* string id, or CAL_PROFILE_NONE */
    cal_times t;             /* everything this thread did */
    cal_times unattributed;  /* ... of which no profiled line was on the stack */
} cal_thread_stat;

typedef struct cal_profile cal_profile;

cal_profile *cal_profile_new(void);
void cal_profile_free(cal_profile *p);

/* Intern n bytes of UTF-8; return the string id or CAL_PROFILE_NONE. */
uint32_t cal_profile_string(cal_profile *p, const char *s, size_t n);
const char *cal_profile_string_at(const cal_profile *p, uint32_t id);

/* Find or create a function; return its index or CAL_PROFILE_NONE. */
uint32_t cal_profile_function(cal_profile *p, uint32_t file, uint32_t name,
                              int32_t first_line);

/* Find or create a thread; return its index or CAL_PROFILE_NONE.  A new
   (ident, tid) pair is a new thread even when the ident was seen before. */
uint32_t cal_profile_thread(cal_profile *p, uint64_t ident, int32_t tid, int is_main);
int cal_profile_set_thread_name(cal_profile *p, uint32_t thread, const char *name);

/* Credit `t` to a thread, and to the line (file, line) in function `func`.
   file == CAL_PROFILE_NONE means no profiled line was on the stack.
   On success return 0; on allocation failure return -1. */
int cal_profile_add_sample(cal_profile *p, uint32_t thread, uint32_t file, int32_t line,
                           uint32_t func, const cal_times *t);

/* Credit `t` to the total (inclusive) time of a function. */
void cal_profile_add_func_total(cal_profile *p, uint32_t func, const cal_times *t);

/* Wall-clock bounds of the run, set by the owner. */
void cal_profile_set_wall(cal_profile *p, int64_t wall_ns);
int64_t cal_profile_wall(const cal_profile *p);

/* Read-only views for the writers. */
size_t cal_profile_nlines(const cal_profile *p);
const cal_line_stat *cal_profile_line_at(const cal_profile *p, size_t i);
size_t cal_profile_nfuncs(const cal_profile *p);
const cal_func_stat *cal_profile_func_at(const cal_profile *p, size_t i);
size_t cal_profile_nthreads(const cal_profile *p);
const cal_thread_stat *cal_profile_thread_at(const cal_profile *p, size_t i);

/* Helpers on cal_times. */
void cal_times_add(cal_times *dst, const cal_times *src);
int64_t cal_times_cpu(const cal_times *t);   /* python + native + system */
int64_t cal_times_all(const cal_times *t);   /* cpu + waiting */

#endif
