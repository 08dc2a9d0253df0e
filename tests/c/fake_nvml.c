/*
 * A fake NVIDIA NVML library for the tests (the test machines have no GPU).
 * Built as libnvidia-ml.so.1 into a temporary directory that the tests put on
 * LD_LIBRARY_PATH, so the profiler's dlopen("libnvidia-ml.so.1") finds it.
 * It declares its own copies of the NVML types, with the real ABI, and
 * exports the functions the profiler uses.  Each one sits inside
 * `#ifndef OMIT_<function name>` so that a test can build a variant that
 * lacks it (e.g. -DOMIT_nvmlDeviceGetProcessUtilization).
 *
 * The program under test sets what "the GPU" reports through ctypes:
 *   fake_nvml_set(device, util_percent, memory_bytes)   our process's use
 *   fake_nvml_set_device_util(device, util_percent)     device-wide, -1 = auto
 * and a test can read back fake_nvml_calls(name), fake_nvml_main_thread_calls()
 * and fake_nvml_initialized().
 *
 * Environment, read at nvmlInit (and on the first call of any function):
 *   FAKE_NVML_DEVICES     number of devices, 0..8 (default 1)
 *   FAKE_NVML_PID_OFFSET  added to getpid() for the pid reported for us
 *   FAKE_NVML_OTHER=1     every device also runs another process
 *                         (pid 1, 1 GiB, SM utilisation 50%)
 *   FAKE_NVML_STRIDE32=1  nvmlDeviceGetComputeRunningProcesses_v3 writes
 *                         32-byte entries, like some drivers' header mix-up
 *   FAKE_NVML_FAIL        comma-separated `function=CODE` or `function=CODE@N`:
 *                         that function returns CODE on every call, or from
 *                         its N-th call on (counted from 1)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- NVML's types, with the real ABI ---------------------------------- */

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};

struct nvmlDevice_st {
    unsigned int index;
    unsigned int our_util;         /* our process's SM utilisation, % */
    unsigned long long our_memory; /* our process's GPU memory, bytes */
    int device_util;               /* device-wide utilisation, -1 = auto */
};
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct { /* nvmlDeviceGetComputeRunningProcesses (v1) */
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct { /* _v2 and _v3 */
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef struct { /* the 32-byte layout some drivers' headers had for _v3 */
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessInfo_cc_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp; /* microseconds, CLOCK_REALTIME */
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

/* The three process-info layouts share their prefixes, so one entry is built
 * as the widest and its first `stride` bytes copied out. */
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "v1 process info is 16 bytes");
_Static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "v2 process info is 24 bytes");
_Static_assert(sizeof(nvmlProcessInfo_cc_t) == 32, "cc process info is 32 bytes");
_Static_assert(offsetof(nvmlProcessInfo_cc_t, computeInstanceId) ==
                   offsetof(nvmlProcessInfo_v2_t, computeInstanceId),
               "process info layouts share a prefix");
_Static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "samples are 32 bytes");

/* ---- state ------------------------------------------------------------- */

#define MAX_DEVICES 8
#define NO_INSTANCE 0xFFFFFFFFu
#define OTHER_PID 1u
#define OTHER_MEMORY (1ull << 30)
#define OTHER_UTIL 50u
#define TOTAL_MEMORY (16ull << 30)

/* Every NVML function of the fake, for call counts and FAKE_NVML_FAIL. */
#define FAKE_NVML_FUNCTIONS(X)                                                         \
    X(nvmlInit_v2)                                                                     \
    X(nvmlInit)                                                                        \
    X(nvmlShutdown)                                                                    \
    X(nvmlErrorString)                                                                 \
    X(nvmlDeviceGetCount_v2)                                                           \
    X(nvmlDeviceGetCount)                                                              \
    X(nvmlDeviceGetHandleByIndex_v2)                                                   \
    X(nvmlDeviceGetHandleByIndex)                                                      \
    X(nvmlDeviceGetUUID)                                                               \
    X(nvmlDeviceGetName)                                                               \
    X(nvmlDeviceGetMemoryInfo)                                                         \
    X(nvmlDeviceGetUtilizationRates)                                                   \
    X(nvmlDeviceGetComputeRunningProcesses_v3)                                         \
    X(nvmlDeviceGetComputeRunningProcesses_v2)                                         \
    X(nvmlDeviceGetComputeRunningProcesses)                                            \
    X(nvmlDeviceGetProcessUtilization)

