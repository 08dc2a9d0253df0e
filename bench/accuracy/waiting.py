"""Waiting of two kinds on one CPU: a line that runs Python while a thread
hashing without the GIL shares its CPU (runnable, but often without the
CPU: preempted), then a line that sleeps (blocked).  Every thread of the
program is pinned to one CPU, so that the two compete for it on any
machine (a profiler's threads started before are not).  Truth: each
line's wall time (perf_counter) and its thread's CPU time (thread_time)
around it; the rest of the running line's time is preemption (and the
moments it waits for the GIL, which the hashing thread takes between
calls), the rest of the sleeping line's is blocking."""
import hashlib
import os
import threading
import time

import _truth

cpu = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpu})  # this thread, and the threads it starts
stop = threading.Event()
block = b"x" * (32 << 20)  # one hash: tens of ms without the GIL


def hog():
    while not stop.is_set():
        hashlib.sha256(block).digest()


def burn(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:  # @burn
        n += 1
    return n


def main():
    t = threading.Thread(target=hog)
    t.start()
    time.sleep(0.05)
    truth = {}
    w0, c0 = time.perf_counter(), time.thread_time()
    burn(2.0)
    truth["burn"] = {"wall_s": time.perf_counter() - w0, "cpu_s": time.thread_time() - c0}
    stop.set()
    t.join()
    w0, c0 = time.perf_counter(), time.thread_time()
    time.sleep(1.0)  # @sleep
    truth["sleep"] = {"wall_s": time.perf_counter() - w0, "cpu_s": time.thread_time() - c0}
    _truth.write(lines=truth)


main()
