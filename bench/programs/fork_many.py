"""Forks 300 children in a row (each leaves at once): the cost calipers
adds to a fork (its threads stop and start around each one; each child is
profiled and merged).  Prints the seconds per fork."""
import os
import time

N = 300
t0 = time.perf_counter()
for _ in range(N):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
print("%.3f ms per fork" % ((time.perf_counter() - t0) / N * 1e3))
