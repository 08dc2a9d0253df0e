/*
 * cal_jsonr — the JSON reader (see cal_jsonr.h).  Recursive descent over the
 * bytes; nodes and decoded strings go into an arena of malloc'd blocks freed
 * at once.  An array's or object's children are gathered on a scratch
 * vector and then copied into the arena, so each node's children are one
 * contiguous run.  Depth is limited, so the recursion is bounded.
 */
#include "cal_jsonr.h"

#include "cal_utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cal_jblock {
    struct cal_jblock *next;
    size_t used, cap;
    max_align_t data[];
} cal_jblock;

#define BLOCK_MIN (64u << 10)

typedef struct parser {
    cal_jdoc *doc;
    const char *s, *p, *end;
    char *err;
    size_t cap;
    int failed;
    size_t values; /* parsed so far: at most CAL_JSONR_MAX_VALUES */
} parser;

static void *arena_alloc(parser *ps, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    cal_jblock *b = ps->doc->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > BLOCK_MIN ? n : BLOCK_MIN;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = ps->doc->blocks;
        ps->doc->blocks = b;
    }
    void *r = (char *)b->data + b->used;
    b->used += n;
    return r;
}

/* Record the first error, with where it happened. */
static int fail(parser *ps, const char *fmt, ...)
{
    if (ps->failed)
        return -1;
    ps->failed = 1;
    int line = 1, col = 1;
    for (const char *q = ps->s; q < ps->p && q < ps->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else if ((*q & 0xC0) != 0x80) {
            col++;
        }
    }
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (ps->cap)
        snprintf(ps->err, ps->cap, "line %d column %d: %s", line, col, what);
    return -1;
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int literal(parser *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return fail(ps, "unexpected character");
    ps->p += n;
    return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?  Up to 19 significant
   digits exactly, the rest by their scale: plenty for a report. */
static int number(parser *ps, double *out)
{
    const char *p = ps->p, *e = ps->end;
    int neg = 0;
    if (p < e && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= e || !is_digit(*p))
        return fail(ps, "invalid number");
    uint64_t mant = 0;
    int digits = 0;
    long scale = 0;
    if (*p == '0') {
        p++;
    } else {
        for (; p < e && is_digit(*p); p++) {
            if (digits < 19) {
                mant = mant * 10 + (uint64_t)(*p - '0');
                if (mant)
                    digits++;
            } else {
                scale++;
            }
        }
    }
    if (p < e && *p == '.') {
        p++;
        if (p >= e || !is_digit(*p))
            return fail(ps, "invalid number");
        for (; p < e && is_digit(*p); p++) {
            if (digits < 19) {
                mant = mant * 10 + (uint64_t)(*p - '0');
                if (mant)
                    digits++;
                scale--;
            }
        }
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0;
        if (p < e && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        if (p >= e || !is_digit(*p))
            return fail(ps, "invalid number");
        long x = 0;
        for (; p < e && is_digit(*p); p++)
            if (x < 100000)
                x = x * 10 + (*p - '0');
        scale += eneg ? -x : x;
    }
    double v = (double)mant;
    if (mant && scale)
        v = scale < -300 ? v * pow(10.0, (double)scale + 300) * 1e-300
                         : v * pow(10.0, (double)scale);
    if (!isfinite(v))
        return fail(ps, "number out of range");
    ps->p = p;
    *out = neg ? -v : v;
    return 0;
}

static int hex4(const char *p, const char *end, unsigned *out)
{
    if (end - p < 4)
        return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* A string at ps->p (the opening quote): decoded into the arena.  Invalid
   UTF-8 becomes U+FFFD, as the writer does. */
static int string(parser *ps, const char **out, size_t *outlen)
{
    const char *p = ps->p + 1, *e = ps->end;
    /* Decoded text is never longer than 3x the source bytes (a lone invalid
       byte becomes 3 bytes of U+FFFD); find the end first to size it. */
    const char *q = p;
    while (q < e && *q != '"') {
        if (*q == '\\' && q + 1 < e)
            q++;
        q++;
    }
    if (q >= e)
        return fail(ps, "unterminated string");
    char *d = arena_alloc(ps, (size_t)(q - p) * 3 + 1);
    if (!d)
        return fail(ps, "out of memory");
    size_t n = 0;
    while (p < q) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20) {
            ps->p = p;
            return fail(ps, "control character in string");
        }
        if (c != '\\') {
            size_t k = cal_utf8_decode(p, (size_t)(q - p), NULL);
            if (k) {
                memcpy(d + n, p, k);
                n += k;
                p += k;
            } else {
                n += cal_utf8_encode(d + n, CAL_UTF8_REPLACEMENT);
                p++;
            }
            continue;
        }
        p++;
        switch (*p) {
        case '"':
            d[n++] = '"';
            break;
        case '\\':
            d[n++] = '\\';
            break;
        case '/':
            d[n++] = '/';
            break;
        case 'b':
            d[n++] = '\b';
            break;
        case 'f':
            d[n++] = '\f';
            break;
        case 'n':
            d[n++] = '\n';
            break;
        case 'r':
            d[n++] = '\r';
            break;
        case 't':
            d[n++] = '\t';
            break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(p + 1, q, &cp) != 0) {
                ps->p = p;
                return fail(ps, "invalid \\u escape");
            }
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && q - p >= 7 && p[1] == '\\' &&
                p[2] == 'u' && hex4(p + 3, q, &lo) == 0 && lo >= 0xDC00 &&
                lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                cp = 0xFFFD; /* a lone surrogate */
            }
            n += cal_utf8_encode(d + n, cp);
            break;
        }
        default:
            ps->p = p;
            return fail(ps, "invalid escape");
        }
        p++;
    }
    d[n] = '\0';
    ps->p = q + 1;
    *out = d;
    *outlen = n;
    return 0;
}

