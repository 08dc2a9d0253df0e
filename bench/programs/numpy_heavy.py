"""NumPy-heavy: array arithmetic, reductions, a matrix product, sorting and
copies on arrays of a few MB to tens of MB, allocated and freed each loop.

    python numpy_heavy.py LOOPS
"""
import sys

import numpy as np


def step(rng):
    a = rng.standard_normal((1000, 1000))
    b = a @ a.T
    c = np.sort(b, axis=1)
    d = np.cumsum(c, axis=0) * 0.5 + np.sqrt(np.abs(a))
    e = d.copy()
    e[e < 0] = 0
    s = np.concatenate([e.ravel(), a.ravel()])
    return float(s.mean() + e.std())


def main(loops):
    rng = np.random.default_rng(1)
    total = 0.0
    for _ in range(loops):
        total += step(rng)
    print(round(total, 3))


if __name__ == "__main__":
    main(int(sys.argv[1]))
