"""The command line: options, bad input, empty profiles explained."""
import os
import subprocess
import sys

import pytest

import calipers
from conftest import PROGRAMS


def calipers_cmd(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "calipers", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60)


def assert_one_line_error(proc, status, fragment):
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("calipers: error: ")
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr


def test_version_and_help():
    proc = calipers_cmd("--version")
    assert proc.returncode == 0 and proc.stdout == "calipers %s\n" % calipers.__version__
    proc = calipers_cmd("--help")
    assert proc.returncode == 0 and "calipers run [options] script.py" in proc.stdout
    proc = calipers_cmd("run", "--help")
    assert proc.returncode == 0 and "--profile-only" in proc.stdout


def test_console_script_is_installed():
    exe = os.path.join(os.path.dirname(sys.executable), "calipers")
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("calipers ")


def test_missing_script(tmp_path):
    assert_one_line_error(calipers_cmd("run", "nope.py", cwd=tmp_path), 2, "nope.py")


def test_directory_without_main(tmp_path):
    (tmp_path / "pkgdir").mkdir()
    assert_one_line_error(calipers_cmd("run", "pkgdir", cwd=tmp_path), 1, "__main__.py")


def test_directory_with_main_runs(tmp_path):
    d = tmp_path / "app"
    d.mkdir()
    (d / "__main__.py").write_text("print('app ran')\n")
    proc = calipers_cmd("run", "--no-report", "app", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "app ran\n"


def test_syntax_error(tmp_path):
    (tmp_path / "bad.py").write_text("x = 1\ndef f(:\n    pass\n")
    proc = calipers_cmd("run", "bad.py", cwd=tmp_path)
    assert_one_line_error(proc, 1, "bad.py, line 2")


@pytest.mark.parametrize("args,fragment", [
    (["run", "--bogus", "x.py"], "unknown option --bogus"),
    (["run", "--interval", "fast", "x.py"], "--interval"),
    (["run", "--interval", "0", "x.py"], "out of range"),
    (["run", "--profile-interval", "0.01", "x.py"], "--profile-interval"),
    (["run", "--profile-interval", "often", "x.py"], "--profile-interval"),
    (["run"], "no program"),
    (["run", "-o"], "expected a value"),
    (["frobnicate"], "unknown command"),
])
def test_bad_usage(tmp_path, args, fragment):
    (tmp_path / "x.py").write_text("pass\n")
    assert_one_line_error(calipers_cmd(*args, cwd=tmp_path), 2, fragment)


def test_unwritable_output(tmp_path):
    (tmp_path / "x.py").write_text("pass\n")
    proc = calipers_cmd("run", "-o", "/nonexistent-dir/p.json", "x.py", cwd=tmp_path)
    assert_one_line_error(proc, 2, "no such directory")
    # /proc refuses new files even to root, unlike a chmod-ed directory.
    proc = calipers_cmd("run", "-o", "/proc/calipers-p.json", "x.py", cwd=tmp_path)
    assert_one_line_error(proc, 2, "cannot write the profile to /proc/calipers-p.json")


def test_output_is_a_directory(tmp_path):
    (tmp_path / "x.py").write_text("pass\n")
    assert_one_line_error(calipers_cmd("run", "-o", str(tmp_path), "x.py", cwd=tmp_path), 2,
                          "is a directory")


def test_missing_module(tmp_path):
    assert_one_line_error(calipers_cmd("run", "-m", "no_such_module_xyz", cwd=tmp_path), 1,
                          "No module named 'no_such_module_xyz'")


def test_options_after_the_script_belong_to_the_program(run_calipers, tmp_path):
    prog = tmp_path / "argv.py"
    prog.write_text("import sys; print(sys.argv[1:])\n")
    run = run_calipers(prog, "--interval", "-o", "--bogus", options=["--no-report"])
    assert run.returncode == 0 and run.stdout == "['--interval', '-o', '--bogus']\n"


def test_default_outfile_in_the_launch_directory(tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("import os\nos.chdir('/')\nsum(range(10**6))\n")
    proc = calipers_cmd("run", "--no-report", "p.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "calipers-profile.json").exists()


def test_too_short_to_sample_is_explained(run_calipers, tmp_path):
    prog = tmp_path / "short.py"
    prog.write_text("pass\n")
    run = run_calipers(prog, options=["--interval", "10s"])
    assert run.returncode == 0
    assert run.profile["summary"]["samples"] == 0
    assert any("No samples were taken" in n for n in run.profile["notes"])
    assert "--interval" in run.stderr


def test_only_library_code_is_explained(run_calipers):
    code = "sum(range(3 * 10**7))"
    run = run_calipers("timeit", "-n", "1", "-r", "1", code, module=True,
                       options=["--interval", "2ms"])
    assert run.returncode == 0, run.stderr
    assert run.profile["summary"]["samples"] > 0
    assert run.profile["summary"]["attributed_samples"] == 0
    assert run.profile["files"] == []
    assert any("--profile-all" in n for n in run.profile["notes"])
    assert "--profile-all" in run.stderr


def test_profile_all_includes_the_standard_library(run_calipers):
    code = "sum(range(3 * 10**7))"
    run = run_calipers("timeit", "-n", "1", "-r", "1", code, module=True,
                       options=["--interval", "2ms", "--profile-all"])
    names = [os.path.basename(f["path"]) for f in run.profile["files"]]
    assert "timeit.py" in names


def test_profile_only_and_exclude(run_calipers, tmp_path):
    (tmp_path / "helper_mod.py").write_text(
        "def work():\n    t = 0\n    for i in range(4 * 10**6):\n        t += i\n    return t\n")
    prog = tmp_path / "main_prog.py"
    prog.write_text("import helper_mod\nhelper_mod.work()\nhelper_mod.work()\n")
    files = lambda run: sorted(os.path.basename(f["path"]) for f in run.profile["files"])
    assert files(run_calipers(prog)) == ["helper_mod.py", "main_prog.py"]
    only = run_calipers(prog, options=["--profile-only", "helper_"])
    assert files(only) == ["helper_mod.py"]
    excl = run_calipers(prog, options=["--profile-exclude", "*/helper_mod.py"])
    assert files(excl) == ["main_prog.py"]
    assert excl.profile["config"]["profile_exclude"] == ["*/helper_mod.py"]
