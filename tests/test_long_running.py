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


def test_dump_errors_are_one_line(tmp_path):
    for args, says in ((["dump"], "usage: calipers dump PID"),
                       (["dump", "x"], "usage: calipers dump PID"),
                       (["dump", "999999999"], "no process 999999999"),
                       (["dump", str(subprocess.os.getpid())], "is not running under calipers")):
        r = subprocess.run([sys.executable, "-m", "calipers", *args], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode != 0
        assert r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
