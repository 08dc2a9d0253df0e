"""Whole stacks: the profile's stack table (docs/FORMAT.md, "stacks").

Real programs under calipers; the tree is checked against the program's
own call structure, against the function table written from the same
samples, and against what the program measured of itself."""

import json
import subprocess
import textwrap
from pathlib import Path

import calipers
import pytest
from conftest import TRUTH, cpu, line_of

PROGRAM = """
import json, sys, threading, time

def leaf(seconds):
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        pass

def deep():
    leaf(0.45)  # three times as much from here ...

def shallow():
    leaf(0.15)  # ... as from here

def work():
    for _ in range(2):
        deep()
        shallow()

t = threading.Thread(target=work, name="worker")
t.start()
work()
t.join()
"""


class Tree:
    """The stack table of a profile, with inclusive figures."""

    def __init__(self, profile):
        self.profile = profile
        st = profile["stacks"]
        self.frames = st["frames"]
        self.fields = st["node_fields"]
        self.nodes = [dict(zip(self.fields, n)) for n in st["nodes"]]
        self.kids = {}
        for i, n in enumerate(self.nodes):
            self.kids.setdefault(n["parent"], []).append(i)

    def self_time(self, i):
        n = self.nodes[i]
        return n["python_s"] + n["native_s"] + n["system_s"] + n["waiting_s"]

    def self_cpu(self, i):
        n = self.nodes[i]
        return n["python_s"] + n["native_s"] + n["system_s"]

    def inclusive(self, i):
        return self.self_time(i) + sum(self.inclusive(k) for k in self.kids.get(i, []))

    def inclusive_cpu(self, i):
        return self.self_cpu(i) + sum(self.inclusive_cpu(k) for k in self.kids.get(i, []))

    def name(self, i):
        """The frame's function, without its class (3.9 and 3.10 have no
        qualified names)."""
        f = self.nodes[i]["frame"]
        return None if f == -1 else self.frames[f]["name"].split(".")[-1]

    def path(self, i):
        """The names from the thread's root down to node i."""
        names = []
        while self.nodes[i]["parent"] != -1:
            names.append(self.name(i))
            i = self.nodes[i]["parent"]
        return names[::-1]

    def function_total(self, name):
        """Time with `name` on the stack, counted once however deep."""
        return sum(self.inclusive(i) for i in range(len(self.nodes))
                   if self.name(i) == name and name not in self.path(i)[:-1])

    # ---- allocation and copy volume ----
    VOLUME = ("alloc_python_bytes", "alloc_native_bytes", "copied_bytes", "alloc_samples")

    def inclusive_volume(self, i, field):
        return self.nodes[i][field] + sum(self.inclusive_volume(k, field)
                                          for k in self.kids.get(i, []))

    def frame_of(self, i):
        f = self.nodes[i]["frame"]
        return None if f == -1 else self.frames[f]

    def frames_on_path(self, i):
        """The frames from node i up to its thread's root, innermost first."""
        out = []
        while self.nodes[i]["parent"] != -1:
            out.append(self.frame_of(i))
            i = self.nodes[i]["parent"]
        return out

    def attributed(self, i):
        """Is a profiled (not library) frame on node i's stack: would the
        line table have credited a sample there?"""
        return any(not f["library"] for f in self.frames_on_path(i))

    def function_volume(self, filename, name, field):
        """`field` with the program's function `name` on the stack, counted
        once however deep: its outermost nodes' inclusive volume."""
        def mine(f):
            return (f is not None and not f["library"] and f["name"].split(".")[-1] == name
                    and Path(f["file"]).name == filename)
        return sum(self.inclusive_volume(i, field) for i in range(len(self.nodes))
                   if mine(self.frame_of(i)) and not any(map(mine, self.frames_on_path(i)[1:])))


