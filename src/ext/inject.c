/* inject.c: queue a pending call in another Python process, through
 * ptrace, for `calipers attach` before Python 3.14 (3.14 has
 * sys.remote_exec).
 *
 * The target's main thread is stopped (PTRACE_SEIZE, PTRACE_INTERRUPT),
 * its registers saved (the general ones, and the whole extended state at
 * the size the kernel gives), and two calls are made in it: mmap() for a
 * page, into which the code is written, then
 * Py_AddPendingCall(PyRun_SimpleString, page).  Each call starts with the
 * return address 0 pushed below the red zone: the callee's `ret` faults,
 * and that SIGSEGV stop (never delivered) ends the call.  The registers
 * are put back and the thread let go; it runs the code at its next
 * eval-breaker check, holding the GIL.
 *
 * gdb did this before (INTERNALS, "Attach"), and fails where the CPU's
 * extended state outgrows gdb 13's fixed buffer (AMX: "Couldn't write
 * extended state status: Bad address").  Here the state is read with a
 * buffer larger than any CPU's, and written back at the size read.
 *
 * The functions' addresses are found in the target's own files: each
 * mapping's ELF .dynsym (opened through /proc/PID/map_files where that is
 * allowed, root, else by name without following a link, and checked to be
 * the mapped file by device and inode), so the target may run another build of the same
 * Python version than the command line.  Malloc is not called in the
 * target: the stopped thread may hold an arena lock.  Signals that come
 * to the thread during the calls are sent again before it is let go. */

#define _GNU_SOURCE
#include "inject.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)

static void fail(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

/* ---- Symbols: the target's .dynsym -------------------------------------- */

/* The value of function `name` in the ELF image f (size bytes), 0 if it
   has none; *vaddr0 is the address its offset 0 is loaded at.  Every offset is checked
   against the file: it is the target's, not ours. */
static uint64_t elf_symbol(const unsigned char *f, size_t size, const char *name,
                           uint64_t *vaddr0)
{
    if (size < sizeof(Elf64_Ehdr) || memcmp(f, ELFMAG, SELFMAG) != 0 ||
        f[EI_CLASS] != ELFCLASS64)
        return 0;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f;
    if (eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > size ||
        (size - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum ||
        eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phoff > size ||
        (size - eh->e_phoff) / sizeof(Elf64_Phdr) < eh->e_phnum)
        return 0;
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(f + eh->e_phoff);
    int found_load = 0;
    for (int i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == PT_LOAD) {
            *vaddr0 = ph[i].p_vaddr - ph[i].p_offset;
            found_load = 1;
            break;
        }
    if (!found_load)
        return 0;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(f + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum ||
            sh[i].sh_entsize != sizeof(Elf64_Sym))
            continue;
        const Elf64_Shdr *str = &sh[sh[i].sh_link];
        if (sh[i].sh_offset > size || size - sh[i].sh_offset < sh[i].sh_size ||
            str->sh_offset > size || size - str->sh_offset < str->sh_size)
            return 0;
        const Elf64_Sym *sym = (const Elf64_Sym *)(f + sh[i].sh_offset);
        const char *names = (const char *)(f + str->sh_offset);
        size_t nsym = sh[i].sh_size / sizeof(Elf64_Sym), nlen = strlen(name);
        for (size_t k = 0; k < nsym; k++) {
            uint32_t at = sym[k].st_name;
            if (sym[k].st_shndx == SHN_UNDEF || sym[k].st_value == 0 ||
                ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC || at >= str->sh_size ||
                str->sh_size - at <= nlen)
                continue;
            if (memcmp(names + at, name, nlen + 1) == 0)
                return sym[k].st_value;
        }
    }
    return 0;
}

/* The file mapped at start-end in process pid, named `file` in its maps:
   through map_files, the mapping itself, where we may (root), else by its
   name, not following a link; -1 if neither opens. */
static int open_mapped(pid_t pid, unsigned long long start, unsigned long long end,
                       const char *file)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/map_files/%llx-%llx", (int)pid, start, end);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);
    return fd;
}

