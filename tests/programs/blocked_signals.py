"""A worker thread that blocks every signal (as some servers' workers do)
and burns pure-Python CPU for a known time, next to one that does not.
Writes each thread's CPU (time.thread_time).  Usage: blocked_signals.py TRUTH"""
import json
import signal
import sys
import threading
import time

cpu = {}


def spin(secs):
    t0 = time.thread_time()
    x = 0
    while time.thread_time() - t0 < secs:
        for i in range(2000):
            x += i
    return x


def blocked():
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    spin(0.5)
    cpu["blocked"] = time.thread_time()


def open_():
    spin(0.5)
    cpu["open_"] = time.thread_time()


threads = [threading.Thread(target=f, name=f.__name__) for f in (blocked, open_)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(sys.argv[1], "w") as f:
    json.dump(cpu, f)
