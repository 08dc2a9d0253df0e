"""The ``calipers`` command line.

``calipers run [options] script.py [args...]`` and
``calipers run [options] -m module [args...]``: options come before the
script; everything after it belongs to the program.  The launcher checks its
input, then replaces itself (same PID) with ``python script.py args...``, the
engine loaded by a bootstrap on PYTHONPATH (see _boot/sitecustomize.py).

``calipers view [options] profile.json`` renders a saved profile: the
terminal report, or the HTML viewer with ``--html FILE``.

``calipers diff OLD NEW`` compares two profiles, or two memory snapshots:
what got slower, allocates more, holds more.

``calipers export [--format F] [-o FILE] profile.json`` writes a saved
profile's stacks for other tools: pprof, speedscope, collapsed stacks, the
Firefox Profiler.

Errors are one line on standard error and a non-zero status: 2 for bad usage
(unknown option, missing script, unwritable output), 1 where Python itself
would exit with 1 (syntax error, no such module).  Started with standard
output or error closed (`>&-`), calipers says nothing there and the program
runs all the same.
"""

import os
import sys

from calipers import __version__, _common

USAGE = """\
usage: calipers run [options] script.py [args...]
       calipers run [options] -m module [args...]
       calipers view [--text | --html FILE] [view options] profile.json
       calipers export [--format FORMAT] [-o FILE] profile.json
       calipers diff [--by B] [--sort S] [--top N] [--html FILE | --json] OLD NEW
       calipers dump PID
       calipers snapshot PID
       calipers heap PID | calipers heap FILE
       calipers on PID | calipers off PID
       calipers attach [--duration S] [-o FILE] [--cpu-only] PID
       calipers --version | --help

Profile a Python program: time per line and per function, split into Python,
native, system and waiting, for every thread; memory allocated (Python and
native), footprint over time, likely leaks and copy volume.  The program runs
exactly as under `python script.py`: same arguments, output and exit status.

options (before the script; everything after it is the program's):
  -o, --outfile FILE        write the JSON profile to FILE
                            (default: calipers-profile.json); -o - writes
                            it to standard output, at the end
  --interval TIME           mean sampling interval, randomised (default 10ms);
                            a number of seconds or with a unit: 5ms, 500us
  --profile-all             profile every file, the standard library and
                            site-packages included
  --profile-only PAT[,PAT]  profile only files whose path contains PAT
                            (or matches it, if PAT has * ? or [ in it)
  --profile-exclude PAT[,PAT]
                            never profile files matching PAT
  --cpu-only                profile time only (no memory: the allocation
                            shim is not loaded at all)
  --memory-interval SIZE    mean bytes between allocation samples, randomised
                            (default 256KiB; copies: 4x that); 64k, 1M, ...;
                            1 traces every allocation exactly (slow)
  --html FILE               also write the HTML report to FILE
  --export FORMAT:FILE      also write the stacks as FORMAT (pprof,
                            speedscope, collapsed, collapsed-alloc, firefox)
                            to FILE; may be repeated (see calipers export
                            --help)
  --gpu, --no-gpu           GPU utilisation and memory per line (NVIDIA, via
                            the driver's NVML): by default when a driver is
                            there; --gpu also says why when it cannot be
  --no-follow               profile the main process only (by default every
                            Python process it starts is profiled too, and
                            merged into one profile)
  --profile-interval SECS   also write the profile every SECS seconds while
                            the program runs (replaced whole each time)
  --snapshot-every SECS     write a memory snapshot of each process every SECS
                            seconds, beside the profile (PROFILE.PID.N.snapshot;
                            read them with calipers.memory, calipers diff)
  --heap-at-exit            at the end, scan the main process's heap (what
                            holds the memory, and why) and write it beside
                            the profile (PROFILE.PID.N.heap); the report
                            shows its largest types and objects
  --off                     start with profiling switched off (calipers on PID,
                            or calipers.on() in the program, switches it on)
  --no-report               do not print the report at exit
  --min-percent N           report lines holding at least N% of the time or
                            of the memory allocated (default 1)

calipers diff OLD NEW: compare two profiles (or two memory snapshots) line by
line; see calipers help diff.
calipers dump PID: ask the profiled program with that process id to write
its profile now (to its --outfile), without stopping it.
calipers snapshot PID: ask any process of a run for a memory snapshot now.
calipers heap PID: ask any process of a run for a heap dump now; calipers
heap FILE prints a heap dump's summary.
calipers on PID / calipers off PID: switch its profiling on or off, in all
of its processes (the report says how long it was off).

view options:
  --text                    print the terminal report (the default)
  --html FILE               write the HTML report to FILE instead
  --width N                 columns (default: the terminal's, or 100)
  --min-percent N           as for run (default 1)
  --max-rows N              at most N source lines in all (default 300)
  --hottest VIEW            the list of the hottest lines over cpu (CPU time
                            only, waiting left out), main (the main thread
                            only, from the stack table) or main,cpu; shown
                            even when its lines are all in one file (the
                            HTML report has the same views as selectors)
  --color WHEN              auto (a terminal, unless NO_COLOR is set),
                            always or never

  --version                 print the version and exit
  -h, --help                print this help and exit
"""

#: `calipers view` reads profiles up to this size (real ones are a few MB):
#: the whole document is parsed in memory, so the limit bounds that too
#: (with the reader's limit on values, CAL_JSONR_MAX_VALUES).
MAX_PROFILE_BYTES = 128 << 20
#: The largest --width and --max-rows `calipers view` takes.
MAX_WIDTH = 10000
MAX_ROWS = 1000000


#: `calipers COMMAND --help`: each command's own part of USAGE.
RUN_HELP = USAGE[:USAGE.index("       calipers view")] + "\n" + USAGE[
    USAGE.index("options (before the script"):USAGE.index("calipers dump PID:")].rstrip() + "\n"

VIEW_HELP = """\
usage: calipers view [--text | --html FILE] [view options] profile.json

Render a saved profile: the terminal report, or the HTML viewer with --html.
The profile must be a regular file of at most %d MiB.

""" % (MAX_PROFILE_BYTES >> 20) + USAGE[
    USAGE.index("view options:"):USAGE.index("\n  --version")].rstrip() + "\n"

