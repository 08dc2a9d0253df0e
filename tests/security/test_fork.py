"""os.fork() from several threads at once (multiprocessing with threads,
gunicorn): the profiler's fork hooks run in every forking thread at the
same time; they must never deadlock or crash the program, the program's
own result and exit status must be what they are without calipers, and
every child must be merged into the profile (docs/INTERNALS.md,
"Processes").  Each run is bounded: a hung one is killed (SIGKILL: a
process hung in the hooks ignored SIGTERM) after its threads' backtraces
are taken, so the test fails with them instead of hanging."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import validate

THREADS, FORKS, MAIN_FORKS = 4, 50, 10
#: Each thread's last child and the main thread's last one burn this much
#: CPU: their samples must be in the merged profile.
BURN_S = 0.03

#: THREADS threads fork FORKS children each while the main thread forks
#: MAIN_FORKS (its hooks take the pending-call path, the others' not); each
#: child leaves with its own status, which its parent checks.
PROGRAM = """\
import os, sys, threading, time, warnings
# Python 3.12+ warns that a multi-threaded process forks; true here, and
# not what is tested.
warnings.simplefilter("ignore", DeprecationWarning)
THREADS, FORKS, MAIN_FORKS, BURN_S = {threads}, {forks}, {main_forks}, {burn}
bad = []

def burn():
    t0 = time.thread_time()
    while time.thread_time() - t0 < BURN_S:
        pass

def fork_some(k, n):
    for i in range(n):
        pid = os.fork()
        if pid == 0:
            if i == n - 1:
                burn()
            os._exit(k)
        _, status = os.waitpid(pid, 0)
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != k:
            bad.append((k, status))

threads = [threading.Thread(target=fork_some, args=(k + 1, FORKS)) for k in range(THREADS)]
for t in threads:
    t.start()
fork_some(100, MAIN_FORKS)
for t in threads:
    t.join()
print("ok" if not bad else "bad: %r" % bad[:5])
sys.exit(3 if bad else 0)
"""

RUNS = 20
RUN_TIMEOUT_S = 60


def backtraces(pid):
    """Every thread's backtrace of a hung process (gdb), or its threads'
    kernel wait channels: what the failure shows."""
    gdb = shutil.which("gdb")
    if gdb:
        out = subprocess.run([gdb, "-batch", "-nx", "-p", str(pid), "-iex",
                              "set auto-load python-scripts off", "-ex", "thread apply all bt 25"],
                             capture_output=True, text=True, timeout=120)
        return out.stdout[-20000:]
    lines = []
    for task in sorted(Path("/proc/%d/task" % pid).glob("*")):
        try:
            lines.append("%s %s" % (task.name, (task / "wchan").read_text()))
        except OSError:
            pass
    return "\n".join(lines)


def run_bounded(cmd, cwd):
    """Run cmd in a session of its own; on timeout, take the backtraces,
    SIGKILL the whole session and fail."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        where = backtraces(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError("hung for %d s (killed); its threads:\n%s" % (RUN_TIMEOUT_S, where))
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a child left behind
        except ProcessLookupError:
            pass
    return proc.returncode, out, err


def test_threads_forking_at_once(tmp_path, run_plain):
    prog = tmp_path / "forkers.py"
    prog.write_text(PROGRAM.format(threads=THREADS, forks=FORKS, main_forks=MAIN_FORKS,
                                   burn=BURN_S))
    plain = run_plain(prog)
    assert (plain.returncode, plain.stdout, plain.stderr) == (0, "ok\n", "")
    children = THREADS * FORKS + MAIN_FORKS
    for run in range(RUNS):
        out = tmp_path / ("profile-%d.json" % run)
        rc, stdout, stderr = run_bounded(
            [sys.executable, "-m", "calipers", "run", "--no-report", "-o", str(out), str(prog)],
            tmp_path)
        assert (rc, stdout, stderr) == (0, "ok\n", ""), "run %d" % run
        profile = validate(json.loads(out.read_text()))
        main, *forked = profile["processes"]
        assert len(forked) == children, "run %d" % run
        assert all(p["forked"] and p["ppid"] == main["pid"] and p["end"] == "os._exit"
                   for p in forked), "run %d" % run
        assert len({p["pid"] for p in forked}) == children
        # The children that burned CPU brought their samples along.
        busy = [p for p in forked if p["python_s"] + p["native_s"] + p["system_s"] >= BURN_S / 2]
        assert len(busy) >= THREADS + 1, "run %d: %d busy children" % (run, len(busy))
        out.unlink()


#: Threads that fork until the process is killed.
FOREVER = """\
import os, sys, threading, warnings
warnings.simplefilter("ignore", DeprecationWarning)

def fork_forever():
    while True:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

for _ in range({threads}):
    threading.Thread(target=fork_forever, daemon=True).start()
print("forking", flush=True)
threading.Event().wait()
"""


def test_sigterm_while_threads_fork(tmp_path):
    """SIGTERM arriving while threads fork (so the signal helper is often
    stopped for a fork): the profile is written and the process dies by
    the signal, as it would without calipers."""
    prog = tmp_path / "forever.py"
    prog.write_text(FOREVER.format(threads=THREADS))
    for run in range(5):
        out = tmp_path / ("profile-%d.json" % run)
        proc = subprocess.Popen([sys.executable, "-m", "calipers", "run", "--no-report", "-o",
                                 str(out), str(prog)], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert proc.stdout.readline() == "forking\n"
            time.sleep(0.5 + 0.2 * run)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            where = backtraces(proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise AssertionError("run %d: not ended by SIGTERM in %d s; its threads:\n%s"
                                 % (run, RUN_TIMEOUT_S, where))
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert proc.returncode == -signal.SIGTERM, (run, err)
        main = validate(json.loads(out.read_text()))["processes"][0]
        assert (main["end"], main["signal"]) == ("signal", signal.SIGTERM), run
