/*
 * cal_binfile — what calipers' binary files share (memory snapshots,
 * cal_snapshot; heap dumps, cal_heapfile; docs/FORMAT.md): little-endian
 * integers written to a cal_buf, the 64-bit FNV-1a checksum that ends
 * each file, a checked cursor for reading untrusted bytes, and the safe
 * read of a whole regular file a user names.
 *
 * Plain C, no globals; a reader has one owner.
 */
#ifndef CAL_BINFILE_H
#define CAL_BINFILE_H

#include <stddef.h>
#include <stdint.h>

#include "cal_buf.h"

/* Every file ends with an 8-byte checksum: readers leave it out of what
   is "left". */
#define CAL_BINFILE_TRAILER 8

/* 64-bit FNV-1a of data[0..n).  Defined here, not borrowed from cal_map,
   because a file format must not change when the map's hash does. */
uint64_t cal_binfile_checksum(const void *data, size_t n);

void cal_binfile_put_u32(cal_buf *b, uint32_t v);
void cal_binfile_put_u64(cal_buf *b, uint64_t v);

/* A cursor over untrusted bytes.  `what` names the file's kind in
   messages ("snapshot", "heap dump"); `section` what is being read. */
typedef struct cal_binr {
    const unsigned char *p;
    size_t len, at;
    char *err;
    size_t errlen;
    const char *what;
    const char *section;
} cal_binr;

/* Write a one-line reason to r->err; returns -1. */
int cal_binr_fail(cal_binr *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* 0 if n more bytes are there before the trailer, else -1 ("truncated"). */
int cal_binr_need(cal_binr *r, size_t n);
/* The next integer; the caller checked with cal_binr_need first. */
uint32_t cal_binr_u32(cal_binr *r);
uint64_t cal_binr_u64(cal_binr *r);
/* Read a section's count (a u32, or a u64 when `wide`) and check that
   that many items of at least `min_item` bytes fit in what is left, so
   that a lying count is refused before anything is allocated for it.
   0 or -1. */
int cal_binr_count(cal_binr *r, const char *section, size_t min_item, int wide,
                   size_t *count);

/* Is text[0..len) UTF-8 without a NUL?  The offset of the first bad byte,
   or len. */
size_t cal_binfile_utf8_bad_at(const char *text, size_t len);

/* Read the regular file at `path` whole into *data (malloc'd) and *len:
   opened without following a symbolic link (ELOOP), without waiting on a
   FIFO, at most `max` bytes.  On success return 0.  On error return -1
   with a one-line reason in err that starts with the path, and errno
   saying whose fault it was: nonzero for the system's (cannot be opened
   or read, a directory: EISDIR, out of memory), 0 for the file's (not a
   regular file, larger than max: "<what> file larger than N bytes"). */
int cal_binfile_read(const char *path, const char *what, size_t max, char **data,
                     size_t *len, char *err, size_t errlen);

#endif
