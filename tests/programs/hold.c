/* A native library that holds blocks for Python to free later: built by
   tests/test_inprocess_memory.py and loaded with ctypes after
   calipers.start().  Built with full RELRO and -fno-plt, so its GOT is
   read-only and its calls go through GLOB_DAT entries. */
#include <stdlib.h>
#include <string.h>

#define MAX_BLOCKS 4096

static void *blocks[MAX_BLOCKS];

/* malloc `count` blocks of `size` bytes (written, so they are real) into
   slots first..first+count; returns how many it got. */
int hold(int first, int count, size_t size)
{
    int got = 0;
    for (int i = first; i < first + count && i < MAX_BLOCKS; i++) {
        blocks[i] = i % 2 ? calloc(1, size) : malloc(size);
        if (!blocks[i])
            break;
        memset(blocks[i], 1, size);
        got++;
    }
    return got;
}

/* malloc through a table of function pointers, as libraries keep for their
   users to replace: a data relocation, not a GOT entry.  volatile: the
   call reads the table. */
static void *(*volatile table_malloc)(size_t) = malloc;

int hold_via_table(int first, int count, size_t size)
{
    int got = 0;
    for (int i = first; i < first + count && i < MAX_BLOCKS; i++) {
        blocks[i] = table_malloc(size);
        if (!blocks[i])
            break;
        memset(blocks[i], 1, size);
        got++;
    }
    return got;
}

/* Grow each held block of the range with realloc, then free them all. */
void release(int first, int count, size_t grown)
{
    for (int i = first; i < first + count && i < MAX_BLOCKS; i++) {
        void *p = realloc(blocks[i], grown);
        free(p ? p : blocks[i]);
        blocks[i] = NULL;
    }
}

/* The malloc this library calls: its GOT entry's value. */
void *malloc_in_use(void) { return (void *)&malloc; }
