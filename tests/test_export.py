"""Exports of the stack table (calipers export, calipers run --export),
each checked by the tool that reads it, not by our own reader:

- pprof by `go tool pprof` (Debian's golang-go; tools/test-all.sh installs
  it when missing): its -top table and -traces against the profile's tree;
- speedscope against speedscope's own JSON Schema (tests/data, vendored
  with its licence; see tests/data/speedscope/README.md) and the checks its importer
  makes beyond the schema (src/lib/file-format.ts);
- collapsed stacks by Brendan Gregg's flamegraph.pl (tests/tools/flamegraph,
  vendored with its licence), whose SVG must parse and name our functions
  with their share;
- the Firefox Profiler's file against its documented processed format,
  version 62 (the profiler itself is an npm-built web application, not
  available here): tables, indices, categories, and the call tree its
  weights make.

A consumer that is missing fails the test: it is never skipped.  The
totals of every export equal the profile's (the sum of the nodes' self
figures) within the rounding of each format's unit."""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from conftest import HERE, TRUTH, cpu

FLAMEGRAPH = HERE / "tools" / "flamegraph" / "flamegraph.pl"
SPEEDSCOPE_SCHEMA = json.loads((HERE / "data" / "speedscope" / "file-format-schema.json").read_text())

PROGRAM = """
import threading, time

def leaf(seconds):
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        pass

def deep():
    leaf(0.3)

def shallow():
    leaf(0.1)

def work():
    deep()
    shallow()

t = threading.Thread(target=work, name="worker")
t.start()
work()
t.join()
time.sleep(0.1)
"""

#: Names no export may be broken by: quotes, the collapsed format's
#: separators (';', a newline, a space before digits), markup, non-ASCII.
HOSTILE = ['say "hi"', "semi;colon;split", "new\nline\r\ttab", "<script>alert(1)</script>",
           "ünïcødé ☃ 𝄞", "ends with 12", "back\\slash&amp;"]


def need(tool, hint):
    path = shutil.which(tool)
    assert path, "%s is needed to check the export (%s); it is missing" % (tool, hint)
    return path


def calipers(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "calipers"] + [str(a) for a in args],
                          capture_output=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr.decode()
    return proc


# ---- the profile's own figures (what every export must say) --------------

class Nodes:
    """The stack table's nodes, with the writers' rounding (whole
    nanoseconds of CPU and of wall time per node)."""

    def __init__(self, profile):
        st = profile["stacks"]
        self.profile = profile
        self.frames = st["frames"]
        self.nodes = [dict(zip(st["node_fields"], n)) for n in st["nodes"]]
        for n in self.nodes:
            cpu = n["python_s"] + n["native_s"] + n["system_s"]
            n["cpu_ns"] = round(cpu * 1e9)
            n["wall_ns"] = round((cpu + n["waiting_s"]) * 1e9)
            n["alloc"] = n["alloc_python_bytes"] + n["alloc_native_bytes"]

    def names(self, i):
        """Function names from the thread's root down to node i."""
        out = []
        while self.nodes[i]["parent"] != -1:
            out.append(self.frames[self.nodes[i]["frame"]]["name"])
            i = self.nodes[i]["parent"]
        return out[::-1]

    def thread_name(self, i):
        th = self.profile["threads"][self.nodes[i]["thread"]]
        procs = self.profile.get("processes") or []
        pid = procs[th.get("process", 0)]["pid"] if procs else self.profile["program"]["pid"]
        name = th["name"] if th["name"] is not None else "thread %d" % th["tid"]
        return "%s (pid %d)" % (name, pid)

    def total(self, key):
        return sum(n[key] for n in self.nodes)

    def by_function(self, key):
        """{function name: (self, inclusive counted once per stack)}."""
        flat, cum = {}, {}
        for i, n in enumerate(self.nodes):
            if not n[key]:
                continue
            names = self.names(i) or ["(no Python frame)"]
            flat[names[-1]] = flat.get(names[-1], 0) + n[key]
            for name in set(names):
                cum[name] = cum.get(name, 0) + n[key]
        return flat, cum


def run_program(run_calipers, tmp_path, *exports):
    prog = tmp_path / "calls.py"
    prog.write_text(textwrap.dedent(PROGRAM))
    options = ["--no-report"]
    for fmt, name in exports:
        options += ["--export", "%s:%s" % (fmt, tmp_path / name)]
    prof = run_calipers(prog, options=options)
    assert prof.returncode == 0, prof.stderr
    return prof, Nodes(prof.profile)


def hostile_profile(profile, tmp_path, alloc=True):
    """A real profile whose frames, files and threads have hostile names,
    and (with alloc) allocation figures on its nodes, saved to a file."""
    doc = json.loads(json.dumps(profile))
    for i, frame in enumerate(doc["stacks"]["frames"]):
        frame["name"] = HOSTILE[i % len(HOSTILE)] + " #%d" % i
        frame["file"] = "/tmp/" + HOSTILE[(i + 3) % len(HOSTILE)] + ".py"
    for i, th in enumerate(doc["threads"]):
        th["name"] = HOSTILE[(i + 1) % len(HOSTILE)]
    fields = doc["stacks"]["node_fields"]
    if alloc:
        for k, node in enumerate(doc["stacks"]["nodes"]):
            node[fields.index("alloc_python_bytes")] = 1000 * (k + 1)
            node[fields.index("alloc_native_bytes")] = 7 * k
            node[fields.index("alloc_samples")] = k % 3
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    return path, Nodes(doc)


# ---- pprof -------------------------------------------------------------------

