/* cal_buf — see cal_buf.h.  The growable buffer, and the one way the
   engine writes a file (cal_buf_write_file: exclusive temporary file,
   then rename). */
#define _GNU_SOURCE
#include "cal_buf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void cal_buf_init(cal_buf *b) { memset(b, 0, sizeof(*b)); }

void cal_buf_free(cal_buf *b)
{
    free(b->data);
    cal_buf_init(b);
}

int cal_buf_ok(const cal_buf *b) { return !b->failed; }

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

void cal_buf_puts(cal_buf *b, const char *s) { cal_buf_add(b, s, strlen(s)); }

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

/*
 * Writing a file safely.  calipers may run as root in a directory others
 * can write to (/tmp), so a name someone else could have planted is never
 * opened: the temporary file gets a random name and is created with
 * O_EXCL|O_NOFOLLOW (the open fails rather than follow a symbolic link or
 * reuse a file that exists), readable by its owner only until it is
 * complete.  The final rename replaces the directory entry, never what a
 * symbolic link there points to; before it, the entry is checked to be a
 * regular file or nothing, so a device (/dev/null), a FIFO or a directory
 * is never replaced.  Everything is relative to one descriptor of the
 * directory, so a directory renamed meanwhile cannot redirect the writes.
 * Between that check and the rename, only someone who may change the
 * directory could put something else there, and the rename then replaces
 * their entry, never what it points to.
 */

#define TMP_TRIES 100

/* Is the entry `base` in `dirfd` absent or a regular file?  Returns 0 if
   so; -1 with errno ELOOP (a symbolic link), EISDIR (a directory), EEXIST
   (anything else) or the error of fstatat otherwise. */
static int check_target(int dirfd, const char *base)
{
    struct stat st;
    if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -1;
    if (S_ISREG(st.st_mode))
        return 0;
    errno = S_ISLNK(st.st_mode) ? ELOOP : S_ISDIR(st.st_mode) ? EISDIR : EEXIST;
    return -1;
}

/* The process's umask, read without changing it (umask() cannot be read
   without setting it, which would race with other threads), from
   /proc/self/status (Linux 4.7+).  Returns 0077 when it cannot be read:
   a file that stays private is the safe default. */
static mode_t current_umask(void)
{
    mode_t mask = 0077;
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mask;
    char text[1024];
    ssize_t n;
    do
        n = read(fd, text, sizeof text - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0)
        return mask;
    text[n] = '\0';
    const char *at = strstr(text, "\nUmask:");
    if (at) {
        char *end;
        long v = strtol(at + 7, &end, 8);
        if (end != at + 7 && v >= 0 && v <= 0777)
            mask = (mode_t)v;
    }
    return mask;
}

/* Fill `name` (at least 27 bytes) with ".calipers-XXXXXXXXXXXX.tmp", the
   X's random.  Unpredictable names are not what makes the file safe
   (O_EXCL does), but they keep someone who guesses them from making
   every attempt fail. */
static void temp_name(char *name, uint64_t *state)
{
    static const char digits[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
            ((uint64_t)getpid() << 16);
    }
    /* splitmix64 over the state, so that the fallback differs per try. */
    *state += r + 0x9E3779B97F4A7C15ull;
    uint64_t z = *state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    memcpy(name, ".calipers-", 10);
    for (int i = 0; i < 12; i++) {
        name[10 + i] = digits[z % 36];
        z /= 36;
        if (i == 5)
            z ^= r;
    }
    memcpy(name + 22, ".tmp", 5);
}

static int write_all(int fd, const char *data, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        off += (size_t)w;
    }
    return 0;
}

int cal_buf_write_file(const cal_buf *b, const char *path)
{
    if (b->failed) {
        errno = ENOMEM;
        return -1;
    }
    /* The directory and the entry's name in it. */
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base) {
        errno = EISDIR; /* "dir/" */
        return -1;
    }
    size_t dlen = slash ? (size_t)(slash - path) : 1;
    char *dir = malloc(dlen + 1);
    if (!dir)
        return -1;
    if (!slash)
        memcpy(dir, ".", 2);
    else if (dlen == 0)
        memcpy(dir, "/", 2);
    else {
        memcpy(dir, path, dlen);
        dir[dlen] = '\0';
    }
    int dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int saved = errno;
    free(dir);
    if (dirfd < 0) {
        errno = saved;
        return -1;
    }
    char tmp[32];
    int fd = -1;
    if (check_target(dirfd, base) != 0)
        goto fail;
    uint64_t state = (uint64_t)(uintptr_t)b;
    for (int i = 0; i < TMP_TRIES && fd < 0; i++) {
        temp_name(tmp, &state);
        fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0600);
        if (fd < 0 && errno != EEXIST)
            goto fail;
    }
    if (fd < 0)
        goto fail; /* EEXIST every time */
    if (write_all(fd, b->data, b->len) != 0 || fchmod(fd, 0666 & ~current_umask()) != 0)
        goto fail_unlink;
    int rc = close(fd);
    fd = -1;
    if (rc != 0 || check_target(dirfd, base) != 0 ||
        renameat(dirfd, tmp, dirfd, base) != 0)
        goto fail_unlink;
    close(dirfd);
    return 0;
fail_unlink:
    saved = errno;
    unlinkat(dirfd, tmp, 0);
    errno = saved;
fail:
    saved = errno;
    if (fd >= 0)
        close(fd);
    close(dirfd);
    errno = saved;
    return -1;
}
