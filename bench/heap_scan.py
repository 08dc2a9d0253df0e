"""Heap scan cost, side by side with the peers: calipers.heap.scan() (the
walk and the dominators) against guppy3 (``hpy().heap()``), pympler
(``muppy.get_objects()`` + ``summary.summarize``) and objgraph
(``objgraph.typestats()``), each in a process of its own, on the same heap
built the same way (``build`` below), with the totals by type compared.

    python bench/heap_scan.py [--peers PYTHON] [--out FILE] N [N ...]

The interpreter running this must have calipers installed (the
worktree's venv); the peers run under --peers PYTHON, an interpreter of
the same version with guppy3, pympler and objgraph installed (default:
bench/.venv-heap/bin/python, created with them if missing; never the
package's own environment).  --out writes the results as JSON (bench/run.py
--render puts bench/results/heap.json into docs/PERFORMANCE.md).

Per tool and N: the seconds of the call (``scan()`` for calipers: walk +
dominators + the Heap object), its memory (the peak resident set during
the call less the resident set before it: /proc/self/clear_refs resets the
peak), and its totals of the benchmark's types: what the call sees less
what a first call, before the heap was built, saw (each tool's process
imports different modules; the difference is the built heap as each tool
counts it).  For calipers also the engine's own accounting: bytes per
object kept, and at the peak.
"""
import gc
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = ("calipers", "guppy3", "pympler", "objgraph")
#: The types compared across tools (builtins by name; Item is ours).
TYPES = ("Item", "str", "int", "list", "dict", "tuple", "function", "type")


class Item:
    def __init__(self, i):
        self.key = "k%d" % i
        self.vals = [i + 1000, i + 1001]


