/*
 * cal_buf — a growable byte buffer for the writers.  Allocation failure is
 * sticky: once set, further appends do nothing and cal_buf_ok() says so.
 */
#ifndef CAL_BUF_H
#define CAL_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct cal_buf {
    char *data;
    size_t len, cap;
    int failed;
} cal_buf;

void cal_buf_init(cal_buf *b);
void cal_buf_free(cal_buf *b);
int cal_buf_ok(const cal_buf *b);
void cal_buf_add(cal_buf *b, const char *s, size_t n);
void cal_buf_puts(cal_buf *b, const char *s);
void cal_buf_printf(cal_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Append `n` copies of the UTF-8 character or string `s`. */
void cal_buf_repeat(cal_buf *b, const char *s, int n);
/* Write the buffer to `path` atomically (temporary file, then rename).
   On success return 0; on error return -1 with errno set. */
int cal_buf_write_file(const cal_buf *b, const char *path);

#endif
