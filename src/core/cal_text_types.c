/*
 * cal_text_types — the terminal report's "what is allocated" block: the
 * types that took the most sampled bytes, with their share, how much of
 * them survived a garbage collection and their median lifetime, from the
 * profile's "allocated_types" section (nothing when it has none).  Type
 * names are the program's text: control and reordering characters are
 * shown as their codes (cal_view_control), as everywhere in the report.
 */
#include "cal_view.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define TYPES_SHOWN 8
#define NAME_COLS 28

static void bytes_text(char *dst, size_t cap, double b)
{
    static const char *const unit[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int u = 0;
    while (fabs(b) >= 999.95 && u < 5) {
        b /= 1000;
        u++;
    }
    snprintf(dst, cap, u ? "%.1f%s" : "%.0f%s", b, unit[u]);
}

static void seconds_text(char *dst, size_t cap, double s)
{
    if (s < 0.0000995)
        snprintf(dst, cap, "%.0fus", s * 1e6);
    else if (s < 0.0995)
        snprintf(dst, cap, "%.1fms", s * 1e3);
    else
        snprintf(dst, cap, "%.1fs", s);
}

/* The name, made safe and cut to NAME_COLS columns (ASCII counts one
   column; anything else is shown as its code). */
static void name_text(char *dst, size_t cap, const char *s)
{
    size_t n = 0;
    while (*s && n + 12 < cap && n < NAME_COLS) {
        size_t len = 1;
        unsigned code = cal_view_control(s, &len);
        unsigned char c = (unsigned char)*s;
        if (code || c >= 0x80) {
            /* Shown as a code: one way to stay within the width. */
            n += (size_t)snprintf(dst + n, cap - n, "<%02X>", c);
            s += code ? len : 1;
        } else {
            dst[n++] = (char)c;
            s++;
        }
    }
    if (*s && n >= NAME_COLS) {
        n = NAME_COLS - 3;
        memcpy(dst + n, "...", 3);
        n += 3;
    }
    dst[n] = '\0';
}

void cal_view_text_types(const cal_jv *root, int width, cal_buf *out)
{
    const cal_jv *sec = cal_jv_get(root, "allocated_types");
    const cal_jv *types = cal_jv_get(sec, "types");
    size_t n = cal_jv_len(types);
    if (!n)
        return;
    double all = 0, samples = 0;
    for (size_t i = 0; i < n; i++) {
        all += cal_jv_getnum(cal_jv_at(types, i), "bytes", 0);
        samples += cal_jv_getnum(cal_jv_at(types, i), "samples", 0);
    }
    char total[24];
    bytes_text(total, sizeof total, all);
    cal_buf_printf(
        out, "\nwhat is allocated: %s in %.0f samples, %.0f garbage collections\n",
        total, samples, cal_jv_getnum(sec, "gc_collections", 0));
    int wide = width >= 80;
    cal_buf_printf(out, "  %-*s %9s %6s %9s%s\n", NAME_COLS, "type", "bytes", "share",
                   "survived", wide ? "  median life" : "");
    for (size_t i = 0; i < n && i < TYPES_SHOWN; i++) {
        const cal_jv *t = cal_jv_at(types, i);
        char name[NAME_COLS * 4 + 16], b[24], share[16], surv[16], life[64] = "";
        name_text(name, sizeof name, cal_jv_getstr(t, "type", "?"));
        double bytes = cal_jv_getnum(t, "bytes", 0);
        bytes_text(b, sizeof b, bytes);
        snprintf(share, sizeof share, "%.0f%%", all > 0 ? 100 * bytes / all : 0);
        const cal_jv *sf = cal_jv_get(t, "survived_fraction");
        if (cal_jv_is(sf, CAL_JNUM))
            snprintf(surv, sizeof surv, "%.0f%%", 100 * cal_jv_num(sf, 0));
        else
            snprintf(surv, sizeof surv, "-");
        const cal_jv *mb = cal_jv_get(t, "median_lifetime_bytes");
        if (wide && cal_jv_is(mb, CAL_JNUM)) {
            char lb[24], ls[24];
            bytes_text(lb, sizeof lb, cal_jv_num(mb, 0));
            seconds_text(ls, sizeof ls, cal_jv_getnum(t, "median_lifetime_s", 0));
            snprintf(life, sizeof life, "  %s / %s", lb, ls);
        }
        cal_buf_printf(out, "  %-*s %9s %6s %9s%s\n", NAME_COLS, name, b, share, surv,
                       life);
    }
    if (n > TYPES_SHOWN)
        cal_buf_printf(out, "  ... and %zu more types\n", n - TYPES_SHOWN);
}
