"""Waiting of two kinds on one CPU: a line that burns Python while a
thread hashing without the GIL shares its CPU (the line is runnable but
often has no CPU: preempted), and a line that sleeps (blocked).  Every
thread of the program is pinned to one CPU so that the two compete for it
whatever the machine; the profiler's own threads are not (they were made
before).

Writes to argv[1] the truth it measures itself: for each line, its wall
time, its thread CPU time (time.thread_time) and the waiting between them,
{"burn": {"line", "wall_s", "cpu_s"}, "sleep": {...}}.  The burn line's
waiting is preemption (and the short moments it waits for the GIL, which
the hashing thread takes between calls); the sleep line's is blocking."""

import hashlib
import json
import os
import sys
import threading
import time

cpu = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpu})  # this thread, and the threads it starts
stop = threading.Event()
block = b"x" * (32 << 20)  # one hash call: tens of ms without the GIL


def hog():
    while not stop.is_set():
        hashlib.sha256(block).digest()


def burn(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:  # burn-line
        n += 1
    return n


t = threading.Thread(target=hog)
t.start()
time.sleep(0.05)
truth = {}
w0, c0 = time.perf_counter(), time.thread_time()
burn(1.5)
truth["burn"] = {"wall_s": time.perf_counter() - w0, "cpu_s": time.thread_time() - c0}
stop.set()
t.join()
w0, c0 = time.perf_counter(), time.thread_time()
time.sleep(0.6)  # sleep-line
truth["sleep"] = {"wall_s": time.perf_counter() - w0, "cpu_s": time.thread_time() - c0}
source = open(__file__).read().splitlines()
for key, marker in (("burn", "# burn-line"), ("sleep", "# sleep-line")):
    truth[key]["line"] = next(i + 1 for i, s in enumerate(source) if s.endswith(marker))
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
