/*
 * cal_text — the terminal report, rendered from a parsed JSON profile (see
 * cal_view.h).  Deterministic: the same profile, width and mode give the
 * same bytes, so tests compare it with golden files.
 *
 * WHAT IT SHOWS.  A header (the program, wall time, the CPU split, the
 * memory peak with a sparkline of the footprint and its growth rate); then,
 * per file, the lines that matter (at least min_percent of the program's
 * time or of its allocated bytes) with one line of context each side, in
 * source order, most important file first; then the file's functions; then
 * the likely leaks; then the profile's notes.  Rows are never wrapped: the
 * source text is cut to the width, and when the width is short the least
 * important columns go first (the line's timeline, copy volume, held bytes,
 * Python share).  At most max_rows source rows in all: the lines that matter
 * most are kept.
 *
 * Text from the profile (source, paths, names) is the user's, not ours: a
 * control character in it, or an invisible one that reorders the text
 * around it (U+202E, the "Trojan Source" bidirectional overrides and
 * isolates), is shown as its code, "<U+202E>" (cal_view_control), so a
 * profile can neither move the cursor or change colours on the terminal
 * that shows it nor make the source shown differ from the source run.
 */
#define _GNU_SOURCE /* qsort_r */
#include "cal_view.h"

#include "cal_stacks.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading the profile ------------------------------------------------ */

typedef struct times {
    double py, nat, sys, wait;
    double gc;   /* of py + nat + sys, in the garbage collector */
    double runq; /* of wait, runnable with no CPU (preempted); the rest blocked */
} times;

static times get_times(const cal_jv *o)
{
    times t = {cal_jv_getnum(o, "python_s", 0), cal_jv_getnum(o, "native_s", 0),
               cal_jv_getnum(o, "system_s", 0), cal_jv_getnum(o, "waiting_s", 0),
               cal_jv_getnum(o, "gc_s", 0),     cal_jv_getnum(o, "preempted_s", 0)};
    return t;
}

static double t_all(times t) { return t.py + t.nat + t.sys + t.wait; }

static double t_cpu(times t) { return t.py + t.nat + t.sys; }

/* Bytes allocated by a line or function record's memory (or volume) object. */
static double alloc_of(const cal_jv *mem)
{
    return cal_jv_getnum(mem, "alloc_python_bytes", 0) +
           cal_jv_getnum(mem, "alloc_native_bytes", 0);
}

/* ---- text helpers ------------------------------------------------------ */

/* Our sentences join a number to its unit with GLUE ("0.68 s"), shown as a
   space where a wrapped line is never broken.  (A GLUE byte in the user's
   text is shown as a space too: harmless.) */
#define GLUE '\x01'

/* The character at p: its bytes (*len) and the columns it is shown in (a
   tab four spaces, a control its code, anything else one column). */
static int glyph(const char *p, size_t *len)
{
    if (*p == '\t' || *p == GLUE) {
        *len = 1;
        return *p == '\t' ? 4 : 1;
    }
    if (cal_view_control(p, len))
        return CAL_VIEW_CONTROL_COLS;
    size_t n = 1;
    while ((p[n] & 0xC0) == 0x80)
        n++;
    *len = n;
    return 1;
}

/* Display columns of UTF-8 text, as add_text shows it. */
static int text_width(const char *s)
{
    int c = 0;
    size_t n;
    for (; *s; s += n)
        c += glyph(s, &n);
    return c;
}

/* Append `s` cut to `cols` columns ("…" or "~" marks the cut), controls as
   their code (cal_view_control), tabs as four spaces. */
static void add_text(cal_buf *out, const char *s, int cols, int tty)
{
    int cut = text_width(s) > cols;
    int room = cut ? cols - 1 : cols;
    int c = 0;
    size_t n;
    for (const char *p = s; *p && c < room; p += n) {
        int w = glyph(p, &n);
        if (*p == '\t') {
            w = room - c < 4 ? room - c : 4;
            cal_buf_repeat(out, " ", w);
        } else if (*p == GLUE) {
            cal_buf_puts(out, " ");
        } else if (w == CAL_VIEW_CONTROL_COLS) {
            if (c + w > room)
                break; /* never half a code */
            size_t len;
            cal_buf_printf(out, "<U+%04X>", cal_view_control(p, &len));
        } else {
            cal_buf_add(out, p, n);
        }
        c += w;
    }
    if (cut && cols > 0)
        cal_buf_puts(out, tty ? "…" : "~");
}

/* Append text word-wrapped to `width` columns, continuation lines indented
   by `indent` spaces.  Prose is wrapped, never cut (only table rows are):
   a word longer than the room left starts a line of its own and is printed
   whole even if wider than the line, since it may be a path the reader has
   to copy (the terminal folds it). */
static void add_wrapped(cal_buf *out, const char *text, int width, int indent, int tty)
{
    cal_buf word;
    cal_buf_init(&word);
    int col = 0;
    const char *s = text;
    while (*s) {
        while (*s == ' ')
            s++;
        const char *e = s;
        while (*e && *e != ' ')
            e++;
        if (e == s)
            break;
        word.len = 0;
        cal_buf_add(&word, s, (size_t)(e - s));
        if (!cal_buf_ok(&word))
            break; /* out of memory: the rest of this sentence is lost */
        int wl = text_width(word.data);
        if (col > indent && col + 1 + wl > width) {
            cal_buf_puts(out, "\n");
            cal_buf_repeat(out, " ", indent);
            col = indent;
        } else if (col > 0) {
            cal_buf_puts(out, " ");
            col++;
        }
        add_text(out, word.data, INT_MAX, tty);
        col += wl;
        s = e;
    }
    cal_buf_free(&word);
    cal_buf_puts(out, "\n");
}

/* "419.7MB" in columns, "419.7 MB" in prose (spaced): decimal units. */
static void format_bytes(char *dst, size_t cap, double b, int spaced)
{
    static const char *const unit[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int u = 0;
    while (fabs(b) >= 999.95 && u < 5) {
        b /= 1000;
        u++;
    }
    snprintf(dst, cap, u ? "%.1f%s%s" : "%.0f%s%s", b, spaced ? "\x01" : "", unit[u]);
}

static void human_bytes(char *dst, size_t cap, double b)
{
    format_bytes(dst, cap, b, 0);
}

static void prose_bytes(char *dst, size_t cap, double b)
{
    format_bytes(dst, cap, b, 1);
}

/* A share in at most 5 columns (a profile whose parts exceed its whole,
   hand-made or corrupt, shows ">999%"). */
static void percent(char *dst, size_t cap, double part, double whole)
{
    if (whole <= 0 || part <= 0)
        dst[0] = '\0';
    else if (part / whole < 0.005)
        snprintf(dst, cap, "<1%%");
    else if (part / whole >= 9.995)
        snprintf(dst, cap, ">999%%");
    else
        snprintf(dst, cap, "%.0f%%", 100 * part / whole);
}

/* A duration in at most 8 columns: seconds, then hours, then years. */
static void human_seconds(char *dst, size_t cap, double s)
{
    if (s < 999.995)
        snprintf(dst, cap, "%.2fs", s);
    else if (s < 999999.5)
        snprintf(dst, cap, "%.0fs", s);
    else if (s / 3600 < 999999.5)
        snprintf(dst, cap, "%.0fh", s / 3600);
    else if (s / 31557600 < 999999.5)
        snprintf(dst, cap, "%.0fy", s / 31557600);
    else
        snprintf(dst, cap, ">999999y");
}

/* Columns of leading blanks (a tab is 4); -1 for a blank line. */
static int indent_of(const char *s)
{
    int c = 0;
    for (; *s == ' ' || *s == '\t'; s++)
        c += *s == '\t' ? 4 : 1;
    return *s ? c : -1;
}

/* s after `cols` columns of its leading blanks. */
static const char *dedent(const char *s, int cols)
{
    int c = 0;
    while (c < cols && (*s == ' ' || *s == '\t'))
        c += *s++ == '\t' ? 4 : 1;
    return s;
}

static const char *display_path(const char *path, const char *cwd)
{
    size_t n = cwd ? strlen(cwd) : 0;
    if (n && strncmp(path, cwd, n) == 0 && path[n] == '/')
        return path + n + 1;
    return path;
}

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* ---- glyphs and colour ------------------------------------------------- */

#define RESET "\033[0m"
#define BOLD "\033[1m"
#define DIM "\033[2m"
#define RED "\033[31m"

/* Python, native, system, waiting. */
static const char *const split_color[4] = {"\033[34m", "\033[32m", "\033[33m",
                                           "\033[90m"};
static const char *const split_glyph[4] = {"█", "▓", "▒", "░"};
static const char split_ascii[4] = {'#', '=', '-', '.'};

static void style(cal_buf *out, int tty, const char *code)
{
    if (tty)
        cal_buf_puts(out, code);
}

/* A bar of `cells` cells split in proportion to the four kinds of time
   (largest remainder, so the cells always add up). */
static void add_split(cal_buf *out, times t, int cells, int tty)
{
    double v[4] = {t.py, t.nat, t.sys, t.wait}, all = t_all(t);
    int n[4] = {0}, used = 0;
    if (all <= 0) {
        cal_buf_repeat(out, " ", cells);
        return;
    }
    double rem[4];
    for (int k = 0; k < 4; k++) {
        double exact = v[k] / all * cells;
        n[k] = (int)exact;
        rem[k] = exact - n[k];
        used += n[k];
    }
    while (used < cells) {
        int best = 0;
        for (int k = 1; k < 4; k++)
            if (rem[k] > rem[best])
                best = k;
        n[best]++;
        rem[best] = -1;
        used++;
    }
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < n[k]; i++) {
            if (tty) {
                if (i == 0)
                    cal_buf_puts(out, split_color[k]);
                cal_buf_puts(out, split_glyph[k]);
            } else
                cal_buf_add(out, &split_ascii[k], 1);
        }
    style(out, tty, RESET);
}

