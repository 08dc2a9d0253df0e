"""What the launcher (cli.py) and the agent in every profiled process
(_agent.py) share, so that neither imports the other: the settings the
launcher passes in CALIPERS_CONFIG and their encoding, the environment
that makes a Python process profile itself, where the program's own code
ends (library_dirs), the files of the run directory, and how calipers
creates and replaces files.

The agent imports this before the program's first line, so it imports
nothing the interpreter has not already loaded (os, stat and sys are;
library_dirs imports site, which the interpreter loads at start-up unless
run with -S).
"""

import os
import stat
import sys

# ---- The settings (CALIPERS_CONFIG) -----------------------------------------

RS = "\x1e"  # separates settings
US = "\x1f"  # separates items of a list setting
LIST_KEYS = ("argv", "profile_only", "profile_exclude", "library", "exports")


def encode_config(config):
    """Encode a flat dict of str, number, bool and list-of-str values."""
    parts = []
    for key, value in config.items():
        if key in LIST_KEYS:
            value = US.join(value)
        elif isinstance(value, bool):
            value = "1" if value else ""
        elif value is None:
            continue
        parts.append("%s=%s" % (key, value))
    return RS.join(parts)


def decode_config(text):
    """The dict encode_config encoded: every value a str, but the list
    settings (LIST_KEYS), which are lists of str."""
    config = {}
    for part in text.split(RS):
        key, _, value = part.partition("=")
        if key in LIST_KEYS:
            config[key] = value.split(US) if value else []
        else:
            config[key] = value
    return config


# ---- The environment of a profiled process ----------------------------------

#: CALIPERS_PYTHONPATH / CALIPERS_LD_PRELOAD when the program had none
#: (an environment value cannot say "unset", and an empty PYTHONPATH is not
#: the same as none).
UNSET = "\x1f"
BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")


def profiled_env(env, config_text, shim):
    """`env` (a mapping) with what makes a Python process started with it
    profile itself: the bootstrap first on PYTHONPATH, the allocation shim
    (unless None) in LD_PRELOAD, the configuration, and the program's own
    PYTHONPATH and LD_PRELOAD saved for the bootstrap to show it."""
    env = dict(env)
    old = env.get("PYTHONPATH")
    env["CALIPERS_PYTHONPATH"] = UNSET if old is None else old
    env["PYTHONPATH"] = BOOT_DIR if not old else BOOT_DIR + os.pathsep + old
    if shim:
        preload = env.get("LD_PRELOAD")
        env["CALIPERS_LD_PRELOAD"] = UNSET if preload is None else preload
        env["LD_PRELOAD"] = shim if not preload else shim + " " + preload
    env["CALIPERS_CONFIG"] = config_text
    return env


def library_dirs():
    """Directories whose code is not the program's own: the standard library
    and every site-packages this interpreter knows.  (No sysconfig: importing
    it would cost the launcher more than everything else it does.)"""
    import site

    dirs = {os.path.dirname(os.__file__)}
    for getter in ("getsitepackages", "getusersitepackages"):
        try:
            found = getattr(site, getter)()
        except Exception:
            continue
        dirs.update([found] if isinstance(found, str) else found)
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        dirs.add(os.path.join(prefix, "lib", "python%d.%d" % sys.version_info[:2]))
    real = set()
    for d in dirs:
        real.add(os.path.abspath(d))
        real.add(os.path.realpath(d))
    return sorted(real)


# ---- The run directory --------------------------------------------------------

def request_path(run_dir):
    """The file `calipers dump PID` creates to ask for the profile now."""
    return os.path.join(run_dir, "dump-request") if run_dir else None


def snapshot_request_path(run_dir, pid):
    """The file `calipers snapshot PID` creates to ask process PID of the
    run for a memory snapshot now."""
    return os.path.join(run_dir, "snapshot-request-%d" % pid) if run_dir else None


def snapshot_path(outfile, pid, seq):
    """Where process `pid` writes its memory snapshot number `seq`: beside
    the profile, named after it (calipers-profile.1234.1.snapshot)."""
    if not outfile or outfile == "-":
        outfile = "calipers-profile.json"
    stem = outfile[:-5] if outfile.endswith(".json") else outfile
    return "%s.%d.%d.snapshot" % (stem, pid, seq)


def heap_request_path(run_dir, pid):
    """The file `calipers heap PID` creates to ask process PID of the run
    for a heap dump now."""
    return os.path.join(run_dir, "heap-request-%d" % pid) if run_dir else None


def heap_path(outfile, pid, seq):
    """Where process `pid` writes its heap dump number `seq` (`calipers heap
    PID`, `--heap-at-exit`): beside the profile, named after it
    (calipers-profile.1234.1.heap)."""
    return snapshot_path(outfile, pid, seq)[:-len(".snapshot")] + ".heap"


