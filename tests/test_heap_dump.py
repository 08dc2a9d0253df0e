"""Heap dumps: a scan saved to a file and loaded back (calipers.heap's
Heap.save and load), the reader against corrupt and hostile files, and the
commands that write them: `calipers run --heap-at-exit` and `calipers heap
PID`, and `calipers heap FILE` that prints one."""

import errno
import json
import os
import stat
import struct
import subprocess
import sys
import sysconfig
import textwrap
import time

import pytest

from calipers import _calipers, heap

pytestmark = pytest.mark.skipif(bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
                                reason="heap scans refuse free-threaded builds")


class Leaf:
    pass


class Holder(list):
    pass


KEEP = []


def fnv1a(data):
    h = 0xCBF29CE484222325
    for x in data:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def reseal(data):
    """`data` with its checksum made right again."""
    return data[:-8] + struct.pack("<Q", fnv1a(data[:-8]))


def scanned():
    """A scan of a heap this test built: 300 Leafs in 3 Holders."""
    KEEP[:] = [[Holder(Leaf() for _ in range(100)) for _ in range(3)]]
    return heap.scan()


@pytest.fixture
def small_dump():
    """A small dump's bytes (a scan of a fresh interpreter's heap, a
    subprocess: the fuzz below decodes it thousands of times)."""
    code = ("import sys\nfrom calipers import heap, _calipers\n"
            "KEEP = [[1.5, 'x' * 40, (1, 2)] for _ in range(20)]\n"
            "h = heap.scan()\n"
            "sys.stdout.buffer.write(_calipers.heap_encode(h._g, '{\"k\": 1}'))\n")
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def summary_of(h):
    return ([(s.type, s.count, s.size, s.retained) for s in h.by_type()],
            [(n.address, n.type, n.size, n.retained, n.name) for n in h.largest(50)],
            h.info["nodes"], h.info["edges"], h.info["roots"])


def test_a_saved_heap_loads_back_the_same(tmp_path):
    try:
        h = scanned()
        path = tmp_path / "h.heap"
        h.save(str(path), note="mine")
        old = heap.load(str(path))
        assert old.loaded and not h.loaded
        assert summary_of(old) == summary_of(h)
        assert old.meta["note"] == "mine" and old.meta["pid"] == os.getpid()
        # Truth the test knows: 300 Leafs, each Holder retains its 100.
        stats = {s.type: s for s in old.by_type()}
        assert stats[__name__ + ".Leaf"].count == 300
        holders = old.of_type(__name__ + ".Holder")
        assert len(holders) == 3
        leaf = sys.getsizeof(KEEP[0][0][0])
        by_address = {id(x): x for x in KEEP[0]}
        for n in holders:
            assert n.retained == sys.getsizeof(by_address[n.address]) + 100 * leaf
        # The same path as the live heap's, its edges unnamed (the objects
        # are not there to look at).
        target = KEEP[0][1][7]
        live = h.why_alive(target)
        loaded = old.why_alive(old.node(h.find(target).index))
        assert [d for d, _ in loaded] == [d for d, _ in live]
        assert loaded[0][1] == "root" and all(e is None for _, e in loaded[1:])
        assert old.dominator(holders[0]).index == h.dominator(h.node(holders[0].index)).index
        assert old.dominator(holders[0]).address == id(KEEP[0])
        # What needs live objects says so.
        with pytest.raises(TypeError, match="loaded from a dump"):
            old.find(target)
        with pytest.raises(TypeError, match="loaded from a dump"):
            old.retained(target)
        with pytest.raises(ValueError, match="another Heap"):
            h.retained(holders[0])
        # Same heap, same bytes; saved again from the loaded one, the same too.
        again = tmp_path / "again.heap"
        old.save(str(again))
        assert again.read_bytes() == path.read_bytes()
        assert "heap dump of process %d" % os.getpid() in old.summary()
    finally:
        KEEP.clear()


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_the_file_is_created_safely(tmp_path, umask):
    h = heap.scan()
    path = tmp_path / "h.heap"
    old = os.umask(umask)
    try:
        h.save(str(path))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o666 & ~umask
    assert os.listdir(tmp_path) == ["h.heap"]  # no temporary file left
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "link.heap"
    link.symlink_to(victim)
    with pytest.raises(OSError) as e:
        h.save(str(link))
    assert e.value.errno == errno.ELOOP and victim.read_text() == "precious\n"
    with pytest.raises(IsADirectoryError):
        h.save(str(tmp_path))
    with pytest.raises(OSError) as e:
        heap.load(str(link))
    assert e.value.errno == errno.ELOOP
    with pytest.raises(IsADirectoryError):
        heap.load(str(tmp_path))