def pprof(*args):
    go = need("go", "Debian's golang-go: apt-get install golang-go")
    env = dict(os.environ, PPROF_TMPDIR=str(Path(args[-1]).parent))
    proc = subprocess.run([go, "tool", "pprof", "-symbolize=none"] + [str(a) for a in args],
                          capture_output=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode("utf-8")  # as written: no newline translation


def ms(text):
    """A pprof figure printed with -unit=ms: "12.34ms", or "0"."""
    return 0.0 if text == "0" else float(text[:-2])


def pprof_top(path, index="cpu"):
    """{function: (flat ms, cum ms)} and the total, from go tool pprof -top."""
    out = pprof("-top", "-unit=ms", "-nodefraction=0", "-edgefraction=0",
                "-nodecount=100000", "-sample_index=" + index, path)
    total = float(re.search(r"Total samples = ([\d.]+)ms", out).group(1)) \
        if "Total samples = " in out else 0.0
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^\s*(\S+)\s+\S+%\s+\S+%\s+(\S+)\s+\S+%\s+(.*)$", line)
        if m and m.group(1) != "flat":
            name = m.group(3)
            flat, cum = rows.get(name, (0.0, 0.0))
            rows[name] = (flat + ms(m.group(1)), max(cum, ms(m.group(2))))
    return rows, total


def pprof_traces(path):
    """{(thread label, (frame names, root first)): ms} from -traces."""
    out = pprof("-traces", "-unit=ms", path)
    traces = {}
    for block in out.split("-----------+-------------------------------------------------------")[1:]:
        labels, names, value = {}, [], None
        for line in block.strip("\n").splitlines():
            m = re.match(r"^\s+(\w+):\s+(.*)$", line)
            if value is None and m:
                labels[m.group(1)] = m.group(2)
                continue
            m = re.match(r"^\s+(\S+ms|0)\s+(.*)$", line) if value is None else None
            if m:
                value = ms(m.group(1))
                names.append(m.group(2))
            elif line.strip():
                names.append(line.strip())
        if value is None:
            continue  # after the last separator
        key = (labels.get("thread"), tuple(names[::-1]))
        traces[key] = traces.get(key, 0.0) + value
    return traces


def test_pprof_read_by_go_tool_pprof(run_calipers, tmp_path):
    prof, nodes = run_program(run_calipers, tmp_path, ("pprof", "run.pb.gz"))
    path = tmp_path / "run.pb.gz"
    # run --export and calipers export write the same bytes (gzip without
    # a time stamp).
    calipers("export", "-o", tmp_path / "cli.pb.gz", prof.outfile)
    assert (tmp_path / "cli.pb.gz").read_bytes() == path.read_bytes()
    assert gzip.decompress(path.read_bytes())

    # -top: the total and each of the program's functions, flat and cum,
    # against the tree (pprof prints hundredths of a millisecond).
    rows, total = pprof_top(path)
    assert total == pytest.approx(nodes.total("cpu_ns") / 1e6, abs=0.01)
    flat, cum = nodes.by_function("cpu_ns")
    for name in ("leaf", "deep", "shallow", "work"):
        assert name in rows, (name, sorted(rows))
        assert rows[name][0] == pytest.approx(flat.get(name, 0) / 1e6, abs=0.011), name
        assert rows[name][1] == pytest.approx(cum[name] / 1e6, abs=0.011), name
    assert rows["leaf"][0] > 0.5 * total  # the program's CPU went to leaf
    # And the function table, written from the same samples, agrees (its
    # figures are rounded to the microsecond).
    table = prof.functions("calls.py")
    for name in ("leaf", "deep", "shallow", "work"):
        want = cpu(table[name]["total"]) * 1e3
        assert abs(rows[name][1] - want) <= 0.02 + 1e-3 * want, name
    # The wall sample type carries the waiting too (time.sleep, join).
    _, wall = pprof_top(path, "wall")
    assert wall == pytest.approx(nodes.total("wall_ns") / 1e6, abs=0.01)
    assert wall > total + 80  # the 0.1 s sleep at least

    # -traces: every stack with its thread, as the tree has it (a sample
    # per node with a self figure: a stack that only waited, or only
    # allocated, shows 0 CPU).
    want = {}
    for i, n in enumerate(nodes.nodes):
        if n["cpu_ns"] or n["wall_ns"] or n["alloc"] or n["alloc_samples"]:
            key = (nodes.thread_name(i), tuple(nodes.names(i) or ["(no Python frame)"]))
            want[key] = want.get(key, 0.0) + n["cpu_ns"] / 1e6
    got = pprof_traces(path)
    assert set(got) == set(want)
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=0.011 * len(want)), key
    threads = {thread for thread, _ in got}
    assert {t.split(" (pid")[0] for t in threads} >= {"MainThread", "worker"}
    worker = [stack for thread, stack in got if thread.startswith("worker ")]
    assert any(stack[-3:] == ("work", "deep", "leaf") for stack in worker)


def test_pprof_allocation_and_hostile_names(run_calipers, tmp_path):
    prof, _ = run_program(run_calipers, tmp_path)
    path, nodes = hostile_profile(prof.profile, tmp_path)
    out = tmp_path / "hostile.pb.gz"
    calipers("export", "--format", "pprof", "-o", out, path)
    rows, total = pprof_top(out)
    assert total == pytest.approx(nodes.total("cpu_ns") / 1e6, abs=0.01)
    # Allocation figures, generically: pprof reads them as bytes.
    raw = pprof("-raw", out)
    assert "alloc_space/bytes" in raw and "alloc_samples/count" in raw
    top = pprof("-top", "-sample_index=alloc_space", "-unit=B", "-nodefraction=0", out)
    got = float(re.search(r"Total samples = ([\d.]+)B", top).group(1))
    assert got == nodes.total("alloc")
    # The names come back whole (the newline one included, in -raw).
    for name in set(rows) - {"(no Python frame)"}:
        assert any(name.startswith(h.split("\n")[0]) for h in HOSTILE), name
    for i, frame in enumerate(nodes.frames):
        if any(nodes.nodes[k]["frame"] == i and nodes.nodes[k]["cpu_ns"]
               for k in range(len(nodes.nodes))):
            assert frame["name"] in raw, frame["name"]


# ---- speedscope ---------------------------------------------------------------

def check_speedscope(doc):
    """speedscope's schema, then what its importer checks beyond it."""
    jsonschema.validate(doc, SPEEDSCOPE_SCHEMA)
    nframes = len(doc["shared"]["frames"])
    for p in doc["profiles"]:
        assert p["type"] == "sampled"
        assert len(p["samples"]) == len(p["weights"]), p["name"]
        assert all(0 <= f < nframes and f == int(f) for s in p["samples"] for f in s)
        assert p["endValue"] - p["startValue"] == sum(p["weights"])


