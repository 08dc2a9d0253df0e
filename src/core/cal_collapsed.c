/*
 * cal_collapsed — the stack table as collapsed ("folded") stacks: one line
 * per stack, its frames from the root down joined by ';', a space, and a
 * whole number.  The input of flamegraph.pl (github.com/brendangregg/
 * FlameGraph: what its stackcollapse-*.pl scripts write) and of inferno.
 *
 *   MainThread (pid 4080);<module> (/abs/prog.py:1);main (/abs/prog.py:30) 41250
 *
 * WHAT GOES WHERE.  Each stack starts with its thread, "MainThread (pid
 * 4080)", then one frame per call, "qualified.name (file:first line)";
 * what a thread did with no Python frame ends in CAL_EXPORT_NO_FRAME.  The
 * number is the stack's self time in whole microseconds (python + native +
 * system + waiting; "collapsed"), or its bytes allocated (Python + native;
 * "collapsed-alloc").  Stacks that differ only in their lines (a node is a
 * frame at a line) become one line, their figures added; a stack of 0 is
 * left out.  Lines are sorted (bytewise), as flamegraph.pl sorts them.
 *
 * NAMES.  The format has no escapes: a ';' would split a frame in two and
 * a newline the line.  So in names, files and thread names ';' becomes
 * ',' and every control character (a newline, a tab, C0, DEL) '?'.  Each
 * frame ends in ')', so no frame ends in digits that flamegraph.pl could
 * take for a second count.
 */
#include "cal_export.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* `s` with ';' and controls replaced (see NAMES above). */
static void put_name(cal_buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char r = c == ';' ? ',' : (c < 0x20 || c == 0x7f) ? '?' : (char)c;
        cal_buf_add(b, &r, 1);
    }
}

typedef struct line {
    size_t at, len; /* the stack's text in the text buffer */
    const char *s;  /* there, once the buffer is complete */
    int64_t value;
} line;

static int cmp_lines(const void *a, const void *b)
{
    const line *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

void cal_collapsed_write(const cal_extable *t, int alloc, cal_buf *out)
{
    cal_buf text;
    cal_buf_init(&text);
    line *lines = calloc(t->nnodes ? t->nnodes : 1, sizeof *lines);
    int64_t *path = calloc(t->nnodes ? t->nnodes : 1, sizeof *path);
    if (!lines || !path) {
        out->failed = 1;
        goto done;
    }
    size_t n = 0;
    for (size_t i = 0; i < t->nnodes; i++) {
        const cal_exnode *nd = &t->nodes[i];
        int64_t v = alloc ? nd->alloc_bytes : (int64_t)llround(nd->wall_ns / 1e3);
        if (v <= 0)
            continue;
        size_t depth = 0;
        for (int64_t p = (int64_t)i; p >= 0 && t->nodes[p].frame >= 0;
             p = t->nodes[p].parent)
            path[depth++] = t->nodes[p].frame;
        lines[n].at = text.len;
        put_name(&text, t->thread_names[nd->thread]);
        while (depth-- > 0) {
            size_t f = (size_t)path[depth];
            cal_buf_add(&text, ";", 1);
            put_name(&text, cal_extable_frame_name(t, f));
            cal_buf_add(&text, " (", 2);
            put_name(&text, cal_extable_frame_file(t, f));
            cal_buf_printf(&text, ":%lld)", (long long)cal_extable_frame_line(t, f));
        }
        if (nd->frame < 0)
            cal_buf_puts(&text, ";" CAL_EXPORT_NO_FRAME);
        lines[n].len = text.len - lines[n].at;
        lines[n].value = v;
        n++;
    }
    if (!cal_buf_ok(&text)) {
        out->failed = 1;
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        lines[i].s = text.data + lines[i].at;
    qsort(lines, n, sizeof *lines, cmp_lines);
    for (size_t i = 0; i < n;) {
        int64_t sum = 0;
        size_t k = i;
        while (k < n && cmp_lines(&lines[i], &lines[k]) == 0)
            sum += lines[k++].value;
        cal_buf_add(out, lines[i].s, lines[i].len);
        cal_buf_printf(out, " %lld\n", (long long)sum);
        i = k;
    }
done:
    free(lines);
    free(path);
    cal_buf_free(&text);
}
