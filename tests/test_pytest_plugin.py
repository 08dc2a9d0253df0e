"""The pytest plugin (calipers.pytest_plugin): real `python -m pytest` runs
of a small sample project written into tmp_path, with and without
--calipers, with the limit_memory / limit_leaks markers, and under
pytest-xdist."""

import json
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
from xml.etree import ElementTree

import pytest

from calipers.pytest_plugin import parse_size

from conftest import LAUNCHER, validate

# A project whose tests pass and fail on their own, and one that checks
# the plugin did nothing it was not asked to.
PLAIN = '''
def test_passes():
    blocks = [bytearray(100000) for _ in range(80)]
    assert len(blocks) == 80

def test_fails():
    assert [1, 2] == [1, 3]

def test_skipped():
    import pytest
    pytest.skip("not here")

def test_plugin_is_registered_and_idle(pytestconfig):
    from calipers import _calipers
    assert pytestconfig.pluginmanager.hasplugin("calipers")
    # Without --calipers or a limit marker no engine runs.
    assert not _calipers.running()
'''

# Each size is far from its limit (a factor of 2 or more either way), so
# that the sampled attribution and pytest's own few allocations cannot
# decide a test.
LIMITS = '''
import pytest

_kept = []

@pytest.mark.limit_memory("24 MB")
def test_over_memory():
    block = bytearray(48 * 1000 * 1000)
    assert len(block)

@pytest.mark.limit_memory("24 MB")
def test_under_memory():
    block = bytearray(6 * 1000 * 1000)
    assert len(block)

@pytest.mark.limit_leaks("1 MB")
def test_leaks():
    _kept.extend(bytes(1000) for _ in range(3000))

@pytest.mark.limit_leaks("1 MB")
def test_frees_what_it_allocates():
    blocks = [bytes(1000) for _ in range(3000)]
    assert len(blocks) == 3000

@pytest.mark.limit_leaks("1 MB")
def test_leaks_but_fails_first():
    _kept.extend(bytes(1000) for _ in range(3000))
    assert False, "its own failure"

@pytest.mark.limit_memory("24 parsecs")
def test_bad_marker():
    pass
'''


def _write(tmp_path, name, text):
    (tmp_path / "project").mkdir(exist_ok=True)
    (tmp_path / "project" / name).write_text(textwrap.dedent(text))


def _pytest(tmp_path, *args, timeout=300, under=None):
    """Run pytest on the project in tmp_path/"project"; (exit code, {test
    name: outcome} from its JUnit XML report, output)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "CALIPERS_")) and k != "LD_PRELOAD"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    junit = tmp_path / "junit.xml"
    proc = subprocess.run(
        (under or [sys.executable]) + ["-m", "pytest", "-p", "no:cacheprovider", "-q",
                                       "--junitxml", str(junit), *args],
        cwd=tmp_path / "project", env=env, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    # No report: pytest died (a signal's exit code, its fault handler's
    # traceback in the output).
    assert junit.exists(), "pytest wrote no report (exit %d):\n%s" % (proc.returncode, out)
    outcomes = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name")] = {"failure": "FAILED", "error": "ERROR",
                                      "skipped": "SKIPPED"}.get(kinds[0] if kinds else None,
                                                                "PASSED")
    junit.unlink()
    return proc.returncode, outcomes, out


def _line_of(text, needle):
    """The line number of `needle` in the sample file written from `text`."""
    lines = textwrap.dedent(text).splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def _failure(out, name):
    """The failure section of test `name` in pytest's output."""
    match = re.search(r"_{3,} %s _{3,}\n(.*?)(?=\n_{3,} |\n={3,} )" % name, out, re.S)
    assert match, "no failure section for %s in:\n%s" % (name, out)
    return match.group(1)


PLAIN_OUTCOMES = {"test_passes": "PASSED", "test_fails": "FAILED",
                  "test_skipped": "SKIPPED", "test_plugin_is_registered_and_idle": "PASSED"}


def test_parse_size():
    assert parse_size("24 MB") == 24 * 10**6
    assert parse_size("1.5 MiB") == 3 << 19
    assert parse_size("512KB") == 512000
    assert parse_size("512kib") == 512 << 10
    assert parse_size(" 100 ") == 100
    assert parse_size("7 B") == 7
    assert parse_size(4096) == 4096
    for bad in ("", "MB", "24 XB", "24 MBs", "-1 MB", "1e6", "nan", "inf MB", "1,5 MB",
                "24 M B", -5, 2.5, True, None):
        with pytest.raises(ValueError, match="size"):
            parse_size(bad)


