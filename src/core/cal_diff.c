/*
 * cal_diff — `calipers diff OLD NEW` (see cal_diff.h): what got slower,
 * allocates more or holds more between two profiles, and what holds more
 * between two memory snapshots, with the error of each estimate.
 *
 * HOW IT WORKS.  Each input becomes a list of items, one per place (a
 * line, a function, a file, a traceback) with its figures; the list is
 * sorted by key and equal keys are added together; the two sorted lists
 * are merged into rows (a key in one run only is "new" or "gone"); the
 * rows are sorted by the absolute change of the chosen figure (ties by
 * key, so the output is deterministic) and the first `top` are rendered.
 * Lines are matched by file path and line number: an edited file shifts
 * its lines, so a row whose source text differs between the two profiles
 * (when both hold it) is marked "changed".
 *
 * THE ERRORS OF A SNAPSHOT'S FIGURES.  A snapshot's traces are samples:
 * a trace of weight `size` (bytes it stands for) was drawn from blocks of
 * `block_size` bytes, so it stands for c = size / block_size blocks.  The
 * variance of each trace is the one calipers.memory gives its statistics
 * (docs/INTERNALS.md, "Memory snapshots"; memory.py, _sum_by_frames):
 * with m the sampling mean (the snapshot's meta `alloc_mean`),
 *     b < m:   var(size) = size * max(size - b, 0), var(count) = c (c - 1)
 *              (Horvitz-Thompson: a bound, the sampler spreads its points
 *              more evenly than independent sampling)
 *     b >= m:  var(size) = b m / 12, var(count) = m / (12 b)
 *              (the renewal process's own: gaps of variance m^2 / 12)
 * Sums over traces add, and the two snapshots' variances are added for a
 * difference's standard error, sqrt(var_old + var_new).  A difference is marked
 * significant when |diff| > 3 stderr (about 1 in 370 by chance for a
 * normal estimate); traces taken exactly (size == block_size) have no
 * error, and any nonzero difference of exact figures is significant.  This
 * is tracemalloc's Snapshot.compare_to(old, "lineno") with the errors.
 *
 * Text from the inputs (paths, names, source) is the user's: controls and
 * invisible reordering characters are shown as their code ("<U+202E>",
 * cal_view_control) in the text and the HTML, as the reports do.
 */
#include "cal_diff.h"

#include "cal_json.h"
#include "cal_view.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The figures of a row.  Profiles: time (s), allocated bytes, peak live
   bytes, live bytes at the end.  Snapshots: bytes, blocks. */
enum { M_TIME, M_ALLOC, M_PEAK, M_END, NMET };
enum { M_SIZE, M_COUNT };

typedef struct item {
    const char *file, *name; /* the key: file, line, name ("" for none) */
    long line;
    const char *func;   /* shown beside a line (profiles), or NULL */
    const char *source; /* the line's source text, or NULL */
    double v[NMET], var[NMET];
} item;

typedef struct row {
    const char *file, *name, *func, *src_old, *src_new;
    long line;
    int in_old, in_new, changed;
    double change; /* |new - old| of the figure rows are sorted by */
    double old[NMET], nw[NMET], var_old[NMET], var_new[NMET];
} row;

typedef struct items {
    item *v;
    size_t n, cap;
} items;

/* The totals of one run, for the header. */
typedef struct side {
    double wall, py, nat, sys, wait, peak, alloc, time_all;
    int memory;
    const char *cwd;
    double ntraces, size, count, var_size, var_count; /* snapshots */
} side;

typedef struct diff {
    const cal_diff_opts *o;
    int snap; /* comparing snapshots */
    side s[2];
    row *rows;
    size_t nrows;
    char **owned; /* strings made here (traceback keys), freed at the end */
    size_t nowned, owned_cap;
    int failed; /* out of memory */
} diff;

/* ---- building the rows ------------------------------------------------- */

static item *push(diff *d, items *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        item *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            d->failed = 1;
            return NULL;
        }
        l->v = v;
        l->cap = cap;
    }
    item *it = &l->v[l->n++];
    memset(it, 0, sizeof *it);
    it->name = "";
    return it;
}

/* Keep `s` (malloc'd) until the diff is done; NULL on failure (freed). */
static const char *own(diff *d, char *s)
{
    if (!s) {
        d->failed = 1;
        return NULL;
    }
    if (d->nowned == d->owned_cap) {
        size_t cap = d->owned_cap ? 2 * d->owned_cap : 16;
        char **v = realloc(d->owned, cap * sizeof *v);
        if (!v) {
            free(s);
            d->failed = 1;
            return NULL;
        }
        d->owned = v;
        d->owned_cap = cap;
    }
    d->owned[d->nowned++] = s;
    return s;
}

static int key_cmp(const char *fa, long la, const char *na, const char *fb, long lb,
                   const char *nb)
{
    int c = strcmp(fa, fb);
    if (c)
        return c;
    if (la != lb)
        return la < lb ? -1 : 1;
    return strcmp(na, nb);
}

static int cmp_item(const void *x, const void *y)
{
    const item *a = x, *b = y;
    return key_cmp(a->file, a->line, a->name, b->file, b->line, b->name);
}

/* Sort by key and add the figures of equal keys together. */
static void coalesce(items *l)
{
    if (l->n == 0)
        return;
    qsort(l->v, l->n, sizeof *l->v, cmp_item);
    size_t w = 0;
    for (size_t i = 1; i < l->n; i++) {
        item *a = &l->v[w], *b = &l->v[i];
        if (cmp_item(a, b) == 0) {
            for (int m = 0; m < NMET; m++) {
                a->v[m] += b->v[m];
                a->var[m] += b->var[m];
            }
            if (!a->source)
                a->source = b->source;
        } else {
            l->v[++w] = *b;
        }
    }
    l->n = w + 1;
}

