"""Lines that hold known live bytes, Python and native, many small blocks
and few large ones, for the snapshot accuracy test (tests/test_snapshots.py).

    python live_lines.py OUT.json [--tracemalloc] [--grow]

Takes a snapshot once everything is allocated and writes, per line of this
file, the bytes it holds, its callees' included, (and their standard error) as
calipers.memory (under `calipers run`) or the standard library's tracemalloc
(--tracemalloc: exact, the ground truth) reports them.  --grow: the line
marked GROWS holds 20 MB more.  Also writes `before` and `after` snapshot
files next to OUT for the compare_to check.
"""
import json
import sys

import numpy as np

exact = "--tracemalloc" in sys.argv
if exact:
    import tracemalloc as memory
else:
    from calipers import memory

out = sys.argv[1]
memory.start(25)


def small_python(n):
    return [bytearray(90) for _ in range(n)]  # many small Python blocks


def small_native(n):
    return [np.ones(120) for _ in range(n)]  # many small native blocks


keep = []
keep.append(bytes(300 << 20))  # one large Python block
keep.append([np.ones(1 << 20) for _ in range(12)])  # a few large native blocks
keep.append(small_python(300_000))
keep.append(small_native(60_000))
keep.append(["%50d" % i for i in range(150_000)])  # many small str
keep.append(bytes(6 << 20))  # a line near 1%
before = memory.take_snapshot()
keep.append(bytearray((20 << 20) if "--grow" in sys.argv else 0))  # GROWS
after = memory.take_snapshot()
me = __file__


def by_line(snapshot):
    """Bytes per line of this file, counting what the line's callees
    allocated (numpy's Python code makes the arrays), each trace once per
    line: tracemalloc's cumulative statistics count a line once per frame,
    twice for a comprehension's line before 3.12 (its own frame), so the
    truth is summed here from its traces."""
    lines = {}
    if exact:
        for trace in snapshot.traces:
            for line in {f.lineno for f in trace.traceback if f.filename == me}:
                lines[line] = [lines.get(line, [0])[0] + trace.size, 0]
        return lines
    for stat in snapshot.statistics("lineno", cumulative=True):
        frame = stat.traceback[0]
        if frame.filename == me:
            lines[frame.lineno] = [stat.size, getattr(stat, "size_stderr", 0)]
    return lines


before.dump(out + ".before")
after.dump(out + ".after")
with open(out, "w") as f:
    json.dump({"lines": by_line(after), "traced": memory.get_traced_memory()}, f)
