"""Ground truth for the Python/native split at fine grain: one loop that
alternates ~10 ms of native work (hashlib, which releases the GIL) and
~10 ms of bytecode, for about 2 s.  The program times each native call with
its own CPU clock and writes {"native": s, "cpu": s} as JSON to argv[1]."""
import hashlib
import json
import sys
import time

blob = bytes(range(256)) * (1 << 12)  # 1 MiB


def calibrate():
    """Hash repetitions and loop iterations that take about 10 ms each."""
    t = time.thread_time()
    hashlib.sha256(blob).digest()
    per_hash = time.thread_time() - t
    t = time.thread_time()
    total = 0
    for i in range(20_000):
        total += i * i % 7
    per_step = (time.thread_time() - t) / 20_000
    return max(1, round(0.010 / max(per_hash, 1e-6))), max(1, round(0.010 / max(per_step, 1e-9)))


def mixed(hashes, steps, seconds):
    native = 0.0
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        t = time.thread_time()
        for _ in range(hashes):
            hashlib.sha256(blob).digest()  # native-line
        native += time.thread_time() - t
        total = 0
        for i in range(steps):
            total += i * i % 7  # python-line
    return native, time.thread_time() - start


native, spent = mixed(*calibrate(), 2.0)
with open(sys.argv[1], "w") as f:
    json.dump({"native": native, "cpu": spent}, f)