static const char *const spark_tty[8] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
/* (None of the split's glyphs: a sparkline next to a split must not read
   as one.) */
static const char spark_ascii[8] = {'_', ',', ':', ';', '+', 'i', 'l', '|'};

/* A sparkline of a [[seconds, bytes], ...] timeline over [0, wall]: each
   cell shows the highest value in its span (the last value before it when
   no point falls in it); blank where nothing was held. */
static void add_spark(cal_buf *out, const cal_jv *tl, double wall, int cells, int tty)
{
    size_t n = cal_jv_len(tl);
    double top = 0;
    for (size_t i = 0; i < n; i++)
        top = fmax(top, cal_jv_num(cal_jv_at(cal_jv_at(tl, i), 1), 0));
    if (top <= 0 || wall <= 0) {
        cal_buf_repeat(out, " ", cells);
        return;
    }
    size_t i = 0;
    double last = 0;
    for (int c = 0; c < cells; c++) {
        double end = wall * (c + 1) / cells, v = last, seen = -1;
        for (; i < n; i++) {
            const cal_jv *pt = cal_jv_at(tl, i);
            if (cal_jv_num(cal_jv_at(pt, 0), 0) > end)
                break;
            last = cal_jv_num(cal_jv_at(pt, 1), 0);
            seen = fmax(seen, last);
        }
        if (seen >= 0)
            v = seen;
        if (v <= 0) {
            cal_buf_puts(out, " ");
            continue;
        }
        int k = (int)ceil(v / top * 8) - 1;
        k = k < 0 ? 0 : k > 7 ? 7 : k;
        if (tty)
            cal_buf_puts(out, spark_tty[k]);
        else
            cal_buf_add(out, &spark_ascii[k], 1);
    }
}

/* ---- the report --------------------------------------------------------- */

typedef struct report {
    const cal_jv *root;
    const cal_view_opts *o;
    cal_buf *out;
    int width, tty;
    const char *cwd;
    double wall;      /* the run's wall time */
    double time_all;  /* every thread's time: the denominator of time shares */
    double alloc_all; /* bytes allocated in all */
    int memory;       /* memory was profiled */
    int gpu;          /* the GPU was sampled */
    int summed;       /* several threads or processes: their times add up */
    int gc;           /* the garbage collector took enough time to show per line */
    int runq;         /* threads waited for a CPU long enough to show per line */
} report;

/* A line's share of the program: the larger of its share of time and of
   allocated bytes. */
static double share(const report *r, times t, double alloc)
{
    double s = r->time_all > 0 ? t_all(t) / r->time_all : 0;
    if (r->alloc_all > 0)
        s = fmax(s, alloc / r->alloc_all);
    return s;
}

/* A header row under the summary: a label, a sparkline of `timeline` over
   the run (at most 40 cells, none on a narrow terminal) and a tail. */
static void spark_row(report *r, const char *label, const cal_jv *timeline,
                      const char *tail)
{
    int cells = r->width - 10 - 11 - 22 < 40 ? r->width - 10 - 11 - 22 : 40;
    if (cells < 8 || cal_jv_len(timeline) <= 1)
        return;
    cal_buf_printf(r->out, "          %-10s", label);
    add_spark(r->out, timeline, r->wall, cells, r->tty);
    add_text(r->out, tail, 48, r->tty);
    cal_buf_puts(r->out, "\n");
}

/* The GPU line of the header: utilisation, memory peak, the devices, and a
   sparkline of GPU memory over time. */
static void gpu_header(report *r, const cal_jv *gpu)
{
    if (!r->gpu)
        return;
    char peak[16];
    prose_bytes(peak, sizeof peak, cal_jv_getnum(gpu, "memory_peak_bytes", 0));
    cal_buf h;
    cal_buf_init(&h);
    int dev_util = strcmp(cal_jv_getstr(gpu, "utilization_source", ""), "device") == 0;
    int dev_mem = strcmp(cal_jv_getstr(gpu, "memory_source", ""), "device") == 0;
    cal_buf_printf(
        &h, "calipers: GPU utilisation %.0f%%%s on average, GPU memory peak %s%s",
        cal_jv_getnum(gpu, "utilization_avg_percent", 0),
        dev_util ? " (whole device)" : "", peak, dev_mem ? " (whole device)" : "");
    const cal_jv *devs = cal_jv_get(gpu, "devices");
    for (size_t i = 0; i < cal_jv_len(devs); i++) {
        const cal_jv *d = cal_jv_at(devs, i);
        const char *name = cal_jv_getstr(d, "name", "");
        cal_buf_printf(&h, "%s%s", i ? ", " : "; on ",
                       *name ? name : cal_jv_getstr(d, "uuid", "?"));
    }
    if (h.data)
        add_wrapped(r->out, h.data, r->width, 10, r->tty);
    cal_buf_free(&h);
    spark_row(r, "GPU mem", cal_jv_get(gpu, "timeline"), "");
}

/* The garbage collector's line of the header: its time and share of the
   CPU, its collections per generation, what they freed; nothing when it
   was not read or never ran. */
