"""Seed 000 section 6.2: function bias.  The same work done by a loop that
calls a helper and by a loop with the helper inlined; argv[2] is the share of
time the calling variant should get.  Writes the CPU seconds each variant
took (its own CPU clock, as the profiler counts) as JSON to argv[1]."""
import json
import sys
import time

TOTAL = 2.4


def helper(x):
    return x * 3 % 7


def with_call(n):
    total = 0
    for i in range(n):
        total += helper(i)
    return total


def inlined(n):
    total = 0
    for i in range(n):
        total += i * 3 % 7
    return total


share = float(sys.argv[2])
spent = {"with_call": 0.0, "inlined": 0.0}
targets = {"with_call": TOTAL * share, "inlined": TOTAL * (1 - share)}
# Interleave the variants so that neither is favoured by warm-up.
while any(spent[k] < targets[k] for k in spent):
    for name, fn in (("with_call", with_call), ("inlined", inlined)):
        if spent[name] < targets[name]:
            t0 = time.thread_time()
            fn(20_000)
            spent[name] += time.thread_time() - t0
with open(sys.argv[1], "w") as f:
    json.dump(spent, f)
