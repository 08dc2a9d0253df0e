"""What the processes a profiled program starts see of calipers in their
environment (docs/INTERNALS.md, "Files calipers creates" and
"Processes"): following children needs the variables in the C
environment, so a program that is not Python (a shell, make, gcc) sees
them; the program itself never does, nor does anything under
--no-follow.  These tests pin down exactly that set."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import calipers

BOOT = os.path.join(os.path.dirname(calipers.__file__), "_boot")
SHIM = os.path.join(os.path.dirname(calipers.__file__), "libcalipers_shim.so")
OURS = ("CALIPERS_CONFIG", "CALIPERS_PYTHONPATH", "CALIPERS_LD_PRELOAD", "LD_PRELOAD",
        "PYTHONPATH")

PROG = """\
import json, os, subprocess, sys
# A shell (not Python) prints its environment, NUL-separated.
raw = subprocess.run(["sh", "-c", "env -0"], stdout=subprocess.PIPE).stdout
shell = dict(e.decode().partition("=")[::2] for e in raw.split(b"\\0") if e)
# A child given an explicit copy of the program's environment.
raw = subprocess.run(["sh", "-c", "env -0"], stdout=subprocess.PIPE,
                     env=dict(os.environ)).stdout
explicit = dict(e.decode().partition("=")[::2] for e in raw.split(b"\\0") if e)
keys = %r
pick = lambda env: {k: env[k] for k in keys if k in env}
json.dump({"program": pick(os.environ), "shell": pick(shell), "explicit": pick(explicit)},
          open(sys.argv[1], "w"))
""" % (OURS,)


def seen(tmp_path, *options):
    prog = tmp_path / "env.py"
    prog.write_text(PROG)
    truth = tmp_path / "seen.json"
    env = {k: v for k, v in os.environ.items() if k not in OURS}
    env["PYTHONPATH"] = "/users/own/path"
    proc = subprocess.run([sys.executable, "-m", "calipers", "run", "--no-report",
                           "-o", str(tmp_path / "p.json"), *options, str(prog), str(truth)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(truth.read_text())


def test_a_shell_started_by_the_program_sees_the_calipers_variables(tmp_path):
    got = seen(tmp_path)
    own = {"PYTHONPATH": "/users/own/path"}
    assert got["program"] == own
    assert got["explicit"] == own
    shell = got["shell"]
    assert shell["PYTHONPATH"] == BOOT + os.pathsep + "/users/own/path"
    assert shell["CALIPERS_PYTHONPATH"] == "/users/own/path"
    assert os.path.samefile(shell["LD_PRELOAD"], SHIM)
    assert shell["CALIPERS_LD_PRELOAD"] == "\x1f"  # the program had none
    assert "run_dir=" in shell["CALIPERS_CONFIG"]
    assert sorted(shell) == sorted(OURS)


def test_cpu_only_preloads_nothing(tmp_path):
    shell = seen(tmp_path, "--cpu-only")["shell"]
    assert "LD_PRELOAD" not in shell and "CALIPERS_LD_PRELOAD" not in shell
    assert shell["PYTHONPATH"] == BOOT + os.pathsep + "/users/own/path"


def test_no_follow_leaves_children_nothing(tmp_path):
    got = seen(tmp_path, "--no-follow")
    own = {"PYTHONPATH": "/users/own/path"}
    assert got["program"] == got["shell"] == got["explicit"] == own


@pytest.mark.parametrize("program", [["sh", "-c", "exit 0"], ["true"]])
def test_the_shim_is_inert_in_a_program_that_is_not_python(tmp_path, program):
    """Preloaded into a program that is not Python, the shim loads and
    does nothing: the program runs and ends as it would."""
    env = dict(os.environ, LD_PRELOAD=SHIM)
    proc = subprocess.run(program, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == proc.stderr == ""
    maps = subprocess.run(["sh", "-c", "cat /proc/$$/maps"], env=env, capture_output=True,
                          text=True, timeout=60).stdout
    assert Path(SHIM).name in maps  # it was loaded all the same
