/*
 * cal_html — the offline HTML viewer (see cal_view.h).  The page is a
 * hand-written template (src/viewer/viewer.html: HTML, CSS and a script that
 * draws the report from the embedded profile); this file fills in its two
 * holes.  Nothing in the page is fetched: no network, no fonts, no CDN.
 *
 * SAFETY.  The profile is the user's data (source text, file names):
 *   - it goes into a <script type="application/json"> element with every
 *     '<' written as \u003c, so nothing in it can close the element or open
 *     a comment ("<!--") however the file was made; JSON.parse reads the
 *     escape back as '<'.  (The profile was parsed before, so each '<' is
 *     inside a string, where the escape is valid JSON.)
 *   - the title is HTML-escaped, its controls shown as their code
 *     ("&lt;U+202E&gt;", cal_view_control), as the script shows them in the
 *     page: a right-to-left override in a file name cannot disguise it;
 *   - the script puts profile text into the page with textContent only;
 *   - what is embedded is the JSON document itself, a UTF-8 byte order mark
 *     (which the reader skips, and JSON.parse would not) left out.
 */
#include "cal_view.h"

#include <string.h>

void cal_view_add_html(cal_buf *out, const char *s)
{
    for (; *s; s++) {
        size_t len;
        unsigned cp = cal_view_control(s, &len);
        if (cp) {
            cal_buf_printf(out, "&lt;U+%04X&gt;", cp);
            s += len - 1;
            continue;
        }
        switch (*s) {
        case '<':
            cal_buf_puts(out, "&lt;");
            break;
        case '>':
            cal_buf_puts(out, "&gt;");
            break;
        case '&':
            cal_buf_puts(out, "&amp;");
            break;
        case '"':
            cal_buf_puts(out, "&quot;");
            break;
        case '\'':
            cal_buf_puts(out, "&#39;");
            break;
        default:
            cal_buf_add(out, s, 1);
        }
    }
}

static void add_json_for_script(cal_buf *out, const char *json, size_t len)
{
    size_t start = 0;
    for (size_t i = 0; i < len; i++)
        if (json[i] == '<') {
            cal_buf_add(out, json + start, i - start);
            cal_buf_puts(out, "\\u003c");
            start = i + 1;
        }
    cal_buf_add(out, json + start, len - start);
}

/* The first occurrence of `hole` in tmpl[0, n), or NULL. */
static const char *find(const char *tmpl, size_t n, const char *hole)
{
    size_t k = strlen(hole);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(tmpl + i, hole, k) == 0)
            return tmpl + i;
    return NULL;
}

void cal_view_html(const cal_jv *root, const char *json, size_t len, const char *tmpl,
                   size_t tlen, cal_buf *out)
{
    static const char *const holes[2] = {"CALIPERS_TITLE", "CALIPERS_PROFILE"};
    if (len >= 3 && memcmp(json, "\xEF\xBB\xBF", 3) == 0) {
        json += 3;
        len -= 3;
    }
    const char *p = tmpl, *end = tmpl + tlen;
    for (int h = 0; h < 2; h++) {
        const char *at = find(p, (size_t)(end - p), holes[h]);
        if (!at)
            break;
        cal_buf_add(out, p, (size_t)(at - p));
        if (h == 0) {
            const cal_jv *argv = cal_jv_get(cal_jv_get(root, "program"), "argv");
            const char *what = cal_jv_str(cal_jv_at(argv, 0), "profile");
            const char *slash = strrchr(what, '/');
            cal_view_add_html(out, slash ? slash + 1 : what);
        } else {
            add_json_for_script(out, json, len);
        }
        p = at + strlen(holes[h]);
    }
    cal_buf_add(out, p, (size_t)(end - p));
}