EXPORT_HELP = """\
usage: calipers export [--format FORMAT] [-o FILE] profile.json

Write the whole stacks of a saved profile for other tools.  FORMAT:
  pprof            gzipped protobuf, for `go tool pprof` and other pprof
                   readers (the default); sample types cpu and wall
                   (nanoseconds), alloc_space (bytes), alloc_samples
  speedscope       JSON for speedscope: one time profile per thread, and one
                   of bytes allocated per thread that allocated
  collapsed        folded stacks for flamegraph.pl or inferno: one line per
                   stack, its time (Python, native, system and waiting) in
                   whole microseconds
  collapsed-alloc  the same with bytes allocated
  firefox          JSON for the Firefox Profiler (profiler.firefox.com): one
                   thread per thread, its samples in time (from the
                   profile's timeline of samples; without one, each stack's
                   time laid end to end), allocations as native
                   allocations, the footprint as a memory track

  -o, --outfile FILE   where to write it (default: the profile's name less
                       .json, with .pb.gz, .speedscope.json, .folded,
                       .alloc.folded or .firefox.json); -o - writes it to
                       standard output
  -h, --help           print this help and exit

The profile must be a regular file of at most %d MiB, written by calipers
0.2 or later (it has the stack table).
""" % (MAX_PROFILE_BYTES >> 20)

DIFF_HELP = """\
usage: calipers diff [options] OLD NEW

Compare two runs: two profiles (calipers run's JSON) or two memory snapshot
files.  A header compares the totals; then one row per place, sorted by the
largest change (new minus old), the first N shown.

Profiles: per line (or function, or file) the time (seconds and %% of the
run), the bytes allocated (Python and native), the most held at once
(peak) and what was still held at the end, old, new and their difference.
Lines are matched by file and line number: an edit shifts the lines below
it; a row whose source text differs between the two profiles is marked
"changed".  A place in one run only is marked "new" or "gone".

Snapshots: per line of each allocation's innermost frame (or whole
traceback, or file) the bytes and blocks held, old, new and their
difference with its standard error (the snapshots are samples); * marks a
difference larger than 3 standard errors.

  --by line|function|file|traceback
                       what a row is (default line; function: profiles
                       only, its total time; traceback: snapshots only)
  --sort time|alloc|live|end
                       profiles: the change rows are sorted by: time,
                       bytes allocated, peak held, or held at the end
                       (default time); snapshots sort by bytes
  --top N              at most N rows (default 20; 0: all)
  --html FILE          write an HTML page (one offline file) instead
  --json               print the comparison as JSON (docs/FORMAT.md, "Diffs")
  --width N            columns (default: the terminal's, or 100)
  --color WHEN         auto, always or never
  -h, --help           print this help and exit

Each input must be a regular file of at most %d MiB; a profile and a
snapshot cannot be compared.
""" % (MAX_PROFILE_BYTES >> 20)

DUMP_HELP = """\
usage: calipers dump PID

Ask the profiled program with that process id (the main process of a
`calipers run`) to write its profile now, to its --outfile, without
stopping it.
"""

SNAPSHOT_HELP = """\
usage: calipers snapshot PID

Ask the process with that id (any process of a `calipers run`) for a
memory snapshot now: its live sampled allocations with their tracebacks,
written beside its profile as PROFILE.PID.N.snapshot.  Read it with
calipers.memory.Snapshot.load(), compare two with `calipers diff`.
"""

HEAP_HELP = """\
usage: calipers heap PID
       calipers heap [--top N] FILE

With a PID: ask the process with that id (any process of a `calipers
run`) to scan its heap now (every object reachable, its size, what keeps
it alive: calipers.heap) and write it beside its profile as
PROFILE.PID.N.heap.  The program's threads wait for the scan (some
0.3 s per million objects).

With a FILE (a heap dump: calipers run --heap-at-exit, calipers heap PID,
calipers.heap.Heap.save): print the types that retain the most, and the
largest objects with a path from a root that keeps each alive.  Read it
in Python with calipers.heap.load(FILE).

  --top N    types shown (default 20)
"""

SWITCH_HELP = """\
usage: calipers on PID | calipers off PID

Switch the profiling of the program with that process id (the main
process of a `calipers run`) on or off, in all of its processes.  While
off, nothing is credited to lines; the report says how long it was off.
"""

ATTACH_HELP = """\
usage: calipers attach [--duration S] [-o FILE] [--cpu-only] [--interval T] PID

Profile a running Python process that calipers did not start: its time
per line and, unless --cpu-only, its memory, from now until --duration
seconds have passed (default: until Ctrl-C), then print the report as
`calipers run` does.  The process goes on running, unchanged, after.

calipers starts its engine inside the process, at its next Python
instruction, with sys.remote_exec on Python 3.14 or later, through ptrace
before (x86-64 only there).  The process must run the same Python
version as calipers, and be yours (or you root).  A process blocked in a
long C call or a sleep is left alone with a one-line error.

  --duration S     profile for S seconds (a number, or with a unit: 500ms)
  -o, --outfile F  write the JSON profile to F (default:
                   calipers-profile.json); -o - writes it to standard output
  --cpu-only       time only: no allocator redirection in the process
  --interval T     mean sampling interval (default 10ms)
"""

#: The commands' own help, for `calipers COMMAND --help` and `calipers help COMMAND`.
HELP = {"run": RUN_HELP, "view": VIEW_HELP, "export": EXPORT_HELP, "diff": DIFF_HELP,
        "dump": DUMP_HELP, "snapshot": SNAPSHOT_HELP, "heap": HEAP_HELP,
        "on": SWITCH_HELP, "attach": ATTACH_HELP,
        "off": SWITCH_HELP}


#: Mean bytes between allocation samples (docs/INTERNALS.md, "Memory").
DEFAULT_MEMORY_INTERVAL = 256 << 10
#: The shim's file, beside this module in the installed package.
SHIM = "libcalipers_shim.so"



class UsageError(Exception):
    """A problem with the command line: one line, exit status 2."""

    status = 2


class InputError(Exception):
    """A problem with the program to run, with the status Python would use."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


def say(stream, text):
    """Write to sys.stdout or sys.stderr.  Either is None when calipers was
    started with that descriptor closed (`calipers run prog.py >&-`): then
    calipers' own words go nowhere, and the program still runs."""
    if stream is None:
        return
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):  # a closed or broken stream: nowhere to say it
        pass



def split_option(arg):
    """An option word as (name, "=", value): `--name=value`, and `-oFILE`
    as `-o=FILE`; any other word as (word, "", "")."""
    name, eq, value = arg.partition("=")
    if name.startswith("-o") and not name.startswith("--") and len(name) > 2:
        name, eq, value = "-o", "=", arg[2:]
    return name, eq, value


def option_value(args, i, name, eq, value):
    """The value of the option `name` found at args[i]: what followed its
    "=", or else the next word.  Returns (value, the index of the last word
    used)."""
    if eq:
        return value, i
    if i + 1 >= len(args):
        raise UsageError("%s: expected a value" % name)
    return args[i + 1], i + 1


def print_and_exit(text):
    """--help, --version: the text on standard output, status 0."""
    say(sys.stdout, text)
    sys.exit(0)


def fail(message, status=2):
    say(sys.stderr, "calipers: error: %s\n" % message)
    sys.exit(status)


