"""Ground truth for native-to-Python transitions in the main thread: one
function alternating a native call (an in-place NumPy heapsort, ~3 ms, that
keeps the GIL and makes no system calls) with about as much bytecode.  The
program times the native calls with its own CPU clock and writes
{"native_share": native CPU / the function's CPU} as JSON to argv[1]."""
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


values = np.random.default_rng(1).random(80_000)
t0 = time.thread_time()
native = alternate(values, 400, 50_000)
spent = time.thread_time() - t0
with open(sys.argv[1], "w") as f:
    json.dump({"native_share": native / spent}, f)
