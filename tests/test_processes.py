"""Whole programs: child processes merged into one profile, and signals.

Every test runs a real program under calipers and checks the merged JSON
against what the program measured itself (TRUTH) or against the same
program run without calipers."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PROGRAMS, TRUTH, cpu, line_of, validate

PROCS = PROGRAMS / "procs.py"
WORK_LINES = range(line_of(PROCS, "hot") - 3, line_of(PROCS, "hot2") + 2)


def work_cpu(run):
    """CPU seconds the profile puts on work()'s lines, in every process."""
    return sum(cpu(rec) for n, rec in run.lines("procs.py").items() if n in WORK_LINES)


def processes_of_line(run, line):
    return {p for p, _, _ in run.lines("procs.py")[line].get("processes", [[0, 0, 0]])}


@pytest.mark.parametrize("mode,method", [
    ("pool", "fork"), ("pool", "spawn"), ("pool", "forkserver"),
    ("executor", "spawn"), ("process", "forkserver"),
])
def test_multiprocessing_children_are_merged(run_calipers, run_plain, mode, method):
    run = run_calipers(PROCS, mode, method, TRUTH)
    plain = run_plain(PROCS, mode, method)
    assert run.returncode == plain.returncode == 0, run.stderr
    # The start method is the program's: same output as without calipers.
    assert run.stdout == plain.stdout
    procs = run.profile["processes"]
    # The workers; multiprocessing's own servers (the resource tracker, the
    # forkserver) outlive the program and are not in the profile.
    workers = procs[1:]
    assert len(workers) == (1 if mode == "process" else 2), procs
    assert all(p["forked"] == (method != "spawn") for p in workers)
    # Each task runs ~0.35 s: the sample that lands while a worker waits for
    # its next task credits the end of the previous one to the waiting line
    # (INTERNALS "Known gaps": a line that blocks after busy code inherits
    # the CPU since the previous sample).  On a loaded 2-core machine the
    # intervals stretch and that cost 75 ms and 150 ms tasks 11-12% of
    # work()'s time; with these tasks the edges are a few percent.
    truth = run.truth["work_cpu_s"] if mode != "process" else None
    seen = work_cpu(run)
    if truth is not None:
        # >= 90% of the function's time (each worker measured its own) is
        # on its lines; sampling does not invent time either.
        assert 0.9 * truth <= seen <= 1.1 * truth + 0.05, (seen, truth)
    hot = line_of(PROCS, "hot2")
    worker_ids = {procs.index(p) for p in workers}
    assert processes_of_line(run, hot) <= worker_ids | {0}
    assert processes_of_line(run, hot) & worker_ids
    assert run.profile["notes"] == []


def test_fork_child_leaving_by_os_exit(run_calipers, run_plain):
    run = run_calipers(PROCS, "fork")
    assert run.stdout == run_plain(PROCS, "fork").stdout == "child status 7\n"
    procs = run.profile["processes"]
    assert len(procs) == 2
    child = procs[1]
    assert child["forked"] and child["end"] == "os._exit"
    assert child["ppid"] == procs[0]["pid"]
    # work(3_000_000) is 0.1-0.2 s of CPU, 0.099 s on 3.11 once in CI.
    assert child["python_s"] + child["native_s"] + child["system_s"] > 0.05
    assert processes_of_line(run, line_of(PROCS, "hot2")) == {1}
    # The parent only waited for it.
    assert procs[0]["python_s"] < 0.1


def test_fork_child_returning_normally(run_calipers):
    run = run_calipers(PROCS, "forkreturn")
    assert run.returncode == 0
    procs = run.profile["processes"]
    assert [p["end"] for p in procs] == ["exit", "exit"]
    assert processes_of_line(run, line_of(PROCS, "hot2")) == {1}


@pytest.mark.parametrize("mode", ["subprocess", "python3"])
def test_python_subprocess(run_calipers, mode):
    # python3 found on PATH: this interpreter's (a virtual environment's
    # bin directory first, as when it is activated).
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    run = run_calipers(PROCS, mode, env={"PATH": path})
    assert run.returncode == 0 and run.stdout == "child status 0\n"
    procs = run.profile["processes"]
    assert len(procs) == 2 and not procs[1]["forked"]
    assert procs[1]["argv"][1:] == [str(PROCS), "work"]
    assert processes_of_line(run, line_of(PROCS, "hot2")) == {1}