def parse_interval(text):
    units = (("us", 1e-6), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0))
    scale = 1.0
    raw = text.strip().lower()
    for suffix, factor in units:
        if raw.endswith(suffix):
            raw, scale = raw[: -len(suffix)], factor
            break
    try:
        value = float(raw) * scale
    except ValueError:
        raise UsageError("--interval: not a duration: %r (try 10ms or 0.01)" % text)
    if not (1e-4 <= value <= 10.0):
        raise UsageError("--interval: %s is out of range (0.1ms to 10s)" % text)
    return value


def parse_size(text, option="--memory-interval"):
    units = (("kib", 1 << 10), ("mib", 1 << 20), ("gib", 1 << 30), ("kb", 1000),
             ("mb", 10 ** 6), ("gb", 10 ** 9), ("k", 1 << 10), ("m", 1 << 20),
             ("g", 1 << 30), ("b", 1))
    raw = text.strip().lower()
    scale = 1
    for suffix, factor in units:
        if raw.endswith(suffix):
            raw, scale = raw[: -len(suffix)], factor
            break
    try:
        value = float(raw) * scale
    except ValueError:
        raise UsageError("%s: not a size: %r (try 256k or 1M)" % (option, text))
    # Compared as a float first: inf and nan are out of range, not an
    # OverflowError from int().
    if not (1 <= value <= 1 << 30):
        raise UsageError("%s: %s is out of range (1 byte to 1GiB)" % (option, text))
    return int(value)


def parse_period(text, option="--profile-interval"):
    try:
        value = float(text[:-1] if text.endswith("s") else text)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 86400:
        raise UsageError("%s: expected seconds from 0.1 to 86400, not %r" % (option, text))
    return value


def parse_percent(text, option="--min-percent"):
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 100:
        raise UsageError("%s: expected a percentage from 0 to 100, not %r" % (option, text))
    return value


def parse_count(text, option, most):
    # ASCII digits only (str.isdigit() also takes "²", which int() refuses),
    # and the length checked before int(), which refuses very long strings.
    digits = text.lstrip("0")
    if not (text.isascii() and text.isdigit()) or not digits:
        raise UsageError("%s: expected a positive whole number, not %r" % (option, text))
    if len(digits) > len(str(most)) or int(digits) > most:
        raise UsageError("%s: %s is out of range (1 to %d)" % (option, text, most))
    return int(digits)


def parse_format(text, option):
    if text not in _common.EXPORT_FORMATS:
        raise UsageError("%s: unknown format %r (pprof, speedscope, collapsed, "
                         "collapsed-alloc or firefox)" % (option, text))
    return text


def parse_export(text):
    """--export FORMAT:FILE -> (format, file)."""
    fmt, colon, path = text.partition(":")
    if not colon or not path:
        raise UsageError("--export: expected FORMAT:FILE (e.g. pprof:profile.pb.gz), not %r"
                         % text)
    return parse_format(fmt, "--export"), path


def split_patterns(text, option):
    pats = [p for p in text.split(",") if p]
    if not pats:
        raise UsageError("%s: expected a pattern" % option)
    return pats


def parse_run(args):
    """Parse the arguments of ``run``.  Returns (options, target, program_args)."""
    opts = {
        "outfile": "calipers-profile.json",
        "interval": 0.01,
        "profile_all": False,
        "profile_only": [],
        "profile_exclude": [],
        "cpu_only": False,
        "no_report": False,
        "memory_interval": DEFAULT_MEMORY_INTERVAL,
        "html": None,
        "exports": [],
        "min_percent": 1.0,
        "no_follow": False,
        "profile_interval": 0.0,
        "snapshot_every": 0.0,
        "heap_at_exit": False,
        "off": False,
        "gpu": "auto",
    }
    with_value = {"-o": "outfile", "--outfile": "outfile", "--interval": "interval",
                  "--memory-interval": "memory_interval", "--html": "html",
                  "--export": "exports",
                  "--min-percent": "min_percent", "--profile-interval": "profile_interval",
                  "--snapshot-every": "snapshot_every",
                  "--profile-only": "profile_only", "--profile-exclude": "profile_exclude"}
    flags = {"--profile-all": "profile_all", "--cpu-only": "cpu_only",
             "--no-report": "no_report", "--no-follow": "no_follow", "--off": "off",
             "--heap-at-exit": "heap_at_exit"}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if arg == "-m":
            if i + 1 >= len(args):
                raise UsageError("-m: expected a module name")
            return opts, ("module", args[i + 1]), args[i + 2:]
        if arg.startswith("-m") and len(arg) > 2 and not arg.startswith("--"):
            return opts, ("module", arg[2:]), args[i + 1:]
        if not arg.startswith("-") or arg == "-":
            break
        name, eq, value = split_option(arg)
        if name in ("-h", "--help"):
            print_and_exit(RUN_HELP)
        if name in flags and not eq:
            opts[flags[name]] = True
        elif name in ("--gpu", "--no-gpu") and not eq:
            opts["gpu"] = "on" if name == "--gpu" else "off"
        elif name in with_value:
            value, i = option_value(args, i, name, eq, value)
            key = with_value[name]
            if key == "interval":
                opts[key] = parse_interval(value)
            elif key == "memory_interval":
                opts[key] = parse_size(value)
            elif key == "min_percent":
                opts[key] = parse_percent(value)
            elif key in ("profile_interval", "snapshot_every"):
                opts[key] = parse_period(value, name)
            elif key in ("profile_only", "profile_exclude"):
                opts[key] += split_patterns(value, name)
            elif key == "exports":
                opts[key].append(parse_export(value))
            else:
                if not value:
                    raise UsageError("%s: expected a file name" % name)
                opts[key] = value
        else:
            raise UsageError("unknown option %s (see calipers --help)" % arg)
        i += 1
    if i >= len(args):
        raise UsageError("no program to profile (calipers run script.py [args...])")
    if args[i] == "-":
        raise UsageError("profiling a program read from standard input is not supported")
    return opts, ("script", args[i]), args[i + 1:]