#define AS_ENUM(name) FN_##name,
#define AS_NAME(name) #name,
enum function { FAKE_NVML_FUNCTIONS(AS_ENUM) FN_COUNT };
static const char *const function_names[FN_COUNT] = {FAKE_NVML_FUNCTIONS(AS_NAME)};

struct failure {
    nvmlReturn_t code;  /* 0: never fails */
    unsigned long from; /* fails from this call on (1 = every call) */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvmlDevice_st devices[MAX_DEVICES] = {
    {0, 0, 0, -1}, {1, 0, 0, -1}, {2, 0, 0, -1}, {3, 0, 0, -1},
    {4, 0, 0, -1}, {5, 0, 0, -1}, {6, 0, 0, -1}, {7, 0, 0, -1},
};
static unsigned long calls[FN_COUNT];
static struct failure failures[FN_COUNT];
static int main_thread_calls;
static int init_count; /* nvmlInit nests, like the real one */
static int config_loaded;
static unsigned int device_count = 1;
static long pid_offset;
static int other_process;
static int stride32;

/* ---- configuration from the environment -------------------------------- */

static long env_long(const char *name, long fallback)
{
    const char *value = getenv(name);
    char *end;
    long n;

    if (!value || !*value)
        return fallback;
    n = strtol(value, &end, 10);
    return *end ? fallback : n;
}

static int find_function(const char *name, size_t len)
{
    for (int f = 0; f < FN_COUNT; f++)
        if (strlen(function_names[f]) == len && !strncmp(function_names[f], name, len))
            return f;
    return -1;
}

/* One `function=CODE` or `function=CODE@N` item of FAKE_NVML_FAIL. */
static void parse_failure(const char *item, size_t len)
{
    const char *eq = memchr(item, '=', len);
    char spec[32];
    char *end;
    int f;

    if (!eq || (size_t)(item + len - eq - 1) >= sizeof spec)
        goto bad;
    f = find_function(item, (size_t)(eq - item));
    if (f < 0)
        goto bad;
    memcpy(spec, eq + 1, (size_t)(item + len - eq - 1));
    spec[item + len - eq - 1] = '\0';
    failures[f].code = (nvmlReturn_t)strtol(spec, &end, 10);
    failures[f].from = 1;
    if (*end == '@')
        failures[f].from = strtoul(end + 1, &end, 10);
    if (*end || end == spec || failures[f].from == 0)
        goto bad;
    return;
bad:
    fprintf(stderr, "fake_nvml: ignoring bad FAKE_NVML_FAIL item '%.*s'\n", (int)len,
            item);
}

static void parse_failures(const char *list)
{
    memset(failures, 0, sizeof failures);
    while (list && *list) {
        size_t len = strcspn(list, ",");
        if (len)
            parse_failure(list, len);
        list += len + (list[len] == ',');
    }
}

static void load_config(void)
{
    long n = env_long("FAKE_NVML_DEVICES", 1);

    device_count = n < 0 ? 1 : n > MAX_DEVICES ? MAX_DEVICES : (unsigned int)n;
    pid_offset = env_long("FAKE_NVML_PID_OFFSET", 0);
    other_process = env_long("FAKE_NVML_OTHER", 0) != 0;
    stride32 = env_long("FAKE_NVML_STRIDE32", 0) != 0;
    parse_failures(getenv("FAKE_NVML_FAIL"));
    config_loaded = 1;
}

/* ---- the bookkeeping around every NVML call ----------------------------- */

/* The helpers from here on are HELPERs: a variant built with OMIT_... may
 * leave some of them unused, which must not warn. */
#define HELPER static __attribute__((unused))

HELPER int on_main_thread(void) { return (pid_t)syscall(SYS_gettid) == getpid(); }

/* Takes the lock (re-reading the environment for the nvmlInit functions) and
 * counts the call; returns the code the call fails with (injected, or
 * UNINITIALIZED when `needs_init` and NVML is not initialised), NVML_SUCCESS
 * to go on.  Every enter() is paired with a leave(). */
HELPER nvmlReturn_t enter(enum function f, int needs_init)
{
    pthread_mutex_lock(&lock);
    if (!config_loaded || f == FN_nvmlInit_v2 || f == FN_nvmlInit)
        load_config();
    calls[f]++;
    if (on_main_thread())
        main_thread_calls++;
    if (failures[f].code && calls[f] >= failures[f].from)
        return failures[f].code;
    if (needs_init && init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    return NVML_SUCCESS;
}

HELPER nvmlReturn_t leave(nvmlReturn_t result)
{
    pthread_mutex_unlock(&lock);
    return result;
}

/* The device a handle points at, or NULL if it is not a current device. */
HELPER struct nvmlDevice_st *device_of(nvmlDevice_t handle)
{
    for (unsigned int i = 0; i < device_count; i++)
        if (handle == &devices[i])
            return handle;
    return NULL;
}

HELPER unsigned int our_pid(void)
{
    return (unsigned int)((long)getpid() + pid_offset);
}

HELPER unsigned long long now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ull +
           (unsigned long long)ts.tv_nsec / 1000;
}

HELPER unsigned int device_util(const struct nvmlDevice_st *dev)
{
    unsigned int util;

    if (dev->device_util >= 0)
        return (unsigned int)dev->device_util;
    util = dev->our_util + (other_process ? OTHER_UTIL : 0);
    return util > 100 ? 100 : util;
}

/* ---- the implementations ------------------------------------------------ */

HELPER nvmlReturn_t do_init(enum function f)
{
    nvmlReturn_t r = enter(f, 0);

    if (r == NVML_SUCCESS)
        init_count++;
    return leave(r);
}

HELPER nvmlReturn_t get_count(enum function f, unsigned int *count)
{
    nvmlReturn_t r = enter(f, 1);

    if (r == NVML_SUCCESS && !count)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *count = device_count;
    return leave(r);
}

HELPER nvmlReturn_t get_handle(enum function f, unsigned int index,
                               nvmlDevice_t *device)
{
    nvmlReturn_t r = enter(f, 1);

    if (r == NVML_SUCCESS && (index >= device_count || !device))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *device = &devices[index];
    return leave(r);
}

/* Copies "<prefix><index>" into buf, as nvmlDeviceGetUUID/GetName do. */
HELPER nvmlReturn_t get_string(enum function f, nvmlDevice_t device, const char *prefix,
                               char *buf, unsigned int len)
{
    nvmlReturn_t r = enter(f, 1);
    struct nvmlDevice_st *dev = device_of(device);
    char text[64];
    int n;

    if (r != NVML_SUCCESS)
        return leave(r);
    if (!dev || !buf)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    n = snprintf(text, sizeof text, "%s%u", prefix, dev->index);
    if ((unsigned int)n + 1 > len)
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    memcpy(buf, text, (size_t)n + 1);
    return leave(NVML_SUCCESS);
}

/* Fills `infos` with `stride`-byte entries (16 or 24), or for STRIDE_V3
 * with 24-byte ones or, under FAKE_NVML_STRIDE32, 32-byte ones. */
#define STRIDE_V3 0
HELPER nvmlReturn_t get_processes(enum function f, nvmlDevice_t device,
                                  unsigned int *count, void *infos, size_t stride)
{
    nvmlReturn_t r = enter(f, 1);
    struct nvmlDevice_st *dev = device_of(device);
    nvmlProcessInfo_cc_t list[2];
    unsigned int n = 0;

    if (r != NVML_SUCCESS)
        return leave(r);
    if (stride == STRIDE_V3)
        stride = stride32 ? sizeof(nvmlProcessInfo_cc_t) : sizeof(nvmlProcessInfo_v2_t);
    if (!dev || !count)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    memset(list, 0, sizeof list);
    if (dev->our_memory > 0)
        list[n++] = (nvmlProcessInfo_cc_t){our_pid(), dev->our_memory, NO_INSTANCE,
                                           NO_INSTANCE, 0};
    if (other_process)
        list[n++] = (nvmlProcessInfo_cc_t){OTHER_PID, OTHER_MEMORY, NO_INSTANCE,
                                           NO_INSTANCE, 0};
    if (*count < n) {
        *count = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    if (n > 0 && !infos)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned int i = 0; i < n; i++)
        memcpy((char *)infos + i * stride, &list[i], stride);
    *count = n;
    return leave(NVML_SUCCESS);
}

HELPER nvmlReturn_t get_process_utilization(nvmlDevice_t device,
                                            nvmlProcessUtilizationSample_t *samples,
                                            unsigned int *count,
                                            unsigned long long last_seen)
{
    nvmlReturn_t r = enter(FN_nvmlDeviceGetProcessUtilization, 1);
    struct nvmlDevice_st *dev = device_of(device);
    nvmlProcessUtilizationSample_t fresh[2];
    unsigned long long now = now_us();
    unsigned int n = 0;

    if (r != NVML_SUCCESS)
        return leave(r);
    if (!dev || !count)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (now > last_seen && dev->our_util > 0)
        fresh[n++] = (nvmlProcessUtilizationSample_t){
            our_pid(), now, dev->our_util, dev->our_util / 2, 0, 0};
    if (now > last_seen && other_process)
        fresh[n++] = (nvmlProcessUtilizationSample_t){OTHER_PID,      now, OTHER_UTIL,
                                                      OTHER_UTIL / 2, 0,   0};
    if (n == 0)
        return leave(NVML_ERROR_NOT_FOUND);
    if (!samples || *count < n) {
        *count = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    memcpy(samples, fresh, n * sizeof fresh[0]);
    *count = n;
    return leave(NVML_SUCCESS);
}

/* ---- the exported NVML functions --------------------------------------- */

#ifndef OMIT_nvmlInit_v2
nvmlReturn_t nvmlInit_v2(void) { return do_init(FN_nvmlInit_v2); }
#endif

#ifndef OMIT_nvmlInit
nvmlReturn_t nvmlInit(void) { return do_init(FN_nvmlInit); }
#endif

#ifndef OMIT_nvmlShutdown
nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t r = enter(FN_nvmlShutdown, 1);

    if (r == NVML_SUCCESS)
        init_count--;
    return leave(r);
}
#endif

#ifndef OMIT_nvmlErrorString
const char *nvmlErrorString(nvmlReturn_t result)
{
    enter(FN_nvmlErrorString, 0); /* counted; never fails */
    leave(NVML_SUCCESS);
    switch (result) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
        return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
        return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
        return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
        return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
        return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
        return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
        return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    default:
        return "Unknown Error";
    }
}
#endif

