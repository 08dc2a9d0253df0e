"""calipers.heap: heaps whose shape the test builds, checked against
sys.getsizeof and brute-force dominators; the program unchanged by a scan."""

import gc
import json
import subprocess
import sys
import sysconfig
import weakref

import pytest

from calipers import heap

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


@pytest.fixture(autouse=True)
def _gil_builds_only(request):
    if FREE_THREADED and request.node.name != "test_free_threaded_refuses":
        pytest.skip("heap scans refuse free-threaded builds (test_free_threaded_refuses)")


class Blob(bytes):
    pass


class Bag(list):
    pass


class Leaf:
    pass


KEEP = []


def test_totals_by_type_are_getsizeof():
    bags = [Bag([Blob(b"%d" % i * (1 + i % 50)) for i in range(k)]) for k in range(60)]
    leaves = [Leaf() for _ in range(1000)]
    KEEP[:] = [bags, leaves]
    try:
        h = heap.scan()
        stats = {s.type: s for s in h.by_type()}
        name = __name__ + ".%s"
        blobs = [b for bag in bags for b in bag]
        assert stats[name % "Blob"].count == len(blobs)
        assert stats[name % "Blob"].size == sum(map(sys.getsizeof, blobs))
        assert stats[name % "Bag"].count == len(bags)
        assert stats[name % "Bag"].size == sum(map(sys.getsizeof, bags))
        assert stats[name % "Leaf"].count == 1000
        assert stats[name % "Leaf"].size == sum(map(sys.getsizeof, leaves))
        # bags holds its bags and their blobs, nothing else.
        assert h.retained(bags) == (sys.getsizeof(bags) + sum(map(sys.getsizeof, bags)) +
                                    sum(map(sys.getsizeof, blobs)))
        assert h.dominator(bags[3][0]).address == id(bags[3])
        assert h.retained(object()) is None  # made after the scan
        top = h.largest(5)
        assert [n.retained for n in top] == sorted((n.retained for n in top), reverse=True)
        assert "Blob" in h.format(top=10000) and h.info["nodes"] == len(h)
        assert str(h).startswith("heap: %d objects" % len(h))
    finally:
        KEEP.clear()


def test_why_alive_is_a_real_path():
    target = Leaf()
    KEEP[:] = [{"here": [1, target]}]
    try:
        h = heap.scan()
        path = h.why_alive(target)
        assert path[0][1] == "root"
        assert path[-1][0] == __name__ + ".Leaf"
        edges = [e for _, e in path]
        assert edges[-2:] == ["['here']", "[1]"]
        # Each step is a real reference: from the node to the next.
        nodes, objs = heap._calipers.heap_path(h._g, h.find(target).index)
        assert objs[-1] is target and len(objs) == len(nodes)
        for a, b in zip(objs, objs[1:]):
            assert any(r is b for r in gc.get_referents(a))
        del objs
    finally:
        KEEP.clear()


