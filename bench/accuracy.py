"""Accuracy suite: programs that measure their own ground truth
(bench/accuracy/*.py), run under calipers and under each peer that reports
the metric, scored as the error of what the profiler reported.

Every profiler's output is read into the same few questions (a function's
CPU time and native share, a line's allocated/peak/copied bytes, which lines
leak); DESCRIBE says how each test is scored.
"""
import json
import os
import re
import statistics
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent / "accuracy"
MIB = 1 << 20
#: Seconds a profiled run may take (the programs take 1-4 s unprofiled).
LIMIT = 120

#: (test, program, environment variants, the profilers that report the metric)
CASES = [
    ("split", "split.py", [{}], ["calipers", "scalene", "py-spy-native"]),
    ("bias", "bias.py", [{"BENCH_SHARE": "0.25"}, {"BENCH_SHARE": "0.75"}],
     ["calipers", "scalene", "py-spy", "pyinstrument"]),
    ("threads", "threads.py", [{}], ["calipers", "scalene", "py-spy", "pyinstrument"]),
    ("threaded_c", "threaded_c.py", [{}], ["calipers", "scalene", "py-spy-native"]),
    ("medium_native", "medium_native.py", [{"BENCH_SCALE": "1"}, {"BENCH_SCALE": "4"}],
     ["calipers", "scalene", "py-spy-native"]),
    ("peak512", "peak512.py", [{"BENCH_TOUCH": t} for t in ("0", "0.5", "1")],
     ["calipers", "scalene", "memray"]),
    ("alloc_lines", "alloc_lines.py", [{}], ["calipers", "scalene", "memray", "memray-python"]),
    ("leaks", "leaks.py", [{}], ["calipers", "scalene", "memray"]),
    ("copies", "copies.py", [{}], ["calipers", "scalene"]),
    ("generators", "generators.py", [{}], ["calipers", "scalene", "py-spy"]),
    ("waiting", "waiting.py", [{}], ["calipers"]),
]
TESTS = [c[0] for c in CASES]
DESCRIBE = {
    "split": "Python vs native time: three functions (a pure-Python loop, NumPy sorts, a "
             "loop mixing both in proportions it measures); the score is the mean "
             "|reported - true| native share of the three, in percentage points.",
    "bias": "function bias (seed 000, section 6.2): a function that calls a helper in its "
            "loop and one with the helper inlined, the first taking 25% and then 75% of "
            "the time; |reported - true| share of the first, mean of the two runs, pp.  "
            "Each run lasts 2.5 s: a profiler sampling at 100 Hz (calipers, py-spy) "
            "sees ~250 samples, so its share has a standard deviation of "
            "sqrt(0.25 * 0.75 / 250) = 2.7 pp and an unbiased one scores 2.2 pp on "
            "average (the mean of |error|): a score of that size is noise, not bias.",
    "threads": "three threads doing 1, 2 and 3 units of pure-Python work while the main "
               "thread waits in join(); mean |reported - true| share of each, pp "
               "(\"missed\": no time seen in any worker).",
    "threaded_c": "C code that keeps the GIL, in threads: four workers alternate json.loads "
                  "of a 1.4 MB document with a pure-Python loop while the main thread "
                  "waits in join(); mean |reported - true| native share of the two "
                  "functions, pp.",
    "medium_native": "native calls too short for a threshold on how late a thread answers: "
                     "a SHA-256, a failing regular expression search and a decimal square "
                     "root, each followed by a few microseconds of bytecode, in one "
                     "function; calls of about 9 us, then (a second run) of about 60 us.  "
                     "Truth: the same function's body run on empty inputs in turns with it "
                     "(the same bytecode and calls, next to no C work; the program measured "
                     "0.57 and 0.67 native).  |reported - true| native share of the function, "
                     "mean of the two runs, pp.",
    "peak512": "the 512 MiB test (seed 000, section 6.3): one 512 MiB NumPy array of which "
               "0%, 50% and 100% is written; worst relative error of the allocating "
               "line's peak, %.",
    "alloc_lines": "allocation volume of three lines: 1 MiB bytearrays, NumPy arrays, small "
                   "bytes objects (pymalloc); mean relative error, %.",
    "leaks": "a line that keeps every 64 KiB buffer it makes, one that frees it at once, "
             "one that fills a cache emptied every 500 steps and at the end: is the leak "
             "reported, and how many of the other two lines are wrongly reported.",
    "copies": "copy volume of three lines: bytes() of a bytearray, ndarray.copy(), a "
              "bytearray slice; mean relative error, %.",
    "generators": "lines inside a generator pipeline, a chain of awaited coroutines and a "
                  "decorated function, each running the same hot loop per item and "
                  "switching frames every 1-2 us: how far the hot lines' share of each "
                  "shape falls below the least share the program measured (the loop's "
                  "iterations, timed in the same functions; the lines also set each loop "
                  "up, so a right answer is at or a few points above it), mean of the "
                  "three, pp.  0 is right.",
    "waiting": "waiting of two kinds, on one CPU: a line running Python while a thread "
               "hashing without the GIL shares the CPU (runnable, often without the CPU: "
               "preempted), then a line that sleeps (blocked).  Each line's time split "
               "into running (its thread's CPU time), preempted and blocked, against the "
               "program's clocks around it (wall and thread CPU time; the running line's "
               "rest is preemption, the sleeping line's blocking); mean |reported - true| "
               "share of the three parts of both lines, pp.  Only calipers splits waiting "
               "so: py-spy counts a runnable thread as active, Scalene and pyinstrument "
               "report no waiting of a line.",
}


