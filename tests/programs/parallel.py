"""N threads burning pure-Python CPU in true parallel (on the free-threaded
build), each in its own function for a known CPU duration, and one thread in
zlib (C that lets go of its thread state).  Writes the truth it measured:
each thread's CPU (time.thread_time), the run's wall time, and whether the
GIL is on.  Usage: parallel.py TRUTH N SECONDS"""
import json
import sys
import threading
import time
import zlib

truth_path, n, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
cpu = {}


def spin(secs):
    t0 = time.thread_time()
    x = 0
    while time.thread_time() - t0 < secs:  # while-line
        for i in range(2000):  # burn-line
            x += i  # burn-body
    return x


def burn0(secs):
    cpu["burn0"] = (time.thread_time(), spin(secs), time.thread_time())


def burn1(secs):
    cpu["burn1"] = (time.thread_time(), spin(secs), time.thread_time())


def burn2(secs):
    cpu["burn2"] = (time.thread_time(), spin(secs), time.thread_time())


def burn3(secs):
    cpu["burn3"] = (time.thread_time(), spin(secs), time.thread_time())


def compress(secs):
    data = bytes(range(256)) * 4096
    t0 = time.thread_time()
    while time.thread_time() - t0 < secs:
        zlib.compress(data, 9)  # zlib-line
    cpu["compress"] = (t0, 0, time.thread_time())


workers = [burn0, burn1, burn2, burn3][:n] + [compress]
threads = [threading.Thread(target=f, args=(secs,), name=f.__name__) for f in workers]
w0 = time.perf_counter()
for t in threads:
    t.start()
for t in threads:
    t.join()
wall = time.perf_counter() - w0
with open(truth_path, "w") as f:
    json.dump({"cpu": {k: v[2] for k, v in cpu.items()}, "wall": wall,
               "gil": sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True}, f)
