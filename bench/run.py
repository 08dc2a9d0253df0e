#!/usr/bin/env python3
"""CPU-only overhead of calipers, side by side with its peers, in one run.

Programs: CPU-bound benchmarks shipped by the `pyperformance` package, each
run in-process by pyperf's worker mode with a loop count calibrated so that
the unprofiled run takes about --seconds.  Configurations: no profiler,
calipers (CPU only), scalene --cpu-only, py-spy record (100 Hz), and
pyinstrument.  Every configuration of a benchmark runs interleaved
(A B C D E A B C D E ...), --repeat times; we report the median wall time of
each and its slowdown over the unprofiled median, with the min-max range.

Creates its own virtual environment (bench/.venv) with the peers from PyPI
and calipers built from this checkout.  Writes bench/results/cpu.json,
bench/results/cpu.md and docs/PERFORMANCE.md.

    python3 bench/run.py              # full: 10 programs, 5 repeats, ~4 s each
    python3 bench/run.py --quick      # 8 programs, 3 repeats, ~1.5 s each
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV = HERE / ".venv"
RESULTS = HERE / "results"
PEERS = ["pyperformance==1.14.0", "scalene", "py-spy", "pyinstrument", "memray"]
BENCHMARKS = ["nbody", "raytrace", "fannkuch", "richards", "float", "nqueens",
              "spectral_norm", "chaos", "deltablue", "go"]
CONFIGS = ["none", "calipers", "scalene", "py-spy", "pyinstrument"]
#: --memory: full profiling (CPU + memory + copy) against the memory profilers.
MEMORY_CONFIGS = ["none", "calipers-full", "scalene-full", "memray"]


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def venv_bin(name):
    return str(VENV / "bin" / name)


def setup(python):
    if not (VENV / "bin" / "python").exists():
        sh([python, "-m", "venv", str(VENV)])
        sh([venv_bin("python"), "-m", "pip", "install", "-q", "--upgrade", "pip"])
        sh([venv_bin("python"), "-m", "pip", "install", "-q"] + PEERS)
    # Always the calipers of this checkout.
    sh([venv_bin("python"), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps",
        str(ROOT)])


def bench_script(name):
    out = subprocess.run([venv_bin("python"), "-c",
                          "import pyperformance, os; print(os.path.dirname(pyperformance.__file__))"],
                         check=True, capture_output=True, text=True).stdout.strip()
    return os.path.join(out, "data-files", "benchmarks", "bm_" + name, "run_benchmark.py")


def program(name, loops):
    return [bench_script(name), "--worker", "--loops", str(loops), "--values", "1",
            "--warmups", "0", "-q"]


def command(config, prog, tmp):
    py = venv_bin("python")
    out = os.path.join(tmp, "out")
    if config == "none":
        return [py] + prog
    if config == "calipers":
        return [venv_bin("calipers"), "run", "--cpu-only", "--no-report", "-o", out + ".json"] + prog
    if config == "calipers-full":
        return [venv_bin("calipers"), "run", "--no-report", "-o", out + ".json"] + prog
    if config == "scalene":
        return [venv_bin("scalene"), "run", "--cpu-only", "-o", out + ".json"] + prog
    if config == "scalene-full":
        return [venv_bin("scalene"), "run", "-o", out + ".json"] + prog
    if config == "memray":
        return [venv_bin("memray"), "run", "-q", "-f", "-o", out + ".bin"] + prog
    if config == "py-spy":
        return [venv_bin("py-spy"), "record", "-r", "100", "-f", "raw", "-o", out + ".txt",
                "--", py] + prog
    if config == "pyinstrument":
        return [venv_bin("pyinstrument"), "-r", "text", "-o", out + ".txt"] + prog
    raise ValueError(config)


def timed(cmd, cpu=None):
    """Wall time of cmd; appends the CPU time (user + system) of the whole
    process tree, profiler included, to `cpu` if given."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError("%s failed (%d): %s" % (cmd[0], proc.returncode,
                                                        err.read()[-500:].decode(errors="replace")))
    if cpu is not None:
        cpu.append(usage.ru_utime + usage.ru_stime)
    return elapsed


def calibrate(name, seconds):
    """Loops for about `seconds` of run time: fit t(n) = start-up + n * per-loop."""
    t1 = min(timed([venv_bin("python")] + program(name, 1)) for _ in range(2))
    t4 = min(timed([venv_bin("python")] + program(name, 4)) for _ in range(2))
    per_loop = max((t4 - t1) / 3, 1e-3)
    startup = max(t1 - per_loop, 0.0)
    return max(1, math.ceil((seconds - startup) / per_loop))


def machine():
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return "%s, %d CPUs, %s, Linux %s" % (cpu or platform.machine(), os.cpu_count() or 0,
                                          platform.python_implementation(), platform.release())


def versions():
    out = subprocess.run([venv_bin("python"), "-m", "pip", "list", "--format=json"],
                         capture_output=True, text=True, check=True).stdout
    wanted = {"calipers", "scalene", "py-spy", "pyinstrument", "pyperformance", "pyperf"}
    have = {p["name"].lower(): p["version"] for p in json.loads(out)}
    py = subprocess.run([venv_bin("python"), "-c", "import sys; print(sys.version.split()[0])"],
                        capture_output=True, text=True, check=True).stdout.strip()
    v = {k: have[k] for k in sorted(wanted) if k in have}
    v["python"] = py
    return v


