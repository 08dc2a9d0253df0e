"""Waiting split into its two causes (preempted_s within waiting_s): a line
that is runnable but shares its CPU with a thread hashing without the GIL
waits preempted; a line that sleeps waits blocked
(tests/programs/preempted.py, which measures each line's wall and CPU
time itself).  The split comes from the kernel's run-queue delay per
thread (/proc/self/task/TID/schedstat)."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import PROGRAMS, Run

PROGRAM = PROGRAMS / "preempted.py"

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task/%d/schedstat" % threading.get_native_id()).exists(),
    reason="this kernel keeps no run-queue delay per thread (CONFIG_SCHED_INFO off)")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("preempted")
    out, truth = tmp / "profile.json", tmp / "truth.json"
    proc = subprocess.run([sys.executable, "-m", "calipers", "run", "-o", str(out),
                           str(PROGRAM), str(truth)],
                          capture_output=True, text=True, cwd=tmp, timeout=300,
                          env=dict(os.environ, COLUMNS="140"))
    assert proc.returncode == 0, proc.stderr
    return Run(proc, out, truth)


def function(run, name):
    """A function's inclusive time record."""
    return run.functions("preempted.py")[name]["total"]


def line(run, n):
    return run.lines("preempted.py")[n]


def test_a_line_sharing_its_cpu_waits_preempted(run):
    # Its waiting (wall - CPU, as the program measured it) is all spent
    # runnable, but for the moments it waits for the GIL between the
    # hashing thread's calls (microseconds each): the profile's preempted
    # time of the burning function is that waiting.
    truth = run.truth["burn"]
    waited = truth["wall_s"] - truth["cpu_s"]
    burn = function(run, "burn")
    assert waited > 0.2, "the hashing thread did not share the CPU: %r" % truth
    assert burn["preempted_s"] == pytest.approx(waited, rel=0.15, abs=0.02), (burn, truth)
    assert burn["preempted_s"] >= 0.85 * burn["waiting_s"], burn


def test_a_sleeping_line_waits_blocked(run):
    truth = run.truth["sleep"]
    rec = line(run, truth["line"])
    assert rec["waiting_s"] == pytest.approx(truth["wall_s"] - truth["cpu_s"], rel=0.1)
    # Waking up, it may wait a moment for the CPU (the hashing thread is
    # gone by then; other programs on the machine are not).
    assert rec["preempted_s"] <= 0.1 * rec["waiting_s"], rec


def test_preempted_is_part_of_waiting_everywhere(run):
    p = run.profile
    records = [p["summary"]] + p["threads"]
    for f in p["files"]:
        records += f["lines"] + [fn[k] for fn in f["functions"] for k in ("self", "total")]
    for rec in records:
        assert 0 <= rec["preempted_s"] <= rec["waiting_s"] + 2e-6, rec
    threads = sum(t["preempted_s"] for t in p["threads"])
    assert p["summary"]["preempted_s"] == pytest.approx(threads, abs=1e-5)


def test_the_report_says_how_the_waiting_splits(run):
    s = run.profile["summary"]
    header = " ".join(run.stderr.split())
    assert "(blocked %.2f s, preempted %.2f s)" % (
        s["waiting_s"] - s["preempted_s"], s["preempted_s"]) in header, run.stderr
    # The per-line column: the threads waited for a CPU much of their time.
    assert " preempt " in run.stderr, run.stderr