/* The address of `names[i]` in process pid, for each i (0 where not
   found), from the files its maps name.  -1 if its maps cannot be read
   (errno says why). */
static int find_symbols(pid_t pid, const char *const *names, uint64_t *addr, int n)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *maps = fopen(path, "re");
    if (!maps)
        return -1;
    char line[4096 + 128];
    unsigned long long last_ino = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long long start, end, off, ino;
        unsigned dmaj, dmin;
        int name_at = 0;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &off,
                   &dmaj, &dmin, &ino, &name_at) < 7 ||
            ino == 0 || off != 0 || ino == last_ino || name_at == 0 ||
            line[name_at] != '/')
            continue;
        last_ino = ino;
        char *file = line + name_at;
        file[strcspn(file, "\n")] = 0;
        int fd = open_mapped(pid, start, end, file);
        if (fd < 0)
            continue;
        struct stat st;
        void *f = MAP_FAILED;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_ino == ino &&
            major(st.st_dev) == dmaj && minor(st.st_dev) == dmin && st.st_size > 0)
            f = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (f == MAP_FAILED)
            continue;
        for (int i = 0; i < n; i++) {
            uint64_t vaddr0 = 0;
            uint64_t v =
                addr[i] ? 0 : elf_symbol(f, (size_t)st.st_size, names[i], &vaddr0);
            if (v)
                addr[i] = start + (v - vaddr0);
        }
        munmap(f, (size_t)st.st_size);
    }
    fclose(maps);
    return 0;
}

/* ---- The stopped thread ------------------------------------------------- */

struct target {
    pid_t pid;
    struct user_regs_struct regs; /* as found */
    unsigned char *xstate;        /* as found, xstate_len bytes */
    size_t xstate_len;
    struct user_fpregs_struct fp; /* where the extended state cannot be read */
    int have_xstate;
    int held[64]; /* signals that came during the calls */
    int nheld;
    int64_t deadline;
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Wait for the thread's next stop, until the deadline: 1 stopped (status
   set), 0 the time is up, -1 gone. */
static int wait_stop(struct target *t, int *status)
{
    for (;;) {
        pid_t r = waitpid(t->pid, status, __WALL | WNOHANG);
        if (r == t->pid)
            return WIFSTOPPED(*status) ? 1 : -1;
        if (r < 0 && errno != EINTR)
            return -1;
        if (now_ns() > t->deadline)
            return 0;
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
    }
}

static void hold_signal(struct target *t, int sig)
{
    if (t->nheld < (int)(sizeof t->held / sizeof t->held[0]))
        t->held[t->nheld++] = sig;
}

/* Make the call fn(a, b, c, d, e, f) in the thread: 1 done (*result set),
   0 it did not end in time or faulted elsewhere, -1 the process went. */
