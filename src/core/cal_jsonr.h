/*
 * cal_jsonr — a small JSON reader: parses a whole document (RFC 8259) into a
 * read-only tree owned by a cal_jdoc, for the report renderers, which read
 * saved profiles.  Input is untrusted (a file the user names): every byte is
 * checked, nesting is limited, numbers are parsed without the C locale
 * (a program may have called setlocale), and a parse error says where.
 * Fuzzed by tests/c (mutations of real profiles under ASan/UBSan).
 */
#ifndef CAL_JSONR_H
#define CAL_JSONR_H

#include <stddef.h>

#define CAL_JSONR_MAX_DEPTH 64
/* At most this many values in a document: each takes 32 bytes in the tree
   (and its array's gathering as many again), so a dense document of small
   values ("[0,0,0,...]", 16 times its size in memory) is refused before it
   takes more than about 1 GiB.  A profile holds about one value per 8 bytes
   of JSON: 16 million is 128 MB of one. */
#define CAL_JSONR_MAX_VALUES (1u << 24)

typedef enum cal_jtype {
    CAL_JNULL,
    CAL_JBOOL,
    CAL_JNUM,
    CAL_JSTR,
    CAL_JARR,
    CAL_JOBJ,
} cal_jtype;

typedef struct cal_jv cal_jv;
struct cal_jv {
    cal_jtype type;
    size_t n;        /* array, object: children; string: bytes (it may hold NUL) */
    const char *key; /* the member name, for a child of an object; else NULL */
    union {
        int boolean;
        double num;
        const char *str; /* NUL-terminated UTF-8 */
        cal_jv *kids;    /* n children, in document order */
    } u;
};

typedef struct cal_jdoc {
    struct cal_jblock *blocks; /* the arena that holds every node and string */
    cal_jv *root;
} cal_jdoc;

/* Parse `len` bytes of `text`.  On success return 0 with d->root set; on
   error return -1 and write a one-line reason ("line 3 column 7: expected
   ':'") into err (cap bytes).  Either way release with cal_jdoc_free. */
int cal_jdoc_parse(cal_jdoc *d, const char *text, size_t len, char *err, size_t cap);
void cal_jdoc_free(cal_jdoc *d);

/* Accessors: each accepts NULL and the wrong type, and then answers the
   default (NULL, 0, dflt), so a renderer can walk an unexpected document
   without checks at every step. */
const cal_jv *cal_jv_get(const cal_jv *obj, const char *key);
const cal_jv *cal_jv_at(const cal_jv *arr, size_t i);
size_t cal_jv_len(const cal_jv *arr);
double cal_jv_num(const cal_jv *v, double dflt);
const char *cal_jv_str(const cal_jv *v, const char *dflt);
int cal_jv_bool(const cal_jv *v, int dflt);
int cal_jv_is(const cal_jv *v, cal_jtype t);
/* Shorthands: cal_jv_num(cal_jv_get(obj, key), dflt), and the string. */
double cal_jv_getnum(const cal_jv *obj, const char *key, double dflt);
const char *cal_jv_getstr(const cal_jv *obj, const char *key, const char *dflt);

/* ---- shapes: what a reader may assume about a document ----------------
   A shape says which types a value may take and, for a number, whether it
   must be whole and its range; for an object, its known members, each
   required or optional (members it does not know are ignored, so a newer
   writer's additions pass); for an array, the shape of every element, or
   exactly one shape per position (a tuple).  cal_jv_check walks a
   document against a shape before anything reads it, so that the code that
   does (a renderer, the browser that runs the HTML viewer's script) finds
   only what it expects: a string is never where a number is read. */

enum {
    CAL_JT_NULL = 1 << CAL_JNULL,
    CAL_JT_BOOL = 1 << CAL_JBOOL,
    CAL_JT_NUM = 1 << CAL_JNUM,
    CAL_JT_STR = 1 << CAL_JSTR,
    CAL_JT_ARR = 1 << CAL_JARR,
    CAL_JT_OBJ = 1 << CAL_JOBJ,
};

typedef struct cal_jshape cal_jshape;

typedef struct cal_jmember {
    const char *key;
    int required;
    const cal_jshape *shape;
} cal_jmember;

struct cal_jshape {
    unsigned types;                 /* the CAL_JT_* a value may be */
    int whole;                      /* a number must be a whole number */
    double min, max;                /* a number's range (both 0: any) */
    const cal_jmember *members;     /* an object's known members, ended by {NULL} */
    const cal_jshape *also;         /* an object: this shape's members as well */
    const cal_jshape *items;        /* an array: every element's shape */
    const cal_jshape *const *tuple; /* an array: one shape per position, NULL-ended */
};

/* Check `v` against `shape`.  0 if it fits; else -1 with one line in err
   saying where (from `name`, "" for the document) and what
   ("files[2].lines[0].line: expected a whole number, not a string").  The
   work is linear in the size of the checked part of the document. */
int cal_jv_check(const cal_jv *v, const cal_jshape *shape, const char *name, char *err,
                 size_t cap);

/* Copy `s` into dst (cap bytes) as printable ASCII, at most `max` chars
   of it, anything else as '?': for a message that quotes the document. */
void cal_jv_quote(char *dst, size_t cap, const char *s, size_t max);

#endif
