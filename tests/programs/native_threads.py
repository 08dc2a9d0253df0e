"""Native code that allocates: a C library (built by the test) whose
pthreads malloc and free without any Python, then os.fork(), then a child
that allocates and exits.  Prints "ok" when everything ran."""
import ctypes
import os
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.churn_in_threads.restype = ctypes.c_long
got = lib.churn_in_threads(4, 20000)
assert got == 4 * 20000, got

data = [bytearray(1000) for _ in range(10000)]
pid = os.fork()
if pid == 0:
    more = [bytearray(1000) for _ in range(10000)]
    got = lib.churn_in_threads(2, 1000)
    os._exit(0 if got == 2000 else 3)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
del data
print("ok")
