"""Files calipers creates, on a shared machine (docs/INTERNALS.md, "Files
calipers creates"): no symbolic link planted at a name calipers uses, or
used to use, is followed; nothing but a regular file is replaced; a
target calipers will not or cannot write fails at start, before the
program runs; what it creates is private; `-o -` writes to standard
output.  Run as root (as CI does) the attacks are real: a followed link
would change its target."""

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import validate

ROOT = os.geteuid() == 0
#: A program that leaves a marker: the launcher refused before it ran iff
#: the marker is absent.
MARKER_PROG = "open({marker!r}, 'w').write('ran')\nsum(range(10**5))\n"
PRECIOUS = "precious\n"


def calipers(*args, cwd, env=None, timeout=120, preexec_fn=None, stdout=subprocess.PIPE):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "calipers", *args], cwd=cwd, env=full_env,
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=timeout,
                          preexec_fn=preexec_fn)


def marker_program(tmp_path):
    marker = tmp_path / "ran"
    prog = tmp_path / "prog.py"
    prog.write_text(MARKER_PROG.format(marker=str(marker)))
    return prog, marker


def assert_refused_at_start(proc, marker, *fragments):
    """One line, status 2, and the program never ran."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("calipers: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not marker.exists(), "the program ran"


def victim_file(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text(PRECIOUS)
    victim.chmod(0o644)
    return victim


def assert_untouched(victim):
    assert victim.read_text() == PRECIOUS
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


# ---- planted links -------------------------------------------------------

def test_links_planted_at_the_old_temporary_and_fallback_names(tmp_path):
    """calipers used <out>.tmp-<pid> for the profile being written and
    $TMPDIR/calipers-profile-<pid>.json when the output could not be
    written; both are planted (the pid is known: the launcher keeps the
    pid of the process started for it).  The program removes its output
    directory, so the profile cannot be written where asked and goes to
    the private fallback."""
    victim = victim_file(tmp_path)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    outdir = tmp_path / "out"
    outdir.mkdir()
    out = outdir / "p.json"

    def plant():  # in the child, before it execs calipers: same pid
        pid = os.getpid()
        for path in ("%s.tmp-%d" % (out, pid), "%s/calipers-profile-%d.json" % (tmpdir, pid)):
            os.symlink(str(victim), path)

    # First run: written where asked, past the planted temporary name.
    prog = tmp_path / "prog.py"
    prog.write_text("sum(range(10**6))\n")
    proc = calipers("run", "--no-report", "-o", str(out), str(prog), cwd=tmp_path,
                    env={"TMPDIR": str(tmpdir)}, preexec_fn=plant)
    assert proc.returncode == 0, proc.stderr
    validate(json.loads(out.read_text()))
    assert_untouched(victim)
    links = [p for p in os.listdir(outdir) if p != "p.json"]
    assert [os.path.islink(os.path.join(outdir, p)) for p in links] == [True], links

    # Second run: the output directory is gone at exit.
    prog.write_text("import os, shutil\nsum(range(10**6))\nshutil.rmtree(%r)\n" % str(outdir))
    proc = calipers("run", "--no-report", "-o", str(out), str(prog), cwd=tmp_path,
                    env={"TMPDIR": str(tmpdir)}, preexec_fn=plant)
    assert proc.returncode == 0, proc.stderr
    assert_untouched(victim)
    assert "could not write the profile to %s" % out in proc.stderr, proc.stderr
    fallback = Path(proc.stderr.rsplit("it is in ", 1)[1].split()[0])
    assert fallback.parent.parent == tmpdir
    assert mode(fallback.parent) == 0o700 and mode(fallback) == 0o600
    assert fallback.parent.stat().st_uid == os.geteuid()
    validate(json.loads(fallback.read_text()))
    old_names = [p for p in tmpdir.iterdir() if p.name.endswith(".json")]
    assert len(old_names) == 2 and all(p.is_symlink() for p in old_names)  # left alone


def test_link_at_the_output_path_is_refused(tmp_path):
    prog, marker = marker_program(tmp_path)
    victim = victim_file(tmp_path)
    for option in ("-o", "--html"):
        link = tmp_path / ("link" + option)
        link.symlink_to(victim)
        proc = calipers("run", option, str(link), str(prog), cwd=tmp_path)
        assert_refused_at_start(proc, marker, str(link), "symbolic link")
        assert link.is_symlink()
        assert_untouched(victim)
        # A dangling link: its target is not created (the old check opened
        # the output for appending, creating the file the link names).
        dangling = tmp_path / ("dangling" + option)
        dangling.symlink_to(tmp_path / ("created" + option))
        proc = calipers("run", option, str(dangling), str(prog), cwd=tmp_path)
        assert_refused_at_start(proc, marker, "symbolic link")
        assert not (tmp_path / ("created" + option)).exists()
    # calipers view --html too.
    profile = tmp_path / "p.json"
    proc = calipers("run", "--no-report", "-o", str(profile), str(prog), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = calipers("view", "--html", str(tmp_path / "link--html"), str(profile), cwd=tmp_path)
    assert proc.returncode == 2 and "symbolic link" in proc.stderr, proc.stderr
    assert_untouched(victim)


def running_program(tmp_path, *options, seconds=30, env=None, source=None):
    """A profiled program that runs until killed (or the given source),
    and its run directory (read, as `calipers dump` does, from its
    environment)."""
    prog = tmp_path / "sleeper.py"
    prog.write_text(source or "import time\nt = time.time()\nwhile time.time() - t < %d:\n"
                    "    time.sleep(0.01)\n" % seconds)
    proc = subprocess.Popen([sys.executable, "-m", "calipers", "run", "--no-report",
                             "-o", str(tmp_path / "p.json"), *options, str(prog)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, **(env or {})))
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            environ = Path("/proc/%d/environ" % proc.pid).read_bytes().split(b"\0")
        except OSError:
            environ = []
        config = [e for e in environ if e.startswith(b"CALIPERS_CONFIG=")]
        if config and Path("/proc/%d/cmdline" % proc.pid).read_bytes().find(b"sleeper.py") > 0:
            fields = dict(f.partition("=")[::2] for f in config[0].decode().split("\x1e"))
            if os.path.isdir(fields["run_dir"]):
                time.sleep(0.3)  # the engine started
                return proc, Path(fields["run_dir"])
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("the program did not start")


def stop(proc):
    proc.kill()
    proc.wait(timeout=30)


def test_link_planted_at_the_parts_file(tmp_path):
    """A forked child appends its profile to the run directory's `parts`,
    a name known in advance: a link planted there is not followed (that
    child's part is lost, the link's target untouched)."""
    victim = victim_file(tmp_path)
    go = tmp_path / "go"
    source = ("import os, time\nt = time.time()\n"
              "while not os.path.exists(%r) and time.time() - t < 30:\n"
              "    time.sleep(0.01)\n"
              "pid = os.fork()\nif pid == 0:\n    os._exit(0)\n"
              "print(os.waitpid(pid, 0)[1])\n" % str(go))
    proc, run_dir = running_program(tmp_path, source=source)
    try:
        (run_dir / "parts").symlink_to(victim)
        go.touch()
        out, _ = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == 0 and out == b"0\n"
    assert_untouched(victim)
    profile = json.loads((tmp_path / "p.json").read_text())
    assert validate(profile)
    assert [p["forked"] for p in profile["processes"]] == [False]


def test_links_planted_in_the_run_directory(tmp_path):
    """`calipers dump PID` and `calipers off PID` create a file in the
    program's run directory, which the program's user can write: a link
    planted there must not lead another user (root) anywhere.  The
    request link dangles (the program would answer a link to an existing
    file at once, before the dump command starts)."""
    victim = victim_file(tmp_path)
    created = tmp_path / "created-by-dump"
    proc, run_dir = running_program(tmp_path)
    try:
        (run_dir / "dump-request").symlink_to(created)
        (run_dir / "off").symlink_to(victim)
        dump = calipers("dump", str(proc.pid), cwd=tmp_path, timeout=60)
        # The request (the planted link counts as one) was answered.
        assert dump.returncode == 0, dump.stderr
        assert validate(json.loads((tmp_path / "p.json").read_text()))
        assert not created.exists()
        off = calipers("off", str(proc.pid), cwd=tmp_path)
        assert off.returncode == 0, off.stderr
        assert_untouched(victim)
        assert calipers("on", str(proc.pid), cwd=tmp_path).returncode == 0
        assert not os.path.lexists(run_dir / "off")
        assert calipers("off", str(proc.pid), cwd=tmp_path).returncode == 0
        assert mode(run_dir / "off") == 0o600 and not (run_dir / "off").is_symlink()
        assert_untouched(victim)
    finally:
        stop(proc)


# ---- what is not a regular file is never replaced --------------------------

@pytest.fixture
def dev_null_guard():
    """If /dev/null stops being the null device (a regression), put it
    back, for the other programs on this machine, and fail."""
    yield
    st = os.lstat("/dev/null")
    if not stat.S_ISCHR(st.st_mode):
        os.unlink("/dev/null")
        os.mknod("/dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.chmod("/dev/null", 0o666)
        pytest.fail("/dev/null was replaced by a regular file")


def test_dev_null_is_not_replaced(tmp_path, dev_null_guard):
    prog, marker = marker_program(tmp_path)
    for option in ("-o", "--html"):
        proc = calipers("run", option, "/dev/null", str(prog), cwd=tmp_path)
        assert_refused_at_start(proc, marker, "/dev/null", "character device")
        assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    assert "-o - writes it to standard output" in calipers(
        "run", "-o", "/dev/null", str(prog), cwd=tmp_path).stderr


@pytest.mark.skipif(not ROOT, reason="creating a device needs root")
def test_a_device_of_our_own_is_not_replaced(tmp_path):
    """The same with a null device of the test's own: the writer at exit
    would have replaced it, not just the check at start."""
    prog, marker = marker_program(tmp_path)
    dev = tmp_path / "null"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    proc = calipers("run", "-o", str(dev), str(prog), cwd=tmp_path)
    assert_refused_at_start(proc, marker, "character device")
    # Made a device while the program runs (after the check at start):
    # the writer at exit refuses it too, and the profile is not lost.
    dev.unlink()
    late = tmp_path / "late"
    prog.write_text("import os, stat\nos.mknod(%r, 0o666 | stat.S_IFCHR, os.makedev(1, 3))\n"
                    "sum(range(10**6))\n" % str(late))
    proc = calipers("run", "--no-report", "-o", str(late), str(prog), cwd=tmp_path,
                    env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISCHR(os.lstat(late).st_mode)
    assert "it is a character device" in proc.stderr and "it is in " in proc.stderr
    validate(json.loads(Path(proc.stderr.rsplit("it is in ", 1)[1].split()[0]).read_text()))


def test_fifo_is_refused_at_start_and_does_not_hang(tmp_path):
    prog, marker = marker_program(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    for option in ("-o", "--html"):
        proc = calipers("run", option, str(fifo), str(prog), cwd=tmp_path, timeout=60)
        assert_refused_at_start(proc, marker, "FIFO")
    assert time.monotonic() - t0 < 30
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_fifo_named_explicitly_as_standard_output(tmp_path):
    """The way to write into a FIFO: -o - with the FIFO as standard output."""
    prog = tmp_path / "prog.py"
    prog.write_text("print('out')\nsum(range(10**6))\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    with open(fifo, "w") as w:
        proc = calipers("run", "--no-report", "-o", "-", str(prog), cwd=tmp_path, stdout=w)
    reader.join(60)
    assert proc.returncode == 0, proc.stderr
    assert got[0].startswith("out\n{")
    validate(json.loads(got[0][len("out\n"):]))


# ---- -o - ------------------------------------------------------------------

STDOUT_PROG = """\
import os, subprocess, sys
sys.stdout.write("buffered\\n")  # in sys.stdout's buffer until the end
os.write(1, b"raw\\n")
subprocess.run([sys.executable, "-c", "print('child'); sum(range(10**6))"])
sum(range(2 * 10**6))
"""


def test_dash_writes_the_profile_to_standard_output(tmp_path):
    """After everything the program (and its children) wrote there, once;
    the report goes to standard error as always."""
    prog = tmp_path / "prog.py"
    prog.write_text(STDOUT_PROG)
    buffered = {"PYTHONUNBUFFERED": ""}
    plain = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True,
                           env=dict(os.environ, **buffered))
    head = "raw\nchild\nbuffered\n"
    assert plain.stdout == head
    proc = calipers("run", "-o", "-", str(prog), cwd=tmp_path, env=buffered)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(head), proc.stdout[:200]
    profile = validate(json.loads(proc.stdout[len(head):]))
    assert len(profile["processes"]) == 2
    assert proc.stderr.rstrip().endswith("calipers: profile written to standard output")
    assert not (tmp_path / "-").exists() and not (tmp_path / "calipers-profile.json").exists()
    quiet = calipers("run", "--no-report", "-o", "-", str(prog), cwd=tmp_path, env=buffered)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert quiet.stdout.startswith(head) and json.loads(quiet.stdout[len(head):])


def test_dash_with_a_closed_standard_output_keeps_the_profile(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text("import os\nsum(range(10**6))\nos.close(1)\n")
    proc = calipers("run", "--no-report", "-o", "-", str(prog), cwd=tmp_path,
                    env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "could not write the profile to standard output" in proc.stderr
    validate(json.loads(Path(proc.stderr.rsplit("it is in ", 1)[1].split()[0]).read_text()))


def test_dash_refuses_what_would_write_twice(tmp_path):
    prog, marker = marker_program(tmp_path)
    proc = calipers("run", "-o", "-", "--profile-interval", "1", str(prog), cwd=tmp_path)
    assert_refused_at_start(proc, marker, "--profile-interval")
    proc, _ = running_program(tmp_path, "-o", "-")
    try:
        dump = calipers("dump", str(proc.pid), cwd=tmp_path)
        assert dump.returncode == 1 and "standard output" in dump.stderr, dump.stderr
        assert dump.stderr.count("\n") == 1
    finally:
        stop(proc)


# ---- what cannot be written fails at start ----------------------------------

def test_unwritable_or_too_long_output_fails_before_the_program_runs(tmp_path):
    prog, marker = marker_program(tmp_path)
    too_long_name = str(tmp_path / ("x" * 300))
    too_long_path = "/" + "a/" * 2100 + "p.json"
    for option in ("-o", "--html"):
        for target, says in ((too_long_name, "file name too long"),
                             (too_long_path, "file name too long"),
                             ("/proc/calipers-p.json", "cannot write"),
                             ("/nonexistent-dir/p.json", "no such directory"),
                             (str(tmp_path), "is a directory")):
            proc = calipers("run", option, target, str(prog), cwd=tmp_path)
            assert_refused_at_start(proc, marker, says)
    # A directory the user cannot write to (root can, hence not as root).
    if not ROOT:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        proc = calipers("run", "-o", str(ro / "p.json"), str(prog), cwd=tmp_path)
        assert_refused_at_start(proc, marker, "permission denied")
    # The check leaves nothing behind.
    assert sorted(os.listdir(tmp_path)) == sorted(["prog.py"] + ([] if ROOT else ["ro"]))


# ---- modes -------------------------------------------------------------------

MODES_PROG = """\
import json, os, subprocess, sys, time
environ = open("/proc/self/environ", "rb").read().split(b"\\0")
config = [e for e in environ if e.startswith(b"CALIPERS_CONFIG=")][0].decode()
run_dir = dict(f.partition("=")[::2] for f in config.split("\\x1e"))["run_dir"]
go = sys.argv[1] + ".go"
child = subprocess.Popen([sys.executable, "-c", "import os, sys, time\\n"
                          "while not os.path.exists(sys.argv[1]): time.sleep(0.01)", go])