#ifndef OMIT_nvmlDeviceGetCount_v2
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    return get_count(FN_nvmlDeviceGetCount_v2, deviceCount);
}
#endif

#ifndef OMIT_nvmlDeviceGetCount
nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return get_count(FN_nvmlDeviceGetCount, deviceCount);
}
#endif

#ifndef OMIT_nvmlDeviceGetHandleByIndex_v2
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    return get_handle(FN_nvmlDeviceGetHandleByIndex_v2, index, device);
}
#endif

#ifndef OMIT_nvmlDeviceGetHandleByIndex
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return get_handle(FN_nvmlDeviceGetHandleByIndex, index, device);
}
#endif

#ifndef OMIT_nvmlDeviceGetUUID
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    return get_string(FN_nvmlDeviceGetUUID, device,
                      "GPU-fake0000-0000-0000-0000-00000000000", uuid, length);
}
#endif

#ifndef OMIT_nvmlDeviceGetName
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    return get_string(FN_nvmlDeviceGetName, device, "Fake GPU ", name, length);
}
#endif

#ifndef OMIT_nvmlDeviceGetMemoryInfo
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlReturn_t r = enter(FN_nvmlDeviceGetMemoryInfo, 1);
    struct nvmlDevice_st *dev = device_of(device);

    if (r != NVML_SUCCESS)
        return leave(r);
    if (!dev || !memory)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    memory->total = TOTAL_MEMORY;
    memory->used = dev->our_memory + (other_process ? OTHER_MEMORY : 0);
    memory->free = memory->used < TOTAL_MEMORY ? TOTAL_MEMORY - memory->used : 0;
    return leave(NVML_SUCCESS);
}
#endif

