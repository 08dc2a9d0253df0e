#!/usr/bin/env python3
"""Overhead of calipers, side by side with its peers, in one run.

Three modes, each writing bench/results/<mode>.json and .md; docs/PERFORMANCE.md
is regenerated from every results file present.

  cpu (default)  CPU-only profiling: no profiler, calipers --cpu-only,
                 scalene --cpu-only, py-spy record (100 Hz), pyinstrument.
  --memory       full profiling (CPU + memory + copy): no profiler, calipers,
                 scalene (full), memray.
  --own-cost     the profilers' own memory (peak RSS over the unprofiled run)
                 and profile file size after 10 s and 60 s of the
                 allocation-heavy program.

Programs: the ten CPU-bound benchmarks shipped by the `pyperformance` package,
run in-process by pyperf's worker mode, plus two of ours in bench/programs
(allocation-heavy and NumPy-heavy), each with a loop count calibrated so that
the unprofiled run takes about --seconds.  Every configuration of a program
runs interleaved (A B C D A B C D ...), --repeat times; we report the median of
each and its slowdown over the unprofiled median, with the min-max range.

Creates its own virtual environment (bench/.venv) with the peers from PyPI
and calipers built from this checkout.

    python3 bench/run.py              # cpu: 12 programs, 5 repeats, ~4 s each
    python3 bench/run.py --quick      # 8 programs, 3 repeats, ~1.5 s each
    python3 bench/run.py --memory
    python3 bench/run.py --own-cost
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
PROGRAMS = HERE / "programs"
PEERS = ["pyperformance==1.14.0", "scalene", "py-spy", "pyinstrument", "memray", "numpy"]
#: The pyperformance programs, then ours (bench/programs).
BENCHMARKS = ["nbody", "raytrace", "fannkuch", "richards", "float", "nqueens",
              "spectral_norm", "chaos", "deltablue", "go", "alloc_heavy", "numpy_heavy"]
QUICK = ["nbody", "raytrace", "richards", "float", "chaos", "go", "alloc_heavy", "numpy_heavy"]
CONFIGS = {
    "cpu": ["none", "calipers", "scalene", "py-spy", "pyinstrument"],
    "memory": ["none", "calipers-full", "scalene-full", "memray"],
    "own-cost": ["none", "calipers-full", "scalene-full", "memray", "memray-python"],
}
#: --own-cost: run lengths of the allocation-heavy program, in seconds.
OWN_COST_SECONDS = [10, 60]


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


#: The benchmark scripts, copied out of site-packages: every profiler here
#: profiles only "the program's own" files by default, and a script inside
#: site-packages is library code to all of them, so its lines would not be
#: attributed at all and the per-line work would go unmeasured.
COPIES = HERE / ".programs"


def bench_script(name):
    out = subprocess.run([venv_bin("python"), "-c",
                          "import pyperformance, os; print(os.path.dirname(pyperformance.__file__))"],
                         check=True, capture_output=True, text=True).stdout.strip()
    src = Path(out, "data-files", "benchmarks", "bm_" + name, "run_benchmark.py")
    COPIES.mkdir(exist_ok=True)
    dst = COPIES / ("bm_%s.py" % name)
    dst.write_bytes(src.read_bytes())
    return str(dst)


def program(name, loops):
    """The program's argv (without the interpreter) for `loops` loops."""
    ours = PROGRAMS / (name + ".py")
    if ours.exists():
        return [str(ours), str(loops)]
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
    if config == "memray-python":  # every Python allocation too, not only pymalloc's arenas
        return [venv_bin("memray"), "run", "-q", "-f", "--trace-python-allocators",
                "-o", out + ".bin"] + prog
    if config == "py-spy":
        return [venv_bin("py-spy"), "record", "-r", "100", "-f", "raw", "-o", out + ".txt",
                "--", py] + prog
    if config == "pyinstrument":
        return [venv_bin("pyinstrument"), "-r", "text", "-o", out + ".txt"] + prog
    raise ValueError(config)


