/*
 * cal_atypes — see cal_atypes.h.  The store is one record per (line, type)
 * seen; the per-line and per-type figures are sums of those records, made
 * when the profile is written.  Plain C, no globals; not thread-safe.
 */
#define _GNU_SOURCE /* qsort_r */
#include "cal_atypes.h"

#include "cal_profile.h"

#include <stdlib.h>
#include <string.h>

void cal_atypes_init(cal_atypes *a)
{
    memset(a, 0, sizeof *a);
    cal_map_init(&a->index);
}

void cal_atypes_free(cal_atypes *a)
{
    free(a->v);
    cal_map_clear(&a->index);
    memset(a, 0, sizeof *a);
}

int cal_atypes_bucket(int64_t v)
{
    if (v <= 0)
        return 0;
    int k = 64 - __builtin_clzll((unsigned long long)v);
    return k < CAL_ATYPES_BUCKETS ? k : CAL_ATYPES_BUCKETS - 1;
}

static cal_atype_stat *stat_of(cal_atypes *a, uint32_t line, uint32_t type)
{
    uint64_t key = (uint64_t)line << 32 | type;
    uint32_t i = cal_map_get(&a->index, key);
    if (i != CAL_MAP_NONE)
        return &a->v[i];
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        cal_atype_stat *v = realloc(a->v, cap * sizeof *v);
        if (!v)
            return NULL;
        a->v = v;
        a->cap = cap;
    }
    if (cal_map_put(&a->index, key, (uint32_t)a->n) != 0)
        return NULL;
    cal_atype_stat *s = &a->v[a->n++];
    memset(s, 0, sizeof *s);
    s->line = line;
    s->type = type;
    return s;
}

int cal_atypes_add(cal_atypes *a, uint32_t line, uint32_t type, int64_t weight,
                   int64_t size, int fate, int64_t life_clock, int64_t life_ns)
{
    cal_atype_stat *s = stat_of(a, line, type);
    if (!s)
        return -1;
    s->samples++;
    s->bytes += weight;
    s->objects += (double)weight / (double)(size > 0 ? size : 1);
    if (fate < 0 || fate >= CAL_FATES)
        fate = CAL_FATE_UNTRACKED;
    s->fate_bytes[fate] += weight;
    if (life_clock >= 0 && life_ns >= 0) {
        s->life_clock[cal_atypes_bucket(life_clock)] += weight;
        s->life_ns[cal_atypes_bucket(life_ns)] += weight;
    }
    return 0;
}

void cal_atypes_stat_merge(cal_atype_stat *dst, const cal_atype_stat *src)
{
    dst->samples += src->samples;
    dst->bytes += src->bytes;
    dst->objects += src->objects;
    for (int f = 0; f < CAL_FATES; f++)
        dst->fate_bytes[f] += src->fate_bytes[f];
    for (int k = 0; k < CAL_ATYPES_BUCKETS; k++) {
        dst->life_clock[k] += src->life_clock[k];
        dst->life_ns[k] += src->life_ns[k];
    }
}

double cal_atypes_median(const int64_t hist[CAL_ATYPES_BUCKETS])
{
    int64_t total = 0;
    for (int k = 0; k < CAL_ATYPES_BUCKETS; k++)
        total += hist[k];
    if (total <= 0)
        return -1;
    double half = (double)total / 2, seen = 0;
    for (int k = 0; k < CAL_ATYPES_BUCKETS; k++) {
        if (!hist[k])
            continue;
        if (seen + (double)hist[k] >= half) {
            if (k == 0)
                return 0;
            double lo = (double)(1ull << (k - 1)), hi = lo * 2;
            return lo + (hi - lo) * (half - seen) / (double)hist[k];
        }
        seen += (double)hist[k];
    }
    return -1; /* not reached */
}

/* ---- the JSON section -------------------------------------------------------- */