static int call(struct target *t, uint64_t fn, const uint64_t args[6], uint64_t *result,
                char *err, size_t errlen)
{
    struct user_regs_struct r = t->regs;
    /* Below the red zone (128 bytes) and then some; 16-byte aligned at
       the call, with the return address 0 on top. */
    r.rsp = ((t->regs.rsp - 1024) & ~(uint64_t)15) - 8;
    if (ptrace(PTRACE_POKEDATA, t->pid, (void *)r.rsp, (void *)0) != 0) {
        fail(err, errlen, "cannot write its stack (%s)", strerror(errno));
        return 0;
    }
    r.rip = fn;
    r.rdi = args[0];
    r.rsi = args[1];
    r.rdx = args[2];
    r.rcx = args[3];
    r.r8 = args[4];
    r.r9 = args[5];
    r.rax = 0;
    r.orig_rax = (uint64_t)-1; /* no system call restarts into the call */
    if (ptrace(PTRACE_SETREGS, t->pid, NULL, &r) != 0) {
        fail(err, errlen, "cannot set its registers (%s)", strerror(errno));
        return 0;
    }
    int sig = 0;
    for (;;) {
        if (ptrace(PTRACE_CONT, t->pid, NULL, (void *)(intptr_t)sig) != 0)
            return -1;
        int status, w = wait_stop(t, &status);
        if (w < 0)
            return -1;
        if (w == 0) {
            /* Stop it where it is (a call that blocks); its registers go
               back below. */
            ptrace(PTRACE_INTERRUPT, t->pid, NULL, NULL);
            w = wait_stop(t, &status);
            fail(err, errlen, "its main thread did not come back from a call in time");
            return w < 0 ? -1 : 0;
        }
        sig = WSTOPSIG(status);
        if (status >> 16 != 0) { /* a ptrace event stop: nothing to deliver */
            sig = 0;
            continue;
        }
        if (sig == SIGSEGV) {
            struct user_regs_struct now;
            if (ptrace(PTRACE_GETREGS, t->pid, NULL, &now) != 0)
                return -1;
            if (now.rip == 0) {
                *result = now.rax;
                return 1;
            }
            fail(err, errlen, "a call faulted in it");
            return 0;
        }
        /* Another signal: held, and sent again once the thread is back
           where it was. */
        hold_signal(t, sig);
        sig = 0;
    }
}

/* 1 stopped; 0 not (err says why); -1 gone; -2 not ours to trace. */
static int stop_thread(struct target *t, char *err, size_t errlen)
{
    if (ptrace(PTRACE_SEIZE, t->pid, NULL, NULL) != 0) {
        int e = errno;
        fail(err, errlen, "cannot trace it (%s)", strerror(e));
        return e == ESRCH ? -1 : e == EPERM ? -2 : 0;
    }
    if (ptrace(PTRACE_INTERRUPT, t->pid, NULL, NULL) != 0)
        return -1;
    for (;;) {
        int status, w = wait_stop(t, &status);
        if (w <= 0) {
            fail(err, errlen, "its main thread did not stop in time");
            return w;
        }
        if (status >> 16 == PTRACE_EVENT_STOP) {
            int sig = WSTOPSIG(status);
            if (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU) {
                fail(err, errlen, "it is stopped (job control)");
                return 0;
            }
            return 1;
        }
        /* A signal on its way to the thread: let it go on, and wait for
           the interrupt's stop. */
        int sig = status >> 16 ? 0 : WSTOPSIG(status);
        if (ptrace(PTRACE_CONT, t->pid, NULL, (void *)(intptr_t)sig) != 0)
            return -1;
    }
}

static int save(struct target *t)
{
    if (ptrace(PTRACE_GETREGS, t->pid, NULL, &t->regs) != 0)
        return 0;
    /* Larger than any CPU's XSAVE area (AMX's is about 11 KiB); the kernel
       says how much it wrote, and wants that much back. */
    t->xstate_len = 64 * 1024;
    t->xstate = calloc(1, t->xstate_len);
    struct iovec io = {t->xstate, t->xstate_len};
    if (t->xstate &&
        ptrace(PTRACE_GETREGSET, t->pid, (void *)NT_X86_XSTATE, &io) == 0) {
        t->xstate_len = io.iov_len;
        t->have_xstate = 1;
        return 1;
    }
    return ptrace(PTRACE_GETFPREGS, t->pid, NULL, &t->fp) == 0;
}

static int restore(struct target *t)
{
    int ok = 1;
    if (t->have_xstate) {
        struct iovec io = {t->xstate, t->xstate_len};
        ok &= ptrace(PTRACE_SETREGSET, t->pid, (void *)NT_X86_XSTATE, &io) == 0;
    } else {
        ok &= ptrace(PTRACE_SETFPREGS, t->pid, NULL, &t->fp) == 0;
    }
    ok &= ptrace(PTRACE_SETREGS, t->pid, NULL, &t->regs) == 0;
    return ok;
}