def test_tree_has_the_programs_call_structure(run_calipers, tmp_path):
    prog = tmp_path / "calls.py"
    prog.write_text(textwrap.dedent(PROGRAM))
    prof = run_calipers(prog, options=["--no-report"])
    assert prof.returncode == 0, prof.stderr
    tree = Tree(prof.profile)

    # Parents first; each node in its root's thread; one root per thread.
    roots = [i for i, n in enumerate(tree.nodes) if n["parent"] == -1]
    assert sorted(tree.nodes[i]["thread"] for i in roots) == \
        list(range(len(prof.profile["threads"])))
    for i, n in enumerate(tree.nodes):
        if n["parent"] != -1:
            assert n["parent"] < i
            assert n["thread"] == tree.nodes[n["parent"]]["thread"]

    # The program's frames are not library frames; threading's are;
    # calipers' own (what it runs as the program ends) are not frames.
    own = str(Path(calipers.__file__).parent)
    assert not [f for f in tree.frames if f["file"].startswith(own)]
    kinds = {f["name"].split(".")[-1]: f["library"] for f in tree.frames}
    assert kinds["leaf"] is False and kinds["work"] is False
    assert kinds["_bootstrap_inner"] is True

    # Where leaf ran, by the whole stack: each thread reaches it through
    # work -> deep and work -> shallow, the worker below threading's frames.
    by_thread = {}
    for i, n in enumerate(tree.nodes):
        if tree.name(i) == "leaf" and tree.self_time(i) > 0:
            thread = prof.profile["threads"][n["thread"]]["name"]
            caller = tree.path(i)[-2]
            by_thread.setdefault(thread, {}).setdefault(caller, 0.0)
            by_thread[thread][caller] += tree.self_cpu(i)
    assert set(by_thread) == {"MainThread", "worker"}
    for thread, callers in by_thread.items():
        assert set(callers) == {"deep", "shallow"}, (thread, callers)
    worker_leaf = next(i for i in range(len(tree.nodes))
                       if tree.name(i) == "leaf" and
                       prof.profile["threads"][tree.nodes[i]["thread"]]["name"] == "worker")
    assert tree.path(worker_leaf)[:3] == ["_bootstrap", "_bootstrap_inner", "run"]

    # 3:1 from deep and shallow, in CPU: each thread runs 1.2 s of leaf,
    # 0.9 s of it from deep.  On a quiet machine, and beside two busy loops
    # that preempt both threads for 90% of their CPU, 24 runs read
    # 0.742-0.756 (3.12).  But two full CI runs read 0.62 and 0.64 (the
    # worker 0.57 the second time), and 60 runs in the minutes after a CI
    # run ended, while the kernel wrote its files back, read 0.60-0.84, the
    # build before this wave's changes alike (0.65-0.82): CPU time moved
    # between deep and shallow, 0.2 s of it at worst.  Why is not known yet
    # (issue 18).  The bound still tells 3:1 from 1:1 (0.5) and from the
    # callers swapped (0.25).  On failure, each thread's split.
    deep = sum(c["deep"] for c in by_thread.values())
    shallow = sum(c["shallow"] for c in by_thread.values())
    assert 0.57 <= deep / (deep + shallow) <= 0.90, (deep, shallow, by_thread)

    # The function table and the tree come from the same samples: each
    # function's total is the inclusive time of its outermost nodes.
    funcs = prof.functions("calls.py")
    for name in ("leaf", "deep", "shallow", "work"):
        want = funcs[name]["total"]
        got = tree.function_total(name)
        assert abs(got - (cpu(want) + want["waiting_s"])) <= 1e-3 + 1e-3 * got, name
    assert prof.profile["stacks"]["folded"]["samples"] == 0


