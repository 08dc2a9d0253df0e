"""A loop that appends to a global list at one line (a leak) and churns at
another; with argv[1] == "clean" only the churn.  Runs ~1 s."""
import sys

leak = []
clean = sys.argv[1] == "clean"


def step():
    if not clean:
        leak.append(bytearray(4000))  # leak-line
    scratch = bytearray(40000)  # churn-line
    scratch[0] = 1


for _ in range(30_000):
    step()
