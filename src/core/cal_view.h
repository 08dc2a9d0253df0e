/*
 * cal_view — the report renderers.  They read only a parsed JSON profile
 * (cal_jsonr), never the live engine, so `calipers run` and `calipers view`
 * render any saved profile the same way.
 *
 *   cal_text.c   the terminal report: header, per-file line tables with the
 *                source, per-file functions, leaks; fits a width; ANSI colour
 *                and block glyphs on a terminal, plain ASCII otherwise.
 *   cal_html.c   the offline HTML viewer: a template (src/viewer) with the
 *                profile embedded; the page's script draws it.
 */
#ifndef CAL_VIEW_H
#define CAL_VIEW_H

#include "cal_buf.h"
#include "cal_jsonr.h"

#include <stddef.h>

#define CAL_VIEW_SCHEMA "calipers/1"

typedef struct cal_view_opts {
    int width;          /* columns; at least 60 is used */
    int tty;            /* ANSI colour and Unicode glyphs; else plain ASCII */
    double min_percent; /* show lines holding at least this % of time or memory */
    int max_rows;       /* at most this many source rows in all (about 300) */
    const char *outfile; /* named at the end ("profile written to"), or NULL */
} cal_view_opts;

/* 0 if `root` is a profile these renderers understand; else -1 with a
   one-line reason in err ("not a calipers profile", "schema calipers/2 is
   newer than this calipers (calipers/1)"). */
int cal_view_check(const cal_jv *root, char *err, size_t cap);

/* Append the terminal report of `root` (checked) to out. */
void cal_view_text(const cal_jv *root, const cal_view_opts *o, cal_buf *out);

/* Append the HTML page: `tmpl` (tlen bytes) with "CALIPERS_TITLE" replaced
   by the HTML-escaped program name and "CALIPERS_PROFILE" by `json` (the
   profile's text, len bytes, already parsed into `root`), with every '<'
   written as \u003c so no string in it can close the <script> element. */
void cal_view_html(const cal_jv *root, const char *json, size_t len, const char *tmpl,
                   size_t tlen, cal_buf *out);

#endif
