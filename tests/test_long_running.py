"""Long-running programs: the profile rewritten while the program runs
(--profile-interval), and on request (calipers dump PID)."""

import json
import subprocess
import sys
import time

from conftest import validate

BUSY = ("import time\nt = time.time()\nwhile time.time() - t < {secs}:\n"
        "    sum(range(1000))  # busy\n")


def start(tmp_path, secs, *options):
    prog = tmp_path / "busy.py"
    prog.write_text(BUSY.format(secs=secs))
    out = tmp_path / "p.json"
    proc = subprocess.Popen([sys.executable, "-m", "calipers", "run", "-o", str(out),
                             "--no-report", *options, str(prog)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, out


def test_profile_interval_leaves_a_valid_profile_at_every_moment(tmp_path):
    """A reader polling the file never sees a partial profile, and sees it
    grow while the program runs."""
    proc, out = start(tmp_path, 5, "--profile-interval", "1")
    walls, reads = [], 0
    while proc.poll() is None:
        if out.exists():
            profile = validate(json.loads(out.read_bytes()))  # never half a file
            reads += 1
            if not walls or profile["summary"]["wall_s"] != walls[-1]:
                walls.append(profile["summary"]["wall_s"])
        time.sleep(0.01)
    assert proc.returncode == 0, proc.stderr.read()
    final = validate(json.loads(out.read_bytes()))
    assert reads >= 10
    # Rewritten about every second while running, then at the end.
    assert len(walls) >= 4 and walls == sorted(walls), walls
    assert 0.5 <= walls[0] <= 1.6
    assert final["summary"]["wall_s"] >= 4.9 and final["notes"] == []
    assert final["processes"][0]["end"] == "exit"


def test_dump_on_request(tmp_path):
    proc, out = start(tmp_path, 4)
    time.sleep(1.5)
    assert not out.exists()  # nothing written before the request
    dump = subprocess.run([sys.executable, "-m", "calipers", "dump", str(proc.pid)],
                          capture_output=True, text=True, timeout=30)
    assert dump.returncode == 0, dump.stderr
    assert "written to %s" % out in dump.stderr
    profile = validate(json.loads(out.read_bytes()))
    assert 1.0 <= profile["summary"]["wall_s"] <= 3.0
    assert profile["processes"][0]["end"] is None  # still running
    assert any("on request" in n for n in profile["notes"])
    busy = [ln for f in profile["files"] for ln in f["lines"] if ln["line"] in (3, 4)]
    assert sum(ln["python_s"] + ln["native_s"] for ln in busy) > 0.5
    assert proc.wait(timeout=30) == 0
    assert validate(json.loads(out.read_bytes()))["summary"]["wall_s"] >= 3.9


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


SWITCHED = """\
import subprocess, sys, time
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
print(calipers.on())
phase_on()
subprocess.run([sys.executable, "-c", "import time\\nt = time.thread_time()\\n"
                "while time.thread_time() - t < 0.3: pass"])
calipers.off()
phase_off()
"""


def test_off_then_switched_on_and_off_from_the_program(tmp_path):
    prog = tmp_path / "switched.py"
    prog.write_text(SWITCHED)
    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, "-m", "calipers", "run", "--off", "-o", str(out),
                        str(prog)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "True\n"
    assert "profiling was off for" in r.stderr
    profile = validate(json.loads(out.read_bytes()))
    funcs = {fn["name"]: fn["total"] for f in profile["files"] for fn in f["functions"]}
    cpu = {k: v["python_s"] + v["native_s"] + v["system_s"] for k, v in funcs.items()}
    assert cpu["phase_on"] > 0.3
    assert cpu.get("phase_off", 0) < 0.05  # both off phases
    # The child started while profiling was on is in, with its own time.
    assert len(profile["processes"]) == 2
    child = profile["processes"][1]
    assert child["python_s"] + child["native_s"] + child["system_s"] > 0.2
    assert 0.7 <= profile["summary"]["paused_s"] <= 1.2
    assert profile["summary"]["wall_s"] >= 1.4


def test_calipers_on_and_off_pid(tmp_path):
    proc, out = start(tmp_path, 3.5, "--off")
    time.sleep(1)
    for command, pause in (("on", 1.0), ("off", 0)):
        r = subprocess.run([sys.executable, "-m", "calipers", command, str(proc.pid)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and r.stderr == "calipers: profiling of process %d is %s\n" % (
            proc.pid, command), r.stderr
        time.sleep(pause)
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    profile = validate(json.loads(out.read_bytes()))
    busy = [ln for f in profile["files"] for ln in f["lines"] if ln["line"] in (3, 4)]
    assert 0.6 <= sum(ln["python_s"] + ln["native_s"] + ln["system_s"] for ln in busy) <= 1.4
    assert 2.1 <= profile["summary"]["paused_s"] <= 2.9