def test_speedscope_valid_and_complete(run_calipers, tmp_path):
    prof, nodes = run_program(run_calipers, tmp_path, ("speedscope", "run.speedscope.json"))
    doc = json.loads((tmp_path / "run.speedscope.json").read_text())
    check_speedscope(doc)
    frames = doc["shared"]["frames"]
    assert [f["name"] for f in frames[:-1]] == [f["name"] for f in nodes.frames]
    assert frames[-1] == {"name": "(no Python frame)"}
    # One time profile per thread, in thread order, weighing each thread's
    # time; one memory profile per thread that allocated, its bytes.
    threads = prof.profile["threads"]
    timed = [p for p in doc["profiles"] if p["unit"] == "nanoseconds"]
    memory = [p for p in doc["profiles"] if p["unit"] == "bytes"]
    assert len(timed) == len(threads) and len(timed) + len(memory) == len(doc["profiles"])
    for k, p in enumerate(timed):
        assert p["name"].endswith(" - time")
        want = sum(n["wall_ns"] for n in nodes.nodes if n["thread"] == k)
        assert sum(p["weights"]) == want
    allocated = {n["thread"] for n in nodes.nodes if n["alloc"]}
    assert len(memory) == len(allocated) and all(p["name"].endswith(" - memory") for p in memory)
    assert sum(sum(p["weights"]) for p in memory) == nodes.total("alloc")
    # Stacks root first, by frame: the worker's leaf under work -> deep.
    worker = next(p for p in doc["profiles"] if p["name"].startswith("worker "))
    stacks = [[frames[f]["name"] for f in s] for s in worker["samples"]]
    assert any(s[-3:] == ["work", "deep", "leaf"] for s in stacks)
    assert sum(p_["weights"][i] for p_ in timed
               for i in range(len(p_["samples"]))) == nodes.total("wall_ns")


def test_speedscope_memory_and_hostile_names(run_calipers, tmp_path):
    prof, _ = run_program(run_calipers, tmp_path)
    path, nodes = hostile_profile(prof.profile, tmp_path)
    out = tmp_path / "hostile.speedscope.json"
    calipers("export", "--format", "speedscope", "-o", out, path)
    doc = json.loads(out.read_text(encoding="utf-8"))
    check_speedscope(doc)
    assert [f["name"] for f in doc["shared"]["frames"][:-1]] == [f["name"] for f in nodes.frames]
    assert [f["file"] for f in doc["shared"]["frames"][:-1]] == [f["file"] for f in nodes.frames]
    memory = [p for p in doc["profiles"] if p["unit"] == "bytes"]
    assert memory and all(p["name"].endswith(" - memory") for p in memory)
    assert sum(sum(p["weights"]) for p in memory) == nodes.total("alloc")


# ---- collapsed stacks and flamegraph.pl ----------------------------------------