def check_script(path):
    """Python's own checks, as one-line errors, before replacing ourselves."""
    if not os.path.exists(path):
        raise InputError("can't open file %r: No such file or directory" % path, 2)
    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "__main__.py")):
            raise InputError("can't find '__main__.py' in directory %r" % path, 1)
        return
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        raise InputError("can't open file %r: %s" % (path, exc.strerror), 2)
    if source[:2] == b"PK":  # a zip application: Python checks it itself
        return
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(source, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            where = "%s, line %s" % (path, exc.lineno) if exc.lineno else path
            raise InputError("syntax error in %s: %s" % (where, exc.msg), 1)
        except ValueError as exc:  # e.g. null bytes
            raise InputError("cannot compile %s: %s" % (path, exc), 1)


def check_module(name):
    """Does the top-level package of `name` exist?  Finding a top-level module
    imports nothing, so this has no side effects; deeper errors are Python's."""
    import importlib.util

    top = name.partition(".")[0]
    if not top or not all(part.isidentifier() for part in name.split(".")):
        raise InputError("No module named %r" % name, 1)
    saved = sys.path[:]
    sys.path[:] = [os.getcwd()] + [p for p in sys.path[1:]]
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path[:] = saved
    if not found:
        raise InputError("No module named %r" % top, 1)


def check_outfile(path, option="--outfile", what="the profile", stdout=False):
    """Fail now, not at exit, if calipers will not or cannot write the file
    (docs/INTERNALS.md, "Files calipers creates"): it must be a regular
    file or absent, with a name the system accepts, in a directory where
    a file can be created (tried: a temporary file created exclusively and
    removed) and, in a sticky directory, ours to replace.  With `stdout`,
    "-" means standard output.  Creates nothing and follows no symbolic
    link at `path`."""
    if stdout and path == "-":
        return path
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    if len(os.fsencode(path)) >= 4096:  # PATH_MAX: the directory cannot even be looked at
        raise UsageError("cannot write %s to %s...: file name too long" % (what, path[:60]))
    problem = _common.target_problem(path)
    if problem == "it is a directory":
        raise UsageError("%s %s is a directory" % (option, path))
    if problem:
        hint = (" (-o - writes it to standard output)"
                if stdout and problem in ("it is a FIFO", "it is a character device") else "")
        raise UsageError("will not write %s to %s: %s, and calipers replaces only regular "
                         "files%s" % (what, path, problem, hint))
    if not os.path.isdir(directory):
        raise UsageError("cannot write %s to %s: no such directory" % (what, path))
    try:
        dir_fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            probe = ".calipers-%s.tmp" % os.urandom(6).hex()
            _common.create_private(probe, dir_fd)
            os.unlink(probe, dir_fd=dir_fd)
            # rename(2) over the file at exit: in a sticky directory (/tmp)
            # only the file's or the directory's owner may.
            uid = os.geteuid()
            st = os.stat(directory)
            if uid != 0 and st.st_mode & 0o1000 and st.st_uid != uid:
                try:
                    owner = os.lstat(path).st_uid
                except FileNotFoundError:
                    owner = uid
                if owner != uid:
                    raise PermissionError(1, "it belongs to another user, in a sticky "
                                             "directory")
            # The longest name the file system takes (the probe's is shorter).
            try:
                os.lstat(path)
            except FileNotFoundError:
                pass
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise UsageError("cannot write %s to %s: %s"
                         % (what, path, (exc.strerror or str(exc)).lower()))
    return path


def interpreter_flags():
    """The launcher's own interpreter options (-O, -B, -W, -X ...) to pass on,
    as subprocess._args_from_interpreter_flags() would, without importing
    subprocess (slow) and without those that would stop the bootstrap from
    loading (-E, -I, -S)."""
    letters = (("debug", "d"), ("dont_write_bytecode", "B"), ("no_user_site", "s"),
               ("verbose", "v"), ("bytes_warning", "b"), ("quiet", "q"), ("optimize", "O"))
    args = []
    for flag, letter in letters:
        n = getattr(sys.flags, flag, 0)
        if n > 0:
            args.append("-" + letter * n)
    if getattr(sys.flags, "safe_path", False):
        args.append("-P")
    warnopts = list(sys.warnoptions)
    if sys.flags.dev_mode and warnopts[:1] == ["default"]:
        warnopts = warnopts[1:]  # -X dev adds it
    for opt in warnopts:
        args += ["-W", opt]
    for key, value in sys._xoptions.items():
        args += ["-X", key if value is True else "%s=%s" % (key, value)]
    return args


#: Run directories are named RUN_PREFIX + "<pid>-<pid namespace>-<random>":
#: the pid of the main process, so that a later run can tell the run has
#: ended (clean_stale_run_dirs).
RUN_PREFIX = "calipers-run-"


def pid_namespace():
    """This process's pid namespace (its inode number), or 0 if unknown: a
    pid means something only within its namespace (containers sharing
    /tmp)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def temporary_directory():
    """The directory tempfile.gettempdir() would choose: $TMPDIR, $TEMP or
    $TMP, else /tmp, /var/tmp or /usr/tmp, else the working directory;
    the first that is a directory this user can write in.  (Not tempfile
    itself: importing it takes longer than all the rest of the launcher.)"""
    candidates = [os.environ.get(k) for k in ("TMPDIR", "TEMP", "TMP")]
    candidates += ["/tmp", "/var/tmp", "/usr/tmp"]
    for d in candidates:
        if d and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return os.path.abspath(d)
    return os.getcwd()


def run_directory():
    """Where the children of the run leave their profiles for the main
    process to merge, and `calipers dump` its requests (removed by the main
    process at the end): a new directory, mode 0700, with a random name in
    the temporary directory, created exclusively (mkdir fails on anything
    already there, a symbolic link included), after removing those that
    runs killed before their end left there."""
    tmp = temporary_directory()
    ns = pid_namespace()
    clean_stale_run_dirs(tmp, ns)
    prefix = "%s%d-%d-" % (RUN_PREFIX, os.getpid(), ns)
    for _ in range(100):
        path = os.path.join(tmp, prefix + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            fail("cannot create a directory for child processes' profiles in %s: %s "
                 "(set TMPDIR, or use --no-follow)" % (tmp, exc.strerror), 1)
    fail("cannot create a directory for child processes' profiles in %s: every name "
         "tried exists (set TMPDIR, or use --no-follow)" % tmp, 1)


def clean_stale_run_dirs(tmp, ns):
    """Remove the run directories in `tmp` that runs ended by SIGKILL (or a
    crash) left behind: only directories (never a symbolic link) owned by
    this user, named by run_directory in this pid namespace, whose main
    process is gone.  Everything is done relative to descriptors, never
    following a link; what cannot be removed is left alone, silently.
    Directories of older calipers versions (no pid in the name) are not
    recognised."""
    if not ns:
        return
    uid = os.geteuid()
    try:
        tmp_fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for name in os.listdir(tmp_fd):
            if not name.startswith(RUN_PREFIX):
                continue
            fields = name[len(RUN_PREFIX):].split("-", 2)
            if len(fields) != 3 or not fields[0].isdigit() or fields[1] != str(ns):
                continue
            pid = int(fields[0])
            if pid == os.getpid() or process_exists(pid):
                continue
            remove_run_dir(tmp_fd, name, uid)
    except OSError:
        pass
    finally:
        os.close(tmp_fd)


def process_exists(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's: alive
    return True


def remove_run_dir(tmp_fd, name, uid):
    """Remove the run directory `name` in tmp_fd if it is a directory
    owned by `uid`, with the files in it (a run directory holds no
    subdirectory; unlink never follows a link)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=tmp_fd)
    except OSError:
        return  # a symbolic link, not a directory, gone, not ours to read
    try:
        if os.fstat(fd).st_uid != uid:
            return
        for entry in os.listdir(fd):
            try:
                os.unlink(entry, dir_fd=fd)
            except OSError:
                pass
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=tmp_fd)
    except OSError:
        pass