def test_shell_child_unchanged(run_calipers, run_plain):
    run = run_calipers(PROCS, "sh")
    plain = run_plain(PROCS, "sh")
    assert run.stdout == plain.stdout == "'hi\\n' 3\n"
    assert run.returncode == plain.returncode == 0
    assert len(run.profile["processes"]) == 1  # sh is not Python


def test_no_follow(run_calipers):
    run = run_calipers(PROCS, "subprocess", options=["--no-follow"])
    assert run.returncode == 0
    assert len(run.profile["processes"]) == 1
    assert line_of(PROCS, "hot2") not in run.lines("procs.py")


def test_killed_child_loses_only_its_samples(run_calipers):
    run = run_calipers(PROCS, "kill9")
    assert run.returncode == 0
    assert len(run.profile["processes"]) == 1
    assert any("SIGKILL" in note for note in run.profile["notes"])
    assert processes_of_line(run, line_of(PROCS, "hot2")) == {0}


def test_environment_the_program_sees(run_calipers, run_plain, tmp_path):
    """os.environ is the program's own, though children inherit calipers."""
    env = {"PYTHONPATH": str(tmp_path), "LD_PRELOAD": ""}
    assert run_calipers(PROCS, "env", env=env).stdout == run_plain(PROCS, "env", env=env).stdout
    plain = run_plain(PROCS, "env", env={"PYTHONPATH": ""})
    assert run_calipers(PROCS, "env", env={"PYTHONPATH": ""}).stdout == plain.stdout


def test_sigterm_writes_the_profile_and_dies_by_it(tmp_path):
    """A program that would run for a minute, killed once it has used a
    second of CPU: a valid profile of what it did, and the status a plain
    Python program would have (killed by SIGTERM).  The program says when
    it has used that second (on a loaded machine, a sleep of the test's
    would give it an unknown share of a CPU)."""
    out = tmp_path / "p.json"
    prog = tmp_path / "long.py"
    prog.write_text("import time\n"
                    "t0, c0 = time.perf_counter(), time.thread_time()\n"
                    "while time.thread_time() - c0 < 1.0:\n"
                    "    sum(range(1000))\n"
                    "print(time.thread_time() - c0, time.perf_counter() - t0, flush=True)\n"
                    "while time.perf_counter() - t0 < 60:\n"
                    "    sum(range(1000))\n")
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "calipers", "run", "-o", str(out),
                             "--no-report", str(prog)], cwd=tmp_path, stdout=subprocess.PIPE,
                            text=True)
    used, ran = map(float, proc.stdout.readline().split())
    start = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert time.perf_counter() - start < 5
    profile = validate(json.loads(out.read_text()))
    # The profile's clock starts before the program's and stops before the
    # test's; it holds all the CPU the program had used when it said so
    # (less the interval after the last sample, mean 10 ms).
    assert ran <= profile["summary"]["wall_s"] <= time.perf_counter() - started
    assert profile["processes"][0]["end"] == "signal"
    assert profile["processes"][0]["signal"] == signal.SIGTERM
    lines = [ln for f in profile["files"] if Path(f["path"]).name == "long.py"
             for ln in f["lines"]]
    assert sum(cpu(ln) for ln in lines) >= used - 0.1, (lines, used)


def test_report_lists_the_processes(run_calipers):
    run = run_calipers(PROCS, "pool", "fork", env={"COLUMNS": "120"})
    procs = run.profile["processes"]
    assert len(procs) == 3  # the program and its pool's two workers
    assert "in %d processes" % len(procs) in run.stderr
    rows = [ln for ln in run.stderr.splitlines() if ln.split()[:1] in
            ([str(p["pid"])] for p in procs)]
    assert len(rows) == len(procs)
    assert rows[0].split()[1:3] == ["main", "exit"]
    assert all(r.split()[1] == "fork" for r in rows[1:])


SHORT_LIVED = '''
import os, sys, threading
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

def fork_some(n):
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

threads = [threading.Thread(target=fork_some, args=(10,)) for _ in range(2)]
for t in threads:
    t.start()
fork_some(10)
for t in threads:
    t.join()
pid = os.fork()
if pid == 0:
    import childonly  # a file only this child runs
    childonly.spin()
    os._exit(3)
print(os.waitpid(pid, 0)[1] >> 8)
'''

CHILD_ONLY = '''
import time

def spin():
    t = time.process_time() + 0.3
    while time.process_time() < t:  # spin-line
        pass
'''