class Run:
    """One run: wall and CPU time (user + system of the whole process tree,
    profiler included), peak RSS of the largest process, profile size."""

    def __init__(self, wall, cpu, maxrss, size):
        self.wall, self.cpu, self.maxrss, self.size = wall, cpu, maxrss, size


def run(cmd, tmp=None):
    if tmp:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise RuntimeError("%s failed (%d): %s" % (cmd[0], code,
                                                        err.read()[-500:].decode(errors="replace")))
    size = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp)) if tmp else 0
    return Run(elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, size)


def timed(cmd):
    return run(cmd).wall


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
    wanted = {"calipers", "scalene", "memray", "py-spy", "pyinstrument", "pyperformance", "pyperf"}
    have = {p["name"].lower(): p["version"] for p in json.loads(out)}
    py = subprocess.run([venv_bin("python"), "-c", "import sys; print(sys.version.split()[0])"],
                        capture_output=True, text=True, check=True).stdout.strip()
    v = {k: have[k] for k in sorted(wanted) if k in have}
    v["python"] = py
    return v


def summary(runs, failures):
    """Medians of a configuration's runs; a peer that failed every time has
    only its failures (peers do crash now and then; we retry once)."""
    if not runs:
        return {"failed": len(failures), "errors": failures}
    wall = [r.wall for r in runs]
    return {"failed": len(failures), "errors": failures,
            "median": statistics.median(wall), "min": min(wall), "max": max(wall), "runs": wall,
            "cpu_median": statistics.median(r.cpu for r in runs), "cpu_runs": [r.cpu for r in runs],
            "maxrss_median": statistics.median(r.maxrss for r in runs),
            "size_median": statistics.median(r.size for r in runs)}


def slowdown_table(results, configs, key="median", ranges=True):
    """Markdown: each configuration's `key` over the unprofiled one, per
    program, then the median over the programs."""
    others = [c for c in configs if c != "none"]
    head = "baseline (s)" if key == "median" else "baseline CPU (s)"
    lines = ["| benchmark | %s | %s |" % (head, " | ".join(others)),
             "|---|---:|" + "---:|" * len(others)]
    slow = {c: [] for c in others}
    for name, r in results.items():
        base = r["none"][key]
        cells = []
        for c in others:
            if key not in r[c]:
                cells.append("failed")
                continue
            s = r[c][key] / base
            slow[c].append(s)
            cell = "%.3f×" % s
            if ranges:
                cell += " (%.3f–%.3f)" % (r[c]["min"] / base, r[c]["max"] / base)
            if r[c].get("failed"):
                cell += " [%d failed]" % r[c]["failed"]
            cells.append(cell)
        lines.append("| %s | %.2f | %s |" % (name, base, " | ".join(cells)))
    lines.append("| **median** | | " + " | ".join(
        "**%.3f×**" % statistics.median(slow[c]) if slow[c] else "–" for c in others) + " |")
    return "\n".join(lines), {c: statistics.median(v) for c, v in slow.items() if v}


def mb(n):
    """Bytes, decimal: "12.3 MB", or "45 KB" below a megabyte."""
    return "%.1f MB" % (n / 1e6) if abs(n) >= 1e6 else "%.0f KB" % (n / 1e3)


def own_cost_table(results, configs):
    """Markdown: peak RSS, the profiler's share of it, and profile size."""
    others = [c for c in configs if c != "none"]
    lines = ["| run | program peak RSS | " + " | ".join(
                 "%s: own memory (bound) | %s: profile" % (c, c) for c in others) + " |",
             "|---|---:|" + "---:|---:|" * len(others)]
    for name, r in results.items():
        base = r["none"]["maxrss_median"]
        cells = []
        for c in others:
            if "maxrss_median" not in r[c]:
                cells += ["failed", "failed"]
                continue
            own = r[c]["maxrss_median"] - base
            cells.append("%s (%s)" % (mb(own), mb(0.05 * base + 20e6)))
            cells.append(mb(r[c]["size_median"]))
        lines.append("| %s | %s | %s |" % (name, mb(base), " | ".join(cells)))
    return "\n".join(lines)