deadline = time.time() + 60
while "parts" not in os.listdir(run_dir) and time.time() < deadline:
    time.sleep(0.01)  # the child has started profiling (its start record)
modes = {n: os.stat(os.path.join(run_dir, n)).st_mode & 0o777 for n in os.listdir(run_dir)}
modes["."] = os.stat(run_dir).st_mode & 0o777
open(go, "w").close()
child.wait()
json.dump(modes, open(sys.argv[1], "w"))
"""


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_modes_of_what_calipers_creates(tmp_path, umask):
    """The run directory 0700 and the files in it 0600; the profile and the
    HTML report the mode any new file gets under the umask."""
    prog = tmp_path / "modes.py"
    prog.write_text(MODES_PROG)
    truth = tmp_path / "modes.json"
    out, html = tmp_path / "p.json", tmp_path / "p.html"
    proc = calipers("run", "--no-report", "--off", "-o", str(out), "--html", str(html),
                    str(prog), str(truth), cwd=tmp_path, preexec_fn=lambda: os.umask(umask))
    assert proc.returncode == 0, proc.stderr
    modes = json.loads(truth.read_text())
    assert modes.pop(".") == 0o700
    assert modes.pop("off") == 0o600  # --off
    assert "parts" in modes and set(modes.values()) == {0o600}, modes
    assert mode(out) == mode(html) == 0o666 & ~umask


# ---- the run directory another user controls ---------------------------------

def one_line_refusal(proc, *fragments):
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, proc.stderr


@pytest.mark.skipif(not ROOT, reason="giving a directory to another user needs root")
def test_foreign_run_directory_is_refused(tmp_path):
    proc, run_dir = running_program(tmp_path)
    try:
        os.chown(run_dir, 65534, -1)  # nobody
        for command in ("dump", "off", "on", "snapshot", "heap"):
            refused = calipers(command, str(proc.pid), cwd=tmp_path)
            one_line_refusal(refused, "will not use the control directory",
                             "belongs to uid 65534")
        assert os.listdir(run_dir) == []
        os.chown(run_dir, 0, -1)
        # Writable by others: refused too.
        run_dir.chmod(0o777)
        one_line_refusal(calipers("dump", str(proc.pid), cwd=tmp_path), "others may write")
        run_dir.chmod(0o700)
        # A symbolic link in its place (to a directory of the user's own).
        moved = run_dir.with_name(run_dir.name + "-moved")
        run_dir.rename(moved)
        run_dir.symlink_to(moved)
        one_line_refusal(calipers("dump", str(proc.pid), cwd=tmp_path), "symbolic link")
        assert os.listdir(moved) == []
        run_dir.unlink()
        moved.rename(run_dir)
        # Its own: answered.
        assert calipers("dump", str(proc.pid), cwd=tmp_path).returncode == 0
    finally:
        stop(proc)


# ---- stale run directories ---------------------------------------------------

def dead_pid():
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_stale_run_directories_are_cleaned_safely(tmp_path):
    """A run killed with SIGKILL leaves its run directory; the next run
    removes those of dead main processes that are this user's own real
    directories in this pid namespace, and nothing else."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    victim = victim_file(tmp_path)
    ns = os.stat("/proc/self/ns/pid").st_ino
    dead = dead_pid()
    # A real stale one, left by a run killed with SIGKILL.
    sleeper, killed_dir = running_program(tmp_path, env={"TMPDIR": str(tmpdir)})
    stop(sleeper)
    assert killed_dir.is_dir() and killed_dir.parent == tmpdir

    def made(name, owner=None):
        d = tmpdir / name
        d.mkdir(mode=0o700)
        (d / "0000-1.json").write_text("{}")
        (d / "link").symlink_to(victim)
        if owner is not None:
            os.chown(d, owner, -1)
        return d

    removed = [made("calipers-run-%d-%d-abcdefgh" % (dead, ns))]
    kept = [made("calipers-run-%d-%d-live0000" % (os.getpid(), ns)),  # alive
            made("calipers-run-%d-%d-otherns0" % (dead, ns + 1)),  # another namespace
            made("calipers-run-oldstyle")]  # an older calipers: no pid
    if ROOT:
        kept.append(made("calipers-run-%d-%d-foreign0" % (dead, ns), owner=65534))
    target = made("not-a-run-dir")
    link = tmpdir / ("calipers-run-%d-%d-symlink0" % (dead, ns))
    link.symlink_to(target)
    prog = tmp_path / "prog.py"
    prog.write_text("pass\n")
    run = calipers("run", "--no-report", "-o", str(tmp_path / "p.json"), str(prog),
                   cwd=tmp_path, env={"TMPDIR": str(tmpdir)})
    assert run.returncode == 0, run.stderr
    assert not killed_dir.exists()
    for d in removed:
        assert not d.exists(), d
    for d in kept + [target]:
        assert sorted(os.listdir(d)) == ["0000-1.json", "link"], d
    assert link.is_symlink()
    assert_untouched(victim)
    # The run's own directory is gone at its end too.
    assert sorted(p.name for p in tmpdir.iterdir()) == sorted(
        [d.name for d in kept] + [target.name, link.name])



GARBLED_PARTS = """\
import os
environ = open("/proc/self/environ", "rb").read().split(b"\\0")
config = [e for e in environ if e.startswith(b"CALIPERS_CONFIG=")][0].decode()
run_dir = dict(f.partition("=")[::2] for f in config.split("\\x1e"))["run_dir"]
with open(os.path.join(run_dir, "parts"), "ab") as f:
    f.write(b"\\x1eno-pid-here.run\\n\\x1e.run\\n\\x1e0-x\\n{not json")
"""


def test_garbled_records_in_the_parts_file(tmp_path):
    """Start records and parts whose names carry no pid (a parts file
    written by something else) are counted as unreadable: the main
    process's profile is still written, with a note."""
    prog = tmp_path / "garbled.py"
    prog.write_text(GARBLED_PARTS)
    proc = calipers("run", "--no-report", "-o", str(tmp_path / "p.json"), str(prog),
                    cwd=tmp_path)
    assert proc.returncode == 0 and "calipers" not in proc.stderr, proc.stderr
    profile = json.loads((tmp_path / "p.json").read_text())
    assert validate(profile)
    assert any("3 child profiles could not be read" in n for n in profile["notes"]), \
        profile["notes"]
