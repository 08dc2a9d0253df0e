/*
 * cal_heapfile — see cal_heapfile.h.  The layout is docs/FORMAT.md's
 * "Heap dump files": fixed-width records after a table of strings, every
 * integer little-endian, a 64-bit FNV-1a checksum at the end.  The
 * encoder checks what the decoder refuses, so a file calipers wrote is
 * one it reads.
 */
#include "cal_heapfile.h"

#include "cal_binfile.h"
#include "cal_snapshot.h" /* cal_snapshot_check_meta: the same meta rule */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* \x89, as in the snapshot files: no text file starts with it. */
static const char MAGIC[8] = {(char)0x89, 'C', 'A', 'L', 'H', 'E', 'P', '\n'};
#define HEADER_LEN 12
/* At most this many bytes are read: 16 GiB, some 500 million objects. */
#define MAX_FILE ((size_t)16 << 30)

void cal_heapfile_init(cal_heapfile *f)
{
    memset(f, 0, sizeof *f);
    cal_heapgraph_init(&f->g);
}

void cal_heapfile_free(cal_heapfile *f)
{
    free(f->meta_json);
    for (size_t i = 0; i < f->nstrings; i++)
        free(f->strings[i]);
    free(f->strings);
    free(f->types);
    cal_heapgraph_free(&f->g);
    free(f->names);
    free(f->lines);
    free(f->line_of);
    cal_heapfile_init(f);
}

int cal_heapfile_is_heapfile(const char *data, size_t len)
{
    return len >= sizeof MAGIC && memcmp(data, MAGIC, sizeof MAGIC) == 0;
}

/* ---- encoding ------------------------------------------------------------- */

/* Does f hold only what a reader accepts?  0, or -1 (errno EINVAL). */
static int check(const cal_heapfile *f)
{
    const cal_heapgraph *g = &f->g;
    char why[256];
    const char *meta = f->meta_json ? f->meta_json : "{}";
    int ok = f->nstrings < UINT32_MAX && f->ntypes < CAL_HEAP_MERGED &&
             g->n <= CAL_HEAP_MAX_NODES && g->nedges <= UINT32_MAX &&
             (g->n == 0 || g->off) && f->nnames <= UINT32_MAX &&
             f->nlines < UINT32_MAX &&
             cal_snapshot_check_meta(meta, strlen(meta), why, sizeof why) == 0;
    for (size_t i = 0; ok && i < f->nstrings; i++) {
        size_t len = strlen(f->strings[i]);
        ok = len <= UINT32_MAX && cal_binfile_utf8_bad_at(f->strings[i], len) == len;
    }
    for (size_t t = 0; ok && t < f->ntypes; t++)
        ok = f->types[t] < f->nstrings;
    for (size_t v = 0; ok && v < g->n; v++)
        ok = (g->type[v] & ~CAL_HEAP_MERGED) < f->ntypes && g->off[v] <= g->off[v + 1];
    ok = ok &&
         (g->n == 0 ? g->nedges == 0 : g->off[0] == 0 && g->off[g->n] == g->nedges);
    for (size_t e = 0; ok && e < g->nedges; e++)
        ok = g->edges[e] < g->n;
    for (size_t r = 0; ok && r < g->nroots; r++)
        ok = g->roots[r] < g->n;
    for (size_t k = 0; ok && k < f->nnames; k++)
        ok = f->names[2 * k] < g->n && f->names[2 * k + 1] < f->nstrings &&
             (k == 0 || f->names[2 * k] > f->names[2 * k - 2]);
    for (size_t k = 0; ok && k < f->nlines; k++)
        ok = f->lines[2 * k] < f->nstrings;
    for (size_t v = 0; ok && f->line_of && v < g->n; v++)
        ok = f->line_of[v] <= f->nlines;
    if (!ok)
        errno = EINVAL;
    return ok ? 0 : -1;
}