def test_children_that_leave_at_once_are_each_merged(run_calipers, tmp_path):
    # 30 children, from three threads at once, leaving at once: each is in
    # the profile (their parts appended to one file, concurrently), and a
    # child that lived is too, with the source of the file only it ran
    # (the main process reads it: the parts leave it out).
    prog = tmp_path / "short.py"
    prog.write_text(SHORT_LIVED)
    (tmp_path / "childonly.py").write_text(CHILD_ONLY)
    run = run_calipers(prog)
    assert run.returncode == 0 and run.stdout == "3\n"
    procs = run.profile["processes"]
    assert len(procs) == 32
    assert len({p["pid"] for p in procs}) == 32
    assert all(p["forked"] and p["ppid"] == procs[0]["pid"] for p in procs[1:])
    assert [p["end"] for p in procs[1:]].count("os._exit") == 31
    assert all(p["wall_s"] > 0 for p in procs)
    assert not [n for n in run.profile["notes"] if "child" in n]
    child_only = [f for f in run.profile["files"] if f["path"].endswith("childonly.py")]
    assert len(child_only) == 1 and child_only[0]["source"]
    spin = line_of(tmp_path / "childonly.py", "spin-line")
    assert any(ln["line"] == spin for ln in child_only[0]["lines"])


OFF_FORK = """\
import os, time
def burn(t):
    end = time.process_time() + t
    while time.process_time() < end:
        pass
pid = os.fork()
if pid == 0:
    burn(0.3)
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.parametrize("off", [False, True])
def test_a_child_forked_while_off_stays_off(run_calipers, tmp_path, off):
    """A forked child reads the run's switch when it starts profiling
    (the engine keeps the parent's switch file): under --off its 0.3 s
    of CPU takes no sample; switched on, it does."""
    prog = tmp_path / "off_fork.py"
    prog.write_text(OFF_FORK)
    run = run_calipers(prog, options=["--off"] if off else [])
    assert run.returncode == 0, run.stderr
    procs = run.profile["processes"]
    assert len(procs) == 2 and procs[1]["forked"], procs
    child = procs[1]
    if off:
        assert child["samples"] == 0, child
    else:
        assert child["samples"] >= 5, child
    cpu_s = child["python_s"] + child["native_s"] + child["system_s"]
    assert (cpu_s == 0) if off else (cpu_s > 0.1), child


PIN_FORK = """\
import json, os, sys, time

def allowed(tid):
    with open("/proc/self/task/%d/status" % tid) as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()

def threads():
    return {int(t): allowed(int(t)) for t in os.listdir("/proc/self/task")}

pid = os.fork()
if pid == 0:
    seen = {"early": threads()}
    time.sleep(float(sys.argv[2]))
    seen["late"] = threads()
    seen["main"] = os.getpid()
    with open(sys.argv[1], "w") as f:
        json.dump(seen, f)
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nothing to pin to")
@pytest.mark.parametrize("interval,pinned", [("10s", True), ("1ms", False)])
def test_a_forked_childs_threads_leave_its_cpu_at_its_first_tick(run_calipers, tmp_path,
                                                                  interval, pinned):
    """A forked child's sampler and signal-helper threads start on the CPU
    its main thread is on (copy-on-write faults then need no other CPU's
    TLB flushed) and take the main thread's affinity at its first tick: with
    ticks 10 s apart on average the child ends before its first (the chance
    of one within the few milliseconds it runs is about 1 in 5000), with
    ticks 1 ms apart it has had hundreds."""
    prog = tmp_path / "pin_fork.py"
    prog.write_text(PIN_FORK)
    out = tmp_path / "threads.json"
    run = run_calipers(prog, str(out), "0.0" if pinned else "0.2",
                       options=["--interval", interval])
    assert run.returncode == 0, run.stderr
    seen = json.loads(out.read_text())
    main = str(seen["main"])
    home = seen["late"][main]
    for when in ("early", "late"):
        ours = {tid: cpus for tid, cpus in seen[when].items() if tid != main}
        assert len(ours) >= 2, seen  # the sampler and the signal helper
        if pinned:
            assert all(cpus.isdigit() for cpus in ours.values()), seen
        elif when == "late":
            assert all(cpus == home for cpus in ours.values()), seen
    assert not pinned or not home.isdigit(), seen  # the main thread is never pinned
