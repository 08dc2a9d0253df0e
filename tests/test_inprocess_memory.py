"""Memory profiled in-process, without preload: calipers.profile() in a
program started with plain `python` (no LD_PRELOAD) loads the shim and
redirects the libraries' allocator entries to it.  The same programs as
tests/test_memory.py, profiled both ways side by side against their own
ground truth with the same tolerances; a library dlopen'ed after start;
blocks that cross stop() and start() in both directions."""
import json
import os
import subprocess
import sys
import sysconfig

import pytest

from conftest import PROGRAMS, TRUTH, line_of, validate
from test_memory import MiB, alloc, mem

INPROCESS = PROGRAMS / "inprocess.py"


def plain_env():
    """The test's environment without any preload: the shim must come from
    calipers.start() itself."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return env


class InProcess:
    def __init__(self, proc, profile_path, truth_path):
        self.returncode, self.stdout, self.stderr = proc.returncode, proc.stdout, proc.stderr
        self.profile = (validate(json.loads(profile_path.read_text()))
                        if profile_path.exists() else None)
        self.truth = json.loads(truth_path.read_text()) if truth_path.exists() else None

    def lines(self, filename):
        for f in self.profile["files"]:
            if os.path.basename(f["path"]) == filename:
                return {ln["line"]: ln for ln in f["lines"]}
        return {}


@pytest.fixture
def run_inprocess(tmp_path):
    """run_inprocess(program, *args, interval=bytes): the program run by
    tests/programs/inprocess.py inside calipers.profile(), plain python."""

    def run(program, *args, interval=256 << 10, timeout=120, env=None):
        out, truth = tmp_path / "inprocess.json", tmp_path / "truth-inprocess.json"
        cmd = [sys.executable, str(INPROCESS), str(out), str(interval), str(program)]
        cmd += [str(truth if a is TRUTH else a) for a in args]
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env=dict(plain_env(), **(env or {})), cwd=tmp_path,
                              timeout=timeout)
        return InProcess(proc, out, truth)

    return run


def test_volumes_side_by_side(run_calipers, run_inprocess):
    prog = PROGRAMS / "volumes.py"
    # 32 KiB, as in test_memory: the smallest line (96 MB) gets ~2900
    # points, 1.9% (10% is 5.4 of those), each way.
    preloaded = run_calipers(prog, TRUTH, options=["--memory-interval", "32k"])
    inproc = run_inprocess(prog, TRUTH, interval=32 << 10)
    for run in (preloaded, inproc):
        assert run.returncode == 0, run.stderr
        assert run.profile["notes"] == [] or not any(
            "not profiled" in n for n in run.profile["notes"]), run.profile["notes"]
        lines = run.lines("volumes.py")
        for marker, want in run.truth.items():
            rec = lines[line_of(prog, marker)]
            assert alloc(rec) == pytest.approx(want, rel=0.10), (marker, mem(rec), want)
        small = mem(lines[line_of(prog, "small-objects")])
        assert small["alloc_python_bytes"] >= 0.90 * alloc(lines[line_of(prog, "small-objects")])
        # NumPy, imported after start in-process: its arrays are native.
        arrays = mem(lines[line_of(prog, "numpy-arrays")])
        assert arrays["alloc_native_bytes"] >= 0.90 * alloc(lines[line_of(prog, "numpy-arrays")])
        summary = run.profile["summary"]["memory"]
        assert summary["allocated_native_bytes"] >= run.truth["numpy-arrays"]
        assert summary["allocated_python_bytes"] >= (run.truth["small-objects"]
                                                     + run.truth["bytes-objects"])
    assert inproc.profile["config"]["cpu_only"] is False


@pytest.mark.parametrize("kind", ["numpy", "bytearray"])
def test_512mb_peak_side_by_side(run_calipers, run_inprocess, kind):
    """The footprint without preload starts from malloc's bytes in use at
    start (the shim has not seen them): the peak is the one allocation on
    top of the interpreter's baseline, as under preload."""
    prog = PROGRAMS / "big.py"
    for run in (run_calipers(prog, kind, "0.5"), run_inprocess(prog, kind, "0.5")):
        assert run.returncode == 0, run.stderr
        rec = run.lines("big.py")[line_of(prog, "big-" + kind)]
        assert mem(rec)["live_peak_bytes"] == pytest.approx(512 * MiB, rel=0.01), mem(rec)
        assert mem(rec)["live_end_bytes"] < MiB
        summary = run.profile["summary"]["memory"]
        assert 512 * MiB <= summary["peak_bytes"] <= 512 * MiB + 64 * MiB, summary
        assert summary["peak_line"]["line"] == line_of(prog, "big-" + kind)


