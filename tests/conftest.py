"""Shared helpers: run real programs under calipers in a subprocess and load
the profile they leave, validated against the shipped JSON Schema."""

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import jsonschema
import pytest

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"

import calipers  # noqa: E402  (the installed package under test)

SCHEMA = json.loads(
    (Path(calipers.__file__).parent / "schema" / "calipers-1.schema.json").read_text())


def validate(profile):
    jsonschema.validate(profile, SCHEMA)
    return profile


#: An argument for a ground-truth program: the path of the file it writes its
#: own measurements to; the run's `truth` is that file's JSON.
TRUTH = object()


class Run:
    """The outcome of one profiled run."""

    def __init__(self, proc, outfile, truth_file=None):
        self.truth = json.loads(truth_file.read_text()) if truth_file and truth_file.exists() else None
        self.proc = proc
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.outfile = outfile
        self.profile = None
        if outfile and Path(outfile).exists():
            self.profile = validate(json.loads(Path(outfile).read_text()))

    # ---- queries on the profile ----
    def lines(self, filename):
        """{line number: line record} for the profiled file named `filename`."""
        for f in self.profile["files"]:
            if Path(f["path"]).name == filename:
                return {ln["line"]: ln for ln in f["lines"]}
        return {}

    def functions(self, filename):
        for f in self.profile["files"]:
            if Path(f["path"]).name == filename:
                return {fn["name"]: fn for fn in f["functions"]}
        return {}


def main_thread_lines(profile):
    """The main thread's part of each line, from the stack table, as the
    reports compute it: a node's self times belong to the innermost frame
    on its stack that is not library code.  {(file name, line): [CPU
    seconds, waiting seconds, nodes summed]}."""
    st = profile["stacks"]
    at = {name: k for k, name in enumerate(st["node_fields"])}
    main = next(i for i, th in enumerate(profile["threads"]) if th["main"])
    owner, mine = [], {}
    for i, n in enumerate(st["nodes"]):
        frame = st["frames"][n[at["frame"]]] if n[at["frame"]] >= 0 else None
        owner.append(i if frame and not frame["library"]
                     else owner[n[at["parent"]]] if n[at["parent"]] >= 0 else -1)
        if n[at["thread"]] == main and owner[i] >= 0:
            o = st["nodes"][owner[i]]
            key = (Path(st["frames"][o[at["frame"]]]["file"]).name, o[at["line"]])
            got = mine.setdefault(key, [0.0, 0.0, 0])
            got[0] += sum(n[at[k]] for k in ("python_s", "native_s", "system_s"))
            got[1] += n[at["waiting_s"]]
            got[2] += 1
    return mine


def cpu(rec):
    return rec["python_s"] + rec["native_s"] + rec["system_s"]


def total(rec):
    return cpu(rec) + rec["waiting_s"]


def cpu_mark():
    """The machine's idle and total CPU time so far (/proc/stat), for
    idle_share_since()."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return ticks[3] + ticks[4], sum(ticks)  # idle + iowait, all


def idle_share_since(mark):
    """The share of the machine's CPU time left idle since cpu_mark() gave
    `mark`: what a test that needs the machine not busier than its CPUs
    asks, over exactly its run (the load average trails by a minute: a CI
    tier that had just started read 1.2 on 2 CPUs with both busy)."""
    idle, every = cpu_mark()
    return (idle - mark[0]) / max(1, every - mark[1])


def build_extension(name, out_dir):
    """Build tests/programs/NAME.c as the Python extension module NAME in
    out_dir, for this interpreter; returns out_dir (to put on the path)."""
    target = Path(out_dir) / (name + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-pthread",
                    "-I" + sysconfig.get_paths()["include"], str(PROGRAMS / (name + ".c")),
                    "-o", str(target)], check=True)
    return Path(out_dir)


def line_of(path, marker):
    """The line number of the line containing `# marker` in a program."""
    for n, text in enumerate(Path(path).read_text().splitlines(), 1):
        if "# " + marker in text:
            return n
    raise AssertionError("no line marked %r in %s" % (marker, path))


CRASHES = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}


def _allow_core():
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))


def crash_report(returncode, cwd):
    """If a profiled program crashed and left a core file in cwd (the kernel's
    core_pattern permitting): every thread's backtrace, for the failure's
    message; a crash seen once on a loaded CI machine must be diagnosable."""
    if -returncode not in CRASHES:
        return ""
    cores = sorted(Path(cwd).glob("core*"), key=lambda p: p.stat().st_mtime)
    gdb = shutil.which("gdb")
    if not cores or not gdb:
        return "\n(crashed; no core file or no gdb for a backtrace)"
    out = subprocess.run([gdb, "-batch", "-nx", "-iex", "set auto-load python-scripts off",
                          "-ex", "thread apply all bt 30",
                          sys.executable, str(cores[-1])],
                         capture_output=True, text=True, timeout=120)
    return "\n---- backtraces of the crashed program ----\n" + out.stdout[-20000:]


#: How run_calipers starts `calipers run`: the installed `calipers` command
#: (the native launcher, src/launcher, as users type it), or with
#: CALIPERS_TEST_LAUNCHER=python `python -m calipers` (the launcher in
#: Python, which the launcher hands `-m` runs and every other command to).
LAUNCHER = ([sys.executable, "-m", "calipers"]
            if os.environ.get("CALIPERS_TEST_LAUNCHER") == "python"
            else [os.path.join(os.path.dirname(sys.executable), "calipers")])


@pytest.fixture
def run_calipers(tmp_path):
    """run_calipers(program, *args, options=[...], env={}, cwd=None); an arg
    TRUTH becomes the truth file's path, and the run's `truth` its JSON."""

    def run(program, *args, options=(), env=None, cwd=None, timeout=120, outfile=True,
            module=False):
        out = tmp_path / "profile.json"
        cmd = LAUNCHER + ["run"]
        if outfile:
            cmd += ["-o", str(out)]
        cmd += list(options)
        cmd += ["-m", program] if module else [str(program)]
        truth = tmp_path / "truth.json"
        cmd += [str(truth if a is TRUTH else a) for a in args]
        full_env = dict(os.environ)
        full_env.update(env or {})
        proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env,
                              cwd=cwd or tmp_path, timeout=timeout, preexec_fn=_allow_core)
        if proc.returncode < 0:
            proc.stderr += crash_report(proc.returncode, cwd or tmp_path)
        return Run(proc, out if outfile else None, truth if TRUTH in args else None)

    return run


@pytest.fixture
def run_plain(tmp_path):
    """Run a program with the same interpreter, no profiler."""

    def run(program, *args, env=None, cwd=None, timeout=120, module=False):
        cmd = [sys.executable] + (["-m", program] if module else [str(program)])
        truth = tmp_path / "truth.json"
        cmd += [str(truth if a is TRUTH else a) for a in args]
        full_env = dict(os.environ)
        full_env.update(env or {})
        return subprocess.run(cmd, capture_output=True, text=True, env=full_env,
                              cwd=cwd or tmp_path, timeout=timeout)

    return run
