/*
 * redirect — the shim without preload (see redirect.h).
 *
 * HOW IT WORKS
 *
 * A call from a shared object to malloc goes through its GOT: a JUMP_SLOT
 * relocation (the PLT's entry) or a GLOB_DAT one (-fno-plt, or the
 * function's address taken); a table of function pointers in its data has
 * an absolute relocation (R_X86_64_64), redirected only where the slot
 * holds exactly libc's function (preload would have put the shim's there).
 * For every loaded object (dl_iterate_phdr) the dynamic section gives the
 * relocation tables and the symbol table; each such relocation that names a
 * redirected function has its slot pointed at the shim's definition, after
 * the slot's old value is saved (a hash table keyed by the slot's address,
 * in memory mapped for it: nothing here allocates through the functions it
 * redirects).  Restoring walks the objects again and puts the saved value
 * back in every slot that still holds one of ours; an object unloaded
 * meanwhile is not walked, so a slot of unmapped memory is never written,
 * and an object loaded again at the same place was redirected afresh (its
 * saved value replaced).
 *
 * RELRO: with full RELRO (-z now -z relro) the GOT is read-only once
 * relocated.  The range the dynamic linker protected (PT_GNU_RELRO, its end
 * rounded down to a page, as _dl_protect_relro does) is made writable for
 * the writes and read-only again after.  Where mprotect refuses, the slots
 * there are left alone and the object is named (the caller prints a note).
 *
 * Other threads keep running: a slot is one aligned pointer, stored
 * atomically, and both its values are correct functions (the shim forwards
 * to the real ones), so a call sees the old or the new target, never a torn
 * one.  Redirecting and restoring are serialised by a mutex (taken around
 * fork, so a child never inherits it held).
 *
 * LIMITATIONS (docs/INTERNALS.md): an object that binds its calls to its
 * own definitions (-Bsymbolic, a static libc or allocator inside a wheel)
 * has no relocation to redirect, as it has no PLT call for preload to
 * interpose either; a lazily bound slot resolved by another thread while it
 * is being redirected may keep libc's address; an object loaded with
 * dlopen is redirected after its constructors ran.
 *
 * dlopen: redirected too, so that objects loaded later are followed.  The
 * dynamic linker searches a bare name with the RUNPATH of the object that
 * called dlopen, which is now the shim: for such a name the caller's
 * RPATH/RUNPATH (with $ORIGIN) is searched here, in the dynamic linker's
 * order, before the plain call.
 */
#define _GNU_SOURCE
#include "redirect.h"

#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#define JUMP_SLOT R_X86_64_JUMP_SLOT
#define GLOB_DAT R_X86_64_GLOB_DAT
#define ABS_PTR R_X86_64_64
#elif defined(__aarch64__)
#define JUMP_SLOT R_AARCH64_JUMP_SLOT
#define GLOB_DAT R_AARCH64_GLOB_DAT
#define ABS_PTR R_AARCH64_ABS64
#elif defined(__i386__)
#define JUMP_SLOT R_386_JMP_SLOT
#define GLOB_DAT R_386_GLOB_DAT
#define ABS_PTR R_386_32
#endif

#if UINTPTR_MAX > 0xffffffffu
#define R_SYM ELF64_R_SYM
#define R_TYPE ELF64_R_TYPE
#else
#define R_SYM ELF32_R_SYM
#define R_TYPE ELF32_R_TYPE
#endif

#define SAVED_BITS 18 /* slots remembered: 2^18 (4 MiB mapped, touched as used) */
#define MAX_TARGETS 24

/* ---- state: set by cal_redirect_init (one thread, the constructor), the
   rest protected by `mu` but `on`, read by the dlopen hook (atomic). ---- */

static const cal_redirect_target *targets;
static size_t ntargets;
static void *(*real_dlopen)(const char *, int);
static uintptr_t shim_base, ldso_base;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int on;

typedef struct saved_slot {
    void **slot;
    void *orig;
} saved_slot;

static saved_slot *saved; /* open addressing, 2^SAVED_BITS */

static void lock_for_fork(void) { pthread_mutex_lock(&mu); }
static void unlock_after_fork(void) { pthread_mutex_unlock(&mu); }

void cal_redirect_init(const cal_redirect_target *t,
                       void *(*dlopen_fn)(const char *, int))
{
    targets = t;
    for (ntargets = 0; t[ntargets].name && ntargets < MAX_TARGETS; ntargets++)
        ;
    real_dlopen = dlopen_fn;
    Dl_info info;
    if (dladdr((void *)cal_redirect_init, &info))
        shim_base = (uintptr_t)info.dli_fbase;
    ldso_base = (uintptr_t)getauxval(AT_BASE);
    pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
}