int cal_heapfile_encode(const cal_heapfile *f, cal_buf *out)
{
    cal_buf_init(out);
    if (check(f) != 0)
        return -1;
    const cal_heapgraph *g = &f->g;
    const char *meta = f->meta_json ? f->meta_json : "{}";
    size_t meta_len = strlen(meta);
    cal_buf_add(out, MAGIC, sizeof MAGIC);
    cal_binfile_put_u32(out, CAL_HEAPFILE_VERSION);
    cal_binfile_put_u32(out, (uint32_t)meta_len);
    cal_buf_add(out, meta, meta_len);
    cal_binfile_put_u32(out, (uint32_t)f->nstrings);
    for (size_t i = 0; i < f->nstrings; i++) {
        size_t len = strlen(f->strings[i]);
        cal_binfile_put_u32(out, (uint32_t)len);
        cal_buf_add(out, f->strings[i], len);
    }
    cal_binfile_put_u32(out, (uint32_t)f->ntypes);
    for (size_t t = 0; t < f->ntypes; t++)
        cal_binfile_put_u32(out, f->types[t]);
    cal_binfile_put_u64(out, g->n);
    for (size_t v = 0; v < g->n; v++) {
        cal_binfile_put_u64(out, g->addr[v]);
        cal_binfile_put_u64(out, g->size[v]);
        cal_binfile_put_u32(out, g->type[v]);
        cal_binfile_put_u32(out, g->off[v + 1] - g->off[v]);
    }
    cal_binfile_put_u64(out, g->nedges);
    for (size_t e = 0; e < g->nedges; e++)
        cal_binfile_put_u32(out, g->edges[e]);
    cal_binfile_put_u64(out, g->nroots);
    for (size_t r = 0; r < g->nroots; r++)
        cal_binfile_put_u32(out, g->roots[r]);
    cal_binfile_put_u32(out, (uint32_t)f->nnames);
    for (size_t k = 0; k < 2 * f->nnames; k++)
        cal_binfile_put_u32(out, f->names[k]);
    cal_binfile_put_u32(out, (uint32_t)f->nlines);
    for (size_t k = 0; k < 2 * f->nlines; k++)
        cal_binfile_put_u32(out, f->lines[k]);
    size_t nsampled = 0;
    for (size_t v = 0; f->line_of && v < g->n; v++)
        nsampled += f->line_of[v] != 0;
    cal_binfile_put_u64(out, nsampled);
    for (size_t v = 0; f->line_of && v < g->n; v++)
        if (f->line_of[v]) {
            cal_binfile_put_u32(out, (uint32_t)v);
            cal_binfile_put_u32(out, f->line_of[v] - 1);
        }
    if (cal_buf_ok(out))
        cal_binfile_put_u64(out, cal_binfile_checksum(out->data, out->len));
    if (!cal_buf_ok(out)) {
        cal_buf_free(out);
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

int cal_heapfile_write(const cal_heapfile *f, const char *path)
{
    cal_buf b;
    if (cal_heapfile_encode(f, &b) != 0)
        return -1;
    int rc = cal_buf_write_file(&b, path);
    int saved = errno;
    cal_buf_free(&b);
    errno = saved;
    return rc;
}

/* ---- decoding ------------------------------------------------------------- */

static int oom(cal_binr *r)
{
    return cal_binr_fail(r, "out of memory reading the heap dump");
}

/* n elements of `elem` bytes (n may be 0), or NULL. */
static void *alloc_n(size_t n, size_t elem) { return malloc((n ? n : 1) * elem); }

static int decode_meta(cal_binr *r, cal_heapfile *out)
{
    r->section = "meta";
    if (cal_binr_need(r, 4) != 0)
        return -1;
    uint32_t len = cal_binr_u32(r);
    if (cal_binr_need(r, len) != 0)
        return -1;
    const char *json = (const char *)r->p + r->at;
    char why[256];
    if (cal_snapshot_check_meta(json, len, why, sizeof why) != 0)
        return cal_binr_fail(r, "%s", why);
    if (!(out->meta_json = malloc((size_t)len + 1)))
        return oom(r);
    memcpy(out->meta_json, json, len);
    out->meta_json[len] = '\0';
    r->at += len;
    return 0;
}

static int decode_strings(cal_binr *r, cal_heapfile *out)
{
    size_t n;
    if (cal_binr_count(r, "strings", 4, 0, &n) != 0)
        return -1;
    if (!(out->strings = calloc(n ? n : 1, sizeof *out->strings)))
        return oom(r);
    for (size_t i = 0; i < n; i++) {
        if (cal_binr_need(r, 4) != 0)
            return -1;
        uint32_t len = cal_binr_u32(r);
        if (cal_binr_need(r, len) != 0)
            return -1;
        const char *text = (const char *)r->p + r->at;
        size_t bad = cal_binfile_utf8_bad_at(text, len);
        if (bad != len)
            return cal_binr_fail(
                r, "string %zu is not UTF-8 text without NUL (byte %zu)", i, bad);
        if (!(out->strings[i] = malloc((size_t)len + 1)))
            return oom(r);
        memcpy(out->strings[i], text, len);
        out->strings[i][len] = '\0';
        out->nstrings++;
        r->at += len;
    }
    return 0;
}

static int decode_types(cal_binr *r, cal_heapfile *out)
{
    size_t n;
    if (cal_binr_count(r, "types", 4, 0, &n) != 0)
        return -1;
    if (n >= CAL_HEAP_MERGED)
        return cal_binr_fail(r, "%zu types: more than a heap dump holds", n);
    if (!(out->types = alloc_n(n, 4)))
        return oom(r);
    for (size_t t = 0; t < n; t++) {
        out->types[t] = cal_binr_u32(r);
        if (out->types[t] >= out->nstrings)
            return cal_binr_fail(r, "type %zu: name %u is not a string (%zu strings)",
                                 t, out->types[t], out->nstrings);
    }
    out->ntypes = n;
    return 0;
}

/* The nodes, and the edges and roots after them. */
static int decode_graph(cal_binr *r, cal_heapfile *out)
{
    cal_heapgraph *g = &out->g;
    size_t n;
    if (cal_binr_count(r, "nodes", 24, 1, &n) != 0)
        return -1;
    if (n > CAL_HEAP_MAX_NODES)
        return cal_binr_fail(r, "%zu nodes: more than a heap dump holds", n);
    g->addr = alloc_n(n, 8);
    g->size = alloc_n(n, 8);
    g->type = alloc_n(n, 4);
    g->off = alloc_n(n + 1, 4);
    if (!g->addr || !g->size || !g->type || !g->off)
        return oom(r);
    g->cap = n;
    uint64_t sum = 0;
    for (size_t v = 0; v < n; v++) {
        g->addr[v] = cal_binr_u64(r);
        g->size[v] = cal_binr_u64(r);
        g->type[v] = cal_binr_u32(r);
        uint32_t degree = cal_binr_u32(r);
        if ((g->type[v] & ~CAL_HEAP_MERGED) >= out->ntypes)
            return cal_binr_fail(r, "node %zu: type %u out of range (%zu types)", v,
                                 g->type[v] & ~CAL_HEAP_MERGED, out->ntypes);
        g->off[v] = (uint32_t)sum;
        sum += degree;
        if (sum > UINT32_MAX)
            return cal_binr_fail(r, "node %zu: more edges than a heap dump holds", v);
    }
    g->off[n] = (uint32_t)sum;
    g->n = g->expanded = n;
    size_t m;
    if (cal_binr_count(r, "edges", 4, 1, &m) != 0)
        return -1;
    if (m != sum)
        return cal_binr_fail(r, "%zu edges, where the nodes have %llu", m,
                             (unsigned long long)sum);
    if (!(g->edges = alloc_n(m, 4)))
        return oom(r);
    g->edges_cap = m;
    for (size_t e = 0; e < m; e++) {
        g->edges[e] = cal_binr_u32(r);
        if (g->edges[e] >= n)
            return cal_binr_fail(r, "edge %zu: node %u out of range (%zu nodes)", e,
                                 g->edges[e], n);
    }
    g->nedges = m;
    size_t nr;
    if (cal_binr_count(r, "roots", 4, 1, &nr) != 0)
        return -1;
    if (!(g->roots = alloc_n(nr, 4)))
        return oom(r);
    g->roots_cap = nr;
    for (size_t k = 0; k < nr; k++) {
        g->roots[k] = cal_binr_u32(r);
        if (g->roots[k] >= n)
            return cal_binr_fail(r, "root %zu: node %u out of range (%zu nodes)", k,
                                 g->roots[k], n);
    }
    g->nroots = nr;
    return 0;
}

/* Names, lines, and which node has which line. */
static int decode_extras(cal_binr *r, cal_heapfile *out)
{
    size_t n = out->g.n, k;
    if (cal_binr_count(r, "names", 8, 0, &k) != 0)
        return -1;
    if (!(out->names = alloc_n(2 * k, 4)))
        return oom(r);
    for (size_t i = 0; i < k; i++) {
        uint32_t node = cal_binr_u32(r), s = cal_binr_u32(r);
        if (node >= n || s >= out->nstrings || (i && node <= out->names[2 * i - 2]))
            return cal_binr_fail(r,
                                 "name %zu: node %u or string %u out of range or order "
                                 "(%zu nodes, %zu strings)",
                                 i, node, s, n, out->nstrings);
        out->names[2 * i] = node;
        out->names[2 * i + 1] = s;
    }
    out->nnames = k;
    if (cal_binr_count(r, "lines", 8, 0, &k) != 0)
        return -1;
    if (!(out->lines = alloc_n(2 * k, 4)))
        return oom(r);
    for (size_t i = 0; i < k; i++) {
        out->lines[2 * i] = cal_binr_u32(r);
        out->lines[2 * i + 1] = cal_binr_u32(r);
        if (out->lines[2 * i] >= out->nstrings)
            return cal_binr_fail(r, "line %zu: file %u is not a string (%zu strings)",
                                 i, out->lines[2 * i], out->nstrings);
    }
    out->nlines = k;
    if (cal_binr_count(r, "sampled nodes", 8, 1, &k) != 0)
        return -1;
    if (k > n)
        return cal_binr_fail(r, "%zu sampled nodes of %zu nodes", k, n);
    if (k && !(out->line_of = calloc(n, 4)))
        return oom(r);
    uint32_t last = 0;
    for (size_t i = 0; i < k; i++) {
        uint32_t node = cal_binr_u32(r), line = cal_binr_u32(r);
        if (node >= n || line >= out->nlines || (i && node <= last))
            return cal_binr_fail(r,
                                 "sampled node %zu: node %u or line %u out of range or "
                                 "order (%zu nodes, %zu lines)",
                                 i, node, line, n, out->nlines);
        out->line_of[node] = line + 1;
        last = node;
    }
    return 0;
}

static int decode_body(cal_binr *r, cal_heapfile *out)
{
    if (r->len < HEADER_LEN + CAL_BINFILE_TRAILER)
        return cal_binr_fail(r, "truncated heap dump: %zu bytes, shorter than any",
                             r->len);
    r->at = sizeof MAGIC;
    uint32_t version = cal_binr_u32(r);
    if (version > CAL_HEAPFILE_VERSION)
        return cal_binr_fail(
            r, "heap dump format version %u is newer than this calipers reads (%d)",
            version, CAL_HEAPFILE_VERSION);
    if (version == 0)
        return cal_binr_fail(r, "heap dump format version 0 does not exist");
    if (decode_meta(r, out) != 0 || decode_strings(r, out) != 0 ||
        decode_types(r, out) != 0 || decode_graph(r, out) != 0 ||
        decode_extras(r, out) != 0)
        return -1;
    if (r->len - r->at != CAL_BINFILE_TRAILER)
        return cal_binr_fail(
            r, "%zu bytes after the sampled nodes where 8 (the checksum) end the file",
            r->len - r->at);
    uint64_t want = cal_binfile_checksum(r->p, r->at);
    if (cal_binr_u64(r) != want)
        return cal_binr_fail(r, "checksum mismatch: the heap dump is corrupt");
    return 0;
}

int cal_heapfile_decode(const char *data, size_t len, cal_heapfile *out, char *err,
                        size_t errlen)
{
    cal_heapfile_init(out);
    if (errlen)
        err[0] = '\0';
    cal_binr r = {
        (const unsigned char *)data, len, 0, err, errlen, "heap dump", "header"};
    int rc;
    if (!cal_heapfile_is_heapfile(data, len))
        rc =
            cal_binr_fail(&r,
                          len < sizeof MAGIC && len > 0 && memcmp(data, MAGIC, len) == 0
                              ? "truncated heap dump: %zu bytes, shorter than its magic"
                              : "not a calipers heap dump (%zu bytes, no magic)",
                          len);
    else
        rc = decode_body(&r, out);
    if (rc != 0)
        cal_heapfile_free(out);
    return rc;
}

int cal_heapfile_read(const char *path, cal_heapfile *out, char *err, size_t errlen)
{
    cal_heapfile_init(out);
    if (errlen)
        err[0] = '\0';
    char *data = NULL;
    size_t len = 0;
    if (cal_binfile_read(path, "heap dump", MAX_FILE, &data, &len, err, errlen) != 0)
        return -1;
    char why[512];
    int rc = cal_heapfile_decode(data, len, out, why, sizeof why);
    free(data);
    if (rc != 0)
        snprintf(err, errlen, "%s: %s", path, why);
    errno = 0;
    return rc;
}
