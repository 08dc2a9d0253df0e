"""Threads allocating in parallel, each on its own line, what each keeps
measured by the program itself (sys.getsizeof of every object kept).
Usage: parallel_alloc.py TRUTH"""
import json
import sys
import threading

truth_path = sys.argv[1]
kept = {}


def blobs():
    out = [bytearray(4000) for _ in range(5000)]  # blobs-line
    kept["blobs"] = (out, sum(sys.getsizeof(b) for b in out) + sys.getsizeof(out))


def rows():
    out = [[i] * 50 for i in range(40000)]  # rows-line
    kept["rows"] = (out, sum(sys.getsizeof(r) for r in out) + sys.getsizeof(out))


threads = [threading.Thread(target=f) for f in (blobs, rows)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(truth_path, "w") as f:
    json.dump({k: v[1] for k, v in kept.items()}, f)
