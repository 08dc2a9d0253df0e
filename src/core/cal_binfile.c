/*
 * cal_binfile — see cal_binfile.h.  The pieces the snapshot and heap dump
 * files share, so that both check untrusted bytes the same way.
 */
#define _GNU_SOURCE
#include "cal_binfile.h"

#include "cal_utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t cal_binfile_checksum(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

void cal_binfile_put_u32(cal_buf *b, uint32_t v)
{
    unsigned char c[4] = {(unsigned char)v, (unsigned char)(v >> 8),
                          (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    cal_buf_add(b, (const char *)c, 4);
}

void cal_binfile_put_u64(cal_buf *b, uint64_t v)
{
    cal_binfile_put_u32(b, (uint32_t)v);
    cal_binfile_put_u32(b, (uint32_t)(v >> 32));
}

int cal_binr_fail(cal_binr *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, r->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int cal_binr_need(cal_binr *r, size_t n)
{
    if (r->len - r->at - CAL_BINFILE_TRAILER >= n)
        return 0;
    return cal_binr_fail(r, "truncated %s: %zu bytes, ended in the %s", r->what, r->len,
                         r->section);
}

uint32_t cal_binr_u32(cal_binr *r)
{
    const unsigned char *c = r->p + r->at;
    r->at += 4;
    return (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 |
           (uint32_t)c[3] << 24;
}

uint64_t cal_binr_u64(cal_binr *r)
{
    uint64_t lo = cal_binr_u32(r);
    return lo | (uint64_t)cal_binr_u32(r) << 32;
}

int cal_binr_count(cal_binr *r, const char *section, size_t min_item, int wide,
                   size_t *count)
{
    r->section = section;
    if (cal_binr_need(r, wide ? 8 : 4) != 0)
        return -1;
    uint64_t n = wide ? cal_binr_u64(r) : cal_binr_u32(r);
    size_t left = r->len - r->at - CAL_BINFILE_TRAILER;
    if (n > left / min_item)
        return cal_binr_fail(
            r,
            "truncated or corrupt %s: %s count %llu needs at least %llu bytes, "
            "%zu are left",
            r->what, section, (unsigned long long)n,
            (unsigned long long)(n > UINT64_MAX / min_item ? UINT64_MAX : n * min_item),
            left);
    *count = (size_t)n;
    return 0;
}

size_t cal_binfile_utf8_bad_at(const char *text, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t n = cal_utf8_decode(text + i, len - i, &cp);
        if (n == 0 || cp == 0)
            return i;
        i += n;
    }
    return len;
}

/* Read what is left of fd (a regular file of about `hint` bytes) into
 *data.  0, or -1 with errno set (0 when the file outgrew max). */
static int read_all(int fd, size_t hint, size_t max, char **data, size_t *len)
{
    size_t cap = hint < max ? hint + 1 : max + 1, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                free(buf);
                errno = 0;
                return -1;
            }
            size_t ncap = cap > max / 2 ? max + 1 : cap * 2;
            char *p = realloc(buf, ncap);
            if (!p) {
                free(buf);
                errno = ENOMEM;
                return -1;
            }
            buf = p;
            cap = ncap;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int saved = errno;
            free(buf);
            errno = saved;
            return -1;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    *data = buf;
    *len = n;
    return 0;
}

int cal_binfile_read(const char *path, const char *what, size_t max, char **data,
                     size_t *len, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused
       below, and a regular file ignores the flag. */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int saved = errno;
        snprintf(err, errlen, "%s: %s", path,
                 saved == ELOOP ? "is a symbolic link" : strerror(saved));
        errno = saved;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int saved = errno;
        close(fd);
        snprintf(err, errlen, "%s: %s", path, strerror(saved));
        errno = saved;
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        int dir = S_ISDIR(st.st_mode);
        snprintf(err, errlen, "%s: %s", path,
                 dir ? strerror(EISDIR) : "not a regular file (a device or a FIFO)");
        errno = dir ? EISDIR : 0;
        return -1;
    }
    int rc = (uint64_t)st.st_size > max
                 ? (errno = 0, -1)
                 : read_all(fd, (size_t)st.st_size, max, data, len);
    int saved = errno;
    close(fd);
    if (rc != 0) {
        if (saved)
            snprintf(err, errlen, "%s: %s", path, strerror(saved));
        else
            snprintf(err, errlen, "%s: %s file larger than %zu bytes", path, what, max);
    }
    errno = saved;
    return rc;
}