def describe():
    """Markdown list of the tests and their scores."""
    return "\n".join("- **%s**: %s" % (t, DESCRIBE[t]) for t in TESTS)
#: Which configuration of bench/run.py runs each profiler here.
CONFIG = {"calipers": "calipers", "scalene": "scalene", "memray": "memray",
          "memray-python": "memray-python", "py-spy": "py-spy",
          "py-spy-native": "py-spy-native", "pyinstrument": "pyinstrument"}
PROFILERS = list(CONFIG)


def markers(program):
    """{name: line} for the `# @name` markers of a program."""
    found = {}
    for n, text in enumerate((HERE / program).read_text().splitlines(), 1):
        m = re.search(r"# @(\w+)\s*$", text)
        if m:
            found[m.group(1)] = n
    return found


def mine(path, program):
    return path is not None and os.path.basename(path) == program


# --- what each profiler reported --------------------------------------------
#
# A Report answers, for the program's own file: cpu[function] = (python,
# native) CPU time (any unit: only shares are compared), lines[line] =
# {"alloc", "peak", "copy"} bytes, and leaks = [line, ...].  Time in library
# code is credited to the innermost frame of the program, as every profiler
# here does for its own report.


class Report:
    def __init__(self):
        self.cpu = {}
        self.lines = {}
        self.leaks = []

    def add_cpu(self, function, python, native=0.0):
        p, n = self.cpu.get(function, (0.0, 0.0))
        self.cpu[function] = (p + python, n + native)

    def line(self, n):
        return self.lines.setdefault(n, {"alloc": 0, "peak": 0, "copy": 0, "cpu": 0.0,
                                         "preempted": 0.0, "blocked": 0.0})


def read_calipers(out, program):
    data = json.loads(Path(out + ".json").read_text())
    r = Report()
    for f in data["files"]:
        if not mine(f["path"], program):
            continue
        for fn in f["functions"]:
            t = fn["self"]
            r.add_cpu(fn["name"], t["python_s"], t["native_s"])
        for ln in f["lines"]:
            m = ln.get("memory") or {}
            d = r.line(ln["line"])
            d["alloc"] += m.get("alloc_python_bytes", 0) + m.get("alloc_native_bytes", 0)
            d["peak"] = max(d["peak"], m.get("live_peak_bytes", 0))
            d["copy"] += m.get("copied_bytes", 0)
            d["cpu"] += ln["python_s"] + ln["native_s"] + ln["system_s"]
            d["preempted"] += ln.get("preempted_s", 0.0)
            d["blocked"] += ln.get("waiting_s", 0.0) - ln.get("preempted_s", 0.0)
    r.leaks = [k["line"] for k in data.get("leaks", []) if mine(k["path"], program)]
    return r


