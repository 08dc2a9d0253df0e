"""GPU utilisation and memory per line, against a fake NVML.

The machine has no GPU: tests/c/fake_nvml.c stands in for libnvidia-ml.so.1
(built here, loaded through LD_LIBRARY_PATH).  It implements the NVML calls
calipers makes, reports the utilisation and memory the program sets through
it, and can be told to fail any call or to lack any symbol.  What is real:
the profiler loads it with dlopen, polls it from its own thread, and the
program runs under `calipers run` as a user's would."""
import json
import shutil
import subprocess
import sys

import pytest

import fake_nvml
from conftest import PROGRAMS, TRUTH, cpu, line_of, validate

PROG = PROGRAMS / "gpu_phases.py"
MiB = 1 << 20
BUSY_MEM = 3072 * MiB
IDLE_MEM = 256 * MiB


@pytest.fixture(scope="module")
def nvml_lib(tmp_path_factory):
    return fake_nvml.build(tmp_path_factory.mktemp("nvml"))


def gpu_notes(profile):
    return [n for n in profile["notes"] if "GPU" in n]


def phases(run):
    lines = run.lines("gpu_phases.py")
    return lines[line_of(PROG, "@idle")]["gpu"], lines[line_of(PROG, "@busy")]["gpu"]


def check_program_unchanged(run):
    assert run.returncode == 0, run.stderr
    assert run.stdout == "phases done\n"
    # The CPU profile is whole: the phases' functions hold, as Python, the
    # CPU the program measured for them with its thread clock (a fixed
    # figure such as "over 1 s" of its 4 s failed 7 runs in 10 under
    # stress-ng --cpu 2, where the program got 0.2-0.9 s of CPU).  There
    # the two loop lines alone held 0.90-1.01 of it; the functions also
    # hold their `pass` lines, and a sample's interval may straddle the
    # start or the end of the phases (10 ms mean, on wall time).
    funcs = run.functions("gpu_phases.py")
    idle, busy = funcs["idle"]["total"], funcs["busy"]["total"]
    phases = cpu(idle) + cpu(busy)
    assert phases == pytest.approx(run.truth["loop_cpu_s"], rel=0.1, abs=0.05), (idle, busy)
    # Mostly Python, not all: each turn of the loops is half a call to
    # perf_counter(), and a tick that finds the thread still inside it is
    # native (INTERNALS, "Native calls without a threshold").  Its share
    # has no truth here (test_cpu's programs measure theirs): 4-11% quiet
    # on 3.13, 20% once in a loaded CI run, which a floor of 80% Python
    # failed.  Half catches a split gone wrong without asking for less
    # native than there is.
    assert idle["python_s"] + busy["python_s"] >= 0.5 * phases, (idle, busy)


def check_phases(run):
    """The busy phase ran at 90% and 3 GiB, the idle one at 0% and 256 MiB.
    A reading is taken every 50 ms and a utilisation sample holds for 1.5
    of the driver's periods, so each 1 s phase starts with up to ~0.1 s of
    the previous phase's figures: 15% of slack."""
    idle, busy = phases(run)
    # How many of the main thread's samples land in a 2 s phase depends on
    # how often it gets a CPU: 24 to 209 under stress-ng --cpu 2 (median
    # 157; "over 40" failed 4 runs in 10 there).
    assert busy["samples"] >= 20 and idle["samples"] >= 20, (busy, idle)
    assert 90 * 0.85 <= busy["utilization_avg_percent"] <= 90
    assert idle["utilization_avg_percent"] <= 90 * 0.15
    assert busy["memory_peak_bytes"] == BUSY_MEM
    assert BUSY_MEM * 0.85 <= busy["memory_avg_bytes"] <= BUSY_MEM
    # (before the first phase the program had no GPU memory)
    assert IDLE_MEM * 0.85 <= idle["memory_avg_bytes"] <= IDLE_MEM + 0.15 * BUSY_MEM


def test_per_line_figures_match_the_script(run_calipers, nvml_lib):
    run = run_calipers(PROG, TRUTH, env=fake_nvml.env(nvml_lib))
    check_program_unchanged(run)
    gpu = run.profile["summary"]["gpu"]
    assert gpu["available"] is True
    assert (gpu["utilization_source"], gpu["memory_source"]) == ("process", "process")
    assert gpu["memory_peak_bytes"] == BUSY_MEM
    assert max(v for _, v in gpu["timeline"]) == BUSY_MEM
    assert [(d["uuid"], d["name"]) for d in gpu["devices"]] == [
        ("GPU-fake0000-0000-0000-0000-000000000000", "Fake GPU 0")]
    assert gpu["devices"][0]["memory_total_bytes"] == 16 << 30
    check_phases(run)
    fns = run.functions("gpu_phases.py")
    assert 90 * 0.85 <= fns["busy"]["gpu"]["utilization_avg_percent"] <= 90
    # <module> is on the stack through both phases: their mean.
    assert 30 <= fns["<module>"]["gpu"]["utilization_avg_percent"] <= 60
    assert gpu_notes(run.profile) == []
    assert (run.truth["main_thread_calls"], run.truth["inits"]) == (0, 1)
    assert "gpu%" in run.stderr and "GPU utilisation" in run.stderr


