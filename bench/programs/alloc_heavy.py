"""Allocation-heavy: each loop builds ~25 MB of records (dicts, strings,
tuples, lists), indexes, sorts and serialises them, copies a buffer, and
keeps the last WINDOW loops' results alive, so the footprint climbs to a
plateau of a few hundred MB and then churns.

    python alloc_heavy.py LOOPS        (LOOPS=0: run for ever)
"""
import sys

WINDOW = 8
RECORDS = 40_000


def build(seed):
    rows = []
    for i in range(RECORDS):
        k = (i * 7919 + seed) % 100_003
        rows.append({"id": k, "name": "user-%d" % k, "tags": ["t%d" % (k % 13), "g%d" % (k % 7)],
                     "score": k * 0.5, "pos": (k % 640, k % 480)})
    return rows


def index(rows):
    by_tag = {}
    for r in rows:
        for t in r["tags"]:
            by_tag.setdefault(t, []).append(r["id"])
    return by_tag


def serialise(rows):
    text = "\n".join("%(id)d,%(name)s,%(score).1f" % r for r in rows)
    blob = bytearray(text.encode())
    return bytes(blob)  # one copy


def main(loops):
    kept = []
    total = 0
    n = 0
    while loops == 0 or n < loops:
        rows = build(n)
        rows.sort(key=lambda r: r["score"])
        idx = index(rows)
        blob = serialise(rows)
        total += len(blob) + len(idx)
        kept.append((rows, blob))
        if len(kept) > WINDOW:
            del kept[0]
        n += 1
    print(total)


if __name__ == "__main__":
    main(int(sys.argv[1]))