def prepare_run(args):
    """Parse and check the arguments of ``run`` (failing with a UsageError or
    InputError before the program runs) and create the run directory.
    Returns (config, shim, kind, target, program_args): the settings for
    CALIPERS_CONFIG, the shim to preload (None with --cpu-only), and what
    to run."""
    import time

    opts, (kind, target), program_args = parse_run(args)
    if kind == "script":
        check_script(target)
    else:
        check_module(target)
    outfile = check_outfile(opts["outfile"], stdout=True)
    html = check_outfile(opts["html"], "--html", "the HTML report") if opts["html"] else None
    exports, seen = [], {outfile: "the profile", html: "the HTML report"}
    for fmt, path in opts["exports"]:
        path = check_outfile(path, "--export", "the %s export" % fmt)
        if path in seen:  # one would replace the other at the end
            raise UsageError("--export %s:%s: %s is written there too"
                             % (fmt, path, seen[path]))
        seen[path] = "the %s export" % fmt
        exports.append("%s:%s" % (fmt, path))
    if opts["snapshot_every"] and opts["cpu_only"]:
        raise UsageError("--snapshot-every: memory snapshots need memory profiling "
                         "(not --cpu-only)")
    if outfile == "-" and opts["profile_interval"]:
        raise UsageError("--profile-interval needs a file: with -o - the profile is written "
                         "to standard output once, at the end")

    cwd = os.getcwd()
    argv = [target if kind == "script" else "-m " + target] + program_args
    config = {
        "outfile": outfile,
        "interval": repr(opts["interval"]),
        "profile_all": opts["profile_all"],
        "profile_only": opts["profile_only"],
        "profile_exclude": opts["profile_exclude"],
        "no_report": opts["no_report"],
        "html": html,
        "exports": exports,
        "min_percent": repr(opts["min_percent"]),
        "library": _common.library_dirs(),
        "cwd": cwd,
        "script": os.path.abspath(target) if kind == "script" else None,
        "module": target if kind == "module" else None,
        "argv": argv,
        "start_unix": repr(time.time()),
        "memory_interval": 0 if opts["cpu_only"] else opts["memory_interval"],
        "gpu": opts["gpu"],
        # This process's PID is the program's (execve keeps it): the main
        # process; any other that reads this configuration is a child.
        "main_pid": os.getpid(),
        "python": "%d.%d" % sys.version_info[:2],
        "follow": not opts["no_follow"],
        "profile_interval": repr(opts["profile_interval"]),
        "snapshot_every": repr(opts["snapshot_every"]),
        "heap_at_exit": opts["heap_at_exit"],
        "run_dir": run_directory(),
    }
    if opts["off"]:
        _common.set_switch_file(config["run_dir"], False)
    shim = None
    if not opts["cpu_only"]:
        # CALIPERS_SHIM: another build of the shim (the sanitizer test tier).
        shim = os.environ.get("CALIPERS_SHIM") or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), SHIM)
        if not os.path.exists(shim):
            fail("the allocation shim is missing (%s); reinstall calipers or use --cpu-only"
                 % shim, 1)
    config["shim"] = shim
    return config, shim, kind, target, program_args


def run(args):
    config, shim, kind, target, program_args = prepare_run(args)
    env = dict(os.environ)
    env.pop("CALIPERS_SHIM", None)
    env = _common.profiled_env(env, _common.encode_config(config), shim)
    exe = sys.executable
    cmd = [exe] + interpreter_flags()
    cmd += [target] if kind == "script" else ["-m", target]
    cmd += program_args
    for stream in (sys.stdout, sys.stderr):  # None: started with it closed
        say(stream, "")
    try:
        os.execve(exe, cmd, env)
    except OSError as exc:
        fail("cannot start %s: %s" % (exe, exc.strerror), 1)


def launched(options):
    """The CALIPERS_CONFIG of a program the native launcher (src/launcher)
    started: called by the bootstrap in the program's process, before its
    first line, with the options the launcher passed in CALIPERS_LAUNCH
    (each as LEN:TEXT) and the program's command line in sys.argv.  The
    same checks as `calipers run`; on a bad option, a missing script, an
    unwritable output, the same one-line error and status, and the
    process ends without running the program."""
    args, i = [], 0
    try:
        while i < len(options):
            colon = options.index(":", i)
            n = int(options[i:colon])
            args.append(options[colon + 1:colon + 1 + n])
            i = colon + 1 + n
        config = prepare_run(args + ["--"] + sys.argv)[0]
        return _common.encode_config(config)
    except (UsageError, InputError) as exc:
        say(sys.stderr, "calipers: error: %s\n" % exc)
        os._exit(exc.status)
    except SystemExit as exc:  # fail(): the message is out
        os._exit(exc.code if isinstance(exc.code, int) else 1)
    except ValueError:
        say(sys.stderr, "calipers: error: CALIPERS_LAUNCH is not the launcher's\n")
        os._exit(2)


