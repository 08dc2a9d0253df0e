"""Memory against ground truth the programs compute themselves: allocation
volumes per line (Python vs native), the 512 MiB peak test, leaks, copy
volume, threads, native threads and fork under the shim, --cpu-only."""
import re
import subprocess
import sysconfig
from pathlib import Path

import pytest

from conftest import PROGRAMS, TRUTH, cpu, line_of, total

MiB = 1 << 20


def mem(rec):
    return rec["memory"]


def alloc(rec):
    m = mem(rec)
    return m["alloc_python_bytes"] + m["alloc_native_bytes"]


# A line's sampled volume counts the sample points that fell in its bytes:
# k ~ Poisson(bytes / interval), a relative error of 1/sqrt(k).  The tests
# pick --memory-interval so that their tolerance is at least five of those
# (at the default 256 KiB, 96 MB of small objects is 366 points, 5.2% each:
# a 10% tolerance would fail one run in eighteen).


@pytest.mark.parametrize("kind", ["numpy", "bytearray"])
@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])
def test_512mb_peak_whatever_is_touched(run_calipers, kind, fraction):
    prog = PROGRAMS / "big.py"
    run = run_calipers(prog, kind, str(fraction))
    assert run.returncode == 0, run.stderr
    rec = run.lines("big.py")[line_of(prog, "big-" + kind)]
    # The line holds the allocation at its peak: 512 MiB within 1%.
    assert mem(rec)["live_peak_bytes"] == pytest.approx(512 * MiB, rel=0.01), mem(rec)
    assert mem(rec)["live_end_bytes"] < MiB  # it was freed
    summary = run.profile["summary"]["memory"]
    # The program's peak is that allocation on top of the interpreter's
    # baseline, and the line that reached it is the allocating line.
    assert 512 * MiB <= summary["peak_bytes"] <= 512 * MiB + 64 * MiB, summary
    assert summary["peak_line"]["line"] == line_of(prog, "big-" + kind)
    if kind == "numpy":
        assert mem(rec)["alloc_native_bytes"] >= 0.99 * alloc(rec)
    else:
        assert mem(rec)["alloc_python_bytes"] >= 0.99 * alloc(rec)


def test_volumes_and_python_native_split(run_calipers):
    prog = PROGRAMS / "volumes.py"
    # 32 KiB: the smallest line (96 MB) gets ~2900 points, 1.9% (10% is 5.4 of those)
    run = run_calipers(prog, TRUTH, options=["--memory-interval", "32k"])
    assert run.returncode == 0, run.stderr
    truth = run.truth
    lines = run.lines("volumes.py")
    assert set(truth) == {"small-objects", "numpy-arrays", "bytes-objects"}, truth
    for marker, want in truth.items():
        rec = lines[line_of(prog, marker)]
        assert want >= 50 * MiB  # the lines the tolerance is about
        assert alloc(rec) == pytest.approx(want, rel=0.10), (marker, mem(rec), want)
    small = mem(lines[line_of(prog, "small-objects")])
    assert small["alloc_python_bytes"] >= 0.90 * alloc(lines[line_of(prog, "small-objects")])
    arrays = mem(lines[line_of(prog, "numpy-arrays")])
    assert arrays["alloc_native_bytes"] >= 0.90 * alloc(lines[line_of(prog, "numpy-arrays")])
    summary = run.profile["summary"]["memory"]
    # Exact totals cover at least what the lines allocated.
    assert summary["allocated_python_bytes"] >= truth["small-objects"] + truth["bytes-objects"]
    assert summary["allocated_native_bytes"] >= truth["numpy-arrays"]
    assert 0 < summary["peak_python_fraction"] <= 1
    assert 2 <= len(summary["timeline"]) <= 100
    # Functions carry the same volumes: <module> holds them all.
    module = run.functions("volumes.py")["<module>"]["memory"]["total"]
    got = module["alloc_python_bytes"] + module["alloc_native_bytes"]
    assert got >= 0.9 * sum(truth.values())


@pytest.mark.skipif(bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
                    reason="the free-threaded build has mimalloc only: PYTHONMALLOC=malloc "
                    "and pymalloc_debug do not exist there")
