/*
 * cal_gpu — NVIDIA GPU utilisation and memory through NVML, loaded at run
 * time with dlopen("libnvidia-ml.so.1"): no build or runtime dependency on
 * CUDA or on a Python NVML package, and no GPU means no cost.
 *
 * Each NVML symbol is resolved on its own (the versioned ones newest
 * first), and what is missing degrades what we report rather than the run:
 * per-process utilisation falls back to the device's, per-process memory to
 * the device's used memory, and only a missing core symbol (init, count,
 * handle) or an NVML error turns GPU sampling off, with a sentence saying
 * why.
 *
 * Not thread-safe: one thread owns a cal_gpu (the extension's GPU poller).
 * Never called from a hook or a signal handler: NVML takes locks and may
 * block for milliseconds.
 */
#ifndef CAL_GPU_H
#define CAL_GPU_H

#include <stddef.h>
#include <stdint.h>

#define CAL_GPU_MAX_DEVICES 16

typedef struct cal_gpu_device {
    char uuid[96];
    char name[96];
    int64_t memory_total; /* bytes, or 0 if unknown */
} cal_gpu_device;

/* One reading of every device.  util and memory cover the devices this
   process uses (its own figures), or the whole devices when NVML cannot
   tell processes apart (cal_gpu_per_process). */
typedef struct cal_gpu_reading {
    int ndevices;
    double util;    /* percent: mean over the devices in use (0 if none) */
    int64_t memory; /* bytes, summed over devices */
    double dev_util[CAL_GPU_MAX_DEVICES];
    int64_t dev_memory[CAL_GPU_MAX_DEVICES];
} cal_gpu_reading;

typedef struct cal_gpu cal_gpu;

/* Load `lib` (NULL: "libnvidia-ml.so.1"), initialise NVML and list the
   devices.  Returns the handle, or NULL with a one-line reason in err ("" if
   there is simply no NVML library: the machine has no NVIDIA driver). */
cal_gpu *cal_gpu_open(const char *lib, char *err, size_t cap);

/* Shut NVML down and unload it. */
void cal_gpu_close(cal_gpu *g);

int cal_gpu_ndevices(const cal_gpu *g);
const cal_gpu_device *cal_gpu_device_at(const cal_gpu *g, int i);

/* Whether utilisation / memory are this process tree's own (1) or the
   devices' (0).  Either can change to 0 at a reading (the driver does not
   support per-process figures, or reports host PIDs we cannot map); the
   reason is then in cal_gpu_fallback. */
int cal_gpu_per_process_util(const cal_gpu *g);
int cal_gpu_per_process_memory(const cal_gpu *g);
/* Why a figure fell back to the whole device, or "" (a sentence). */
const char *cal_gpu_fallback(const cal_gpu *g);

/* Read every device.  On success return 0; on an NVML error return -1
   with a one-line reason in err (the caller stops sampling). */
int cal_gpu_read(cal_gpu *g, cal_gpu_reading *out, char *err, size_t cap);

/* Parse n process-info entries written by nvmlDeviceGetComputeRunningProcesses
   at `buf` with `stride` bytes each: plausible (1) if every entry has a
   non-zero pid and MIG ids that are 0xFFFFFFFF or small.  Some drivers
   shipped a header whose _v3 entry is 32 bytes, others 24: the reader tries
   24, then 32.  Exposed for the unit tests. */
int cal_gpu_entries_plausible(const unsigned char *buf, unsigned n, size_t stride);

#endif
