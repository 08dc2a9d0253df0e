/* inject.h: queue Python code as a pending call in another process
 * (ptrace; `calipers attach` before Python 3.14). */
#ifndef CALX_INJECT_H
#define CALX_INJECT_H

#include <stddef.h>

enum {
    CALX_INJECT_QUEUED = 0, /* the main thread runs it at its next check */
    CALX_INJECT_FAILED = 1, /* err says why; the process is as it was */
    CALX_INJECT_GONE = 2,   /* the process ended */
    CALX_INJECT_DENIED = 3, /* ptrace is not permitted */
};

/* Have process pid's main thread run `code` (at most 4095 bytes) with
 * PyRun_SimpleString, queued with Py_AddPendingCall, within timeout_s
 * seconds.  Takes no GIL; call it with the GIL released. */
int calx_inject_pending_code(int pid, const char *code, double timeout_s, char *err,
                             size_t errlen);

#endif
