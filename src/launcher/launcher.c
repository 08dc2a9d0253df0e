/*
 * launcher — the `calipers` command, a small native program in front of the
 * Python one (`calipers-py`, installed beside it).
 *
 * `calipers run script.py` must start the program's interpreter with the
 * allocation shim preloaded, so the command that does it cannot be that
 * interpreter.  When it is a Python program it costs a whole interpreter
 * start (about 10 ms) before the program's own.  This launcher instead
 * replaces itself at once with the program's interpreter, the shim in
 * LD_PRELOAD and the bootstrap (calipers/_boot/sitecustomize.py) on
 * PYTHONPATH, and passes the options in CALIPERS_LAUNCH: the bootstrap
 * parses and checks them in the program's process, before the program's
 * first line, with the code `calipers-py run` uses (cli.prepare_run), and
 * fails there with the same one-line errors.
 *
 * It only finds where the program starts in the arguments.  Everything
 * else goes to `calipers-py` unchanged: other commands, `run -m`, --help,
 * an option it does not know, and any layout it cannot find (the
 * interpreter is read from calipers-py's first line, where the installer
 * wrote it; the package is looked for where every install scheme whose
 * scripts are PREFIX/bin puts it, PREFIX/lib/pythonX.Y/{site,dist}-packages).
 *
 * Plain C, no Python, no allocation: it only reads files and calls execve.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef CALIPERS_PY_VERSION
#error                                                                                 \
    "CALIPERS_PY_VERSION (X.Y of the interpreter built for, X.Yt free-threaded) is required"
#endif

#define SHIM_NAME "libcalipers_shim.so"
#define PY_SCRIPT "calipers-py"
/* Most variables added to the environment (see profiled_env below). */
#define ENV_EXTRA 8
/* An environment value cannot say "unset": _common.UNSET. */
#define UNSET "\x1f"

extern char **environ;

/* The options of `run` that take a value (cli.parse_run's with_value), and
 * its flags.  An option in neither list goes to calipers-py, which knows
 * them all: a new option missing here costs speed, not correctness. */
static const char *const with_value[] = {"-o",
                                         "--outfile",
                                         "--interval",
                                         "--memory-interval",
                                         "--html",
                                         "--export",
                                         "--min-percent",
                                         "--profile-interval",
                                         "--snapshot-every",
                                         "--profile-only",
                                         "--profile-exclude",
                                         NULL};
static const char *const flags[] = {"--profile-all", "--cpu-only",     "--no-report",
                                    "--no-follow",   "--off",          "--gpu",
                                    "--no-gpu",      "--heap-at-exit", NULL};

static int listed(const char *const *list, const char *name, size_t len)
{
    for (; *list; list++)
        if (strlen(*list) == len && memcmp(*list, name, len) == 0)
            return 1;
    return 0;
}

/* Index in argv of the program to run after `calipers run` (argv[1]), with
 * *cpu_only set for --cpu-only; -1 when calipers-py must decide. */
static int program_index(int argc, char **argv, int *cpu_only)
{
    int i = 2;
    *cpu_only = 0;
    while (i < argc) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            i++;
            break;
        }
        if (arg[0] != '-' || strcmp(arg, "-") == 0)
            break;
        if (arg[1] == 'o' && arg[2] != '\0') { /* -oFILE */
            i++;
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (listed(with_value, arg, len)) {
            i += eq ? 1 : 2;
        } else if (!eq && listed(flags, arg, len)) {
            if (strcmp(arg, "--cpu-only") == 0)
                *cpu_only = 1;
            i++;
        } else {
            return -1; /* -m, --help, unknown: calipers-py */
        }
    }
    if (i >= argc || strcmp(argv[i], "-") == 0)
        return -1; /* calipers-py says what is wrong */
    return i;
}

/* The interpreter from the first line of `script` ("#!/abs/path"), into
 * out; 0, or -1 if the line is anything else (e.g. the "#!/bin/sh"
 * trampoline an installer writes for a path with spaces). */
static int interpreter_of(const char *script, char *out, size_t size)
{
    char line[PATH_MAX + 3];
    int fd = open(script, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, line, sizeof line - 1);
    close(fd);
    if (n < 4 || line[0] != '#' || line[1] != '!' || line[2] != '/')
        return -1;
    line[n] = '\0';
    char *end = strchr(line, '\n');
    if (!end)
        return -1;
    *end = '\0';
    if (strpbrk(line + 2, " \t\r") || (size_t)(end - line - 2) >= size)
        return -1;
    const char *base = strrchr(line, '/') + 1;
    if (strncmp(base, "python", 6) != 0)
        return -1; /* e.g. "#!/bin/sh" */
    strcpy(out, line + 2);
    return access(out, X_OK) == 0 ? 0 : -1;
}

/* The installed package directory for bindir, into out; 0 or -1. */
static int package_dir(const char *bindir, char *out, size_t size)
{
    static const char *const sites[] = {"site-packages", "dist-packages"};
    for (size_t i = 0; i < 2; i++) {
        char boot[PATH_MAX];
        int n = snprintf(out, size, "%s/../lib/python%s/%s/calipers", bindir,
                         CALIPERS_PY_VERSION, sites[i]);
        if (n < 0 || (size_t)n >= size)
            return -1;
        n = snprintf(boot, sizeof boot, "%s/_boot/sitecustomize.py", out);
        if (n > 0 && (size_t)n < sizeof boot && access(boot, R_OK) == 0 &&
            size >= PATH_MAX) {
            char real[PATH_MAX];
            if (!realpath(out, real))
                return -1;
            strcpy(
                out,
                real); /* without "bin/..": the paths the program's environment shows */
            return 0;
        }
    }
    return -1;
}

