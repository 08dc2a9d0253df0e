/* cal_json — see cal_json.h. */
#include "cal_json.h"

#include "cal_utf8.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void cal_json_init(cal_json *j, cal_buf *out, int indent)
{
    memset(j, 0, sizeof(*j));
    j->out = out;
    j->indent = indent;
}

/* A new line, indented, for a value at `depth` (not in a flat part). */
static void newline(cal_json *j, int depth)
{
    if (!j->indent || (j->flat_depth && depth >= j->flat_depth))
        return;
    cal_buf_puts(j->out, "\n");
    cal_buf_repeat(j->out, " ", j->depth * j->indent);
}

/* Separator and indentation before a value or a key. */
static void before_value(cal_json *j)
{
    if (j->after_key) {
        j->after_key = 0;
        return;
    }
    if (j->depth > 0) {
        if (j->count[j->depth]++)
            cal_buf_puts(j->out, ",");
        newline(j, j->depth);
    }
}

static void open_(cal_json *j, const char *c)
{
    before_value(j);
    cal_buf_puts(j->out, c);
    if (j->depth + 1 < CAL_JSON_MAX_DEPTH)
        j->depth++;
    j->count[j->depth] = 0;
}

static void close_(cal_json *j, const char *c)
{
    int inside = j->depth, had = j->count[j->depth];
    if (j->depth > 0)
        j->depth--;
    if (had)
        newline(j, inside);
    cal_buf_puts(j->out, c);
    if (j->flat_depth && j->depth < j->flat_depth)
        j->flat_depth = 0;
}

void cal_json_flat(cal_json *j)
{
    if (!j->flat_depth)
        j->flat_depth = j->depth + 1;
}

void cal_json_object_begin(cal_json *j) { open_(j, "{"); }
void cal_json_object_end(cal_json *j) { close_(j, "}"); }
void cal_json_array_begin(cal_json *j) { open_(j, "["); }
void cal_json_array_end(cal_json *j) { close_(j, "]"); }

void cal_json_key(cal_json *j, const char *key)
{
    before_value(j);
    cal_buf_puts(j->out, "\"");
    cal_json_escape(j->out, key);
    cal_buf_puts(j->out, j->indent ? "\": " : "\":");
    j->after_key = 1;
}

void cal_json_escape(cal_buf *out, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            cal_buf_add(out, esc, 2);
            s++;
        } else if (c < 0x20) {
            switch (c) {
            case '\n':
                cal_buf_puts(out, "\\n");
                break;
            case '\r':
                cal_buf_puts(out, "\\r");
                break;
            case '\t':
                cal_buf_puts(out, "\\t");
                break;
            default:
                cal_buf_printf(out, "\\u%04x", c);
            }
            s++;
        } else if (c < 0x80) {
            /* '<' escaped so the JSON can sit inside an HTML <script>. */
            if (c == '<')
                cal_buf_puts(out, "\\u003c");
            else
                cal_buf_add(out, (const char *)s, 1);
            s++;
        } else {
            /* The string ends with a NUL: 4 bytes may be looked at. */
            size_t n = cal_utf8_decode((const char *)s, 4, NULL);
            if (n == 0) {
                cal_buf_puts(out, "\\ufffd");
                s++;
            } else {
                cal_buf_add(out, (const char *)s, n);
                s += n;
            }
        }
    }
}

void cal_json_string(cal_json *j, const char *s)
{
    before_value(j);
    cal_buf_puts(j->out, "\"");
    cal_json_escape(j->out, s);
    cal_buf_puts(j->out, "\"");
}

/* Digits of v, written backwards from `end`; returns the first.  A profile
   holds tens of thousands of numbers: printf's format parsing cost more
   than the rest of writing them. */
static char *digits(char *end, uint64_t v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

void cal_json_int(cal_json *j, int64_t v)
{
    before_value(j);
    char tmp[24], *end = tmp + sizeof tmp;
    char *p = digits(end, v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
    if (v < 0)
        *--p = '-';
    cal_buf_add(j->out, p, (size_t)(end - p));
}

void cal_json_bool(cal_json *j, int v)
{
    before_value(j);
    cal_buf_puts(j->out, v ? "true" : "false");
}

void cal_json_null(cal_json *j)
{
    before_value(j);
    cal_buf_puts(j->out, "null");
}

void cal_json_raw(cal_json *j, const char *json)
{
    before_value(j);
    cal_buf_puts(j->out, json);
}

void cal_json_seconds(cal_json *j, int64_t ns)
{
    before_value(j);
    int neg = ns < 0;
    uint64_t us = neg ? 0 - (uint64_t)ns : (uint64_t)ns;
    us = (us + 500) / 1000;
    char tmp[32], *end = tmp + sizeof tmp;
    char *p = digits(end, us % 1000000 + 1000000); /* "1" and six digits */
    *p = '.';
    p = digits(p, us / 1000000);
    if (neg && us)
        *--p = '-';
    cal_buf_add(j->out, p, (size_t)(end - p));
}

void cal_json_fixed(cal_json *j, double v, int decimals)
{
    before_value(j);
    if (!isfinite(v)) {
        cal_buf_puts(j->out, "null");
        return;
    }
    if (decimals < 0)
        decimals = 0;
    if (decimals > 9)
        decimals = 9;
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.*f", decimals, v);
    if (strcmp(tmp, "-0") == 0 || strspn(tmp, "-0.") == strlen(tmp))
        snprintf(tmp, sizeof tmp, "%.*f", decimals, 0.0);
    cal_buf_puts(j->out, tmp);
}