def test_corrupt_bytes_are_refused_in_one_line(small_dump):
    data = small_dump
    assert _calipers.heap_decode(data)  # the good one loads
    step = max(1, len(data) // 3000)
    for n in list(range(0, 64)) + list(range(64, len(data), step)):
        with pytest.raises(ValueError, match="truncated|not a calipers heap dump"):
            _calipers.heap_decode(data[:n])
    with pytest.raises(ValueError, match="not a calipers heap dump"):
        _calipers.heap_decode(b'{"schema": "calipers/1"}')
    with pytest.raises(ValueError, match="not a calipers heap dump"):  # a snapshot's magic
        _calipers.heap_decode(b"\x89CALSNP\n" + data[8:])
    with pytest.raises(ValueError, match=r"^heap dump format version 2 is newer than this "
                                         r"calipers reads \(1\)$"):
        _calipers.heap_decode(reseal(data[:8] + struct.pack("<I", 2) + data[12:]))
    assert data[16:24] == b'{"k": 1}'
    with pytest.raises(ValueError, match="checksum mismatch"):  # still valid JSON
        _calipers.heap_decode(data[:22] + b"2" + data[23:])
    with pytest.raises(ValueError, match="bytes after the sampled nodes"):
        _calipers.heap_decode(reseal(data[:-8] + b"\0" + data[-8:]))


def test_lying_counts_are_refused_before_allocating():
    """A count the rest of the file cannot hold is refused before anything
    is allocated for it (no MemoryError, no crash)."""
    meta = b"{}"
    head = b"\x89CALHEP\n" + struct.pack("<II", 1, len(meta)) + meta
    for body in (struct.pack("<I", 0xFFFFFFFF),  # strings
                 struct.pack("<II", 0, 0xFFFFFFFF),  # types
                 struct.pack("<IIQ", 0, 0, 1 << 62)):  # nodes
        with pytest.raises(ValueError, match="truncated or corrupt heap dump"):
            _calipers.heap_decode(reseal(head + body + b"\0" * 8))


def node_record(addr, size, type_id, degree):
    return struct.pack("<QQII", addr, size, type_id, degree)


def handmade(nodes, edges, roots, types=(b"T",), names=(), lines=(), sampled=()):
    """A heap dump built by hand, field by field (docs/FORMAT.md)."""
    meta = b'{"by": "hand"}'
    out = b"\x89CALHEP\n" + struct.pack("<II", 1, len(meta)) + meta
    # In the order the writer puts them: types, node names, file names.
    strings = list(types) + [b"name", b"f.py"]
    out += struct.pack("<I", len(strings))
    for s in strings:
        out += struct.pack("<I", len(s)) + s
    out += struct.pack("<I", len(types)) + b"".join(struct.pack("<I", i)
                                                    for i in range(len(types)))
    out += struct.pack("<Q", len(nodes)) + b"".join(node_record(*n) for n in nodes)
    out += struct.pack("<Q", len(edges)) + b"".join(struct.pack("<I", e) for e in edges)
    out += struct.pack("<Q", len(roots)) + b"".join(struct.pack("<I", r) for r in roots)
    out += struct.pack("<I", len(names)) + b"".join(struct.pack("<II", *p) for p in names)
    out += struct.pack("<I", len(lines)) + b"".join(struct.pack("<Ii", *p) for p in lines)
    out += struct.pack("<Q", len(sampled)) + b"".join(struct.pack("<II", *p)
                                                      for p in sampled)
    return out + struct.pack("<Q", fnv1a(out))


def test_a_handmade_dump_gives_its_own_truth():
    # 0 -> 1 -> 2, 0 -> 2, 3 -> 1: two roots (0 and 3); 1 is held by both
    # roots' paths, so only the virtual root dominates it.
    data = handmade([(0x10, 100, 0, 2), (0x20, 10, 0, 1), (0x30, 1, 0, 0),
                     (0x40, 5, 0, 1)], [1, 2, 2, 1], [0, 3], names=[(3, 1)],
                    lines=[(2, 7)], sampled=[(2, 0)])
    graph, meta = _calipers.heap_decode(data)
    h = heap.Heap(graph, meta)
    assert h.meta == {"by": "hand"} and len(h) == 4
    assert [h.node(i).retained for i in range(4)] == [100, 10, 1, 5]
    assert h.dominator(h.node(2)) is None and h.dominator(h.node(1)) is None
    assert h.node(3).name == "name"
    assert h.by_line() == [("f.py", 7, 1, 1, 1)]
    assert [(s.type, s.count, s.size) for s in h.by_type()] == [("T", 4, 116)]
    assert [d for d, _ in h.why_alive(h.node(2))] == ["T", "T"]  # 0 -> 2
    assert _calipers.heap_encode(graph, meta) == data


@pytest.mark.parametrize("nodes, edges, roots, words", [
    ([(1, 1, 1, 0)], [], [0], "type 1 out of range"),
    ([(1, 1, 0, 1)], [1], [0], "edge 0: node 1 out of range"),
    ([(1, 1, 0, 1)], [0, 0], [0], "2 edges, where the nodes have 1"),
    ([(1, 1, 0, 0)], [], [1], "root 0: node 1 out of range"),
])
def test_bad_indices_are_refused(nodes, edges, roots, words):
    with pytest.raises(ValueError, match=words):
        _calipers.heap_decode(handmade(nodes, edges, roots))


def test_bad_names_and_lines_are_refused():
    one = [(1, 1, 0, 0), (2, 1, 0, 0)]
    for kw, words in (({"names": [(1, 2), (0, 2)]}, "name 1"),
                      ({"names": [(5, 1)]}, "name 0"),
                      ({"lines": [(9, 1)]}, "line 0: file 9"),
                      ({"lines": [(1, 1)], "sampled": [(0, 1)]}, "sampled node 0"),
                      ({"types": (b"\xff",)}, "not UTF-8")):
        with pytest.raises(ValueError, match=words):
            _calipers.heap_decode(handmade(one, [], [0], **kw))


FUZZ = textwrap.dedent("""
    import random, struct, sys
    from calipers import _calipers
    data, rounds = sys.stdin.buffer.read(), int(sys.argv[1])
    def fnv1a(b):
        h = 0xCBF29CE484222325
        for x in b:
            h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        return h
    rng = random.Random(1234)
    accepted = refused = 0
    for r in range(rounds):
        m = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            m[rng.randrange(len(m))] = rng.randrange(256)
        if r % 2:
            m[-8:] = struct.pack("<Q", fnv1a(m[:-8]))
        try:
            graph, meta = _calipers.heap_decode(bytes(m))
        except ValueError as e:
            assert str(e) and "\\n" not in str(e), repr(e)
            refused += 1
        else:
            # What was accepted is a heap: it answers, saves, and what it
            # saves loads back the same (in the writer's own order).
            again = _calipers.heap_encode(graph, meta)
            graph2, meta2 = _calipers.heap_decode(again)
            assert _calipers.heap_encode(graph2, meta2) == again
            assert _calipers.heap_by_type(graph2) == _calipers.heap_by_type(graph)
            _calipers.heap_by_line(graph)
            _calipers.heap_largest(graph, 5, True)
            _calipers.heap_path(graph, 0)
            accepted += 1
    print(accepted, refused)
""")


def test_mutations_never_crash(small_dump):
    """Random byte mutations (half with the checksum made right, so that they
    reach the checks behind it), in a subprocess: a crash is a failure, not
    the end of the test run."""
    proc = subprocess.run([sys.executable, "-c", FUZZ, "1500"], input=small_dump,
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    accepted, refused = map(int, proc.stdout.split())
    assert accepted + refused == 1500 and accepted > 50 and refused > 700


# ---- the commands ---------------------------------------------------------------

def calipers(*args, **kw):
    return subprocess.run([sys.executable, "-m", "calipers"] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=300, **kw)


def one_line_error(proc, status, words):
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert words in proc.stderr, proc.stderr


AT_EXIT = """
class Big:
    pass
big = [Big() for _ in range(5000)]
table = {"held": [bytearray(1000) for _ in range(300)]}
print("program output")
"""


def test_heap_at_exit_writes_and_reports(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(AT_EXIT)
    proc = calipers("run", "--heap-at-exit", "-o", tmp_path / "p.json", prog, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "program output\n"
    dumps = sorted(tmp_path.glob("p.*.1.heap"))
    assert len(dumps) == 1 and str(dumps[0]) in proc.stderr
    h = heap.load(str(dumps[0]))
    assert h.meta["reason"] == "at exit"
    stats = {s.type: s for s in h.by_type()}
    assert stats["__main__.Big"].count == 5000
    assert stats["bytearray"].count >= 300
    # The report: the types, and the largest objects with their paths.
    assert "__main__.Big" in proc.stderr and "largest objects" in proc.stderr
    assert "__main__.table['held']  (list)" in proc.stderr
    assert "__main__.big  (list)" in proc.stderr
    # The profile is there too, and `calipers heap FILE` prints the dump.
    assert json.loads((tmp_path / "p.json").read_text())["files"]
    shown = calipers("heap", "--top", "50", dumps[0])
    assert shown.returncode == 0 and "__main__.Big" in shown.stdout, shown.stderr
    assert "__main__ -> dict -> list  (list)" in shown.stdout  # edges unknown
    assert calipers("heap", "--top", "2", dumps[0]).stdout.count("\n") < shown.stdout.count("\n")


def test_heap_at_exit_keeps_the_exit_status_and_no_report_quiet(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text("import sys\nkeep = [object() for _ in range(1000)]\nsys.exit(7)\n")
    proc = calipers("run", "--heap-at-exit", "--no-report", "-o", tmp_path / "p.json", prog,
                    cwd=tmp_path)
    assert proc.returncode == 7 and proc.stderr == "", proc.stderr
    assert len(list(tmp_path.glob("p.*.heap"))) == 1


def start_program(tmp_path, code, *options):
    prog = tmp_path / "prog.py"
    ready = tmp_path / "ready"
    prog.write_text(code + "\nopen(sys.argv[1], 'w').close()\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-m", "calipers", "run", "--no-report", "-o",
                             str(tmp_path / "p.json")] + list(options) + [str(prog),
                                                                          str(ready)],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not ready.exists():
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
        time.sleep(0.05)
    return proc


def test_calipers_heap_pid_writes_one_now(tmp_path):
    proc = start_program(tmp_path, "import sys, time\n"
                                   "class Mark:\n    pass\n"
                                   "marks = [Mark() for _ in range(777)]\n", "--cpu-only")
    try:
        for seq in (1, 2):
            ask = calipers("heap", proc.pid)
            assert ask.returncode == 0, ask.stderr
            path = tmp_path / ("p.%d.%d.heap" % (proc.pid, seq))
            assert str(path) in ask.stderr
            h = heap.load(str(path))
            assert h.meta["reason"] == "on request" and h.meta["pid"] == proc.pid
            assert {s.type: s.count for s in h.by_type()}["__main__.Mark"] == 777
        assert not [n for n in os.listdir(tmp_path) if n.startswith(".calipers")]
    finally:
        # Not SIGINT: a test run started in the background by a shell
        # inherits it ignored, and so does the program.
        proc.terminate()
        proc.wait(timeout=60)


def test_heap_of_a_process_not_ours_is_refused_in_one_line():
    # PID 1 is not a calipers run (and this test's own process is not one).
    for pid in (1, os.getpid()):
        proc = calipers("heap", pid)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert "Traceback" not in proc.stderr
    one_line_error(calipers("heap", 99999999), 1, "")


def test_heap_file_errors_are_one_line(tmp_path):
    one_line_error(calipers("heap", tmp_path / "missing.heap"), 1, "missing.heap")
    bad = tmp_path / "bad.heap"
    bad.write_bytes(b"\x89CALHEP\n\x01\x00\x00\x00")
    one_line_error(calipers("heap", bad), 1, "truncated heap dump")
    profile = tmp_path / "p.json"
    profile.write_text("{}")
    one_line_error(calipers("heap", profile), 1, "not a calipers heap dump")
    one_line_error(calipers("heap", tmp_path), 1, "cannot read")
    one_line_error(calipers("heap", "--top", "x", bad), 2, "--top")
    one_line_error(calipers("heap"), 2, "usage: calipers heap")
    assert calipers("heap", "--help").stdout.startswith("usage: calipers heap")
    assert "--heap-at-exit" in calipers("run", "--help").stdout


LINES = """
import json, sys
from calipers import heap
big = [bytearray(100) for _ in range(200)]  # LINE
h = heap.scan()
h.save(sys.argv[1])
old = heap.load(sys.argv[1])
print(json.dumps({"live": [r for r in h.by_line() if r[0] == __file__],
                  "loaded": [r for r in old.by_line() if r[0] == __file__]}))
"""


def test_allocation_lines_survive_the_file(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(LINES)
    line = LINES.splitlines().index("big = [bytearray(100) for _ in range(200)]  # LINE") + 1
    proc = calipers("run", "--no-report", "-o", tmp_path / "p.json", "--memory-interval", "1",
                    script, tmp_path / "h.heap")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["loaded"] == out["live"]
    assert {r[1]: r[2] for r in out["loaded"]}.get(line, 0) >= 200