static void gc_header(report *r, const cal_jv *gc)
{
    double collections = cal_jv_getnum(gc, "collections", 0);
    if (!cal_jv_is(gc, CAL_JOBJ) || collections <= 0)
        return;
    const cal_jv *gens = cal_jv_get(gc, "generations");
    cal_buf h;
    cal_buf_init(&h);
    cal_buf_printf(&h,
                   "calipers: garbage collector %.2f\x01s (%.1f%% of CPU) in %.0f "
                   "collections (",
                   cal_jv_getnum(gc, "time_s", 0),
                   100 * cal_jv_getnum(gc, "cpu_fraction", 0), collections);
    for (size_t i = 0; i < cal_jv_len(gens); i++)
        cal_buf_printf(&h, "%sgen\x01%zu: %.0f", i ? ", " : "", i,
                       cal_jv_getnum(cal_jv_at(gens, i), "collections", 0));
    cal_buf_printf(&h, "), %.0f objects collected", cal_jv_getnum(gc, "collected", 0));
    double uncollectable = cal_jv_getnum(gc, "uncollectable", 0);
    if (uncollectable > 0)
        cal_buf_printf(&h, ", %.0f uncollectable", uncollectable);
    /* The longest collection the ticks saw, if two or more did: a pause
       long enough to matter, with its line. */
    const cal_jv *top = cal_jv_at(cal_jv_get(cal_jv_get(gc, "seen"), "longest"), 0);
    double ticks = cal_jv_getnum(top, "ticks", 0);
    if (ticks >= 2) {
        double interval = cal_jv_getnum(cal_jv_get(r->root, "config"), "interval_s", 0);
        const cal_jv *gen = cal_jv_get(top, "generation");
        cal_buf_printf(&h, "; the longest seen about %.0f\x01ms",
                       1e3 * ticks * interval);
        if (cal_jv_is(gen, CAL_JNUM))
            cal_buf_printf(&h, " (gen\x01%.0f)", cal_jv_num(gen, 0));
        const cal_jv *at = cal_jv_get(top, "line");
        if (cal_jv_is(at, CAL_JOBJ))
            cal_buf_printf(&h, " at %s:%.0f", base_name(cal_jv_getstr(at, "path", "?")),
                           cal_jv_getnum(at, "line", 0));
    }
    if (h.data)
        add_wrapped(r->out, h.data, r->width, 10, r->tty);
    cal_buf_free(&h);
}

static void header(report *r)
{
    const cal_jv *prog = cal_jv_get(r->root, "program");
    const cal_jv *sum = cal_jv_get(r->root, "summary");
    const char *what = cal_jv_str(cal_jv_at(cal_jv_get(prog, "argv"), 0), NULL);
    if (!what)
        what = cal_jv_getstr(prog, "module", "?");
    times t = get_times(sum);
    double cpu = t_cpu(t);
    cal_buf h;
    cal_buf_init(&h);
    char py[8], nat[8], sys[8];
    percent(py, sizeof py, t.py, cpu);
    percent(nat, sizeof nat, t.nat, cpu);
    percent(sys, sizeof sys, t.sys, cpu);
    cal_buf_printf(&h,
                   "calipers: %s ran %.2f\x01s; CPU %.2f\x01s (Python %s, native %s, "
                   "system %s), waiting %.2f\x01s",
                   what, r->wall, cpu, *py ? py : "0%", *nat ? nat : "0%",
                   *sys ? sys : "0%", t.wait);
    if (t.runq >= 0.005) /* what rounds to 0.00s is not a split worth showing */
        cal_buf_printf(&h, " (blocked %.2f\x01s, preempted %.2f\x01s)", t.wait - t.runq,
                       t.runq);
    size_t nthreads = cal_jv_len(cal_jv_get(r->root, "threads"));
    size_t nprocs = cal_jv_len(cal_jv_get(r->root, "processes"));
    if (nthreads > 1)
        cal_buf_printf(&h, " across %zu threads", nthreads);
    if (nprocs > 1)
        cal_buf_printf(&h, " in %zu processes", nprocs);
    double paused = cal_jv_getnum(sum, "paused_s", 0);
    if (paused > 0)
        cal_buf_printf(&h, "; profiling was off for %.2f\x01s of it", paused);
    /* Threads there run at once: CPU above wall time is normal. */
    const char *build = cal_jv_getstr(prog, "python_build", "default");
    if (strcmp(build, "free-threaded") == 0)
        cal_buf_printf(&h, "; free-threaded Python %st",
                       cal_jv_getstr(prog, "python_version", "?"));
    if (h.data)
        add_wrapped(r->out, h.data, r->width, 10, r->tty);
    cal_buf_free(&h);

    gc_header(r, cal_jv_get(sum, "gc"));
    gpu_header(r, cal_jv_get(sum, "gpu"));
    const cal_jv *mem = cal_jv_get(sum, "memory");
    if (!r->memory)
        return;
    char peak[16], alloc[16], copied[16], growth[16];
    prose_bytes(peak, sizeof peak, cal_jv_getnum(mem, "peak_bytes", 0));
    prose_bytes(alloc, sizeof alloc, r->alloc_all);
    prose_bytes(copied, sizeof copied, cal_jv_getnum(mem, "copied_bytes", 0));
    prose_bytes(growth, sizeof growth, cal_jv_getnum(mem, "growth_bytes_per_s", 0));
    cal_buf_init(&h);
    cal_buf_printf(&h, "calipers: memory peak %s (Python %.0f%%)", peak,
                   100 * cal_jv_getnum(mem, "peak_python_fraction", 0));
    const cal_jv *pl = cal_jv_get(mem, "peak_line");
    if (cal_jv_is(pl, CAL_JOBJ))
        cal_buf_printf(&h, " reached at %s:%.0f",
                       base_name(cal_jv_getstr(pl, "path", "?")),
                       cal_jv_getnum(pl, "line", 0));
    char apy[8];
    percent(apy, sizeof apy, cal_jv_getnum(mem, "allocated_python_bytes", 0),
            r->alloc_all);
    cal_buf_printf(&h, "; allocated %s (Python %s); copied %s", alloc,
                   *apy ? apy : "0%", copied);
    if (h.data)
        add_wrapped(r->out, h.data, r->width, 10, r->tty);
    cal_buf_free(&h);
    char tail[48];
    snprintf(tail, sizeof tail, " growth %s/s", growth);
    spark_row(r, "footprint", cal_jv_get(mem, "timeline"), tail);
}

/* ---- the per-file tables ------------------------------------------------- */

enum {
    C_LINE,
    C_TIME,
    C_PCT,
    C_SPLIT,
    C_KINDS,
    C_GC,
    C_RUNQ,
    C_ALLOC,
    C_PYPCT,
    C_HELD,
    C_SPARK,
    C_COPY,
    C_GPU,
    C_GMEM,
    NCOL
};

static const struct {
    const char *head;
    int width; /* including the separating space before it */
} COLS[NCOL] = {
    {"line", 6},
    {"time", 8},
    {"%", 5},
    {"split", 11},
    {"    py  nat  sys wait", 21},
    {"gc", 8},
    {"preempt", 8},
    {"alloc", 8},
    {"py%", 5},
    {"held", 8},
    {"timeline", 11},
    {"copy/s", 8},
    {"gpu%", 6},
    {"gpumem", 8},
};

#define MIN_SOURCE 32
#define SPLIT_CELLS 10
#define SPARK_CELLS 10
#define MIN_RATE_S 0.01 /* the least time over which a line's copy rate is shown */

/* Choose the columns: memory ones only with memory, copy only if a line
   copies, GPU ones only if the GPU was sampled; then drop the least
   important until the source has room. */
static void choose_columns(const report *r, int any_copy, int on[NCOL])
{
    for (int c = 0; c < NCOL; c++)
        on[c] = c < C_ALLOC || (c < C_GPU && r->memory) || (c >= C_GPU && r->gpu);
    on[C_GC] = r->gc;
    on[C_RUNQ] = r->runq;
    if (!any_copy)
        on[C_COPY] = 0;
    static const int drop[] = {C_KINDS, C_SPARK, C_COPY,  C_HELD,
                               C_RUNQ,  C_GC,    C_PYPCT, C_GMEM};
    for (size_t k = 0; k < sizeof drop / sizeof *drop; k++) {
        int used = 2;
        for (int c = 0; c < NCOL; c++)
            used += on[c] ? COLS[c].width : 0;
        if (r->width - used >= MIN_SOURCE)
            break;
        on[drop[k]] = 0;
    }
}

static int columns_width(const int on[NCOL])
{
    int used = 2;
    for (int c = 0; c < NCOL; c++)
        used += on[c] ? COLS[c].width : 0;
    return used;
}