static size_t slot_hash(void **slot)
{
    return (size_t)(((uint64_t)(uintptr_t)slot >> 3) * 0x9E3779B97F4A7C15ull >>
                    (64 - SAVED_BITS));
}

/* Remember `orig` as slot's value before us.  0, or -1 when full. */
static int saved_put(void **slot, void *orig)
{
    size_t mask = ((size_t)1 << SAVED_BITS) - 1;
    for (size_t i = slot_hash(slot), n = 0; n <= mask; i = (i + 1) & mask, n++)
        if (!saved[i].slot || saved[i].slot == slot) {
            saved[i] = (saved_slot){slot, orig};
            return 0;
        }
    return -1;
}

static void *saved_get(void **slot)
{
    size_t mask = ((size_t)1 << SAVED_BITS) - 1;
    for (size_t i = slot_hash(slot), n = 0; n <= mask && saved[i].slot;
         i = (i + 1) & mask, n++)
        if (saved[i].slot == slot)
            return saved[i].orig;
    return NULL;
}

/* What each target's name resolves to in the process (libc's function):
   looked up at the first walk (mu). */
static void *reals[MAX_TARGETS];
static int have_reals;

/* The index of the target called `name`, or -1. */
static int target_of(const char *name)
{
    for (size_t i = 0; i < ntargets; i++)
        if (name[0] == targets[i].name[0] && strcmp(name, targets[i].name) == 0)
            return (int)i;
    return -1;
}

static int is_target_fn(const void *fn)
{
    for (size_t i = 0; i < ntargets; i++)
        if (targets[i].fn == fn)
            return 1;
    return 0;
}

/* An address from the dynamic section: glibc relocates them in place,
   other loaders may not. */
static uintptr_t dyn_addr(uintptr_t base, uintptr_t v)
{
    return v < base ? v + base : v;
}

typedef struct walk {
    int on, objects, failures;
    char *failed;
    size_t cap, len;
} walk;

static void note_failure(walk *w, const char *name)
{
    w->failures++;
    if (!w->failed || w->cap == 0)
        return;
    size_t n = strlen(name), sep = w->len ? 2 : 0;
    if (w->len + sep + n + 1 > w->cap)
        return;
    if (sep)
        memcpy(w->failed + w->len, ", ", 2);
    memcpy(w->failed + w->len + sep, name, n + 1);
    w->len += sep + n;
}

typedef struct object {
    uintptr_t base, relro_lo, relro_hi;
    const ElfW(Sym) * symtab;
    const char *strtab;
    int unprotected, refused;
} object;

/* Write `value` into slot (made writable first if it is in RELRO). */
static int slot_write(object *o, void **slot, void *value)
{
    uintptr_t a = (uintptr_t)slot;
    if (a >= o->relro_lo && a < o->relro_hi && !o->unprotected) {
        if (o->refused || mprotect((void *)o->relro_lo, o->relro_hi - o->relro_lo,
                                   PROT_READ | PROT_WRITE)) {
            o->refused = 1;
            return -1;
        }
        o->unprotected = 1;
    }
    __atomic_store_n(slot, value, __ATOMIC_RELAXED);
    return 0;
}

/* Redirect or restore the slots of one relocation table (RELA or REL:
   their first two fields are the same). */
static int relocs(object *o, uintptr_t table, size_t bytes, size_t stride, int redirect)
{
    int fails = 0;
    for (size_t off = 0; table && stride && off + stride <= bytes; off += stride) {
        const ElfW(Rel) *r = (const ElfW(Rel) *)(table + off);
        unsigned type = (unsigned)R_TYPE(r->r_info);
        if (type != JUMP_SLOT && type != GLOB_DAT && type != ABS_PTR)
            continue;
        size_t sym = R_SYM(r->r_info);
        if (!sym)
            continue;
        int t = target_of(o->strtab + o->symtab[sym].st_name);
        if (t < 0)
            continue;
        void *fn = targets[t].fn;
        void **slot = (void **)(o->base + r->r_offset);
        void *cur = __atomic_load_n(slot, __ATOMIC_RELAXED);
        if (redirect) {
            /* A data pointer (a table of functions, as preload would
               interpose too) only where it holds the function itself: not
               an address plus an addend, not a value the program wrote. */
            if (cur == fn || (type == ABS_PTR && cur != reals[t]))
                continue;
            if (saved_put(slot, cur) != 0 || slot_write(o, slot, fn) != 0)
                fails++;
        } else if (is_target_fn(cur)) {
            void *orig = saved_get(slot);
            if (!orig || slot_write(o, slot, orig) != 0)
                fails++;
        }
    }
    return fails;
}

