"""The Python API, without `calipers run`: calipers.profile(), start(), stop()."""

import json
import os
import subprocess
import sys
from pathlib import Path

import calipers
from conftest import validate

PROGRAM = """
import calipers, json, sys
def hot():
    s = 0
    for i in range(10_000_000):
        s += i  # hot
    return s
mode = sys.argv[1]
if mode == "with":
    with calipers.profile("a.json") as p:
        hot()
    print(json.dumps({"path": p.path}))
elif mode == "report":
    with calipers.profile("a.json", report=True) as p:
        hot()
    print(json.dumps({"path": p.path}))
elif mode == "twice":
    calipers.start("a.json")
    hot()
    first = calipers.stop()
    calipers.start("b.json", cpu_only=True)
    hot()
    print(json.dumps({"first": first, "second": calipers.stop()}))
elif mode == "misuse":
    errors = []
    try:
        calipers.stop()
    except RuntimeError as e:
        errors.append(str(e))
    calipers.start("a.json")
    try:
        calipers.start("b.json")
    except RuntimeError as e:
        errors.append(str(e))
    print(json.dumps({"errors": errors}))
    hot()  # never stopped: written at exit
"""


def run(tmp_path, mode, env=None):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    full = dict(os.environ)
    full.update(env or {})
    proc = subprocess.run([sys.executable, str(prog), mode], capture_output=True, text=True,
                          cwd=tmp_path, env=full, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def hot_time(profile):
    """CPU seconds inside hot() (its lines 4-7; where a loop's samples land
    between its two lines depends on the Python version).  hot() takes
    0.3-0.6 s; the 0.05 s the tests ask for leaves room for the interval
    cut by stop(), whose CPU goes to the stop() line (one interval on
    average, several on a loaded machine: 3M iterations, 0.1 s, once read
    0.043 s under load)."""
    return sum(ln["python_s"] + ln["native_s"] for f in profile["files"]
               for ln in f["lines"] if 4 <= ln["line"] <= 7)


def test_profile_block_without_calipers_run(tmp_path):
    out, err = run(tmp_path, "with")
    assert out["path"] == str(tmp_path / "a.json")
    assert err == ""  # report=False by default
    profile = validate(json.loads(Path(out["path"]).read_text()))
    assert hot_time(profile) > 0.05
    # No shim preloaded: calipers.profile() loads it and profiles memory
    # too (tests/test_inprocess_memory.py checks the figures), silently.
    assert not profile["config"]["cpu_only"]
    assert profile["summary"]["memory"]["allocated_python_bytes"] > 10 ** 6
    assert not any("not profiled" in n for n in profile["notes"]), profile["notes"]


def test_report_prints_the_preload_path_whole(tmp_path):
    """When the shim cannot be loaded, the note says how to preload it and
    names its path: the report wraps it onto a line of its own, never cuts
    it (it cut every word longer than the room left on the line, the path
    included)."""
    shim = tmp_path / "no-such-directory" / "libcalipers_shim.so"
    _, err = run(tmp_path, "report", env={"COLUMNS": "60", "CALIPERS_SHIM": str(shim)})
    # Said once at start, on one line, and in the report's notes.
    assert err.count("Memory was not profiled") == 2, err
    report = err[err.index("calipers: note: Memory was not profiled"):]
    assert "LD_PRELOAD=%s\n" % shim in report, err


def test_memory_with_the_shim_preloaded(tmp_path):
    shim = Path(calipers.__file__).parent / "libcalipers_shim.so"
    out, _ = run(tmp_path, "with", env={"LD_PRELOAD": str(shim)})
    profile = validate(json.loads(Path(out["path"]).read_text()))
    assert profile["summary"]["memory"]["allocated_python_bytes"] > 10 ** 6
    assert not profile["config"]["cpu_only"]
    assert not any("LD_PRELOAD" in n for n in profile["notes"])


def test_start_stop_twice(tmp_path):
    out, _ = run(tmp_path, "twice")
    for key in ("first", "second"):
        profile = validate(json.loads(Path(out[key]).read_text()))
        assert hot_time(profile) > 0.05
    assert out["second"].endswith("b.json")


def test_misuse_raises_and_exit_writes(tmp_path):
    out, _ = run(tmp_path, "misuse")
    assert out["errors"] == [
        "calipers is not profiling this process (call calipers.start() first)",
        "calipers is already profiling this process"]
    profile = validate(json.loads((tmp_path / "a.json").read_text()))
    assert hot_time(profile) > 0.05