def flamegraph(folded, svg, *options):
    """Render `folded` with flamegraph.pl; ({frame: [its boxes' counts]},
    {frame: [the percentages printed for them]}) from the SVG's titles."""
    perl = need("perl", "Debian's perl")
    with open(svg, "wb") as f:
        proc = subprocess.run([perl, str(FLAMEGRAPH)] + list(options) + [str(folded)],
                              stdout=f, stderr=subprocess.PIPE, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert not proc.stderr, proc.stderr.decode()  # no warning (malformed input, UTF-8)
    root = ET.parse(str(svg)).getroot()  # well-formed XML
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    rects, shares = {}, {}
    for title in titles:
        m = re.match(r"^(.*) \(([\d,]+) (\w+), ([\d.]+)%\)$", title, re.S)
        if m:
            rects.setdefault(m.group(1), []).append(int(m.group(2).replace(",", "")))
            shares.setdefault(m.group(1), []).append(float(m.group(4)))
    return rects, shares


def clean(text):
    return "".join("," if c == ";" else "?" if ord(c) < 0x20 or c == "\x7f" else c
                   for c in text)


def collapsed_want(nodes, key, scale):
    """{stack: value} as docs/FORMAT.md's collapsed export describes it."""
    want = {}
    for i, n in enumerate(nodes.nodes):
        value = round(n[key] / scale)
        if value <= 0:
            continue
        stack, k = [], i
        while nodes.nodes[k]["parent"] != -1:
            f = nodes.frames[nodes.nodes[k]["frame"]]
            stack.append("%s (%s:%d)" % (clean(f["name"]), clean(f["file"]), f["first_line"]))
            k = nodes.nodes[k]["parent"]
        stack = [clean(nodes.thread_name(i))] + stack[::-1]
        if nodes.nodes[i]["parent"] == -1:
            stack.append("(no Python frame)")
        want[tuple(stack)] = want.get(tuple(stack), 0) + value
    return want


def parse_folded(text):
    lines = text.splitlines()
    out = []
    for line in lines:
        stack, _, value = line.rpartition(" ")
        out.append((stack.split(";"), int(value)))
    return out


def test_collapsed_rendered_by_flamegraph_pl(run_calipers, tmp_path):
    prof, nodes = run_program(run_calipers, tmp_path, ("collapsed", "run.folded"))
    folded = tmp_path / "run.folded"
    stacks = parse_folded(folded.read_text())
    calipers("export", "--format", "collapsed", "-o", tmp_path / "cli.folded", prof.outfile)
    assert (tmp_path / "cli.folded").read_bytes() == folded.read_bytes()
    # Microseconds: each node rounds to one, so the total is within that.
    total_us = nodes.total("wall_ns") / 1e3
    assert abs(sum(v for _, v in stacks) - total_us) <= len(nodes.nodes)
    # Root first: the thread, then the program's frames.
    assert all(re.match(r"^.+ \(pid \d+\)$", s[0]) for s, _ in stacks)
    assert any(s[0].startswith("worker (pid") and s[-3:] == [
        "work (%s:15)" % (tmp_path / "calls.py"), "deep (%s:9)" % (tmp_path / "calls.py"),
        "leaf (%s:4)" % (tmp_path / "calls.py")] for s, _ in stacks), stacks

    rects, shares = flamegraph(folded, tmp_path / "run.svg", "--countname=us")
    assert rects["all"] == [sum(v for _, v in stacks)]
    # Each of the program's functions, with its share: the sum of its
    # boxes is its time on the stack (no recursion here), from the tree.
    _, cum = nodes.by_function("wall_ns")
    for name, first in (("leaf", 4), ("deep", 9), ("shallow", 12), ("work", 15)):
        label = "%s (%s:%d)" % (name, tmp_path / "calls.py", first)
        assert label in rects, (label, sorted(rects))
        assert abs(sum(rects[label]) - cum[name] / 1e3) <= len(nodes.nodes), name
        # and the share flamegraph.pl prints for it (to 0.01%) is its share
        # of the profile's time.
        share = sum(shares[label])
        assert share == pytest.approx(100 * cum[name] / nodes.total("wall_ns"),
                                      abs=0.01 * len(rects[label]) + 0.01), name


def test_collapsed_hostile_names_and_alloc(run_calipers, tmp_path):
    prof, _ = run_program(run_calipers, tmp_path)
    path, nodes = hostile_profile(prof.profile, tmp_path)
    for fmt, key, scale in (("collapsed", "wall_ns", 1e3), ("collapsed-alloc", "alloc", 1)):
        out = tmp_path / ("hostile." + fmt)
        calipers("export", "--format", fmt, "-o", out, path)
        text = out.read_bytes().decode("utf-8")
        stacks = parse_folded(text)
        # Each line is one stack of the tree, whole: no name split a frame
        # or a line (docs: ';' becomes ',' and controls '?').
        assert sorted(collapsed_want(nodes, key, scale).items()) == sorted(
            (tuple(s), v) for s, v in stacks)
        assert "semi,colon,split" in text and "new?line??tab" in text
        assert "<script>alert(1)</script>" in text and "ünïcødé ☃ 𝄞" in text
        rects, _ = flamegraph(out, tmp_path / ("hostile-%s.svg" % fmt))
        assert rects["all"] == [sum(v for _, v in stacks)]
        assert any("<script>alert(1)</script>" in name for name in rects)


# ---- the command line -------------------------------------------------------------

def test_export_command_line(run_calipers, tmp_path):
    prof, _ = run_program(run_calipers, tmp_path)
    src = Path(prof.outfile)
    # The default format is pprof, next to the profile.
    proc = calipers("export", src)
    assert (tmp_path / "profile.pb.gz").exists()
    assert b"pprof export written to" in proc.stderr
    for fmt, ending in (("speedscope", ".speedscope.json"), ("collapsed", ".folded"),
                        ("collapsed-alloc", ".alloc.folded"), ("firefox", ".firefox.json")):
        calipers("export", "--format=" + fmt, src)
        assert (tmp_path / ("profile" + ending)).exists(), fmt
    # -o - writes to standard output; the same bytes as the file.
    proc = calipers("export", "--format", "collapsed", "-o", "-", src)
    assert proc.stdout == (tmp_path / "profile.folded").read_bytes()
    # Deterministic: the same profile, the same bytes.
    calipers("export", "-o", tmp_path / "again.pb.gz", src)
    assert (tmp_path / "again.pb.gz").read_bytes() == (tmp_path / "profile.pb.gz").read_bytes()

    old = json.loads(src.read_text())
    del old["stacks"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    broken = json.loads(src.read_text())
    broken["stacks"]["nodes"][1][0] = 5  # a parent after its child
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "target", tmp_path / "link")
    bad = [
        (["--format", "svg", src], "unknown format 'svg'"),
        ([tmp_path / "missing.json"], "No such file or directory"),
        ([tmp_path / "old.json"], "has no stack table"),
        ([tmp_path / "broken.json"], "stacks.nodes[1]: its parent does not come before it"),
        (["-o", "/dev/null", src], "character device"),
        (["-o", tmp_path / "fifo", src], "FIFO"),
        (["-o", tmp_path / "link", src], "symbolic link"),
        (["-o", tmp_path, src], "is a directory"),
        (["-o", tmp_path / "no" / "such.pb.gz", src], "no such directory"),
        (["--format"], "expected a value"),
        ([], "no profile to export"),
        ([src, src], "takes one profile"),
        (["--bogus", src], "unknown option --bogus"),
        (["-o", src, src], "over the profile it is made from"),
    ]
    (tmp_path / "corrupt.json").write_text('{"schema": "calipers/1", "program": ')
    bad.append(([tmp_path / "corrupt.json"], "corrupt profile"))
    for args, message in bad:
        proc = calipers("export", *args, check=False)
        err = proc.stderr.decode()
        assert proc.returncode != 0, args
        assert message in err, (args, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "target").exists()
    help_ = calipers("export", "--help").stdout.decode()
    assert help_.startswith("usage: calipers export") and "collapsed-alloc" in help_
    assert "firefox" in help_


def test_run_export_outputs_checked_before_the_program(run_calipers, tmp_path):
    prog = tmp_path / "marker.py"
    prog.write_text("open(%r, 'w').close()\n" % str(tmp_path / "ran"))
    for value, message in (("pprof:/dev/null", "character device"),
                           ("flame:x.svg", "unknown format 'flame'"),
                           ("pprof", "expected FORMAT:FILE"),
                           ("pprof:" + str(tmp_path / "no" / "x.pb.gz"), "no such directory"),
                           ("pprof:profile.json", "the profile is written there too")):
        prof = run_calipers(prog, options=["--export", value])
        assert prof.returncode == 2, (value, prof.stderr)
        assert message in prof.stderr and len(prof.stderr.splitlines()) == 1, prof.stderr
        assert not (tmp_path / "ran").exists()
    prof = run_calipers(prog, options=["--export", "pprof:x", "--export", "collapsed:x"])
    assert prof.returncode == 2 and "the pprof export is written there too" in prof.stderr
    # Repeatable, with the report naming each.
    prof = run_calipers(prog, options=["--export", "pprof:a.pb.gz",
                                       "--export", "collapsed:a.folded"])
    assert prof.returncode == 0, prof.stderr
    assert "pprof export written to %s" % (tmp_path / "a.pb.gz") in prof.stderr
    assert "collapsed export written to %s" % (tmp_path / "a.folded") in prof.stderr
    assert gzip.decompress((tmp_path / "a.pb.gz").read_bytes())


def test_run_export_rewritten_while_running(run_calipers, tmp_path):
    """--profile-interval rewrites the exports with the profile: the
    program sees its own export appear before it ends."""
    prog = tmp_path / "waits.py"
    export = tmp_path / "live.folded"
    prog.write_text(textwrap.dedent("""
        import json, os, sys, time

        def spin(seconds):
            t0 = time.thread_time()
            while time.thread_time() - t0 < seconds:
                pass

        deadline = time.time() + 60
        while not os.path.exists(%r) and time.time() < deadline:
            spin(0.05)
        with open(sys.argv[1], "w") as f:
            json.dump({"seen": os.path.exists(%r)}, f)
        """ % (str(export), str(export))))
    prof = run_calipers(prog, TRUTH, options=["--no-report", "--profile-interval", "0.2",
                                              "--export", "collapsed:%s" % export])
    assert prof.returncode == 0, prof.stderr
    assert prof.truth == {"seen": True}
    assert "spin (%s:" % prog in export.read_text()


def test_child_processes_keep_their_pid(run_calipers, tmp_path):
    """A merged child's stacks carry its own pid: pprof's pid label and
    the collapsed stacks' thread frame."""
    prog = tmp_path / "kids.py"
    prog.write_text(textwrap.dedent("""
        import multiprocessing, time

        def in_child():
            t0 = time.thread_time()
            while time.thread_time() - t0 < 0.2:
                pass

        if __name__ == "__main__":
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                pool.apply(in_child)
        """))
    prof = run_calipers(prog, options=["--no-report", "--export", "pprof:kids.pb.gz",
                                       "--export", "collapsed:kids.folded",
                                       "--export", "firefox:kids.firefox.json"])
    assert prof.returncode == 0, prof.stderr
    pids = [p["pid"] for p in prof.profile["processes"]]
    assert len(pids) >= 2
    traces = pprof_traces(tmp_path / "kids.pb.gz")
    child = [thread for thread, stack in traces if stack and stack[-1] == "in_child"]
    assert child and all(" (pid %d)" % pids[0] not in t for t in child), child
    assert {int(re.search(r"\(pid (\d+)\)$", t).group(1)) for t in child} <= set(pids[1:])
    folded = parse_folded((tmp_path / "kids.folded").read_text())
    assert any(s[0] in child and s[-1].startswith("in_child (") for s, _ in folded)
    # Firefox: the child's threads carry its pid, each process has one main
    # thread, and in_child is on a child's thread.
    ff = json.loads((tmp_path / "kids.firefox.json").read_text())
    check_firefox(ff)
    assert [t["pid"] for t in ff["threads"]] == \
        [str(pids[t.get("process", 0)]) for t in prof.profile["threads"]]
    ran = [th["pid"] for k, th in enumerate(ff["threads"])
           if any(names[-1:] == ("in_child",) for names, _ in firefox_tree(ff, k))]
    assert ran and set(ran) <= {str(p) for p in pids[1:]}, ran


# ---- the Firefox Profiler ---------------------------------------------------------
#
# The Firefox Profiler (a web application, built with npm) cannot run here,
# so its file is checked against the documented processed profile format,
# version 62 (firefox-devtools/profiler: src/types/profile.ts at the commit
# that introduced 62, docs-developer/CHANGELOG-formats.md): every table's
# columns, every index, the categories, the samples' order, and the call
# tree it would compute (the sum of the sample weights under each stack).

FIREFOX_COLUMNS = {
    "stackTable": ["frame", "prefix"],
    "frameTable": ["address", "inlineDepth", "category", "subcategory", "func",
                   "nativeSymbol", "innerWindowID", "line", "column"],
    "funcTable": ["name", "isJS", "relevantForJS", "resource", "source", "lineNumber",
                  "columnNumber"],
    "resourceTable": ["lib", "name", "host", "type"],
    "nativeSymbols": ["libIndex", "address", "name", "functionSize"],
    "sources": ["id", "filename", "startLine", "startColumn", "sourceMapURL"],
}
FIREFOX_COLORS = {"transparent", "purple", "green", "orange", "yellow", "lightblue", "blue",
                  "brown", "magenta", "red", "lightred", "darkgrey", "grey"}
FIREFOX_KINDS = {"python": "Python", "native": "Native", "system": "System",
                 "waiting": "Waiting"}


def is_index(v, n):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n


def check_table(table, columns, name):
    n = table["length"]
    assert isinstance(n, int) and n >= 0, name
    for c in columns:
        assert len(table[c]) == n, (name, c, len(table[c]), n)
    return n


def check_firefox(doc):
    """The processed format, version 62: what the profiler's loader and
    its call tree rely on."""
    meta = doc["meta"]
    assert meta["preprocessedProfileVersion"] == 62 and meta["version"] == 34
    assert meta["symbolicated"] is True and meta["interval"] > 0
    assert meta["sampleUnits"]["time"] == "ms"
    assert isinstance(meta["startTime"], (int, float)) and meta["startTime"] > 1e12
    cats = meta["categories"]
    assert any(c["color"] == "grey" for c in cats)  # the default category
    for c in cats:
        assert c["color"] in FIREFOX_COLORS and c["subcategories"][0] == "Other", c
    schemas = {s["name"] for s in meta["markerSchema"]}
    assert doc["libs"] == [] and isinstance(doc["pages"], list)

    shared = doc["shared"]
    strings = shared["stringArray"]
    assert all(isinstance(s, str) for s in strings)
    n = {k: check_table(shared[k], cols, k) for k, cols in FIREFOX_COLUMNS.items()}
    st, fr, fn, src = (shared[k] for k in ("stackTable", "frameTable", "funcTable", "sources"))
    for i in range(n["stackTable"]):
        p = st["prefix"][i]
        assert p is None or (is_index(p, i)), ("prefix", i, p)
        assert is_index(st["frame"][i], n["frameTable"])
    for i in range(n["frameTable"]):
        assert is_index(fr["func"][i], n["funcTable"])
        c = fr["category"][i]
        assert is_index(c, len(cats)) and is_index(fr["subcategory"][i],
                                                   len(cats[c]["subcategories"]))
        assert fr["line"][i] is None or fr["line"][i] > 0
        assert fr["address"][i] == -1 and fr["nativeSymbol"][i] is None
    for i in range(n["funcTable"]):
        assert is_index(fn["name"][i], len(strings))
        assert fn["resource"][i] == -1
        assert fn["source"][i] is None or is_index(fn["source"][i], n["sources"])
    for i in range(n["sources"]):
        assert is_index(src["filename"][i], len(strings))

    pids = {}
    for th in doc["threads"]:
        assert isinstance(th["pid"], str) and isinstance(th["tid"], str)
        assert isinstance(th["name"], str) and isinstance(th["isMainThread"], bool)
        pids.setdefault(th["pid"], []).append(th["isMainThread"])
        tables = [("samples", th["samples"])]
        if "nativeAllocations" in th:
            tables.append(("nativeAllocations", th["nativeAllocations"]))
            assert th["nativeAllocations"]["weightType"] == "bytes"
        assert th["samples"]["weightType"] == "tracing-ms"
        for name, t in tables:
            check_table(t, ["time", "stack", "weight"], name)
            assert all(is_index(s, n["stackTable"]) for s in t["stack"])
            assert t["time"] == sorted(t["time"]), "samples out of time order"
            assert all(w >= 0 for w in t["weight"])
        m = th["markers"]
        check_table(m, ["data", "name", "startTime", "endTime", "phase", "category"], "markers")
        for k in range(m["length"]):
            assert is_index(m["name"][k], len(strings)) and is_index(m["category"][k], len(cats))
            assert m["data"][k]["type"] in schemas
            assert m["phase"][k] in (0, 1, 2, 3)
    # One main thread in each process.
    assert all(flags.count(True) == 1 for flags in pids.values()), pids
    # Shown: every thread with samples, and the main thread (selected).
    shown = [k for k, th in enumerate(doc["threads"])
             if th["samples"]["length"] or "nativeAllocations" in th
             or k in meta["initialSelectedThreads"]]
    assert meta["initialVisibleThreads"] == shown
    (selected,) = meta["initialSelectedThreads"]
    assert doc["threads"][selected]["isMainThread"]
    for c in doc["counters"]:
        assert c["pid"] in pids and is_index(c["mainThreadIndex"], len(doc["threads"]))
        check_table(c["samples"], ["time", "count"], "counter")
        assert c["samples"]["time"] == sorted(c["samples"]["time"])
        assert set(c["display"]) >= {"graphType", "unit", "color", "markerSchemaLocation",
                                     "sortWeight", "label"}


def firefox_stack(doc, stack):
    """(function names from the root down, the innermost frame's category name)."""
    sh = doc["shared"]
    st, fr, fn, strings = (sh["stackTable"], sh["frameTable"], sh["funcTable"],
                           sh["stringArray"])
    names, s = [], stack
    category = doc["meta"]["categories"][fr["category"][st["frame"][stack]]]["name"]
    while s is not None:
        names.append(strings[fn["name"][fr["func"][st["frame"][s]]]])
        s = st["prefix"][s]
    return tuple(names[::-1]), category


def firefox_tree(doc, k, table="samples"):
    """{(names, category): summed weight} of thread k: the call tree."""
    out = {}
    t = doc["threads"][k].get(table) or {"stack": [], "weight": []}
    for s, w in zip(t["stack"], t["weight"]):
        key = firefox_stack(doc, s)
        out[key] = out.get(key, 0) + w
    return out


def node_tree(nodes, k, scale, every=1):
    """The same from the stack table: {(names, category): ms} of thread k."""
    out = {}
    for i, n in enumerate(nodes.nodes):
        if n["thread"] != k:
            continue
        names = nodes.names(i) or ["(no Python frame)"]
        for kind, cat in FIREFOX_KINDS.items():
            ns = round(n[kind + "_s"] * 1e9)
            if ns:
                out[(tuple(names), cat)] = out.get((tuple(names), cat), 0) + ns * scale
    return out


def same_tree(got, want, tol):
    assert set(got) == set(want), (set(got) ^ set(want))
    for k in want:
        assert abs(got[k] - want[k]) <= tol, (k, got[k], want[k])


def without_timeline(profile, tmp_path):
    doc = json.loads(json.dumps(profile))
    doc["stacks"].pop("timeline", None)
    path = tmp_path / "untimed.json"
    path.write_text(json.dumps(doc))
    return path, Nodes(doc)


def test_firefox_without_timeline(run_calipers, tmp_path):
    """A profile with no timeline of samples: each stack's four times are
    samples laid end to end; the call tree is the stack table's, exactly."""
    prof, _ = run_program(run_calipers, tmp_path)
    path, nodes = without_timeline(prof.profile, tmp_path)
    out = tmp_path / "untimed.firefox.json"
    calipers("export", "--format", "firefox", "-o", out, path)
    doc = json.loads(out.read_text())
    check_firefox(doc)
    strings = doc["shared"]["stringArray"]
    names = [strings[i] for i in doc["shared"]["funcTable"]["name"]]
    assert names == [f["name"] for f in nodes.frames] + ["(no Python frame)"]
    threads = prof.profile["threads"]
    assert [t["name"] for t in doc["threads"]] == [t["name"] for t in threads]
    assert [t["tid"] for t in doc["threads"]] == [str(t["tid"]) for t in threads]
    for k, th in enumerate(doc["threads"]):
        # The call tree, by stack and category: each within a nanosecond.
        same_tree(firefox_tree(doc, k), node_tree(nodes, k, 1e-6), 1e-6)
        total = sum(n["wall_ns"] for n in nodes.nodes if n["thread"] == k)
        assert abs(sum(th["samples"]["weight"]) * 1e6 - total) < 1 + 1e-3 * len(nodes.nodes)
        # Laid end to end from 0: each sample starts where the last ended.
        t, w = th["samples"]["time"], th["samples"]["weight"]
        assert t[0] == 0 and all(abs(t[i] - t[i - 1] - w[i - 1]) < 2e-6
                                 for i in range(1, len(t)))
        m = th["markers"]
        assert strings[m["name"][0]] == "No timeline" and "laid end to end" in m["data"][0]["text"]
    worker = next(k for k, t in enumerate(doc["threads"]) if t["name"] == "worker")
    tree = firefox_tree(doc, worker)
    # The worker's 300 ms of CPU in deep's leaf, over its kinds of time (the
    # split between Python, native and system of a loop reading its CPU
    # clock is the machine's: CI on 3.14t had no kind over 200 ms).
    assert sum(w for (names, _), w in tree.items() if names[-3:] == ("work", "deep", "leaf")) > 200
    # The stack table's allocations are native allocations at their node.
    for k, th in enumerate(doc["threads"]):
        want = sum(n["alloc"] for n in nodes.nodes if n["thread"] == k)
        got = sum(th["nativeAllocations"]["weight"]) if "nativeAllocations" in th else 0
        assert got == want, (th["name"], got, want)


def timeline_for(profile, every=1, shuffle=False):
    """A timeline of samples built from the profile's own tree (what a
    profiler that keeps one writes, docs/FORMAT.md): per node, one sample
    per kind of time it has, and one per kind of allocation, at times
    that rise through the run; every `every`-th kept."""
    fields = profile["stacks"]["node_fields"]
    kinds = ["python", "native", "system", "waiting", "alloc_python", "alloc_native", "copy"]
    per = {}
    t = 1000
    for i, node in enumerate(profile["stacks"]["nodes"]):
        n = dict(zip(fields, node))
        for k, kind in enumerate(kinds[:4]):
            ns = round(n[kind + "_s"] * 1e9)
            if ns:
                t += 977
                per.setdefault(n["thread"], []).append([t, i, k, ns])
        for k, col in ((4, "alloc_python_bytes"), (5, "alloc_native_bytes"), (6, "copied_bytes")):
            if n[col]:
                t += 13
                per.setdefault(n["thread"], []).append([t, i, k, n[col]])
    threads = []
    for th in sorted(per):
        kept = per[th][::every]
        if shuffle:
            kept = kept[1::2] + kept[::2]
        threads.append({"thread": th, "samples": kept})
    return {"every": every, "kinds": kinds, "sample_fields": ["time_ns", "node", "kind", "value"],
            "threads": threads}


def test_firefox_timeline(run_calipers, tmp_path):
    """With stacks.timeline: each CPU sample at its time with its kind's
    category, weighing its time times the stride; allocations in the
    native allocations table; copies left out."""
    prof, _ = run_program(run_calipers, tmp_path)
    doc = json.loads(json.dumps(prof.profile))
    fields = doc["stacks"]["node_fields"]
    for k, node in enumerate(doc["stacks"]["nodes"]):
        node[fields.index("alloc_python_bytes")] = 4096 * (k + 1)
        node[fields.index("alloc_native_bytes")] = 100 * (k % 3)
        node[fields.index("copied_bytes")] = 5
    doc["stacks"]["timeline"] = timeline_for(doc, shuffle=True)
    path = tmp_path / "timed.json"
    path.write_text(json.dumps(doc))
    nodes = Nodes(doc)
    out = tmp_path / "timed.firefox.json"
    calipers("export", "--format", "firefox", "-o", out, path)
    ff = json.loads(out.read_text())
    check_firefox(ff)
    want_times = {}
    for th in doc["stacks"]["timeline"]["threads"]:
        want_times[th["thread"]] = sorted(s[0] / 1e6 for s in th["samples"] if s[2] < 4)
    for k, th in enumerate(ff["threads"]):
        same_tree(firefox_tree(ff, k), node_tree(nodes, k, 1e-6), 1e-6)
        assert th["samples"]["time"] == pytest.approx(want_times.get(k, []), abs=1e-9)
        assert th["markers"]["length"] == 0  # a whole timeline: nothing to note
        alloc = sum(n["alloc"] for n in nodes.nodes if n["thread"] == k)
        got = sum(th["nativeAllocations"]["weight"]) if "nativeAllocations" in th else 0
        assert got == alloc
        if "nativeAllocations" in th:
            cats = {c for (_, c) in firefox_tree(ff, k, "nativeAllocations")}
            assert cats <= {"Memory"}
    # A thinned timeline: each kept sample weighs `every` of them, and a
    # note says so.
    doc["stacks"]["timeline"] = timeline_for(doc, every=4)
    path.write_text(json.dumps(doc))
    calipers("export", "--format", "firefox", "-o", out, path)
    ff = json.loads(out.read_text())
    check_firefox(ff)
    for entry in doc["stacks"]["timeline"]["threads"]:
        th = ff["threads"][entry["thread"]]
        want = sum(s[3] for s in entry["samples"] if s[2] < 4) * 4 / 1e6
        assert sum(th["samples"]["weight"]) == pytest.approx(want, abs=1e-6)
        strings = ff["shared"]["stringArray"]
        assert strings[th["markers"]["name"][0]] == "Thinned timeline"
        assert "each weighs as 4 samples" in th["markers"]["data"][0]["text"]

    # A timeline that does not hold together is refused in one line.
    def broken(change, message):
        bad = json.loads(json.dumps(doc))
        change(bad["stacks"]["timeline"])
        p = tmp_path / "bad.json"
        p.write_text(json.dumps(bad))
        proc = calipers("export", "--format", "firefox", "-o", tmp_path / "bad.ff.json", p,
                        check=False)
        err = proc.stderr.decode()
        # The check every profile passes refuses some first, naming the
        # member by its place; the writer names it by its field.
        messages = message if isinstance(message, tuple) else (message,)
        assert proc.returncode != 0 and any(m in err for m in messages), err
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err

    other = {n["thread"] for n in nodes.nodes} - {0}
    assert other, "the program has a second thread"
    node_of_other = next(i for i, n in enumerate(nodes.nodes) if n["thread"] in other)
    broken(lambda tl: tl["threads"][0]["samples"][0].__setitem__(1, node_of_other),
           "stacks.timeline.threads[0].samples[0]: node: not a node of its thread")
    broken(lambda tl: tl["threads"][0]["samples"][0].__setitem__(1, 10**6), "no such node")
    # (A kind out of range is refused by the check every profile passes.)
    broken(lambda tl: tl["threads"][0]["samples"][0].__setitem__(2, 7), "[2]: 7 is out of range")
    broken(lambda tl: tl["threads"][0]["samples"][0].__setitem__(0, -1),
           ("time_ns", "samples[0][0]: -1 is out of range"))
    broken(lambda tl: tl["threads"][0]["samples"][0].__setitem__(3, "1"),
           ("value", "samples[0][3]: expected"))
    broken(lambda tl: tl.__setitem__("every", 0), "stacks.timeline.every")
    broken(lambda tl: tl.__setitem__("sample_fields", ["time_ns", "node", "kind"]),
           'sample_fields has no "value"')
    broken(lambda tl: tl["threads"][0].__setitem__("thread", 99), "stacks.timeline.threads[0]")


def test_firefox_run_export_and_footprint(run_calipers, tmp_path):
    """run --export firefox:FILE, on a program that allocates: the footprint
    is the Memory counter (its changes add up to the profile's points), and
    each thread's samples weigh its time in the tree."""
    prog = tmp_path / "grows.py"
    prog.write_text(textwrap.dedent("""
        import time
        keep = []
        for i in range(40):
            keep.append(bytearray(1 << 20))
            t0 = time.thread_time()
            while time.thread_time() - t0 < 0.005:
                pass
        """))
    prof = run_calipers(prog, options=["--no-report", "--export", "firefox:grows.ff.json"])
    assert prof.returncode == 0, prof.stderr
    doc = json.loads((tmp_path / "grows.ff.json").read_text())
    check_firefox(doc)
    points = prof.profile["summary"]["memory"]["timeline"]
    assert len(points) > 2 and points[-1][1] > 30 << 20
    (counter,) = doc["counters"]
    assert counter["category"] == "Memory" and counter["display"]["unit"] == "bytes"
    assert counter["samples"]["time"] == pytest.approx([p[0] * 1000 for p in points], abs=1e-3)
    running = 0
    for count, (_, want) in zip(counter["samples"]["count"], points):
        running += count
        assert running == want
    assert doc["threads"][counter["mainThreadIndex"]]["isMainThread"]
    nodes = Nodes(prof.profile)
    every = prof.profile["stacks"].get("timeline", {}).get("every", 1)
    for k, th in enumerate(doc["threads"]):
        # Per stack, the weights are the tree's time: with no timeline or a
        # whole one (`every` 1), within the profile's rounding of each
        # node's times to the microsecond.  (By stack, not by category: a
        # timeline sample has the category of its largest kind of time.)
        got, want, count = {}, {}, {}
        for (names, _), w in firefox_tree(doc, k).items():
            got[names] = got.get(names, 0) + w
        for (names, _), w in node_tree(nodes, k, 1e-6).items():
            want[names] = want.get(names, 0) + w
            count[names] = count.get(names, 0) + 1
        if every == 1:
            assert set(got) == set(want), set(got) ^ set(want)
            for names in want:
                assert abs(got[names] - want[names]) <= 0.002 * count[names], names
    meta = doc["meta"]
    assert meta["product"] == "calipers: %s" % prog
    assert meta["startTime"] == pytest.approx(prof.profile["program"]["start_time_unix"] * 1000,
                                              abs=1e-3)
    assert meta["interval"] == pytest.approx(prof.profile["config"]["interval_s"] * 1000)


def test_firefox_hostile_names(run_calipers, tmp_path):
    prof, _ = run_program(run_calipers, tmp_path)
    untimed, _ = without_timeline(prof.profile, tmp_path)
    path, nodes = hostile_profile(json.loads(untimed.read_text()), tmp_path)
    doc = json.loads(path.read_text())
    doc["stacks"]["frames"][0]["name"] = "rtl \u202e gnp.exe"
    doc["threads"][0]["name"] = "main \u202e <script>"
    path.write_text(json.dumps(doc))
    nodes = Nodes(doc)
    out = tmp_path / "hostile.firefox.json"
    calipers("export", "--format", "firefox", "-o", out, path)
    raw = out.read_text(encoding="utf-8")
    assert "<script>" not in raw  # '<' escaped: the file may sit in a <script>
    ff = json.loads(raw)
    check_firefox(ff)
    strings = ff["shared"]["stringArray"]
    fn, src = ff["shared"]["funcTable"], ff["shared"]["sources"]
    assert [strings[i] for i in fn["name"][:-1]] == [f["name"] for f in nodes.frames]
    assert [strings[src["filename"][s]] for s in fn["source"][:-1]] == \
        [f["file"] for f in nodes.frames]
    assert fn["lineNumber"][:-1] == [f["first_line"] or None for f in nodes.frames]
    assert [t["name"] for t in ff["threads"]] == [t["name"] for t in doc["threads"]]
    for k, th in enumerate(ff["threads"]):
        alloc = sum(n["alloc"] for n in nodes.nodes if n["thread"] == k)
        got = sum(th["nativeAllocations"]["weight"]) if "nativeAllocations" in th else 0
        assert got == alloc
    # Deterministic: the same profile, the same bytes.
    again = tmp_path / "again.firefox.json"
    calipers("export", "--format", "firefox", "-o", again, path)
    assert again.read_bytes() == out.read_bytes()