static void json_hist(cal_json *j, const char *key, const int64_t h[CAL_ATYPES_BUCKETS])
{
    cal_json_key(j, key);
    cal_json_flat(j);
    cal_json_array_begin(j);
    for (int k = 0; k < CAL_ATYPES_BUCKETS; k++) {
        if (!h[k])
            continue;
        cal_json_array_begin(j);
        cal_json_int(j, k ? (int64_t)(1ull << (k - 1)) : 0);
        cal_json_int(j, h[k]);
        cal_json_array_end(j);
    }
    cal_json_array_end(j);
}

/* The figures common to a type's, a line's and a line's type's record. */
static void json_stat(cal_json *j, const cal_atype_stat *s)
{
    cal_json_key(j, "samples");
    cal_json_int(j, s->samples);
    cal_json_key(j, "bytes");
    cal_json_int(j, s->bytes);
    cal_json_key(j, "objects");
    cal_json_fixed(j, s->objects, 1);
    cal_json_key(j, "died_young_bytes");
    cal_json_int(j, s->fate_bytes[CAL_FATE_YOUNG]);
    cal_json_key(j, "survived_bytes");
    cal_json_int(j, s->fate_bytes[CAL_FATE_SURVIVED]);
    cal_json_key(j, "alive_end_bytes");
    cal_json_int(j, s->fate_bytes[CAL_FATE_END]);
    cal_json_key(j, "untracked_bytes");
    cal_json_int(j, s->fate_bytes[CAL_FATE_UNTRACKED]);
    int64_t known = s->fate_bytes[CAL_FATE_YOUNG] + s->fate_bytes[CAL_FATE_SURVIVED] +
                    s->fate_bytes[CAL_FATE_END];
    cal_json_key(j, "survived_fraction");
    if (known > 0)
        cal_json_fixed(j, (double)s->fate_bytes[CAL_FATE_SURVIVED] / (double)known, 4);
    else
        cal_json_null(j);
    double mc = cal_atypes_median(s->life_clock), mn = cal_atypes_median(s->life_ns);
    cal_json_key(j, "median_lifetime_bytes");
    if (mc >= 0)
        cal_json_int(j, (int64_t)(mc + 0.5));
    else
        cal_json_null(j);
    cal_json_key(j, "median_lifetime_s");
    if (mn >= 0)
        cal_json_seconds(j, (int64_t)(mn + 0.5));
    else
        cal_json_null(j);
    json_hist(j, "lifetime_bytes_histogram", s->life_clock);
    json_hist(j, "lifetime_ns_histogram", s->life_ns);
}

typedef struct agg {
    cal_atype_stat s;
    const char *name; /* type, or the line's path */
} agg;