typedef struct scratch {
    cal_jv *v;
    size_t n, cap;
} scratch;

static int value(parser *ps, cal_jv *out, int depth);

static int push(parser *ps, scratch *s, const cal_jv *v)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        cal_jv *nv = realloc(s->v, cap * sizeof *nv);
        if (!nv)
            return fail(ps, "out of memory");
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n++] = *v;
    return 0;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(((const cal_jv *)a)->key, ((const cal_jv *)b)->key);
}

/* A member name the object being gathered on `s` has twice, or NULL.
   Readers disagree on which member counts (cal_jv_get takes the first, a
   browser's JSON.parse the last), so a profile that does is refused: what
   is checked is what is drawn.  *oom: could not tell, for want of memory. */
static const char *duplicate_key(const scratch *s, int *oom)
{
    *oom = 0;
    if (s->n <= 16) {
        for (size_t i = 1; i < s->n; i++)
            for (size_t j = 0; j < i; j++)
                if (strcmp(s->v[i].key, s->v[j].key) == 0)
                    return s->v[i].key;
        return NULL;
    }
    cal_jv *sorted = malloc(s->n * sizeof *sorted);
    if (!sorted) {
        *oom = 1;
        return NULL;
    }
    memcpy(sorted, s->v, s->n * sizeof *sorted);
    qsort(sorted, s->n, sizeof *sorted, cmp_key);
    const char *dup = NULL;
    for (size_t i = 1; i < s->n && !dup; i++)
        if (strcmp(sorted[i].key, sorted[i - 1].key) == 0)
            dup = sorted[i].key;
    free(sorted);
    return dup;
}

