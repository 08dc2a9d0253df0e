"""The native launcher (src/launcher/launcher.c): `calipers run script.py`
started without a second Python, and everything else handed to
`calipers-py`.  The rest of the suite runs its programs through it
(conftest.LAUNCHER); these tests pin down what only it decides: when it
takes the fast path, that the program cannot tell the two launchers apart,
and that errors it leaves to the bootstrap still come before the program."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import calipers

BIN = Path(sys.executable).parent
LAUNCHER = BIN / "calipers"
PACKAGE = Path(calipers.__file__).parent
#: The lib/pythonX.Y directory's name (X.Yt on the free-threaded build).
VERSION = "%d.%d%s" % (*sys.version_info[:2], sysconfig.get_config_var("abi_thread") or "")

pytestmark = pytest.mark.skipif(not LAUNCHER.exists() or LAUNCHER.read_bytes()[:4] != b"\x7fELF",
                                reason="calipers is not installed with its native launcher here")


def layout(tmp_path, package=True, shebang=None):
    """A copy of an install: PREFIX/bin/calipers (the launcher), a
    calipers-py that leaves a mark when it runs and then is the real one,
    and PREFIX/lib/pythonX.Y/site-packages/calipers (a link to the package
    under test) unless not `package`."""
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(LAUNCHER, prefix / "bin" / "calipers")
    mark = tmp_path / "calipers-py-ran"
    script = prefix / "bin" / "calipers-py"
    script.write_text("#!%s\nimport sys\nopen(%r, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                      "from calipers.cli import main\nsys.exit(main())\n"
                      % (shebang or sys.executable, str(mark)))
    script.chmod(0o755)
    if package:
        site = prefix / "lib" / ("python" + VERSION) / "site-packages"
        site.mkdir(parents=True)
        (site / "calipers").symlink_to(PACKAGE)
    return prefix / "bin" / "calipers", mark


def run(cmd, cwd, env=None, **kw):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd,
                          env=full, timeout=120, **kw)


PROGRAM = """\
import json, os, sys
json.dump({"argv": sys.argv, "path0": sys.path[0],
           "env": {k: v for k, v in os.environ.items()
                   if k.startswith(("CALIPERS", "PYTHONPATH", "LD_PRELOAD"))},
           "shim": "libcalipers_shim" in open("/proc/self/maps").read()},
          open(sys.argv[1], "w"))
total = 0
for i in range(300000):
    total += i * i