static int visit(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    walk *w = arg;
    uintptr_t base = (uintptr_t)info->dlpi_addr;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    if ((base == shim_base && shim_base) || (base == ldso_base && ldso_base) ||
        strncmp(name, "linux-vdso", 10) == 0 || strncmp(name, "linux-gate", 10) == 0)
        return 0;
    object o = {.base = base};
    const ElfW(Dyn) *dyn = NULL;
    long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        else if (ph->p_type == PT_GNU_RELRO) {
            o.relro_lo = (base + ph->p_vaddr) & ~(uintptr_t)(page - 1);
            o.relro_hi = (base + ph->p_vaddr + ph->p_memsz) & ~(uintptr_t)(page - 1);
        }
    }
    if (!dyn)
        return 0;
    uintptr_t jmprel = 0, rela = 0, rel = 0;
    size_t pltrelsz = 0, relasz = 0, relsz = 0, relaent = sizeof(ElfW(Rela)),
           relent = sizeof(ElfW(Rel));
    long pltrel = DT_RELA;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB:
            o.symtab = (const ElfW(Sym) *)dyn_addr(base, dyn->d_un.d_ptr);
            break;
        case DT_STRTAB:
            o.strtab = (const char *)dyn_addr(base, dyn->d_un.d_ptr);
            break;
        case DT_JMPREL:
            jmprel = dyn_addr(base, dyn->d_un.d_ptr);
            break;
        case DT_PLTRELSZ:
            pltrelsz = dyn->d_un.d_val;
            break;
        case DT_PLTREL:
            pltrel = (long)dyn->d_un.d_val;
            break;
        case DT_RELA:
            rela = dyn_addr(base, dyn->d_un.d_ptr);
            break;
        case DT_RELASZ:
            relasz = dyn->d_un.d_val;
            break;
        case DT_RELAENT:
            relaent = dyn->d_un.d_val;
            break;
        case DT_REL:
            rel = dyn_addr(base, dyn->d_un.d_ptr);
            break;
        case DT_RELSZ:
            relsz = dyn->d_un.d_val;
            break;
        case DT_RELENT:
            relent = dyn->d_un.d_val;
            break;
        default:
            break;
        }
    }
    if (!o.symtab || !o.strtab)
        return 0;
    int fails =
        relocs(&o, jmprel, pltrelsz, pltrel == DT_RELA ? relaent : relent, w->on) +
        relocs(&o, rela, relasz, relaent, w->on) +
        relocs(&o, rel, relsz, relent, w->on);
    if (o.unprotected)
        mprotect((void *)o.relro_lo, o.relro_hi - o.relro_lo, PROT_READ);
    if (fails)
        note_failure(w, *name ? name : "the executable");
    else
        w->objects++;
    return 0;
}

/* The dynamic linker's count of objects ever loaded, as of the last walk
   that redirected (protected by mu): a dlopen that loaded nothing new (a
   library already loaded, which ctypes and importers do often) skips the
   walk, ~100 us with a hundred objects loaded. */
static unsigned long long walked_adds;

static int read_adds(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    *(unsigned long long *)arg = info->dlpi_adds;
    return 1; /* the first object says it */
}

static unsigned long long loader_adds(void)
{
    unsigned long long adds = 0;
    dl_iterate_phdr(read_adds, &adds);
    return adds;
}

