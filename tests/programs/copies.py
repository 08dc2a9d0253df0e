"""Copy volume: lines that copy big buffers in a loop, timed by the program
(argv[1] gets {marker: [bytes copied, seconds]}), and a line that copies
nothing."""
import json
import sys
import time

import numpy as np

src = bytearray(32 << 20)
arr = np.ones(4 << 20)
out = {}

t0 = time.perf_counter()
for _ in range(30):
    c = bytes(src)  # copy-bytes
out["copy-bytes"] = [30 * len(src), time.perf_counter() - t0]

t0 = time.perf_counter()
for _ in range(30):
    d = np.array(arr)  # copy-numpy
out["copy-numpy"] = [30 * arr.nbytes, time.perf_counter() - t0]

total = 0
for i in range(3_000_000):
    total += i * i  # no-copy
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
