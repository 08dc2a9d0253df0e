/*
 * cal_gpu — see cal_gpu.h.
 *
 * HOW IT WORKS
 *
 * Memory: nvmlDeviceGetComputeRunningProcesses (_v3, _v2, then the
 * original) lists the processes with memory on a device; ours are this
 * process and its descendants (a DataLoader or Pool worker's memory is the
 * run's), found by walking each listed pid's parent chain in /proc.
 * Utilisation: nvmlDeviceGetProcessUtilization returns the driver's
 * per-process samples newer than a timestamp we keep per device.  The
 * driver samples every 1/6 s to 1 s depending on the product, and lists
 * only processes that were active, so a reading with no new sample of ours
 * holds the last value for one and a half of the driver's periods (the
 * shortest gap seen between two of our samples; HOLD_NS until known: a
 * longer gap may span an idle spell), then reads 0: a
 * process that went idle reads idle within a period, and one that stays
 * busy is not read as idle between the driver's samples.
 *
 * Falling back to the whole device: when the per-process call is missing
 * or not supported, and when we are in a PID namespace other than the
 * initial one and NVML lists processes none of which is ours: the driver
 * reports host PIDs, which a container cannot map to its own.
 *
 * LIMITATIONS
 *   - A container's run reports device-wide figures (other tenants
 *     included), and says so.
 *   - Graphics (non-compute) processes are not counted.
 */
#define _GNU_SOURCE
#include "cal_gpu.h"

#include "cal_clock.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The NVML ABI (nvml.h), declared here so nothing needs the header. */
typedef int nv_ret;
typedef void *nv_device;
enum {
    NV_SUCCESS = 0,
    NV_NOT_SUPPORTED = 3,
    NV_NO_PERMISSION = 4,
    NV_NOT_FOUND = 6,
    NV_INSUFFICIENT_SIZE = 7,
};
#define NV_VALUE_NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL
typedef struct nv_memory {
    unsigned long long total, free, used;
} nv_memory;
typedef struct nv_utilization {
    unsigned int gpu, memory;
} nv_utilization;
typedef struct nv_proc_util {
    unsigned int pid;
    unsigned long long timestamp; /* microseconds */
    unsigned int sm, mem, enc, dec;
} nv_proc_util;

#define HOLD_NS                                                                        \
    200000000LL /* how long a utilisation sample holds, until the period is known */
#define PROC_ENTRY_MAX 32 /* bytes: the widest process-info entry */
#define MAX_PROCS 4096

typedef struct gpu_dev {
    nv_device handle;
    unsigned long long last_seen; /* newest utilisation sample read, us */
    double util;                  /* ours, last seen */
    int64_t util_at;              /* when (monotonic ns) */
    unsigned long long ours_ts;   /* the timestamp of our newest sample, us */
    int64_t hold_ns;              /* 1.5 driver periods, or HOLD_NS */
} gpu_dev;

struct cal_gpu {
    void *dl;
    nv_ret (*shutdown)(void);
    const char *(*error_string)(nv_ret);
    nv_ret (*get_uuid)(nv_device, char *, unsigned);
    nv_ret (*get_name)(nv_device, char *, unsigned);
    nv_ret (*memory_info)(nv_device, nv_memory *);
    nv_ret (*utilization)(nv_device, nv_utilization *);
    nv_ret (*processes)(nv_device, unsigned *, void *);
    const char *processes_name;
    size_t processes_stride; /* 16 for the original, 24 (or 32) for _v2/_v3 */
    nv_ret (*process_util)(nv_device, nv_proc_util *, unsigned *, unsigned long long);

    int per_process_util, per_process_memory;
    char fallback[400];
    int initial_pid_ns; /* in the initial PID namespace: NVML's pids are ours */
    pid_t pid;

    int ndevices;
    gpu_dev dev[CAL_GPU_MAX_DEVICES];
    cal_gpu_device info[CAL_GPU_MAX_DEVICES];

    unsigned char *procs; /* process-info buffer */
    unsigned procs_cap;   /* entries */
    nv_proc_util *samples;
    unsigned samples_cap;
};

static void say(char *err, size_t cap, const char *fmt, const char *a, const char *b)
{
    if (cap)
        snprintf(err, cap, fmt, a, b);
}