def test_only_this_process_is_counted(run_calipers, nvml_lib):
    # Another process holds 1 GiB at 50% on the same device.
    run = run_calipers(PROG, TRUTH, env=fake_nvml.env(nvml_lib, other=1))
    check_program_unchanged(run)
    assert run.profile["summary"]["gpu"]["memory_peak_bytes"] == BUSY_MEM
    check_phases(run)


def test_wide_process_entries_are_read_right(run_calipers, nvml_lib):
    # A driver whose _v3 entries are 32 bytes, not 24 (the header mix-up).
    run = run_calipers(PROG, TRUTH, env=fake_nvml.env(nvml_lib, stride32=1, other=1))
    check_program_unchanged(run)
    assert run.profile["summary"]["gpu"]["memory_peak_bytes"] == BUSY_MEM
    check_phases(run)


def test_second_device_by_uuid(run_calipers, nvml_lib):
    run = run_calipers(PROG, TRUTH, "1", env=fake_nvml.env(nvml_lib, devices=2))
    check_program_unchanged(run)
    devs = run.profile["summary"]["gpu"]["devices"]
    assert [d["uuid"][-1] for d in devs] == ["0", "1"]
    assert devs[0]["memory_peak_bytes"] == 0 and devs[1]["memory_peak_bytes"] == BUSY_MEM
    check_phases(run)  # utilisation: the mean over the devices this run uses


# (what the fake lacks, what calipers reports): "process" both figures are
# the run's own; "device util" / "device memory" that one fell back to the
# whole device, with a note; "off" no GPU figures, with a note naming it.
MISSING = [
    (["nvmlInit_v2"], "process"),  # the unversioned nvmlInit stands in
    (["nvmlInit_v2", "nvmlInit"], "off"),
    (["nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"], "off"),
    (["nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"], "off"),
    (["nvmlShutdown"], "off"),
    (["nvmlErrorString", "nvmlDeviceGetUUID", "nvmlDeviceGetName"], "process"),
    (["nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates"], "process"),
    (["nvmlDeviceGetComputeRunningProcesses_v3"], "process"),
    (["nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"],
     "process"),
    (["nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
      "nvmlDeviceGetComputeRunningProcesses"], "device memory"),
    (["nvmlDeviceGetProcessUtilization"], "device util"),
]


def check_outcome(run, outcome, named):
    gpu = run.profile["summary"]["gpu"]
    notes = gpu_notes(run.profile)
    if outcome == "off":
        assert gpu["available"] is False
        assert named in gpu["reason"]
        assert notes == ["No GPU figures: %s." % gpu["reason"]]
        lines = [ln for f in run.profile["files"] for ln in f["lines"]]
        assert lines and all(ln["gpu"] is None for ln in lines)
        return
    assert gpu["available"] is True
    sources = (gpu["utilization_source"], gpu["memory_source"])
    expected = {"process": ("process", "process"), "device util": ("device", "process"),
                "device memory": ("process", "device")}[outcome]
    assert sources == expected
    # The fake's device-wide figures are this process's alone: the numbers
    # are the same whichever source gave them.
    check_phases(run)
    if outcome == "process":
        assert notes == []
    else:
        assert len(notes) == 1 and "whole device" in notes[0]


@pytest.mark.parametrize("omit,outcome", MISSING, ids=["-".join(m) for m, _ in MISSING])
def test_missing_symbol(run_calipers, tmp_path, omit, outcome):
    lib = fake_nvml.build(tmp_path / "lib", omit=omit)
    run = run_calipers(PROG, TRUTH, env=fake_nvml.env(lib))
    check_program_unchanged(run)
    check_outcome(run, outcome, omit[-1].replace("_v2", ""))