def test_children_bring_their_own_trees(run_calipers, tmp_path):
    prog = tmp_path / "kids.py"
    prog.write_text(textwrap.dedent("""
        import json, multiprocessing, sys, time

        def in_child():
            t0 = time.thread_time()
            while time.thread_time() - t0 < 0.3:
                pass
            return time.thread_time() - t0

        if __name__ == "__main__":
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                spent = pool.apply(in_child)
            with open(sys.argv[1], "w") as f:
                json.dump({"child_cpu_s": spent}, f)
        """))
    prof = run_calipers(prog, TRUTH, options=["--no-report"])
    assert prof.returncode == 0, prof.stderr
    tree = Tree(prof.profile)
    threads = prof.profile["threads"]
    nodes = [i for i in range(len(tree.nodes)) if tree.name(i) == "in_child"]
    assert nodes
    # in_child ran in the worker process, under its own root.
    assert {threads[tree.nodes[i]["thread"]]["process"] for i in nodes} - {0}
    # In CPU time, as the child measured itself: on a loaded machine it
    # also waits for a core (4 runs of 4 read 1.7-6.5x in wall time).
    got = sum(tree.inclusive_cpu(i) for i in nodes)
    truth = prof.truth["child_cpu_s"]
    assert 0.8 * truth <= got <= 1.3 * truth, (got, truth)


MANY_STACKS = """
import json, sys, time

# 64 functions that call one another in an order drawn afresh at each
# call: nearly every sample finds a stack never seen before, so the table
# fills and the written one must choose.  hot() takes half the CPU,
# through one short stack.
N = 64
src = []
for k in range(N):
    src.append(
        "def f%d(depth, seed):\\n"
        "    if depth == 0:\\n"
        "        x = 0\\n"
        "        for _ in range(300):\\n"
        "            x += 1\\n"
        "        return x\\n"
        "    seed = (seed * 1103515245 + 12345) & 0x7fffffff\\n"
        "    return FUNCS[(seed >> 16) %% N](depth - 1, seed)\\n" % k)
exec("".join(src))
FUNCS = [globals()["f%d" % k] for k in range(N)]

def hot(seconds):
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        pass

def noise(seconds):
    t0 = time.thread_time()
    seed = 1
    while time.thread_time() - t0 < seconds:
        seed += 1
        FUNCS[seed % N](24, seed)

t0 = time.thread_time()
spent = {"hot": 0.0, "noise": 0.0}
for _ in range(8):
    a = time.thread_time(); hot(0.25); spent["hot"] += time.thread_time() - a
    a = time.thread_time(); noise(0.25); spent["noise"] += time.thread_time() - a
with open(sys.argv[1], "w") as f:
    json.dump(spent, f)
"""


def test_written_table_keeps_the_heaviest_stacks_and_stays_small(run_calipers, tmp_path):
    # Only a bounded table is written, whatever the run's length (issue 20:
    # under 2 MB): the heaviest stacks, the rest merged into their callers.
    prog = tmp_path / "many.py"
    prog.write_text(textwrap.dedent(MANY_STACKS))
    prof = run_calipers(prog, TRUTH, options=["--no-report", "--interval", "0.5ms"])
    assert prof.returncode == 0, prof.stderr
    size = prof.outfile.stat().st_size
    tree = Tree(prof.profile)
    folded = prof.profile["stacks"]["folded"]
    assert len(tree.nodes) <= 8000
    assert folded["samples"] > 0, "the program must make more stacks than are written"
    assert size < 2_000_000, size

    # The timeline's samples name written nodes of their own thread (a
    # sample of a node merged into its caller names the caller).
    timeline = prof.profile["stacks"]["timeline"]
    for th in timeline["threads"]:
        for t, node, kind, value in th["samples"]:
            assert 0 <= node < len(tree.nodes)
            assert tree.nodes[node]["thread"] == th["thread"]

    # Nothing is lost: the tree's time is the threads' time.
    total = sum(tree.self_time(i) for i in range(len(tree.nodes)))
    threads = sum(t["python_s"] + t["native_s"] + t["system_s"] + t["waiting_s"]
                  for t in prof.profile["threads"])
    assert abs(total - threads) <= 1e-3 * threads + 1e-4 * len(tree.nodes), (total, threads)

    # hot() is kept, whole: its inclusive CPU is what the program measured
    # of it (2 s; ~4,000 samples, so a few percent at most of sampling
    # error), and it is credited as much as the function table says.
    funcs = prof.functions("many.py")
    for name in ("hot", "noise"):
        want = funcs[name]["total"]
        got = tree.function_total(name)
        assert abs(got - (cpu(want) + want["waiting_s"])) <= 1e-3 + 1e-3 * got, name
    truth = prof.truth["hot"]
    assert 0.9 * truth <= cpu(funcs["hot"]["total"]) <= 1.1 * truth
