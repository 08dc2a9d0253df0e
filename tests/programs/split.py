"""Ground truth for the Python/native split: a pure-Python loop and three
native-heavy lines (hashlib and zlib release the GIL, sorted() keeps it).
Each phase runs until it has taken its target CPU time; the program
measures every phase with its own CPU clock (the profiler's currency: wall
time would count the moments another process had the CPU) and writes
{marker: seconds} as JSON to argv[1]."""
import hashlib
import json
import random
import sys
import time
import zlib

TARGETS = {"py": 0.8, "hash": 0.5, "zlib": 0.4, "sort": 0.4}
spent = dict.fromkeys(TARGETS, 0.0)


def python_loop():
    total = 0
    for i in range(200_000):
        total += i * i % 7  # py-line
    return total


def hash_buffer(data):
    hashlib.sha256(data).digest()  # hash-line


def compress(data):
    zlib.compress(data, 6)  # zlib-line


def sort_values(values):
    return sorted(values)  # sort-line


def phase(name, fn, *args):
    while spent[name] < TARGETS[name]:
        t0 = time.thread_time()
        fn(*args)
        spent[name] += time.thread_time() - t0


rng = random.Random(1)
blob = bytes(rng.getrandbits(8) for _ in range(1 << 16)) * 64
values = [rng.random() for _ in range(400_000)]
phase("py", python_loop)
phase("hash", hash_buffer, blob)
phase("zlib", compress, blob[: 512 << 10])
phase("sort", sort_values, values)
with open(sys.argv[1], "w") as f:
    json.dump(spent, f)