static int set_locked(int redirect, char *failed, size_t cap)
{
    if (!real_dlopen || !ntargets)
        return -1;
    if (!saved) {
        void *m = mmap(NULL, sizeof(saved_slot) << SAVED_BITS, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            return -1;
        saved = m;
    }
    if (!have_reals) {
        for (size_t i = 0; i < ntargets; i++)
            reals[i] = dlsym(RTLD_DEFAULT, targets[i].name);
        have_reals = 1;
    }
    walk w = {.on = redirect, .failed = failed, .cap = cap};
    if (failed && cap)
        failed[0] = '\0';
    /* Read before the walk: an object added during it makes the next
       dlopen walk again. */
    walked_adds = redirect ? loader_adds() : 0;
    dl_iterate_phdr(visit, &w);
    return w.objects;
}

int cal_redirect_set(int redirect, char *failed, size_t cap)
{
    pthread_mutex_lock(&mu);
    /* On before the walk: a dlopen racing with it redirects what it loads. */
    if (redirect)
        atomic_store(&on, 1);
    int n = set_locked(redirect, failed, cap);
    if (!redirect || n < 0)
        atomic_store(&on, 0);
    pthread_mutex_unlock(&mu);
    return n;
}

/* ---- dlopen --------------------------------------------------------------- */

/* The caller's DT_RUNPATH (or, without one, DT_RPATH) and its directory,
   for $ORIGIN.  0, or -1 if it has neither. */
static int caller_paths(const void *caller, const char **runpath, const char **rpath,
                        char *origin, size_t cap)
{
    Dl_info info;
    struct link_map *lm = NULL;
    if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm || !lm->l_ld)
        return -1;
    const char *strtab = NULL;
    uintptr_t run = 0, r = 0;
    int has_run = 0, has_r = 0;
    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_STRTAB)
            strtab = (const char *)dyn_addr(lm->l_addr, d->d_un.d_ptr);
        else if (d->d_tag == DT_RUNPATH)
            run = d->d_un.d_val, has_run = 1;
        else if (d->d_tag == DT_RPATH)
            r = d->d_un.d_val, has_r = 1;
    }
    if (!strtab || (!has_run && !has_r))
        return -1;
    *runpath = has_run ? strtab + run : NULL;
    *rpath = has_run ? NULL : strtab + r;
    const char *file = lm->l_name && *lm->l_name ? lm->l_name : NULL;
    char exe[PATH_MAX];
    if (!file) {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0)
            return -1;
        exe[n] = '\0';
        file = exe;
    }
    const char *slash = strrchr(file, '/');
    size_t n = slash ? (size_t)(slash - file) : 0;
    if (n + 1 > cap)
        return -1;
    memcpy(origin, file, n);
    origin[n] = '\0';
    return 0;
}

/* Try dir/file for each directory of a colon-separated list ($ORIGIN
   replaced; a directory with any other $ token is skipped). */
static void *try_dirs(const char *list, const char *origin, const char *file, int flags)
{
    char path[PATH_MAX];
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        size_t len = 0;
        int ok = n > 0;
        for (size_t i = 0; ok && i < n;) {
            const char *piece = p + i;
            size_t take = 1;
            const char *add = piece;
            if (*piece == '$') {
                if (n - i >= 7 && strncmp(piece, "$ORIGIN", 7) == 0)
                    take = 7;
                else if (n - i >= 9 && strncmp(piece, "${ORIGIN}", 9) == 0)
                    take = 9;
                else
                    ok = 0;
                add = origin;
            }
            size_t addn = add == origin ? strlen(origin) : 1;
            if (len + addn + 1 >= sizeof path)
                ok = 0;
            if (ok) {
                memcpy(path + len, add, addn);
                len += addn;
            }
            i += take;
        }
        size_t fn = strlen(file);
        if (ok && len + 1 + fn + 1 <= sizeof path) {
            path[len] = '/';
            memcpy(path + len + 1, file, fn + 1);
            if (access(path, F_OK) == 0) {
                void *h = real_dlopen(path, flags);
                if (h)
                    return h;
            }
        }
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

/* dlopen as the caller would have: a bare name is searched in its RPATH,
   LD_LIBRARY_PATH and RUNPATH (ld.so(8)), then as the shim would. */
static void *open_as(const char *file, int flags, const void *caller)
{
    if (file && *file && !strchr(file, '/')) {
        const char *runpath = NULL, *rpath = NULL;
        char origin[PATH_MAX];
        if (caller_paths(caller, &runpath, &rpath, origin, sizeof origin) == 0) {
            void *h = real_dlopen(file, flags | RTLD_NOLOAD); /* loaded already */
            if (!h && rpath)
                h = try_dirs(rpath, origin, file, flags);
            if (!h && getauxval(AT_SECURE) == 0)
                h = try_dirs(getenv("LD_LIBRARY_PATH"), "", file, flags);
            if (!h && runpath)
                h = try_dirs(runpath, origin, file, flags);
            if (h)
                return h;
        }
    }
    return real_dlopen(file, flags);
}

void *cal_redirect_dlopen(const char *file, int flags)
{
    void *h = open_as(file, flags, __builtin_return_address(0));
    if (h && atomic_load(&on)) {
        pthread_mutex_lock(&mu);
        if (atomic_load(&on) && loader_adds() != walked_adds)
            set_locked(1, NULL, 0);
        pthread_mutex_unlock(&mu);
    }
    return h;
}
