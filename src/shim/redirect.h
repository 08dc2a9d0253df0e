/*
 * redirect — the shim without preload: point the allocator and copy entries
 * of every loaded object's GOT at the shim's functions (and back).  Used when
 * calipers.start() loads libcalipers_shim.so with dlopen; `calipers run`
 * preloads it instead and never calls this.  See redirect.c for how, and
 * docs/INTERNALS.md, "In-process memory".  Internal to the shim.
 */
#ifndef CAL_SHIM_REDIRECT_H
#define CAL_SHIM_REDIRECT_H

#include <stddef.h>

/* The shim's own definitions of the redirected functions (hidden aliases
   of its exported ones, so that taking their address never goes through
   the GOT, which in a dlopen'ed shim would give libc's). */
typedef struct cal_redirect_target {
    const char *name;
    void *fn;
} cal_redirect_target;

/* Called once by the shim's constructor: the targets (a NULL name ends
   the list; "dlopen" among them is the shim's hook) and the real dlopen. */
void cal_redirect_init(const cal_redirect_target *targets,
                       void *(*real_dlopen)(const char *, int));

/* Redirect (on) or restore (off) every loaded object but the shim, the
   dynamic linker and the vDSO; while on, objects loaded later through a
   redirected dlopen are redirected too.  The names of the objects that
   could not be (their GOT could not be made writable) are written to
   `failed`, separated by ", " (at most `cap` bytes, NUL-terminated).
   Returns the number of objects redirected or restored, -1 when
   redirection is impossible here (no real dlopen).  Thread-safe; takes a
   mutex and the dynamic linker's lock. */
int cal_redirect_set(int on, char *failed, size_t cap);

/* The dlopen the redirected GOT entries call: the real dlopen, then the new
   objects are redirected. */
void *cal_redirect_dlopen(const char *file, int flags);

#endif
