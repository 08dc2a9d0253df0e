/*
 * cal_vmread — see cal_vmread.h.  Each read brings the 4 KiB block of the
 * address and the block below it, if mapped: from 3.11 on a thread's
 * frames sit next to each other on its frame stack, the caller's below the
 * callee's, so one read usually brings a dozen of them.
 *
 * The bounds are checked without forming addr + len first: a torn read of
 * a frame's `previous` once gave (void *)-1, whose addr + 8 wrapped to 7,
 * passed a naive `addr + len <= hi` and faulted in the copy.
 */
#define _GNU_SOURCE
#include "cal_vmread.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>

void cal_vmread_reset_sigsafe(cal_vmread *w, pid_t pid)
{
    w->pid = pid;
    w->base = w->lo = w->hi = 0;
}

/* Whether [a, a + len) lies in [lo, hi), no sum formed. */
static int holds(const cal_vmread *w, uintptr_t a, size_t len)
{
    return a >= w->lo && a <= w->hi && len <= w->hi - a && w->lo != w->hi;
}

int cal_vmread_sigsafe(cal_vmread *w, const void *addr, void *out, size_t len)
{
    uintptr_t a = (uintptr_t)addr;
    if (len > CAL_VMREAD_MAX || a > UINTPTR_MAX - len) {
        errno = len > CAL_VMREAD_MAX ? EINVAL : EFAULT;
        return -1;
    }
    if (!holds(w, a, len)) {
        uintptr_t block = a & ~(uintptr_t)(CAL_VMREAD_BLOCK - 1);
        size_t top = (size_t)(a + len - block); /* <= BLOCK - 1 + MAX */
        /* The block of addr first: if the one below is not mapped, the
           read still brings this one. */
        struct iovec local[2] = {{w->buf + CAL_VMREAD_BLOCK, top},
                                 {w->buf, CAL_VMREAD_BLOCK}};
        struct iovec remote[2] = {
            {(void *)block, top},
            {(void *)(block - CAL_VMREAD_BLOCK), CAL_VMREAD_BLOCK}};
        ssize_t got = process_vm_readv(w->pid, local, 2, remote,
                                       block >= CAL_VMREAD_BLOCK ? 2 : 1, 0);
        if (got < (ssize_t)top) {
            w->lo = w->hi = 0;
            if (got >= 0)
                errno = EFAULT;
            return -1;
        }
        w->base = block - CAL_VMREAD_BLOCK; /* wraps for block 0: a - base is right */
        w->lo =
            got == (ssize_t)(top + CAL_VMREAD_BLOCK) ? block - CAL_VMREAD_BLOCK : block;
        w->hi = a + len;
    }
    memcpy(out, w->buf + (a - w->base), len);
    return 0;
}
