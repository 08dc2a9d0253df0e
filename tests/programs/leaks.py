"""A loop that appends to a global list at one line (a leak) and churns at
another; with argv[1] == "clean" only the churn; with "kept", 120 MB built
at the start and kept to the end (data, not a leak), then only the churn,
for ten times longer than the building took."""
import sys

leak = []
clean = sys.argv[1] in ("clean", "kept")
if sys.argv[1] == "kept":
    kept = [bytearray(4000) for _ in range(30_000)]  # kept-line


def step():
    if not clean:
        leak.append(bytearray(4000))  # leak-line
    scratch = bytearray(40000)  # churn-line
    scratch[0] = 1


for _ in range(300_000 if sys.argv[1] == "kept" else 30_000):
    step()
