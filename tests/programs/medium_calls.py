"""Ground truth for native calls of ten to thirty microseconds in the main
thread, too short for a threshold on how late it answers a tick: a
SHA-256 of SCALE x 16 KiB, a regular expression search that fails on a
SCALE x 200-character string, and a square root to SCALE x 150 digits,
each followed by a few microseconds of bytecode (SCALE is argv[3],
default 1: 8-10 us calls here).  `work` runs them until it has used
argv[2] seconds of CPU (default 3), in turns with `baseline`, which runs
as many rounds of the same calls on empty inputs (the same bytecode and
the same calls into C, next to no C work): the C work's time is the
difference, measured interleaved with the bytecode as the profiled run
has it.
Writes {"native_share": that / work's CPU, "per_call_us": ...} as JSON
to argv[1]."""
import hashlib
import json
import re
import sys
import time
from decimal import Decimal, localcontext

SCALE = int(sys.argv[3]) if len(sys.argv) > 3 else 1
BLOB = bytes(range(256)) * 64 * SCALE
PATTERN = re.compile(r"[a-z]+\d{3}x")
TEXT = "abcde12 " * 25 * SCALE
TWO = Decimal(2)


def c_hash(data):
    hashlib.sha256(data).digest()  # hash-line


def c_search(text):
    PATTERN.search(text)  # re-line


def c_sqrt(value, ctx):
    ctx.sqrt(value)  # sqrt-line


def bytecode(k):
    total = 0
    for i in range(k):
        total += i * i % 7  # python-line
    return total


def work(rounds, blob, text, value, ctx, k):
    for _ in range(rounds):
        c_hash(blob)
        bytecode(k)
        c_search(text)
        bytecode(k)
        c_sqrt(value, ctx)
        bytecode(k)


# work's body again, under its own name: the profile tells the two apart.
def baseline(rounds, blob, text, value, ctx, k):
    for _ in range(rounds):
        c_hash(blob)
        bytecode(k)
        c_search(text)
        bytecode(k)
        c_sqrt(value, ctx)
        bytecode(k)


seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
with localcontext() as ctx:
    ctx.prec = 150 * SCALE
    rounds = spent = empty = 0
    # In turns, so that both see the same machine and the same profiler.
    while spent < seconds:
        t0 = time.thread_time()
        work(20, BLOB, TEXT, TWO, ctx, 60 * SCALE)
        t1 = time.thread_time()
        baseline(20, b"", "", Decimal(0), ctx, 60 * SCALE)
        spent += t1 - t0
        empty += time.thread_time() - t1
        rounds += 20
with open(sys.argv[1], "w") as f:
    json.dump({"native_share": (spent - empty) / spent,
               "per_call_us": (spent - empty) / rounds / 3 * 1e6}, f)
