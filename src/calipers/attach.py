"""``calipers attach PID``: profile a Python process calipers did not start.

Both sides live here.  The command line's side (attach()) checks the
target, makes a private exchange directory, and asks the target, through
sys.remote_exec (PEP 768, Python 3.14+) or ptrace (before), to run a small script that
starts calipers.start() inside it; after --duration (or Ctrl-C) a second
script stops it.  The target writes its profile into the exchange
directory; the command line copies it to -o FILE and prints the report.
The target's side (target_start(), target_stop()) runs in the target's
main thread, at its next eval-breaker check, and never raises: every
outcome is a status file the command line reads.

Safety: the exchange directory is created by mkdtemp (0700, random name);
when root attaches to another user's process it is handed to that user
(the target must create files in it), and root then opens nothing there
but regular files, without following links.  Each request is claimed by
unlinking its token file, so a request the target runs after the command
line gave up (a target blocked in a C call or a sleep) does nothing.
"""

import os
import sys
import time

from calipers import _common

#: How long the command line waits for the target to run a request (its
#: main thread must reach the eval breaker: a loaded machine or a long C
#: call delays it).  CALIPERS_ATTACH_WAIT sets it (the tests' blocked target).
START_WAIT = float(os.environ.get("CALIPERS_ATTACH_WAIT") or 15.0)
#: How long the target may take to write its profile once stopping.
WRITE_WAIT = 60.0

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class AttachError(Exception):
    """One line for the user; exit status 1."""


# ---- The target's side -----------------------------------------------------

def _status(directory, name, text):
    """Write the status file `name` in `directory` whole: created
    exclusively (0600) under a temporary name, then renamed, so that the
    command line never reads half of it."""
    part = os.path.join(directory, name + ".part")
    fd = os.open(part, _CREATE, 0o600)
    try:
        os.write(fd, text.encode("utf-8", "replace"))
    finally:
        os.close(fd)
    os.rename(part, os.path.join(directory, name))


def target_start(directory, options):
    """In the target: start calipers (quietly: the program's output stays
    its own) with the profile going to directory/profile.json."""
    try:
        from calipers import _agent

        _agent.start_api(os.path.join(directory, "profile.json"), options["interval"],
                         options["memory_interval"], False, (), (), False, None, quiet=True)
        note = _agent._redirect_note() if options["memory_interval"] else None
        memory = bool(options["memory_interval"]) and bool(_agent._state.get("memory"))
        _status(directory, "started", "ok\n%d\n%s" % (memory, note or ""))
    except BaseException as exc:  # noqa: BLE001 - never a traceback in the target
        _status(directory, "started", "error\n%s" % (exc,))


def target_stop(directory):
    """In the target: stop calipers, write the profile, take our hooks out."""
    try:
        from calipers import _agent

        _agent.stop_api()  # which takes our hooks out too
        _status(directory, "done", "ok\n")
    except BaseException as exc:  # noqa: BLE001
        _status(directory, "done", "error\n%s" % (exc,))


#: The script the target runs: it first claims its request (unlinks the
#: token), so that a request the command line withdrew does nothing; it
#: defines names only in the fresh namespace remote_exec gives it; the path
#: to calipers is on sys.path only for the import.  Every failure becomes a
#: status file, never output in the target.
_SCRIPT = """\
import os
import sys
try:
    os.unlink(os.path.join(%(dir)r, %(token)r))
    claimed = True
except OSError:
    claimed = False
if not claimed:
    # The command line withdrew the request: take nothing in, leave nothing.
    try:
        for name in os.listdir(%(dir)r):
            os.unlink(os.path.join(%(dir)r, name))
        os.rmdir(%(dir)r)
    except OSError:
        pass
else:
    try:
        if (sys.version_info[:2], getattr(sys, "abiflags", "")) != %(abi)r:
            raise ImportError("this process runs Python %%d.%%d%%s, calipers was built for "
                              "%%d.%%d%%s" %% (sys.version_info[:2] + (sys.abiflags,)
                                               + %(abi)r[0] + (%(abi)r[1],)))
        sys.path.insert(0, %(path)r)
        try:
            from calipers import attach as _calipers_attach
        finally:
            try:
                sys.path.remove(%(path)r)
            except ValueError:
                pass
        _calipers_attach.%(call)s
    except BaseException as exc:
        try:
            part = os.path.join(%(dir)r, %(status)r + ".part")
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            os.write(fd, ("error\\n%%s" %% (exc,)).encode("utf-8", "replace"))
            os.close(fd)
            os.rename(part, os.path.join(%(dir)r, %(status)r))
        except BaseException:
            pass
"""


