"""The program under calipers behaves exactly as without it."""
import json
import signal
import sys

import pytest

from conftest import PROGRAMS


def test_sees_the_same_start(run_calipers, run_plain, tmp_path):
    prog = PROGRAMS / "introspect.py"
    plain = run_plain(prog, "a", "--b", "c d")
    prof = run_calipers(prog, "a", "--b", "c d", options=["--no-report"])
    assert prof.returncode == plain.returncode == 0
    assert json.loads(prof.stdout) == json.loads(plain.stdout)
    assert prof.stderr == plain.stderr == "to stderr\n"
    assert prof.profile is not None


def test_module_mode_sees_the_same_start(run_calipers, run_plain, tmp_path):
    (tmp_path / "mymod.py").write_text((PROGRAMS / "introspect.py").read_text())
    plain = run_plain("mymod", "x", module=True)
    prof = run_calipers("mymod", "x", options=["--no-report"], module=True)
    assert json.loads(prof.stdout) == json.loads(plain.stdout)
    assert prof.profile["program"]["module"] == "mymod"


def test_user_pythonpath_and_sitecustomize_survive(run_calipers, run_plain, tmp_path):
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE = 1\n")
    prog = tmp_path / "p.py"
    prog.write_text("import builtins, os\nprint(builtins.USER_SITE, os.environ['PYTHONPATH'])\n")
    env = {"PYTHONPATH": str(site)}
    plain = run_plain(prog, env=env)
    prof = run_calipers(prog, env=env, options=["--no-report"])
    assert prof.stdout == plain.stdout == "1 %s\n" % site


@pytest.mark.parametrize("how,status", [
    ("exit3", 3), ("exit-message", 1), ("raise", 1), ("keyboard", -signal.SIGINT),
    ("sigint", -signal.SIGINT), ("os._exit", 5), ("sigterm", -signal.SIGTERM),
    ("sighup", -signal.SIGHUP), ("sigusr1", -signal.SIGUSR1), ("sigalrm", -signal.SIGALRM),
    ("sigterm-thread", -signal.SIGTERM)])
def test_exit_status_output_and_profile(run_calipers, run_plain, how, status):
    prog = PROGRAMS / "exits.py"
    # Children inherit an ignored SIGHUP (a runner started with nohup):
    # give both runs the default action, which is what the case is about.
    hup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        plain = run_plain(prog, how)
        prof = run_calipers(prog, how, options=["--no-report", "--interval", "1ms"])
    finally:
        signal.signal(signal.SIGHUP, hup)
    if status is not None:
        assert plain.returncode == status
    assert prof.returncode == plain.returncode
    assert prof.stdout == plain.stdout
    assert prof.stderr == plain.stderr  # same traceback, nothing of ours
    assert prof.profile is not None and prof.profile["summary"]["samples"] >= 1
    end = prof.profile["processes"][0]
    if status < 0:
        # Killed by the signal: the profile was written first.
        assert (end["end"], end["signal"]) == ("signal", -status) or how in ("keyboard", "sigint")
    elif how == "os._exit":
        assert end["end"] == "os._exit"


def test_signal_handlers_timers_and_no_eintr(run_calipers, run_plain):
    prog = PROGRAMS / "signals.py"
    plain = run_plain(prog)
    prof = run_calipers(prog, options=["--no-report", "--interval", "1ms"])
    assert plain.returncode == prof.returncode == 0, prof.stderr
    facts = json.loads(prof.stdout)
    assert facts == json.loads(plain.stdout)
    assert facts["quiet_polls"] == [0] * 10  # no EINTR from the profiler
    assert facts["caught"] == [signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                               signal.SIGINT]
    assert facts["dispositions"]["SIGTERM"] == "SIG_DFL"
    assert facts["timer_polls"] == ["eintr"] * 3
    assert facts["select_waited_enough"] and facts["alarms_enough"]
    assert facts["prof_ticks_enough"]


def test_summary_goes_to_stderr_not_stdout(run_calipers):
    run = run_calipers(PROGRAMS / "waits.py")
    assert run.stdout == ""
    assert "calipers: %s ran" % (PROGRAMS / "waits.py") in run.stderr
    assert "time.sleep(0.4)" in run.stderr
    assert "profile written to" in run.stderr


def test_a_program_that_closes_every_descriptor_keeps_its_files(run_calipers, run_plain,
                                                                tmp_path):
    # A daemon closes every descriptor it did not open, then opens its own
    # files, which may get the numbers calipers held: calipers must never
    # use those numbers again (a rewind of its /proc directory would move
    # the program's file offset), and the program's files stay its own.
    prog = tmp_path / "daemon.py"
    prog.write_text(
        "import os, threading, time\n"
        "os.closerange(3, 4096)\n"
        "fds = [os.open('f%d.txt' % i, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) for i in range(4)]\n"
        "def burn():\n"
        "    t0 = time.thread_time()\n"
        "    while time.thread_time() - t0 < 0.1:\n"
        "        pass\n"
        "t = threading.Thread(target=burn); t.start()\n"
        "n = 0\n"
        "deadline = time.monotonic() + 0.6\n"
        "while time.monotonic() < deadline:\n"
        "    for fd in fds:\n"
        "        os.write(fd, b'%08d\\n' % n)\n"
        "    n += 1\n"
        "    sum(range(2000))\n"
        "t.join()\n"
        "ok = all(os.lseek(fd, 0, os.SEEK_CUR) == 9 * n for fd in fds)\n"
        "print(ok)\n")
    plain = run_plain(prog)
    run = run_calipers(prog, options=["--no-report"])
    assert plain.stdout == "True\n", plain.stderr
    assert run.returncode == 0 and run.stdout == "True\n", run.stderr
    for i in range(4):
        lines = (tmp_path / ("f%d.txt" % i)).read_bytes().splitlines()
        assert lines == [b"%08d" % k for k in range(len(lines))]
    assert run.profile["schema"] == "calipers/1"