static void column_heads(report *r, const int on[NCOL], const char *last)
{
    style(r->out, r->tty, DIM);
    for (int c = 0; c < NCOL; c++) {
        if (!on[c])
            continue;
        if (c == C_SPLIT || c == C_SPARK)
            cal_buf_printf(r->out, " %-*s", COLS[c].width - 1, COLS[c].head);
        else
            cal_buf_printf(r->out, "%*s", COLS[c].width, COLS[c].head);
    }
    cal_buf_puts(r->out, "  ");
    add_text(r->out, last, r->width - columns_width(on), r->tty);
    style(r->out, r->tty, RESET);
    cal_buf_puts(r->out, "\n");
}

/* A record's time (all of t's kinds), its share of `whole` and its split:
   bold when `strong`. */
static void time_cells(report *r, times t, double whole, int strong)
{
    char a[32], b[32];
    double all = t_all(t);
    if (all > 0) {
        human_seconds(a, sizeof a, all);
        percent(b, sizeof b, all, whole);
    } else {
        a[0] = b[0] = '\0';
    }
    if (strong)
        style(r->out, r->tty, BOLD);
    cal_buf_printf(r->out, "%8s%5s", a, b);
    if (strong)
        style(r->out, r->tty, RESET);
    cal_buf_puts(r->out, " ");
    add_split(r->out, t, SPLIT_CELLS, r->tty);
}

/* The number cells of a line or function record (NULL: a context row). */
static void cells(report *r, const int on[NCOL], long no, times t, const cal_jv *mem,
                  const cal_jv *timeline, const cal_jv *gpu)
{
    char a[32];
    if (on[C_LINE]) {
        style(r->out, r->tty, DIM);
        if (no > 0)
            cal_buf_printf(r->out, "%6ld", no);
        else
            cal_buf_puts(r->out, "      ");
        style(r->out, r->tty, RESET);
    }
    double all = t_all(t), alloc = alloc_of(mem);
    time_cells(r, t, r->time_all, share(r, t, alloc) >= 0.10);
    if (on[C_KINDS]) {
        double v[4] = {t.py, t.nat, t.sys, t.wait};
        for (int k = 0; k < 4; k++) {
            percent(a, sizeof a, v[k], all);
            cal_buf_printf(r->out, k ? "%5s" : "%6s", a); /* 6 + 3 * 5 = 21 */
        }
    }
    if (on[C_GC]) {
        if (t.gc >= 0.005) /* what rounds to 0.00s is left blank */
            human_seconds(a, sizeof a, t.gc);
        else
            a[0] = '\0';
        cal_buf_printf(r->out, "%8s", a);
    }
    if (on[C_RUNQ]) {
        if (t.runq >= 0.005)
            human_seconds(a, sizeof a, t.runq);
        else
            a[0] = '\0';
        cal_buf_printf(r->out, "%8s", a);
    }
    if (on[C_ALLOC]) {
        if (alloc > 0)
            human_bytes(a, sizeof a, alloc);
        else
            a[0] = '\0';
        cal_buf_printf(r->out, "%8s", a);
    }
    if (on[C_PYPCT]) {
        percent(a, sizeof a, cal_jv_getnum(mem, "alloc_python_bytes", 0), alloc);
        cal_buf_printf(r->out, "%5s", alloc > 0 ? (*a ? a : "0%") : "");
    }
    if (on[C_HELD]) {
        double held = cal_jv_getnum(mem, "live_peak_bytes", 0);
        if (held > 0)
            human_bytes(a, sizeof a, held);
        else
            a[0] = '\0';
        cal_buf_printf(r->out, "%8s", a);
    }
    if (on[C_SPARK]) {
        cal_buf_puts(r->out, " ");
        add_spark(r->out, timeline, r->wall, SPARK_CELLS, r->tty);
    }
    if (on[C_COPY]) {
        /* A rate over less time than a sample's worth says nothing (a
           line that copied 100 MB in the millisecond credited to it). */
        double mbs = cal_jv_getnum(mem, "copy_mb_per_s", 0);
        if (mbs >= 0.5 && all >= MIN_RATE_S)
            snprintf(a, sizeof a, "%.0fMB", mbs);
        else
            a[0] = '\0';
        cal_buf_printf(r->out, "%8s", a);
    }
    int gpu_seen = cal_jv_getnum(gpu, "samples", 0) > 0;
    if (on[C_GPU]) {
        if (gpu_seen)
            snprintf(a, sizeof a, "%.0f%%",
                     cal_jv_getnum(gpu, "utilization_avg_percent", 0));
        else
            a[0] = '\0';
        cal_buf_printf(r->out, "%6s", a);
    }
    if (on[C_GMEM]) {
        double avg = cal_jv_getnum(gpu, "memory_avg_bytes", 0);
        if (gpu_seen && avg > 0)
            human_bytes(a, sizeof a, avg);
        else
            a[0] = '\0';
        cal_buf_printf(r->out, "%8s", a);
    }
    cal_buf_puts(r->out, "  ");
}

/* A row to show: a profiled line or a line of context. */
typedef struct pick {
    size_t file; /* index in "files" */
    long no;
    double share;
} pick;

static int cmp_pick_share(const void *x, const void *y)
{
    const pick *a = x, *b = y;
    if (a->share != b->share)
        return a->share < b->share ? 1 : -1;
    if (a->file != b->file)
        return a->file < b->file ? -1 : 1;
    return a->no < b->no ? -1 : a->no > b->no;
}

static int cmp_pick_place(const void *x, const void *y)
{
    const pick *a = x, *b = y;
    if (a->file != b->file)
        return a->file < b->file ? -1 : 1;
    return a->no < b->no ? -1 : a->no > b->no;
}

/* The element of `arr`, sorted by line number, whose number is `no`, or
   NULL; `number` reads an element's line number. */
static const cal_jv *find_numbered(const cal_jv *arr, long no,
                                   double (*number)(const cal_jv *))
{
    size_t lo = 0, hi = cal_jv_len(arr);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        long n = (long)number(cal_jv_at(arr, mid));
        if (n == no)
            return cal_jv_at(arr, mid);
        if (n < no)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static double record_number(const cal_jv *rec) { return cal_jv_getnum(rec, "line", 0); }

static double pair_number(const cal_jv *pair)
{
    return cal_jv_num(cal_jv_at(pair, 0), 0);
}

/* The line record `no` of a file, or NULL. */
static const cal_jv *find_line(const cal_jv *file, long no)
{
    return find_numbered(cal_jv_get(file, "lines"), no, record_number);
}

/* The text of line `no` of a file, from its [line, text] pairs, or NULL
   when the profile does not have it. */
static const char *source_text(const cal_jv *file, long no)
{
    const cal_jv *pair = find_numbered(cal_jv_get(file, "source"), no, pair_number);
    return cal_jv_str(cal_jv_at(pair, 1), NULL);
}

static int has_pick(const pick *v, size_t n, size_t file, long no)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].file == file && v[i].no == no)
            return 1;
    return 0;
}

/* Which rows to show: the lines that matter, most important first, each
   with one line of context either side, until max_rows.  Returns the rows
   sorted by file and line (*n of them; NULL when none). */
/* The lines at or above --min-percent, largest share first, in *k
   (malloc'ed: the caller frees it), or NULL if there are none or memory ran out. */
static pick *candidates(const report *r, size_t *k)
{
    const cal_jv *files = cal_jv_get(r->root, "files");
    size_t cap = 0;
    *k = 0;
    for (size_t f = 0; f < cal_jv_len(files); f++)
        cap += cal_jv_len(cal_jv_get(cal_jv_at(files, f), "lines"));
    pick *cand = cap ? malloc(cap * sizeof *cand) : NULL;
    if (!cand)
        return NULL;
    for (size_t f = 0; f < cal_jv_len(files); f++) {
        const cal_jv *lines = cal_jv_get(cal_jv_at(files, f), "lines");
        for (size_t i = 0; i < cal_jv_len(lines); i++) {
            const cal_jv *ln = cal_jv_at(lines, i);
            double s = share(r, get_times(ln), alloc_of(cal_jv_get(ln, "memory")));
            if (s > 0 && s * 100 >= r->o->min_percent)
                cand[(*k)++] = (pick){f, (long)cal_jv_getnum(ln, "line", 0), s};
        }
    }
    qsort(cand, *k, sizeof *cand, cmp_pick_share);
    return cand;
}

