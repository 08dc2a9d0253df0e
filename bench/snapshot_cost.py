"""What a snapshot costs with one million live objects: the time to take
it, how many traces it holds, the time of statistics("lineno"), and the
size of its file, for calipers.memory and for tracemalloc.

    calipers run [--memory-interval 1] bench/snapshot_cost.py calipers N OUT.json
    python bench/snapshot_cost.py tracemalloc N OUT.json

(bench/run.py --suite tracing runs it in each configuration.)
"""
import json
import os
import sys
import tempfile
import time

which, nframe, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if which == "tracemalloc":
    import tracemalloc as memory
else:
    import calipers.memory as memory

memory.start(nframe)


def build(n):
    return [(i, str(i)) for i in range(n)]  # a tuple and a str each: 2M objects


keep = build(1_000_000)
t0 = time.perf_counter()
snapshot = memory.take_snapshot()
t1 = time.perf_counter()
stats = snapshot.statistics("lineno")
t2 = time.perf_counter()
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "s")
    snapshot.dump(path)
    t3 = time.perf_counter()
    size = os.path.getsize(path)
top = stats[0]
with open(out, "w") as f:
    json.dump({"take_s": t1 - t0, "statistics_s": t2 - t1, "dump_s": t3 - t2,
               "traces": len(snapshot.traces), "file_bytes": size,
               "top_bytes": top.size, "top_line": top.traceback[0].lineno}, f)