def test_copy_volume_side_by_side(run_calipers, run_inprocess):
    prog = PROGRAMS / "copies.py"
    # 64 KiB: each line's 1 GB is ~3840 copy points (sampled at 4x the
    # memory interval), 1.6% (10% is 6 of those).
    preloaded = run_calipers(prog, TRUTH, options=["--memory-interval", "64k"])
    inproc = run_inprocess(prog, TRUTH, interval=64 << 10)
    for run in (preloaded, inproc):
        assert run.returncode == 0, run.stderr
        lines = run.lines("copies.py")
        for marker, (copied, _seconds) in run.truth.items():
            rec = lines[line_of(prog, marker)]
            assert mem(rec)["copied_bytes"] == pytest.approx(copied, rel=0.10), (marker, mem(rec))
        assert mem(lines[line_of(prog, "no-copy")])["copied_bytes"] == 0


def test_leak_side_by_side(run_calipers, run_inprocess):
    prog = PROGRAMS / "leaks.py"
    # 64 KiB: the leak's 122 MB is ~1860 points, 2.3% (15% is 6.5 of those)
    preloaded = run_calipers(prog, "leak", options=["--memory-interval", "64k"])
    inproc = run_inprocess(prog, "leak", interval=64 << 10)
    leak_line, churn_line = line_of(prog, "leak-line"), line_of(prog, "churn-line")
    for run in (preloaded, inproc):
        assert run.returncode == 0, run.stderr
        leaks = {lk["line"]: lk for lk in run.profile["leaks"]}
        assert leak_line in leaks, run.profile["leaks"]
        assert leaks[leak_line]["likelihood"] >= 0.95
        assert churn_line not in leaks
        held = mem(run.lines("leaks.py")[leak_line])["live_end_bytes"]
        assert held == pytest.approx(30_000 * (4000 + 57), rel=0.15)


@pytest.fixture(scope="module")
def hold_lib(tmp_path_factory):
    """tests/programs/hold.c with full RELRO (its GOT read-only after
    loading) and -fno-plt (GLOB_DAT entries, no PLT)."""
    out = tmp_path_factory.mktemp("lib") / "libhold.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-fno-plt", "-Wl,-z,relro,-z,now",
                    str(PROGRAMS / "hold.c"), "-o", str(out)], check=True)
    return out


def test_dlopen_after_start_and_blocks_across_stop(tmp_path, hold_lib):
    prog = PROGRAMS / "inprocess_stop.py"
    truth, out = tmp_path / "truth.json", tmp_path / "profile.json"
    proc = subprocess.run([sys.executable, str(prog), str(hold_lib), str(truth), str(out)],
                          capture_output=True, text=True, env=plain_env(), cwd=tmp_path,
                          timeout=120)
    # Blocks made on either side of stop() and start(), freed on the other,
    # in this thread and another: the program runs to its end.
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"
    want = json.loads(truth.read_text())
    # The library's malloc is the shim's while profiled, libc's after each
    # stop(): stop() puts its (read-only) GOT entry back.
    during, after, again, end = want["in_use"]
    assert during != want["libc_malloc"] and again == during
    assert after == want["libc_malloc"] and end == want["libc_malloc"]
    for path, marker in ((out, "hold-line"), (out, "table-line"),
                         (tmp_path / "profile.json.2", "second-line")):
        profile = validate(json.loads(path.read_text()))
        lines = next({ln["line"]: ln for ln in f["lines"]} for f in profile["files"]
                     if f["path"].endswith("inprocess_stop.py"))
        rec = lines[line_of(prog, marker)]
        # 64 KiB: 200 MB (100 MB) is ~3050 (~1530) points, 1.8% (2.6%):
        # 15% is 5.8 of those at the least.
        assert mem(rec)["alloc_native_bytes"] == pytest.approx(want[marker], rel=0.15), mem(rec)
        assert mem(rec)["alloc_python_bytes"] < 0.05 * want[marker]
        assert not any("not profiled" in n for n in profile["notes"]), profile["notes"]


def test_preloaded_run_is_not_redirected(run_calipers, tmp_path, hold_lib):
    """Under `calipers run` the shim is preloaded and nothing is redirected:
    a library calls libc's malloc through the preload's interposition."""
    prog = tmp_path / "which.py"
    prog.write_text("import ctypes, sys\n"
                    "lib = ctypes.CDLL(sys.argv[1])\n"
                    "lib.malloc_in_use.restype = ctypes.c_void_p\n"
                    "print(lib.malloc_in_use() == ctypes.cast(ctypes.CDLL(None).malloc,"
                    " ctypes.c_void_p).value)\n")
    run = run_calipers(prog, hold_lib)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "True\n"
    assert run.profile["summary"]["memory"] is not None


def test_another_malloc_preloaded_is_left_alone(tmp_path, run_inprocess):
    """With another malloc preloaded (as jemalloc would be), its blocks must
    never reach libc's free through the shim: nothing is redirected, one
    note says so, Python's allocator is still profiled, and the program
    runs as it would."""
    other = tmp_path / "libother.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", str(PROGRAMS / "othermalloc.c"),
                    "-o", str(other)], check=True)
    prog = PROGRAMS / "leaks.py"
    run = run_inprocess(prog, "leak", interval=64 << 10, env={"LD_PRELOAD": str(other)})
    assert run.returncode == 0, run.stderr
    notes = [n for n in run.profile["notes"] if "Native allocations were not profiled" in n]
    assert len(notes) == 1, run.profile["notes"]
    assert run.stderr.count("Native allocations were not profiled") == 1, run.stderr
    leak = mem(run.lines("leaks.py")[line_of(prog, "leak-line")])
    assert leak["alloc_python_bytes"] == pytest.approx(30_000 * (4000 + 57), rel=0.15), leak