def test_scan_leaves_the_program_unchanged():
    fired = []

    class Finalized:
        def __del__(self):
            fired.append("del")

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        a = Finalized()
        b = Finalized()
        a.other, b.other = b, a  # a garbage cycle the collector has not freed
        wr = weakref.ref(a, lambda r: fired.append("weakref"))
        del a, b
        probe = [Leaf(), "x" * 1000, (1, 2), {"k": 1}, Finalized()]
        watch = weakref.ref(probe[0])
        rules, objects = [], []
        for _ in range(3):  # the interpreter's lazy caches, filled once
            heap._calipers.heap_scan(rules, objects, None)
        before = [sys.getrefcount(o) for o in probe]
        weakrefs = [weakref.getweakrefcount(o) for o in probe[:1] + probe[4:]]
        n_objects = len(gc.get_objects())
        garbage = len(gc.garbage)
        # gc.get_count() makes a 3-tuple: with some on the free list (made
        # and freed here), it takes one of those, which the collector does
        # not count; so the two readings differ only by what the call
        # between them allocated for the collector.
        spare = [tuple([i, i, i]) for i in range(10)]
        del spare
        # The list free list emptied: a list the walk made and freed would
        # stay counted (3.9-3.11 built gc.get_objects()'s).
        lists = [[] for _ in range(300)]
        count = gc.get_count()
        graph = heap._calipers.heap_scan(rules, objects, None)
        after = gc.get_count()
        # The walk allocates nothing the collector counts, frees nothing,
        # and its result is not the collector's either.
        assert after == count
        assert [sys.getrefcount(o) for o in probe] == before
        assert [weakref.getweakrefcount(o) for o in probe[:1] + probe[4:]] == weakrefs
        assert not fired and wr() is not None and watch() is probe[0]
        del lists
        assert len(gc.get_objects()) == n_objects + 2  # count and after
        assert len(gc.garbage) == garbage
        assert not gc.isenabled()
        h = heap.Heap(graph)
        # The cycle nothing reaches is scanned too, from a root of its own.
        assert h.find(wr()) is not None
        # A control: the same readings around a call that does allocate one
        # object for the collector see it (the measure can fail).
        spare = [tuple([i, i, i]) for i in range(10)]
        del spare
        count = gc.get_count()
        made = Leaf()  # no free list for instances
        after = gc.get_count()
        assert after[0] == count[0] + 1 and made
    finally:
        if was_enabled:
            gc.enable()
    gc.collect()
    assert "del" in fired


def test_rules():
    class Special(Leaf):
        pass

    class Other:
        pass

    payload = ["p" * 100 for _ in range(10)]
    specials = [Special() for _ in range(5)]
    for s in specials:
        s.data = payload
    others = [Other() for _ in range(4)]
    for o in others:
        o.__dict__["x"] = 1  # a real dict (3.11+ would keep values inline)
    KEEP[:] = [specials, others, payload]
    try:
        base = heap.scan()
        name = __name__ + ".test_rules.<locals>.%s"
        # Ignored by a rule on the base class: size 0, and what only they
        # hold is not reached through them.
        h = heap.scan(heap.Rules().ignore(Leaf))
        stats = {s.type: s for s in h.by_type()}
        assert stats[name % "Special"].size == 0
        # The exact-type rule leaves subclasses alone.
        h = heap.scan(heap.Rules().ignore(Leaf, subclasses=False))
        assert {s.type: s for s in h.by_type()}[name % "Special"].size == \
            {s.type: s for s in base.by_type()}[name % "Special"].size
        # Fixed sizes and sizers.
        h = heap.scan(heap.Rules().size(Special, 1000).size(Other, lambda o: 7))
        stats = {s.type: s for s in h.by_type()}
        assert stats[name % "Special"].size == 5000
        assert stats[name % "Other"].size == 28
        # Virtual objects: each Other with its dict as one.
        h = heap.scan(heap.Rules().virtual(Other))
        stats = {s.type: s for s in h.by_type()}
        want = sum(sys.getsizeof(o) + sys.getsizeof(o.__dict__) for o in others)
        assert stats[name % "Other"].size == want
        assert h.node(h.find(others[0]).index).size == \
            sys.getsizeof(others[0]) + sys.getsizeof(others[0].__dict__)
        assert h.find(others[0].__dict__).size == 0  # merged: out of the totals
        assert base.find(others[0].__dict__).size == sys.getsizeof(others[0].__dict__)
        # One object.
        h = heap.scan(heap.Rules().ignore_object(specials[0]))
        assert h.find(specials[0]).size == 0 and h.find(specials[1]).size > 0
        with pytest.raises(ValueError):
            heap.Rules().size(Other, -1)
        with pytest.raises(TypeError):
            heap.Rules().ignore(3)
    finally:
        KEEP.clear()


def test_numpy_views_share_their_owner():
    np = pytest.importorskip("numpy")
    owner = np.zeros(100000)
    views = [owner[i:] for i in range(5)]
    KEEP[:] = [views]
    del owner
    try:
        h = heap.scan()
        base = views[0].base
        assert h.find(base).size == sys.getsizeof(base)  # owns its 800 kB
        assert all(h.find(v).size == sys.getsizeof(v) < 1000 for v in views)
        # The views list holds the buffer, once.
        assert h.retained(views) >= 800000
        assert h.retained(views) < 2 * 800000
        assert h.dominator(base).address == id(views)
    finally:
        KEEP.clear()


