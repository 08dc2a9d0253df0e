"""Long-running programs: the profile rewritten while the program runs
(--profile-interval), and on request (calipers dump PID); profiling
switched off and on.

These tests share the machine with others (two cores, builds and tests
running beside them), so none of them counts on a sleep being long enough
or on getting a given share of a CPU: the program runs until the test
creates its stop file, says when it has started and how much CPU it has
used, and every bound on the profile comes from clocks read on both sides
of the event it measures."""

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import validate

# Runs until the file named by argv[1] exists (or for five minutes, if the
# test is gone).  Prints "running" once it runs (calipers is set up by
# then), and "cpu C wall W" once its loop has used C >= argv[2] seconds of
# CPU, W seconds after it started.
BUSY = """\
import os, sys, time
stop, report_after = sys.argv[1], float(sys.argv[2])
t0, c0 = time.perf_counter(), time.thread_time()
print("running", flush=True)
told = False
while not os.path.exists(stop) and time.perf_counter() - t0 < 300:
    for _ in range(50):
        sum(range(1000))
    if not told and time.thread_time() - c0 >= report_after:
        print("cpu %f wall %f" % (time.thread_time() - c0, time.perf_counter() - t0), flush=True)
        told = True
"""

#: How long a process may take to follow the switch file after `calipers
#: on|off` has returned: its sampler thread looks ten times a second, and
#: on a loaded machine it may wait for a CPU (docs/INTERNALS.md).
SWITCH_LAG = 0.3

#: What sampling adds or loses at each edge of a measured span: an interval
#: that spans a switch is credited by the state at its end, and the last
#: one before a dump is not credited yet (mean 10 ms, exponential).
EDGE = 0.1