/* An array or object at ps->p ('[' or '{'). */
static int container(parser *ps, cal_jv *out, int depth)
{
    int obj = *ps->p == '{';
    char close = obj ? '}' : ']';
    if (depth >= CAL_JSONR_MAX_DEPTH)
        return fail(ps, "nested too deeply");
    const char *open_at = ps->p;
    ps->p++;
    scratch s = {0};
    int rc = 0;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
    } else {
        for (;;) {
            cal_jv v;
            const char *key = NULL;
            skip_ws(ps);
            if (obj) {
                size_t klen;
                if (ps->p >= ps->end || *ps->p != '"') {
                    rc = fail(ps, "expected a member name");
                    break;
                }
                const char *kat = ps->p;
                if ((rc = string(ps, &key, &klen)) != 0)
                    break;
                if (strlen(key) != klen) {
                    /* C would read "a\u0000b" as "a": the checks and a
                       browser would not see the same member. */
                    ps->p = kat;
                    rc = fail(ps, "NUL in a member name");
                    break;
                }
                skip_ws(ps);
                if (ps->p >= ps->end || *ps->p != ':') {
                    rc = fail(ps, "expected ':'");
                    break;
                }
                ps->p++;
            }
            if ((rc = value(ps, &v, depth + 1)) != 0)
                break;
            v.key = key;
            if ((rc = push(ps, &s, &v)) != 0)
                break;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == close) {
                ps->p++;
                break;
            }
            rc = fail(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'");
            break;
        }
    }
    if (rc == 0 && obj && s.n > 1) {
        int oom;
        const char *dup = duplicate_key(&s, &oom);
        if (dup || oom) {
            char quoted[48] = "";
            if (dup)
                cal_jv_quote(quoted, sizeof quoted, dup, 40);
            ps->p = open_at;
            rc = oom ? fail(ps, "out of memory")
                     : fail(ps, "two members named \"%s\" in one object", quoted);
        }
    }
    if (rc == 0) {
        out->type = obj ? CAL_JOBJ : CAL_JARR;
        out->n = s.n;
        out->u.kids = NULL;
        if (s.n) {
            out->u.kids = arena_alloc(ps, s.n * sizeof(cal_jv));
            if (!out->u.kids)
                rc = fail(ps, "out of memory");
            else
                memcpy(out->u.kids, s.v, s.n * sizeof(cal_jv));
        }
    }
    free(s.v);
    return rc;
}

static int value(parser *ps, cal_jv *out, int depth)
{
    memset(out, 0, sizeof *out);
    if (++ps->values > CAL_JSONR_MAX_VALUES)
        return fail(ps, "more than %u values", CAL_JSONR_MAX_VALUES);
    skip_ws(ps);
    if (ps->p >= ps->end)
        return fail(ps, "unexpected end of input");
    switch (*ps->p) {
    case '{':
    case '[':
        return container(ps, out, depth);
    case '"':
        out->type = CAL_JSTR;
        return string(ps, &out->u.str, &out->n);
    case 't':
        out->type = CAL_JBOOL;
        out->u.boolean = 1;
        return literal(ps, "true");
    case 'f':
        out->type = CAL_JBOOL;
        return literal(ps, "false");
    case 'n':
        out->type = CAL_JNULL;
        return literal(ps, "null");
    default:
        if (*ps->p != '-' && !is_digit(*ps->p)) {
            unsigned char c = (unsigned char)*ps->p;
            return c > 0x20 && c < 0x7F ? fail(ps, "unexpected character '%c'", c)
                                        : fail(ps, "unexpected character");
        }
        out->type = CAL_JNUM;
        return number(ps, &out->u.num);
    }
}

int cal_jdoc_parse(cal_jdoc *d, const char *text, size_t len, char *err, size_t cap)
{
    d->blocks = NULL;
    d->root = NULL;
    if (cap)
        err[0] = '\0';
    parser ps = {d, text, text, text + len, err, cap, 0, 0};
    /* A UTF-8 byte order mark is not JSON, but editors add one. */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        ps.p += 3;
    cal_jv *root = arena_alloc(&ps, sizeof *root);
    if (!root)
        return fail(&ps, "out of memory");
    if (value(&ps, root, 0) != 0)
        return -1;
    skip_ws(&ps);
    if (ps.p != ps.end)
        return fail(&ps, "unexpected data after the document");
    d->root = root;
    return 0;
}

