#!/usr/bin/env python3
"""calipers side by side with its peers, in one run: overhead, accuracy, own cost.

Three suites, each writing bench/results/<suite>.json and .md; docs/PERFORMANCE.md
(tables and a chart, docs/performance.png) is regenerated from every results
file present.

  overhead   slowdown of each configuration: no profiler, calipers --cpu-only,
             calipers (full), scalene --cpu-only, scalene (full), memray,
             py-spy record (100 Hz), pyinstrument; on the ten pyperformance
             benchmarks seed 000 (section 6.4) used, plus an allocation-heavy
             and a NumPy-heavy program of ours (bench/programs).
  accuracy   ground-truth programs (bench/accuracy) under calipers and every
             peer that reports the metric, scored against what the program
             measured itself (bench/accuracy.py).
  own-cost   the profilers' own memory (peak RSS over the unprofiled run) and
             profile size after 10 s and 60 s of the allocation-heavy program.

Every configuration of a program runs interleaved (A B C ... A B C ...),
--repeat times; we report the median and its slowdown over the unprofiled
median, with the min-max range.  Loop counts are calibrated so that the
unprofiled run takes about --seconds.

Creates a virtual environment per interpreter with the peers from PyPI and
calipers built from this checkout: bench/.venv for the main interpreter
(Python 3.11, whose results are results/<suite>.json and the page's main
sections), bench/.venv-3.X for any other --python, whose results are
results/<suite>-py3.X.json.  A peer, or a program's requirement, that does
not install on an interpreter is recorded as not installable there and
skipped; with results for more than one interpreter, the page gains a "By
interpreter" section that puts them side by side.

    python3 bench/run.py                      # everything (about an hour on 2 cores)
    python3 bench/run.py --quick              # everything, smaller (about 7 minutes)
    python3 bench/run.py --suite accuracy --repeat 5
    python3 bench/run.py --only raytrace,go --configs calipers,py-spy
    python3 bench/run.py --python python3.13 --suite overhead,accuracy
    python3 bench/run.py --render             # rebuild docs/PERFORMANCE.md
"""
import argparse
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import accuracy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
PROGRAMS = HERE / "programs"
#: The interpreter of the committed results and of the page's main sections:
#: its environment is bench/.venv and its results results/<suite>.json.
MAIN_PYTHON = "3.11"
#: The interpreter this run measures ("3.13", "3.14t" for a free-threaded
#: build) and its environment: set by use_interpreter().
PYTHON = MAIN_PYTHON
VENV = HERE / ".venv"
#: What the environment gets from PyPI, one pip command per entry, so that
#: one that does not install on an interpreter (no wheel for it, and its
#: source does not build) leaves the others: name -> requirements.
PACKAGES = {
    "pyperformance": ["pyperformance==1.14.0"],
    "numpy": ["numpy"],
    "matplotlib": ["matplotlib"],  # the charts
    # the pyperformance benchmarks' own requirements (docutils, sympy)
    "docutils": ["docutils==0.18.1"],
    # sympy 1.8 imports distutils, gone from the standard library since
    # 3.12: setuptools brings it back (3.11's environments have it already)
    "sympy": ["sympy==1.8", "mpmath==1.2.1", "setuptools"],
    "scalene": ["scalene"],
    "memray": ["memray"],
    "py-spy": ["py-spy"],
    "pyinstrument": ["pyinstrument"],
}
#: The ten longest-running pyperformance benchmarks of seed 000 (Table 1):
#: name -> (the benchmark's directory in pyperformance, its extra arguments).
PYPERFORMANCE = {
    "async_tree_none": ("async_tree", ["none"]),
    "async_tree_io": ("async_tree", ["io"]),
    "async_tree_cpu_io_mixed": ("async_tree", ["cpu_io_mixed"]),
    "async_tree_memoization": ("async_tree", ["memoization"]),
    "docutils": ("docutils", []),
    "fannkuch": ("fannkuch", []),
    "mdp": ("mdp", []),
    "pprint": ("pprint", []),
    "raytrace": ("raytrace", []),
    "sympy": ("sympy", ["integrate"]),
}
#: pyperformance programs chosen because they allocate heavily or keep the
#: cyclic collector busy: where a profiler that hooks the allocator pays the
#: most, so that its worst case shows and cannot hide behind the median.
ALLOCATING = {
    "deepcopy": ("deepcopy", []),          # copies nested containers: small objects by millions
    "xml_etree": ("xml_etree", ["process"]),  # builds, parses, serialises element trees
    "regex_v8": ("regex_v8", []),          # regular expressions: many short strings
    "json_loads": ("json_loads", []),      # dicts, lists and strings from JSON text
    "float": ("float", []),                # a float object per arithmetic result
    "deltablue": ("deltablue", []),        # constraint objects created and dropped
    "gc_collect": ("gc_collect", []),      # reference cycles made and collected
    "gc_traversal": ("gc_traversal", []),  # collections over a large live object graph
}
PYPERFORMANCE.update(ALLOCATING)
BENCHMARKS = list(PYPERFORMANCE) + ["alloc_heavy", "numpy_heavy", "parallel_threads"]
#: The PACKAGES each program, configuration and accuracy test needs: one of
#: them not installable on this interpreter, and it is skipped.
NEEDS = {**{name: ["pyperformance"] for name in PYPERFORMANCE},
         "docutils": ["pyperformance", "docutils"], "sympy": ["pyperformance", "sympy"],
         "numpy_heavy": ["numpy"],
         "scalene-cpu": ["scalene"], "scalene": ["scalene"], "memray": ["memray"],
         "memray-python": ["memray"], "py-spy": ["py-spy"], "py-spy-native": ["py-spy"],
         "pyinstrument": ["pyinstrument"],
         # the accuracy programs that import NumPy
         "split": ["numpy"], "peak512": ["numpy"], "alloc_lines": ["numpy"], "copies": ["numpy"]}
QUICK = ["raytrace", "sympy", "alloc_heavy", "numpy_heavy"]
SUITES = ["overhead", "accuracy", "own-cost", "tracing"]
CONFIGS = {
    "overhead": ["none", "calipers-cpu", "calipers", "scalene-cpu", "scalene", "memray",
                 "py-spy", "pyinstrument"],
    # calipers.memory tracing from the start (bench/trace_start.py) against
    # tracemalloc (python -X tracemalloc=N), at traceback limits 1 and 25.
    "tracing": ["none", "calipers", "calipers-trace1", "calipers-trace25", "tracemalloc1",
                "tracemalloc25"],
    "own-cost": ["none", "calipers", "scalene", "memray", "memray-python"],
}
#: own-cost: run lengths of the allocation-heavy program, in seconds.
OWN_COST_SECONDS = [10, 60]
QUICK_OWN_COST_SECONDS = [10]


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def venv_bin(name):
    return str(VENV / "bin" / name)


#: Prints an interpreter's label: "3.14", or "3.14t" for a free-threaded build.
LABEL = ("import sys, sysconfig; print('%d.%d' % sys.version_info[:2] + "
         "('t' if sysconfig.get_config_var('Py_GIL_DISABLED') else ''))")


def interpreter(python):
    """(path, label) of --python, a name on PATH or a path to an interpreter;
    exits with a one-line error when it is neither, or not a Python 3."""
    exe = shutil.which(python)
    if exe is None:
        sys.exit("bench/run.py: --python %s: no such interpreter (a name on PATH or a path)"
                 % python)
    try:
        proc = subprocess.run([exe, "-c", LABEL], capture_output=True, text=True, timeout=60)
        label, said = proc.stdout.strip(), proc.stderr.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired) as exc:
        label, said = "", [str(exc)]
    if not re.fullmatch(r"3\.\d+t?", label):
        sys.exit("bench/run.py: --python %s: not a working Python 3 interpreter%s"
                 % (python, " (%s)" % said[0] if said else ""))
    return exe, label


def suffix(label):
    """What names an interpreter's results and environment: nothing for the
    main one (its results are the committed ones), "-py3.14" for others."""
    return "" if label == MAIN_PYTHON else "-py" + label


def use_interpreter(label):
    global PYTHON, VENV
    PYTHON = label
    VENV = HERE / (".venv" if label == MAIN_PYTHON else ".venv-" + label)


