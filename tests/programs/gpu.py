"""A program that "uses the GPU" through the fake NVML (tests/c/fake_nvml.c):
it sets its own GPU utilisation and memory, then spins on a marked line
while the profiler reads them.  Run it with tests/fake_nvml.py's env()."""

import ctypes
import time

nvml = ctypes.CDLL("libnvidia-ml.so.1")
GB = 1_000_000_000


def use(util, memory):
    nvml.fake_nvml_set(0, util, ctypes.c_ulonglong(memory))
    time.sleep(0.25)  # settle: the poller's next reading sees the new figures


def heavy():
    use(80, 3 * GB)
    end = time.perf_counter() + 0.6
    while time.perf_counter() < end:  # heavy
        pass


def light():
    use(20, GB // 2)
    end = time.perf_counter() + 0.6
    while time.perf_counter() < end:  # light
        pass


def cpu_only():
    use(0, 0)
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:  # idle
        pass


heavy()
light()
cpu_only()