class Busy:
    """The BUSY program under `calipers run`, started by the test."""

    def __init__(self, tmp_path, *options, report_after=1e9):
        self.prog = tmp_path / "busy.py"
        self.prog.write_text(BUSY)
        self.stop_file = tmp_path / "stop"
        self.out = tmp_path / "p.json"
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "calipers", "run", "-o", str(self.out), "--no-report",
             *options, str(self.prog), str(self.stop_file), str(report_after)],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.pending = b""

    def expect(self, word, timeout=120):
        """The program's next line, split, which must start with `word`."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 4096) if ready else b""
            if not chunk:
                self.proc.kill()
                raise AssertionError("the program said %r, then %s: %s" % (
                    self.pending, "ended" if ready else "nothing for %d s" % timeout,
                    self.proc.stderr.read().decode()))
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        assert line.decode().startswith(word), line
        return line.decode().split()

    def main_thread_cpu(self):
        """CPU seconds the program's main thread has used, read from outside
        (the scheduler's own count, in nanoseconds)."""
        path = "/proc/%d/task/%d/schedstat" % (self.proc.pid, self.proc.pid)
        return int(Path(path).read_text().split()[0]) / 1e9

    def finish(self):
        self.stopped = time.perf_counter()
        self.stop_file.write_text("")
        assert self.proc.wait(timeout=120) == 0, self.proc.stderr.read().decode()
        return validate(json.loads(self.out.read_bytes()))


@pytest.fixture
def start_busy(tmp_path):
    """start_busy(*options, report_after=...) -> Busy; killed at the end of
    the test if a failed check left it running."""
    started = []

    def start(*options, **kwargs):
        started.append(Busy(tmp_path, *options, **kwargs))
        return started[-1]

    yield start
    for busy in started:
        if busy.proc.poll() is None:
            busy.proc.kill()
            busy.proc.wait()


def busy_cpu(profile):
    """CPU seconds on busy.py's lines (the loop's, and the rest: a sample
    that lands between statements may be charged to the line after)."""
    return sum(ln["python_s"] + ln["native_s"] + ln["system_s"]
               for f in profile["files"] if Path(f["path"]).name == "busy.py"
               for ln in f["lines"])


def test_profile_interval_leaves_a_valid_profile_at_every_moment(start_busy):
    """A reader polling the file never sees a partial profile, and sees it
    rewritten about every second while the program runs."""
    busy = start_busy("--profile-interval", "1")
    busy.expect("running")
    walls = []
    deadline = time.monotonic() + 60
    while len(walls) < 4 and time.monotonic() < deadline:
        assert busy.proc.poll() is None, busy.proc.stderr.read().decode()
        if busy.out.exists():
            profile = validate(json.loads(busy.out.read_bytes()))  # never half a file
            if not walls or profile["summary"]["wall_s"] != walls[-1]:
                walls.append(profile["summary"]["wall_s"])
        time.sleep(0.01)
    final = busy.finish()
    assert len(walls) == 4, walls  # four rewrites within a minute
    # Never sooner than asked: the n-th rewrite falls due n seconds in, or
    # later (a reader may miss one, not see an extra one).  How much later
    # is not bounded here: the sampler thread writes it with the GIL, and
    # in CI's runs it has come up to 4 s late (walls 2.49, 5.86, 9.83,
    # 10.83), as it did before this test was rewritten (docs/INTERNALS.md,
    # Known gaps).
    assert walls == sorted(walls), walls
    assert all(wall >= n - 0.1 for n, wall in enumerate(walls, 1)), walls
    assert final["summary"]["wall_s"] >= walls[-1] and final["notes"] == []
    assert final["processes"][0]["end"] == "exit"


def test_dump_on_request(start_busy):
    busy = start_busy(report_after=0.6)
    busy.expect("running")
    _, loop_cpu, _, loop_wall = busy.expect("cpu")
    assert not busy.out.exists()  # nothing written before the request
    dump = subprocess.run([sys.executable, "-m", "calipers", "dump", str(busy.proc.pid)],
                          capture_output=True, text=True, timeout=120)
    asked = time.perf_counter() - busy.started
    assert dump.returncode == 0, dump.stderr
    assert "written to %s" % busy.out in dump.stderr
    profile = validate(json.loads(busy.out.read_bytes()))
    # The profile's clock starts before the program's and stops before the
    # test's: the dump holds at least what the program had done when it
    # said so, and nothing from after the request was answered.
    wall = profile["summary"]["wall_s"]
    assert float(loop_wall) <= wall <= asked, (loop_wall, wall, asked)
    assert busy_cpu(profile) >= float(loop_cpu) - EDGE, (busy_cpu(profile), loop_cpu)
    assert profile["processes"][0]["end"] is None  # still running
    assert any("on request" in n for n in profile["notes"])
    final = busy.finish()
    assert final["summary"]["wall_s"] >= wall
    assert final["processes"][0]["end"] == "exit"


def test_dump_and_switch_errors_are_one_line(tmp_path):
    for args, says in ((["dump"], "usage: calipers dump PID"),
                       (["dump", "x"], "usage: calipers dump PID"),
                       (["dump", "999999999"], "no process 999999999"),
                       (["dump", str(subprocess.os.getpid())], "is not running under calipers"),
                       (["on"], "usage: calipers on PID"),
                       (["off", "x"], "usage: calipers off PID"),
                       (["on", "999999999"], "no process 999999999"),
                       (["off", str(subprocess.os.getpid())], "is not running under calipers")):
        r = subprocess.run([sys.executable, "-m", "calipers", *args], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode != 0
        assert r.stderr.count("\n") == 1 and says in r.stderr, r.stderr


# Burns CPU off, on (with a child process) and off again, timing the two
# switches itself (each clock is read just before and just after the call)
# and its own start and end.
SWITCHED = """\
import time
t = [time.perf_counter()]
import json, subprocess, sys
import calipers

def burn(seconds):
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        pass

def phase_off():
    burn(0.4)  # off-line

def phase_on():
    burn(0.4)  # on-line

phase_off()
t.append(time.perf_counter())
on = calipers.on()
t.append(time.perf_counter())
phase_on()
subprocess.run([sys.executable, "-c", "import time\\nt = time.thread_time()\\n"
                "while time.thread_time() - t < 0.3: pass"])
t.append(time.perf_counter())
calipers.off()
t.append(time.perf_counter())
phase_off()
print(on)
t.append(time.perf_counter())
with open(sys.argv[1], "w") as f:
    json.dump(t, f)
"""


def test_off_then_switched_on_and_off_from_the_program(tmp_path):
    prog = tmp_path / "switched.py"
    prog.write_text(SWITCHED)
    out, times = tmp_path / "p.json", tmp_path / "times.json"
    r = subprocess.run([sys.executable, "-m", "calipers", "run", "--off", "-o", str(out),
                        str(prog), str(times)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "True\n"
    # The header is wrapped to the width, wherever the run's figures put
    # the breaks (a shorter temporary path moved one into this phrase).
    assert "profiling was off for" in " ".join(r.stderr.split()), r.stderr
    profile = validate(json.loads(out.read_bytes()))
    funcs = {fn["name"]: fn["total"] for f in profile["files"] for fn in f["functions"]}
    cpu = {k: v["python_s"] + v["native_s"] + v["system_s"] for k, v in funcs.items()}
    # Each phase burns 0.4 s of its thread's CPU, however loaded the machine.
    assert cpu["phase_on"] > 0.3
    assert cpu.get("phase_off", 0) < 0.05  # both off phases
    # The child started while profiling was on is in, with its own time.
    assert len(profile["processes"]) == 2
    child = profile["processes"][1]
    assert child["python_s"] + child["native_s"] + child["system_s"] > 0.2
    # calipers.on() and off() switch their own process at once: it was on
    # between the two calls and off before the first and after the second,
    # as the program timed them (10 ms: the clocks are read a call apart).
    # Started off, the run is off from its start: the time between the
    # engine's start and its first reading of the switch file counted as
    # on, 0.2 to 35 ms under stress-ng --cpu 4, once 0.58 s on a machine
    # loaded harder.
    start, before_on, after_on, before_off, after_off, end = json.loads(times.read_text())
    summary = profile["summary"]
    on_for = summary["wall_s"] - summary["paused_s"]
    assert on_for >= before_off - after_on - 0.01, (on_for, before_off - after_on)
    assert on_for <= after_off - before_on + 0.01, (on_for, after_off - before_on)
    off_for = (before_on - start) + (end - after_off)
    assert summary["paused_s"] >= off_for - 0.01, (summary["paused_s"], off_for)


def test_calipers_on_and_off_pid(start_busy):
    busy = start_busy("--off")
    busy.expect("running")
    running = time.perf_counter()

    def switch(command):
        r = subprocess.run([sys.executable, "-m", "calipers", command, str(busy.proc.pid)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stderr == "calipers: profiling of process %d is %s\n" % (
            busy.proc.pid, command), r.stderr

    # Each clock is read before the command and SWITCH_LAG after it has
    # returned: the process switched somewhere in between.
    on_sent, on_cpu_before = time.perf_counter(), busy.main_thread_cpu()
    switch("on")
    time.sleep(SWITCH_LAG)
    on_done, on_cpu_after = time.perf_counter(), busy.main_thread_cpu()
    time.sleep(1.0)
    off_sent, off_cpu_before = time.perf_counter(), busy.main_thread_cpu()
    switch("off")
    time.sleep(SWITCH_LAG)
    off_done, off_cpu_after = time.perf_counter(), busy.main_thread_cpu()
    profile = busy.finish()
    summary = profile["summary"]
    on_for = summary["wall_s"] - summary["paused_s"]
    assert on_for >= off_sent - on_done, (on_for, off_sent - on_done)
    # Off while the program ran before the first command and after the
    # second, and on for no longer than between them: started off, the run
    # is off from its start, the engine's own start-up included (it was
    # counted as on, 0.03-0.1 s, before the switch's first reading).
    assert on_for <= off_done - on_sent + 0.02, (on_for, off_done - on_sent)
    off_for = (on_sent - running) + (busy.stopped - off_done)
    assert summary["paused_s"] >= off_for, (summary["paused_s"], off_for)
    # Only the CPU used while on is in the profile.
    least, most = off_cpu_before - on_cpu_after, off_cpu_after - on_cpu_before
    assert least - EDGE <= busy_cpu(profile) <= most + EDGE, (busy_cpu(profile), least, most)
