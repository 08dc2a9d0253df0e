"""Seed paper 000, section 6.3: one 512 MiB allocation (a NumPy array or a
bytearray) of which a fraction is touched; the profiler must report 512 MiB
whatever was touched (RSS-based tools do not).
argv: numpy|bytearray fraction"""
import sys

import numpy as np

SIZE = 512 << 20
kind, fraction = sys.argv[1], float(sys.argv[2])


def allocate():
    if kind == "numpy":
        return np.empty(SIZE, dtype=np.uint8)  # big-numpy
    return bytearray(SIZE)  # big-bytearray


buf = allocate()
view = np.frombuffer(buf, dtype=np.uint8) if kind == "bytearray" else buf
view[: int(SIZE * fraction)] = 1
del view, buf
