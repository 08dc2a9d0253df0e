"""A program whose hot lines are in two files: its own and a helper
module's (the reports' list of the hottest lines, of every file)."""
from helper import build, crunch


def main():
    a = crunch(2_000_000)
    total = 0
    for k in range(1_500_000):
        total += k % 3  # main-line
    rows = build(200_000)
    print(a, total, len(rows))


main()
