"""Heap scan cost: calipers.heap.scan() on a heap of N objects, and the
peers on the same heap when they are importable (guppy3, pympler,
objgraph: install them into a throwaway venv, never into the package).

    python bench/heap_scan.py [N ...]      (default 1000000)

Prints, per N: objects scanned, walk and analysis seconds, scanner memory
(bytes per object, from the engine's own accounting), and each peer's
time and its count of the benchmark's own type (the totals compared).
"""
import gc
import sys
import time


class Item:
    def __init__(self, i):
        self.key = "k%d" % i
        self.vals = [i, i + 1]


def build(n):
    # About n objects: per Item, the instance, its str, its list (ints
    # below 257 are shared; the rest are objects too).
    items = [Item(i) for i in range(n // 4)]
    for k in range(0, len(items) - 1, 2):
        items[k].next = items[k + 1]  # some sharing, some cycles
        items[k + 1].prev = items[k]
    return {"items": items, "table": {i: str(i) for i in range(n // 8)}}


def peers(name):
    out = {}
    try:
        import guppy
        t = time.perf_counter()
        h = guppy.hpy().heap()
        out["guppy3 hpy().heap()"] = (time.perf_counter() - t,
                                      sum(r.count for r in h.bytype if r.kind.arg is Item))
    except ImportError:
        pass
    try:
        from pympler import muppy, summary
        t = time.perf_counter()
        objs = muppy.get_objects()
        rows = summary.summarize(objs)
        out["pympler muppy+summary"] = (time.perf_counter() - t,
                                        sum(r[1] for r in rows if r[0].endswith(".Item")))
        del objs, rows
    except ImportError:
        pass
    try:
        import objgraph
        t = time.perf_counter()
        counts = objgraph.typestats()
        out["objgraph typestats"] = (time.perf_counter() - t, counts.get("Item", 0))
    except ImportError:
        pass
    return out


def main():
    from calipers import heap
    sizes = [int(a) for a in sys.argv[1:]] or [1000000]
    for n in sizes:
        data = build(n)
        gc.collect()
        t = time.perf_counter()
        h = heap.scan()
        total = time.perf_counter() - t
        i = h.info
        items = {s.type: s for s in h.by_type()}.get(__name__ + ".Item")
        print("N=%d: %d objects, %d edges; scan %.3f s (walk %.3f, dominators %.3f); "
              "scanner memory %.1f B/object (peak %.1f); Item count %d" % (
                  n, i["nodes"], i["edges"], total, i["walk_seconds"],
                  i["analysis_seconds"], i["bytes"] / i["nodes"],
                  i["peak_bytes"] / i["nodes"], items.count if items else 0))
        del h
        for peer, (secs, count) in peers(Item).items():
            print("    %-24s %.3f s (%.1fx ours); Item count %d" % (peer, secs, secs / total,
                                                                   count))
        del data


if __name__ == "__main__":
    main()
