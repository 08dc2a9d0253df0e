"""NumPy work that runs in native threads NumPy's BLAS starts itself (they
never enter Python).  Writes the process's CPU time, all threads included,
as measured by the program: the profile must account for it."""
import json
import sys
import time

import numpy as np

t0 = time.process_time()  # start-line
a = np.random.rand(1200, 1200)
for _ in range(5):
    b = a @ a  # matmul-line
s = np.sort(np.random.rand(3_000_000))  # sort-line
with open(sys.argv[1], "w") as f:
    json.dump({"process_cpu": time.process_time() - t0}, f)
