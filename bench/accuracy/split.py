"""Python vs native time: a pure-Python loop, NumPy sorts (native code
called from one line), and a loop that mixes both in measured proportions.
Truth: each function's CPU time and its native share (0 for the Python loop,
1 for the sorts, measured around each native call for the mixed loop)."""
import time

import numpy as np

import _truth


def python_part(n):
    total = 0
    for i in range(n):
        total += i * i % 7  # @python
    return total


def native_part(a, reps):
    for _ in range(reps):
        np.sort(a, kind="heapsort")  # @native


def mixed(a, reps, n):
    native = 0.0
    for _ in range(reps):
        t = time.thread_time()
        np.sort(a, kind="heapsort")  # @mixed_native
        native += time.thread_time() - t
        total = 0
        for i in range(n):
            total += i * i % 7  # @mixed_python
    return native


def main():
    a = np.random.default_rng(1).random(400_000)
    cpu = {}
    t = time.thread_time()
    python_part(15_000_000)
    cpu["python_part"] = time.thread_time() - t
    t = time.thread_time()
    native_part(a, 60)
    cpu["native_part"] = time.thread_time() - t
    t = time.thread_time()
    native = mixed(a, 50, 300_000)
    cpu["mixed"] = time.thread_time() - t
    _truth.write(cpu_s=cpu, native_share={"python_part": 0.0, "native_part": 1.0,
                                          "mixed": native / cpu["mixed"]})


main()
