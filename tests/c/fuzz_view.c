/*
 * libFuzzer target for the JSON reader, the profile check and both
 * renderers (longer runs than the mutation fuzzers in test_core.c):
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined,float-cast-overflow \
 *       -Isrc/core tests/c/fuzz_view.c src/core/cal_jsonr.c src/core/cal_view.c \
 *       src/core/cal_text.c src/core/cal_html.c src/core/cal_buf.c \
 *       -lm -o /tmp/fuzz_view
 *   /tmp/fuzz_view -max_total_time=600 -dict=tests/c/fuzz_view.dict tests/data
 *
 * The dictionary holds member names and values of other types and at the
 * edges of the check's ranges, so that byte mutations also confuse types;
 * tests/security/test_fuzz_view.py does that at the JSON level, and runs
 * what is accepted in a browser.  Beyond not crashing: whatever the check
 * accepts renders within the width, and in plain mode without an escape
 * sequence.
 */
#include "cal_jsonr.h"
#include "cal_view.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cal_jdoc d;
    char err[160];
    if (cal_jdoc_parse(&d, (const char *)data, size, err, sizeof err) == 0 &&
        cal_view_check(d.root, err, sizeof err) == 0) {
        cal_buf b;
        cal_buf_init(&b);
        cal_view_opts o = {
            60 + (int)(size % 120), (int)(size & 1),     1.0, 300, "out.json",
            (int)(size >> 1 & 1),   (int)(size >> 2 & 1)};
        cal_view_text(d.root, &o, &b);
        if (!o.tty && b.data && memchr(b.data, '\033', b.len))
            abort(); /* a control from the profile reached the terminal */
        cal_view_html(d.root, (const char *)data, size,
                      "CALIPERS_TITLE CALIPERS_PROFILE", 31, &b);
        cal_buf_free(&b);
    }
    cal_jdoc_free(&d);
    return 0;
}
