/* cal_buf — see cal_buf.h. */
#define _GNU_SOURCE
#include "cal_buf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cal_buf_init(cal_buf *b)
{
    memset(b, 0, sizeof(*b));
}

void cal_buf_free(cal_buf *b)
{
    free(b->data);
    cal_buf_init(b);
}

int cal_buf_ok(const cal_buf *b)
{
    return !b->failed;
}

static int reserve(cal_buf *b, size_t extra)
{
    if (b->failed)
        return -1;
    if (b->len + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data) {
        b->failed = 1;
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

void cal_buf_add(cal_buf *b, const char *s, size_t n)
{
    if (reserve(b, n) != 0)
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void cal_buf_puts(cal_buf *b, const char *s)
{
    cal_buf_add(b, s, strlen(s));
}

void cal_buf_printf(cal_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(b, (size_t)n) != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void cal_buf_repeat(cal_buf *b, const char *s, int n)
{
    for (int i = 0; i < n; i++)
        cal_buf_puts(b, s);
}

int cal_buf_write_file(const cal_buf *b, const char *path)
{
    if (b->failed) {
        errno = ENOMEM;
        return -1;
    }
    size_t n = strlen(path);
    char *tmp = malloc(n + 32);
    if (!tmp)
        return -1;
    snprintf(tmp, n + 32, "%s.tmp-%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        free(tmp);
        return -1;
    }
    size_t off = 0;
    while (off < b->len) {
        ssize_t w = write(fd, b->data + off, b->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            goto fail;
        off += (size_t)w;
    }
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        fd = -1;
        goto fail;
    }
    free(tmp);
    return 0;
fail:;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    free(tmp);
    errno = saved;
    return -1;
}