def read_scalene(out, program):
    data = json.loads(Path(out + ".json").read_text())
    r = Report()
    for path, f in data["files"].items():
        if not mine(path, program):
            continue
        for fn in f["functions"]:
            r.add_cpu(fn["line"], fn["n_cpu_percent_python"], fn["n_cpu_percent_c"])
        for ln in f["lines"]:
            d = r.line(ln["lineno"])
            d["alloc"] += ln["n_malloc_mb"] * MIB
            d["peak"] = max(d["peak"], ln["n_peak_mb"] * MIB)
            d["copy"] += ln["n_copy_mb_s"] * data["elapsed_time_sec"] * MIB
            d["cpu"] += ln["n_cpu_percent_python"] + ln["n_cpu_percent_c"]
        r.leaks += [int(n) for n in f.get("leaks", {})]
    return r


def innermost_mine(stack, program):
    """(function, line) of the innermost frame in the program, or None;
    stack is innermost first, of (function, file, line)."""
    for function, path, line in stack:
        if mine(path, program):
            return function, line
    return None


def read_memray(out, program):
    import memray  # the bench environment's
    reader = memray.FileReader(out + ".bin")
    r = Report()
    freeing = {"FREE", "MUNMAP", "PYMALLOC_FREE"}
    for rec in reader.get_allocation_records():
        if memray.AllocatorType(rec.allocator).name in freeing:
            continue
        at = innermost_mine(rec.stack_trace(), program)
        if at:
            r.line(at[1])["alloc"] += rec.size
    for rec in reader.get_high_watermark_allocation_records(merge_threads=True):
        at = innermost_mine(rec.stack_trace(), program)
        if at:
            r.line(at[1])["peak"] += rec.size
    leaked = {}
    for rec in reader.get_leaked_allocation_records(merge_threads=True):
        at = innermost_mine(rec.stack_trace(), program)
        if at:
            leaked[at[1]] = leaked.get(at[1], 0) + rec.size
    # memray lists every allocation alive at exit; a line is "reported" when
    # it holds a megabyte or more of them.
    r.leaks = [n for n, size in leaked.items() if size >= MIB]
    return r


FRAME = re.compile(r"^(.*) \((.*):(\d+)\)$")


def pyspy_samples(out):
    """py-spy's raw (collapsed) stacks, "outer;...;inner count", as (frames
    innermost first, count, whether the innermost frame is C code).  A
    Python function's frame is "name (file.py:line)"; with --native a frame
    of C code is "symbol (library)" or "symbol (file.c:line)"."""
    for text in Path(out + ".txt").read_text().splitlines():
        stack, _, count = text.rpartition(" ")
        frames = []
        for fr in stack.split(";"):
            m = FRAME.match(fr)
            python = bool(m) and m.group(2).endswith(".py")
            frames.append((m.group(1), m.group(2), int(m.group(3))) if python else (fr, None, 0))
        yield frames[::-1], int(count), bool(frames) and frames[-1][1] is None


def read_pyspy(out, program, native=False):
    """py-spy's samples; with --native (`native`), a sample whose innermost
    frame is C code is native."""
    r = Report()
    for frames, count, in_c in pyspy_samples(out):
        at = innermost_mine(frames, program)
        if at:
            c = native and in_c
            r.add_cpu(at[0], 0 if c else count, count if c else 0)
            r.line(at[1])["cpu"] += count
    return r