# ---- allocation and copy samples keep their whole stack ---------------------

ALLOCS_C = r"""
/* Native allocations made with the GIL released (ctypes lets it go around
   the call), in the calling thread. */
#include <stdlib.h>

long alloc_blocks(long n, long size)
{
    long sum = 0;
    for (long i = 0; i < n; i++) {
        volatile char *p = malloc((size_t)size);
        if (!p)
            return -1;
        p[0] = 1;
        p[size - 1] = 2;
        sum += p[0];
        free((void *)p);
    }
    return sum;
}
"""

MEMORY_PROGRAM = """
import ctypes, json, sys, threading
import numpy as np

lib = ctypes.CDLL(sys.argv[2])
lib.alloc_blocks.restype = ctypes.c_long
lib.alloc_blocks.argtypes = [ctypes.c_long, ctypes.c_long]
MB = 1 << 20
SRC = bytearray(32 * MB)
DEPTH = 40

def leaf(rounds):
    for _ in range(rounds):
        for _ in range(4):
            b = bytearray(MB)  # py-line
        for _ in range(4):
            a = np.empty(MB // 8)  # np-line
        assert lib.alloc_blocks(4, MB) == 4  # c-line
    for _ in range(rounds // 8):
        c = bytes(SRC)  # copy-line

def down(k, rounds):
    if k:
        return down(k - 1, rounds)
    leaf(rounds)

def deep():
    down(DEPTH, 96)  # three times as much from here ...

def shallow():
    leaf(32)  # ... as from here

def work():
    deep()
    shallow()

t = threading.Thread(target=work, name="worker")
t.start()
work()
t.join()
with open(sys.argv[1], "w") as f:
    # What one call of leaf(rounds) allocates and copies, per round.
    json.dump({"py-line": 4 * sys.getsizeof(bytearray(MB)), "np-line": 4 * MB,
               "c-line": 4 * MB, "copy-line": len(SRC) / 8, "depth": DEPTH}, f)
"""

MiB = 1 << 20


@pytest.fixture(scope="module")
def allocs_lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("lib")
    (d / "allocs.c").write_text(ALLOCS_C)
    out = d / "liballocs.so"
    subprocess.run(["cc", "-O1", "-fno-builtin", "-shared", "-fPIC", str(d / "allocs.c"),
                    "-o", str(out)], check=True)
    return out


def check_tree_sums(prof, tree):
    """What docs/FORMAT.md says the tree's volumes add up to: every
    allocation sample is in the tree (its samples are the summary's), and
    the nodes with a profiled frame on their stack hold exactly what the
    line table holds; the rest had no profiled line to go to."""
    st = prof.profile["stacks"]
    assert st["folded"] == {"time_s": 0.0, "bytes": 0, "samples": 0}
    memory = prof.profile["summary"]["memory"]
    assert sum(n["alloc_samples"] for n in tree.nodes) == memory["samples"]
    lines = [ln["memory"] for f in prof.profile["files"] for ln in f["lines"]]
    for field in Tree.VOLUME:
        in_lines = sum(m[field] for m in lines)
        in_tree = sum(n[field] for i, n in enumerate(tree.nodes) if tree.attributed(i))
        assert in_tree == in_lines, field
    # Every sampled byte, attributed or not, is in the tree: an unbiased
    # estimate of the exact totals (the samplers were given exactly those
    # bytes), within six of its relative errors sqrt(interval / bytes).
    config = prof.profile["config"]
    for field, exact, mean in (
            ("alloc_python_bytes", "allocated_python_bytes", "memory_interval_bytes"),
            ("alloc_native_bytes", "allocated_native_bytes", "memory_interval_bytes"),
            ("copied_bytes", "copied_bytes", "copy_interval_bytes")):
        got = sum(n[field] for n in tree.nodes)
        want = memory[exact]
        rel = max(0.05, 6 * (config[mean] / max(want, 1)) ** 0.5)
        assert got == pytest.approx(want, rel=rel), (field, got, want)