void cal_jdoc_free(cal_jdoc *d)
{
    cal_jblock *b = d->blocks;
    while (b) {
        cal_jblock *next = b->next;
        free(b);
        b = next;
    }
    d->blocks = NULL;
    d->root = NULL;
}

const cal_jv *cal_jv_get(const cal_jv *obj, const char *key)
{
    if (!obj || obj->type != CAL_JOBJ)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->u.kids[i].key, key) == 0)
            return &obj->u.kids[i];
    return NULL;
}

const cal_jv *cal_jv_at(const cal_jv *arr, size_t i)
{
    if (!arr || (arr->type != CAL_JARR && arr->type != CAL_JOBJ) || i >= arr->n)
        return NULL;
    return &arr->u.kids[i];
}

size_t cal_jv_len(const cal_jv *arr)
{
    return arr && (arr->type == CAL_JARR || arr->type == CAL_JOBJ) ? arr->n : 0;
}

double cal_jv_num(const cal_jv *v, double dflt)
{
    return v && v->type == CAL_JNUM ? v->u.num : dflt;
}

const char *cal_jv_str(const cal_jv *v, const char *dflt)
{
    return v && v->type == CAL_JSTR ? v->u.str : dflt;
}

int cal_jv_bool(const cal_jv *v, int dflt)
{
    return v && v->type == CAL_JBOOL ? v->u.boolean : dflt;
}

int cal_jv_is(const cal_jv *v, cal_jtype t) { return v && v->type == t; }

double cal_jv_getnum(const cal_jv *obj, const char *key, double dflt)
{
    return cal_jv_num(cal_jv_get(obj, key), dflt);
}

const char *cal_jv_getstr(const cal_jv *obj, const char *key, const char *dflt)
{
    return cal_jv_str(cal_jv_get(obj, key), dflt);
}

/* ---- shapes -------------------------------------------------------------- */

void cal_jv_quote(char *dst, size_t cap, const char *s, size_t max)
{
    size_t n = 0;
    if (!cap)
        return;
    for (; *s && n + 1 < cap && max; max--) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c < 0x7F) {
            dst[n++] = (char)c;
            s++;
        } else {
            dst[n++] = '?';
            s++;
            while ((*s & 0xC0) == 0x80) /* the rest of a UTF-8 sequence */
                s++;
        }
    }
    dst[n] = '\0';
}

typedef struct checker {
    char path[160]; /* where we are: "files[2].lines[0]" */
    size_t len;
    char *err;
    size_t cap;
} checker;

static const char *type_name(const cal_jv *v)
{
    switch (v->type) {
    case CAL_JNULL:
        return "null";
    case CAL_JBOOL:
        return v->u.boolean ? "true" : "false";
    case CAL_JNUM:
        return "a number";
    case CAL_JSTR:
        return "a string";
    case CAL_JARR:
        return "an array";
    default:
        return "an object";
    }
}

/* "a whole number or null" */
static void expected(const cal_jshape *sh, char *dst, size_t cap)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {{CAL_JT_OBJ, "an object"},      {CAL_JT_ARR, "an array"},
                 {CAL_JT_STR, "a string"},       {CAL_JT_NUM, "a number"},
                 {CAL_JT_BOOL, "true or false"}, {CAL_JT_NULL, "null"}};
    size_t n = 0;
    dst[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (!(sh->types & names[i].bit))
            continue;
        const char *name =
            names[i].bit == CAL_JT_NUM && sh->whole ? "a whole number" : names[i].name;
        int k = snprintf(dst + n, cap - n, "%s%s", n ? " or " : "", name);
        if (k < 0 || (size_t)k >= cap - n)
            return;
        n += (size_t)k;
    }
}

