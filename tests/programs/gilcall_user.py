"""Native threads of a C extension call back into Python: 4 threads x 10
calls of callback(), each burning about 25 ms of CPU in Python."""
import json
import sys
import time

sys.path.insert(0, sys.argv[1])
import gilcall  # noqa: E402  (built by the test)

spent = []


def callback(index):
    t0 = time.thread_time()
    x = 0
    while time.thread_time() - t0 < 0.025:  # callback-line
        x += 1
    spent.append(time.thread_time() - t0)


gilcall.run_in_threads(callback, 4, 10)
with open(sys.argv[2], "w") as f:
    json.dump({"callback_cpu_s": sum(spent), "calls": len(spent)}, f)
print("ok", len(spent))