def read_profile(path):
    """The bytes of the profile at `path`, for `calipers view`.  Only a
    regular file of at most MAX_PROFILE_BYTES: a device (/dev/zero), a FIFO
    or a directory is refused before it is read, never read for ever."""
    import stat

    def refuse(why):
        return InputError("cannot read %s: %s" % (path, why), 2)

    fd = None
    try:
        # stat first, so that a device is not even opened (opening some has
        # effects); then fstat what was opened, which is what is read.
        # O_NONBLOCK: should a FIFO take the file's place, opening it with
        # no writer does not hang.
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode):
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise refuse("Is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise refuse("not a regular file")
        limit = MAX_PROFILE_BYTES
        too_big = refuse("larger than the %d MiB calipers view reads" % (limit >> 20))
        if st.st_size > limit:
            raise too_big
        # In one read of its size (one buffer, no copy), then to the end in
        # case it is growing: at most limit + 1 bytes in all.
        chunks, total, want = [], 0, st.st_size + 1
        while True:
            chunk = os.read(fd, min(want, limit + 1 - total))
            if not chunk:
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            want = 1 << 20
            if total > limit:
                raise too_big
    except OSError as exc:
        raise refuse(exc.strerror or exc)
    finally:
        if fd is not None:
            os.close(fd)


def terminal_width():
    """The width of standard output's terminal, else $COLUMNS, else 100
    (a $COLUMNS that is not a width is ignored, as ls does)."""
    try:
        return os.get_terminal_size(1).columns
    except (OSError, ValueError):
        pass
    columns = os.environ.get("COLUMNS", "")
    if columns.isascii() and columns.isdigit() and 1 <= len(columns) <= 5 and int(columns):
        return int(columns)
    return 100


def parse_hottest(text):
    """--hottest: the set of views named, "cpu", "main" or both
    ("main,cpu", in either order)."""
    views = set(part.strip() for part in text.split(","))
    if not text or not views <= {"cpu", "main"}:
        raise UsageError("--hottest: expected cpu, main or main,cpu, not %r" % text)
    return views


def view(args):
    """calipers view: render a saved profile."""
    from calipers import _calipers

    opts = {"html": None, "width": None, "min_percent": 1.0, "max_rows": 300, "color": "auto",
            "hottest": None}
    path = None
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name in ("-h", "--help"):
            print_and_exit(VIEW_HELP)
        if name == "--text" and not eq:
            opts["html"] = None
        elif name in ("--html", "--width", "--min-percent", "--max-rows", "--color",
                      "--hottest"):
            value, i = option_value(args, i, name, eq, value)
            if name == "--hottest":
                opts["hottest"] = parse_hottest(value)
            elif name == "--html":
                if not value:
                    raise UsageError("--html: expected a file name")
                opts["html"] = value
            elif name == "--width":
                opts["width"] = parse_count(value, name, MAX_WIDTH)
            elif name == "--max-rows":
                opts["max_rows"] = parse_count(value, name, MAX_ROWS)
            elif name == "--min-percent":
                opts["min_percent"] = parse_percent(value)
            elif value in ("auto", "always", "never"):
                opts["color"] = value
            else:
                raise UsageError("--color: expected auto, always or never, not %r" % value)
        elif arg.startswith("-") and arg != "-" and path is None:
            raise UsageError("unknown option %s (see calipers --help)" % arg)
        elif path is None:
            path = arg
        else:
            raise UsageError("calipers view takes one profile, not %r too" % arg)
        i += 1
    if path is None:
        raise UsageError("no profile to view (calipers view profile.json)")
    if opts["html"] and opts["hottest"]:
        raise UsageError("--hottest is for the terminal report: the HTML report offers "
                         "the same views as selectors above its list of the hottest lines")
    html = check_outfile(opts["html"], "--html", "the HTML report") if opts["html"] else None
    data = read_profile(path)
    try:
        if html:
            page = _calipers.render_html(data)
        else:
            width = opts["width"]
            if width is None:
                width = terminal_width()
            tty = {"always": True, "never": False}.get(opts["color"])
            if tty is None:
                tty = _common.styled(1)
            hottest = opts["hottest"] or ()
            text = _calipers.render_text(data, width, tty, opts["min_percent"],
                                         opts["max_rows"], None, "cpu" in hottest,
                                         "main" in hottest)
    except ValueError as exc:
        raise InputError("%s: %s" % (path, exc), 1)
    if html:
        try:
            _common.write_file(html, page.encode("utf-8"))
        except OSError as exc:
            raise InputError("cannot write %s: %s" % (html, exc.strerror or exc), 2)
        say(sys.stderr, "calipers: HTML report written to %s\n" % html)
        return
    if sys.stdout is None:  # calipers view p.json >&-
        raise InputError("cannot write the report: standard output is closed", 1)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # calipers view p.json | head
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    except OSError as exc:  # a full disk, a revoked terminal
        raise InputError("cannot write the report: %s" % (exc.strerror or exc), 1)


def export(args):
    """calipers export: a saved profile's stacks in another tool's format."""
    fmt, outfile, path = "pprof", None, None
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = split_option(arg)
        if name in ("-h", "--help"):
            print_and_exit(EXPORT_HELP)
        if name in ("--format", "-o", "--outfile"):
            value, i = option_value(args, i, name, eq, value)
            if name == "--format":
                fmt = parse_format(value, name)
            elif not value:
                raise UsageError("%s: expected a file name" % name)
            else:
                outfile = value
        elif arg.startswith("-") and arg != "-" and path is None:
            raise UsageError("unknown option %s (see calipers export --help)" % arg)
        elif path is None:
            path = arg
        else:
            raise UsageError("calipers export takes one profile, not %r too" % arg)
        i += 1
    if path is None:
        raise UsageError("no profile to export (calipers export profile.json)")
    if outfile is None:
        base = path[:-5] if path.endswith(".json") and len(path) > 5 else path
        outfile = base + _common.EXPORT_FORMATS[fmt]
    outfile = check_outfile(outfile, "--outfile", "the %s export" % fmt, stdout=True)
    if outfile != "-" and os.path.realpath(outfile) == os.path.realpath(path):
        raise UsageError("will not write the %s export over the profile it is made from (%s)"
                         % (fmt, path))
    data = read_profile(path)
    try:
        out = _common.export_data(data, fmt)
    except ValueError as exc:
        raise InputError("%s: %s" % (path, exc), 1)
    if outfile != "-":
        try:
            _common.write_file(outfile, out)
        except OSError as exc:
            raise InputError("cannot write %s: %s" % (outfile, exc.strerror or exc), 2)
        say(sys.stderr, "calipers: %s export written to %s\n" % (fmt, outfile))
        return
    if sys.stdout is None:
        raise InputError("cannot write the export: standard output is closed", 1)
    try:
        sys.stdout.flush()
        view = memoryview(out)
        while view:
            view = view[os.write(1, view):]
    except BrokenPipeError:  # calipers export -o - p.json | head
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    except OSError as exc:
        raise InputError("cannot write the export: %s" % (exc.strerror or exc), 1)


DIFF_CHOICES = {"--by": ("line", "function", "file", "traceback"),
                "--sort": ("time", "alloc", "live", "end"),
                "--color": ("auto", "always", "never")}


def diff(args):
    """calipers diff: compare two profiles or two memory snapshots."""
    from calipers import _calipers

    opts = {"--by": "line", "--sort": "time", "--color": "auto"}
    top, width, html, as_json, paths = 20, None, None, False, []
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name in ("-h", "--help"):
            print_and_exit(DIFF_HELP)
        if name == "--json" and not eq:
            as_json = True
        elif name in ("--by", "--sort", "--color", "--top", "--width", "--html"):
            value, i = option_value(args, i, name, eq, value)
            if name in DIFF_CHOICES:
                if value not in DIFF_CHOICES[name]:
                    raise UsageError("%s: expected %s, not %r" % (
                        name, ", ".join(DIFF_CHOICES[name]), value))
                opts[name] = value
            elif name == "--top":
                top = 0 if value == "0" else parse_count(value, name, MAX_ROWS)
            elif name == "--width":
                width = parse_count(value, name, MAX_WIDTH)
            elif not value:
                raise UsageError("--html: expected a file name")
            else:
                html = value
        elif arg.startswith("-") and arg != "-" and len(paths) < 2:
            raise UsageError("unknown option %s (see calipers help diff)" % arg)
        elif len(paths) < 2:
            paths.append(arg)
        else:
            raise UsageError("calipers diff takes two files, not %r too" % arg)
        i += 1
    if len(paths) < 2:
        raise UsageError("calipers diff needs two files: OLD NEW")
    if html and as_json:
        raise UsageError("--html and --json: choose one")
    if html:
        html = check_outfile(html, "--html", "the HTML report")
    old, new = read_profile(paths[0]), read_profile(paths[1])
    if width is None:
        width = terminal_width()
    tty = {"always": True, "never": False}.get(opts["--color"])
    if tty is None:
        tty = _common.styled(1)
    options = {"by": opts["--by"], "sort": opts["--sort"], "top": top, "width": width,
               "tty": bool(tty) and not as_json, "format": "json" if as_json else "text",
               "old_name": paths[0], "new_name": paths[1], "html": html}
    try:
        text = _calipers.diff(old, new, options)
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc), 2)
    except OSError as exc:
        raise InputError("cannot write %s: %s" % (html, exc.strerror or exc), 2)
    if html:
        say(sys.stderr, "calipers: HTML diff written to %s\n" % html)
        return
    if sys.stdout is None:
        raise InputError("cannot write the diff: standard output is closed", 1)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # calipers diff a b | head
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    except OSError as exc:
        raise InputError("cannot write the diff: %s" % (exc.strerror or exc), 1)