def read_pyinstrument(out, program):
    """pyinstrument's JSON tree: a node's own time (its time less its
    children's) goes to the nearest frame of the program at or above it."""
    r = Report()

    def walk(node, owner):
        if mine(node.get("file_path"), program):
            owner = node["function"]
        children = node.get("children", [])
        own = node["time"] - sum(c["time"] for c in children)
        if owner:
            r.add_cpu(owner, max(own, 0.0))
        for c in children:
            walk(c, owner)

    walk(json.loads(Path(out + ".json").read_text())["root_frame"], None)
    return r


READERS = {"calipers": read_calipers, "scalene": read_scalene, "memray": read_memray,
           "memray-python": read_memray, "py-spy": read_pyspy,
           "py-spy-native": lambda out, program: read_pyspy(out, program, native=True),
           "pyinstrument": read_pyinstrument}


# --- scores -----------------------------------------------------------------


def shares(values):
    total = sum(values.values())
    return {k: v / total for k, v in values.items()} if total > 0 else None


def pp(x):
    return 100 * x


def score_split(report, truth, marks):
    errors = []
    for fn, true_share in truth["native_share"].items():
        python, native = report.cpu.get(fn, (0.0, 0.0))
        if python + native <= 0:
            return None
        errors.append(abs(native / (python + native) - true_share))
    return pp(statistics.mean(errors))


def score_cpu_shares(report, truth, key):
    """A function's time includes its callees' in the program ("callees")."""
    callees = truth.get("callees", {})
    got = shares({fn: sum(sum(report.cpu.get(f, (0.0, 0.0))) for f in [fn] + callees.get(fn, []))
                  for fn in truth[key]})
    want = shares(truth[key])
    if got is None:
        return None
    return pp(statistics.mean(abs(got[k] - want[k]) for k in want))


def score_bias(report, truth, marks):
    return score_cpu_shares(report, truth, "seconds")


def score_threads(report, truth, marks):
    return score_cpu_shares(report, truth, "cpu_s")


def score_bytes(field):
    def score(report, truth, marks):
        errors = [abs(report.lines.get(marks[name], {}).get(field, 0) - want) / want
                  for name, want in truth["bytes"].items()]
        return 100 * statistics.mean(errors)
    return score


def score_leaks(report, truth, marks):
    """(found, false positives) of the reported lines."""
    found = all(marks[n] in report.leaks for n in truth["leaks"])
    wrong = sum(marks[n] in report.leaks for n in truth["not_leaks"])
    return [int(found), wrong]


def score_waiting(report, truth, marks):
    errors = []
    for name, t in truth["lines"].items():
        d = report.lines.get(marks[name])
        if d is None:
            return None
        got = [d["cpu"], d["preempted"], d["blocked"]]
        rest = max(0.0, t["wall_s"] - t["cpu_s"])
        want = [t["cpu_s"], rest if name == "burn" else 0.0, rest if name == "sleep" else 0.0]
        if sum(got) <= 0:
            return None
        errors += [abs(g / sum(got) - w / sum(want)) for g, w in zip(got, want)]
    return pp(statistics.mean(errors))


#: The functions of each shape in generators.py.
SHAPES = {"gen": ["source", "work", "keep_even", "pipeline"],
          "co": ["co_leaf", "co_middle", "co_main"],
          "dec": ["wrapper", "dec_item", "dec_main"]}