/* Does any line show a copy rate (the column is shown then)? */
static int any_copy_rate(const report *r)
{
    const cal_jv *files = cal_jv_get(r->root, "files");
    for (size_t f = 0; f < cal_jv_len(files); f++) {
        const cal_jv *lines = cal_jv_get(cal_jv_at(files, f), "lines");
        for (size_t i = 0; i < cal_jv_len(lines); i++)
            if (cal_jv_getnum(cal_jv_get(cal_jv_at(lines, i), "memory"),
                              "copy_mb_per_s", 0) >= 0.5)
                return 1;
    }
    return 0;
}

static pick *choose_rows(const report *r, size_t *n, size_t *hidden)
{
    const cal_jv *files = cal_jv_get(r->root, "files");
    size_t k;
    *n = 0;
    *hidden = 0;
    pick *cand = candidates(r, &k);
    pick *rows = cand ? malloc((k ? k * 3 : 1) * sizeof *rows) : NULL;
    if (!rows) {
        free(cand);
        return NULL;
    }
    size_t m = 0;
    int budget = r->o->max_rows > 0 ? r->o->max_rows : 300;
    for (size_t i = 0; i < k; i++) {
        const cal_jv *file = cal_jv_at(files, cand[i].file);
        pick add[3];
        int na = 0;
        for (long no = cand[i].no - 1; no <= cand[i].no + 1; no++) {
            int known =
                no == cand[i].no || source_text(file, no) || find_line(file, no);
            if (known && !has_pick(rows, m, cand[i].file, no))
                add[na++] = (pick){cand[i].file, no, 0};
        }
        if ((int)(m + (size_t)na) > budget) {
            *hidden = k - i;
            break;
        }
        for (int a = 0; a < na; a++)
            rows[m++] = add[a];
    }
    free(cand);
    qsort(rows, m, sizeof *rows, cmp_pick_place);
    *n = m;
    return rows;
}

static void file_heading(report *r, const cal_jv *file)
{
    const char *path = cal_jv_getstr(file, "path", "?");
    times t = get_times(file);
    double alloc = 0;
    const cal_jv *lines = cal_jv_get(file, "lines");
    for (size_t i = 0; i < cal_jv_len(lines); i++)
        alloc += alloc_of(cal_jv_get(cal_jv_at(lines, i), "memory"));
    cal_buf h;
    cal_buf_init(&h);
    char pc[8];
    percent(pc, sizeof pc, t_all(t), r->time_all);
    /* With several threads or processes, the time of the lines adds up
       theirs (CPU and waiting), more than the wall time the header gives. */
    cal_buf_printf(&h,
                   r->summed ? "%s: %.2f\x01s (%s of the threads' time)"
                             : "%s: %.2f\x01s (%s of the time)",
                   display_path(path, r->cwd), t_all(t), *pc ? pc : "0%");
    if (r->memory) {
        char a[16];
        prose_bytes(a, sizeof a, alloc);
        percent(pc, sizeof pc, alloc, r->alloc_all);
        cal_buf_printf(&h, ", %s allocated (%s)", a, *pc ? pc : "0%");
    }
    cal_buf_puts(r->out, "\n");
    style(r->out, r->tty, BOLD);
    add_text(r->out, h.data ? h.data : "", r->width, r->tty);
    style(r->out, r->tty, RESET);
    cal_buf_puts(r->out, "\n");
    cal_buf_free(&h);
}

typedef struct fn_pick {
    const cal_jv *fn;
    double time, alloc;
} fn_pick;

static int cmp_fn(const void *x, const void *y)
{
    const fn_pick *a = x, *b = y;
    if (a->time != b->time)
        return a->time < b->time ? 1 : -1;
    if (a->alloc != b->alloc)
        return a->alloc < b->alloc ? 1 : -1;
    double la = cal_jv_getnum(a->fn, "line", 0), lb = cal_jv_getnum(b->fn, "line", 0);
    return la < lb ? -1 : la > lb;
}

#define MAX_FUNCS 10

/* The functions of a file that matter, by inclusive time. */
static void functions_table(report *r, const cal_jv *file, const int on_lines[NCOL])
{
    const cal_jv *fns = cal_jv_get(file, "functions");
    size_t n = cal_jv_len(fns), k = 0;
    fn_pick *v = n ? malloc(n * sizeof *v) : NULL;
    if (!v)
        return;
    for (size_t i = 0; i < n; i++) {
        const cal_jv *fn = cal_jv_at(fns, i);
        const cal_jv *mem = cal_jv_get(cal_jv_get(fn, "memory"), "total");
        double tt = t_all(get_times(cal_jv_get(fn, "total"))), al = alloc_of(mem);
        double s = fmax(r->time_all > 0 ? tt / r->time_all : 0,
                        r->alloc_all > 0 ? al / r->alloc_all : 0);
        if (s > 0 && s * 100 >= r->o->min_percent)
            v[k++] = (fn_pick){fn, tt, al};
    }
    qsort(v, k, sizeof *v, cmp_fn);
    if (k) {
        int on[NCOL];
        memcpy(on, on_lines, sizeof on);
        on[C_LINE] = on[C_HELD] = on[C_SPARK] = on[C_COPY] = 0;
        cal_buf_puts(r->out, "\n");
        column_heads(r, on, "function (inclusive time and memory)");
        int room = r->width - columns_width(on);
        for (size_t i = 0; i < k && i < MAX_FUNCS; i++) {
            const cal_jv *fn = v[i].fn;
            cells(r, on, 0, get_times(cal_jv_get(fn, "total")),
                  cal_jv_get(cal_jv_get(fn, "memory"), "total"), NULL,
                  cal_jv_get(fn, "gpu"));
            char label[64];
            snprintf(label, sizeof label, "  (line %.0f)",
                     cal_jv_getnum(fn, "line", 0));
            int lw = text_width(label);
            const char *name = cal_jv_getstr(fn, "name", "?");
            add_text(r->out, name, room - lw > 8 ? room - lw : 8, r->tty);
            if (text_width(name) + lw <= room)
                cal_buf_puts(r->out, label);
            cal_buf_puts(r->out, "\n");
        }
        if (k > MAX_FUNCS) {
            style(r->out, r->tty, DIM);
            cal_buf_printf(r->out, "%*s%zu more functions", 8, "", k - MAX_FUNCS);
            style(r->out, r->tty, RESET);
            cal_buf_puts(r->out, "\n");
        }
    }
    free(v);
}