/* The figure rows are sorted by. */
static int sort_metric(const diff *d)
{
    if (d->snap)
        return M_SIZE;
    switch (d->o->sort) {
    case CAL_DIFF_SORT_ALLOC:
        return M_ALLOC;
    case CAL_DIFF_SORT_LIVE:
        return M_PEAK;
    case CAL_DIFF_SORT_END:
        return M_END;
    default:
        return M_TIME;
    }
}

static int cmp_row(const void *x, const void *y)
{
    const row *a = x, *b = y;
    if (a->change != b->change)
        return a->change > b->change ? -1 : 1;
    return key_cmp(a->file, a->line, a->name, b->file, b->line, b->name);
}

/* Merge the two runs' coalesced items into d->rows, sorted. */
static void merge(diff *d, items *a, items *b)
{
    coalesce(a);
    coalesce(b);
    d->rows = calloc(a->n + b->n + 1, sizeof *d->rows);
    if (!d->rows) {
        d->failed = 1;
        return;
    }
    size_t i = 0, k = 0;
    while (i < a->n || k < b->n) {
        int c = i == a->n ? 1 : k == b->n ? -1 : cmp_item(&a->v[i], &b->v[k]);
        row *r = &d->rows[d->nrows++];
        const item *key = c <= 0 ? &a->v[i] : &b->v[k];
        r->file = key->file;
        r->line = key->line;
        r->name = key->name;
        r->func = c >= 0 ? b->v[k].func : key->func;
        if (c <= 0) {
            r->in_old = 1;
            r->src_old = a->v[i].source;
            memcpy(r->old, a->v[i].v, sizeof r->old);
            memcpy(r->var_old, a->v[i].var, sizeof r->var_old);
            i++;
        }
        if (c >= 0) {
            r->in_new = 1;
            r->src_new = b->v[k].source;
            memcpy(r->nw, b->v[k].v, sizeof r->nw);
            memcpy(r->var_new, b->v[k].var, sizeof r->var_new);
            k++;
        }
        r->changed = r->src_old && r->src_new && strcmp(r->src_old, r->src_new) != 0;
    }
    int m = sort_metric(d);
    for (size_t r = 0; r < d->nrows; r++)
        d->rows[r].change = fabs(d->rows[r].nw[m] - d->rows[r].old[m]);
    qsort(d->rows, d->nrows, sizeof *d->rows, cmp_row);
}

/* ---- profiles ------------------------------------------------------------- */

static double times_all(const cal_jv *o)
{
    return cal_jv_getnum(o, "python_s", 0) + cal_jv_getnum(o, "native_s", 0) +
           cal_jv_getnum(o, "system_s", 0) + cal_jv_getnum(o, "waiting_s", 0);
}

static double alloc_of(const cal_jv *mem)
{
    return cal_jv_getnum(mem, "alloc_python_bytes", 0) +
           cal_jv_getnum(mem, "alloc_native_bytes", 0);
}

/* The text of line `no` in a file's source ([[line, text], ...] in line
   order), or NULL. */
