"""Allocation volume per line: large buffers (1 MiB bytearrays), NumPy
arrays, and many small Python objects (which go through pymalloc), each
allocated and freed at once.  Truth: count times sys.getsizeof of what the
line makes (the allocator's own rounding aside, what the program asked for)."""
import sys

import numpy as np

import _truth


def main():
    n_big, n_np, n_small = 1000, 500, 3_000_000
    for _ in range(n_big):
        b = bytearray(1 << 20)  # @bytearrays
    for _ in range(n_np):
        a = np.ones(1 << 17)  # @numpy
    for i in range(n_small):
        s = b"x" * (100 + i % 2)  # @small
    del b, a, s
    _truth.write(bytes={
        "bytearrays": n_big * sys.getsizeof(bytearray(1 << 20)),
        "numpy": n_np * (1 << 20),
        "small": sum(sys.getsizeof(b"x" * (100 + i % 2)) for i in range(2)) * n_small // 2,
    })


main()
