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
/* Replace the file at `path` whole with the buffer, safely on a shared
   machine (see "Files calipers creates" in docs/INTERNALS.md): the data
   goes to a temporary file with a random name in the same directory,
   created exclusively (O_EXCL|O_NOFOLLOW, mode 0600), which gets the mode
   a new file would get (0666 less the umask) and is then renamed over
   `path`.  Only a regular file, or nothing, is replaced: if `path` is a
   symbolic link (ELOOP), a directory (EISDIR) or anything else that is not
   a regular file (EEXIST) nothing is written.  A reader never sees half a
   file; a failure leaves no temporary file behind.
   On success return 0; on error return -1 with errno set. */
int cal_buf_write_file(const cal_buf *b, const char *path);

#endif
