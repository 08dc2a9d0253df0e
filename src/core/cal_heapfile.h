/*
 * cal_heapfile — a heap scan saved as a file (docs/FORMAT.md, "Heap dump
 * files"), and read back: the graph (each object's address, shallow size
 * and type; the references; the roots), the type names, the names of
 * modules, types and functions, and the line that allocated each object
 * calipers sampled.  Not the dominators: the reader computes them again
 * (cal_heapgraph_dominators), so a file cannot hold retained sizes that
 * disagree with its graph.
 *
 * The reader's input is untrusted (a file a user names): every count is
 * checked against the bytes left before anything is allocated for it,
 * every index against its table, and the file ends with a checksum.
 * Plain C, no globals; one owner at a time.
 */
#ifndef CAL_HEAPFILE_H
#define CAL_HEAPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "cal_buf.h"
#include "cal_heapgraph.h"

#define CAL_HEAPFILE_VERSION 1

typedef struct cal_heapfile {
    char *meta_json; /* one JSON object (owned; "{}" when NULL) */
    char **strings;  /* UTF-8 without NUL, owned */
    size_t nstrings;
    uint32_t *types; /* per type id: the string index of its name */
    size_t ntypes;
    /* The graph: n, addr, size, type (an id below ntypes, maybe |
       CAL_HEAP_MERGED), off (n + 1), edges, nedges, roots, nroots.  No
       hash set (slots), no dominators until the caller computes them. */
    cal_heapgraph g;
    uint32_t *names; /* (node, string) pairs, nodes increasing */
    size_t nnames;
    uint32_t *lines; /* (file string, line as int32) pairs */
    size_t nlines;
    uint32_t *line_of; /* per node: line index + 1, 0 for none; NULL if none has one */
} cal_heapfile;

void cal_heapfile_init(cal_heapfile *f);
void cal_heapfile_free(cal_heapfile *f);

/* The file's bytes.  The graph's arrays are read where they are (the
   writer owns none of them); the encoder checks what a reader would
   refuse.  On success return 0; -1 with errno ENOMEM, or EINVAL for
   content the format cannot hold (an index out of range, a string that
   is not UTF-8 without NUL, more nodes or edges than it counts). */
int cal_heapfile_encode(const cal_heapfile *f, cal_buf *out);

/* Write the file to `path` (cal_buf_write_file: created exclusively, only
   a regular file replaced).  0, or -1 with errno set. */
int cal_heapfile_write(const cal_heapfile *f, const char *path);

/* Read a heap dump from bytes, into `out` (initialised here): everything
   is checked, and a file that is not a heap dump, of a newer version,
   truncated or inconsistent is refused.  On success return 0; on error -1
   with a one-line reason in err and `out` empty. */
int cal_heapfile_decode(const char *data, size_t len, cal_heapfile *out, char *err,
                        size_t errlen);

/* The same from the file at `path` (cal_binfile_read: no symbolic link
   followed, a regular file of at most 16 GiB).  After -1, errno says
   whose fault it was: nonzero for the system's, 0 for the file's; the
   reason starts with the path. */
int cal_heapfile_read(const char *path, cal_heapfile *out, char *err, size_t errlen);

/* Is this the start of a heap dump (its magic)? */
int cal_heapfile_is_heapfile(const char *data, size_t len);

#endif
