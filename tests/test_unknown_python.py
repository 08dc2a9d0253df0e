"""An interpreter newer than the frame layouts calipers knows.  These run only
in the `unknown-python` tier of tools/test-all.sh, which builds calipers on
the newest CPython with `-Csetup-args=-Dnewest_known_python=<one less>`, so
that the running interpreter is one this build does not know: the package
must build, install and profile what it safely can, and say in one line
what it cannot."""
import pytest

import calipers._calipers as engine
from conftest import PROGRAMS, TRUTH, cpu, validate  # noqa: F401

pytestmark = pytest.mark.unknown_layout


def test_the_build_knows_it_does_not_know():
    assert engine.layout_problem() is not None, (
        "this tier needs a build made with -Dnewest_known_python below the running version")
    assert "frame layouts" in engine.layout_problem()


def test_runs_the_program_unchanged_and_says_what_is_off(run_calipers, run_plain):
    prog = PROGRAMS / "unknown_layout.py"
    plain = run_plain(prog, "/dev/null")
    run = run_calipers(prog, TRUTH)
    assert (run.returncode, run.stdout) == (plain.returncode, plain.stdout) == (3, "done\n")
    said = [ln for ln in run.stderr.splitlines() if ln.startswith("calipers: Time and memory are not credited")]
    assert len(said) == 1, run.stderr
    assert engine.layout_problem() in said[0]
    profile = run.profile
    assert any("not credited to lines" in n for n in profile["notes"])


def test_what_is_measured_is_right(run_calipers):
    run = run_calipers(PROGRAMS / "unknown_layout.py", TRUTH)
    profile, truth = run.profile, run.truth
    # No line gets time or memory: nothing is guessed.
    for f in profile["files"]:
        for ln in f["lines"]:
            assert cpu(ln) == 0 and ln["memory"]["alloc_python_bytes"] == 0
    # The threads' CPU is still measured: both threads, and the process's
    # total within the sampling interval's reach of what the program measured.
    threads = profile["threads"]
    assert len(threads) == 2
    measured = sum(cpu(t) for t in threads)
    assert measured == pytest.approx(truth["cpu"], rel=0.25, abs=0.05)
    # Memory: the 64 MiB the program keeps is in the footprint's peak.
    summary = profile["summary"]
    assert summary["memory"]["peak_bytes"] >= 0.9 * truth["kept"]