def test_run_without_the_plugin_asked_is_unchanged(tmp_path):
    _write(tmp_path, "test_plain.py", PLAIN)
    code, outcomes, out = _pytest(tmp_path)
    assert code == 1, out
    assert outcomes == PLAIN_OUTCOMES, out
    assert "calipers" not in out
    assert not (tmp_path / "project" / "calipers-profile.json").exists()


def test_calipers_profiles_the_session(tmp_path):
    _write(tmp_path, "test_plain.py", PLAIN.replace("assert not _calipers.running()",
                                                    "assert _calipers.running()"))
    code, outcomes, out = _pytest(tmp_path, "--calipers")
    assert code == 1, out  # the one failing test, as without the plugin
    assert outcomes == PLAIN_OUTCOMES, out
    profile = validate(json.loads((tmp_path / "project" / "calipers-profile.json").read_text()))
    lines = next(f["lines"] for f in profile["files"] if f["path"].endswith("test_plain.py"))
    line = next(ln for ln in lines if ln["line"] == _line_of(PLAIN, "bytearray(100000)"))
    assert line["memory"], line
    assert profile["summary"]["memory"], "memory was not profiled"
    summary = out[out.index("= calipers ="):]
    assert "profile written to %s" % (tmp_path / "project" / "calipers-profile.json") in summary
    # One row per test that ran its call phase (pytest.skip() in the test
    # too): time, allocated, peak; the slowest first.
    rows = re.findall(r"^\s+\d+\.\d{3}s\s+(\S+) (\S+)\s+\S+ \S+\s+test_plain\.py::(\w+)$",
                      summary, re.M)
    assert sorted(row[2] for row in rows) == sorted(PLAIN_OUTCOMES), summary
    allocated = {row[2]: parse_size(row[0] + " " + row[1]) for row in rows}
    assert 7 << 20 < allocated["test_passes"] < 9 << 20, summary


def _check_limits(outcomes, out):
    assert outcomes == {
        "test_over_memory": "FAILED", "test_under_memory": "PASSED",
        "test_leaks": "FAILED", "test_frees_what_it_allocates": "PASSED",
        "test_leaks_but_fails_first": "FAILED", "test_bad_marker": "FAILED",
    }, out
    over = _failure(out, "test_over_memory")
    assert "over its limit_memory('24 MB')" in over, over
    # The top allocating line comes first, with its size (~48 MB).
    first = re.search(r"^  (\S+):(\d+)  ([\d.]+) MiB", over, re.M)
    assert first and first.group(1) == "test_limits.py" and int(first.group(2)) == _line_of(LIMITS, "bytearray(48"), over
    assert 40 < float(first.group(3)) < 52, over
    leaks = _failure(out, "test_leaks")
    assert "over its limit_leaks('1 MB')" in leaks, leaks
    first = re.search(r"^  (\S+):(\d+)  ([\d.]+) MiB \u00b1", leaks, re.M)
    assert first and first.group(1) == "test_limits.py" and int(first.group(2)) == _line_of(LIMITS, "_kept.extend"), leaks
    assert 2.0 < float(first.group(3)) < 4.0, leaks
    # A test that fails on its own keeps its own failure.
    own = _failure(out, "test_leaks_but_fails_first")
    assert "its own failure" in own and "calipers:" not in own, own
    bad = _failure(out, "test_bad_marker")
    assert "@pytest.mark.limit_memory: '24 parsecs' is not a size" in bad, bad


def test_limit_markers_without_calipers(tmp_path):
    """The markers are requests of their own: no --calipers needed, and
    then no profile is written."""
    _write(tmp_path, "test_limits.py", LIMITS)
    code, outcomes, out = _pytest(tmp_path)
    assert code == 1, out
    _check_limits(outcomes, out)
    assert not (tmp_path / "project" / "calipers-profile.json").exists()
    # Within their limits, the exit code is pytest's own success.
    code, outcomes, out = _pytest(tmp_path, "-k", "under_memory or frees_what")
    assert code == 0 and set(outcomes.values()) == {"PASSED"}, out


