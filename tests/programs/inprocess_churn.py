"""Redirection on and off while other threads allocate: native pthreads
(tests/programs/churn.c, argv[1]) malloc, realloc, memcpy and free in a
loop, started from Python threads, while the main thread starts and stops
calipers.profile() (no preload) over and over, forking once while
profiled.  Every block crosses some stop() or start() in another thread.
argv[2]: where the profiles go.  Prints "ok" when everything ran."""
import ctypes
import os
import sys
import threading
import warnings

warnings.simplefilter("ignore", DeprecationWarning)  # the fork with threads is the point

import calipers

lib = ctypes.CDLL(sys.argv[1])
lib.churn_in_threads.restype = ctypes.c_long
done = threading.Event()
failures = []


def churn():
    while not done.is_set():
        got = lib.churn_in_threads(2, 2000)  # releases the GIL
        if got != 4000:
            failures.append(got)


workers = [threading.Thread(target=churn) for _ in range(2)]
for w in workers:
    w.start()
kept = []
for i in range(20):
    with calipers.profile(os.path.join(sys.argv[2], "p%d.json" % i)):
        kept.append([bytearray(10_000) for _ in range(100)])
        if i == 10:
            pid = os.fork()
            if pid == 0:
                os._exit(0 if lib.churn_in_threads(2, 500) == 1000 else 3)
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    del kept[0:len(kept) // 2]  # blocks made while profiled, freed after
done.set()
for w in workers:
    w.join()
assert not failures, failures
print("ok")