def build(n):
    """About n objects: n/6 Items, each an instance, its str, its list and
    two ints (five objects; the attributes are kept inline from 3.11, with
    no __dict__), and a dict of n/12 int -> str (two objects each)."""
    items = [Item(i) for i in range(n // 6)]
    for k in range(0, len(items) - 1, 2):
        items[k].next = items[k + 1]  # some sharing, some cycles
        items[k + 1].prev = items[k]
    return {"items": items, "table": {i + 10**6: str(i) for i in range(n // 12)}}


def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _short(name):
    return name.rsplit(".", 1)[-1] if name.startswith(("__main__.", "heap_scan.")) else name


def run_tool(tool):
    """One call of the tool: (seconds, {type: (count, bytes or None)},
    extra).  The seconds are wall time; extra["cpu"] is the call's CPU time
    (this process's), less disturbed by the machine's other work."""
    c = time.process_time()
    secs, totals, extra = _run_tool(tool)
    extra["cpu"] = time.process_time() - c
    return secs, totals, extra


def _run_tool(tool):
    if tool == "calipers":
        from calipers import heap

        t = time.perf_counter()
        h = heap.scan()
        secs = time.perf_counter() - t
        i = h.info
        totals = {_short(s.type): (s.count, s.size) for s in h.by_type()}
        return secs, totals, {
            "objects": i["nodes"], "edges": i["edges"], "walk_s": i["walk_seconds"],
            "dominators_s": i["analysis_seconds"], "bytes_per_object": i["bytes"] / i["nodes"],
            "peak_bytes_per_object": i["peak_bytes"] / i["nodes"]}
    if tool == "guppy3":
        import guppy

        hp = guppy.hpy()
        t = time.perf_counter()
        h = hp.heap()
        secs = time.perf_counter() - t
        totals = {_short(r.name): (r.count, r.size) for r in h.bytype.stat.get_rows()}
        return secs, totals, {"objects": h.count}
    if tool == "pympler":
        from pympler import muppy, summary

        t = time.perf_counter()
        objs = muppy.get_objects()
        rows = summary.summarize(objs)
        secs = time.perf_counter() - t
        totals = {_short(r[0]): (r[1], r[2]) for r in rows}
        return secs, totals, {"objects": len(objs)}
    import objgraph

    t = time.perf_counter()
    counts = objgraph.typestats()
    secs = time.perf_counter() - t
    return secs, {_short(k): (v, None) for k, v in counts.items()}, {
        "objects": sum(counts.values())}


def measure(tool, n):
    """One tool on a heap of about n objects, in this process: a first
    call on the process as it is (imports, caches: what the tool itself
    brings), then the heap built, then the timed call.  The totals are the
    second call's less the first's: the built heap as the tool sees it."""
    gc.collect()
    _, base, _ = run_tool(tool)
    data = build(n)  # noqa: F841 - kept alive for the scan
    gc.collect()
    gc.disable()  # no collection during a timed call, for any tool
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident set starts again from now
    secs, totals, extra = run_tool(tool)
    peak = _status("VmHWM") - before
    delta = {}
    for t in TYPES:
        now, was = totals.get(t), base.get(t, (0, 0))
        if now:
            delta[t] = (now[0] - was[0], None if now[1] is None else now[1] - was[1])
    return dict(extra, tool=tool, n=n, seconds=secs, memory=peak, totals=delta)


def _peer_python(path):
    if path:
        return path
    venv = os.path.join(HERE, ".venv-heap")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        base = getattr(sys, "_base_executable", None) or sys.executable
        subprocess.run([base, "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "guppy3", "pympler", "objgraph"],
                       check=True)
    return py


def _mb(b):
    return "%.0f MB" % (b / 1e6)


def table(results):
    """The Markdown tables of a list of measure() results."""
    lines = ["| objects | tool | wall | CPU | CPU vs calipers | memory | per object |",
             "|---|---|---|---|---|---|---|"]
    ours = {r["n"]: r for r in results if r["tool"] == "calipers"}
    for r in results:
        o = ours.get(r["n"])
        objs = o["objects"] if o else r["objects"]
        note = ""
        if r["tool"] == "calipers":
            note = " (walk %.2f s, dominators %.2f s)" % (r["walk_s"], r["dominators_s"])
        lines.append("| %.2fM | %s | %.2f s%s | %.2f s | %s | %s | %.0f B |" % (
            objs / 1e6, r["tool"], r["seconds"], note, r["cpu"],
            "%.1fx" % (r["cpu"] / o["cpu"]) if o and r is not o else "",
            _mb(r["memory"]), r["memory"] / objs))
    lines += ["", "The built heap by type (count / bytes, each tool's call after the heap was "
              "built less its call before; objgraph counts only):", "",
              "| objects | type | " + " | ".join(TOOLS) + " |",
              "|---|---|" + "---|" * len(TOOLS)]
    for n in sorted({r["n"] for r in results}):
        by_tool = {r["tool"]: r for r in results if r["n"] == n}
        for t in TYPES:
            cells = []
            for tool in TOOLS:
                v = by_tool.get(tool, {}).get("totals", {}).get(t)
                cells.append("-" if not v else "%d" % v[0] if v[1] is None
                             else "%d / %.1f MB" % (v[0], v[1] / 1e6))
            lines.append("| %.2fM | %s | %s |" % (
                ours[n]["objects"] / 1e6 if n in ours else n / 1e6, t, " | ".join(cells)))
    return "\n".join(lines)


def main(argv):
    if argv[:1] == ["--one"]:
        print(json.dumps(measure(argv[1], int(argv[2]))))
        return
    peers, out, sizes = None, None, []
    while argv:
        a = argv.pop(0)
        if a == "--peers":
            peers = argv.pop(0)
        elif a == "--out":
            out = argv.pop(0)
        else:
            sizes.append(int(a))
    sizes = sizes or [1000000]
    peers = _peer_python(peers)
    results = []
    for n in sizes:
        for tool in TOOLS:
            py = sys.executable if tool == "calipers" else peers
            proc = subprocess.run([py, os.path.abspath(__file__), "--one", tool, str(n)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print("%s, N=%d: failed: %s" % (tool, n, proc.stderr.strip()[-500:]),
                      flush=True)
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            results.append(r)
            print("%s N=%d: %.3f s (CPU %.3f s), %s" % (tool, n, r["seconds"], r["cpu"],
                                                        _mb(r["memory"])), flush=True)
    print(table(results))
    if out:
        with open(out, "w") as f:
            json.dump({"python": "%d.%d.%d" % sys.version_info[:3],
                   "load": os.getloadavg()[0], "cpus": os.cpu_count(),
                       "command": "python bench/heap_scan.py " + " ".join(map(str, sizes)),
                       "results": results}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