def control_dir(pid, command, children=False):
    """The run directory of the profiled program with that PID (its main
    process, or any of its processes if `children`), found in the environment it was started with, open (a
    descriptor) once checked: that environment is the program's to
    write, so the directory is used only if it is a real directory (not a
    symbolic link) owned by us, or by the program's user when we are
    root, and writable by nobody else.  Returns (descriptor, config)."""
    import errno

    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            environ = f.read().split(b"\0")
    except FileNotFoundError:
        raise InputError("no process %d" % pid, 1)
    except OSError as exc:
        raise InputError("cannot inspect process %d: %s" % (pid, exc.strerror), 1)
    raw = [e[len(b"CALIPERS_CONFIG="):] for e in environ if e.startswith(b"CALIPERS_CONFIG=")]
    if not raw:
        raise InputError("process %d is not running under calipers" % pid, 1)
    config = _common.decode_config(raw[0].decode("utf-8", "replace"))
    try:
        main_pid = int(config.get("main_pid") or 0)
    except ValueError:
        main_pid = 0
    if main_pid != pid and not children:
        raise InputError("process %d is a child process of a calipers run; use its main "
                         "process (calipers %s %d)" % (pid, command, main_pid), 1)
    run_dir = config.get("run_dir") or ""
    if not os.path.isabs(run_dir):
        raise InputError("process %d has no calipers control directory (it is ending, or an "
                         "older calipers started it)" % pid, 1)
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError("process %d has no calipers control directory (it is ending, or an "
                         "older calipers started it)" % pid, 1)
    except OSError as exc:
        raise InputError("will not use the control directory of process %d, %s: %s"
                         % (pid, printable(run_dir), "it is not a directory (a symbolic link?)"
                            if exc.errno in (errno.ELOOP, errno.ENOTDIR)
                            else (exc.strerror or str(exc)).lower()), 1)
    st = os.fstat(fd)
    owners = {os.geteuid()}
    if os.geteuid() == 0:
        owners.add(_common.process_uid(pid))
    if st.st_uid not in owners or st.st_mode & 0o022:
        os.close(fd)
        why = ("it belongs to uid %d, not to %s" % (st.st_uid, " or ".join(
            "uid %d" % u for u in sorted(owners))) if st.st_uid not in owners
            else "others may write to it (mode %o)" % (st.st_mode & 0o777))
        raise InputError("will not use the control directory of process %d, %s: %s"
                         % (pid, printable(run_dir), why), 1)
    return fd, config


def printable(text):
    """`text` (read from another process) safe to print on a terminal."""
    return "".join(c if c.isprintable() else "?" for c in text)


def pid_argument(args, command):
    if args and args[0] in ("-h", "--help"):
        print_and_exit(HELP[command])
    # ASCII digits, and few enough of them for a PID (int() refuses "²").
    if len(args) != 1 or not (args[0].isascii() and args[0].isdigit()) or len(args[0]) > 10:
        raise UsageError("usage: calipers %s PID" % command)
    return int(args[0])


#: How long `calipers dump` waits for the process to write its profile.
DUMP_WAIT = 60


def ask(pid, dir_fd, name, what):
    """Create the request file `name` in the run directory open as dir_fd
    and wait until process pid has served it (removed it)."""
    import time

    try:
        _common.create_private(name, dir_fd)
    except FileExistsError:
        pass  # a request is waiting already: wait for it with the other
    except OSError as exc:
        raise InputError("cannot ask process %d: %s" % (pid, exc.strerror or exc), 1)
    # The sampler thread answers when it next gets the GIL; a busy
    # program on a loaded machine has kept it waiting for seconds
    # (docs/INTERNALS.md, Known gaps).
    deadline = time.time() + DUMP_WAIT
    while True:
        try:
            os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if time.time() > deadline:
            raise InputError("process %d did not write %s within %d s" % (pid, what, DUMP_WAIT),
                             1)
        time.sleep(0.05)


def dump(args):
    """calipers dump PID: ask a running profiled program for its profile,
    with a request file created in its (checked) run directory."""
    pid = pid_argument(args, "dump")
    dir_fd, config = control_dir(pid, "dump")
    try:
        outfile = config.get("outfile") or "calipers-profile.json"
        if outfile == "-":
            raise InputError("process %d writes its profile to standard output, once, at its "
                             "end (-o -): it cannot be written while it runs" % pid, 1)
        ask(pid, dir_fd, os.path.basename(_common.request_path(".")), "its profile")
    finally:
        os.close(dir_fd)
    say(sys.stderr, "calipers: profile of process %d written to %s\n" % (pid, printable(outfile)))


def snapshot(args):
    """calipers snapshot PID: ask a process of a calipers run for a memory
    snapshot, written beside its profile."""
    import glob

    pid = pid_argument(args, "snapshot")
    dir_fd, config = control_dir(pid, "snapshot", children=True)
    try:
        if config.get("memory_interval", "0") in ("", "0"):
            raise InputError("process %d is profiled with --cpu-only: it has no memory "
                             "snapshot to write" % pid, 1)
        pattern = _common.snapshot_path(config.get("outfile"), pid, 0)[:-len("0.snapshot")]
        before = set(glob.glob(glob.escape(pattern) + "*.snapshot"))
        ask(pid, dir_fd, os.path.basename(_common.snapshot_request_path(".", pid)),
            "a memory snapshot")
    finally:
        os.close(dir_fd)
    new = sorted(set(glob.glob(glob.escape(pattern) + "*.snapshot")) - before)
    if not new:
        raise InputError("process %d could not write a memory snapshot (its standard error "
                         "says why)" % pid, 1)
    say(sys.stderr, "calipers: memory snapshot of process %d written to %s\n"
        % (pid, printable(new[-1])))