# ---- The command line's side ----------------------------------------------

def _read_stat(pid):
    """(state, start time) of process pid from /proc/PID/stat; None if gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()
    return fields[0].decode("ascii", "replace"), fields[19]


def _python_of(pid):
    """(major, minor, 't' or '') of the Python the process runs, from its
    program's name or a libpython it maps; None if neither says."""
    import re

    names = []
    try:
        names.append(os.path.basename(os.readlink("/proc/%d/exe" % pid)))
    except OSError:
        pass
    try:
        with open("/proc/%d/maps" % pid, "rb") as f:
            for line in f:
                if b"libpython" in line:
                    names.append(os.path.basename(line.split()[-1].decode("utf-8", "replace")))
                    break
    except OSError:
        pass
    for name in names:
        m = re.match(r"(?:lib)?python(\d+)\.(\d+)(t?)(?:d?)(?:\.so.*)?$", name)
        if m:
            return int(m.group(1)), int(m.group(2)), m.group(3)
    return None


def check_target(pid):
    """The process's start time (to tell it from a later process with the
    same id); AttachError with one line if calipers cannot attach to it."""
    st = _read_stat(pid)
    if st is None:
        raise AttachError("no process %d" % pid)
    if st[0] in ("Z", "X"):
        raise AttachError("process %d has ended (a zombie): nothing to attach to" % pid)
    if pid == os.getpid():
        raise AttachError("calipers cannot attach to itself")
    try:
        os.readlink("/proc/%d/exe" % pid)
    except PermissionError:
        raise AttachError("no permission to attach to process %d (%s)" % (
            pid, "ptrace is not permitted here, even to root: a container without "
            "CAP_SYS_PTRACE?" if os.geteuid() == 0 else
            "it belongs to another user: run calipers as that user or as root"))
    except OSError:
        raise AttachError("process %d has no program to read (a kernel thread?)" % pid)
    ours = sys.version_info[:2] + (getattr(sys, "abiflags", ""),)
    theirs = _python_of(pid)
    if theirs is None:
        raise AttachError("process %d is not a Python process (its program is %s)"
                          % (pid, _printable(_program(pid))))
    if theirs != ours:
        raise AttachError("process %d runs Python %d.%d%s and this calipers runs on %d.%d%s: "
                          "attach with that Python's calipers (python%d.%d%s -m calipers "
                          "attach %d)" % ((pid,) + theirs + ours + theirs + (pid,)))
    return st[1]


def _program(pid):
    try:
        return os.readlink("/proc/%d/exe" % pid)
    except OSError:
        return "unknown"


def _why_denied(pid):
    """Why ptrace refused, as far as /proc tells."""
    try:
        with open("/proc/%d/status" % pid) as f:
            tracer = next((int(line.split()[1]) for line in f
                           if line.startswith("TracerPid:")), 0)
    except (OSError, ValueError):
        tracer = 0
    if tracer:
        return "it is being traced by process %d, a debugger or strace?" % tracer
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = int(f.read())
    except (OSError, ValueError):
        scope = 0
    if scope >= 1 and os.geteuid() != 0:
        return ("kernel.yama.ptrace_scope is %d: only root%s may attach; run calipers as "
                "root" % (scope, "" if scope >= 2 else " or the process's parent"))
    return "ptrace: run calipers as its user or as root"


def _printable(text):
    return "".join(c if c.isprintable() else "?" for c in text)


