"""Native threads of a C extension call back into Python (2 threads x 30
calls of callback(), each burning 10 ms of CPU, with a 20 ms pause between
calls) while the main thread runs Python for 1 s.  Each thread first spins
in C for 10 ms of its CPU, before its first call."""
import json
import sys
import threading
import time

sys.path.insert(0, sys.argv[1])
import gilcall  # noqa: E402  (built by the test)

spent = {}


def callback(index):
    t0 = time.thread_time()
    while time.thread_time() - t0 < 0.01:  # callback-line
        pass
    tid = threading.get_native_id()
    spent[tid] = spent.get(tid, 0.0) + time.thread_time() - t0


def busy(seconds):
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:  # busy-line
        pass
    return time.thread_time() - t0


gilcall.start(callback, 2, 30, 20, 10)
main_cpu = busy(1.0)
gilcall.join()
with open(sys.argv[2], "w") as f:
    json.dump({"callback_cpu_s": spent, "main_cpu_s": main_cpu, "spin_cpu_s": 0.01}, f)
print("ok", len(spent))