def heap(args):
    """calipers heap PID: ask a process of a calipers run for a heap dump,
    written beside its profile; calipers heap FILE: print one."""
    import glob

    if args and args[0] in ("-h", "--help"):
        print_and_exit(HEAP_HELP)
    if len(args) == 1 and args[0].isascii() and args[0].isdigit():
        pid = pid_argument(args, "heap")
        dir_fd, config = control_dir(pid, "heap", children=True)
        try:
            pattern = _common.heap_path(config.get("outfile"), pid, 0)[:-len("0.heap")]
            before = set(glob.glob(glob.escape(pattern) + "*.heap"))
            ask(pid, dir_fd, os.path.basename(_common.heap_request_path(".", pid)),
                "a heap dump")
        finally:
            os.close(dir_fd)
        new = sorted(set(glob.glob(glob.escape(pattern) + "*.heap")) - before)
        if not new:
            raise InputError("process %d could not write a heap dump (its standard error "
                             "says why)" % pid, 1)
        say(sys.stderr, "calipers: heap dump of process %d written to %s\n"
            % (pid, printable(new[-1])))
        return
    top, rest = 20, list(args)
    if rest[:1] == ["--top"] or (rest and rest[0].startswith("--top=")):
        value = rest[0][len("--top="):] if "=" in rest[0] else (rest[1] if len(rest) > 1
                                                                 else "")
        rest = rest[1:] if "=" in rest[0] else rest[2:]
        if not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise UsageError("--top: expected a number of types, not %r" % value)
        top = int(value)
    if len(rest) != 1 or rest[0].startswith("-"):
        raise UsageError("usage: calipers heap PID | calipers heap [--top N] FILE")
    from calipers import heap as heapmod

    try:
        h = heapmod.load(rest[0])
    except OSError as exc:
        raise InputError("cannot read %s: %s" % (printable(rest[0]), exc.strerror or exc), 1)
    except ValueError as exc:  # the reader's one line, starting with the path
        raise InputError(printable(str(exc)), 1)
    except MemoryError:
        raise InputError("not enough memory to read %s" % printable(rest[0]), 1)
    text = h.summary(top=top, width=terminal_width())
    say(sys.stdout, "".join(printable(line) + "\n" for line in text.splitlines()))


def switch(args, on):
    """calipers on PID / calipers off PID: every process of the run
    follows the switch file within a tenth of a second."""
    command = "on" if on else "off"
    pid = pid_argument(args, command)
    dir_fd, _ = control_dir(pid, command)
    try:
        _common.set_switch_file(None, on, dir_fd=dir_fd)
    except OSError as exc:
        raise InputError("cannot switch process %d %s: %s" % (pid, command, exc.strerror), 1)
    finally:
        os.close(dir_fd)
    say(sys.stderr, "calipers: profiling of process %d is %s\n" % (pid, command))


def attach(args):
    """calipers attach PID: profile a running Python process (attach.py)."""
    from calipers import _calipers
    from calipers import attach as attachmod

    opts = {"duration": None, "outfile": "calipers-profile.json", "cpu_only": False,
            "interval": 0.01}
    pid = None
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = split_option(arg)
        if name in ("-h", "--help"):
            print_and_exit(ATTACH_HELP)
        if name in ("--duration", "-o", "--outfile", "--interval"):
            value, i = option_value(args, i, name, eq, value)
            if name == "--interval":
                opts["interval"] = parse_interval(value)
            elif name == "--duration":
                try:
                    raw = value.strip().lower()
                    duration = (float(raw[:-2]) / 1000 if raw.endswith("ms")
                                else float(raw[:-1] if raw.endswith("s") else raw))
                except ValueError:
                    raise UsageError("--duration: not a duration: %r (try 2 or 500ms)" % value)
                if not (0 < duration < 1e7):
                    raise UsageError("--duration: %s is out of range" % value)
                opts["duration"] = duration
            elif not value:
                raise UsageError("%s: expected a file name" % name)
            else:
                opts["outfile"] = value
        elif name == "--cpu-only" and not eq:
            opts["cpu_only"] = True
        elif arg.startswith("-"):
            raise UsageError("unknown option %s (see calipers attach --help)" % arg)
        elif pid is None:
            if not (arg.isascii() and arg.isdigit()) or len(arg) > 10 or int(arg) < 1:
                raise UsageError("calipers attach: %r is not a process id" % arg)
            pid = int(arg)
        else:
            raise UsageError("calipers attach takes one process id, not %r too" % arg)
        i += 1
    if pid is None:
        raise UsageError("usage: calipers attach [--duration S] [-o FILE] PID")
    outfile = check_outfile(opts["outfile"], stdout=True)

    def tell(text):
        say(sys.stderr, text)

    try:
        text, _ = attachmod.attach(pid, opts["duration"],
                                   0 if opts["cpu_only"] else DEFAULT_MEMORY_INTERVAL,
                                   opts["interval"], tell)
    except attachmod.AttachError as exc:
        raise InputError(str(exc), 1)
    if outfile == "-":
        written = "standard output"
        say(sys.stdout, text.decode("utf-8", "replace"))
    else:
        try:
            _common.write_file(outfile, text)
        except OSError as exc:
            raise InputError("cannot write %s: %s" % (outfile, exc.strerror or exc), 1)
        written = outfile
    try:
        report = _calipers.render_text(text, terminal_width(), _common.styled(2), 1.0, 300,
                                       written)
    except ValueError as exc:
        raise InputError("process %d wrote a profile calipers cannot read: %s" % (pid, exc), 1)
    say(sys.stderr, report)


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        if args[:1] == ["help"] and len(args) == 2 and args[1] in HELP:
            print_and_exit(HELP[args[1]])  # calipers help view
        if not args or args[0] in ("-h", "--help", "help"):
            say(sys.stdout, USAGE)
            sys.exit(0 if args else 2)
        if args[0] == "--version":
            print_and_exit("calipers %s\n" % __version__)
        if args[0] == "run":
            run(args[1:])
            return
        if args[0] == "view":
            view(args[1:])
            return
        if args[0] == "export":
            export(args[1:])
            return
        if args[0] == "diff":
            diff(args[1:])
            return
        if args[0] == "dump":
            dump(args[1:])
            return
        if args[0] == "snapshot":
            snapshot(args[1:])
            return
        if args[0] == "heap":
            heap(args[1:])
            return
        if args[0] == "attach":
            attach(args[1:])
            return
        if args[0] in ("on", "off"):
            switch(args[1:], args[0] == "on")
            return
        if args[0].startswith("-"):
            raise UsageError("unknown option %s (see calipers --help)" % args[0])
        raise UsageError("unknown command %r (did you mean: calipers run %s?)"
                         % (args[0], " ".join(args)))
    except UsageError as exc:
        fail(str(exc), exc.status)
    except InputError as exc:
        fail(str(exc), exc.status)
    except KeyboardInterrupt:
        sys.exit(130)