def setup(python):
    """Create or refresh VENV with `python`: every PACKAGES entry that
    installs (the others are written to VENV/bench-packages.json as not
    installable, for the run to skip what needs them), and always the
    calipers of this checkout (its failure is fatal)."""
    if not (VENV / "bin" / "python").exists():
        sh([python, "-m", "venv", str(VENV)])
        sh([venv_bin("python"), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    else:
        # An environment made by another interpreter would measure that one
        # under this one's name.
        have = subprocess.run([venv_bin("python"), "-c", LABEL], capture_output=True,
                              text=True).stdout.strip()
        if have != PYTHON:
            sys.exit("bench/run.py: %s is Python %s, not %s: remove it to rebuild it"
                     % (VENV.relative_to(ROOT), have or "(broken)", PYTHON))
    missing = {}
    for name, requirements in PACKAGES.items():
        proc = subprocess.run([venv_bin("python"), "-m", "pip", "install", "-q"] + requirements,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
            errors = [ln for ln in lines if ln.startswith("ERROR:")]
            missing[name] = ((errors or lines or ["pip failed"])[-1])[:300]
            print("%s: not installable on Python %s: %s" % (name, PYTHON, missing[name]),
                  flush=True)
    (VENV / "bench-packages.json").write_text(json.dumps(
        {"python": PYTHON, "not_installable": missing}, indent=1))
    # Always the calipers of this checkout.
    sh([venv_bin("python"), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps",
        str(ROOT)])


def not_installable():
    """{package: pip's error} of what setup() could not install in VENV."""
    path = VENV / "bench-packages.json"
    return json.loads(path.read_text())["not_installable"] if path.exists() else {}


def unavailable(name, missing):
    """Why `name` (a program, configuration, accuracy test or profiler) cannot
    run here, as recorded in meta["skipped"], or None when it can."""
    lacking = [p for p in NEEDS.get(name, []) if p in missing]
    if not lacking:
        return None
    return {"why": "not installable",
            "detail": "; ".join("%s: %s" % (p, missing[p]) for p in lacking)}


#: The benchmarks' directories, copied out of site-packages: every profiler
#: here profiles only "the program's own" files by default, and a script
#: inside site-packages is library code to all of them, so its lines would
#: not be attributed at all and the per-line work would go unmeasured.
COPIES = HERE / ".programs"


def bench_script(directory):
    out = subprocess.run([venv_bin("python"), "-c",
                          "import pyperformance, os; print(os.path.dirname(pyperformance.__file__))"],
                         check=True, capture_output=True, text=True).stdout.strip()
    src = Path(out, "data-files", "benchmarks", "bm_" + directory)
    dst = COPIES / ("bm_" + directory)
    if not dst.exists():
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return str(dst / "run_benchmark.py")


def program(name, loops):
    """The program's argv (without the interpreter) for `loops` loops."""
    ours = PROGRAMS / (name + ".py")
    if ours.exists():
        return [str(ours), str(loops)]
    directory, extra = PYPERFORMANCE[name]
    return [bench_script(directory)] + extra + [
        "--worker", "--loops", str(loops), "--values", "1", "--warmups", "0", "-q"]


def command(config, prog, tmp):
    """The command line that runs argv `prog` under `config`, its output in tmp."""
    py = venv_bin("python")
    out = os.path.join(tmp, "out")
    if config == "none":
        return [py] + prog
    if config == "calipers-cpu":
        return [venv_bin("calipers"), "run", "--cpu-only", "--no-report", "-o", out + ".json"] + prog
    if config == "calipers":
        return [venv_bin("calipers"), "run", "--no-report", "-o", out + ".json"] + prog
    if config.startswith("calipers-trace"):
        return [venv_bin("calipers"), "run", "--no-report", "-o", out + ".json",
                str(HERE / "trace_start.py"), "calipers", config[len("calipers-trace"):]] + prog
    if config.startswith("tracemalloc"):
        return [py, str(HERE / "trace_start.py"), "tracemalloc",
                config[len("tracemalloc"):]] + prog
    if config == "scalene-cpu":
        return [venv_bin("scalene"), "run", "--cpu-only", "-o", out + ".json"] + prog
    if config == "scalene":
        return [venv_bin("scalene"), "run", "-o", out + ".json"] + prog
    if config == "memray":
        return [venv_bin("memray"), "run", "-q", "-f", "-o", out + ".bin"] + prog
    if config == "memray-python":  # every Python allocation too, not only pymalloc's arenas
        return [venv_bin("memray"), "run", "-q", "-f", "--trace-python-allocators",
                "-o", out + ".bin"] + prog
    if config == "py-spy":
        return [venv_bin("py-spy"), "record", "-r", "100", "-f", "raw", "-o", out + ".txt",
                "--", py] + prog
    if config == "py-spy-native":  # C frames too: tells native from Python per sample
        return [venv_bin("py-spy"), "record", "-r", "100", "--native", "-f", "raw",
                "-o", out + ".txt", "--", py] + prog
    if config == "pyinstrument":
        return [venv_bin("pyinstrument"), "-r", "json", "-o", out + ".json"] + prog
    raise ValueError(config)


class Run:
    """One run: wall and CPU time (user + system of the whole process tree,
    profiler included), peak RSS of the largest process, profile size."""

    def __init__(self, wall, cpu, maxrss, size):
        self.wall, self.cpu, self.maxrss, self.size = wall, cpu, maxrss, size


class TimedOut(RuntimeError):
    pass


#: A run is stopped after this many times the unprofiled run's time (at
#: least MIN_LIMIT seconds): some peers are pathologically slow on some
#: programs (scalene on asyncio-heavy ones), and that is a result, not a
#: reason to wait an hour.
LIMIT_FACTOR = 15
MIN_LIMIT = 30.0


def run(cmd, tmp=None, env=None, cwd=None, limit=None):
    """Run cmd to its end, or until `limit` seconds have passed (TimedOut);
    tmp (the profilers' output directory) is emptied first and the size of
    what they wrote there measured."""
    if tmp:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=cwd,
                                start_new_session=True)
        timer = None
        if limit:
            timer = threading.Timer(limit, os.killpg, (proc.pid, signal.SIGKILL))
            timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
        if timer:
            timer.cancel()
            if elapsed >= limit:
                raise TimedOut("%s timed out after %.0f s" % (cmd[0], limit))
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
    """Loops for about `seconds` of run time: fit t(n) = start-up + n * per-loop,
    then run that many once more and correct the per-loop time: loops are not
    all alike (alloc_heavy's slow down as its footprint grows; sympy's
    integrate loops grow slower over a run: the straight fit's 2982 loops
    took 86 s instead of 4)."""
    t1 = timed([venv_bin("python")] + program(name, 1))
    t4 = timed([venv_bin("python")] + program(name, 4))
    per_loop = max((t4 - t1) / 3, 1e-3)
    startup = max(t1 - per_loop, 0.0)
    n = max(1, math.ceil((seconds - startup) / per_loop))
    if n > 4:
        tn = timed([venv_bin("python")] + program(name, n))
        n = max(1, round(n * (seconds - startup) / max(tn - startup, 1e-3)))
    return n


def machine():
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return "%s, %d CPUs, %.0f GiB, %s, Linux %s" % (
        cpu or platform.machine(), os.cpu_count() or 0, memory,
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


def bold_slowdown(m, digits):
    """A summary row's cell: the slowdown m in bold, "> 15×" for a timeout."""
    return "**> %d×**" % LIMIT_FACTOR if m == math.inf else "**%.*f×**" % (digits, m)


def slowdown_table(results, configs, key="median", ranges=True):
    """Markdown: each configuration's `key` over the unprofiled one, per
    program, then the median over the programs."""
    others = [c for c in configs if c != "none"]
    head = "baseline (s)" if key == "median" else "baseline CPU (s)"
    lines = ["| benchmark | %s | %s |" % (head, " | ".join(others)),
             "|---|---:|" + "---:|" * len(others)]
    slow = {c: [] for c in others}
    slow_names = {c: [] for c in others}  # the program of each slow[c] value
    for name, r in results.items():
        base = r["none"][key]
        cells = []
        for c in others:
            if key not in r[c]:
                timeouts = [e for e in r[c].get("errors", []) if e.startswith("timed out")]
                if timeouts:  # slower than the limit: counts as such in the median
                    slow[c].append(math.inf)
                    slow_names[c].append(name)
                    cells.append("> %s (timed out)" % re.search(r"\(([\d.]+×)",
                                                                 timeouts[0]).group(1))
                else:
                    cells.append("failed")
                continue
            s = r[c][key] / base
            slow[c].append(s)
            slow_names[c].append(name)
            cell = "%.3f×" % s
            if ranges:
                cell += " (%.3f–%.3f)" % (r[c]["min"] / base, r[c]["max"] / base)
            if r[c].get("failed"):
                cell += " [%d failed]" % r[c]["failed"]
            cells.append(cell)
        lines.append("| %s | %.2f | %s |" % (name, base, " | ".join(cells)))
    def median(values):
        return bold_slowdown(statistics.median(values), 3)

    def worst(values, names):
        i = max(range(len(values)), key=values.__getitem__)
        return bold_slowdown(values[i], 3) + " (%s)" % names[i]

    lines.append("| **median** | | " + " | ".join(
        median(slow[c]) if slow[c] else "–" for c in others) + " |")
    lines.append("| **worst** | | " + " | ".join(
        worst(slow[c], slow_names[c]) if slow[c] else "–" for c in others) + " |")
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


def render(suite, data):
    return render_tables(suite, data) + skipped_note(data)


def render_tables(suite, data):
    if suite == "accuracy":
        return accuracy.table(data["results"])
    results, configs = data["results"], data["meta"]["configs"]
    plain = {k: {c: v for c, v in r.items() if c in configs} for k, r in results.items()}
    if suite == "own-cost":
        return own_cost_table(plain, configs)
    wall, _ = slowdown_table(plain, configs)
    cpu, _ = slowdown_table(plain, configs, "cpu_median", ranges=False)
    if suite == "tracing" and data.get("snapshot"):
        return wall + "\n\n" + cpu + "\n\n" + snapshot_table(data["snapshot"])
    return wall + "\n\n" + cpu


def skipped_note(data):
    """Markdown: what the run left out because this interpreter could not
    install or run it; "" when nothing was."""
    skipped = data["meta"].get("skipped")
    if not skipped:
        return ""
    return "\n\nLeft out on Python %s:\n\n" % label_of(data) + "\n".join(
        "- %s: %s (%s)" % (thing, s["why"], s["detail"]) for thing, s in skipped.items())


PEER_PREFIXES = ("scalene", "memray", "py-spy", "pyinstrument", "tracemalloc")


def measure(suite, names, configs, repeat, seconds, save, skipped):
    """Run the plan; save(results) after each program, so an interrupted run
    keeps what it measured.  A program that fails without a profiler (it does
    not run on this interpreter) is entered in `skipped` and left out."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if suite == "own-cost":
            plan = [("alloc_heavy %d s" % s,
                     program("alloc_heavy", calibrate("alloc_heavy", s)))
                    for s in seconds]
        else:
            plan = []
            for name in names:
                try:
                    plan.append((name, program(name, calibrate(name, seconds))))
                except RuntimeError as exc:
                    why = str(exc).strip().splitlines()[-1][:300]
                    skipped[name] = {"why": "does not run", "detail": why}
                    print("%-24s does not run on Python %s: %s" % (name, PYTHON, why),
                          flush=True)
                    save(results)
        for name, prog in plan:
            runs = {c: [] for c in configs}
            failures = {c: [] for c in configs}
            for _ in range(repeat):
                for c in configs:
                    if any(f.startswith("timed out") for f in failures[c]):
                        continue  # once is enough
                    limit = None
                    if c != "none":
                        base = statistics.median(r.wall for r in runs["none"])
                        limit = max(LIMIT_FACTOR * base, MIN_LIMIT)
                    for attempt in range(2):
                        try:
                            runs[c].append(run(command(c, prog, tmp), tmp, limit=limit))
                            break
                        except RuntimeError as exc:
                            if not c.startswith(PEER_PREFIXES):
                                raise  # ours, or the program itself: a real failure
                            if isinstance(exc, TimedOut):
                                why = "timed out after %.0f s (%.1f× the unprofiled run)" % (
                                    limit, limit / base)
                                print("  %s %s" % (c, why), flush=True)
                                failures[c].append(why)
                                break
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
                cells.append("%s failed" % c if "median" not in r else "%s %.3f×" % (
                    c, r["median"] / base["median"]) + (" %s %s" % (
                        mb(r["maxrss_median"] - base["maxrss_median"]), mb(r["size_median"]))
                        if suite == "own-cost" else ""))
            print("%-24s %6.2fs  " % (name, base["median"]) + "  ".join(cells), flush=True)
    return results


def run_suite(suite, args, quick):
    """Measure one suite and write bench/results/<suite>.json and .md."""
    repeat = args.repeat or {"overhead": 2 if quick else 3, "accuracy": 1 if quick else 3,
                             "own-cost": 1, "tracing": 2 if quick else 3}[suite]
    seconds = args.seconds or (1.5 if quick else 4.0)
    if suite == "own-cost":
        seconds = QUICK_OWN_COST_SECONDS if quick else OWN_COST_SECONDS
    names = args.only.split(",") if args.only else QUICK if quick else BENCHMARKS
    meta = {"machine": machine(), "versions": versions(), "repeat": repeat,
            "date": time.strftime("%Y-%m-%d"),
            "command": "python3 bench/run.py " + " ".join(sys.argv[1:]),
            "interpreter": PYTHON}
    stem = suite + suffix(PYTHON)
    partial = RESULTS / (stem + ".partial.json")
    missing = not_installable()
    # What this interpreter cannot run: {program, configuration, test or
    # profiler: {"why": "not installable" | "does not run", "detail": ...}}.
    skipped = {}

    def keep(things):
        kept = []
        for thing in things:
            why = unavailable(thing, missing)
            if why:
                skipped[thing] = why
                print("%-24s skipped: %s on Python %s (%s)" % (thing, why["why"], PYTHON,
                                                              why["detail"]), flush=True)
            else:
                kept.append(thing)
        return kept

    def save(results):
        partial.write_text(json.dumps({"meta": meta, "results": results}, indent=1))

    print("== %s" % suite, flush=True)
    if suite == "accuracy":
        tests = args.only.split(",") if args.only and set(args.only.split(",")) <= set(
            accuracy.TESTS) else accuracy.TESTS
        profilers = args.configs.split(",") if args.configs else accuracy.PROFILERS
        tests, profilers = keep(tests), keep(profilers)
        if skipped:
            meta["skipped"] = skipped
        # (accuracy.measure takes an empty list for "all")
        results = accuracy.measure(command, run, repeat, tests, profilers,
                                   log=lambda line: print(line, flush=True)) if (
                                       tests and profilers) else {}
    else:
        chosen = args.configs.split(",") if args.configs else CONFIGS[suite]
        meta["configs"] = ["none"] + keep(
            [c for c in chosen if c != "none" and c in CONFIGS[suite]])
        meta["seconds"] = seconds
        if suite in ("overhead", "tracing"):
            names = keep(names)
        meta["skipped"] = skipped  # measure() adds the programs that do not run
        results = measure(suite, names, meta["configs"], repeat, seconds, save, skipped)
        if not skipped:
            del meta["skipped"]
    path = RESULTS / (stem + ".json")
    if args.only and suite != "accuracy" and path.exists():
        # Some programs measured again: the file keeps the others' figures
        # (each program's configurations are always measured side by side,
        # in one run), and says which commands measured what.
        old = json.loads(path.read_text())
        om = old.get("meta", {})
        if (om.get("configs") == meta["configs"] and om.get("interpreter") == PYTHON
                and om.get("repeat") == repeat and om.get("seconds") == seconds):
            merged = {k: v for k, v in old.get("results", {}).items() if k not in results}
            merged.update(results)
            results = {k: merged[k] for k in BENCHMARKS + sorted(merged) if k in merged}
            meta["command"] = "%s, then %s (%s) on %s" % (
                om.get("command", "?"), meta["command"], ", ".join(names), meta["date"])
            meta["date"] = om.get("date", meta["date"])
            kept_skips = {k: v for k, v in om.get("skipped", {}).items() if k not in names}
            if kept_skips or meta.get("skipped"):
                meta["skipped"] = {**kept_skips, **meta.get("skipped", {})}
    if args.only and suite == "accuracy" and path.exists():
        # Some tests measured again: the file keeps the others' scores, and
        # its command says how each was run.
        old = json.loads(path.read_text())
        om = old.get("meta", {})
        if om.get("interpreter") == PYTHON:
            merged = {k: v for k, v in old.get("results", {}).items() if k not in results}
            merged.update(results)
            results = {k: merged[k] for k in accuracy.TESTS + sorted(merged) if k in merged}
            meta["command"] = "%s (repeat %s), then %s (repeat %s) on %s" % (
                om.get("command", "?"), om.get("repeat"), meta["command"], repeat, meta["date"])
            meta["date"] = om.get("date", meta["date"])
    data = {"meta": meta, "results": results}
    if suite == "tracing":
        data["snapshot"] = snapshot_cost()
    (RESULTS / (stem + ".json")).write_text(json.dumps(data, indent=1))
    if partial.exists():
        partial.unlink()
    print()
    print(render(suite, data), flush=True)  # results/<suite>.md: write_performance_page


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="overhead on %d programs (%s), 2 repeats of ~1.5 s; accuracy once; "
                    "own cost at 10 s only" % (len(QUICK), ", ".join(QUICK)))
    ap.add_argument("--suite", help="comma-separated subset of " + ",".join(SUITES))
    ap.add_argument("--repeat", type=int, help="repetitions of each configuration")
    ap.add_argument("--seconds", type=float, help="unprofiled run time of each program")
    ap.add_argument("--only", help="comma-separated subset of the programs (%s) or of the "
                    "accuracy tests (%s)" % (",".join(BENCHMARKS), ",".join(accuracy.TESTS)))
    ap.add_argument("--configs", help="comma-separated subset of the configurations "
                    "(overhead: %s) or of the accuracy suite's profilers" %
                    ",".join(CONFIGS["overhead"][1:]))
    ap.add_argument("--python", default="python" + MAIN_PYTHON,
                    help="the interpreter to measure, a name on PATH or a path (default "
                    "python%s, in bench/.venv; another gets bench/.venv-3.X and writes "
                    "bench/results/<suite>-py3.X.json)" % MAIN_PYTHON)
    ap.add_argument("--render", action="store_true",
                    help="only rebuild docs/PERFORMANCE.md and bench/results/*.md "
                    "from bench/results/*.json")
    args = ap.parse_args()
    suites = args.suite.split(",") if args.suite else SUITES
    unknown = set(suites) - set(SUITES)
    if unknown:
        ap.error("unknown suite: %s (choose from %s)" % (", ".join(sorted(unknown)),
                                                        ", ".join(SUITES)))
    if args.render:
        # Any environment will do for drawing the charts, the main one first.
        found = [v for v in [HERE / ".venv"] + sorted(HERE.glob(".venv-*"))
                 if (v / "bin" / "python").exists()]
        venv = found[0] if found else None
    else:
        python, label = interpreter(args.python)
        use_interpreter(label)
        if not os.environ.get("BENCH_SET_UP"):
            setup(python)
        venv = VENV if (VENV / "bin" / "python").exists() else None
    # The rest runs in the environment: reading memray's files and drawing
    # the charts need its packages.
    if venv and Path(sys.prefix).resolve() != venv.resolve():
        python = str(venv / "bin" / "python")
        os.execve(python, [python, __file__] + sys.argv[1:], dict(os.environ, BENCH_SET_UP="1"))
    if not args.render:
        RESULTS.mkdir(exist_ok=True)
        for suite in suites:
            run_suite(suite, args, args.quick)
    # A run on another interpreter leaves the main results, and so their
    # charts, as they were: redrawn with another matplotlib, the same chart
    # would differ in bytes for nothing.
    write_performance_page(redraw=args.render or PYTHON == MAIN_PYTHON)


def header(data):
    m = data["meta"]
    return "Measured on %s with `%s`: %s; %s." % (
        m["date"], m["command"], m["machine"],
        ", ".join("%s %s" % kv for kv in m["versions"].items()))


def section(suite):
    path = RESULTS / (suite + ".json")
    if not path.exists():
        return "Not measured yet: `python3 bench/run.py --suite %s`.\n" % suite
    data = json.loads(path.read_text())
    return "%s\n\n%s\n" % (header(data), render(suite, data))


def chart(suite, redraw):
    """docs/<suite>.png from a suite's results (when `redraw`, and the
    environment has matplotlib); returns the Markdown that shows it, or ""
    without results or a chart."""
    path = RESULTS / (suite + ".json")
    png = ROOT / "docs" / ("performance.png" if suite == "overhead" else "accuracy.png")
    if not path.exists():
        return ""
    if redraw:
        try:
            import chart as drawing
        except ImportError:  # matplotlib: the environments have it where it installs
            drawing = None
            print("%s not redrawn: no matplotlib in this environment" % png.name, flush=True)
        if drawing:
            data = json.loads(path.read_text())
            if suite == "overhead":
                drawing.draw(data, png, LIMIT_FACTOR)
            else:
                drawing.draw_accuracy(data, png, accuracy.UNITS)
    if not png.exists():
        return ""
    if suite == "overhead":
        return "![Slowdown per benchmark and configuration](performance.png)\n\n"
    return "![Error per test and profiler](accuracy.png)\n\n"


def label_of(data):
    """The interpreter a results file measured: "3.14"; the results from
    before runs recorded it have the version of their Python."""
    m = data["meta"]
    return m.get("interpreter") or ".".join(m["versions"]["python"].split(".")[:2])


def version_key(label):
    return tuple(int(x) for x in label.rstrip("t").split(".")) + (label.endswith("t"),)


def results_files(suite):
    """[(path, data)] of every interpreter's results of `suite`:
    <suite>.json and <suite>-py3.X.json."""
    return [(path, json.loads(path.read_text())) for path in sorted(RESULTS.glob(suite + "*.json"))
            if re.fullmatch(re.escape(suite) + r"(-py3\.\d+t?)?\.json", path.name)]


def interpreters(suite):
    """{label: data} of every interpreter's results of `suite`, oldest
    interpreter first."""
    found = {label_of(data): data for _, data in results_files(suite)}
    return {k: found[k] for k in sorted(found, key=version_key)}


#: The configurations the "By interpreter" section compares.
COMPARED = ["calipers-cpu", "calipers", "py-spy", "memray"]


def slowdown(data, name, config, key):
    """A program's slowdown under a configuration in one interpreter's
    results: (number or math.inf for a timeout, the cell's text); the number
    is None where there is none."""
    skipped = data["meta"].get("skipped", {})
    for thing in (name, config):
        if thing in skipped:
            return None, skipped[thing]["why"]
    r = data["results"].get(name)
    if r is None or config not in data["meta"]["configs"]:
        return None, "–"
    if key in r[config]:
        s = r[config][key] / r["none"][key]
        return s, "%.2f×" % s
    if any(e.startswith("timed out") for e in r[config].get("errors", [])):
        return math.inf, "> %d×" % LIMIT_FACTOR
    return None, "failed"


def compare_overhead(found, key):
    """Markdown: one row per program, each COMPARED configuration's slowdown
    (`key`: "median" for wall time, "cpu_median" for CPU time) side by side
    for every interpreter; the median row is over the programs that every
    interpreter measured under that configuration."""
    labels = list(found)
    configs = [c for c in COMPARED if any(c in d["meta"]["configs"] for d in found.values())]
    names = []
    for d in found.values():
        names += [n for n in list(d["results"]) + list(d["meta"].get("skipped", {}))
                  if n in BENCHMARKS and n not in names]
    names.sort(key=BENCHMARKS.index)
    unit = "baseline (s)" if key == "median" else "baseline CPU (s)"
    head = ["%s %s" % (unit, lb) for lb in labels] + [
        "%s %s" % (c, lb) for c in configs for lb in labels]
    lines = ["| benchmark | " + " | ".join(head) + " |",
             "|---|" + "---:|" * len(head)]
    values = {}
    for name in names:
        cells = []
        for lb in labels:
            r = found[lb]["results"].get(name)
            cells.append("%.2f" % r["none"][key] if r else "–")
        for c in configs:
            for lb in labels:
                values[name, c, lb], text = slowdown(found[lb], name, c, key)
                cells.append(text)
        lines.append("| %s | %s |" % (name, " | ".join(cells)))
    medians, worsts = [], []
    for c in configs:
        common = [n for n in names if all(values[n, c, lb] is not None for lb in labels)]
        for lb in labels:
            if not common:
                medians.append("–")
                worsts.append("–")
                continue
            medians.append(bold_slowdown(statistics.median(values[n, c, lb] for n in common), 2))
            w = max(common, key=lambda n: values[n, c, lb])
            worsts.append(bold_slowdown(values[w, c, lb], 2) + " (%s)" % w)
    lines.append("| **median** | " + " | ".join([""] * len(labels) + medians) + " |")
    lines.append("| **worst** | " + " | ".join([""] * len(labels) + worsts) + " |")
    return "\n".join(lines)


def compare_accuracy(found):
    """Markdown: one row per test, each profiler's score side by side for
    every interpreter ("n/a": the profiler does not report the metric)."""
    labels = list(found)
    reports = {test: who for test, _, _, who in accuracy.CASES}
    profs = [p for p in accuracy.PROFILERS if any(
        p in r for d in found.values() for r in d["results"].values())]
    tests = [t for t in accuracy.TESTS if any(t in d["results"] for d in found.values())]
    head = ["%s %s" % (p, lb) for p in profs for lb in labels]
    lines = ["| test | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    for test in tests:
        cells = []
        for p in profs:
            for lb in labels:
                d = found[lb]
                skipped = d["meta"].get("skipped", {})
                r = d["results"].get(test, {})
                if p not in reports[test]:
                    cells.append("n/a")
                elif p in r:
                    cells.append(accuracy.cell(test, r[p]))
                elif test in skipped or p in skipped:
                    cells.append(skipped.get(test, skipped.get(p))["why"])
                else:
                    cells.append("–")
        lines.append("| %s | %s |" % (test, " | ".join(cells)))
    return "\n".join(lines)


def by_interpreter():
    """The page's "By interpreter" section, when some suite has results for
    more than one interpreter; "" otherwise."""
    parts = []
    overhead, scores = interpreters("overhead"), interpreters("accuracy")
    if len(overhead) > 1:
        parts.append("### Overhead\n\n" + "\n".join(
            "- Python %s: %s" % (lb, header(d)) for lb, d in overhead.items()) +
            "\n\nWall time:\n\n" + compare_overhead(overhead, "median") +
            "\n\nCPU time:\n\n" + compare_overhead(overhead, "cpu_median") + "\n" +
            ("\n" + FREE_THREADED_NOTE + "\n" if "3.14t" in overhead else ""))
    if len(scores) > 1:
        parts.append("### Accuracy\n\n" + "\n".join(
            "- Python %s: %s" % (lb, header(d)) for lb, d in scores.items()) +
            "\n\n" + compare_accuracy(scores) + "\n")
    if not parts:
        return ""
    return BY_INTERPRETER_TEMPLATE.format(LIMIT_FACTOR) + "\n".join(parts)


#: What was measured of the free-threaded build against 3.14 (by hand).
FREE_THREADED_NOTE = """\
**The free-threaded build (3.14t) next to 3.14** (2026-11-26, the same
checkout, each interpreter over its own unprofiled run; both runs shared
the machine with a full test run, load 2-3 on 2 CPUs, so single programs
move by 5-10% between runs; the CPU-time tables in
bench/results/overhead-py3.14{,t}.md).  CPU only: median 1.004x on 3.14,
1.017x on 3.14t (CPU time 1.009x and 1.017x).  Full profiling: median
1.041x and 1.071x (CPU time 1.049x and 1.083x).  Where 3.14t costs more:
the allocation-heavy programs (json_loads 1.05x -> 1.18x, gc_traversal
0.99x -> 1.17x; not profiled yet: the build's sized hooks, which size
each block through mimalloc, and the engine lock the sampled path takes
are the suspects), and
two threads in parallel (parallel_threads, CPU time 1.02x -> 1.22x with
memory, 1.05x -> 1.09x CPU only; each thread's CPU-clock ticks are a
signal and a frame copy in the thread itself, not measured apart).  gc_collect is the worst
program on both (1.17x and 1.21x wall), with the CPU sampler alone at
1.10x and 1.33x: not explained yet (the extension's own functions are
0.4% of a perf profile of it under `--cpu-only` on 3.14)."""


#: The configurations of the snapshot measurement: (label, argv prefix).
SNAPSHOT_CONFIGS = [
    ("calipers, depth 25", ["calipers"], "calipers", 25),
    ("calipers exact (--memory-interval 1), depth 25",
     ["calipers", "--memory-interval", "1"], "calipers", 25),
    ("tracemalloc, depth 1", None, "tracemalloc", 1),
    ("tracemalloc, depth 25", None, "tracemalloc", 25),
]


def snapshot_cost():
    """bench/snapshot_cost.py in each SNAPSHOT_CONFIGS: {label: its JSON}."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, calipers, which, depth in SNAPSHOT_CONFIGS:
            result = os.path.join(tmp, "r.json")
            script = [str(HERE / "snapshot_cost.py"), which, str(depth), result]
            if calipers:
                cmd = [venv_bin("calipers"), "run", "--no-report", "-o",
                       os.path.join(tmp, "p.json")] + calipers[1:] + script
            else:
                cmd = [venv_bin("python")] + script
            subprocess.run(cmd, check=True, capture_output=True, timeout=1200)
            out[label] = json.loads(Path(result).read_text())
            print("snapshot, %s: %s" % (label, out[label]), flush=True)
    return out


def snapshot_table(snap):
    lines = ["| 1M tuples + 1M str alive | take_snapshot | statistics('lineno') | dump | "
             "traces | file |", "|---|---|---|---|---|---|"]
    for label, r in snap.items():
        lines.append("| %s | %.3f s | %.3f s | %.3f s | %d | %s |" % (
            label, r["take_s"], r["statistics_s"], r["dump_s"], r["traces"],
            mb(r["file_bytes"])))
    return "\n".join(lines)


def write_results_md():
    """bench/results/<suite>[-py3.X].md of every results file."""
    for suite in SUITES:
        for path, data in results_files(suite):
            path.with_suffix(".md").write_text(render(suite, data) + "\n")


def write_performance_page(redraw=True):
    write_results_md()
    (ROOT / "docs" / "PERFORMANCE.md").write_text(PERFORMANCE_TEMPLATE.format(
        overhead=section("overhead"), chart=chart("overhead", redraw),
        accuracy=section("accuracy"), accuracy_chart=chart("accuracy", redraw),
        accuracy_doc=accuracy.describe(),
        own_cost=section("own-cost"), tracing=section("tracing"),
        heap=heap_section()) + by_interpreter())


def heap_section():
    """The heap scanner's table, from bench/results/heap.json (written by
    bench/heap_scan.py --out; not one of run.py's suites: the peers there
    are heap inspectors, not profilers)."""
    path = RESULTS / "heap.json"
    if not path.exists():
        return "_No results yet: run `%s`._\n" % HEAP_COMMAND
    import heap_scan

    data = json.loads(path.read_text())
    results = data["results"]
    head = "Python %s, %s CPUs, load average %.1f when it began (other work ran " \
           "beside it); `%s --out bench/results/heap.json`." % (
               data["python"], data.get("cpus", "?"), data.get("load", float("nan")),
               data["command"])
    # The targets, checked against this run.
    verdicts = []
    for r in (x for x in results if x["tool"] == "calipers"):
        peers = [x for x in results if x["n"] == r["n"] and x["tool"] != "calipers"]
        fastest = min(peers, key=lambda x: x["cpu"]) if peers else None
        scans = [x for x in peers if x["tool"] != "objgraph"]
        best_scan = min(scans, key=lambda x: x["cpu"]) if scans else None
        verdicts.append(
            "- %.2fM objects: %.2f s (target under 1 s per million: %s); %.0f bytes an "
            "object kept, %.0f at the peak, the dominator pass (target under 64: %s); "
            "the fastest peer (%s) takes %.1fx calipers' CPU time%s (target: calipers 10x "
            "faster than the fastest peer: not met)." % (
                r["objects"] / 1e6, r["seconds"],
                "met" if r["seconds"] < r["objects"] / 1e6 else "not met",
                r["bytes_per_object"], r["peak_bytes_per_object"],
                "met for what is kept, not at the peak"
                if r["bytes_per_object"] < 64 <= r["peak_bytes_per_object"]
                else "met" if r["peak_bytes_per_object"] < 64 else "not met",
                fastest["tool"] if fastest else "-",
                fastest["cpu"] / r["cpu"] if fastest else float("nan"),
                ", the fastest that scans the heap (%s) %.1fx" % (
                    best_scan["tool"], best_scan["cpu"] / r["cpu"]) if best_scan else ""))
    return "%s\n\n%s\n\n%s\n" % (head, heap_scan.table(results), "\n".join(verdicts))


HEAP_COMMAND = ("python bench/heap_scan.py --out bench/results/heap.json "
                "1000000 5000000")


BY_INTERPRETER_TEMPLATE = """
## By interpreter

The same programs measured with each interpreter that has results
(`bench/run.py --python python3.X` writes `bench/results/<suite>-py3.X.json`;
the sections above are the main interpreter's).  Each interpreter's
slowdowns are over its own unprofiled run, whose time is given first.  A
program or profiler that does not install on an interpreter shows "not
installable", one whose program fails there without a profiler "does not
run", one not in that run "–"; the median row is over the programs that
every interpreter measured under that configuration ("> {0}×": stopped at
{0}× the unprofiled time).

"""


PERFORMANCE_TEMPLATE = """\
# Performance

Generated by `bench/run.py` (`make bench`, or `make bench-quick` for a
smaller run) from `bench/results/*.json`; rerun it to refresh this page.
Each section says when, where and with which command its numbers were
measured, and the peers' versions.

## Overhead

The programs are the ten pyperformance benchmarks that seed 000 (section 6.4,
Table 1) used, as shipped by the `pyperformance` package (copied out of
site-packages, so that every profiler treats them as the program's own code,
and run in-process by pyperf's worker mode; `sympy` runs its `integrate`
case), and three of ours in `bench/programs/`: `alloc_heavy` (builds, sorts,
indexes and serialises ~25 MB of dicts and strings per loop, keeping the
last eight loops alive: a few hundred MB of footprint that keeps churning)
and `numpy_heavy` (array arithmetic, a matrix product, sorting and copies on
arrays of tens of MB), and `parallel_threads` (two threads building,
sorting and computing in pure Python: in parallel on the free-threaded
build, taking turns at the GIL on the default one).  Eight more pyperformance programs were added
because they allocate heavily or keep the cyclic collector busy, where a
profiler that hooks the allocator pays the most: `deepcopy`, `xml_etree`
(its `process` case), `regex_v8`, `json_loads`, `float`, `deltablue`,
`gc_collect` and `gc_traversal`.  Loop counts are calibrated so that each
unprofiled run takes about the stated seconds.  Below each table's median
row, the worst program of each configuration: a user judges a profiler by
its cost on their program, not on the median one.

Configurations: `calipers-cpu` is `calipers run --cpu-only`; `calipers` is
`calipers run` (CPU, memory, copy volume, leaks); `scalene-cpu` is `scalene
run --cpu-only`; `scalene` is `scalene run` (CPU, memory, copy volume);
`memray` is `memray run` (memory only; by default it records pymalloc's
arenas, not each small Python object: `memray-python` below adds
`--trace-python-allocators`); `py-spy` is `py-spy record -r 100`;
`pyinstrument` is `pyinstrument` with its defaults.

Every configuration of a program runs in turn, repeatedly (A B C A B C …);
slowdowns are the median over the unprofiled median, min–max in brackets.
A configuration still running at 15× the unprofiled time is stopped, shown
as "> 15×" and counted as that slow in the median; one that fails is
retried once and the failure noted ("[1 failed]").
Process start-up and the profiler's own start-up and report writing are
included: that is what a user waits for.  On a shared virtual machine wall
time is noisy; the second table gives CPU time (user + system of the whole
process tree, profiler threads and processes included), which shows what
the profiler itself costs.

{chart}{overhead}
## Where the time goes

Measured with `valgrind --tool=callgrind` (instruction counts, which a
loaded machine does not move) and `perf record` (where the CPU time goes),
on CPython 3.12 unless said; written by hand, not by `bench/run.py`.

**The allocation shim.**  A program copying nested containers
(`copy.deepcopy` of a 200-entry dict of lists, tuples and dicts, and 2000
short strings, 200 times) runs 3,114 M instructions unprofiled.  Under
`calipers run` before issue 19: 3,384 M (+8.7%), of which the shim's hooks
on Python's allocator were nearly all: `py_free` 131 M, `py_malloc` 108 M,
the `memcpy` wrapper 28 M, `py_realloc` 7 M (3.6 M allocations: about 30
instructions each way, on top of pymalloc's own 25-40); the rest of the
engine (sample passes, timeline) under 0.3%.  Each hook's common path had
the prologue of its slow path (six callee-saved registers pushed) and a
counter of the exact totals next to the sampler's countdown.  With every
slow part out of line (`COLD`) the program ran 3,324 M; with the totals
read off the samplers' own countdowns, 3,305 M (+6.1%): `py_free` 87 M,
`py_malloc` 81 M, `memcpy` 21 M.  What is left is the hook's own call
(Python calls the hook, which calls pymalloc), the tracked-pointer filter
on each free, and the thread-local flags.

**Frameless common paths.**  Each hook kept a frame (three registers
saved and restored) for its rare paths, and set and cleared the thread's
`in_py` flag around the call to pymalloc, so that a `malloc()` pymalloc
makes underneath counts as Python's.  pymalloc serves requests up to 512
bytes from its pools and never calls `malloc()` for them, so when the
extension finds pymalloc in place (its arenas are there), a request of up
to 480 bytes (32 left for the debug hooks' header) with no sample point
reached goes to pymalloc in a tail call: 14 instructions instead of 27.
`memcpy`/`memmove` now count before copying, so the copy is a tail call
too: 13 instead of 25.  `alloc_heavy` (two loops, callgrind): +202 M
instructions over the unprofiled run (11.0%) before, +167 M (9.0%) after.
The six programs that cost most in the run above, measured again after
(`python3 bench/run.py --python python3.13 --suite overhead --only
alloc_heavy,json_loads,xml_etree,deepcopy,docutils,pprint --configs
none,calipers-cpu,calipers,py-spy --repeat 3`, wall time, the same loaded
machine): alloc_heavy 1.111x -> 1.084x, json_loads 1.105x -> 1.081x,
xml_etree 1.086x -> 1.061x, deepcopy 1.042x -> 1.006x, docutils 1.079x ->
1.083x, pprint 1.076x -> 1.077x (py-spy in the same run: 1.020x-1.115x).
The free hook still kept its frame: it cannot know whether pymalloc will
hand the block to `free()` (until "The free hook's frame", below).

**The free hook's filter load.**  Two threads allocating under the GIL
(`bench/programs/parallel_threads.py`, 3.13) cost 1.155x under full
profiling and 0.996x CPU-only in the last bench run.  `perf record` of it
put `py_free` at 8.9% of the run's samples, and `perf annotate` two thirds
of that on one instruction: the load of the tracked-pointer filter's
counter.  The counter was found by a multiplicative hash of the address,
so consecutive frees read counters scattered over the 256 KiB filter: a
cache miss nearly every time.  The counter is now found by the address
itself (one per 256-byte granule, consecutive granules in consecutive
counters, the bits above the filter's 64 MiB span folded in by xor), so
the frees of one pymalloc pool read one cache line.  Measured by
`valgrind --tool=cachegrind --cache-sim=yes --trace-children=yes calipers
run --no-report parallel_threads.py 15` (simulated caches: a loaded
machine does not move them), before and after, and the same run
unprofiled:

| | instructions | L1 data read misses | last-level read misses |
|---|---:|---:|---:|
| unprofiled | 1,329 M | 1.99 M | 19.5 K |
| calipers before | 1,507 M | 3.08 M (`py_free` 387 K) | 28.0 K (`py_free` 3.6 K) |
| calipers after | 1,513 M | 2.65 M (`py_free` 9.6 K) | 24.0 K (`py_free` 0.2 K) |

The read misses calipers adds fall by 39% (1.09 M to 0.66 M).  (Measured
with the index's first form, which folded in one more shift and xor and
cost 3 instructions a free more than the hash; the committed one is those
two instructions shorter.)  In wall time, on a
machine whose unprofiled runs of the same program varied by 50% this day
(2026-11-27; a 2-CPU virtual machine), ten interleaved runs each of 150
loops, CPU time over the unprofiled run's: median 1.17x before, 1.12x
after; perf sample counts of one run each in the same minute: 13,346
before and 10,974 after against 10,418 unprofiled (`py_free` 1,184
samples before, 386 after).  Single-threaded, `calipers run` of a loop
building and sorting 2000 small dicts (cachegrind, 20 loops): the
program's L1 read misses 1.99 M before, 1.73 M after (`py_free` 258 K to
4.4 K).  A bench run after the change (8 of the allocating programs,
`--repeat 3`) moved too much that day to show a change of a few percent:
calipers-cpu 0.87x-1.15x, py-spy 0.92x-1.22x, full profiling
0.90x-1.18x; its table is not committed.

**The free hook's frame.**  The free hook on PyMem and PyObject set the
thread's "inside Python's allocator" flag around pymalloc's free and
cleared it after, so it could not end in a tail call and kept a frame:
28 instructions on its common path.  The flag is there for the blocks
over 512 bytes, which pymalloc hands to `free()` through `PyMem_RawFree`:
that `free()` must count as Python's.  Now, where pymalloc serves the two
domains, the hook notes the block in a thread-local word and ends in a
tail call, and the raw domain's free is hooked: handed the block just
noted, it sets the flag around the `free()` (any other block is the raw
domain's own, NumPy's arrays among them, and stays native): 20
instructions (docs/INTERNALS.md, "Python or native, without double
counting").  `valgrind --tool=cachegrind --cache-sim=no
--trace-children=yes calipers run --no-report` of a loop building,
sorting and joining 2000 small dicts, 100 loops, Python 3.13:

| | instructions | the free hook |
|---|---:|---:|
| unprofiled | 1,475.7 M | |
| calipers before | 1,607.3 M (+8.9%) | 44.8 M |
| calipers after | 1,599.4 M (+8.4%) | 32.4 M |
| and the calloc tail call (below) | 1,592.5 M (+7.9%) | 32.4 M |

(The rest of the run moves by a few million instructions between runs:
the sampled work is not the same twice.)  pyperformance's `json_loads`,
2000 loops, the same way: unprofiled 13,138 M; before 14,217 M, the free
hook 415 M; after 14,011 M, the free hook 301 M (of the 206 M between the
two runs, 47 M is dict lookups that move with the string hash seed).
The calloc hooks took the full path on every call (in_py set and
cleared, a frame); a small request with no sample point reached now goes
to pymalloc in a tail call too, as malloc's does: on the same loop 6.6 M
-> 4.6 M instructions.  The footprint's Python and
native parts are unchanged on a program that frees 800 MB of large Python
blocks beside 256 MiB of native memory (tests/test_memory.py,
`test_python_blocks_freed_through_malloc_stay_python`, which fails with
the tail call and no raw hook: every such free then counted as native),
and NumPy's arrays, which it allocates through the raw domain, are still
native.

**What is left on allocation-heavy programs** (2026-11-27, before the
two changes above): `calipers run` of `json_loads` (5000 loops, 3.13,
cachegrind) ran 34,809 M instructions against 32,824 M unprofiled
(+6.0%), and what calipers added was nearly all its per-call hooks: the
free hook 1,033 M, the object domain's malloc 484 M, the `memcpy`
wrapper 390 M, `malloc` 82 M, `free` 72 M; the footprint series'
simplification at the end 67 M.  On `parallel_threads` (two threads
under the GIL) CPU-only profiling costs 6-8% in wall time but adds only
1.4% of instructions under cachegrind (which runs the threads one at a
time), and the GIL watcher's thread used 2.4% of the run's CPU (perf), on
the other core: that cost is not instructions, and is not found yet.

**The frame walk.**  Every sample (CPU or allocation) walks the thread's
stack and needs each frame's line.  `PyCode_Addr2Line` scans the code's
line table from its start: about 2,900 instructions a frame on
`xml_etree`, whose stacks are deep and recursive, so 60,000 instructions a
walk and 2.4% of the run under calipers (callgrind, one loop: 35 M of
1,489 M instructions).  Lines are now looked up once per code object and
instruction offset, in a direct-mapped cache beside the code table (which
owns the code objects, so a hit is always for the same one): 3 M.  Writing
the profile's numbers with `printf` cost another 2.7% of that one-loop run
(16,000 integers at 1,400 instructions each); they are now formatted by
hand.  Instructions over the unprofiled run, one loop of `xml_etree`: +175 M
(13.3%) before, +131 M (10.0%) after, of which the allocator hooks are
55 M (the memcpy wrapper 21 M, `py_malloc` 16.5 M, `py_free` 16.2 M: about
28 instructions a call) and start-up and exit most of the rest.

**The CPU sampler.**  Under `--cpu-only` the extension's own functions are
0.05% of `async_tree`'s CPU samples (CPython 3.13).  That program's 10-15%
came from asking asyncio for an idle loop's tasks at every sample: listing
a WeakSet of thousands of tasks (`weakref_vectorcall` and
`setiter_iternext`, 2.2% of the samples on 3.12, with the Python around
them).  The waiting is now gathered and handed out on a cost budget
(docs/INTERNALS.md, "asyncio"): 0.2%.

**Start-up and exit.**  `python pass.py` takes 9.7 ms here; `calipers run
pass.py` took 34 ms, then 24 ms (medians of 15, full profiling, profile
written), and takes about 8 ms more than `python pass.py` since the
launcher is native (12.4 ms and 20.1 ms, medians of 21 on a machine busy
with other work; `calipers-py run`, the launcher in Python, 29.8 ms in the
same run).  The 10 ms removed first: `tempfile` (5 ms of imports, for one
directory) and the console-script wrapper's `import re` (5 ms: `calipers`
became a script of its own).  Then the second interpreter: the launcher
was a Python program, whose own start (about 10 ms) came before the
program's; the native one (`src/launcher/launcher.c`) execs the program's
interpreter at once, and the options are checked in the program's process
(`cli.launched`, about 1 ms with the import of `cli`).  What is left: the
bootstrap (`cli`'s checks, the run directory, the agent and the extension:
about 2.5 ms), the sampler's threads started and joined, and the profile
and the report written.

**Fork.**  200 forks in a row, each child leaving at once
(`bench/fork_cost.py`, which runs the program plain, under `calipers run`
and under `calipers run --cpu-only`, in turn).  The child's share was the
larger: its set-up and its profile cost about 2-3 ms of CPU against the
plain child's 0.7 ms, the parent's hooks about 0.4-0.6 ms.  Two cuts in
the child: its profile is appended to one file in the run directory
(`parts`) instead of a file created per child (creating a file takes an
inode, and ext4 without a journal scans past every inode freed in the
last minutes: 10-18% of the child's samples, `ext4_create` under
`openat`), and that part leaves out the source text, which the merge never
read (the child read its program's files to write it).  Measured on this
2-core machine shared with other work (load average 4-5: wall-clock
ratios moved by a factor of two between runs, CPU per fork less), before
(commit 01911e6, installed in another virtual environment) and after in
the same run, in turn: `python bench/fork_cost.py --repeat 21 --against
BEFORE/bin/python`, medians of 21: child CPU per fork 2.79 ms → 2.31 ms
with full profiling and 2.48 → 2.17 ms CPU-only (plain: 0.68 ms); the
fork loop 4.63 → 3.71 ms per fork (4.25x → 3.40x the plain loop's
1.09 ms) and 4.65 → 4.41 ms (4.26x → 4.04x).  The same comparison, 15
repetitions each, in two other runs (the first by a scratch script that
ran the same five commands in turn): child CPU 3.61 → 2.40 ms and 3.33 →
2.23 ms, loop 4.6x → 3.0x and 4.2x → 3.4x; then 2.38 → 2.23 ms and 2.23 →
2.02 ms, with a plain loop slowed to 2.5 ms by the load.  What a file's
creation costs depends on how many inodes the filesystem freed in the
last minutes, hence the spread.  The goal of under 2x is not reached.
What is left, measured with `perf` and clocks in the child's hooks: nearly all of it is copy-on-write
faults (half of the child's samples), paid by whatever the child touches
first (the agent's Python code, the engine's fresh tables) rather than by
one step: starting the engine 0.15-0.18 ms (its tables, the main thread's
clock, the sampler thread), the agent's Python around it 0.2-0.3 ms, the
`.run` marker 0.1 ms, the final pass 0.13 ms, rendering and appending the
part 0.2 ms; and in the parent, stopping its threads before each fork
and starting them again after it (kept: no thread of ours may be copied
into the child, and Python 3.12+ warns if the kernel still counts one).
A child that leaves at once is still profiled and merged as before: its
process entry, times and lines are the same.

A second round (session of 2026-11-28), counting page faults rather than
samples: `getrusage`'s minor faults read at each step of a child's hooks,
from the start of the after-fork hook to the part written, 3.13.  A child
that leaves at once took about 220 faults there (the plain child about
66 in all), each a page copied and, while another thread of the process
runs on the other CPU, a TLB shootdown (`smp_call_function_many_cond` in
`perf`), 3-5 µs apiece on this virtual machine.  Cut: reading
`/proc/self/maps` at each restart for the main thread's stack range (half
of the engine's restart: the child runs on its parent's main stack, so
the range is kept when the thread runs in it), the line cache's 48 KiB
cleared at each restart (now mapped zero pages at its first lookup, a
page faulted per slot used), the kernel-version check for CPU timers
(once per process), the `.run` marker (a hard link made at start and
removed at the end, 0.1-0.2 ms: now a start record appended to `parts`,
which leaves the directory as it is), and the awaiting callback and
switch file set again from Python (the engine keeps its parent's and
reads the switch at once).  What is left, in faults, 205 in all: the
agent's Python before the engine 32, the engine's restart 48 (its fresh
tables; reading the main thread's clock; starting the sampler thread),
the start record 51 (the first Python that touches `os`, `posixpath` and
`stat` in the child: the pages any Python doing file work there touches
first, which is why dropping `set_switch` saved fewer than its 25), the
return to the program and `os._exit`'s wrapper 18, the final pass 26,
`_meta()` 11, the JSON 7, the append 1.  Python code is the larger part,
by the pages of objects whose reference counts it touches, so a cut must
keep the child out of Python altogether (one C call at the restart, one
at the end).  The threads cost more than their faults: with the child's
sampler and signal-helper threads not started (a scratch build), the
child's hooks took 0.50-0.60 ms of wall time against 0.80-1.10 ms, the
final pass 4 µs against 0.10-0.15 ms (it waited for the sampler thread),
and pinned to one CPU (`taskset -c 0`, no shootdowns) 0.66 ms.  Starting
them only at the child's first tick (drawn at the fork; a timer whose
handler sets only the eval breaker's calls bit over a pending call queued
at the restart, the way the sampler thread's ticks are answered) would
spare a child that leaves before its first tick both; it is not built:
the signal helper must be there before a `SIGTERM` can be caught, and the
eval breaker's layout differs in each version.  Measured after, with the
commit before this round in another virtual environment, same run, in
turn (`python bench/fork_cost.py --repeat 11 --against BEFORE/bin/python`,
load average 1.3): the fork loop 2.23 → 2.02 ms per fork (3.10x → 2.80x
the plain loop's 0.72 ms), CPU-only 2.10 → 1.94 ms (2.92x → 2.70x); child
CPU 1.79 → 1.59 ms (plain 0.53), parent CPU 0.60 → 0.55 ms (plain 0.15).

Then the threads.  Not starting them is not an option (the signal helper
must be there to catch a `SIGTERM`, the sampler for the first tick), and
not starting only one of them saved nothing measurable (scratch builds,
the same run: 3.24x against 3.31x without the sampler; 2.29x against
2.71x without both): what costs is a second thread of the child running
on another CPU at all, which makes each copy-on-write fault flush that
CPU's TLB.  So a forked child starts both on the CPU its main thread is
on (`sched_getcpu`, a one-CPU affinity at `pthread_create`), where they
run only when the main thread does not, and the sampler gives both the
main thread's affinity back at the child's first tick
(`calx_runtime_pin_begin/end`, src/ext/runtime.c).  Its ticks, passes
and readings are unchanged; only the first tick's peek and poke are made
with the main thread held off its CPU by the sampler, so the still-in-call
rule (INTERNALS) does not apply to that one.  Measured beside a full CI run
(load average 2.5-2.9), the session's start (1cb1f31) in another virtual
environment, in turn, 11 repetitions: the fork loop 2.76 → 2.00 ms per
fork (3.78x → 2.73x the plain loop's 0.73 ms), CPU-only 2.84 → 1.88 ms
(3.89x → 2.57x); child CPU 1.77 → 1.45 ms (plain 0.53), parent 0.45 →
0.40 ms (plain 0.20).  On the quiet machine after it (load average
0.3-0.7), 15 repetitions: 2.37 → 2.05 ms (3.19x → 2.76x), CPU-only 2.26 →
1.92 ms (3.04x → 2.58x), child CPU 1.91 → 1.52 ms (plain 0.55): the pin
gains most where the other CPU is busy.  Still not under 2x.  Left: the child's Python (the
faults above), the thread creations themselves, and in the parent the
stop and start of its threads around each fork.

**The GIL watcher** runs only while the program has threads besides the
main one (a 1 ms look at each); none of the overhead programs starts one.

## Accuracy

Each program in `bench/accuracy/` does known work and measures the truth
itself (CPU time with `time.thread_time`, wall time with `perf_counter`,
bytes from the sizes it allocates and copies); each profiler that reports
the metric runs it, and the score is the error of what it reported (lower is
better).  A profiler that does not report a metric is not run for it (n/a).
CPU time is compared as shares, because the peers report percentages; memory
and copy volumes are compared in bytes.  Each profiler's own output is read
(calipers' and scalene's JSON, memray's capture file through its Python API,
py-spy's collapsed stacks, pyinstrument's JSON), and time in library code is
credited to the innermost line of the program, as each of them does in its
own report.  py-spy tells native from Python time only with `--native`
(C frames unwound at each sample, the process stopped meanwhile): it is
run so (`py-spy-native`) for the native-share tests, and as in the
overhead table for the others.

{accuracy_doc}

{accuracy_chart}{accuracy}
## Own memory and profile size

The allocation-heavy program run for about 10 s and 60 s.  Own memory is the
profiled run's peak RSS (of its largest process) minus the unprofiled run's;
the bound in brackets is what calipers promises for itself, 5% of the
program's peak plus 20 MB.  Profile is the size of what the profiler writes
(calipers: the JSON profile; scalene: its JSON; memray: its capture file).

{own_cost}
## Memory tracing: calipers.memory against tracemalloc

`calipers-trace1` and `calipers-trace25` run each program under `calipers
run` with `calipers.memory.start(1)` or `start(25)` called first;
`tracemalloc1` and `tracemalloc25` run it under plain `python` with
`tracemalloc.start(1)` or `start(25)` called first (both through
`bench/trace_start.py`, which then runs the program with `runpy`).  calipers samples allocations whether or
not calipers.memory is tracing (its tracebacks are the nodes of the stack
table it keeps anyway), so the traceback limit costs nothing while the
program runs, only when a snapshot is taken; tracemalloc records every
allocation's traceback, to the limit.  Below the slowdowns, what one
snapshot costs with two million small objects alive (`bench/snapshot_cost.py`):
with sampling calipers holds a few thousand traces where tracemalloc holds
millions; `--memory-interval 1` traces every allocation as tracemalloc does.
What calipers builds for a snapshot (its tuples, the file's bytes) is not
itself sampled, as tracemalloc builds its traces untraced, and statistics are
summed in C per traceback: one object per traceback, not per trace.

{tracing}
## Heap scanner: calipers.heap against guppy3, pympler and objgraph

`bench/heap_scan.py` builds the same heap in a fresh process for each tool
(N/6 instances of a class, each with a str, a list and two ints, half of
them linked to the next; a dict of N/12 ints to strs) and times one call:
`calipers.heap.scan()` (the walk, the dominator tree and retained sizes,
the `Heap`), guppy3's `hpy().heap()`, pympler's `muppy.get_objects()` +
`summary.summarize()`, objgraph's `typestats()`.  Wall and CPU time of the
call (the CPU time is the less disturbed by the machine's other work: the
load average is given); memory is the peak resident set during the call
less the resident set before it (`/proc/self/clear_refs` resets the peak);
the collector is disabled for the timed call, for every tool.  calipers'
own accounting of its memory (what the graph keeps, and its peak, during
the dominator pass) is in docs/INTERNALS.md, "Heap scanner".

The tools do not do the same work.  calipers and guppy3 follow every
reference from the roots, so they see every object once, tracked by the
collector or not, and size each; calipers also builds the reference graph
and its dominator tree (retained sizes, why-alive paths), which guppy3's
`heap()` does not.  pympler's `get_objects()` is `gc.get_objects()` plus
the untracked objects those refer to directly, each sized with
`sys.getsizeof`.  objgraph's `typestats()` counts `gc.get_objects()` by
type name and nothing else (no sizes, no references followed, no str or
int): the cheapest census there is, shown as a floor, not as a heap scan.

What each counts (the table below: each tool's call after the heap was
built less its call before it, in the same process, so that what the tool
itself imported cancels out):

- **calipers** and **guppy3** agree on the instances, strs, ints and lists
  built, to the object and the byte (sizes are `sys.getsizeof`'s, the
  collector's header included, in all three tools that size).
- **guppy3** counts twice the dicts: from Python 3.11 an instance keeps its
  attributes inline, with no `__dict__` until one is asked for, and
  `heap()` asks: it makes a `__dict__` for each such instance (measured: the
  collector's dicts went from 6,895 to 11,888 on a 60,000-object heap).
  It changes the heap it measures; calipers reads the inline values
  without making the dict.
- **pympler** misses what the dict of ints to strs holds (N/12 ints and
  N/12 strs): a dict holding only atomic values is not tracked by the
  collector, so `gc.get_objects()` never returns it, and pympler looks
  only one step from the objects it returns.
- **objgraph** counts only the tracked objects: no str, no int.

{heap}
calipers' rows above are the run after issue 23's change to the dominator
pass (peak 79 -> 59 and 77 -> 57 bytes an object; 87 and 85 in the run
before, made before the retained sizes were allocated after the pass's
temporaries were freed); their wall times are
the machine's load (the walk is the same code as in the run before, then
0.22 s and 1.26 s).  The build before and after, run in turn 9 times
each on the same loaded machine (docs/INTERNALS.md, "Heap scanner",
Memory): 1.1M objects 0.274 -> 0.255 s CPU, 5.4M 1.55 -> 1.54 s; the
dominator pass 0.089 -> 0.068 s and 0.60 -> 0.33 s.
"""

if __name__ == "__main__":
    main()