#ifndef OMIT_nvmlDeviceGetUtilizationRates
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                           nvmlUtilization_t *utilization)
{
    nvmlReturn_t r = enter(FN_nvmlDeviceGetUtilizationRates, 1);
    struct nvmlDevice_st *dev = device_of(device);

    if (r != NVML_SUCCESS)
        return leave(r);
    if (!dev || !utilization)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    utilization->gpu = device_util(dev);
    utilization->memory = utilization->gpu / 2;
    return leave(NVML_SUCCESS);
}
#endif

#ifndef OMIT_nvmlDeviceGetComputeRunningProcesses_v3
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                     unsigned int *infoCount,
                                                     void *infos)
{
    return get_processes(FN_nvmlDeviceGetComputeRunningProcesses_v3, device, infoCount,
                         infos, STRIDE_V3);
}
#endif

#ifndef OMIT_nvmlDeviceGetComputeRunningProcesses_v2
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                     unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos)
{
    return get_processes(FN_nvmlDeviceGetComputeRunningProcesses_v2, device, infoCount,
                         infos, sizeof(nvmlProcessInfo_v2_t));
}
#endif

#ifndef OMIT_nvmlDeviceGetComputeRunningProcesses
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                  unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
    return get_processes(FN_nvmlDeviceGetComputeRunningProcesses, device, infoCount,
                         infos, sizeof(nvmlProcessInfo_v1_t));
}
#endif