FAILING = [
    ("nvmlInit_v2=9", "off", "Driver Not Loaded"),
    ("nvmlDeviceGetCount_v2=999", "off", "nvmlDeviceGetCount failed: Unknown Error"),
    ("nvmlDeviceGetHandleByIndex_v2=15", "off", "GPU is lost"),
    ("nvmlDeviceGetUUID=999,nvmlDeviceGetName=999,nvmlDeviceGetMemoryInfo=999", "process", ""),
    ("nvmlDeviceGetUtilizationRates=999", "process", ""),
    ("nvmlDeviceGetComputeRunningProcesses_v3=3", "device memory", ""),
    ("nvmlDeviceGetComputeRunningProcesses_v3=4", "device memory", ""),
    ("nvmlDeviceGetProcessUtilization=3", "device util", ""),
]


@pytest.mark.parametrize("fail,outcome,named", FAILING, ids=[f for f, _, _ in FAILING])
def test_failing_call(run_calipers, nvml_lib, fail, outcome, named):
    run = run_calipers(PROG, TRUTH, env=fake_nvml.env(nvml_lib, fail=fail))
    check_program_unchanged(run)
    check_outcome(run, outcome, named)
    if "nvmlDeviceGetUUID" in fail:
        assert run.profile["summary"]["gpu"]["devices"][0]["uuid"] == "GPU-index-0"


def test_gpu_lost_mid_run_keeps_what_was_read(run_calipers, nvml_lib):
    # Readings 1-39 work (about 2 s: the first idle and busy phases), then
    # the GPU is lost.
    fail = "nvmlDeviceGetProcessUtilization=15@40"
    run = run_calipers(PROG, TRUTH, env=fake_nvml.env(nvml_lib, fail=fail))
    check_program_unchanged(run)
    gpu = run.profile["summary"]["gpu"]
    assert gpu["available"] is True
    assert 1.0 < gpu["stopped_at_s"] < 3.5
    notes = gpu_notes(run.profile)
    assert len(notes) == 1 and notes[0].startswith("GPU sampling stopped at ")
    assert "nvmlDeviceGetProcessUtilization failed: GPU is lost" in notes[0]
    # What was read of the busy phase before the loss is kept (how much:
    # the readings stopped 0.6 to 1.3 s into it under stress-ng, with 15
    # samples in the shortest).
    idle, busy = phases(run)
    assert busy["samples"] >= 5 and busy["memory_peak_bytes"] == BUSY_MEM
    assert gpu["memory_peak_bytes"] == BUSY_MEM


def test_no_nvml_is_silent(run_calipers, run_plain, tmp_path):
    prog = tmp_path / "plain.py"
    prog.write_text("total = sum(i * i for i in range(3_000_000))\nprint(total)\n")
    plain = run_plain(prog)
    run = run_calipers(prog)
    assert (run.returncode, run.stdout, run.stderr.count("GPU")) == (0, plain.stdout, 0)
    assert run.profile["summary"]["gpu"] is None
    assert gpu_notes(run.profile) == []
    lines = [ln for f in run.profile["files"] for ln in f["lines"]]
    assert lines and all(ln["gpu"] is None for ln in lines)
    # Asked for, its absence is said once.
    run = run_calipers(prog, options=["--gpu"])
    assert run.returncode == 0 and run.stdout == plain.stdout
    gpu = run.profile["summary"]["gpu"]
    assert gpu == {"available": False, "reason": "no NVIDIA driver (libnvidia-ml.so.1 not found)"}
    assert len(gpu_notes(run.profile)) == 1


def test_no_gpu_flag_never_loads_nvml(run_calipers, nvml_lib):
    run = run_calipers(PROG, TRUTH, options=["--no-gpu"], env=fake_nvml.env(nvml_lib))
    check_program_unchanged(run)
    assert run.profile["summary"]["gpu"] is None
    assert run.truth["inits"] == 0


def test_container_reports_device_figures(tmp_path, nvml_lib):
    """In a PID namespace NVML reports host PIDs: none matches ours, so the
    figures are the whole device's, and the report says why."""
    if not shutil.which("unshare"):
        pytest.fail("unshare (util-linux) is needed to make a PID namespace")
    out, truth = tmp_path / "p.json", tmp_path / "t.json"
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "calipers",
           "run", "--no-report", "-o", str(out), str(PROG), str(truth)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env=fake_nvml.env(nvml_lib, pid_offset=100000, other=1))
    assert proc.returncode == 0, proc.stderr
    profile = validate(json.loads(out.read_text()))
    gpu = profile["summary"]["gpu"]
    assert (gpu["utilization_source"], gpu["memory_source"]) == ("device", "device")
    assert "PID namespace" in gpu["fallback"]
    # The device: our 3 GiB and the other process's 1 GiB.
    assert gpu["memory_peak_bytes"] == BUSY_MEM + (1 << 30)
    assert len(gpu_notes(profile)) == 1