static int cmp_type_agg(const void *x, const void *y)
{
    const agg *a = x, *b = y;
    if (a->s.bytes != b->s.bytes)
        return a->s.bytes > b->s.bytes ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int cmp_line_agg(const void *x, const void *y, void *ctx)
{
    const cal_profile *p = ctx;
    const agg *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    if (c)
        return c;
    const cal_line_stat *la = cal_profile_line_at(p, a->s.line);
    const cal_line_stat *lb = cal_profile_line_at(p, b->s.line);
    return (la->line > lb->line) - (la->line < lb->line);
}

/* By line index, then most bytes first. */
static int cmp_entry_bytes(const void *x, const void *y, void *ctx)
{
    const cal_atypes *a = ctx;
    const cal_atype_stat *s = &a->v[*(const size_t *)x], *t = &a->v[*(const size_t *)y];
    if (s->line != t->line)
        return s->line < t->line ? -1 : 1;
    if (s->bytes != t->bytes)
        return s->bytes > t->bytes ? -1 : 1;
    return (s->type > t->type) - (s->type < t->type);
}

/* Sum the records into one per type (by_line 0) or one per profiled line
   (by_line 1); returns the array (*n of them) or NULL. */
static agg *aggregate(const cal_profile *p, const cal_atypes *a, int by_line, size_t *n)
{
    *n = 0;
    agg *out = calloc(a->n ? a->n : 1, sizeof *out);
    cal_map seen;
    cal_map_init(&seen);
    if (!out)
        return NULL;
    for (size_t i = 0; i < a->n; i++) {
        const cal_atype_stat *s = &a->v[i];
        if (by_line && s->line == CAL_PROFILE_NONE)
            continue;
        uint64_t key = by_line ? s->line : s->type;
        uint32_t k = cal_map_get(&seen, key);
        if (k == CAL_MAP_NONE) {
            if (cal_map_put(&seen, key, (uint32_t)*n) != 0)
                continue;
            k = (uint32_t)(*n)++;
            out[k].s.line = s->line;
            out[k].s.type = s->type;
            if (by_line) {
                const cal_line_stat *ls = cal_profile_line_at(p, s->line);
                out[k].name = cal_profile_string_at(p, ls->file);
            } else {
                out[k].name = cal_profile_string_at(p, s->type);
            }
            if (!out[k].name)
                out[k].name = "";
        }
        cal_atypes_stat_merge(&out[k].s, s);
    }
    cal_map_clear(&seen);
    return out;
}

void cal_atypes_json(cal_json *j, const cal_profile *p)
{
    const cal_atypes *a = cal_profile_atypes_at(p);
    if (!a || !a->n)
        return;
    size_t ntypes, nlines;
    agg *types = aggregate(p, a, 0, &ntypes);
    agg *lines = aggregate(p, a, 1, &nlines);
    size_t *order = malloc((a->n ? a->n : 1) * sizeof *order);
    if (!types || !lines || !order)
        goto out;
    qsort(types, ntypes, sizeof *types, cmp_type_agg);
    qsort_r(lines, nlines, sizeof *lines, cmp_line_agg, (void *)p);
    size_t no = 0;
    for (size_t i = 0; i < a->n; i++)
        order[no++] = i;
    qsort_r(order, no, sizeof *order, cmp_entry_bytes, (void *)a);

    cal_json_key(j, "allocated_types");
    cal_json_object_begin(j);
    cal_json_key(j, "gc_collections");
    cal_json_int(j, a->collections);
    cal_json_key(j, "types");
    cal_json_array_begin(j);
    for (size_t i = 0; i < ntypes; i++) {
        cal_json_object_begin(j);
        cal_json_key(j, "type");
        cal_json_string(j, types[i].name);
        json_stat(j, &types[i].s);
        cal_json_object_end(j);
    }
    cal_json_array_end(j);
    cal_json_key(j, "lines");
    cal_json_array_begin(j);
    for (size_t i = 0; i < nlines; i++) {
        const cal_line_stat *ls = cal_profile_line_at(p, lines[i].s.line);
        cal_json_object_begin(j);
        cal_json_key(j, "file");
        cal_json_string(j, lines[i].name);
        cal_json_key(j, "line");
        cal_json_int(j, ls->line);
        json_stat(j, &lines[i].s);
        cal_json_key(j, "types");
        cal_json_array_begin(j);
        /* The first of this line's records in `order` (sorted by line). */
        size_t lo = 0, hi = no;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (a->v[order[mid]].line < lines[i].s.line)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t k = lo; k < no && a->v[order[k]].line == lines[i].s.line; k++) {
            const cal_atype_stat *s = &a->v[order[k]];
            const char *name = cal_profile_string_at(p, s->type);
            cal_json_object_begin(j);
            cal_json_key(j, "type");
            cal_json_string(j, name ? name : "");
            cal_json_key(j, "samples");
            cal_json_int(j, s->samples);
            cal_json_key(j, "bytes");
            cal_json_int(j, s->bytes);
            cal_json_key(j, "survived_bytes");
            cal_json_int(j, s->fate_bytes[CAL_FATE_SURVIVED]);
            cal_json_object_end(j);
        }
        cal_json_array_end(j);
        cal_json_object_end(j);
    }
    cal_json_array_end(j);
    cal_json_object_end(j);
out:
    free(types);
    free(lines);
    free(order);
}
