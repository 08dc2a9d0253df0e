"""Allocation volumes with a known truth: the program allocates exactly
what it reports (argv[1] gets {marker: bytes} as JSON)."""
import json
import sys

import numpy as np

N_OBJ = 6_000_000
objs = [None] * N_OBJ
for i in range(N_OBJ):
    objs[i] = object()  # small-objects
del objs

N_ARR, ARR = 60, 1 << 20
for _ in range(N_ARR):
    a = np.empty(ARR)  # numpy-arrays
del a

N_BYTES, BYTES = 20_000, 10_000
for _ in range(N_BYTES):
    b = bytes(BYTES)  # bytes-objects

truth = {
    "small-objects": N_OBJ * object().__sizeof__(),
    "numpy-arrays": N_ARR * ARR * 8,
    "bytes-objects": N_BYTES * sys.getsizeof(bytes(BYTES)),
}
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