def render(mode, data):
    results, configs = data["results"], data["meta"]["configs"]
    plain = {k: {c: v for c, v in r.items() if c in configs} for k, r in results.items()}
    if mode == "own-cost":
        return own_cost_table(plain, configs)
    wall, _ = slowdown_table(plain, configs)
    cpu, _ = slowdown_table(plain, configs, "cpu_median", ranges=False)
    return wall + "\n\n" + cpu


def measure(mode, names, configs, repeat, seconds, save):
    """Run the plan; save(results) after each program, so an interrupted run
    keeps what it measured."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if mode == "own-cost":
            plan = [("alloc_heavy %d s" % s, program("alloc_heavy", calibrate("alloc_heavy", s)))
                    for s in OWN_COST_SECONDS]
        else:
            plan = [(name, program(name, calibrate(name, seconds))) for name in names]
        for name, prog in plan:
            runs = {c: [] for c in configs}
            failures = {c: [] for c in configs}
            for _ in range(repeat):
                for c in configs:
                    for attempt in range(2):
                        try:
                            runs[c].append(run(command(c, prog, tmp), tmp))
                            break
                        except RuntimeError as exc:
                            if not c.startswith(("scalene", "memray", "py-spy", "pyinstrument")):
                                raise  # ours, or the program itself: a real failure
                            print("  %s failed: %s" % (c, str(exc).strip().splitlines()[-1]),
                                  flush=True)
                            failures[c].append(str(exc)[-300:])
            results[name] = {c: summary(v, failures[c]) for c, v in runs.items()}
            results[name]["argv"] = prog
            save(results)
            base = results[name]["none"]
            cells = []
            for c in configs[1:]:
                r = results[name][c]
                cells.append("%s failed" % c if "median" not in r else "%s %.3f× %s %s" % (
                    c, r["median"] / base["median"], mb(r["maxrss_median"] - base["maxrss_median"]),
                    mb(r["size_median"])))
            print("%-16s %6.2fs %7s  " % (name, base["median"], mb(base["maxrss_median"])) +
                  "  ".join(cells), flush=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="%d programs, 3 repeats, ~1.5 s each" % len(QUICK))
    ap.add_argument("--repeat", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--only", help="comma-separated subset of " + ",".join(BENCHMARKS))
    ap.add_argument("--configs", help="comma-separated subset of the mode's configurations")
    ap.add_argument("--python", default="python3.11")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--memory", action="store_true",
                      help="full profiling: " + ", ".join(CONFIGS["memory"][1:]))
    mode.add_argument("--own-cost", action="store_true",
                      help="own memory and profile size after %s s of alloc_heavy" %
                      " and ".join(map(str, OWN_COST_SECONDS)))
    ap.add_argument("--render", action="store_true",
                    help="only rebuild docs/PERFORMANCE.md from bench/results")
    args = ap.parse_args()
    if args.render:
        write_performance_page()
        return
    kind = "memory" if args.memory else "own-cost" if args.own_cost else "cpu"
    repeat = args.repeat or (1 if args.own_cost else 3 if args.quick else 5)
    seconds = args.seconds or (1.5 if args.quick else 4.0)
    names = args.only.split(",") if args.only else QUICK if args.quick else BENCHMARKS
    configs = ["none"] + [c for c in (args.configs.split(",") if args.configs else CONFIGS[kind])
                          if c != "none"]

    setup(args.python)
    RESULTS.mkdir(exist_ok=True)
    meta = {"machine": machine(), "versions": versions(), "repeat": repeat,
            "seconds": seconds, "configs": configs, "date": time.strftime("%Y-%m-%d"),
            "command": "python3 bench/run.py " + " ".join(sys.argv[1:]),
            "scripts_copied": True}
    partial = RESULTS / (kind + ".partial.json")

    def save(results):
        partial.write_text(json.dumps({"meta": meta, "results": results}, indent=1))

    results = measure(kind, names, configs, repeat, seconds, save)
    data = {"meta": meta, "results": results}
    (RESULTS / (kind + ".json")).write_text(json.dumps(data, indent=1))
    partial.unlink()
    table = render(kind, data)
    (RESULTS / (kind + ".md")).write_text(table + "\n")
    write_performance_page()
    print()
    print(table)


def section(kind):
    path = RESULTS / (kind + ".json")
    if not path.exists():
        return "Not measured yet: `python3 bench/run.py %s`.\n" % {
            "cpu": "", "memory": "--memory", "own-cost": "--own-cost"}[kind]
    data = json.loads(path.read_text())
    m = data["meta"]
    caveat = ""
    if kind != "own-cost" and not m.get("scripts_copied"):
        caveat = ("\n\n**Caveat:** measured before the benchmark scripts were copied out of "
                  "site-packages: the profilers treated them as library code, so their lines "
                  "were not attributed and the per-line work went unmeasured.  Rerun this mode.")
    return ("Measured on %s with `%s`: %s; %s.%s\n\n%s\n" % (
        m["date"], m["command"], m["machine"],
        ", ".join("%s %s" % kv for kv in m["versions"].items()), caveat,
        render(kind, data)))


def write_performance_page():
    (ROOT / "docs" / "PERFORMANCE.md").write_text(PERFORMANCE_TEMPLATE.format(
        cpu=section("cpu"), memory=section("memory"), own_cost=section("own-cost")))


PERFORMANCE_TEMPLATE = """\
# Performance