static const char *source_line(const cal_jv *file, long no)
{
    const cal_jv *src = cal_jv_get(file, "source");
    size_t lo = 0, hi = cal_jv_len(src);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const cal_jv *pair = cal_jv_at(src, mid);
        double at = cal_jv_num(cal_jv_at(pair, 0), 0);
        if (at == (double)no)
            return cal_jv_str(cal_jv_at(pair, 1), NULL);
        if (at < (double)no)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static void profile_side(const cal_jv *root, side *s)
{
    const cal_jv *sum = cal_jv_get(root, "summary");
    const cal_jv *mem = cal_jv_get(sum, "memory");
    s->wall = cal_jv_getnum(sum, "wall_s", 0);
    s->py = cal_jv_getnum(sum, "python_s", 0);
    s->nat = cal_jv_getnum(sum, "native_s", 0);
    s->sys = cal_jv_getnum(sum, "system_s", 0);
    s->wait = cal_jv_getnum(sum, "waiting_s", 0);
    s->time_all = s->py + s->nat + s->sys + s->wait;
    s->memory = cal_jv_is(mem, CAL_JOBJ);
    s->peak = cal_jv_getnum(mem, "peak_bytes", 0);
    s->alloc = cal_jv_getnum(mem, "allocated_python_bytes", 0) +
               cal_jv_getnum(mem, "allocated_native_bytes", 0);
    s->cwd = cal_jv_getstr(cal_jv_get(root, "program"), "cwd", NULL);
}

static void profile_items(diff *d, const cal_jv *root, items *l)
{
    const cal_jv *files = cal_jv_get(root, "files");
    for (size_t fi = 0; fi < cal_jv_len(files) && !d->failed; fi++) {
        const cal_jv *f = cal_jv_at(files, fi);
        const char *path = cal_jv_getstr(f, "path", "?");
        const cal_jv *lines = cal_jv_get(f, "lines");
        if (d->o->by == CAL_DIFF_BY_FUNCTION) {
            const cal_jv *fns = cal_jv_get(f, "functions");
            for (size_t i = 0; i < cal_jv_len(fns); i++) {
                const cal_jv *fn = cal_jv_at(fns, i);
                item *it = push(d, l);
                if (!it)
                    return;
                it->file = path;
                it->name = cal_jv_getstr(fn, "name", "?");
                it->v[M_TIME] = times_all(cal_jv_get(fn, "total"));
                it->v[M_ALLOC] =
                    alloc_of(cal_jv_get(cal_jv_get(fn, "memory"), "total"));
                /* What a function holds: its own lines' (a function record
                   has no live figures). */
                for (size_t k = 0; k < cal_jv_len(lines); k++) {
                    const cal_jv *ln = cal_jv_at(lines, k);
                    if (strcmp(cal_jv_getstr(ln, "function", ""), it->name) != 0)
                        continue;
                    const cal_jv *mem = cal_jv_get(ln, "memory");
                    it->v[M_PEAK] += cal_jv_getnum(mem, "live_peak_bytes", 0);
                    it->v[M_END] += cal_jv_getnum(mem, "live_end_bytes", 0);
                }
            }
            continue;
        }
        item *fit = NULL;
        if (d->o->by == CAL_DIFF_BY_FILE) {
            if (!(fit = push(d, l)))
                return;
            fit->file = path;
            fit->v[M_TIME] = times_all(f);
        }
        for (size_t i = 0; i < cal_jv_len(lines); i++) {
            const cal_jv *ln = cal_jv_at(lines, i);
            const cal_jv *mem = cal_jv_get(ln, "memory");
            double v[NMET] = {times_all(ln), alloc_of(mem),
                              cal_jv_getnum(mem, "live_peak_bytes", 0),
                              cal_jv_getnum(mem, "live_end_bytes", 0)};
            if (fit) {
                for (int m = M_ALLOC; m < NMET; m++)
                    fit->v[m] += v[m];
                continue;
            }
            item *it = push(d, l);
            if (!it)
                return;
            it->file = path;
            it->line = (long)cal_jv_getnum(ln, "line", 0);
            it->func = cal_jv_getstr(ln, "function", NULL);
            it->source = source_line(f, it->line);
            memcpy(it->v, v, sizeof v);
        }
    }
}

/* ---- snapshots -------------------------------------------------------------- */

/* Per traceback: the sums of its traces. */
typedef struct tb_sum {
    double size, count, var_size, var_count;
    int used;
} tb_sum;

static const char *snap_string(const cal_snapshot *s, uint32_t i)
{
    return i < s->nstrings && s->strings[i] ? s->strings[i] : "?";
}

/* A traceback as text, most recent first: "a.py:3 < b.py:10" (owned). */
static const char *traceback_text(diff *d, const cal_snapshot *s,
                                  const cal_snap_traceback *tb)
{
    cal_buf b;
    cal_buf_init(&b);
    for (uint32_t i = 0; i < tb->nframes; i++) {
        if ((size_t)tb->first + i >= s->nframe_ids)
            break;
        uint32_t fi = s->frame_ids[tb->first + i];
        if (fi >= s->nframes)
            continue;
        cal_buf_printf(&b, "%s%s:%ld", i ? " < " : "",
                       snap_string(s, s->frames[fi].file), (long)s->frames[fi].line);
        if (tb->total > tb->nframes && i + 1 + tb->root_kept == tb->nframes)
            cal_buf_printf(&b, " < (%u frames)", (unsigned)(tb->total - tb->nframes));
    }
    if (!cal_buf_ok(&b) || !b.data) {
        cal_buf_free(&b);
        return b.failed ? (d->failed = 1, NULL) : "";
    }
    return own(d, b.data);
}

static void snapshot_side(const cal_snapshot *s, side *out)
{
    out->ntraces = (double)s->ntraces;
    out->memory = 1;
}

/* The snapshot's sampling mean (its meta's alloc_mean), 0 if unknown or
   exact (1). */
static double sampling_mean(const cal_snapshot *s)
{
    if (!s->meta_json)
        return 0;
    cal_jdoc doc;
    char err[64];
    double mean = 0;
    if (cal_jdoc_parse(&doc, s->meta_json, strlen(s->meta_json), err, sizeof err) == 0)
        mean = cal_jv_getnum(doc.root, "alloc_mean", 0);
    cal_jdoc_free(&doc);
    return mean > 1 ? mean : 0;
}

static void snapshot_items(diff *d, const cal_snapshot *s, items *l, side *sd)
{
    double mean = sampling_mean(s);
    tb_sum *sums = calloc(s->ntracebacks + 1, sizeof *sums);
    if (!sums) {
        d->failed = 1;
        return;
    }
    for (size_t i = 0; i < s->ntraces; i++) {
        const cal_snap_trace *t = &s->traces[i];
        if (t->traceback >= s->ntracebacks || t->block_size <= 0)
            continue; /* cal_snapshot_read refuses these; never trusted */
        double size = (double)t->size, block = (double)t->block_size, c = size / block;
        tb_sum *u = &sums[t->traceback];
        u->used = 1;
        u->size += size;
        u->count += c;
        if (mean && block >= mean) {
            u->var_size += block * mean / 12;
            u->var_count += mean / (12 * block);
        } else {
            u->var_size += size * fmax(size - block, 0);
            u->var_count += c * fmax(c - 1, 0);
        }
    }
    for (size_t i = 0; i < s->ntracebacks && !d->failed; i++) {
        const tb_sum *u = &sums[i];
        if (!u->used)
            continue;
        sd->size += u->size;
        sd->count += u->count;
        sd->var_size += u->var_size;
        sd->var_count += u->var_count;
        const cal_snap_traceback *tb = &s->tracebacks[i];
        item *it = push(d, l);
        if (!it)
            break;
        it->file = "<unknown>";
        if (tb->nframes > 0 && tb->first < s->nframe_ids &&
            s->frame_ids[tb->first] < s->nframes) {
            const cal_snap_frame *fr = &s->frames[s->frame_ids[tb->first]];
            it->file = snap_string(s, fr->file);
            it->line = fr->line;
        }
        if (d->o->by == CAL_DIFF_BY_FILE)
            it->line = 0;
        else if (d->o->by == CAL_DIFF_BY_TRACEBACK)
            it->name = traceback_text(d, s, tb);
        if (!it->name)
            break;
        it->v[M_SIZE] = u->size;
        it->v[M_COUNT] = u->count;
        it->var[M_SIZE] = u->var_size;
        it->var[M_COUNT] = u->var_count;
    }
    free(sums);
}

/* The standard error of a row's change in figure m, and whether the
   change is significant (|diff| > 3 stderr; any change of exact figures). */
static double stderr_of(const row *r, int m)
{
    return sqrt(r->var_old[m] + r->var_new[m]);
}

static int significant(const row *r, int m)
{
    double dv = r->nw[m] - r->old[m], se = stderr_of(r, m);
    return se > 0 ? fabs(dv) > 3 * se : dv != 0;
}

/* ---- formatting ----------------------------------------------------------- */

/* "419.7MB", "+20.0MB" (signed): decimal units, as the reports. */
static void fmt_bytes(char *dst, size_t cap, double b, int sign)
{
    static const char *const unit[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int u = 0;
    double a = fabs(b);
    while (a >= 999.95 && u < 5) {
        a /= 1000;
        u++;
    }
    const char *sg = b < 0 ? "-" : sign && b > 0 ? "+" : "";
    snprintf(dst, cap, u ? "%s%.1f%s" : "%s%.0f%s", sg, a, unit[u]);
}

static void fmt_seconds(char *dst, size_t cap, double s, int sign)
{
    if (fabs(s) < 0.005)
        s = 0; /* no "-0.00s" */
    const char *sg = s < 0 ? "-" : sign && s > 0 ? "+" : "";
    double a = fabs(s);
    if (a < 999.995)
        snprintf(dst, cap, "%s%.2fs", sg, a);
    else if (a < 1e7)
        snprintf(dst, cap, "%s%.0fs", sg, a);
    else
        snprintf(dst, cap, "%s>1e7s", sg);
}

static void fmt_count(char *dst, size_t cap, double c, int sign)
{
    const char *sg = c < 0 ? "-" : sign && c > 0 ? "+" : "";
    double a = fabs(c);
    if (a < 99999.5)
        snprintf(dst, cap, "%s%.0f", sg, a);
    else if (a < 99999.5e3)
        snprintf(dst, cap, "%s%.0fk", sg, a / 1e3);
    else if (a < 99999.5e6)
        snprintf(dst, cap, "%s%.0fM", sg, a / 1e6);
    else
        snprintf(dst, cap, "%s%.0fG", sg, a / 1e9);
}

/* One figure as text: m is a metric of this kind of diff. */
static void fmt_metric(const diff *d, int m, char *dst, size_t cap, double v, int sign)
{
    if (d->snap ? m == M_COUNT : m == M_TIME) {
        if (d->snap)
            fmt_count(dst, cap, v, sign);
        else
            fmt_seconds(dst, cap, v, sign);
    } else {
        fmt_bytes(dst, cap, v, sign);
    }
}

static const char *display_path(const char *path, const char *cwd)
{
    size_t n = cwd ? strlen(cwd) : 0;
    if (n && strncmp(path, cwd, n) == 0 && path[n] == '/')
        return path + n + 1;
    return path;
}

/* The row's place, as shown: "app.py:12", "app.py: main", "app.py", or
   the traceback.  Written to b (emptied first). */
static void place(const diff *d, const row *r, cal_buf *b)
{
    b->len = 0;
    const char *path = display_path(r->file, d->s[1].cwd ? d->s[1].cwd : d->s[0].cwd);
    if (d->snap && d->o->by == CAL_DIFF_BY_TRACEBACK)
        cal_buf_puts(b, *r->name ? r->name : "<no frames>");
    else if (r->line > 0)
        cal_buf_printf(b, "%s:%ld", path, r->line);
    else if (*r->name)
        cal_buf_printf(b, "%s: %s", path, r->name);
    else
        cal_buf_puts(b, path);
    cal_buf_add(b, "", 1);
    b->len--;
}

/* "new", "gone", "changed" (and, for snapshots, "*": significant). */
static const char *mark(const diff *d, const row *r)
{
    int sig = d->snap && significant(r, M_SIZE);
    if (!r->in_old)
        return sig ? "new *" : "new";
    if (!r->in_new)
        return sig ? "gone *" : "gone";
    if (r->changed)
        return "changed";
    return sig ? "*" : "";
}

/* ---- the terminal table ------------------------------------------------------- */

#define RESET "\033[0m"
#define BOLD "\033[1m"
#define DIM "\033[2m"
#define RED "\033[31m"
#define GREEN "\033[32m"

/* Columns of UTF-8 text as shown (controls as their code). */
static int text_cols(const char *s)
{
    int c = 0;
    while (*s) {
        size_t n;
        if (cal_view_control(s, &n)) {
            c += CAL_VIEW_CONTROL_COLS;
        } else {
            n = 1;
            while ((s[n] & 0xC0) == 0x80)
                n++;
            c += *s == '\t' ? 4 : 1;
        }
        s += n;
    }
    return c;
}

/* Append s cut to `cols` columns ("…" or "~" marks the cut), controls as
   their code, tabs as spaces. */
static void add_cut(cal_buf *out, const char *s, int cols, int tty)
{
    int cut = text_cols(s) > cols, room = cut ? cols - 1 : cols, c = 0;
    while (*s && c < room) {
        size_t n;
        unsigned cp = cal_view_control(s, &n);
        if (cp) {
            if (c + CAL_VIEW_CONTROL_COLS > room)
                break;
            cal_buf_printf(out, "<U+%04X>", cp);
            c += CAL_VIEW_CONTROL_COLS;
        } else if (*s == '\t') {
            int w = room - c < 4 ? room - c : 4;
            cal_buf_repeat(out, " ", w);
            c += w;
        } else {
            n = 1;
            while ((s[n] & 0xC0) == 0x80)
                n++;
            cal_buf_add(out, s, n);
            c++;
        }
        s += n;
    }
    if (cut && cols > 0)
        cal_buf_puts(out, tty ? "…" : "~");
}

/* Append s in `cols` columns, its start cut if it is longer ("…" or "~"
   first): for paths, whose end (file name, line) says the most. */
static void add_cut_left(cal_buf *out, const char *s, int cols, int tty)
{
    int over = text_cols(s) - cols;
    if (over <= 0 || cols < 2) {
        add_cut(out, s, cols, tty);
        return;
    }
    /* Skip characters until what is left fits in cols - 1. */
    while (*s && text_cols(s) > cols - 1) {
        size_t n = 1;
        if (!cal_view_control(s, &n))
            for (n = 1; (s[n] & 0xC0) == 0x80; n++)
                ;
        s += n;
    }
    cal_buf_puts(out, tty ? "…" : "~");
    add_cut(out, s, cols - 1, tty);
}

/* A column of the table: figure m's old, new, change or standard error,
   or the time's share of the run. */
enum { K_OLD, K_NEW, K_DIFF, K_ERR, K_PCT };

typedef struct col {
    const char *head;
    int m, kind, width, prio;
} col;

#define MAX_COLS 16
#define MIN_PLACE 30

static int choose_cols(const diff *d, col *c)
{
    static const char *const heads[NMET][3] = {{"time old", "time new", "time +/-"},
                                               {"alloc old", "alloc new", "alloc +/-"},
                                               {"peak old", "peak new", "peak +/-"},
                                               {"end old", "end new", "end +/-"}};
    int n = 0, sm = sort_metric(d);
    int memory = d->snap || d->s[0].memory || d->s[1].memory;
    if (d->snap) {
        static const char *const sheads[2][4] = {
            {"size old", "size new", "size +/-", "+/-err"},
            {"count old", "count new", "count +/-", "+/-err"}};
        for (int m = M_SIZE; m <= M_COUNT; m++)
            for (int k = K_OLD; k <= K_ERR; k++)
                c[n++] = (col){sheads[m][k], m, k, 10,
                               (m == M_SIZE ? 50 : 20) + (k == K_DIFF  ? 20
                                                          : k == K_ERR ? 10
                                                                       : 0)};
        return n;
    }
    for (int m = 0; m < NMET; m++) {
        if (m != M_TIME && !memory)
            continue;
        if (m == M_END) { /* what is still held at the end: its change only */
            c[n++] = (col){"end +/-", m, K_DIFF, 10, sm == m ? 100 : 31};
            continue;
        }
        for (int k = K_OLD; k <= K_DIFF; k++) {
            /* The sorted figure first, then the changes (time's, alloc's,
               peak's), then the other runs' figures. */
            int prio = sm == m       ? 80 + (k == K_DIFF ? 20 : 0)
                       : k == K_DIFF ? 35 - m
                                     : 10;
            c[n++] = (col){heads[m][k], m, k, m == M_TIME ? 9 : 10, prio};
        }
        if (m == M_TIME)
            c[n++] = (col){"% of run", m, K_PCT, 10, sm == m ? 90 : 35};
    }
    return n;
}

static void cell(const diff *d, const row *r, const col *c, char *dst, size_t cap)
{
    dst[0] = '\0';
    double o = r->old[c->m], nv = r->nw[c->m];
    switch (c->kind) {
    case K_OLD:
        if (r->in_old)
            fmt_metric(d, c->m, dst, cap, o, 0);
        break;
    case K_NEW:
        if (r->in_new)
            fmt_metric(d, c->m, dst, cap, nv, 0);
        break;
    case K_DIFF:
        fmt_metric(d, c->m, dst, cap, nv - o, 1);
        break;
    case K_ERR:
        fmt_metric(d, c->m, dst, cap, stderr_of(r, c->m), 0);
        break;
    case K_PCT: {
        double a = d->s[0].time_all > 0 ? 100 * o / d->s[0].time_all : 0;
        double b = d->s[1].time_all > 0 ? 100 * nv / d->s[1].time_all : 0;
        snprintf(dst, cap, "%.0f%s%.0f%%", a > 999 ? 999 : a, d->o->tty ? "→" : "->",
                 b > 999 ? 999 : b);
        break;
    }
    }
}

static void header_row(cal_buf *out, const char *label, const char *a, const char *b,
                       const char *c, const char *tail)
{
    cal_buf_printf(out, "  %-13s %10s %10s %10s%s\n", label, a, b, c, tail);
}

/* old, new and change of one total in the header. */
static void total_row(const diff *d, cal_buf *out, const char *label, int m, double a,
                      double b, int ratio)
{
    char x[24], y[24], z[24], tail[48] = "";
    fmt_metric(d, m, x, sizeof x, a, 0);
    fmt_metric(d, m, y, sizeof y, b, 0);
    fmt_metric(d, m, z, sizeof z, b - a, 1);
    if (ratio && a > 0)
        snprintf(tail, sizeof tail, "  x%.2f", b / a);
    header_row(out, label, x, y, z, tail);
}

static void text_header(const diff *d, cal_buf *out)
{
    const side *a = &d->s[0], *b = &d->s[1];
    int tty = d->o->tty;
    if (tty)
        cal_buf_puts(out, BOLD);
    int room = ((d->o->width < 60 ? 60 : d->o->width) - 19) / 2;
    cal_buf_puts(out, "calipers diff: ");
    add_cut_left(out, d->o->old_name ? d->o->old_name : "old", room, tty);
    cal_buf_puts(out, tty ? " → " : " -> ");
    add_cut_left(out, d->o->new_name ? d->o->new_name : "new", room, tty);
    cal_buf_puts(out, tty ? RESET "\n" : "\n");
    header_row(out, "", "old", "new", "+/-", "");
    if (d->snap) {
        char x[24], y[24], z[24];
        snprintf(x, sizeof x, "%.0f", a->ntraces);
        snprintf(y, sizeof y, "%.0f", b->ntraces);
        snprintf(z, sizeof z, "%+.0f", b->ntraces - a->ntraces);
        header_row(out, "traces", x, y, z, "");
        total_row(d, out, "size", M_SIZE, a->size, b->size, 1);
        total_row(d, out, "blocks", M_COUNT, a->count, b->count, 1);
        fmt_bytes(x, sizeof x, sqrt(a->var_size + b->var_size), 0);
        cal_buf_printf(out, "  (the size's change has a standard error of %s)\n", x);
        return;
    }
    total_row(d, out, "wall", M_TIME, a->wall, b->wall, 1);
    total_row(d, out, "CPU", M_TIME, a->py + a->nat + a->sys, b->py + b->nat + b->sys,
              1);
    total_row(d, out, "  Python", M_TIME, a->py, b->py, 0);
    total_row(d, out, "  native", M_TIME, a->nat, b->nat, 0);
    total_row(d, out, "  system", M_TIME, a->sys, b->sys, 0);
    total_row(d, out, "waiting", M_TIME, a->wait, b->wait, 0);
    if (a->memory || b->memory) {
        total_row(d, out, "memory peak", M_PEAK, a->peak, b->peak, 1);
        total_row(d, out, "allocated", M_ALLOC, a->alloc, b->alloc, 1);
    }
}

static size_t shown_rows(const diff *d)
{
    size_t top = d->o->top > 0 ? (size_t)d->o->top : d->nrows;
    return top < d->nrows ? top : d->nrows;
}

static const char *by_name(const diff *d)
{
    static const char *const names[] = {"line", "function", "file", "traceback"};
    int by = d->o->by;
    return by >= 0 && by <= CAL_DIFF_BY_TRACEBACK ? names[by] : "line";
}

static const char *sort_name(const diff *d)
{
    static const char *const names[NMET] = {"time", "alloc", "live", "end"};
    return d->snap ? "size" : names[sort_metric(d)];
}

static void render_text(const diff *d, cal_buf *out)
{
    int width = d->o->width < 60 ? 60 : d->o->width, tty = d->o->tty;
    text_header(d, out);
    col all[MAX_COLS], on[MAX_COLS];
    int n = choose_cols(d, all), used = 9; /* the mark column */
    for (int i = 0; i < n; i++)
        used += all[i].width;
    /* Drop the least important columns until the place has room. */
    int keep[MAX_COLS];
    for (int i = 0; i < n; i++)
        keep[i] = 1;
    while (width - used < MIN_PLACE) {
        int worst = -1;
        for (int i = 0; i < n; i++)
            if (keep[i] && (worst < 0 || all[i].prio < all[worst].prio))
                worst = i;
        if (worst < 0 || all[worst].prio >= 100)
            break;
        keep[worst] = 0;
        used -= all[worst].width;
    }
    int non = 0;
    for (int i = 0; i < n; i++)
        if (keep[i])
            on[non++] = all[i];
    size_t shown = shown_rows(d);
    cal_buf_printf(out, "\n%s rows by %s change (%zu of %zu):\n", by_name(d),
                   sort_name(d), shown, d->nrows);
    if (tty)
        cal_buf_puts(out, DIM);
    for (int i = 0; i < non; i++)
        cal_buf_printf(out, "%*s", on[i].width, on[i].head);
    cal_buf_printf(out, " %-7s %s", "", d->snap ? "where" : "place");
    cal_buf_puts(out, tty ? RESET "\n" : "\n");
    cal_buf pl;
    cal_buf_init(&pl);
    int sm = sort_metric(d);
    for (size_t ri = 0; ri < shown; ri++) {
        const row *r = &d->rows[ri];
        for (int i = 0; i < non; i++) {
            char v[32];
            cell(d, r, &on[i], v, sizeof v);
            double dv = r->nw[on[i].m] - r->old[on[i].m];
            const char *colour = on[i].kind == K_DIFF && on[i].m == sm && dv != 0
                                     ? (dv > 0 ? RED : GREEN)
                                     : NULL;
            if (tty && colour)
                cal_buf_puts(out, colour);
            int pad = on[i].width - text_cols(v);
            cal_buf_repeat(out, " ", pad > 0 ? pad : 0);
            cal_buf_puts(out, v);
            if (tty && colour)
                cal_buf_puts(out, RESET);
        }
        const char *mk = mark(d, r);
        if (tty && *mk)
            cal_buf_puts(out, BOLD);
        cal_buf_printf(out, " %-7s ", mk);
        if (tty && *mk)
            cal_buf_puts(out, RESET);
        place(d, r, &pl);
        int room = width - used;
        const char *p = pl.data ? pl.data : "";
        add_cut_left(out, p, room, tty);
        room -= text_cols(p);
        const char *src = r->src_new ? r->src_new : r->src_old;
        if (!d->snap && d->o->by == CAL_DIFF_BY_LINE && r->func && room > 4) {
            cal_buf_puts(out, " ");
            add_cut(out, r->func, room - 1, tty);
            room -= 1 + text_cols(r->func);
        }
        if (src && room > 6) {
            while (*src == ' ' || *src == '\t')
                src++;
            cal_buf_puts(out, "  ");
            if (tty)
                cal_buf_puts(out, DIM);
            add_cut(out, src, room - 2, tty);
            if (tty)
                cal_buf_puts(out, RESET);
        }
        cal_buf_puts(out, "\n");
    }
    cal_buf_free(&pl);
    /* Short lines: the narrowest table is 60 columns. */
    cal_buf_puts(out, "\n+/-: new minus old.  new, gone: only in the new, old run.\n");
    if (d->snap)
        cal_buf_puts(out, "+/-err: the change's standard error.\n"
                          "*: a change larger than 3 standard errors.\n");
    else
        cal_buf_puts(out, "changed: the line's source text differs (lines are\n"
                          "matched by number: an edit above a line shifts it).\n");
}

/* ---- HTML ------------------------------------------------------------------ */

static const char HTML_HEAD[] =
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
    "style-src 'unsafe-inline'\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<title>calipers diff</title>\n<style>\n"
    ":root{color-scheme:light dark;--up:#c0392b;--down:#1e8449;--rule:#8884}\n"
    "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em}\n"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}\n"
    "th,td{padding:2px 8px;border-bottom:1px solid var(--rule);text-align:right;"
    "white-space:nowrap}\n"
    "th{position:sticky;top:0;background:Canvas}\n"
    "td.place,th.place{text-align:left}\n"
    "td.src{text-align:left;font-family:ui-monospace,monospace;white-space:pre;"
    "opacity:0.75}\n"
    ".up{color:var(--up)}.down{color:var(--down)}.mark{font-weight:bold;text-align:"
    "left}\n"
    "p.note{opacity:0.75}\n"
    "</style>\n</head>\n<body>\n";

static void html_cell(cal_buf *out, const char *cls, const char *text)
{
    if (cls && *cls)
        cal_buf_printf(out, "<td class=\"%s\">", cls);
    else
        cal_buf_puts(out, "<td>");
    cal_view_add_html(out, text);
    cal_buf_puts(out, "</td>");
}

static void html_total(const diff *d, cal_buf *out, const char *label, int m, double a,
                       double b)
{
    char x[24], y[24], z[24];
    fmt_metric(d, m, x, sizeof x, a, 0);
    fmt_metric(d, m, y, sizeof y, b, 0);
    fmt_metric(d, m, z, sizeof z, b - a, 1);
    cal_buf_puts(out, "<tr>");
    html_cell(out, "place", label);
    html_cell(out, NULL, x);
    html_cell(out, NULL, y);
    html_cell(out, b > a ? "up" : b < a ? "down" : NULL, z);
    cal_buf_puts(out, "</tr>\n");
}

static void render_html(const diff *d, cal_buf *out)
{
    const side *a = &d->s[0], *b = &d->s[1];
    cal_buf_puts(out, HTML_HEAD);
    cal_buf_puts(out, "<h1>calipers diff</h1>\n<p><code>");
    cal_view_add_html(out, d->o->old_name ? d->o->old_name : "old");
    cal_buf_puts(out, "</code> → <code>");
    cal_view_add_html(out, d->o->new_name ? d->o->new_name : "new");
    cal_buf_puts(out,
                 "</code></p>\n<table id=\"totals\">\n<tr><th class=\"place\"></th>"
                 "<th>old</th><th>new</th><th>+/-</th></tr>\n");
    if (d->snap) {
        html_total(d, out, "size", M_SIZE, a->size, b->size);
        html_total(d, out, "blocks", M_COUNT, a->count, b->count);
    } else {
        html_total(d, out, "wall", M_TIME, a->wall, b->wall);
        html_total(d, out, "CPU", M_TIME, a->py + a->nat + a->sys,
                   b->py + b->nat + b->sys);
        html_total(d, out, "Python", M_TIME, a->py, b->py);
        html_total(d, out, "native", M_TIME, a->nat, b->nat);
        html_total(d, out, "system", M_TIME, a->sys, b->sys);
        html_total(d, out, "waiting", M_TIME, a->wait, b->wait);
        if (a->memory || b->memory) {
            html_total(d, out, "memory peak", M_PEAK, a->peak, b->peak);
            html_total(d, out, "allocated", M_ALLOC, a->alloc, b->alloc);
        }
    }
    col c[MAX_COLS];
    int n = choose_cols(d, c), sm = sort_metric(d);
    size_t shown = shown_rows(d);
    cal_buf_printf(out, "</table>\n<h2>By %s, sorted by %s change (%zu of %zu)</h2>\n",
                   by_name(d), sort_name(d), shown, d->nrows);
    cal_buf_puts(out, "<table id=\"rows\">\n<tr>");
    for (int i = 0; i < n; i++)
        cal_buf_printf(out, "<th>%s</th>", c[i].head);
    cal_buf_printf(out, "<th class=\"place\"></th><th class=\"place\">%s</th>%s</tr>\n",
                   d->snap ? "where" : "place",
                   d->o->by == CAL_DIFF_BY_LINE && !d->snap
                       ? "<th class=\"place\">source</th>"
                       : "");
    cal_buf pl;
    cal_buf_init(&pl);
    for (size_t ri = 0; ri < shown; ri++) {
        const row *r = &d->rows[ri];
        cal_buf_puts(out, "<tr>");
        for (int i = 0; i < n; i++) {
            char v[32];
            cell(d, r, &c[i], v, sizeof v);
            double dv = r->nw[c[i].m] - r->old[c[i].m];
            html_cell(out,
                      c[i].kind == K_DIFF && c[i].m == sm && dv
                          ? (dv > 0 ? "up" : "down")
                          : NULL,
                      v);
        }
        html_cell(out, "mark", mark(d, r));
        place(d, r, &pl);
        if (!d->snap && d->o->by == CAL_DIFF_BY_LINE && r->func)
            cal_buf_printf(&pl, " %s", r->func);
        html_cell(out, "place", pl.data ? pl.data : "");
        if (!d->snap && d->o->by == CAL_DIFF_BY_LINE) {
            const char *src = r->src_new ? r->src_new : r->src_old;
            html_cell(out, "src", src ? src : "");
        }
        cal_buf_puts(out, "</tr>\n");
    }
    cal_buf_free(&pl);
    cal_buf_printf(
        out,
        "</table>\n<p class=\"note\">+/- is new minus old. %s</p>\n"
        "</body>\n</html>\n",
        d->snap ? "+/-err is its standard error; * marks a change larger than "
                  "3 standard errors."
                : "new/gone: only in the new/old run; changed: the line's source "
                  "differs (lines are matched by number, so an edit above a "
                  "line shifts it).");
}

/* ---- JSON ------------------------------------------------------------------ */

static void json_triple(const diff *d, cal_json *j, const char *key, const row *r,
                        int m)
{
    cal_json_key(j, key);
    cal_json_flat(j);
    cal_json_array_begin(j);
    int secs = !d->snap && m == M_TIME;
    double v[3] = {r->old[m], r->nw[m], r->nw[m] - r->old[m]};
    for (int i = 0; i < 3; i++) {
        if (secs)
            cal_json_fixed(j, v[i], 6);
        else if (d->snap && m == M_COUNT)
            cal_json_fixed(j, v[i], 2);
        else
            cal_json_int(j, (int64_t)llround(v[i]));
    }
    cal_json_array_end(j);
}

static void json_side(const diff *d, cal_json *j, const side *s)
{
    cal_json_object_begin(j);
    if (d->snap) {
        cal_json_key(j, "traces");
        cal_json_int(j, (int64_t)s->ntraces);
        cal_json_key(j, "size_bytes");
        cal_json_int(j, (int64_t)llround(s->size));
        cal_json_key(j, "count");
        cal_json_fixed(j, s->count, 2);
    } else {
        static const char *const keys[] = {"wall_s", "python_s", "native_s", "system_s",
                                           "waiting_s"};
        double v[] = {s->wall, s->py, s->nat, s->sys, s->wait};
        for (int i = 0; i < 5; i++) {
            cal_json_key(j, keys[i]);
            cal_json_fixed(j, v[i], 6);
        }
        cal_json_key(j, "peak_bytes");
        if (s->memory)
            cal_json_int(j, (int64_t)llround(s->peak));
        else
            cal_json_null(j);
        cal_json_key(j, "allocated_bytes");
        if (s->memory)
            cal_json_int(j, (int64_t)llround(s->alloc));
        else
            cal_json_null(j);
    }
    cal_json_object_end(j);
}

static void render_json(const diff *d, cal_buf *out)
{
    cal_json j;
    cal_json_init(&j, out, 1);
    cal_json_object_begin(&j);
    cal_json_key(&j, "schema");
    cal_json_string(&j, "calipers-diff/1");
    cal_json_key(&j, "kind");
    cal_json_string(&j, d->snap ? "snapshots" : "profiles");
    cal_json_key(&j, "by");
    cal_json_string(&j, by_name(d));
    cal_json_key(&j, "sort");
    cal_json_string(&j, sort_name(d));
    cal_json_key(&j, "old");
    json_side(d, &j, &d->s[0]);
    cal_json_key(&j, "new");
    json_side(d, &j, &d->s[1]);
    cal_json_key(&j, "rows_total");
    cal_json_int(&j, (int64_t)d->nrows);
    cal_json_key(&j, "rows");
    cal_json_array_begin(&j);
    size_t shown = shown_rows(d);
    for (size_t i = 0; i < shown; i++) {
        const row *r = &d->rows[i];
        cal_json_flat(&j);
        cal_json_object_begin(&j);
        cal_json_key(&j, "path");
        cal_json_string(&j, r->file);
        if (d->o->by == CAL_DIFF_BY_LINE || d->o->by == CAL_DIFF_BY_TRACEBACK) {
            cal_json_key(&j, "line");
            cal_json_int(&j, r->line);
        }
        if (!d->snap && (d->o->by == CAL_DIFF_BY_FUNCTION || r->func)) {
            cal_json_key(&j, "function");
            cal_json_string(&j, d->o->by == CAL_DIFF_BY_FUNCTION ? r->name : r->func);
        }
        if (d->snap && d->o->by == CAL_DIFF_BY_TRACEBACK) {
            cal_json_key(&j, "traceback");
            cal_json_string(&j, r->name);
        }
        cal_json_key(&j, "status");
        cal_json_string(&j, !r->in_old ? "new" : !r->in_new ? "gone" : "both");
        if (!d->snap) {
            cal_json_key(&j, "changed");
            cal_json_bool(&j, r->changed);
            json_triple(d, &j, "time_s", r, M_TIME);
            json_triple(d, &j, "alloc_bytes", r, M_ALLOC);
            json_triple(d, &j, "live_peak_bytes", r, M_PEAK);
            json_triple(d, &j, "live_end_bytes", r, M_END);
        } else {
            json_triple(d, &j, "size_bytes", r, M_SIZE);
            cal_json_key(&j, "size_stderr");
            cal_json_int(&j, (int64_t)llround(stderr_of(r, M_SIZE)));
            cal_json_key(&j, "size_significant");
            cal_json_bool(&j, significant(r, M_SIZE));
            json_triple(d, &j, "count", r, M_COUNT);
            cal_json_key(&j, "count_stderr");
            cal_json_fixed(&j, stderr_of(r, M_COUNT), 2);
            cal_json_key(&j, "count_significant");
            cal_json_bool(&j, significant(r, M_COUNT));
        }
        cal_json_object_end(&j);
    }
    cal_json_array_end(&j);
    cal_json_object_end(&j);
    cal_buf_puts(out, "\n");
}

/* ---- entry points ------------------------------------------------------------ */

static int finish(diff *d, items *a, items *b, cal_buf *out, char *err, size_t cap)
{
    if (!d->failed)
        merge(d, a, b);
    free(a->v);
    free(b->v);
    if (!d->failed) {
        if (d->o->format == CAL_DIFF_HTML)
            render_html(d, out);
        else if (d->o->format == CAL_DIFF_JSON)
            render_json(d, out);
        else
            render_text(d, out);
    }
    for (size_t i = 0; i < d->nowned; i++)
        free(d->owned[i]);
    free(d->owned);
    free(d->rows);
    if (d->failed || !cal_buf_ok(out)) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    return 0;
}

int cal_diff_profiles(const cal_jv *old, const cal_jv *nw, const cal_diff_opts *o,
                      cal_buf *out, char *err, size_t cap)
{
    if (o->by == CAL_DIFF_BY_TRACEBACK) {
        snprintf(err, cap,
                 "--by traceback compares snapshots, not profiles "
                 "(line, function or file)");
        return -1;
    }
    diff d = {.o = o};
    items a = {0}, b = {0};
    profile_side(old, &d.s[0]);
    profile_side(nw, &d.s[1]);
    profile_items(&d, old, &a);
    profile_items(&d, nw, &b);
    return finish(&d, &a, &b, out, err, cap);
}

int cal_diff_snapshots(const cal_snapshot *old, const cal_snapshot *nw,
                       const cal_diff_opts *o, cal_buf *out, char *err, size_t cap)
{
    if (o->by == CAL_DIFF_BY_FUNCTION) {
        snprintf(err, cap,
                 "--by function compares profiles, not snapshots "
                 "(line, traceback or file)");
        return -1;
    }
    diff d = {.o = o, .snap = 1};
    items a = {0}, b = {0};
    snapshot_side(old, &d.s[0]);
    snapshot_side(nw, &d.s[1]);
    snapshot_items(&d, old, &a, &d.s[0]);
    snapshot_items(&d, nw, &b, &d.s[1]);
    return finish(&d, &a, &b, out, err, cap);
}