static int bad(checker *ck, const char *fmt, const char *a, const char *b)
{
    char what[160];
    snprintf(what, sizeof what, fmt, a, b);
    if (ck->cap)
        snprintf(ck->err, ck->cap, "%s%s%s", ck->path, ck->len ? ": " : "", what);
    return -1;
}

/* Append ".key" or "[i]" to the path; returns the length to restore. */
static size_t enter(checker *ck, const char *key, size_t index)
{
    size_t was = ck->len, room = sizeof ck->path - ck->len;
    int k;
    if (key) {
        char quoted[48];
        cal_jv_quote(quoted, sizeof quoted, key, 40);
        k = snprintf(ck->path + ck->len, room, ck->len ? ".%s" : "%s", quoted);
    } else {
        k = snprintf(ck->path + ck->len, room, "[%zu]", index);
    }
    ck->len = k < 0 || (size_t)k >= room ? sizeof ck->path - 1 : ck->len + (size_t)k;
    return was;
}

static void leave(checker *ck, size_t was)
{
    ck->len = was;
    ck->path[was] = '\0';
}

static int check(checker *ck, const cal_jv *v, const cal_jshape *sh);

static int check_members(checker *ck, const cal_jv *obj, const cal_jshape *sh)
{
    for (; sh; sh = sh->also)
        for (const cal_jmember *m = sh->members; m && m->key; m++) {
            const cal_jv *kid = cal_jv_get(obj, m->key);
            size_t was = enter(ck, m->key, 0);
            int rc = kid           ? check(ck, kid, m->shape)
                     : m->required ? bad(ck, "missing", "", "")
                                   : 0;
            if (rc != 0)
                return rc;
            leave(ck, was);
        }
    return 0;
}

static int check(checker *ck, const cal_jv *v, const cal_jshape *sh)
{
    if (!(sh->types & (1u << v->type))) {
        char want[80];
        expected(sh, want, sizeof want);
        return bad(ck, "expected %s, not %s", want, type_name(v));
    }
    if (v->type == CAL_JNUM) {
        if (sh->whole && v->u.num != floor(v->u.num)) {
            char got[32];
            snprintf(got, sizeof got, "%.16g", v->u.num);
            return bad(ck, "expected a whole number, not %s%s", got, "");
        }
        if ((sh->min != 0 || sh->max != 0) &&
            !(v->u.num >= sh->min && v->u.num <= sh->max)) {
            char got[32], range[80];
            snprintf(got, sizeof got, "%.16g", v->u.num);
            snprintf(range, sizeof range, "(%.16g to %.16g)", sh->min, sh->max);
            return bad(ck, "%s is out of range %s", got, range);
        }
    } else if (v->type == CAL_JOBJ) {
        return check_members(ck, v, sh);
    } else if (v->type == CAL_JARR) {
        if (sh->tuple) {
            size_t n = 0;
            while (sh->tuple[n])
                n++;
            if (v->n != n) {
                char want[24], got[24];
                snprintf(want, sizeof want, "%zu", n);
                snprintf(got, sizeof got, "%zu", v->n);
                return bad(ck, "expected %s items, not %s", want, got);
            }
        }
        for (size_t i = 0; i < v->n; i++) {
            const cal_jshape *item = sh->tuple ? sh->tuple[i] : sh->items;
            if (!item)
                continue;
            size_t was = enter(ck, NULL, i);
            int rc = check(ck, &v->u.kids[i], item);
            if (rc != 0)
                return rc;
            leave(ck, was);
        }
    }
    return 0;
}

int cal_jv_check(const cal_jv *v, const cal_jshape *shape, const char *name, char *err,
                 size_t cap)
{
    /* The path names where a problem is: "files[2].lines[0].line". */
    checker ck = {.err = err, .cap = cap};
    snprintf(ck.path, sizeof ck.path, "%s", name);
    ck.len = strlen(ck.path);
    if (cap)
        err[0] = '\0';
    if (!v)
        return bad(&ck, "missing", "", "");
    return check(&ck, v, shape);
}