def test_allocations_and_copies_keep_their_whole_stack(run_calipers, tmp_path, allocs_lib):
    prog = tmp_path / "allocs.py"
    prog.write_text(textwrap.dedent(MEMORY_PROGRAM))
    # Each path's smallest volume (shallow's 32 rounds): 128 MiB of each
    # kind; at 32 KiB, 4096 sample points, 1.6% (10% is 6 of those); its
    # copies, sampled at 4x the interval, 1024 points, 3.1% (15% is 4.8).
    prof = run_calipers(prog, TRUTH, allocs_lib,
                        options=["--no-report", "--memory-interval", "32k"])
    assert prof.returncode == 0, prof.stderr
    truth = prof.truth
    tree = Tree(prof.profile)
    threads = prof.profile["threads"]
    marks = {line_of(prog, m): m for m in ("py-line", "np-line", "c-line", "copy-line")}
    kinds = {"py-line": "alloc_python_bytes", "np-line": "alloc_native_bytes",
             "c-line": "alloc_native_bytes", "copy-line": "copied_bytes"}

    # Where leaf's lines allocated, by thread, caller (deep or shallow) and
    # line: the nodes of leaf at those lines.
    got = {}
    for i, n in enumerate(tree.nodes):
        if tree.name(i) != "leaf" or n["line"] not in marks:
            continue
        path = tree.path(i)
        thread = threads[n["thread"]]["name"]
        caller = "deep" if "deep" in path else "shallow"
        mark = marks[n["line"]]
        assert (thread, caller, mark) not in got  # one stack each
        got[(thread, caller, mark)] = n
        # The whole stack, root and leaf: the program's frames from the
        # thread's first (<module>, or threading's bootstrap below work)
        # down to leaf, the 41 frames of down's recursion included, also
        # for the allocations made without the GIL (c-line), which are
        # queued with their stack and credited later.
        start = ["<module>"] if thread == "MainThread" else \
            ["_bootstrap", "_bootstrap_inner", "run"]
        middle = ["deep"] + ["down"] * (truth["depth"] + 1) if caller == "deep" else ["shallow"]
        assert path == start + ["work"] + middle + ["leaf"], (thread, mark, path)
    assert set(got) == {(t, c, m) for t in ("MainThread", "worker")
                        for c in ("deep", "shallow") for m in kinds}, sorted(got)

    for (thread, caller, mark), n in got.items():
        rounds = 96 if caller == "deep" else 32
        want = truth[mark] * rounds
        field = kinds[mark]
        rel = 0.15 if mark == "copy-line" else 0.10
        assert n[field] == pytest.approx(want, rel=rel), (thread, caller, mark, n)
        # Python or native: each line's bytes are of its own kind (a
        # NumPy array's object is a few Python bytes next to its buffer).
        if mark != "copy-line":
            other = "alloc_native_bytes" if field == "alloc_python_bytes" \
                else "alloc_python_bytes"
            assert n[other] <= 0.02 * n[field], (thread, caller, mark, n)
        assert n["alloc_samples"] > 0 if mark != "copy-line" else n["copied_bytes"] > 0

    # deep allocated three times what shallow did, through the same leaf.
    for mark, field in kinds.items():
        d = sum(n[field] for (t, c, m), n in got.items() if m == mark and c == "deep")
        s = sum(n[field] for (t, c, m), n in got.items() if m == mark and c == "shallow")
        assert 0.65 <= d / (d + s) <= 0.85, (mark, d, s)

    check_tree_sums(prof, tree)

    # The function table and the tree come from the same credits: each
    # function's total is its outermost nodes' inclusive volume, exactly.
    funcs = prof.functions("allocs.py")
    for name in ("leaf", "down", "deep", "shallow", "work", "<module>"):
        total = funcs[name]["memory"]["total"]
        for field in Tree.VOLUME:
            assert tree.function_volume("allocs.py", name, field) == total[field], \
                (name, field)