Generated by `bench/run.py` from `bench/results/*.json`; rerun it to refresh
this page.  Each section says when and how its numbers were measured.

The programs are the ten CPU-bound benchmarks shipped by `pyperformance`
(copied out of site-packages, so that every profiler treats them as the
program's own code, and run in-process by pyperf's worker mode) and two of
ours in
`bench/programs/`: `alloc_heavy` (builds, sorts, indexes and serialises ~25 MB
of dicts and strings per loop, keeping the last eight loops alive: a few
hundred MB of footprint that keeps churning) and `numpy_heavy` (array
arithmetic, a matrix product, sorting and copies on arrays of tens of MB).
Loop counts are calibrated so that each unprofiled run takes about the stated
seconds.  Every configuration of a program runs in turn, repeatedly (A B C A B
C …); slowdowns are the median over the unprofiled median, min–max in
brackets.  Process start-up and the profiler's own start-up and report writing
are included: that is what a user waits for.  On a shared virtual machine wall
time is noisy; the second table of each section gives CPU time (user + system
of the whole process tree, profiler threads and processes included), which
shows what the profiler itself costs.

## CPU-only overhead

calipers runs with `--cpu-only`, scalene with `--cpu-only`, py-spy with
`record -r 100`, pyinstrument with its defaults.

{cpu}
## Full profiling overhead (CPU + memory + copy volume)

calipers with its defaults (`calipers run`), scalene with its defaults
(`scalene run`: CPU, memory, copy volume), memray with `memray run` (no CPU profile; by
default memray records pymalloc's arenas, not each small Python object:
`memray-python` in the next section adds `--trace-python-allocators`).

{memory}
## Own memory and profile size

The allocation-heavy program run for about 10 s and 60 s.  Own memory is the
profiled run's peak RSS (of its largest process) minus the unprofiled run's;
the bound in brackets is what calipers promises for itself, 5% of the
program's peak plus 20 MB.  Profile is the size of what the profiler writes
(calipers: the JSON profile; scalene: its JSON; memray: its capture file).

{own_cost}"""

if __name__ == "__main__":
    main()
