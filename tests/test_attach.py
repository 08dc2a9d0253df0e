"""calipers attach PID: a running program calipers did not start is
profiled for a while and left as it was (same output, same exit status,
its hooks and sys.path as before).  Python 3.14+ through sys.remote_exec;
3.9-3.13 through calipers' own injector (ptrace, x86-64)."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import LAUNCHER, PROGRAMS, cpu, line_of, validate



def start(program, *args):
    """Start a Python program and wait until it says it is ready."""
    proc = subprocess.Popen([sys.executable, str(PROGRAMS / program)] + [str(a) for a in args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


def attach(*args, env=None, timeout=60):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(LAUNCHER + ["attach"] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=timeout, env=full_env)


def one_line_error(proc, *words):
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("calipers: error: ") and proc.stderr.count("\n") == 1, \
        proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


def test_attach_profiles_a_busy_program_and_leaves_it_unchanged(tmp_path):
    program = PROGRAMS / "attach_busy.py"
    out = tmp_path / "attached.json"
    done = tmp_path / "done"
    target = start("attach_busy.py", done)
    try:
        proc = attach("--duration", "2", "-o", out, target.pid)
    finally:
        done.touch()
        stdout, stderr = target.communicate(timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "attached to process %d" % target.pid in proc.stderr
    assert "profiling time and memory" in proc.stderr
    assert "profile written to %s" % out in proc.stderr
    # The program: the same output, nothing on its standard error, the
    # same exit status, and no trace of calipers' hooks.
    assert stdout == ("hooks unchanged: True\natexit unchanged: True\n"
                      "sys.path unchanged: True\nworked: True\n")
    assert stderr == ""
    assert target.returncode == 7
    profile = validate(json.loads(out.read_text()))
    # About the 2 s asked for (the request waits for the eval breaker, and
    # the stop for the next one: on a loaded machine a little longer).
    wall = profile["summary"]["wall_s"]
    assert 1.8 <= wall <= 10.0, wall
    lines = [(cpu(ln), ln["line"]) for f in profile["files"]
             if Path(f["path"]).name == program.name for ln in f["lines"]]
    assert lines, [f["path"] for f in profile["files"]]
    assert max(lines)[1] == line_of(program, "HOT")
    # Memory was profiled inside the target (the allocation shim redirected in).
    hot = [ln for f in profile["files"] if Path(f["path"]).name == program.name
           for ln in f["lines"] if ln["line"] == line_of(program, "HOT")][0]
    assert hot["memory"]["alloc_python_bytes"] > 0, hot["memory"]


def test_attach_to_a_blocked_program_times_out_and_leaves_it_unchanged(tmp_path):
    # Its main thread sleeps through calipers' wait: the request is
    # withdrawn; the program, when it wakes, runs the script, which finds
    # the request withdrawn, takes nothing in and removes the exchange
    # directory.
    target = start("attach_sleeper.py", "4")
    # The exchange directory is made in the attaching process's TMPDIR: a
    # directory of this test's own (another test run's attaches would show
    # in a shared /tmp).
    exchanges = tmp_path / "tmp"
    exchanges.mkdir()
    try:
        proc = attach("--duration", "1", "-o", tmp_path / "p.json", target.pid,
                      env={"CALIPERS_ATTACH_WAIT": "1.5", "TMPDIR": str(exchanges)})
    finally:
        stdout, stderr = target.communicate(timeout=60)
    one_line_error(proc, "process %d did not run calipers' request within 2 s" % target.pid,
                   "left unchanged")
    assert (stdout, stderr, target.returncode) == ("woke\n", "", 5)
    leftover = list(exchanges.glob("calipers-attach-*"))
    assert not leftover, leftover


def test_attach_refuses_a_process_that_is_not_python():
    target = subprocess.Popen(["sleep", "30"])
    try:
        proc = attach("--duration", "1", target.pid)
    finally:
        target.kill()
        target.wait()
    one_line_error(proc, "process %d is not a Python process" % target.pid, "sleep")


def test_attach_refuses_a_missing_process_and_a_zombie():
    with open("/proc/sys/kernel/pid_max") as f:
        missing = int(f.read()) + 1
    one_line_error(attach(missing), "no process %d" % missing)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open("/proc/%d/stat" % zombie.pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    try:
        one_line_error(attach(zombie.pid), "process %d has ended" % zombie.pid)
    finally:
        zombie.wait()


def test_attach_usage_errors():
    for args, words in ((["--duration", "x", "1"], "--duration: not a duration"),
                        (["abc"], "is not a process id"),
                        ([], "usage: calipers attach")):
        proc = attach(*args)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr


def test_attach_needs_no_debugger_on_path(tmp_path):
    # Before 3.14 calipers queues its request itself (ptrace), as
    # sys.remote_exec does from 3.14: nothing but the Python is on PATH.
    done = tmp_path / "done"
    target = start("attach_busy.py", done)
    try:
        proc = attach("--duration", "0.5", "-o", tmp_path / "p.json", target.pid,
                      env={"PATH": os.path.dirname(sys.executable)})
    finally:
        done.touch()
        stdout, stderr = target.communicate(timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (stderr, target.returncode) == ("", 7)
    validate(json.loads((tmp_path / "p.json").read_text()))


def _readable_by_all(path):
    """Every directory up to `path` searchable, and `path` readable, by others."""
    import stat

    path = os.path.realpath(path)
    while True:
        mode = os.stat(path).st_mode
        if not mode & (stat.S_IXOTH if stat.S_ISDIR(mode) else stat.S_IROTH):
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def _system_python():
    """A Python of this version that another user can run, or None."""
    import calipers

    path = "/usr/bin/python%d.%d" % sys.version_info[:2]
    package = os.path.dirname(os.path.abspath(calipers.__file__))
    if (os.path.exists(path) and _readable_by_all(path) and _readable_by_all(package)
            and _readable_by_all(PROGRAMS / "attach_busy.py")
            and subprocess.run([path, "-c", "import sys; sys.exit(hasattr(sys, 'abiflags') "
                                "and sys.abiflags != %r)" % sys.abiflags]).returncode == 0):
        return path
    return None


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and setpriv to run the target as another user")
def test_root_attaches_to_another_users_process(tmp_path):
    # The exchange directory is handed to the target's user; root reads
    # only regular files there and leaves nothing behind.
    python = _system_python()
    if python is None:
        pytest.skip("no /usr/bin/python%d.%d that user nobody can run with calipers' package "
                    "(this test needs a system Python of the tests' version)"
                    % sys.version_info[:2])
    import tempfile

    out = tmp_path / "other.json"
    shared = Path(tempfile.mkdtemp(prefix="calipers-test-"))  # where nobody can look
    shared.chmod(0o755)
    done = shared / "done"
    target = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               python, str(PROGRAMS / "attach_busy.py"), str(done)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd="/")
    try:
        assert target.stdout.readline() == "ready\n"
        proc = attach("--duration", "2", "-o", out, target.pid)
    finally:
        done.touch()
        stdout, stderr = target.communicate(timeout=60)
        shutil.rmtree(shared)
    assert proc.returncode == 0, proc.stderr
    assert (stdout, stderr, target.returncode) == (
        "hooks unchanged: True\natexit unchanged: True\nsys.path unchanged: True\n"
        "worked: True\n", "", 7)
    profile = validate(json.loads(out.read_text()))
    program = PROGRAMS / "attach_busy.py"
    lines = [(cpu(ln), ln["line"]) for f in profile["files"]
             if Path(f["path"]).name == program.name for ln in f["lines"]]
    assert max(lines)[1] == line_of(program, "HOT")


def test_injection_leaves_the_main_thread_as_it_was(tmp_path):
    """The injector (before 3.14 calipers attach's way in; exercised here
    on every version) stops the main thread wherever it is, makes two calls
    in it and puts it back: a C loop whose values live in vector and
    general registers gives the same result as in this process however
    often it is interrupted, a raw read(2) it is stopped in goes on and
    returns its byte (no EINTR the program would not otherwise see), and
    every queued piece of code runs once, in the program's main thread."""
    import ctypes

    lib = tmp_path / "inject_state.so"
    avx2 = "avx2" in Path("/proc/cpuinfo").read_text().split()
    subprocess.run(["cc", "-O2", "-shared", "-fPIC"] + (["-mavx2"] if avx2 else [])
                   + [str(PROGRAMS / "inject_state.c"), "-o", str(lib)], check=True)
    spin = ctypes.CDLL(str(lib)).spin
    spin.restype, spin.argtypes = ctypes.c_double, [ctypes.c_long]
    n = 60_000_000  # 0.1-0.2 s a round here
    expected = spin(n)
    target = subprocess.Popen([sys.executable, str(PROGRAMS / "inject_state.py"), str(lib), "6",
                               str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    code = "import sys\nsys.stdout.write('ran\\n')\nsys.stdout.flush()\n"
    from calipers import _calipers

    try:
        assert target.stdout.readline() == "ready\n"
        statuses = []
        for _ in range(20):  # while it spins
            statuses.append(_calipers.inject_pending_code(target.pid, code, 30))
            time.sleep(0.01)
        lines = []
        while not lines or lines[-1] != "reading\n":
            lines.append(target.stdout.readline())
            assert lines[-1], lines
        time.sleep(0.2)  # in read(2) now, or about to be
        statuses.append(_calipers.inject_pending_code(target.pid, code, 30))
        stdout, stderr = target.communicate("x", timeout=60)
    finally:
        if target.poll() is None:
            target.kill()
            target.wait()
    assert statuses == [(0, "")] * 21, statuses
    lines += stdout.splitlines(keepends=True)
    assert [ln for ln in lines if ln.startswith("spun")] == ["spun %r\n" % expected] * 6, lines
    assert lines.count("ran\n") == 21, lines
    assert lines[-2:] == ["ran\n", "read 1\n"], lines  # run as read(2) returns
    assert (stderr, target.returncode) == ("", 0)


@pytest.mark.skipif(hasattr(sys, "remote_exec"),
                    reason="sys.remote_exec writes the request without tracing the process")
def test_attach_to_a_traced_process_names_its_tracer(tmp_path):
    # A process traces at most one tracer: calipers says which holds it,
    # and leaves no exchange directory behind (the request never reached
    # the target).
    target = start("attach_sleeper.py", "3")
    exchanges = tmp_path / "tmp"
    exchanges.mkdir()
    tracer = subprocess.Popen(
        [sys.executable, "-c", "import ctypes, sys, time\n"
         "libc = ctypes.CDLL(None, use_errno=True)\n"
         "ok = libc.ptrace(0x4206, int(sys.argv[1]), None, None) == 0\n"  # PTRACE_SEIZE
         "print('seized' if ok else 'failed', flush=True)\ntime.sleep(30)\n", str(target.pid)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert tracer.stdout.readline() == "seized\n"
        proc = attach("--duration", "1", "-o", tmp_path / "p.json", target.pid,
                      env={"TMPDIR": str(exchanges)})
    finally:
        tracer.kill()
        tracer.wait()
        stdout, stderr = target.communicate(timeout=60)
    one_line_error(proc, "no permission to attach to process %d" % target.pid,
                   "being traced by process %d" % tracer.pid)
    assert (stdout, stderr, target.returncode) == ("woke\n", "", 5)
    assert not list(exchanges.iterdir())