def render_cpu(results, meta):
    """Slowdown in CPU time (user + system of the process tree)."""
    configs = meta["configs"]
    lines = ["| benchmark | baseline CPU (s) | " + " | ".join(c for c in configs if c != "none") + " |",
             "|---|---:|" + "---:|" * (len(configs) - 1)]
    slow = {c: [] for c in configs if c != "none"}
    for name, r in results.items():
        base = r["none"]["cpu_median"]
        for c in slow:
            slow[c].append(r[c]["cpu_median"] / base)
        lines.append("| %s | %.2f | %s |" % (name, base, " | ".join(
            "%.3f×" % (r[c]["cpu_median"] / base) for c in slow)))
    lines.append("| **median** | | " + " | ".join(
        "**%.3f×**" % statistics.median(v) for v in slow.values()) + " |")
    return "\n".join(lines)


def render(results, meta):
    configs = meta["configs"]
    lines = ["| benchmark | baseline (s) | " + " | ".join(c for c in configs if c != "none") + " |",
             "|---|---:|" + "---:|" * (len(configs) - 1)]
    slow = {c: [] for c in configs}
    for name, r in results.items():
        base = r["none"]["median"]
        cells = []
        for c in configs:
            if c == "none":
                continue
            s = r[c]["median"] / base
            slow[c].append(s)
            cells.append("%.3f× (%.3f–%.3f)" % (s, r[c]["min"] / base, r[c]["max"] / base))
        lines.append("| %s | %.2f | %s |" % (name, base, " | ".join(cells)))
    lines.append("| **median** | | " + " | ".join(
        "**%.3f×**" % statistics.median(slow[c]) for c in configs if c != "none") + " |")
    return "\n".join(lines), {c: statistics.median(v) for c, v in slow.items() if v}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 programs, 3 repeats, ~1.5 s each")
    ap.add_argument("--repeat", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--only", help="comma-separated benchmark names")
    ap.add_argument("--configs", help="comma-separated subset of " + ",".join(CONFIGS))
    ap.add_argument("--python", default="python3.11")
    ap.add_argument("--memory", action="store_true",
                    help="full profiling (CPU + memory + copy): " + ", ".join(MEMORY_CONFIGS[1:]))
    args = ap.parse_args()
    repeat = args.repeat or (3 if args.quick else 5)
    seconds = args.seconds or (1.5 if args.quick else 4.0)
    names = args.only.split(",") if args.only else BENCHMARKS[: 8 if args.quick else 10]
    default = MEMORY_CONFIGS if args.memory else CONFIGS
    configs = ["none"] + [c for c in (args.configs.split(",") if args.configs else default)
                          if c != "none"]

    setup(args.python)
    RESULTS.mkdir(exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            loops = calibrate(name, seconds)
            prog = program(name, loops)
            times = {c: [] for c in configs}
            cpus = {c: [] for c in configs}
            for _ in range(repeat):
                for c in configs:
                    times[c].append(timed(command(c, prog, tmp), cpus[c]))
            results[name] = {c: {"median": statistics.median(v), "min": min(v), "max": max(v),
                                 "runs": v, "cpu_median": statistics.median(cpus[c]),
                                 "cpu_runs": cpus[c]} for c, v in times.items()}
            results[name]["loops"] = loops
            base = results[name]["none"]["median"]
            print("%-14s %6.2fs  " % (name, base) + "  ".join(
                "%s %.3f×" % (c, results[name][c]["median"] / base) for c in configs if c != "none"),
                flush=True)

    meta = {"machine": machine(), "versions": versions(), "repeat": repeat,
            "seconds": seconds, "configs": configs,
            "date": time.strftime("%Y-%m-%d"),
            "command": "python3 bench/run.py " + " ".join(sys.argv[1:])}
    plain = {k: {c: v for c, v in r.items() if c != "loops"} for k, r in results.items()}
    table, medians = render(plain, meta)
    cpu_table = render_cpu(plain, meta)
    kind = "memory" if args.memory else "cpu"
    (RESULTS / (kind + ".json")).write_text(json.dumps({"meta": meta, "results": results,
                                                        "median_slowdown": medians}, indent=1))
    (RESULTS / (kind + ".md")).write_text(table + "\n\n" + cpu_table + "\n")
    if args.memory:  # docs/PERFORMANCE.md is the CPU-only page, for now
        print()
        print(table)
        print()
        print(cpu_table)
        return
    doc = ROOT / "docs" / "PERFORMANCE.md"
    text = PERFORMANCE_TEMPLATE.format(date=meta["date"], machine=meta["machine"],
                                       versions=", ".join("%s %s" % kv for kv in meta["versions"].items()),
                                       command=meta["command"], repeat=repeat, seconds=seconds,
                                       table=table, cpu_table=cpu_table)
    doc.write_text(text)
    print()
    print(table)
    print()
    print(cpu_table)


PERFORMANCE_TEMPLATE = """\
# Performance

Generated by `bench/run.py` on {date}; rerun it to refresh this page.

- Machine: {machine}
- Versions: {versions}
- Command: `{command}`

## CPU-only overhead

Wall-clock slowdown over the same program without a profiler (median of
{repeat} interleaved runs per configuration; min–max in brackets).  Each
program is a CPU-bound benchmark shipped by `pyperformance`, run in-process by
pyperf's worker mode with loops calibrated to about {seconds:g} s unprofiled.
calipers runs with `--cpu-only`, scalene with `--cpu-only`, py-spy with
`record -r 100`, pyinstrument with its defaults.  Process start-up and the
profiler's own start-up and report writing are included: that is what a user
waits for.

{table}

The same runs in CPU time (user + system of the whole process tree,
profiler threads and processes included; median of the runs).  On a shared
virtual machine wall time is noisy; CPU time shows what the profiler itself
costs:

{cpu_table}
"""

if __name__ == "__main__":
    main()
