"""Forks N children (default 300; each leaves at once with os._exit) from T
threads at once (default 1): the cost calipers adds to a fork (its threads
stop and start around each one; each child is profiled and merged).
Prints the milliseconds per fork, then the CPU milliseconds per fork used
by the parent (all its threads) and by each child (bench/fork_cost.py
reads both lines)."""
import os
import sys
import threading
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
T = int(sys.argv[2]) if len(sys.argv) > 2 else 1
child_cpu = []


def fork_some(n):
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        _, _, usage = os.wait4(pid, 0)
        child_cpu.append(usage.ru_utime + usage.ru_stime)


c0 = os.times()
t0 = time.perf_counter()
if T == 1:
    fork_some(N)
else:
    threads = [threading.Thread(target=fork_some, args=(N // T,)) for _ in range(T)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
wall = time.perf_counter() - t0
c1 = os.times()
print("%.3f ms per fork" % (wall / N * 1e3))
print("%.3f ms CPU per fork in the parent, %.3f ms in each child"
      % ((c1.user + c1.system - c0.user - c0.system) / N * 1e3, sum(child_cpu) / N * 1e3))
