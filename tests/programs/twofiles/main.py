"""A program whose hot lines are in two files: its own and a helper
module's (the reports' list of the hottest lines, of every file).  Each
hot line runs 0.1 s or more, some 10 samples at the default 10 ms: a
line with none is not in the profile (1.5 million rounds of the main
line, some 4 samples on 3.14, got none in one run of seven)."""
from helper import build, crunch


def main():
    a = crunch(4_000_000)
    total = 0
    for k in range(6_000_000):
        total += k % 3  # main-line
    rows = build(200_000)
    print(a, total, len(rows))


main()
