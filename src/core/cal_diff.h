/*
 * cal_diff — compare two runs (`calipers diff OLD NEW`): two profiles
 * (parsed JSON, cal_jsonr, already passed cal_view_check) or two memory
 * snapshots (cal_snapshot, already read).  Rows are keyed by place (file
 * and line, function, file, or whole traceback), matched across the two
 * runs, sorted by the largest absolute change, and rendered as a terminal
 * table, a self-contained HTML page or JSON (docs/FORMAT.md, "Diffs").
 *
 * Plain C, no state outside the call: safe to call from any thread that
 * owns its inputs.
 */
#ifndef CAL_DIFF_H
#define CAL_DIFF_H

#include "cal_buf.h"
#include "cal_jsonr.h"
#include "cal_snapshot.h"

#include <stddef.h>

enum {
    CAL_DIFF_BY_LINE,
    CAL_DIFF_BY_FUNCTION,
    CAL_DIFF_BY_FILE,
    CAL_DIFF_BY_TRACEBACK
};
/* What rows are sorted by (profiles; snapshots are always sorted by size). */
enum { CAL_DIFF_SORT_TIME, CAL_DIFF_SORT_ALLOC, CAL_DIFF_SORT_LIVE, CAL_DIFF_SORT_END };
enum { CAL_DIFF_TEXT, CAL_DIFF_HTML, CAL_DIFF_JSON };

typedef struct cal_diff_opts {
    int by;               /* CAL_DIFF_BY_*: TRACEBACK for snapshots only */
    int sort;             /* CAL_DIFF_SORT_* */
    int top;              /* rows shown at most; 0: all */
    int format;           /* CAL_DIFF_TEXT, _HTML or _JSON */
    int width;            /* text: columns (at least 60 are used) */
    int tty;              /* text: ANSI colour and Unicode; else plain ASCII */
    const char *old_name; /* the inputs' names, for the headings */
    const char *new_name;
} cal_diff_opts;

/* Append the comparison of two checked profiles to `out`.  On success
   return 0; on error (an option profiles do not take, out of memory)
   return -1 with a one-line reason in err (cap bytes). */
int cal_diff_profiles(const cal_jv *old, const cal_jv *nw, const cal_diff_opts *o,
                      cal_buf *out, char *err, size_t cap);

/* Append the comparison of two snapshots (as cal_snapshot_read leaves
   them: every index in range) to `out`.  Each trace stands for `size`
   bytes and size / block_size blocks; the figures carry their standard
   errors (see the essay in cal_diff.c).  0, or -1 with a reason in err. */
int cal_diff_snapshots(const cal_snapshot *old, const cal_snapshot *nw,
                       const cal_diff_opts *o, cal_buf *out, char *err, size_t cap);

#endif