static const char *nv_error(const cal_gpu *g, nv_ret rc)
{
    static __thread char num[32]; /* only without nvmlErrorString */
    const char *s = g->error_string ? g->error_string(rc) : NULL;
    if (s && *s)
        return s;
    snprintf(num, sizeof num, "error %d", rc);
    return num;
}

/* The first of `names` the library has. */
static void *resolve(void *dl, const char *const *names, const char **found)
{
    for (; *names; names++) {
        void *f = dlsym(dl, *names);
        if (f) {
            if (found)
                *found = *names;
            return f;
        }
    }
    return NULL;
}

static int in_initial_pid_namespace(void)
{
    char link[64];
    ssize_t n = readlink("/proc/self/ns/pid", link, sizeof link - 1);
    if (n <= 0)
        return 1; /* no /proc or no namespaces: trust the pids */
    link[n] = 0;
    return strcmp(link, "pid:[4026531836]") == 0; /* PROC_PID_INIT_INO */
}

/* One figure goes over to the whole device; the reasons add up. */
static void fall_back(cal_gpu *g, int *flag, const char *why)
{
    if (!*flag)
        return;
    *flag = 0;
    size_t len = strlen(g->fallback);
    if (!why[0] || strstr(g->fallback, why))
        return;
    snprintf(g->fallback + len, sizeof g->fallback - len, "%s%s", len ? "; " : "", why);
}