sys.exit(3)
"""


def test_run_takes_the_fast_path(tmp_path):
    calipers_cmd, mark = layout(tmp_path)
    (tmp_path / "prog.py").write_text(PROGRAM)
    proc = run([calipers_cmd, "run", "--no-report", "-o", "p.json", "prog.py", "seen.json"],
               tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert not mark.exists(), "calipers-py ran: the launcher did not start the program itself"
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["argv"] == ["prog.py", "seen.json"] and seen["path0"] == str(tmp_path)
    assert seen["shim"] and json.loads((tmp_path / "p.json").read_text())["files"]


def test_heap_at_exit_takes_the_fast_path(tmp_path):
    """A flag the launcher must know (its table in launcher.c): with it
    missing, the run would still work, through calipers-py."""
    calipers_cmd, mark = layout(tmp_path)
    (tmp_path / "prog.py").write_text("keep = [object() for _ in range(100)]\n")
    proc = run([calipers_cmd, "run", "--no-report", "--heap-at-exit", "-o", "p.json",
                "prog.py"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not mark.exists(), "calipers-py ran: the launcher does not know --heap-at-exit"
    # (The free-threaded build refuses a heap scan: no dump there.)
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert len(list(tmp_path.glob("p.*.1.heap"))) == (0 if free_threaded else 1)


def test_everything_else_goes_to_calipers_py(tmp_path):
    calipers_cmd, mark = layout(tmp_path)
    (tmp_path / "prog.py").write_text("print('ran')\n")
    (tmp_path / "mod.py").write_text("print('module ran')\n")
    assert run([calipers_cmd, "--version"], tmp_path).stdout.startswith("calipers ")
    proc = run([calipers_cmd, "run", "--help"], tmp_path)
    assert proc.returncode == 0 and "--profile-only" in proc.stdout
    proc = run([calipers_cmd, "run", "--no-report", "-m", "mod"], tmp_path)
    assert proc.returncode == 0 and proc.stdout == "module ran\n"
    proc = run([calipers_cmd, "run", "--no-report", "--no-such-option", "prog.py"], tmp_path)
    assert proc.returncode == 2 and "unknown option --no-such-option" in proc.stderr
    proc = run([calipers_cmd, "run", "--no-report", "prog.py"], tmp_path,
               env={"CALIPERS_SHIM": str(PACKAGE / "libcalipers_shim.so")})
    assert proc.returncode == 0 and proc.stdout == "ran\n"
    assert mark.read_text().splitlines() == [
        "--version", "run --help", "run --no-report -m mod",
        "run --no-report --no-such-option prog.py", "run --no-report prog.py"]


@pytest.mark.parametrize("where", ["no package", "shell trampoline"])
def test_a_layout_it_cannot_read_falls_back(tmp_path, where):
    if where == "no package":
        calipers_cmd, mark = layout(tmp_path, package=False)
    else:  # what an installer writes for an interpreter path with spaces
        calipers_cmd, mark = layout(tmp_path, shebang="/bin/sh\n'''exec' %s \"$0\" \"$@\"\n'''"
                                    % sys.executable)
    (tmp_path / "prog.py").write_text("print('ran')\n")
    proc = run([calipers_cmd, "run", "--no-report", "-o", "p.json", "prog.py"], tmp_path)
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc.stderr
    assert mark.read_text() == "run --no-report -o p.json prog.py\n"
    assert (tmp_path / "p.json").exists()


def test_the_program_sees_what_it_sees_under_the_python_launcher(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    env = {"PYTHONPATH": "/nonexistent/own", "LD_PRELOAD": ""}
    views = []
    for cmd in ([LAUNCHER], [sys.executable, "-m", "calipers"]):
        proc = run(cmd + ["run", "--no-report", "-o", "p.json", "prog.py", "seen.json"],
                   tmp_path, env=env)
        assert proc.returncode == 3 and proc.stderr == "", proc.stderr
        views.append(json.loads((tmp_path / "seen.json").read_text()))
    assert views[0] == views[1]
    assert views[0]["env"] == {"PYTHONPATH": "/nonexistent/own", "LD_PRELOAD": ""}


def test_cpu_only_preloads_nothing(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    proc = run([LAUNCHER, "run", "--cpu-only", "--no-report", "prog.py", "seen.json"], tmp_path,
               env={"LD_PRELOAD": ""})
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert proc.returncode == 3 and not seen["shim"] and seen["env"] == {"LD_PRELOAD": ""}


@pytest.mark.parametrize("args, status, words", [
    (["--interval", "fast"], 2, "--interval"),
    (["--memory-interval=0"], 2, "--memory-interval"),
    (["-o", "/nonexistent-dir/p.json"], 2, "/nonexistent-dir"),
    (["--export", "nope:x"], 2, "--export"),
])
def test_bad_options_fail_before_the_program(tmp_path, args, status, words):
    (tmp_path / "prog.py").write_text("open('ran', 'w').close()\n")
    proc = run([LAUNCHER, "run", *args, "prog.py"], tmp_path)
    assert proc.returncode == status
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("calipers: error: ")
    assert words in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_bad_programs_fail_as_under_the_python_launcher(tmp_path):
    (tmp_path / "bad.py").write_text("def f(:\n")
    for script in ("missing.py", "bad.py"):
        results = [run(cmd + ["run", "--no-report", script], tmp_path)
                   for cmd in ([LAUNCHER], [sys.executable, "-m", "calipers"])]
        assert [(r.returncode, r.stderr) for r in results[:1]] == \
            [(r.returncode, r.stderr) for r in results[1:]]
        assert results[0].returncode in (1, 2) and "Traceback" not in results[0].stderr


def test_run_inside_a_profiled_program(tmp_path):
    """`calipers run` started by a program calipers profiles: the inner
    program sees its own environment, not the outer run's."""
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "outer.py").write_text(
        "import subprocess, sys\n"
        "sys.exit(subprocess.run([%r, 'run', '--no-report', '-o', 'inner.json', 'prog.py',"
        " 'seen.json']).returncode)\n" % str(LAUNCHER))
    proc = run([LAUNCHER, "run", "--no-report", "-o", "outer.json", "outer.py"], tmp_path,
               env={"PYTHONPATH": "/nonexistent/own"})
    assert proc.returncode == 3, proc.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["env"] == {"PYTHONPATH": "/nonexistent/own"} and seen["shim"]
    inner = json.loads((tmp_path / "inner.json").read_text())
    assert any(f["path"].endswith("prog.py") for f in inner["files"])


@pytest.mark.parametrize("launch", ["zz", "99:short", "3:abc4:--no-such"])
def test_a_hostile_calipers_launch_is_refused_before_the_program(tmp_path, launch):
    """CALIPERS_LAUNCH is read from the environment: what the launcher did
    not write is a one-line error, and the program does not run."""
    (tmp_path / "prog.py").write_text("open('ran', 'w').close()\n")
    proc = run([sys.executable, "prog.py"], tmp_path,
               env={"PYTHONPATH": str(PACKAGE / "_boot"), "CALIPERS_LAUNCH": launch})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("calipers: error: ")
    assert "Traceback" not in proc.stderr and not (tmp_path / "ran").exists()


@pytest.mark.parametrize("build", [5, None, ["free-threaded"]])
def test_a_wrongly_typed_python_build_is_refused_by_view(tmp_path, build):
    (tmp_path / "prog.py").write_text("sum(range(1000))\n")
    proc = run([LAUNCHER, "run", "--no-report", "-o", "p.json", "prog.py"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["program"]["python_build"] = build
    (tmp_path / "p.json").write_text(json.dumps(doc))
    view = run([sys.executable, "-m", "calipers", "view", "p.json"], tmp_path)
    assert view.returncode != 0 and view.stderr.count("\n") == 1, view.stderr
    assert "Traceback" not in view.stderr
