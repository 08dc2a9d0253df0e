/* Another malloc, preloaded: here libc's behind wrappers of its own, which
   is enough to make the process's malloc not the one calipers' shim
   forwards to (as with jemalloc or tcmalloc preloaded).  Built and
   preloaded by tests/test_inprocess_memory.py. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

void *malloc(size_t n) { return __libc_malloc(n); }
void *calloc(size_t n, size_t m) { return __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