static int write_bytes(pid_t pid, uint64_t at, const char *bytes, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t word = 0;
        memcpy(&word, bytes + i, n - i < 8 ? n - i : 8);
        if (ptrace(PTRACE_POKEDATA, pid, (void *)(at + i), (void *)word) != 0)
            return 0;
    }
    return 1;
}

int calx_inject_pending_code(int pid, const char *code, double timeout_s, char *err,
                             size_t errlen)
{
    size_t n = strlen(code) + 1;
    if (n > 4096) {
        fail(err, errlen, "the code to run is over 4096 bytes");
        return CALX_INJECT_FAILED;
    }
    static const char *const names[] = {"mmap", "Py_AddPendingCall",
                                        "PyRun_SimpleString"};
    uint64_t addr[3] = {0, 0, 0};
    if (find_symbols(pid, names, addr, 3) != 0) {
        if (errno == ENOENT || errno == ESRCH)
            return CALX_INJECT_GONE;
        if (errno == EACCES || errno == EPERM)
            return CALX_INJECT_DENIED;
        fail(err, errlen, "cannot read its maps (%s)", strerror(errno));
        return CALX_INJECT_FAILED;
    }
    for (int i = 0; i < 3; i++)
        if (!addr[i]) {
            if (kill(pid, 0) != 0 && errno == ESRCH)
                return CALX_INJECT_GONE;
            fail(err, errlen, "%s not found in its files", names[i]);
            return CALX_INJECT_FAILED;
        }

    struct target t = {.pid = pid, .deadline = now_ns() + (int64_t)(timeout_s * 1e9)};
    int rc = stop_thread(&t, err, errlen);
    if (rc == -2)
        return CALX_INJECT_DENIED;
    if (rc <= 0) {
        ptrace(PTRACE_DETACH, pid, NULL, NULL);
        return rc < 0 ? CALX_INJECT_GONE : CALX_INJECT_FAILED;
    }
    if (!save(&t)) {
        fail(err, errlen, "cannot read its registers (%s)", strerror(errno));
        ptrace(PTRACE_DETACH, pid, NULL, NULL);
        free(t.xstate);
        return CALX_INJECT_FAILED;
    }
    uint64_t page = 0, queued = 1;
    const uint64_t map_args[6] = {
        0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, (uint64_t)-1, 0};
    rc = call(&t, addr[0], map_args, &page, err, errlen);
    if (rc > 0 &&
        (page == 0 || page == (uint64_t)MAP_FAILED || page > (uint64_t)-4096)) {
        fail(err, errlen, "mmap failed in it");
        rc = 0;
    }
    if (rc > 0 && !write_bytes(pid, page, code, n)) {
        fail(err, errlen, "cannot write into it (%s)", strerror(errno));
        rc = 0;
    }
    if (rc > 0) {
        const uint64_t queue_args[6] = {addr[2], page, 0, 0, 0, 0};
        rc = call(&t, addr[1], queue_args, &queued, err, errlen);
        if (rc > 0 && (int)queued != 0) {
            fail(err, errlen, "Py_AddPendingCall refused (its queue is full)");
            rc = 0;
        }
    }
    if (rc >= 0 && !restore(&t)) {
        fail(err, errlen, "cannot restore its registers (%s)", strerror(errno));
        rc = 0;
    }
    for (int i = 0; rc >= 0 && i < t.nheld; i++)
        syscall(SYS_tgkill, pid, pid, t.held[i]);
    ptrace(PTRACE_DETACH, pid, NULL, NULL);
    free(t.xstate);
    if (rc < 0)
        return CALX_INJECT_GONE;
    return rc > 0 ? CALX_INJECT_QUEUED : CALX_INJECT_FAILED;
}

#else

int calx_inject_pending_code(int pid, const char *code, double timeout_s, char *err,
                             size_t errlen)
{
    (void)pid, (void)code, (void)timeout_s;
    snprintf(err, errlen, "attaching before Python 3.14 is done on x86-64 only");
    return CALX_INJECT_FAILED;
}

#endif
