"""Function bias (seed 000, section 6.2): two functions doing the same work,
one through a helper called in its loop, one with the helper inlined.
BENCH_SHARE (default 0.5) is the intended share of time in the one that
calls; the truth is what perf_counter measured around each call."""
import os
import time

import _truth


def helper(x):
    return x * 3 + 1


def with_call(n):
    s = 0
    for i in range(n):
        s += helper(i)
    return s


def inlined(n):
    s = 0
    for i in range(n):
        s += i * 3 + 1
    return s


spent = {"with_call": 0.0, "inlined": 0.0}


def timed(f, n):
    t = time.perf_counter()
    f(n)
    spent[f.__name__] += time.perf_counter() - t


def rate(f):
    """Iterations per second of f (the time counts too: a profiler sees it)."""
    before = spent[f.__name__]
    timed(f, 200_000)
    return 200_000 / (spent[f.__name__] - before)


def main():
    share = float(os.environ.get("BENCH_SHARE", "0.5"))
    seconds, rounds = 2.5, 25
    n_call = int(rate(with_call) * seconds * share / rounds)
    n_inline = int(rate(inlined) * seconds * (1 - share) / rounds)
    for _ in range(rounds):
        timed(with_call, n_call)
        timed(inlined, n_inline)
    _truth.write(seconds=spent, callees={"with_call": ["helper"]})


main()