class _Exchange:
    """The private directory the command line and the target share."""

    def __init__(self, pid):
        import tempfile

        self.path = tempfile.mkdtemp(prefix="calipers-attach-")
        self.fd = os.open(self.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.uid = _common.process_uid(pid, "filesystem")
        if os.geteuid() == 0 and self.uid not in (-1, 0):
            # The target (another user) creates its files here: the
            # directory becomes that user's; root opens nothing here but
            # regular files, never following a link.
            os.chown(self.path, self.uid, -1)
        self.abandoned = False
        # Whether a request withdrawn before the target ran it keeps the
        # directory: from 3.14 the target reads the script by its path
        # (sys.remote_exec) and says on its standard error when it cannot;
        # the code queued before 3.14 (_PENDING_CODE) runs nothing when
        # the script is gone, so the directory can go at once.
        self.script_must_stay = hasattr(sys, "remote_exec")

    def create(self, name, text, mode=0o600):
        fd = os.open(name, _CREATE, mode, dir_fd=self.fd)
        try:
            if self.uid not in (-1, os.geteuid()) and os.geteuid() == 0:
                os.fchown(fd, self.uid, -1)
            os.write(fd, text.encode("utf-8"))
        finally:
            os.close(fd)

    def read(self, name, limit=1 << 30):
        """The bytes of regular file `name`; None if absent."""
        import stat

        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise AttachError("cannot read %s in %s: %s" % (name, self.path, exc.strerror))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid not in (os.geteuid(), self.uid):
                raise AttachError("%s in %s is not a regular file of ours" % (name, self.path))
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def exists(self, name):
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            return True
        except OSError:
            return False

    def withdraw(self, token):
        """Take back a request the target has not run; False if it has."""
        try:
            os.unlink(token, dir_fd=self.fd)
            return True
        except FileNotFoundError:
            return False

    def remove(self):
        """Remove the directory, unless the target may still read it: a
        start request not yet run is withdrawn (from 3.14 the script, run
        later, removes the directory); a stop request not yet run stays, so
        that the target stops when it can (a second Ctrl-C)."""
        if self.exists("start.token") and self.withdraw("start.token"):
            self.abandoned |= self.script_must_stay
        if self.exists("stop.token"):
            self.abandoned = True
        if self.abandoned:
            os.close(self.fd)
            return
        for name in os.listdir(self.path):
            try:
                os.unlink(name, dir_fd=self.fd)
            except OSError:
                pass
        os.close(self.fd)
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def _alive(pid, start):
    st = _read_stat(pid)
    return st is not None and st[1] == start and st[0] not in ("Z", "X")


def _request(ex, pid, start, kind, call):
    """Write the script for request `kind` and ask the target to run it."""
    import calipers

    script = _SCRIPT % {
        "abi": (sys.version_info[:2], getattr(sys, "abiflags", "")),
        "path": os.path.dirname(os.path.dirname(os.path.abspath(calipers.__file__))),
        "call": call, "dir": ex.path, "token": kind + ".token",
        "status": "started" if kind == "start" else "done",
    }
    ex.create(kind + ".token", "")
    ex.create(kind + ".py", script, 0o600)
    path = os.path.join(ex.path, kind + ".py")
    if not hasattr(sys, "remote_exec"):
        _inject(pid, start, path)
        return
    try:
        sys.remote_exec(pid, path)
    except PermissionError:
        # Refused before anything was written into the target.
        ex.withdraw(kind + ".token")
        raise AttachError("no permission to attach to process %d (%s)" % (pid, _why_denied(pid)))
    except (OSError, RuntimeError) as exc:
        if not _alive(pid, start):
            raise AttachError("process %d ended before calipers could attach" % pid)
        raise AttachError("cannot attach to process %d: %s" % (pid, _printable(str(exc))))


#: How long the target's main thread may take to stop and make the two
#: calls that queue the request.
INJECT_WAIT = 30

#: What the target runs as a pending call (below): the script, in a fresh
#: namespace, every exception caught (a pending call that fails would raise
#: SystemError in the program), binding no name in __main__.
_PENDING_CODE = "try:\n exec(open(%r).read(), {})\nexcept BaseException:\n pass\n"


def _inject(pid, start, path):
    """Before Python 3.14: have the target run the script at `path` the way
    sys.remote_exec would.  The engine (inject.c) stops the target's main
    thread with ptrace, maps a page in it, writes the code there and queues
    PyRun_SimpleString of it as a pending call (Py_AddPendingCall), then
    puts the thread back as it was.  The main thread runs it at its next
    eval-breaker check, holding the GIL, as for remote_exec.  The page (one
    per request) stays mapped."""
    from calipers import _calipers

    code = _PENDING_CODE % path
    if len(code.encode("utf-8")) >= 4096:
        raise AttachError("the exchange directory's path is too long to attach")
    status, why = _calipers.inject_pending_code(pid, code, INJECT_WAIT)
    if status == 0:
        return
    if status == 2 or not _alive(pid, start):
        raise AttachError("process %d ended before calipers could attach" % pid)
    if status == 3:
        raise AttachError("no permission to attach to process %d (%s)" % (pid, _why_denied(pid)))
    raise AttachError("could not queue calipers' request in process %d: %s"
                      % (pid, _printable(why)))


def _wait_for(ex, pid, start, name, token, wait, withdraw=True):
    """The status file `name`'s lines once the target has written it.
    None if the target ended first.  AttachError if it did not run the
    request within `wait` seconds: a start request is withdrawn (the
    target, running it later, does nothing); a stop request is left for
    the target to run when it can, and the directory with it."""
    deadline = time.monotonic() + wait
    while True:
        text = ex.read(name)
        if text is not None:
            return text.decode("utf-8", "replace").split("\n")
        if not _alive(pid, start):
            return None
        if time.monotonic() > deadline and ex.exists(token) and not withdraw:
            ex.abandoned = True
            raise AttachError(
                "process %d did not run calipers' stop within %.0f s: its main thread runs "
                "no Python code (blocked in a C call, a sleep or a lock?); it stops and writes "
                "its profile to %s/profile.json when it next does" % (pid, wait, ex.path))
        if time.monotonic() > deadline and ex.exists(token) and ex.withdraw(token):
            # From 3.14 the target still holds the script's path: the
            # directory stays for it to read, and the script, finding no
            # token, removes it.
            ex.abandoned = ex.script_must_stay
            raise AttachError(
                "process %d did not run calipers' request within %.0f s: its main thread "
                "runs no Python code (blocked in a C call, a sleep or a lock?); it is left "
                "unchanged" % (pid, wait))
        if time.monotonic() > deadline + WRITE_WAIT:
            ex.abandoned = True
            raise AttachError("process %d did not finish calipers' request within %.0f s; "
                              "what it writes goes to %s" % (pid, wait + WRITE_WAIT, ex.path))
        time.sleep(0.02)


def attach(pid, duration, memory_interval, interval, say):
    """Attach to process pid, profile it for `duration` seconds (None:
    until Ctrl-C), and return the profile's JSON text and whether it
    ended while attached.  `say` writes a line to standard error."""
    start = check_target(pid)
    ex = _Exchange(pid)
    try:
        options = {"interval": interval, "memory_interval": memory_interval}
        _request(ex, pid, start, "start", "target_start(%r, %r)" % (ex.path, options))
        status = _wait_for(ex, pid, start, "started", "start.token", START_WAIT)
        if status is None:
            raise AttachError("process %d ended before calipers could attach" % pid)
        if status[0] != "ok":
            raise AttachError("calipers could not start in process %d: %s"
                              % (pid, _printable(" ".join(status[1:]).strip())))
        what = "time and memory" if status[1] == "1" else "time only (no memory)"
        note = status[2] if len(status) > 2 else ""
        say("calipers: attached to process %d (Python %d.%d%s): profiling %s%s%s\n"
            % ((pid,) + sys.version_info[:2] + (getattr(sys, "abiflags", ""), what,
               "; " if note else "", _printable(note))))
        ended = False
        try:
            deadline = None if duration is None else time.monotonic() + duration
            while deadline is None or time.monotonic() < deadline:
                if not _alive(pid, start):
                    ended = True
                    break
                time.sleep(0.05)
        except KeyboardInterrupt:
            pass
        if not ended:
            try:
                _request(ex, pid, start, "stop", "target_stop(%r)" % ex.path)
                status = _wait_for(ex, pid, start, "done", "stop.token", START_WAIT, False)
                ended = status is None
                if status is not None and status[0] != "ok":
                    raise AttachError("calipers could not stop in process %d: %s"
                                      % (pid, _printable(" ".join(status[1:]).strip())))
            except AttachError:
                if _alive(pid, start):
                    raise
                ended = True
        if ended:
            # Ended while attached: its exit wrote the profile (atexit), or
            # it was killed and there is none.
            say("calipers: process %d ended while attached\n" % pid)
        text = ex.read("profile.json")
        if text is None:
            raise AttachError("process %d wrote no profile%s" % (
                pid, " (it was killed, or left by os._exit before calipers could write)"
                if ended else ""))
        return text, ended
    finally:
        ex.remove()