@pytest.fixture(scope="module")
def churn_lib(tmp_path_factory):
    out = tmp_path_factory.mktemp("lib") / "libchurn.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-pthread", str(PROGRAMS / "churn.c"),
                    "-o", str(out)], check=True)
    return out


def test_redirection_on_and_off_while_threads_allocate(tmp_path, churn_lib):
    """Twenty start()/stop() pairs while native threads malloc, realloc,
    memcpy and free without the GIL, and a fork while profiled: no crash,
    no lost block, the same output; the threads' allocations are counted
    while redirected."""
    proc = subprocess.run([sys.executable, str(PROGRAMS / "inprocess_churn.py"), str(churn_lib),
                           str(tmp_path)], capture_output=True, text=True, env=plain_env(),
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n" and proc.stderr == ""
    native = [validate(json.loads((tmp_path / ("p%d.json" % i)).read_text()))
              ["summary"]["memory"]["allocated_native_bytes"] for i in range(20)]
    # The churn never stops while the profiles are taken (each window a few
    # milliseconds, its stop() writing the profile): a round is ~10 KiB
    # (64 B to 4 KiB grown to 8 KiB, and 256 B), and the threads do tens of
    # thousands of rounds a second; a hundred of them in one window, even on
    # a loaded machine, is little to ask.
    assert max(native) >= 1 << 20, native


def test_dlopen_by_bare_name_keeps_the_callers_runpath(tmp_path):
    """A library that dlopens another by bare name, found through its own
    RUNPATH: the redirected dlopen is called from the shim, whose RUNPATH the
    dynamic linker would search instead; the hook searches the caller's.
    The inner library's allocations are counted (it was loaded after
    start, by the hook)."""
    (tmp_path / "inner").mkdir()
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", str(PROGRAMS / "runpath_inner.c"), "-o",
                    str(tmp_path / "inner" / "libcalipers_test_inner.so")], check=True)
    outer = tmp_path / "libouter.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", str(PROGRAMS / "runpath_outer.c"),
                    "-Wl,--enable-new-dtags,-rpath,$ORIGIN/inner", "-ldl", "-o", str(outer)],
                   check=True)
    prog = PROGRAMS / "inprocess_runpath.py"
    out = tmp_path / "profile.json"
    proc = subprocess.run([sys.executable, str(prog), str(outer), str(out)], capture_output=True,
                          text=True, env=plain_env(), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"
    profile = validate(json.loads(out.read_text()))
    lines = next({ln["line"]: ln for ln in f["lines"]} for f in profile["files"]
                 if f["path"].endswith("inprocess_runpath.py"))
    rec = lines[line_of(prog, "inner-line")]
    # 64 KiB: 100 MiB is ~1600 points, 2.5% (15% is 6 of those).
    assert mem(rec)["alloc_native_bytes"] == pytest.approx(100 * MiB, rel=0.15), mem(rec)


ALLOCATORS = r"""
import ctypes, json, sys
import calipers

class Allocator(ctypes.Structure):  # PyMemAllocatorEx
    _fields_ = [("ctx", ctypes.c_void_p), ("malloc", ctypes.c_void_p),
                ("calloc", ctypes.c_void_p), ("realloc", ctypes.c_void_p),
                ("free", ctypes.c_void_p)]

get = ctypes.pythonapi.PyMem_GetAllocator
get.argtypes = [ctypes.c_int, ctypes.POINTER(Allocator)]
get.restype = None

def allocators():
    out = []
    for domain in (0, 1, 2):  # PYMEM_DOMAIN_RAW, _MEM, _OBJ
        a = Allocator()
        get(domain, ctypes.byref(a))
        out.append((a.ctx, a.malloc, a.calloc, a.realloc, a.free))
    return out

before = allocators()
with calipers.profile(sys.argv[1], memory_interval=64 << 10):
    during = allocators()
    blocks = [bytes(100_000) for _ in range(50)]  # through the raw domain
after = allocators()
del blocks  # freed after stop(), through the originals
print(json.dumps({"hooked": [d != b for d, b in zip(during, before)],
                  "restored": after == before}))
"""


def test_stop_puts_pythons_allocators_back(tmp_path):
    """stop() puts back every domain of Python's allocator it hooked, the
    raw one too (hooked where pymalloc serves the other two), and blocks
    made while profiled are freed by the originals after it."""
    prog = tmp_path / "allocators.py"
    prog.write_text(ALLOCATORS)
    proc = subprocess.run([sys.executable, str(prog), str(tmp_path / "p.json")],
                          capture_output=True, text=True, env=plain_env(), cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    # The raw domain only where pymalloc serves PyMem and PyObject.
    assert got["hooked"] == [not free_threaded, True, True], got
    assert got["restored"] is True, got