def function_lines(program):
    """{function name: its lines, decorators included} of a program."""
    import ast
    spans = {}
    for node in ast.walk(ast.parse((HERE / program).read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            spans[node.name] = set(range(first, node.end_lineno + 1))
    return spans


def score_generators(report, truth, marks):
    text = (HERE / "generators.py").read_text().splitlines()
    spans = function_lines("generators.py")
    short = []
    for shape, funcs in SHAPES.items():
        lines = set().union(*(spans[f] for f in funcs))
        hot = {n for n, t in enumerate(text, 1) if "# @%s_hot" % shape in t}
        spent = sum(report.lines.get(n, {}).get("cpu", 0) for n in lines)
        if spent <= 0:
            return None
        share = sum(report.lines.get(n, {}).get("cpu", 0) for n in hot) / spent
        t = truth["shapes"][shape]
        short.append(max(0.0, t["iterations"] / (t["full"] + t["empty"]) - share))
    return pp(statistics.mean(short))


SCORES = {"split": score_split, "bias": score_bias, "threads": score_threads,
          "threaded_c": score_split, "medium_native": score_split, "waiting": score_waiting,
          "peak512": score_bytes("peak"), "alloc_lines": score_bytes("alloc"),
          "leaks": score_leaks, "copies": score_bytes("copy"), "generators": score_generators}
#: How variants of a test combine: peak512 reports its worst case.
COMBINE = {"peak512": max}


def measure(command, run, repeat, tests=None, profilers=None, log=print):
    """Run every case `repeat` times under each profiler; returns
    {test: {profiler: {"score": median, "runs": [...], "errors": [...]}}}.
    `command(config, argv, tmp)` builds a profiler's command line and
    `run(cmd, tmp, env)` runs it (both from bench/run.py)."""
    results = {}
    for test, program, variants, who in CASES:
        if tests and test not in tests:
            continue
        marks = markers(program)
        results[test] = {}
        for prof in who:
            if profilers and prof not in profilers:
                continue
            scores, errors = [], []
            for _ in range(repeat):
                per_variant = []
                for extra in variants:
                    with tempfile.TemporaryDirectory() as tmp:
                        truth_path = os.path.join(tmp, "truth.json")
                        env = dict(os.environ, BENCH_TRUTH=truth_path, **extra)
                        out = os.path.join(tmp, "out")
                        try:
                            run(command(CONFIG[prof], [str(HERE / program)], tmp), None, env=env,
                                cwd=str(HERE), limit=LIMIT)
                            truth = json.loads(Path(truth_path).read_text())
                            per_variant.append(SCORES[test](READERS[prof](out, program),
                                                            truth, marks))
                        except (RuntimeError, OSError, ValueError, KeyError) as exc:
                            errors.append("%s: %s" % (type(exc).__name__, str(exc)[-300:]))
                            per_variant = None
                            break
                if per_variant is None:
                    continue
                if test == "leaks":
                    scores.append(per_variant[0])
                elif any(s is None for s in per_variant):
                    scores.append(None)  # nothing of the program's seen
                else:
                    scores.append(COMBINE.get(test, statistics.mean)(per_variant))
            results[test][prof] = {"score": median_score(test, scores), "runs": scores,
                                   "errors": errors}
            log("  %-12s %-14s %s" % (test, prof, cell(test, results[test][prof])))
    return results


def median_score(test, scores):
    if not scores:
        return None
    if test == "leaks":
        return [statistics.median(s[0] for s in scores), statistics.median(s[1] for s in scores)]
    seen = [s for s in scores if s is not None]
    if len(seen) < len(scores) / 2:
        return "missed"
    return statistics.median(seen)


UNITS = {"split": "pp", "bias": "pp", "threads": "pp", "threaded_c": "pp", "peak512": "%",
         "alloc_lines": "%", "copies": "%", "generators": "pp", "medium_native": "pp",
         "waiting": "pp"}


def cell(test, r):
    s = r["score"]
    if s is None:
        return "failed" if r["errors"] else "–"
    if s == "missed":
        return "missed (no worker seen)" if test == "threads" else "missed"
    if test == "leaks":
        return "%s, %g wrong" % ("found" if s[0] >= 0.5 else "not found", s[1])
    return "%.1f %s" % (s, UNITS[test])


def table(results):
    """Markdown: one row per test, one column per profiler."""
    profs = [p for p in PROFILERS if any(p in r for r in results.values())]
    lines = ["| test | " + " | ".join(profs) + " |", "|---|" + "---:|" * len(profs)]
    who = {c[0]: c[3] for c in CASES}
    for test, r in results.items():
        lines.append("| %s | %s |" % (test, " | ".join(
            cell(test, r[p]) if p in r else "not run" if p in who.get(test, ()) else "n/a"
            for p in profs)))
    return "\n".join(lines)
