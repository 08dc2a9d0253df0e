"""Whole stacks: the profile's stack table (docs/FORMAT.md, "stacks").

Real programs under calipers; the tree is checked against the program's
own call structure, against the function table written from the same
samples, and against what the program measured of itself."""

import textwrap
from pathlib import Path

import calipers
from conftest import TRUTH, cpu

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

    # 3:1 from deep and shallow, in CPU; the two threads share two cores
    # on this machine, so the program ran 1.2 s of leaf in all.  With
    # ~200 samples of leaf the share's sampling error is ~3%.
    deep = sum(c["deep"] for c in by_thread.values())
    shallow = sum(c["shallow"] for c in by_thread.values())
    assert 0.65 <= deep / (deep + shallow) <= 0.85, (deep, shallow)

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
