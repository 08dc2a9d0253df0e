"""For tests/test_diff.py: run twice, once plain and once with --more,
which makes the line marked WORK do 5 times the work and the line marked
BLOB allocate (and keep to the end) 20 MB more."""
import sys
from itertools import repeat

more = "--more" in sys.argv


def work(n):
    return sum(1 for _ in repeat(None, n))  # WORK: allocates nothing per item


def steady():
    return sum(1 for _ in repeat(None, 2_000_000))  # STEADY


for _ in range(4):
    work(15_000_000 if more else 3_000_000)
    steady()
blob = bytearray(21_000_000 if more else 1_000_000)  # BLOB