@pytest.mark.parametrize("allocator", ["malloc", "pymalloc_debug"])
def test_volumes_under_other_python_allocators(run_calipers, allocator):
    """PYTHONMALLOC=malloc (Python's objects from malloc) and the debug
    hooks (a larger request from pymalloc for each object): the shim sends
    small requests straight to pymalloc only when pymalloc serves them
    without malloc(), so each byte is counted once, as Python's."""
    prog = PROGRAMS / "volumes.py"
    run = run_calipers(prog, TRUTH, options=["--memory-interval", "32k"],
                       env={"PYTHONMALLOC": allocator})
    assert run.returncode == 0, run.stderr
    lines = run.lines("volumes.py")
    for marker in ("small-objects", "bytes-objects"):
        rec = lines[line_of(prog, marker)]
        want = run.truth[marker]
        assert alloc(rec) == pytest.approx(want, rel=0.10), (allocator, marker, mem(rec), want)
        assert mem(rec)["alloc_python_bytes"] >= 0.90 * alloc(rec), (allocator, marker, mem(rec))


@pytest.mark.parametrize("allocator", [
    None,
    pytest.param("pymalloc_debug", marks=pytest.mark.skipif(
        bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        reason="the free-threaded build has no pymalloc_debug"))])
def test_python_blocks_freed_through_malloc_stay_python(run_calipers, allocator):
    """pymalloc hands a block over 512 bytes to malloc() and frees it there
    too: 800 MB of them made and freed is Python's both ways, so the 256
    MiB native code holds to the end is the footprint's native part, not
    the 800 MB freed as native (the Python part would then be all of it).
    Under the debug hooks too, which free each block from their header."""
    run = run_calipers(PROGRAMS / "large_python_frees.py",
                       env={"PYTHONMALLOC": allocator} if allocator else None)
    assert run.returncode == 0, run.stderr
    summary = run.profile["summary"]["memory"]
    assert summary["allocated_python_bytes"] >= 800 * 10**6, summary
    assert 256 * MiB <= summary["end_bytes"] <= 256 * MiB + 64 * MiB, summary
    # Python's part: the interpreter's own few MB, not 256 MiB or more.
    assert summary["end_python_fraction"] * summary["end_bytes"] < 32 * MiB, summary


def test_leak_reported_churn_not(run_calipers):
    prog = PROGRAMS / "leaks.py"
    # 64 KiB: the leak's 122 MB is ~1860 points, 2.3% (15% is 6.5 of those)
    run = run_calipers(prog, "leak", options=["--memory-interval", "64k"])
    assert run.returncode == 0, run.stderr
    leaks = {lk["line"]: lk for lk in run.profile["leaks"]}
    leak_line, churn_line = line_of(prog, "leak-line"), line_of(prog, "churn-line")
    assert leak_line in leaks, (run.profile["leaks"], mem(run.lines("leaks.py")[leak_line]))
    assert leaks[leak_line]["likelihood"] >= 0.95
    assert leaks[leak_line]["rate_bytes_per_s"] > 0
    assert churn_line not in leaks
    # ... and the leaked bytes are what the line still holds at the end.
    held = mem(run.lines("leaks.py")[leak_line])["live_end_bytes"]
    assert held == pytest.approx(30_000 * (4000 + 57), rel=0.15)


def test_no_leak_in_a_clean_program(run_calipers):
    run = run_calipers(PROGRAMS / "leaks.py", "clean")
    assert run.returncode == 0, run.stderr
    assert run.profile["leaks"] == []


def test_data_built_once_and_kept_is_not_a_leak(run_calipers):
    prog = PROGRAMS / "leaks.py"
    run = run_calipers(prog, "kept")
    assert run.returncode == 0, run.stderr
    kept = mem(run.lines("leaks.py")[line_of(prog, "kept-line")])
    # The likelihood alone would call it a leak (its watched allocations
    # were, almost all, never freed) ...
    watched, freed = kept["leak_watched"], kept["leak_freed"]
    assert (watched - freed + 1) / (watched + 2) >= 0.95, kept
    assert kept["live_end_bytes"] > 100 * MiB
    # ... but it stopped growing early in the run: not reported.
    assert run.profile["leaks"] == []


def test_summary_shows_memory_and_leaks(run_calipers):
    prog = PROGRAMS / "leaks.py"
    run = run_calipers(prog, "leak", options=[])
    assert run.returncode == 0, run.stderr
    err = run.stderr
    assert "calipers: memory peak " in err
    assert "likely leak at leaks.py:%d" % line_of(prog, "leak-line") in err
    # The file's table shows both lines, with their allocated bytes.
    table = err[err.index("leaks.py: "):]
    for marker in ("leak-line", "churn-line"):
        row = next(r for r in table.splitlines() if r.split()[:1] == [str(line_of(prog, marker))])
        assert re.search(r" [0-9.]+[MG]B ", row) and "bytearray(" in row, row


