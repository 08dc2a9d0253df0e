"""Native calls of ten to forty microseconds, too short for a profiler
that tells native from Python time by how late a thread answers: a
SHA-256 of SCALE x 16 KiB, a regular expression search that fails on a
SCALE x 200-character string and a square root to SCALE x 150 digits
(`decimal`), each followed by a few microseconds of bytecode, all in the
body of `work` (SCALE is BENCH_SCALE, default 1: calls of about 10 us).
Truth: `baseline`, the same body run on empty inputs (the same bytecode
and the same calls into C, next to no C work), in turns with `work` and
as many rounds: the C work's time is the difference of their CPU times,
and work's native share that over work's CPU time."""
import hashlib
import os
import re
import time
from decimal import Decimal, localcontext

import _truth

SCALE = int(os.environ.get("BENCH_SCALE", "1"))
SECONDS = 2.5
BLOB = bytes(range(256)) * 64 * SCALE
PATTERN = re.compile(r"[a-z]+\d{3}x")
TEXT = "abcde12 " * 25 * SCALE


def work(rounds, blob, text, value, ctx, k):
    for _ in range(rounds):
        hashlib.sha256(blob).digest()  # @hash
        total = 0
        for i in range(k):
            total += i * i % 7  # @python
        PATTERN.search(text)  # @search
        for i in range(k):
            total += i * i % 7
        ctx.sqrt(value)  # @sqrt
        for i in range(k):
            total += i * i % 7


def baseline(rounds, blob, text, value, ctx, k):
    for _ in range(rounds):
        hashlib.sha256(blob).digest()
        total = 0
        for i in range(k):
            total += i * i % 7
        PATTERN.search(text)
        for i in range(k):
            total += i * i % 7
        ctx.sqrt(value)
        for i in range(k):
            total += i * i % 7


def main():
    spent = empty = 0.0
    rounds = 0
    with localcontext() as ctx:
        ctx.prec = 150 * SCALE
        two, zero = Decimal(2), Decimal(0)
        while spent < SECONDS:
            t0 = time.thread_time()
            work(20, BLOB, TEXT, two, ctx, 200 * SCALE)
            t1 = time.thread_time()
            baseline(20, b"", "", zero, ctx, 200 * SCALE)
            spent += t1 - t0
            empty += time.thread_time() - t1
            rounds += 20
    _truth.write(cpu_s={"work": spent, "baseline": empty},
                 native_share={"work": max(0.0, spent - empty) / spent},
                 call_us=max(0.0, spent - empty) / rounds / 3 * 1e6)


main()
