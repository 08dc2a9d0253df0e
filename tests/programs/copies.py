"""Copy volume: lines that copy big buffers in a loop, timed by the program
(argv[1] gets {marker: [bytes copied, seconds]}), and a line that copies
nothing.

The line's time is compared with the loop's wall time, so no other thread
may use CPU meanwhile: the report credits a C thread's CPU to the main
thread's line.  NumPy's OpenBLAS starts a thread per core at import that
spins for a while (some 0.1 s of CPU here), and on 3.14t, where each loop
lasted 0.07 s, its spin was up to 0.03 s of one (CI read that line's MB/s
0.69 of the truth): one BLAS thread, then, which starts none.  Each
copying line runs 90 times, 0.2 s or more, so that the samples
straddling a loop's start and end move under a tenth of its time."""
import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # before NumPy loads OpenBLAS

import json
import sys
import time

import numpy as np

src = bytearray(32 << 20)
arr = np.ones(4 << 20)
out = {}
ROUNDS = 90

t0 = time.perf_counter()
for _ in range(ROUNDS):
    c = bytes(src)  # copy-bytes
out["copy-bytes"] = [ROUNDS * len(src), time.perf_counter() - t0]

t0 = time.perf_counter()
for _ in range(ROUNDS):
    d = np.array(arr)  # copy-numpy
out["copy-numpy"] = [ROUNDS * arr.nbytes, time.perf_counter() - t0]

total = 0
for i in range(3_000_000):
    total += i * i  # no-copy
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
