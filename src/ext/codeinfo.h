/*
 * codeinfo — what the sampler needs to know about a code object: is it
 * profiled code (the program's own files, or what the filters say), which
 * file and function it is in the profile.  Answers are cached per code object;
 * the cache holds a strong reference to each code object it has seen, so an
 * address can never be reused by a different code object while cached.
 *
 * Protected by the GIL.  Never runs Python code and never allocates Python
 * objects (names are encoded to UTF-8 by hand).
 */
#ifndef CALX_CODEINFO_H
#define CALX_CODEINFO_H

#include <Python.h>

#include "cal_map.h"
#include "cal_profile.h"

typedef struct calx_filter {
    int profile_all;
    char **only; /* substrings or fnmatch patterns */
    size_t nonly;
    char **exclude;
    size_t nexclude;
    char **library; /* path prefixes that are not the program's own code */
    size_t nlibrary;
    char *self_dir; /* calipers' own package directory: never profiled */
    char *cwd;      /* to make relative file names absolute */
} calx_filter;

/* The asyncio event loop's own frames (calx_code.loop). */
enum { CALX_LOOP_NONE, CALX_LOOP_IDLE, CALX_LOOP_STEP };

typedef struct calx_code {
    uint32_t file;  /* string id of the absolute path */
    uint32_t func;  /* function index in the profile */
    uint32_t frame; /* frame index in the profile's stack table (any code,
                       profiled or not), or CAL_STACKS_NONE for calipers'
                       own code, which stacks leave out */
    int profiled;
    int loop; /* CALX_LOOP_IDLE: BaseEventLoop._run_once (the loop
                 between callbacks: waiting, or scheduling);
                 CALX_LOOP_STEP: Handle._run (running a callback,
                 such as a task's step) */
} calx_code;

/* Lines of instructions already looked up, direct-mapped by (entry,
   offset): a deep or recursive stack repeats the same few thousand.  Keyed
   by the entry, not the code's address, and the entry's code is owned, so
   a hit is always for the same code object. */
#define CALX_LINE_CACHE_BITS 12
typedef struct calx_line_slot {
    uint32_t entry; /* index + 1; 0: empty */
    int32_t offset;
    int32_t line;
} calx_line_slot;

typedef struct calx_codes {
    cal_map index; /* code object address -> entry */
    calx_code *entries;
    PyObject **owned; /* strong references, parallel to entries */
    size_t len, cap;
    /* 1 << CALX_LINE_CACHE_BITS slots, mapped at the first lookup: a
       forked child that ends at once touches a page or two of its 48 KiB. */
    calx_line_slot *lines;
} calx_codes;

void calx_codes_init(calx_codes *c);
/* Drops the references; caller holds the GIL. */
void calx_codes_clear(calx_codes *c);

/* The cached answer for `code`, computing it on first sight.  Returns NULL
   on allocation failure. */
const calx_code *calx_codes_get(calx_codes *c, const calx_filter *f, cal_profile *p,
                                PyCodeObject *code);

/* The line of the instruction at byte `offset` in the code of `ci` (an
   entry calx_codes_get returned), looked up once per entry and offset. */
int calx_codes_line(calx_codes *c, const calx_code *ci, int offset);

/* The cached answer for `code`, or NULL if it was never seen.  Never
   dereferences `code`: safe with a pointer that may be stale. */
const calx_code *calx_codes_find(const calx_codes *c, const void *code);

/* Does the filter profile a file with this (absolute, UTF-8) path? */
int calx_filter_match(const calx_filter *f, const char *path);
void calx_filter_free(calx_filter *f);

/* Encode a str object as UTF-8 into dst (cap bytes, NUL-terminated,
   truncated if needed; lone surrogates become U+FFFD).  Returns the length. */
size_t calx_utf8(PyObject *str, char *dst, size_t cap);

#endif