def test_children_bring_their_memory_stacks(run_calipers, tmp_path):
    prog = tmp_path / "kids.py"
    prog.write_text(textwrap.dedent("""
        import json, multiprocessing, sys

        MB = 1 << 20

        def in_child():
            for _ in range(128):
                b = bytearray(MB)
            return 128 * sys.getsizeof(b)

        if __name__ == "__main__":
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                made = pool.apply(in_child)
            with open(sys.argv[1], "w") as f:
                json.dump({"child_bytes": made}, f)
        """))
    # 128 MiB at 32 KiB: 4096 points, 1.6% (10% is 6 of those).
    prof = run_calipers(prog, TRUTH, options=["--no-report", "--memory-interval", "32k"])
    assert prof.returncode == 0, prof.stderr
    tree = Tree(prof.profile)
    threads = prof.profile["threads"]
    nodes = [i for i in range(len(tree.nodes)) if tree.name(i) == "in_child"]
    assert nodes
    # in_child allocated in the worker process, under its own root.
    assert 0 not in {threads[tree.nodes[i]["thread"]]["process"] for i in nodes}
    got = sum(tree.inclusive_volume(i, "alloc_python_bytes") for i in nodes)
    assert got == pytest.approx(prof.truth["child_bytes"], rel=0.10)
    # The merged profile's sums hold as they do in one process.
    check_tree_sums(prof, tree)


# ---- the timeline of samples ------------------------------------------------

KINDS = ["python", "native", "system", "waiting", "alloc_python", "alloc_native", "copy"]


def timeline_checks(prof, tree):
    """What every timeline holds: its stride a power of two, at most 16,384
    samples, each at a node of its thread, in time order per thread within
    the run, its value positive; allocation samples of the kind their node
    holds bytes of.  Returns {thread index: samples}."""
    tl = prof.profile["stacks"]["timeline"]
    assert tl["kinds"] == KINDS
    assert tl["sample_fields"] == ["time_ns", "node", "kind", "value"]
    every = tl["every"]
    assert every >= 1 and every & (every - 1) == 0
    by_thread = {t["thread"]: t["samples"] for t in tl["threads"]}
    assert len(by_thread) == len(tl["threads"])
    assert sum(map(len, by_thread.values())) <= 16384
    wall_ns = prof.profile["summary"]["wall_s"] * 1e9
    starts = [p["start_s"] * 1e9 for p in prof.profile.get("processes", [{"start_s": 0}])]
    for thread, samples in by_thread.items():
        assert samples
        times = [s[0] for s in samples]
        assert times == sorted(times), thread
        for t, node, kind, value in samples:
            assert tree.nodes[node]["thread"] == thread
            assert 0 <= t <= max(starts) * 1 + wall_ns + 1e9
            assert value > 0 or KINDS[kind] in ("python", "native", "system", "waiting")
            field = {"alloc_python": "alloc_python_bytes", "alloc_native": "alloc_native_bytes",
                     "copy": "copied_bytes"}.get(KINDS[kind])
            if field:
                assert tree.nodes[node][field] >= value
    return by_thread


