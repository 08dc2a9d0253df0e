"""Ground truth for native-to-Python transitions in the main thread: one
function alternating a native call (an in-place NumPy heapsort, that keeps
the GIL and makes no system calls) with about as much bytecode.  The array's
size is chosen so that a sort takes ~3 ms: NumPy 2.0 sorts 80,000 floats
in 5 ms, 2.5 in 0.7 ms, and at 0.7 ms the native line's own Python part
(the call, and the ticks served in a call's last microseconds) came close
to the 10% its test allows.  The program times the native calls with its
own CPU clock and writes {"native_share": native CPU / the function's CPU}
as JSON to argv[1]."""
import json
import sys
import time

import numpy as np


def alternate(values, rounds, loop):
    native = 0.0
    for _ in range(rounds):
        t0 = time.thread_time()
        values.sort(kind="heapsort")  # native-line
        native += time.thread_time() - t0
        total = 0
        for i in range(loop):
            total += i * i % 7  # python-line
    return native


def sort_time(n):
    values = np.random.default_rng(1).random(n)
    values.sort(kind="heapsort")
    t0 = time.thread_time()
    for _ in range(5):
        values.sort(kind="heapsort")
    return (time.thread_time() - t0) / 5


size = max(10_000, int(80_000 * 0.003 / max(sort_time(80_000), 1e-5)))
values = np.random.default_rng(1).random(size)
t0 = time.thread_time()
native = alternate(values, 400, 50_000)
spent = time.thread_time() - t0
with open(sys.argv[1], "w") as f:
    json.dump({"native_share": native / spent}, f)