static void files_tables(report *r)
{
    const cal_jv *files = cal_jv_get(r->root, "files");
    size_t nrows, hidden;
    pick *rows = choose_rows(r, &nrows, &hidden);
    if (!rows)
        return;
    int on[NCOL];
    choose_columns(r, any_copy_rate(r), on);
    int room = r->width - columns_width(on);

    /* Files in order of importance: the largest share among their rows. */
    size_t nfiles = cal_jv_len(files);
    double *weight = calloc(nfiles ? nfiles : 1, sizeof *weight);
    size_t *order = calloc(nfiles ? nfiles : 1, sizeof *order);
    if (!weight || !order)
        goto done;
    for (size_t f = 0; f < nfiles; f++) {
        const cal_jv *file = cal_jv_at(files, f);
        double al = 0;
        const cal_jv *lines = cal_jv_get(file, "lines");
        for (size_t i = 0; i < cal_jv_len(lines); i++)
            al += alloc_of(cal_jv_get(cal_jv_at(lines, i), "memory"));
        weight[f] = share(r, get_times(file), al);
        order[f] = f;
    }
    for (size_t i = 1; i < nfiles; i++) /* insertion sort: stable, few files */
        for (size_t j = i; j > 0 && weight[order[j]] > weight[order[j - 1]]; j--) {
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (size_t oi = 0; oi < nfiles; oi++) {
        size_t f = order[oi];
        size_t a = 0;
        while (a < nrows && rows[a].file != f)
            a++;
        if (a == nrows)
            continue;
        const cal_jv *file = cal_jv_at(files, f);
        file_heading(r, file);
        column_heads(r, on, "source");
        /* The indentation every shown row shares is only lost width. */
        int common = -1;
        for (size_t b = a; b < nrows && rows[b].file == f; b++) {
            const char *text = source_text(file, rows[b].no);
            int in = indent_of(text ? text : "");
            if (in >= 0 && (common < 0 || in < common))
                common = in;
        }
        long prev = 0;
        for (; a < nrows && rows[a].file == f; a++) {
            long no = rows[a].no;
            if (prev && no > prev + 1) {
                style(r->out, r->tty, DIM);
                cal_buf_printf(r->out, "%*s%s", r->tty ? 5 : 6, "", r->tty ? "⋮" : ":");
                style(r->out, r->tty, RESET);
                cal_buf_puts(r->out, "\n");
            }
            prev = no;
            const cal_jv *ln = find_line(file, no);
            const cal_jv *mem = cal_jv_get(ln, "memory");
            times t = ln ? get_times(ln) : (times){0, 0, 0, 0, 0, 0};
            cells(r, on, no, t, mem, cal_jv_get(mem, "timeline"),
                  cal_jv_get(ln, "gpu"));
            const char *text = source_text(file, no);
            text = dedent(text ? text : "", common);
            if (!ln)
                style(r->out, r->tty, DIM);
            add_text(r->out, text, room, r->tty);
            if (!ln)
                style(r->out, r->tty, RESET);
            /* No trailing blanks: golden files and copy-paste stay clean. */
            while (r->out->len && r->out->data[r->out->len - 1] == ' ')
                r->out->len--;
            cal_buf_puts(r->out, "\n");
        }
        functions_table(r, file, on);
    }
    if (hidden) {
        cal_buf h;
        cal_buf_init(&h);
        cal_buf_printf(
            &h,
            "calipers: %zu more lines above %g%% not shown (the report keeps "
            "to %d rows)",
            hidden, r->o->min_percent, r->o->max_rows);
        cal_buf_puts(r->out, "\n");
        if (h.data)
            add_wrapped(r->out, h.data, r->width, 10, r->tty);
        cal_buf_free(&h);
    }
done:
    free(weight);
    free(order);
    free(rows);
}

#define HOT_ROWS 10 /* lines in the list of the hottest across files */

/* The last cell of a row of the hottest lines, "file: source" in `room`
   columns, and the row's end (no trailing blanks). */
static void where_cell(report *r, const char *path, const char *text, int room)
{
    cal_buf where;
    cal_buf_init(&where);
    cal_buf_printf(&where, "%s: %s", base_name(display_path(path, r->cwd)),
                   text ? dedent(text, indent_of(text)) : "");
    add_text(r->out, where.data ? where.data : "", room, r->tty);
    cal_buf_free(&where);
    while (r->out->len && r->out->data[r->out->len - 1] == ' ')
        r->out->len--;
    cal_buf_puts(r->out, "\n");
}

/* ---- the hottest lines over CPU time or the main thread ----------------
   HOW IT WORKS (as the HTML viewer's hotMainLines and hotRows).  Over CPU
   time a line weighs its Python + native + system time, as a share of
   the run's (or the main thread's) CPU time: lines that only waited drop
   out.  files[].lines sums every thread, so the main thread's part of a
   line comes from the stack table: a node's self times belong to the
   innermost profiled frame on its stack (its own frame when that is not
   library code, else its nearest such caller's, as the line table
   charges library code to the program line that called it); nodes come
   after their parents, so one pass finds each node's owner.  The main
   thread is the first thread marked main (the main process's). */

typedef struct hot_rec {
    const char *path;
    long no;
    times t;
    double v, s; /* its time in the view, and its share of the view's whole */
} hot_rec;

static int cmp_hot_place(const void *x, const void *y)
{
    const hot_rec *a = x, *b = y;
    int c = strcmp(a->path, b->path);
    return c ? c : (a->no > b->no) - (a->no < b->no);
}

static int cmp_hot_share(const void *x, const void *y)
{
    const hot_rec *a = x, *b = y;
    if (a->s != b->s)
        return a->s < b->s ? 1 : -1;
    return cmp_hot_place(x, y);
}

/* The main thread's times per line, from the stack table, merged by
   place: *n of them (malloc'ed), or NULL with *why saying why not (or
   *n = 0, *why NULL: none).  main: its index in threads. */
static hot_rec *main_lines(const report *r, size_t main, size_t *n, const char **why)
{
    const cal_jv *stacks = cal_jv_get(r->root, "stacks");
    *n = 0;
    *why = NULL;
    if (!cal_jv_is(stacks, CAL_JOBJ)) {
        *why = "this profile has no stack table (it was written before calipers 0.2), "
               "which the main thread's figures come from";
        return NULL;
    }
    const cal_jv *fields = cal_jv_get(stacks, "node_fields");
    for (int i = 0; i < 8; i++) { /* parent, frame, line, thread, the times */
        const char *got = cal_jv_str(cal_jv_at(fields, (size_t)i), NULL);
        if (!got || strcmp(got, cal_stacks_node_fields[i]) != 0) {
            *why = "its stack table's node fields are not the ones this calipers reads";
            return NULL;
        }
    }
    const cal_jv *frames = cal_jv_get(stacks, "frames");
    const cal_jv *nodes = cal_jv_get(stacks, "nodes");
    size_t nn = cal_jv_len(nodes), nf = cal_jv_len(frames);
    long *owner = malloc((nn ? nn : 1) * sizeof *owner);
    hot_rec *recs = malloc((nn ? nn : 1) * sizeof *recs);
    if (!owner || !recs) {
        free(owner);
        free(recs);
        *why = "out of memory";
        return NULL;
    }
    size_t m = 0;
    for (size_t i = 0; i < nn; i++) {
        const cal_jv *v = cal_jv_at(nodes, i);
        double parent = cal_jv_num(cal_jv_at(v, 0), -1),
               frame = cal_jv_num(cal_jv_at(v, 1), -1);
        /* The checked profile's indices are whole numbers from -1 up: a
           parent must come before its node, a frame exist. */
        const cal_jv *fr =
            frame >= 0 && frame < (double)nf ? cal_jv_at(frames, (size_t)frame) : NULL;
        int up = parent >= 0 && parent < (double)i;
        owner[i] = fr && !cal_jv_bool(cal_jv_get(fr, "library"), 0) ? (long)i
                   : up ? owner[(size_t)parent]
                        : -1;
        if (owner[i] < 0 || cal_jv_num(cal_jv_at(v, 3), -1) != (double)main)
            continue;
        const cal_jv *o = cal_jv_at(nodes, (size_t)owner[i]);
        const cal_jv *of = cal_jv_at(frames, (size_t)cal_jv_num(cal_jv_at(o, 1), 0));
        recs[m++] = (hot_rec){
            cal_jv_getstr(of, "file", "?"), (long)cal_jv_num(cal_jv_at(o, 2), 0),
            (times){cal_jv_num(cal_jv_at(v, 4), 0), cal_jv_num(cal_jv_at(v, 5), 0),
                    cal_jv_num(cal_jv_at(v, 6), 0), cal_jv_num(cal_jv_at(v, 7), 0), 0,
                    0},
            0, 0};
    }
    free(owner);
    if (m)
        qsort(recs, m, sizeof *recs, cmp_hot_place);
    size_t k = 0;
    for (size_t i = 0; i < m; i++) {
        if (k && cmp_hot_place(&recs[k - 1], &recs[i]) == 0) {
            recs[k - 1].t.py += recs[i].t.py;
            recs[k - 1].t.nat += recs[i].t.nat;
            recs[k - 1].t.sys += recs[i].t.sys;
            recs[k - 1].t.wait += recs[i].t.wait;
        } else {
            recs[k++] = recs[i];
        }
    }
    *n = k;
    return recs;
}

/* Every line of every file, as view records (*n; NULL: none or no memory). */
static hot_rec *all_lines(const report *r, size_t *n)
{
    const cal_jv *files = cal_jv_get(r->root, "files");
    size_t cap = 0, m = 0;
    for (size_t f = 0; f < cal_jv_len(files); f++)
        cap += cal_jv_len(cal_jv_get(cal_jv_at(files, f), "lines"));
    hot_rec *recs = cap ? malloc(cap * sizeof *recs) : NULL;
    for (size_t f = 0; recs && f < cal_jv_len(files); f++) {
        const cal_jv *file = cal_jv_at(files, f);
        const cal_jv *lines = cal_jv_get(file, "lines");
        for (size_t i = 0; i < cal_jv_len(lines); i++) {
            const cal_jv *ln = cal_jv_at(lines, i);
            recs[m++] =
                (hot_rec){cal_jv_getstr(file, "path", "?"),
                          (long)cal_jv_getnum(ln, "line", 0), get_times(ln), 0, 0};
        }
    }
    *n = m;
    return recs;
}

/* The source of line `no` of the profiled file at `path`, or NULL. */
static const char *source_at(const report *r, const char *path, long no)
{
    const cal_jv *files = cal_jv_get(r->root, "files");
    for (size_t f = 0; f < cal_jv_len(files); f++) {
        const cal_jv *file = cal_jv_at(files, f);
        if (strcmp(cal_jv_getstr(file, "path", ""), path) == 0)
            return source_text(file, no);
    }
    return NULL;
}

/* The hottest lines in the view the options ask for: over CPU time only,
   over the main thread only, or both. */
static void hottest_view(report *r)
{
    int cpu = r->o->hot_cpu, on_main = r->o->hot_main;
    const cal_jv *threads = cal_jv_get(r->root, "threads");
    size_t main = cal_jv_len(threads);
    for (size_t i = 0; i < cal_jv_len(threads) && main == cal_jv_len(threads); i++)
        if (cal_jv_bool(cal_jv_get(cal_jv_at(threads, i), "main"), 0))
            main = i;
    int many = r->summed;
    const char *who = cal_jv_len(cal_jv_get(r->root, "processes")) > 1
                          ? "the main process's main thread"
                          : "the main thread";
    cal_buf_puts(r->out, "\n");
    style(r->out, r->tty, BOLD);
    add_text(r->out,
             cpu && on_main
                 ? "the hottest lines, of every file: the main thread's CPU time"
             : cpu ? "the hottest lines, of every file: CPU time only"
                   : "the hottest lines, of every file: the main thread only",
             r->width, r->tty);
    style(r->out, r->tty, RESET);
    cal_buf_puts(r->out, "\n");
    size_t n = 0;
    const char *why = NULL;
    hot_rec *recs = NULL;
    if (on_main && main == cal_jv_len(threads))
        why = "this profile names no main thread";
    else
        recs = on_main ? main_lines(r, main, &n, &why) : all_lines(r, &n);
    cal_buf say;
    cal_buf_init(&say);
    if (why) {
        cal_buf_printf(&say, "main thread only: not shown, %s.", why);
        add_wrapped(r->out, say.data ? say.data : "", r->width, 0, r->tty);
        cal_buf_free(&say);
        free(recs);
        return;
    }
    times whole_t =
        get_times(on_main ? cal_jv_at(threads, main) : cal_jv_get(r->root, "summary"));
    double whole = cpu ? t_cpu(whole_t) : t_all(whole_t);
    for (size_t i = 0; i < n; i++) {
        if (cpu)
            recs[i].t.wait = 0; /* the split shows the CPU's kinds only */
        recs[i].v = t_all(recs[i].t);
        recs[i].s = whole > 0 ? recs[i].v / whole : 0;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (recs[i].s > 0 && recs[i].s * 100 >= r->o->min_percent)
            recs[k++] = recs[i];
    if (k)
        qsort(recs, k, sizeof *recs, cmp_hot_share);
    /* What the percentages are of, and what is left out. */
    char w[32];
    human_seconds(w, sizeof w, whole);
    if (on_main)
        cal_buf_printf(
            &say, "%c%s's %s at each line, from the stack table; %% of its %s (%s).",
            'T', who + 1,
            cpu ? "CPU time (Python, native, system; waiting left out)"
                : "time (CPU and waiting)",
            cpu ? "CPU time" : "time", w);
    else
        cal_buf_printf(
            &say,
            "CPU time only (Python, native, system; waiting left out), summed "
            "over all threads; %% of the %s CPU time (%s).",
            many ? "threads'" : "run's", w);
    if (on_main)
        for (size_t i = 0; i < cal_jv_len(threads); i++) {
            const cal_jv *th = cal_jv_at(threads, i);
            if (cal_jv_getnum(th, "ident", -1) == 0 && t_cpu(get_times(th)) > 0) {
                cal_buf_puts(&say,
                             " The CPU of native threads that never ran Python, which "
                             "the files' tables credit to the main thread's lines, is "
                             "not in it.");
                break;
            }
        }
    style(r->out, r->tty, DIM);
    add_wrapped(r->out, say.data ? say.data : "", r->width, 0, r->tty);
    style(r->out, r->tty, RESET);
    cal_buf_free(&say);
    if (!k) {
        cal_buf_printf(r->out, "no line above %g%% in this view\n", r->o->min_percent);
        free(recs);
        return;
    }
    int on[NCOL] = {0};
    on[C_LINE] = on[C_TIME] = on[C_PCT] = on[C_SPLIT] = 1;
    int room = r->width - columns_width(on);
    column_heads(r, on, "file: source");
    for (size_t i = 0; i < k && i < HOT_ROWS; i++) {
        style(r->out, r->tty, DIM);
        cal_buf_printf(r->out, "%6ld", recs[i].no);
        style(r->out, r->tty, RESET);
        time_cells(r, recs[i].t, whole, recs[i].s >= 0.10);
        cal_buf_puts(r->out, "  ");
        where_cell(r, recs[i].path, source_at(r, recs[i].path, recs[i].no), room);
    }
    free(recs);
}

/* The hottest lines of the whole program, whatever their file, most
   important first: with many files (--profile-all, a package) no one
   file's table shows where the time and memory went.  Only when the lines
   shown come from more than one file: otherwise that file's table is the
   same list, in context. */
static void hottest_section(report *r)
{
    if (r->o->hot_cpu || r->o->hot_main) {
        hottest_view(r);
        return;
    }
    const cal_jv *files = cal_jv_get(r->root, "files");
    size_t k;
    pick *cand = candidates(r, &k);
    if (!cand)
        return;
    size_t n = k < HOT_ROWS ? k : HOT_ROWS;
    int several = 0;
    for (size_t i = 1; i < n && !several; i++)
        several = cand[i].file != cand[0].file;
    if (several) {
        int on[NCOL];
        choose_columns(r, any_copy_rate(r), on);
        int room = r->width - columns_width(on);
        cal_buf_puts(r->out, "\n");
        style(r->out, r->tty, BOLD);
        add_text(r->out, "the hottest lines, of every file", r->width, r->tty);
        style(r->out, r->tty, RESET);
        cal_buf_puts(r->out, "\n");
        column_heads(r, on, "file: source");
        for (size_t i = 0; i < n; i++) {
            const cal_jv *file = cal_jv_at(files, cand[i].file);
            const cal_jv *ln = find_line(file, cand[i].no);
            const cal_jv *mem = cal_jv_get(ln, "memory");
            cells(r, on, cand[i].no, get_times(ln), mem, cal_jv_get(mem, "timeline"),
                  cal_jv_get(ln, "gpu"));
            where_cell(r, cal_jv_getstr(file, "path", "?"),
                       source_text(file, cand[i].no), room);
        }
    }
    free(cand);
}

/* In a run of several processes: one row each, in the order they started:
   pid, how it began and ended, its time and split, its peak, its command. */
static void processes_section(report *r)
{
    const cal_jv *procs = cal_jv_get(r->root, "processes");
    if (cal_jv_len(procs) < 2)
        return;
    /* pid, start, end, time, %: 38 columns; then the split and the peak
       while the command keeps 10 columns. */
    int used = 38 + 2;
    int split = r->width - used - (SPLIT_CELLS + 1) >= 10;
    used += split ? SPLIT_CELLS + 1 : 0;
    int peak_on = r->memory && r->width - used - 9 >= 10;
    used += peak_on ? 9 : 0;
    cal_buf_puts(r->out, "\n");
    style(r->out, r->tty, DIM);
    cal_buf_printf(r->out, "%8s %-5s %-9s %8s %4s", "pid", "start", "end", "time", "%");
    if (split)
        cal_buf_printf(r->out, " %-*s", SPLIT_CELLS, "split");
    if (peak_on)
        cal_buf_printf(r->out, " %8s", "peak");
    cal_buf_puts(r->out, "  command\n");
    style(r->out, r->tty, RESET);
    for (size_t i = 0; i < cal_jv_len(procs); i++) {
        const cal_jv *pr = cal_jv_at(procs, i);
        times t = get_times(pr);
        char pct[8], end[16], peak[16];
        percent(pct, sizeof pct, t_all(t), r->time_all);
        const char *how = cal_jv_getstr(pr, "end", "?");
        if (!strcmp(how, "signal"))
            snprintf(end, sizeof end, "signal %.0f",
                     fmin(fmax(cal_jv_getnum(pr, "signal", 0), 0), 99));
        else
            snprintf(end, sizeof end, "%.9s", how);
        /* The main process keeps its pid through an exec of its own. */
        int main_pid =
            cal_jv_getnum(pr, "pid", 0) == cal_jv_getnum(cal_jv_at(procs, 0), "pid", 0);
        const char *start = main_pid                                   ? "main"
                            : cal_jv_bool(cal_jv_get(pr, "forked"), 0) ? "fork"
                                                                       : "exec";
        cal_buf_printf(r->out, "%8.0f %-5s %-9s %7.2fs %4s",
                       fmin(fmax(cal_jv_getnum(pr, "pid", 0), 0), 99999999), start, end,
                       fmin(fmax(t_all(t), 0), 9999.99), pct);
        if (split) {
            cal_buf_puts(r->out, " ");
            add_split(r->out, t, SPLIT_CELLS, r->tty);
        }
        if (peak_on) {
            const cal_jv *pk = cal_jv_get(pr, "peak_bytes");
            if (cal_jv_is(pk, CAL_JNUM))
                format_bytes(peak, sizeof peak, cal_jv_num(pk, 0), 0);
            else
                snprintf(peak, sizeof peak, "-");
            cal_buf_printf(r->out, " %8s", peak);
        }
        cal_buf_puts(r->out, "  ");
        cal_buf cmd;
        cal_buf_init(&cmd);
        const cal_jv *argv = cal_jv_get(pr, "argv");
        for (size_t a = 0; a < cal_jv_len(argv); a++)
            cal_buf_printf(&cmd, "%s%s", a ? " " : "",
                           cal_jv_str(cal_jv_at(argv, a), ""));
        add_text(r->out, cmd.data ? cmd.data : "", r->width - used, r->tty);
        cal_buf_free(&cmd);
        cal_buf_puts(r->out, "\n");
    }
}

static void leaks_section(report *r)
{
    const cal_jv *leaks = cal_jv_get(r->root, "leaks");
    if (!cal_jv_len(leaks))
        return;
    cal_buf_puts(r->out, "\n");
    for (size_t i = 0; i < cal_jv_len(leaks); i++) {
        const cal_jv *lk = cal_jv_at(leaks, i);
        char rate[16], held[16];
        prose_bytes(rate, sizeof rate, cal_jv_getnum(lk, "rate_bytes_per_s", 0));
        prose_bytes(held, sizeof held, cal_jv_getnum(lk, "live_end_bytes", 0));
        cal_buf line;
        cal_buf_init(&line);
        cal_buf_printf(&line,
                       "calipers: likely leak at %s:%.0f: %s still held, growing %s/s "
                       "(likelihood %.0f%%)",
                       base_name(cal_jv_getstr(lk, "path", "?")),
                       cal_jv_getnum(lk, "line", 0), held, rate,
                       100 * cal_jv_getnum(lk, "likelihood", 0));
        size_t pi = (size_t)cal_jv_getnum(lk, "process", 0);
        if (pi > 0)
            cal_buf_printf(
                &line, " in process %.0f",
                cal_jv_getnum(cal_jv_at(cal_jv_get(r->root, "processes"), pi), "pid",
                              0));
        style(r->out, r->tty, RED);
        if (line.data)
            add_wrapped(r->out, line.data, r->width, 10, r->tty);
        style(r->out, r->tty, RESET);
        cal_buf_free(&line);
    }
}

static void notes_section(report *r)
{
    const cal_jv *notes = cal_jv_get(r->root, "notes");
    for (size_t i = 0; i < cal_jv_len(notes); i++) {
        cal_buf line;
        cal_buf_init(&line);
        cal_buf_printf(&line, "calipers: note: %s",
                       cal_jv_str(cal_jv_at(notes, i), ""));
        if (line.data)
            add_wrapped(r->out, line.data, r->width, 16, r->tty);
        cal_buf_free(&line);
    }
}

static void legend(report *r)
{
    cal_buf_puts(r->out, "          split: ");
    static const char *const names[4] = {"Python", "native", "system", "waiting"};
    for (int k = 0; k < 4; k++) {
        times t = {k == 0, k == 1, k == 2, k == 3, 0, 0};
        add_split(r->out, t, 1, r->tty);
        cal_buf_printf(r->out, " %s%s", names[k], k < 3 ? "  " : "\n");
    }
}

#define GC_COLUMN 0.01
#define RUNQ_COLUMN 0.05

void cal_view_text(const cal_jv *root, const cal_view_opts *o, cal_buf *out)
{
    report r = {.root = root,
                .o = o,
                .out = out,
                .width = o->width < 60 ? 60 : o->width,
                .tty = o->tty};
    const cal_jv *sum = cal_jv_get(root, "summary");
    r.cwd = cal_jv_getstr(cal_jv_get(root, "program"), "cwd", NULL);
    r.wall = cal_jv_getnum(sum, "wall_s", 0);
    times run = get_times(sum);
    r.time_all = t_all(run);
    r.summed = cal_jv_len(cal_jv_get(root, "threads")) > 1 ||
               cal_jv_len(cal_jv_get(root, "processes")) > 1;
    /* The GC column: where the collector took at least GC_COLUMN of the CPU. */
    r.gc = run.gc >= GC_COLUMN * t_cpu(run) && run.gc > 0;
    /* The preempted column: where threads waited for a CPU RUNQ_COLUMN of
       all their time. */
    r.runq = run.runq >= RUNQ_COLUMN * r.time_all && run.runq > 0;
    const cal_jv *mem = cal_jv_get(sum, "memory");
    r.memory = cal_jv_is(mem, CAL_JOBJ);
    const cal_jv *gpu = cal_jv_get(sum, "gpu");
    r.gpu = cal_jv_is(gpu, CAL_JOBJ) && cal_jv_bool(cal_jv_get(gpu, "available"), 0);
    r.alloc_all = r.memory ? cal_jv_getnum(mem, "allocated_python_bytes", 0) +
                                 cal_jv_getnum(mem, "allocated_native_bytes", 0)
                           : 0;
    header(&r);
    processes_section(&r);
    notes_section(&r);
    if (cal_jv_len(cal_jv_get(root, "files")))
        legend(&r);
    hottest_section(&r);
    files_tables(&r);
    cal_view_text_types(root, r.width, out);
    leaks_section(&r);
    if (o->outfile)
        cal_buf_printf(out, "\ncalipers: profile written to %s\n", o->outfile);
}