def test_copy_volume(run_calipers):
    prog = PROGRAMS / "copies.py"
    # Each copying loop runs 0.2 s or more, and no other thread uses CPU
    # meanwhile (copies.py): the sample that straddles the start or end of
    # the loop can move a tick's gap (1 ms here), or what is left of a C
    # call (the main thread is sampled at most once per call), to or from
    # a neighbouring line.  Copies are
    # sampled at 4x the memory interval: at 64 KiB each line's 3 GB is
    # ~11500 points, under 1% (10% is 11 of those).
    run = run_calipers(prog, TRUTH, options=["--interval", "1ms", "--memory-interval", "64k"])
    assert run.returncode == 0, run.stderr
    truth = run.truth
    lines = run.lines("copies.py")
    assert set(truth) == {"copy-bytes", "copy-numpy"}, truth
    for marker, (copied, seconds) in truth.items():
        rec = lines[line_of(prog, marker)]
        assert mem(rec)["copied_bytes"] == pytest.approx(copied, rel=0.10), (marker, mem(rec))
        # MB/s over the line's own time, against the program's own timing
        # of the loop (whose other line, the `for`, takes next to nothing).
        assert mem(rec)["copy_mb_per_s"] == pytest.approx(copied / 1e6 / seconds, rel=0.20), (
            marker, mem(rec), total(rec), seconds)
    quiet = mem(lines[line_of(prog, "no-copy")])
    assert quiet["copied_bytes"] == 0 and quiet["copy_mb_per_s"] == 0


def test_worker_thread_allocations_land_on_worker_line(run_calipers):
    prog = PROGRAMS / "mem_threads.py"
    # 64 KiB: the worker's 200 MB is ~3050 points, 1.8% (10% is 5.5 of those)
    run = run_calipers(prog, options=["--memory-interval", "64k"])
    assert run.returncode == 0, run.stderr
    lines = run.lines("mem_threads.py")
    worker = lines[line_of(prog, "worker-line")]
    want = 2 * 2000 * (50_000 + 57)
    assert alloc(worker) == pytest.approx(want, rel=0.10), mem(worker)
    join = lines.get(line_of(prog, "join-line"))
    assert join is None or alloc(join) < 0.02 * want


@pytest.fixture(scope="module")
def churn_lib(tmp_path_factory):
    out = tmp_path_factory.mktemp("lib") / "libchurn.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-pthread", str(PROGRAMS / "churn.c"),
                    "-o", str(out)], check=True)
    return out


def test_native_threads_and_fork_under_the_shim(run_calipers, churn_lib):
    prog = PROGRAMS / "native_threads.py"
    run = run_calipers(prog, churn_lib)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
    summary = run.profile["summary"]["memory"]
    # 4 threads x 20000 rounds of malloc + calloc + realloc (8 KiB) at least.
    assert summary["allocated_native_bytes"] >= 4 * 20000 * 8192
    assert summary["end_bytes"] > 0
    assert run.profile["program"]["pid"] != 0


def test_cpu_only_keeps_the_shim_out(run_calipers, tmp_path):
    prog = tmp_path / "maps.py"
    prog.write_text("import os\n"
                    "maps = open('/proc/self/maps').read()\n"
                    "print('shim' if 'libcalipers_shim' in maps else 'none')\n"
                    "print(os.environ.get('LD_PRELOAD', '-'))\n")
    run = run_calipers(prog, options=["--cpu-only"])
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["none", "-"]
    assert run.profile["summary"]["memory"] is None
    assert run.profile["config"]["cpu_only"] is True
    run = run_calipers(prog)
    # With memory: loaded, yet the program's environment is its own.
    assert run.stdout.split() == ["shim", "-"]
    assert run.profile["config"]["cpu_only"] is False
    assert run.profile["config"]["memory_interval_bytes"] == 256 << 10


def test_memory_interval_option(run_calipers):
    run = run_calipers(PROGRAMS / "leaks.py", "clean", options=["--memory-interval", "64k"])
    assert run.returncode == 0, run.stderr
    assert run.profile["config"]["memory_interval_bytes"] == 64 << 10
    assert run.profile["config"]["copy_interval_bytes"] == 256 << 10