class GNode(list):
    """A node of a random graph: a list of its successors."""


def _reference(holder, nodes):
    """Brute force: retained size and immediate dominator of each node of
    the graph entered from holder (no other references into it)."""
    def reach(skip):
        seen, todo = set(), [id(x) for x in holder if x is not skip]
        by_id = {id(n): n for n in nodes}
        seen.update(todo)
        while todo:
            for c in by_id[todo.pop()]:
                if c is not skip and id(c) not in seen:
                    seen.add(id(c))
                    todo.append(id(c))
        return seen

    everything = reach(None)
    dominated = {id(d): everything - reach(d) for d in nodes}
    retained = {i: sum(sys.getsizeof(n) for n in nodes if id(n) in dominated[i])
                for i in dominated}
    idom = {}
    for n in nodes:
        doms = [d for d in nodes if d is not n and id(n) in dominated[id(d)]]
        near = [d for d in doms if all(id(d) in dominated[id(e)] for e in doms if e is not d)]
        idom[id(n)] = id(near[0]) if near else id(holder)
    return retained, idom


hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(st.integers(1, 25).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                         max_size=3 * n),
    st.lists(st.integers(0, n - 1), min_size=1, max_size=3))))
def test_dominators_of_random_graphs(graph):
    n, edges, roots = graph
    nodes = [GNode() for _ in range(n)]
    for a, b in edges:
        nodes[a].append(nodes[b])
    holder = [nodes[r] for r in roots]
    KEEP[:] = [holder]
    del nodes
    gc.collect()  # what the holder does not reach goes
    try:
        # The truth, before the scan; then no reference into the graph but
        # the holder's (a local list would be a root of its own).
        live, todo = {id(x): x for x in holder}, list(holder)
        while todo:
            for c in todo.pop():
                if id(c) not in live:
                    live[id(c)] = c
                    todo.append(c)
        retained, idom = _reference(holder, list(live.values()))
        del live, todo
        holder = None
        h = heap.scan()
        holder = KEEP[0]
        live, todo = {id(x): x for x in holder}, list(holder)
        while todo:
            for c in todo.pop():
                if id(c) not in live:
                    live[id(c)] = c
                    todo.append(c)
        assert set(live) == set(retained)
        for i, want in retained.items():
            got = h.find(live[i])
            assert got.retained == want
            assert got._idom >= 0 and h.node(got._idom).address == idom[i]
    finally:
        KEEP.clear()


def test_diff_shows_growth():
    before = heap.scan()
    KEEP[:] = [[Leaf() for _ in range(500)]]
    try:
        after = heap.scan()
        rows = {r[0]: r for r in after.diff(before)}
        assert rows[__name__ + ".Leaf"][1] == 500
    finally:
        KEEP.clear()


PROGRAM = """
import json, sys
from calipers import heap
big = [bytearray(100) for _ in range(200)]  # LINE
h = heap.scan()
rows = [r for r in h.by_line() if r[0] == __file__]
print(json.dumps({"rows": rows, "sampled": h.info["sampled"]}))
"""


def test_by_line_under_calipers_run(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    line = PROGRAM.splitlines().index("big = [bytearray(100) for _ in range(200)]  # LINE") + 1
    proc = subprocess.run([sys.executable, "-m", "calipers", "run", "--no-report", "-o",
                           str(tmp_path / "p.json"), "--memory-interval", "1", str(script)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["sampled"]
    counts = {r[1]: r[2] for r in out["rows"]}
    assert counts.get(line, 0) >= 200


@pytest.mark.skipif(not FREE_THREADED, reason="only free-threaded builds refuse")
def test_free_threaded_refuses():  # pragma: no cover - run on 3.14t only
    with pytest.raises(RuntimeError, match="free-threaded"):
        heap.scan()
