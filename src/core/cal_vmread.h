/*
 * cal_vmread — reads of this process's own memory that fail instead of
 * faulting: memory another thread may free, unmap or overwrite while we
 * read it (the sampler's peek at the main thread's frames).  The reads go
 * through process_vm_readv into a window of two 4 KiB blocks, so that
 * objects next to each other (3.11+'s frame stack) cost one system call.
 * Addresses are treated as untrusted numbers: a garbage pointer fails the
 * read, whatever its value.  Async-signal-safe, no allocation; one window
 * per reading thread.
 */
#ifndef CAL_VMREAD_H
#define CAL_VMREAD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CAL_VMREAD_BLOCK 4096
#define CAL_VMREAD_MAX 1024 /* the largest object read at once */

typedef struct cal_vmread {
    pid_t pid;
    uintptr_t base;   /* buf[0] is the byte at base */
    uintptr_t lo, hi; /* what buf holds: [lo, hi), empty when lo == hi */
    char buf[2 * CAL_VMREAD_BLOCK + CAL_VMREAD_MAX];
} cal_vmread;

/* Empty the window, for reads of process `pid` (ours: getpid()). */
void cal_vmread_reset_sigsafe(cal_vmread *w, pid_t pid);

/* Copy len bytes at addr into out.  Returns 0, or -1 with errno set if any
   of them cannot be read (unmapped, len > CAL_VMREAD_MAX, a range that
   wraps around the address space: EFAULT or EINVAL; ENOSYS or EPERM when
   process_vm_readv is not allowed at all).  Bytes already in the window
   are not read again: call reset when they may have changed. */
int cal_vmread_sigsafe(cal_vmread *w, const void *addr, void *out, size_t len);

#endif
