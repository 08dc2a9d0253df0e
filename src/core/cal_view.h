/*
 * cal_view — the report renderers.  They read only a parsed JSON profile
 * (cal_jsonr), never the live engine, so `calipers run` and `calipers view`
 * render any saved profile the same way.
 *
 *   cal_view.c   the check a profile passes first: the types and ranges of
 *                every member they read, so neither they nor the page's
 *                script meet what they do not expect.
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
    int width;           /* columns; at least 60 is used */
    int tty;             /* ANSI colour and Unicode glyphs; else plain ASCII */
    double min_percent;  /* show lines holding at least this % of time or memory */
    int max_rows;        /* at most this many source rows in all (about 300) */
    const char *outfile; /* named at the end ("profile written to"), or NULL */
    /* The list of the hottest lines over CPU time only (waiting left out),
       and over the main thread only (from the stack table): the HTML
       viewer's two selectors.  Either one shows the list even when its
       lines are all in one file. */
    int hot_cpu, hot_main;
} cal_view_opts;

/* 0 if `root` is a profile these renderers understand: the schema's name,
   and every member they (or the HTML page's script) read of the type and
   within the range they expect.  Else -1 with a one-line reason in err
   ("not a calipers profile", "profile schema calipers/2 is not the one
   this calipers reads (calipers/1)", "corrupt profile: files[0].lines[3]
   .line: expected a whole number, not a string"). */
int cal_view_check(const cal_jv *root, char *err, size_t cap);

/* The code point that starts the UTF-8 text at p if the reports show it
   as its code ("<U+202E>", CAL_VIEW_CONTROL_COLS columns) rather than let
   it act: C0 and C1 controls and DEL, and the invisible characters that
   reorder or hide the text around them (bidirectional marks, embeddings,
   overrides and isolates, U+061C, zero-width space, word joiner and the
   invisible operators, the line and paragraph separators, the byte order
   mark, the interlinear annotation marks).  *len: its bytes.  0 if not
   one (p at a NUL, too).  The HTML viewer's script has the same list. */
unsigned cal_view_control(const char *p, size_t *len);
#define CAL_VIEW_CONTROL_COLS 8

/* Append the terminal report of `root` (checked) to out. */
void cal_view_text(const cal_jv *root, const cal_view_opts *o, cal_buf *out);

/* Append the report's "what is allocated" block (cal_text_types.c): the
   top types by sampled bytes, or nothing without "allocated_types". */
void cal_view_text_types(const cal_jv *root, int width, cal_buf *out);

/* Append s HTML-escaped (<, >, &, quotes), what cal_view_control names
   shown as its code. */
void cal_view_add_html(cal_buf *out, const char *s);

/* Append the HTML page: `tmpl` (tlen bytes) with "CALIPERS_TITLE" replaced
   by the HTML-escaped program name and "CALIPERS_PROFILE" by `json` (the
   profile's text, len bytes, already parsed into `root`), with every '<'
   written as \u003c so no string in it can close the <script> element. */
void cal_view_html(const cal_jv *root, const char *json, size_t len, const char *tmpl,
                   size_t tlen, cal_buf *out);

#endif
