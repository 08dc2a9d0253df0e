"""The helper module of twofiles/main.py: one busy line, one allocating."""


def crunch(n):
    t = 0
    for i in range(n):
        t += i * i % 7  # crunch-line
    return t


def build(n):
    return [str(i) * 4 for i in range(n)]  # build-line
