"""Ground truth for the GPU columns: alternates a phase that "uses" no GPU
with one at 90% utilisation and 3 GiB, on the fake NVML (tests/c/fake_nvml.c,
which the test puts on LD_LIBRARY_PATH), and writes what the fake saw to
the truth file: how many NVML calls came from the main thread (the profiler
must make none), and how many times NVML was initialised; and the CPU time
its phases used (its own thread clock: what the profile must hold, however
loaded the machine).

usage: gpu_phases.py TRUTH [DEVICE]"""
import ctypes
import json
import sys
import time

nvml = ctypes.CDLL("libnvidia-ml.so.1")
MiB = 1 << 20
DEVICE = int(sys.argv[2]) if len(sys.argv) > 2 else 0


def use(util, memory):
    nvml.fake_nvml_set(DEVICE, util, ctypes.c_ulonglong(memory))


def idle():
    use(0, 256 * MiB)
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:  # @idle
        pass


def busy():
    use(90, 3072 * MiB)
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:  # @busy
        pass


cpu0 = time.thread_time()
for _ in range(2):
    idle()
    busy()
loop_cpu = time.thread_time() - cpu0
use(0, 0)
nvml.fake_nvml_calls.restype = ctypes.c_ulong
with open(sys.argv[1], "w") as f:
    json.dump({"main_thread_calls": nvml.fake_nvml_main_thread_calls(),
               "inits": nvml.fake_nvml_calls(b"nvmlInit_v2"), "loop_cpu_s": loop_cpu}, f)
print("phases done")
