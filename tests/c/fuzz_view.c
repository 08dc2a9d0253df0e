/*
 * libFuzzer target for the JSON reader and both renderers (longer runs than
 * the mutation fuzzer in test_core.c):
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Isrc/core \
 *       tests/c/fuzz_view.c src/core/cal_jsonr.c src/core/cal_text.c \
 *       src/core/cal_html.c src/core/cal_buf.c -lm -o /tmp/fuzz_view
 *   /tmp/fuzz_view -max_total_time=600 -dict=tests/c/fuzz_view.dict tests/data
 */
#include "cal_jsonr.h"
#include "cal_view.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cal_jdoc d;
    char err[160];
    if (cal_jdoc_parse(&d, (const char *)data, size, err, sizeof err) == 0 &&
        cal_view_check(d.root, err, sizeof err) == 0) {
        cal_buf b;
        cal_buf_init(&b);
        cal_view_opts o = {60 + (int)(size % 120), (int)(size & 1), 1.0, 300, "out.json"};
        cal_view_text(d.root, &o, &b);
        cal_view_html(d.root, (const char *)data, size, "CALIPERS_TITLE CALIPERS_PROFILE", 31, &b);
        cal_buf_free(&b);
    }
    cal_jdoc_free(&d);
    return 0;
}