/* "NAME=value" in buf (size), or NULL if it does not fit. */
static char *env_entry(char *buf, size_t size, const char *name, const char *value1,
                       const char *sep, const char *value2)
{
    int n = snprintf(buf, size, "%s=%s%s%s", name, value1, value2 ? sep : "",
                     value2 ? value2 : "");
    return n < 0 || (size_t)n >= size ? NULL : buf;
}

/* The options between "run" and the program, each as LEN:TEXT, in out. */
static int encode_options(char **argv, int from, int to, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = from; i < to; i++) {
        if (strcmp(argv[i], "--") == 0 && i == to - 1)
            continue; /* the separator before the program */
        int n = snprintf(out + used, size - used, "%zu:%s", strlen(argv[i]), argv[i]);
        if (n < 0 || (size_t)n >= size - used)
            return -1;
        used += (size_t)n;
    }
    return 0;
}

/* Replace this process with calipers-py, which does everything. */
static int hand_over(const char *py_script, char **argv)
{
    execv(py_script, argv);
    fprintf(stderr, "calipers: error: cannot start %s: %s\n", py_script,
            strerror(errno));
    return 1;
}

int main(int argc, char **argv)
{
    static char self[PATH_MAX], py_script[PATH_MAX + 16], python[PATH_MAX],
        pkg[PATH_MAX];
    static char options[64 << 10], buf[ENV_EXTRA][PATH_MAX * 2 + 64];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr,
                "calipers: error: cannot find where this command is installed\n");
        return 1;
    }
    self[n] = '\0';
    *strrchr(self, '/') = '\0'; /* the directory */
    snprintf(py_script, sizeof py_script, "%s/" PY_SCRIPT, self);

    int cpu_only;
    int program = argc > 2 && strcmp(argv[1], "run") == 0
                      ? program_index(argc, argv, &cpu_only)
                      : -1;
    if (program < 0 || getenv("CALIPERS_SHIM") ||
        interpreter_of(py_script, python, sizeof python) ||
        package_dir(self, pkg, sizeof pkg) ||
        encode_options(argv, 2, program, options, sizeof options))
        return hand_over(py_script, argv);

    /* The environment _common.profiled_env builds, from the program's own
     * (that of an outer `calipers run`, when this runs inside one, undone
     * as its bootstrap undoes it for the program's view). */
    const char *pythonpath = getenv("PYTHONPATH"), *preload = getenv("LD_PRELOAD");
    const char *saved = getenv("CALIPERS_PYTHONPATH"),
               *saved_preload = getenv("CALIPERS_LD_PRELOAD");
    if (saved)
        pythonpath = strcmp(saved, UNSET) == 0 ? NULL : saved;
    if (saved_preload)
        preload = strcmp(saved_preload, UNSET) == 0 ? NULL : saved_preload;
    char boot[PATH_MAX + 8], shim[PATH_MAX + 32];
    snprintf(boot, sizeof boot, "%s/_boot", pkg);
    snprintf(shim, sizeof shim, "%s/" SHIM_NAME, pkg);
    char *extra[ENV_EXTRA + 1];
    int k = 0;
    extra[k++] = env_entry(buf[0], sizeof buf[0], "CALIPERS_PYTHONPATH",
                           pythonpath ? pythonpath : UNSET, "", NULL);
    extra[k++] = env_entry(buf[1], sizeof buf[1], "PYTHONPATH", boot, ":",
                           pythonpath && *pythonpath ? pythonpath : NULL);
    if (!cpu_only) {
        extra[k++] = env_entry(buf[2], sizeof buf[2], "CALIPERS_LD_PRELOAD",
                               preload ? preload : UNSET, "", NULL);
        extra[k++] = env_entry(buf[3], sizeof buf[3], "LD_PRELOAD", shim, " ",
                               preload && *preload ? preload : NULL);
    } else if (preload) { /* the program's own, untouched */
        extra[k++] = env_entry(buf[2], sizeof buf[2], "LD_PRELOAD", preload, "", NULL);
    }
    for (int i = 0; i < k; i++)
        if (!extra[i])
            return hand_over(py_script, argv);
    static const char *const replaced[] = {"PYTHONPATH=",
                                           "LD_PRELOAD=",
                                           "CALIPERS_PYTHONPATH=",
                                           "CALIPERS_LD_PRELOAD=",
                                           "CALIPERS_CONFIG=",
                                           "CALIPERS_LAUNCH=",
                                           NULL};
    size_t count = 0;
    while (environ[count])
        count++;
    char **env = calloc(count + ENV_EXTRA + 2, sizeof *env);
    if (!env)
        return hand_over(py_script, argv);
    size_t m = 0;
    for (size_t i = 0; i < count; i++) {
        int keep = 1;
        for (const char *const *r = replaced; *r && keep; r++)
            keep = strncmp(environ[i], *r, strlen(*r)) != 0;
        if (keep)
            env[m++] = environ[i];
    }
    for (int i = 0; i < k; i++)
        env[m++] = extra[i];
    size_t olen = strlen(options) + sizeof "CALIPERS_LAUNCH=";
    char *launch = malloc(olen);
    if (!launch)
        return hand_over(py_script, argv);
    snprintf(launch, olen, "CALIPERS_LAUNCH=%s", options);
    env[m++] = launch;
    env[m] = NULL;

    /* The program's command line: the interpreter, the script, its args. */
    argv[program - 1] = python;
    execve(python, argv + program - 1, env);
    fprintf(stderr, "calipers: error: cannot start %s: %s\n", python, strerror(errno));
    return 1;
}
