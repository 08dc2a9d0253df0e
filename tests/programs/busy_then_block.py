"""Busy Python, then a blocking sleep, three times: the sleep line used no
CPU and waited exactly as long as the program measures.  Writes the
busy lines' CPU and the sleeps' wall time."""
import json
import sys
import time


def busy(seconds):
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:  # busy-line
        pass
    return time.thread_time() - t0


burnt = slept = 0.0
for _ in range(3):
    burnt += busy(0.2)
    t0 = time.perf_counter()
    time.sleep(0.2)  # sleep-line
    slept += time.perf_counter() - t0
with open(sys.argv[1], "w") as f:
    json.dump({"busy_cpu": burnt, "slept": slept}, f)