#ifndef OMIT_nvmlDeviceGetProcessUtilization
nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
    unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp)
{
    return get_process_utilization(device, utilization, processSamplesCount,
                                   lastSeenTimeStamp);
}
#endif

/* ---- control and introspection for the tests (not NVML calls) ---------- */

void fake_nvml_set(unsigned int device, unsigned int util_percent,
                   unsigned long long memory_bytes)
{
    if (device >= MAX_DEVICES)
        return;
    pthread_mutex_lock(&lock);
    devices[device].our_util = util_percent > 100 ? 100 : util_percent;
    devices[device].our_memory = memory_bytes;
    pthread_mutex_unlock(&lock);
}

void fake_nvml_set_device_util(unsigned int device, int util_percent)
{
    if (device >= MAX_DEVICES)
        return;
    pthread_mutex_lock(&lock);
    devices[device].device_util = util_percent < 0     ? -1
                                  : util_percent > 100 ? 100
                                                       : util_percent;
    pthread_mutex_unlock(&lock);
}

unsigned long fake_nvml_calls(const char *name)
{
    unsigned long n = 0;
    int f = name ? find_function(name, strlen(name)) : -1;

    pthread_mutex_lock(&lock);
    if (f >= 0)
        n = calls[f];
    pthread_mutex_unlock(&lock);
    return n;
}

int fake_nvml_main_thread_calls(void)
{
    int n;

    pthread_mutex_lock(&lock);
    n = main_thread_calls;
    pthread_mutex_unlock(&lock);
    return n;
}

int fake_nvml_initialized(void)
{
    int initialized;

    pthread_mutex_lock(&lock);
    initialized = init_count > 0;
    pthread_mutex_unlock(&lock);
    return initialized;
}