def switch_path(run_dir):
    """Profiling is off, in every process of the run, while this file
    exists (`--off`, `calipers off PID`, calipers.off())."""
    return os.path.join(run_dir, "off") if run_dir else None


def set_switch_file(run_dir, on, dir_fd=None):
    """Remove (on) or create (off) the run's switch file, in `run_dir` or
    in the directory open as `dir_fd` (`calipers off PID`, which has
    checked it); OSError if the run directory cannot be written.  The
    file is created exclusively and never through a symbolic link: any
    entry by that name means off (the engine looks with lstat)."""
    path = "off" if dir_fd is not None else switch_path(run_dir)
    try:
        if on:
            os.unlink(path, dir_fd=dir_fd)
        else:
            create_private(path, dir_fd)
    except (FileNotFoundError, FileExistsError):
        pass


# ---- Files calipers creates (docs/INTERNALS.md, "Files calipers creates") ----
#
# calipers may run as root in directories others can write to, so every
# file it creates is created exclusively (O_EXCL|O_NOFOLLOW: never through
# a symbolic link, never a file that was there), readable by its owner
# only, and a file it replaces is replaced whole by a rename, only if it is
# a regular file.  The engine's writer (cal_buf_write_file) and
# write_file() below follow the same rule.

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_private(path, dir_fd=None):
    """Create the empty file `path` (relative to dir_fd if given), mode
    0600; FileExistsError if there is anything by that name, a symbolic
    link included."""
    os.close(os.open(path, _CREATE, 0o600, dir_fd=dir_fd))


def target_problem(path, dir_fd=None):
    """Why calipers will not replace `path` (relative to dir_fd if given)
    with a file of its own, as a phrase ("it is a symbolic link"), or None
    when it is a regular file or absent, or cannot be looked at (a name too
    long, a directory on the way missing: the write itself then fails and
    says so)."""
    try:
        mode = os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode):
        return None
    for test, kind in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return "it is " + kind
    return "it is not a regular file"


def new_mode():
    """The mode a file created with 0666 gets under this process's umask,
    read from /proc/self/status (os.umask cannot read it without setting
    it, which races with the program's threads); 0600 if unknown."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o600


def write_file(path, data):
    """Replace the file `path` whole with `data` (bytes), as the engine's
    writer does (cal_buf.h): an exclusively created temporary file with a
    random name in the same directory, mode 0600 until complete, renamed
    over `path`.  OSError if `path` is not a regular file or absent
    (target_problem says why), or on any failure; no temporary file is
    left behind."""
    directory, base = os.path.split(os.path.abspath(path))
    dir_fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    tmp = None
    try:
        problem = target_problem(base, dir_fd)
        if problem:
            raise OSError(0, problem, path)
        for _ in range(100):
            tmp = ".calipers-%s.tmp" % os.urandom(6).hex()
            try:
                fd = os.open(tmp, _CREATE, 0o600, dir_fd=dir_fd)
                break
            except FileExistsError:
                tmp = None
        if tmp is None:
            raise FileExistsError(17, "no free temporary name", directory)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, new_mode())
        finally:
            os.close(fd)
        problem = target_problem(base, dir_fd)  # again: it may have changed meanwhile
        if problem:
            raise OSError(0, problem, path)
        os.rename(tmp, base, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp = None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
        os.close(dir_fd)


# ---- Exports (calipers export, calipers run --export) ----------------------

#: The export formats and the ending of the file name `calipers export`
#: gives each by default (the profile's name, less ".json", and this).
EXPORT_FORMATS = {"pprof": ".pb.gz", "speedscope": ".speedscope.json",
                  "collapsed": ".folded", "collapsed-alloc": ".alloc.folded",
                  "firefox": ".firefox.json"}


def export_data(text, fmt):
    """The profile `text` (str or bytes) exported as `fmt` (bytes): the
    engine writes every format (src/core/cal_export.h); a pprof profile is
    then gzipped, as pprof files are, with no time stamp in the gzip header
    so that the same profile gives the same bytes.  ValueError for a
    corrupt profile or one without a stack table."""
    from calipers import _calipers

    data = _calipers.export(text, fmt)
    if fmt == "pprof":
        import gzip

        data = gzip.compress(data, compresslevel=6, mtime=0)
    return data


def styled(fd):
    """Colour and block glyphs on a terminal, unless NO_COLOR is set."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return os.isatty(fd)
    except OSError:
        return False


#: The uids of /proc/PID/status's "Uid:" line, in its order.
UIDS = ("real", "effective", "saved", "filesystem")


def process_uid(pid, which="effective"):
    """One of process `pid`'s uids (UIDS: the effective one decides what
    it may do, the filesystem one what its files are created as); -1 if it
    cannot be read."""
    try:
        with open("/proc/%d/status" % pid, "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1 + UIDS.index(which)])
    except (OSError, ValueError, IndexError):
        pass
    return -1