def test_timeline_of_samples(run_calipers, tmp_path, allocs_lib):
    prog = tmp_path / "allocs.py"
    prog.write_text(textwrap.dedent(MEMORY_PROGRAM))
    prof = run_calipers(prog, TRUTH, allocs_lib,
                        options=["--no-report", "--memory-interval", "32k"])
    assert prof.returncode == 0, prof.stderr
    tree = Tree(prof.profile)
    tl = prof.profile["stacks"]["timeline"]
    by_thread = timeline_checks(prof, tree)
    memory = prof.profile["summary"]["memory"]
    kept = [s for samples in by_thread.values() for s in samples]
    allocs = [s for s in kept if KINDS[s[2]] in ("alloc_python", "alloc_native")]
    # ~4000 allocation samples and some hundred CPU samples: under the cap,
    # every sample is kept.
    assert tl["every"] == 1
    assert len(allocs) == memory["samples"]
    for kind in ("alloc_python", "alloc_native", "copy"):
        field = {"alloc_python": "alloc_python_bytes", "alloc_native": "alloc_native_bytes",
                 "copy": "copied_bytes"}[kind]
        assert sum(s[3] for s in kept if KINDS[s[2]] == kind) == \
            sum(n[field] for n in tree.nodes), kind
    # Every credit of time is there too (the CPU samples', and the native
    # threads' CPU that the scan credits with no sample), its ns its value.
    cpu_ns = sum(s[3] for s in kept if s[2] < 4)
    tree_s = sum(tree.self_time(i) for i in range(len(tree.nodes)))
    assert abs(cpu_ns / 1e9 - tree_s) <= 1e-6 * len(tree.nodes), (cpu_ns, tree_s)
    # Both threads' samples reach leaf through deep and through shallow.
    names = {prof.profile["threads"][t]["name"]: t for t in by_thread}
    for name in ("MainThread", "worker"):
        paths = {tuple(tree.path(s[1])) for s in by_thread[names[name]]
                 if KINDS[s[2]] == "alloc_native"}
        assert any("deep" in p and p[-1] == "leaf" for p in paths), name
        assert any("shallow" in p and p[-1] == "leaf" for p in paths), name


def test_timeline_stays_bounded(run_calipers, tmp_path):
    prog = tmp_path / "many.py"
    prog.write_text(textwrap.dedent("""
        import multiprocessing

        def churn(n):
            for _ in range(n):
                b = bytearray(1 << 16)

        if __name__ == "__main__":
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                pool.apply(churn, (20_000,))
            churn(40_000)
        """))
    # 60,000 blocks of 64 KiB, each one allocation sample at a 4 KiB
    # interval (with a weight of ~16 points): about four times the cap,
    # the child's third merged in.
    prof = run_calipers(prog, options=["--no-report", "--memory-interval", "4k"])
    assert prof.returncode == 0, prof.stderr
    tree = Tree(prof.profile)
    by_thread = timeline_checks(prof, tree)
    tl = prof.profile["stacks"]["timeline"]
    memory = prof.profile["summary"]["memory"]
    assert memory["samples"] > 3 * 16384
    kept = sum(map(len, by_thread.values()))
    # Decimated to between half the cap and the cap, every `every`-th sample.
    assert 8192 <= kept <= 16384 and tl["every"] >= 4, (kept, tl["every"])
    allocs = sum(1 for s in by_thread.values() for x in s if x[2] in (4, 5))
    assert allocs * tl["every"] == pytest.approx(memory["samples"], rel=0.02)
    # Which ones: every `every`-th of each thread's samples, by count (the
    # C tests check the numbers exactly): the main thread's 40,000 blocks
    # (each one sample: a 64 KiB block holds at least one sample point).
    main = [s for s in by_thread[0] if s[2] in (4, 5) and tree.name(s[1]) == "churn"]
    assert len(main) * tl["every"] == pytest.approx(40_000, rel=0.05), len(main)
    # The child's samples are there too, at its own threads.
    threads = prof.profile["threads"]
    assert any(threads[t]["process"] != 0 for t in by_thread)
    size = len(json.dumps(tl))
    assert size < 600_000, size