def test_under_calipers_run(tmp_path):
    """`calipers run -m pytest`: the plugin measures through the run's
    engine (neither starting nor stopping it); the run writes the profile."""
    _write(tmp_path, "test_limits.py", LIMITS)
    run_profile = tmp_path / "run.json"
    # The plugin measures at the run's memory interval.  At the default
    # 256 KiB the ~3 MB leak is ~12 samples, its estimate ±30%, and
    # _check_limits' 2-4 MiB bound would be about one standard error below
    # the truth; at 16 KiB it is ~190 samples (±7%).
    code, outcomes, out = _pytest(tmp_path, "--calipers",
                                  under=LAUNCHER + ["run", "--memory-interval", "16k",
                                                    "-o", str(run_profile)])
    assert code == 1, out
    _check_limits(outcomes, out)
    assert "profiled by the calipers run this pytest runs under" in out, out
    assert "sampled every ~16.0 KiB" in _failure(out, "test_leaks"), out
    # calipers is imported before pytest marks the plugin's package for
    # assertion rewriting: no warning that it cannot be rewritten.
    assert "cannot be rewritten" not in out, out
    profile = validate(json.loads(run_profile.read_text()))
    assert any(f["path"].endswith("test_limits.py") for f in profile["files"])
    assert sorted(os.listdir(tmp_path / "project")) == ["test_limits.py"]


def test_xdist_workers(tmp_path):
    pytest.importorskip("xdist")
    _write(tmp_path, "test_limits.py", LIMITS)
    _write(tmp_path, "test_plain.py", PLAIN.replace("assert not _calipers.running()",
                                                    "assert _calipers.running()"))
    code, outcomes, out = _pytest(tmp_path, "-n", "2", "--calipers",
                                  "--calipers-output", "xdist.json", timeout=600)
    assert code == 1, out
    plain = dict(outcomes)
    for name in ("test_over_memory", "test_under_memory", "test_leaks",
                 "test_frees_what_it_allocates", "test_leaks_but_fails_first",
                 "test_bad_marker"):
        plain.pop(name)
    assert plain == PLAIN_OUTCOMES, out
    _check_limits({k: v for k, v in outcomes.items() if k not in PLAIN_OUTCOMES}, out)
    # One profile: the controller's, with each worker's merged into it.
    profile = validate(json.loads((tmp_path / "project" / "xdist.json").read_text()))
    assert len(profile["processes"]) == 3, profile["processes"]
    paths = {os.path.basename(f["path"]) for f in profile["files"]}
    assert {"test_limits.py", "test_plain.py"} <= paths, paths
    summary = out[out.index("= calipers ="):]
    assert "test_limits.py::test_over_memory" in summary, summary
    # The workers' profiles were merged and removed.
    assert sorted(os.listdir(tmp_path / "project")) == [
        "test_limits.py", "test_plain.py", "xdist.json"]


WINDOW = '''
import json, sys
import calipers
from calipers import _calipers

calipers.start(sys.argv[1], memory_interval=4096)
_calipers.memory_mark()
kept = [bytearray(100000) for _ in range(30)]          # 3.0 MB, kept
passing = [bytearray(100000) for _ in range(50)]       # 5.0 MB, freed
del passing
allocated, lines = _calipers.memory_window()
current, peak = _calipers.memory_traced()
_calipers.memory_mark()
after = _calipers.memory_window()
calipers.stop()
print(json.dumps({"allocated": allocated, "lines": lines, "current": current,
                  "peak": peak, "after": after}))
'''


def test_memory_window_engine(tmp_path):
    """The engine's figures behind the plugin: memory_window() gives the
    bytes allocated since the mark (exact) and each line's sampled share;
    a new mark empties it."""
    script = tmp_path / "window.py"
    script.write_text(WINDOW)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "p.json")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    # 8 MB in blocks, plus the lists and the interpreter's own few.
    assert 8_000_000 <= got["allocated"] < 8_000_000 + (256 << 10), got
    # The footprint: on the free-threaded build Python's blocks count by
    # mimalloc's usable sizes (INTERNALS, "The free-threaded build"), a
    # 100 kB block's a few percent more.
    over = 1.15 if sysconfig.get_config_var("Py_GIL_DISABLED") else 1.0
    assert 3_000_000 <= got["current"] < 3_000_000 * over + (256 << 10), got
    # The peak is raised when a thread's batch of footprint changes is
    # flushed (FLUSH_BYTES, 256 KiB, in src/shim/shim.c): up to that short.
    assert 8_000_000 - (256 << 10) <= got["peak"] < 8_000_000 * over + (256 << 10), got
    by_line = {line: size for path, line, size in got["lines"] if path == str(script)}
    kept = by_line[_line_of(WINDOW, "range(30)")]
    freed = by_line[_line_of(WINDOW, "range(50)")]
    # Sampled every ~4 KiB: a 100 kB block is always sampled, with its
    # own size or the interval, so both are within a block or two.
    assert abs(kept - 3_000_000) < 200_000, got
    assert abs(freed - 5_000_000) < 200_000, got
    assert got["after"] == [0, []], got