cal_gpu *cal_gpu_open(const char *lib, char *err, size_t cap)
{
    say(err, cap, "%s%s", "", "");
    void *dl = dlopen(lib ? lib : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        return NULL; /* no driver: nothing to say */
    cal_gpu *g = calloc(1, sizeof *g);
    if (!g) {
        dlclose(dl);
        say(err, cap, "%s%s", "out of memory loading NVML", "");
        return NULL;
    }
    g->dl = dl;
    g->pid = getpid();
    g->initial_pid_ns = in_initial_pid_namespace();

    static const char *const init_names[] = {"nvmlInit_v2", "nvmlInit", NULL};
    static const char *const count_names[] = {"nvmlDeviceGetCount_v2",
                                              "nvmlDeviceGetCount", NULL};
    static const char *const handle_names[] = {"nvmlDeviceGetHandleByIndex_v2",
                                               "nvmlDeviceGetHandleByIndex", NULL};
    static const char *const shutdown_names[] = {"nvmlShutdown", NULL};
    nv_ret (*init)(void) = (nv_ret(*)(void))resolve(dl, init_names, NULL);
    nv_ret (*count)(unsigned *) = (nv_ret(*)(unsigned *))resolve(dl, count_names, NULL);
    nv_ret (*handle)(unsigned, nv_device *) =
        (nv_ret(*)(unsigned, nv_device *))resolve(dl, handle_names, NULL);
    g->shutdown = (nv_ret(*)(void))resolve(dl, shutdown_names, NULL);
    const char *missing = !init          ? "nvmlInit_v2"
                          : !count       ? "nvmlDeviceGetCount_v2"
                          : !handle      ? "nvmlDeviceGetHandleByIndex_v2"
                          : !g->shutdown ? "nvmlShutdown"
                                         : NULL;
    if (missing) {
        say(err, cap, "libnvidia-ml.so.1 has no %s%s", missing, "");
        dlclose(dl);
        free(g);
        return NULL;
    }
    static const char *const es[] = {"nvmlErrorString", NULL};
    g->error_string = (const char *(*)(nv_ret))resolve(dl, es, NULL);
    static const char *const uuid[] = {"nvmlDeviceGetUUID", NULL};
    static const char *const name[] = {"nvmlDeviceGetName", NULL};
    static const char *const meminfo[] = {"nvmlDeviceGetMemoryInfo", NULL};
    static const char *const util[] = {"nvmlDeviceGetUtilizationRates", NULL};
    static const char *const procs[] = {"nvmlDeviceGetComputeRunningProcesses_v3",
                                        "nvmlDeviceGetComputeRunningProcesses_v2",
                                        "nvmlDeviceGetComputeRunningProcesses", NULL};
    static const char *const putil[] = {"nvmlDeviceGetProcessUtilization", NULL};
    g->get_uuid = (nv_ret(*)(nv_device, char *, unsigned))resolve(dl, uuid, NULL);
    g->get_name = (nv_ret(*)(nv_device, char *, unsigned))resolve(dl, name, NULL);
    g->memory_info = (nv_ret(*)(nv_device, nv_memory *))resolve(dl, meminfo, NULL);
    g->utilization = (nv_ret(*)(nv_device, nv_utilization *))resolve(dl, util, NULL);
    g->processes = (nv_ret(*)(nv_device, unsigned *, void *))resolve(
        dl, procs, &g->processes_name);
    g->processes_stride =
        g->processes &&
                strcmp(g->processes_name, "nvmlDeviceGetComputeRunningProcesses") == 0
            ? 16
            : 24;
    g->process_util = (nv_ret(*)(nv_device, nv_proc_util *, unsigned *,
                                 unsigned long long))resolve(dl, putil, NULL);

    if (!g->memory_info && !g->processes && !g->utilization && !g->process_util) {
        say(err, cap, "libnvidia-ml.so.1 has neither memory nor utilisation calls%s%s",
            "", "");
        dlclose(dl);
        free(g);
        return NULL;
    }
    g->per_process_memory = g->per_process_util = 1;
    if (!g->processes)
        fall_back(g, &g->per_process_memory,
                  "GPU memory is the whole device's: this NVML lacks "
                  "nvmlDeviceGetComputeRunningProcesses");
    if (!g->process_util)
        fall_back(g, &g->per_process_util,
                  "GPU utilisation is the whole device's: this NVML lacks "
                  "nvmlDeviceGetProcessUtilization");

    nv_ret rc = init();
    if (rc != NV_SUCCESS) {
        say(err, cap, "nvmlInit failed: %s%s", nv_error(g, rc), "");
        dlclose(dl);
        free(g);
        return NULL;
    }
    unsigned n = 0;
    rc = count(&n);
    const char *failed = rc != NV_SUCCESS ? "nvmlDeviceGetCount" : NULL;
    if (!failed && n == 0) {
        say(err, cap, "NVML found no device%s%s", "", "");
        g->shutdown();
        dlclose(dl);
        free(g);
        return NULL;
    }
    if (n > CAL_GPU_MAX_DEVICES)
        n = CAL_GPU_MAX_DEVICES;
    for (unsigned i = 0; !failed && i < n; i++) {
        rc = handle(i, &g->dev[i].handle);
        if (rc != NV_SUCCESS) {
            failed = "nvmlDeviceGetHandleByIndex";
            break;
        }
        cal_gpu_device *d = &g->info[i];
        if (!g->get_uuid ||
            g->get_uuid(g->dev[i].handle, d->uuid, sizeof d->uuid) != NV_SUCCESS)
            snprintf(d->uuid, sizeof d->uuid, "GPU-index-%u", i);
        if (!g->get_name ||
            g->get_name(g->dev[i].handle, d->name, sizeof d->name) != NV_SUCCESS)
            d->name[0] = 0;
        d->uuid[sizeof d->uuid - 1] = d->name[sizeof d->name - 1] = 0;
        nv_memory m;
        if (g->memory_info && g->memory_info(g->dev[i].handle, &m) == NV_SUCCESS)
            d->memory_total = (int64_t)m.total;
    }
    if (failed) {
        say(err, cap, "%s failed: %s", failed, nv_error(g, rc));
        g->shutdown();
        dlclose(dl);
        free(g);
        return NULL;
    }
    g->ndevices = (int)n;
    return g;
}

void cal_gpu_close(cal_gpu *g)
{
    if (!g)
        return;
    g->shutdown();
    dlclose(g->dl);
    free(g->procs);
    free(g->samples);
    free(g);
}

int cal_gpu_ndevices(const cal_gpu *g) { return g->ndevices; }
const cal_gpu_device *cal_gpu_device_at(const cal_gpu *g, int i) { return &g->info[i]; }
int cal_gpu_per_process_util(const cal_gpu *g) { return g->per_process_util; }
int cal_gpu_per_process_memory(const cal_gpu *g) { return g->per_process_memory; }
const char *cal_gpu_fallback(const cal_gpu *g) { return g->fallback; }

/* The parent of `pid` from /proc/<pid>/stat, or 0. */
static pid_t parent_of(pid_t pid)
{
    char path[40], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    int ppid = 0;
    if (!p || sscanf(p + 1, " %*c %d", &ppid) != 1)
        return 0;
    return (pid_t)ppid;
}

/* Is `pid` this process or one of its descendants? */
static int is_ours(const cal_gpu *g, pid_t pid)
{
    for (int depth = 0; pid > 1 && depth < 32; depth++) {
        if (pid == g->pid)
            return 1;
        pid = parent_of(pid);
    }
    return 0;
}

static uint32_t u32_at(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t u64_at(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

int cal_gpu_entries_plausible(const unsigned char *buf, unsigned n, size_t stride)
{
    for (unsigned i = 0; i < n; i++) {
        const unsigned char *e = buf + (size_t)i * stride;
        if (u32_at(e) == 0)
            return 0;
        if (stride < 24)
            continue;
        uint32_t gi = u32_at(e + 16), ci = u32_at(e + 20);
        if ((gi != 0xFFFFFFFFu && gi > 64) || (ci != 0xFFFFFFFFu && ci > 64))
            return 0;
    }
    return 1;
}

/* This process tree's memory on device i.  0, or -1 with the NVML error in
   *rc; *listed says how many processes NVML listed, *matched whether one
   was ours. */
static int read_processes(cal_gpu *g, int i, int64_t *mine, unsigned *listed,
                          int *matched, nv_ret *rc)
{
    *mine = 0;
    *matched = 0;
    unsigned n;
    for (int attempt = 0;; attempt++) {
        n = g->procs_cap;
        *rc = g->processes(g->dev[i].handle, &n, g->procs);
        if (*rc == NV_SUCCESS)
            break;
        if (*rc != NV_INSUFFICIENT_SIZE || attempt == 3 || n > MAX_PROCS)
            return -1;
        /* Room for the widest entry whatever the driver writes. */
        unsigned cap = n + 16;
        unsigned char *grown = realloc(g->procs, (size_t)cap * PROC_ENTRY_MAX);
        if (!grown)
            return -1;
        g->procs = grown;
        g->procs_cap = cap;
    }
    *listed = n;
    size_t stride = g->processes_stride;
    if (stride == 24 && !cal_gpu_entries_plausible(g->procs, n, 24) &&
        cal_gpu_entries_plausible(g->procs, n, 32))
        stride = 32;
    for (unsigned k = 0; k < n; k++) {
        const unsigned char *e = g->procs + (size_t)k * stride;
        uint64_t used = u64_at(e + 8);
        if (!is_ours(g, (pid_t)u32_at(e)))
            continue;
        *matched = 1;
        if (used != NV_VALUE_NOT_AVAILABLE)
            *mine += (int64_t)used;
    }
    return 0;
}

/* This process tree's SM utilisation on device i (percent), holding the
   last value between the driver's samples.  0, or -1 with *rc. */
static int read_process_util(cal_gpu *g, int i, int64_t now, double *mine, nv_ret *rc)
{
    gpu_dev *d = &g->dev[i];
    unsigned n = 0;
    *rc = g->process_util(d->handle, NULL, &n, d->last_seen);
    if (*rc == NV_SUCCESS || *rc == NV_INSUFFICIENT_SIZE) {
        if (n > g->samples_cap) {
            nv_proc_util *grown = realloc(g->samples, (size_t)(n + 16) * sizeof *grown);
            if (!grown)
                return -1;
            g->samples = grown;
            g->samples_cap = n + 16;
        }
        n = g->samples_cap;
        *rc =
            n ? g->process_util(d->handle, g->samples, &n, d->last_seen) : NV_NOT_FOUND;
    }
    if (*rc == NV_NOT_FOUND) {
        n = 0; /* no sample since the last reading */
        *rc = NV_SUCCESS;
    }
    if (*rc != NV_SUCCESS)
        return -1;
    /* Per process of ours, the mean of its new samples; summed. */
    double sum = 0;
    int any = 0;
    unsigned long long newest = 0;
    for (unsigned k = 0; k < n; k++) {
        const nv_proc_util *s = &g->samples[k];
        if (s->timestamp > d->last_seen)
            d->last_seen = s->timestamp;
    }
    for (unsigned k = 0; k < n; k++) {
        const nv_proc_util *s = &g->samples[k];
        if (s->pid == 0 || !is_ours(g, (pid_t)s->pid))
            continue;
        int first = 1, count = 0;
        double psum = 0;
        for (unsigned j = 0; j < n; j++) {
            if (g->samples[j].pid != s->pid)
                continue;
            first = first && j >= k;
            psum += g->samples[j].sm;
            count++;
        }
        if (first) /* each pid once */
            sum += psum / count;
        if (s->timestamp > newest)
            newest = s->timestamp;
        any = 1;
    }
    if (any) {
        if (d->ours_ts && newest > d->ours_ts) {
            int64_t period = (int64_t)(newest - d->ours_ts) * 1000;
            if (period >= 10000000 &&
                period <= 2000000000 && /* 10 ms to 2 s: plausible */
                (!d->hold_ns || period + period / 2 < d->hold_ns))
                d->hold_ns = period + period / 2;
        }
        d->ours_ts = newest;
        d->util = sum > 100 ? 100 : sum;
        d->util_at = now;
    } else if (now - d->util_at > (d->hold_ns ? d->hold_ns : HOLD_NS)) {
        d->util = 0;
    }
    *mine = d->util;
    return 0;
}

int cal_gpu_read(cal_gpu *g, cal_gpu_reading *out, char *err, size_t cap)
{
    memset(out, 0, sizeof *out);
    out->ndevices = g->ndevices;
    int64_t now = cal_clock_now_ns();
    int in_use = 0;
    double util_sum = 0;
    for (int i = 0; i < g->ndevices; i++) {
        nv_ret rc = NV_SUCCESS;
        int64_t mem = 0;
        double util = 0;
        if (g->per_process_memory) {
            unsigned listed = 0;
            int matched = 0;
            if (read_processes(g, i, &mem, &listed, &matched, &rc) != 0) {
                if (rc == NV_NOT_SUPPORTED || rc == NV_NO_PERMISSION)
                    fall_back(
                        g, &g->per_process_memory,
                        "GPU memory is the whole device's: the driver does not list "
                        "processes here");
                else {
                    say(err, cap, "%s failed: %s", g->processes_name, nv_error(g, rc));
                    return -1;
                }
            } else if (!matched && listed && !g->initial_pid_ns) {
                fall_back(
                    g, &g->per_process_memory,
                    "GPU figures are the whole device's: in this PID namespace (a "
                    "container) NVML reports host process IDs");
                fall_back(g, &g->per_process_util, "");
            }
        }
        if (!g->per_process_memory && g->memory_info) {
            nv_memory m;
            rc = g->memory_info(g->dev[i].handle, &m);
            if (rc != NV_SUCCESS) {
                say(err, cap, "nvmlDeviceGetMemoryInfo failed: %s%s", nv_error(g, rc),
                    "");
                return -1;
            }
            mem = (int64_t)m.used;
        }
        if (g->per_process_util && read_process_util(g, i, now, &util, &rc) != 0) {
            if (rc != NV_NOT_SUPPORTED && rc != NV_NO_PERMISSION) {
                say(err, cap, "nvmlDeviceGetProcessUtilization failed: %s%s",
                    nv_error(g, rc), "");
                return -1;
            }
            fall_back(g, &g->per_process_util,
                      "GPU utilisation is the whole device's: the driver keeps no "
                      "per-process "
                      "samples here");
        }
        if (!g->per_process_util && g->utilization) {
            nv_utilization u;
            rc = g->utilization(g->dev[i].handle, &u);
            if (rc != NV_SUCCESS) {
                say(err, cap, "nvmlDeviceGetUtilizationRates failed: %s%s",
                    nv_error(g, rc), "");
                return -1;
            }
            util = u.gpu;
        }
        out->dev_util[i] = util;
        out->dev_memory[i] = mem;
        /* In use: ours (per process), or every device (device-wide). */
        int used =
            g->per_process_util || g->per_process_memory ? mem > 0 || util > 0 : 1;
        if (used) {
            in_use++;
            util_sum += util;
        }
        out->memory += mem;
    }
    out->util = in_use ? util_sum / in_use : 0;
    return 0;
}
