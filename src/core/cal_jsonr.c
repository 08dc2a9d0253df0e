/*
 * cal_jsonr — the JSON reader (see cal_jsonr.h).  Recursive descent over the
 * bytes; nodes and decoded strings go into an arena of malloc'd blocks freed
 * at once.  An array's or object's children are gathered on a scratch
 * vector and then copied into the arena, so each node's children are one
 * contiguous run.  Depth is limited, so the recursion is bounded.
 */
#include "cal_jsonr.h"

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
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' ||
                               *ps->p == '\r'))
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

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

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
        v = scale < -300 ? v * pow(10.0, (double)scale + 300) * 1e-300 : v * pow(10.0, (double)scale);
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

static size_t put_utf8(char *d, unsigned cp)
{
    if (cp < 0x80) {
        d[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (char)(0xC0 | (cp >> 6));
        d[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (char)(0xE0 | (cp >> 12));
        d[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (char)(0xF0 | (cp >> 18));
    d[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    d[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid UTF-8 sequence at p (1-4), or 0 if it is not one. */
static size_t utf8_seq(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n)
        return 0;
    unsigned cp = c & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
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
            size_t k = utf8_seq((const unsigned char *)p, (const unsigned char *)q);
            if (k) {
                memcpy(d + n, p, k);
                n += k;
                p += k;
            } else {
                n += put_utf8(d + n, 0xFFFD);
                p++;
            }
            continue;
        }
        p++;
        switch (*p) {
        case '"': d[n++] = '"'; break;
        case '\\': d[n++] = '\\'; break;
        case '/': d[n++] = '/'; break;
        case 'b': d[n++] = '\b'; break;
        case 'f': d[n++] = '\f'; break;
        case 'n': d[n++] = '\n'; break;
        case 'r': d[n++] = '\r'; break;
        case 't': d[n++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(p + 1, q, &cp) != 0) {
                ps->p = p;
                return fail(ps, "invalid \\u escape");
            }
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && q - p >= 7 && p[1] == '\\' && p[2] == 'u' &&
                hex4(p + 3, q, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                cp = 0xFFFD; /* a lone surrogate */
            }
            n += put_utf8(d + n, cp);
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

/* An array or object at ps->p ('[' or '{'). */
static int container(parser *ps, cal_jv *out, int depth)
{
    int obj = *ps->p == '{';
    char close = obj ? '}' : ']';
    if (depth >= CAL_JSONR_MAX_DEPTH)
        return fail(ps, "nested too deeply");
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
                if ((rc = string(ps, &key, &klen)) != 0)
                    break;
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
    parser ps = {d, text, text, text + len, err, cap, 0};
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

int cal_jv_is(const cal_jv *v, cal_jtype t)
{
    return v && v->type == t;
}

double cal_jv_getnum(const cal_jv *obj, const char *key, double dflt)
{
    return cal_jv_num(cal_jv_get(obj, key), dflt);
}

const char *cal_jv_getstr(const cal_jv *obj, const char *key, const char *dflt)
{
    return cal_jv_str(cal_jv_get(obj, key), dflt);
}
