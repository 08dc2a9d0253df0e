"""The in-process side of ``calipers run``: starts the engine from the
configuration the launcher passed, and writes the profile at exit.

Imported by the bootstrap before the program's first line, so it imports
nothing the interpreter has not already loaded (``atexit``, ``time`` and
``_thread`` are built in; ``_common``, what it shares with the launcher,
imports no more) and does all its remaining work at exit.

Every process of the run profiles itself: the main one (the launcher's
PID) and, unless ``--no-follow``, each Python process started from it
(``subprocess``, ``multiprocessing`` with any start method) and each
``os.fork()`` child.  A child writes its profile into the run directory
when it ends; the main process merges the ones present when it ends,
writes the profile and prints the report.  A process ends through one of
three doors, and each writes the profile first: ``atexit`` (a normal end),
``os._exit`` (wrapped), and a terminating signal the program does not
handle (signals.c).
"""

import _thread
import atexit
import os
import stat
import sys
import time

from calipers import __version__, _calipers
from calipers._common import (RS, decode_config, export_data, heap_path,
                              heap_request_path, library_dirs,
                              profiled_env, request_path, set_switch_file, snapshot_path,
                              snapshot_request_path, styled, switch_path,
                              target_problem, write_file)

_state = {}
#: multiprocessing's own servers: they live until the program has ended,
#: so their absence from the profile is not worth a note (the forkserver's
#: children are profiled all the same).
SERVERS = ("from multiprocessing.resource_tracker import main",
           "from multiprocessing.semaphore_tracker import main",
           "from multiprocessing.forkserver import main")
_finish_lock = _thread.allocate_lock()  # one writer, even on a signal


def start(text):
    """Start profiling this process with the launcher's configuration."""
    config = decode_config(text)
    _state.update(config)
    _state["config_text"] = text
    main_pid = int(config.get("main_pid") or 0)
    child = main_pid not in (0, os.getpid())
    if child:
        _state["argv"] = _cmdline()
        _state["ppid"] = os.getppid()
        _state["server"] = any(m in " ".join(_state["argv"]) for m in SERVERS)
    elif config.get("exec_origin"):
        # The main process exec'd this program: the profile's clock goes
        # on from the first program's start.
        _state["argv"] = _cmdline()[1:]
    _begin(_start_engine)
    _install_hooks()
    _arm_periodic()


def _arm_periodic():
    """The sampler thread's periodic work: the main process writes the
    profile every --profile-interval and on `calipers dump`; every process
    with memory profiled writes a memory snapshot every --snapshot-every
    and on `calipers snapshot PID`; every process writes a heap dump on
    `calipers heap PID`."""
    run_dir = _state.get("run_dir")
    main = not _is_child()
    snapshots = _state.get("memory") and run_dir
    _calipers.set_periodic(
        _periodic,
        float(_state.get("profile_interval") or 0) if main else 0.0,
        request_path(run_dir) if main else None,
        float(_state.get("snapshot_every") or 0) if snapshots else 0.0,
        snapshot_request_path(run_dir, os.getpid()) if snapshots else None,
        0.0, heap_request_path(run_dir, os.getpid()) if run_dir else None)


def _open_regular(path):
    """Open `path` for reading if it is a regular file, never through a
    symbolic link, never waiting on a FIFO; OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(0, "not a regular file", path)
    return open(fd, "rb")


def _write_stdout(text):
    """`-o -`: the profile on the process's standard output, after
    everything the program wrote there (its buffered output flushed
    first).  OSError if it cannot be written (closed, a broken pipe)."""
    for stream in (sys.stdout, sys.__stdout__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - the program's stream, in any state
            pass
    view = memoryview(text.encode("utf-8", "surrogateescape"))
    while view:
        try:
            view = view[os.write(1, view):]
        except InterruptedError:
            continue
        except BlockingIOError:  # the program made its standard output non-blocking
            time.sleep(0.001)


def switch(on):
    """calipers.on() / calipers.off(): in every process of a `calipers
    run`, or in this one under calipers.start().  Returns whether this
    process is being profiled."""
    if _state.get("pid") != os.getpid() or _state.get("finished"):
        return False
    if _state.get("run_dir"):
        try:
            set_switch_file(_state["run_dir"], on)
        except OSError:
            pass  # the run directory is gone: this process only
    _calipers.set_paused(not on)
    return True


def start_api(outfile, interval, memory_interval, profile_all, profile_only, profile_exclude,
              report, html, write=True, quiet=False):
    """calipers.start(): profile this process from now on, without
    `calipers run` (see calipers.start for the arguments).  `write=False`
    writes no profile at the end (the pytest plugin's limit markers only
    read the engine's counters while it runs); `quiet` (calipers attach):
    say nothing on the process's standard error."""
    if _state.get("pid") == os.getpid() and not _state.get("finished"):
        raise RuntimeError("calipers is already profiling this process")
    _state.clear()
    _state.update({
        "outfile": os.path.abspath(outfile), "interval": interval,
        "memory_interval": memory_interval, "profile_all": profile_all,
        "profile_only": list(profile_only), "profile_exclude": list(profile_exclude),
        "no_report": not report, "html": os.path.abspath(html) if html else None,
        "library": library_dirs(), "cwd": os.getcwd(), "argv": list(sys.argv),
        "script": os.path.abspath(sys.argv[0]) if sys.argv and os.path.isfile(sys.argv[0]) else None,
        "api": True, "discard": not write, "quiet": quiet,
    })
    _begin(_start_engine)
    if memory_interval:
        note = _redirect_note()
        if note:
            _state.setdefault("notes", []).append(note)
            _say("calipers: %s\n" % note)
    _install_hooks()


def _redirect_note():
    """The one-line note on memory profiled without preload (the shim's
    GOT redirection), or None when there is nothing to say."""
    count, detail = _calipers.memory_redirected()
    if count == -3 or not _state["memory"]:
        # The path ends the note, with nothing glued to it, so that it can
        # be copied from the report (which prints long words whole).
        return ("Memory was not profiled: the allocation shim could not be loaded (%s); "
                "`calipers run` preloads it, or start Python with LD_PRELOAD=%s"
                % (detail or "no shim", _shim_path()))
    if count == -1:
        return ("Native allocations were not profiled: the allocator entries of the loaded "
                "libraries could not be redirected here (Python's allocator was profiled); "
                "`calipers run` preloads the shim instead")
    if detail:
        return ("Native allocations made by these libraries were not profiled (their symbol "
                "tables could not be redirected): %s" % detail)
    return None


def _shim_path():
    # CALIPERS_SHIM: another build of the shim (the sanitizer test tier), as
    # for `calipers run`.
    return os.environ.get("CALIPERS_SHIM") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "libcalipers_shim.so")


def stop_api(merge=()):
    """calipers.stop(): stop, write the profile, return its path.  The
    profiles at the paths in `merge` (other processes', written by
    calipers.stop(): the pytest plugin's xdist workers) are merged into it
    first; one that cannot be read is left out, with a note."""
    if _state.get("pid") != os.getpid() or _state.get("finished"):
        raise RuntimeError("calipers is not profiling this process (call calipers.start() first)")
    _state["merge_files"] = list(merge)
    _finish()
    unwrap_hooks()
    return _state.get("written")


_hooks_installed = [False]
#: The functions _install_hooks replaced, by name, to be put back by
#: unwrap_hooks (calipers attach leaves the process as it found it).
_real_functions = {}


def _install_hooks():
    """Once per process: the three doors a process leaves by (atexit,
    os._exit, exec) and the fork hooks.  Our threads stop around a fork
    (none is copied holding a lock, and Python 3.12+ does not warn that
    the program forks with threads running); the child profiles itself
    afresh when following."""
    if _hooks_installed[0]:
        return
    _hooks_installed[0] = True
    atexit.register(_finish)
    _wrap_os_exit()
    _wrap_exec()
    if not _hooks_installed[1:]:
        # Once per process for good: there is no unregistering these.  They
        # do nothing while no profile runs (the engine's fork hooks check
        # that it runs; _after_fork that the profile is not finished).
        _hooks_installed.append(True)
        os.register_at_fork(before=_calipers.fork_before,
                            after_in_parent=_calipers.fork_after_parent,
                            after_in_child=_after_fork)


def unwrap_hooks():
    """After stop(): take out what _install_hooks put in (the atexit
    handler, the os._exit and os.exec* wrappers), where the program has
    not replaced them since, so that a process calipers attached to is
    left as it was.  The fork hooks stay, doing nothing."""
    if not _hooks_installed[0]:
        return
    _hooks_installed[0] = False
    atexit.unregister(_finish)
    for name, (real, wrapper) in list(_real_functions.items()):
        if getattr(os, name, None) is wrapper:
            setattr(os, name, real)
        del _real_functions[name]


_GPU_MODES = {"off": 0, "auto": 1, "on": 2}


def _call_opcodes():
    """The interpreter's call instructions, specialized forms included, as
    256 flags (one per opcode): the engine counts a tick that the main
    thread answers from inside one of them as native time, and (before
    3.13) a worker's tick that finds its innermost frame in one and the
    signal in a library's code, unless the form is specialized for a
    Python function (flag 2: such a callee runs in a frame of its own, and
    the caller's instruction is only the call's set-up).  The numbers of the specialized forms are where `dis`
    puts them (3.13+: the opcode module's map; 3.11 and 3.12: the unused
    numbers in order)."""
    import opcode

    names = dict(opcode.opmap)
    specialized = getattr(opcode, "_specialized_opmap", None)
    if specialized is not None:
        names.update(specialized)
    else:
        free = [op for op, name in enumerate(opcode.opname) if name.startswith("<")]
        names.update(zip(getattr(opcode, "_specialized_instructions", ()), free))
    flags = bytearray(256)
    python = ("_PY_", "PYFUNC", "BOUND_METHOD_EXACT", "BOUND_METHOD_GENERAL",
              "ALLOC_AND_ENTER_INIT")
    for name, op in names.items():
        if "CALL" in name and 0 <= op < 256:
            flags[op] = 2 if any(p in name for p in python) and "NON_PY" not in name else 1
    return bytes(flags)


def _start_engine():
    interval = float(_state.get("interval") or 0.01)
    alloc_mean = int(_state.get("memory_interval") or 0)
    _state["interval"] = interval
    return _calipers.start(
        interval,
        profile_all=bool(_state.get("profile_all")),
        only=_state.get("profile_only", []),
        exclude=_state.get("profile_exclude", []),
        library=_state.get("library", []),
        self_dir=os.path.dirname(os.path.abspath(__file__)),
        cwd=_state.get("cwd") or os.getcwd(),
        since=max(0.0, time.time() - _state["start_unix"]),
        alloc_mean=alloc_mean,
        copy_mean=4 * alloc_mean,
        threshold=max(1 << 20, 4 * alloc_mean),
        # Only the run's first process reads the GPUs: its readings cover
        # every process of the run.
        gpu=0 if _is_child() else _GPU_MODES.get(_state.get("gpu") or "auto", 1),
        # calipers.start() without preload: load the shim and redirect the
        # libraries' allocator entries to it (`calipers run` preloads it).
        shim=_shim_path() if _state.get("api") and alloc_mean else None,
        calls=_call_opcodes(),
    )


def _begin(start_engine, forked=False):
    """Start the engine and the signal watch; a child leaves a start record
    in the run directory so the main process can tell it is missing.  A
    forked child's engine keeps what its parent's was given (the awaiting
    callback, the switch file, which it reads again at once): each Python
    call here costs a child that leaves at once its copy-on-write faults."""
    _state["pid"] = os.getpid()
    _state["start_unix"] = time.time()
    if _state.get("exec_origin") and not _is_child():
        _state["start_unix"] = float(_state["exec_origin"])
    _state["finished"] = False
    held = _hold_closed_std_fds()
    try:
        _state["memory"] = bool(start_engine())
        if not forked:
            _calipers.set_awaiting(_awaiting)
            _calipers.set_switch(switch_path(_state.get("run_dir")))
        _calipers.watch_signals(_on_signal)
    finally:
        for fd in held:
            os.close(fd)
    problem = _calipers.layout_problem()
    if problem:
        # An interpreter whose frames cannot be read safely: say what is
        # still measured, once, at start (the run's first process only).
        note = ("Time and memory are not credited to lines: %s; the run's totals, threads, "
                "footprint and copies are measured." % problem)
        _state.setdefault("notes", []).append(note)
        if not _is_child():
            _say("calipers: %s\n" % note)
    if _is_child() and not _state.get("server"):
        _mark_started()


#: Ends the name of a start record in PARTS_FILE.
STARTED = ".run"


def _mark_started():
    """Say in the run directory that this child profiles, so that the main
    process can tell it is missing if it never writes its profile: a start
    record, `<start>-<pid>.run` with no text, appended to PARTS_FILE.  Not a
    file of its own: creating and removing a file (or a link) per child
    changes the directory twice, and that was a sixth of what a child that
    leaves at once cost; an append leaves the directory as it is."""
    try:
        _append_part(PART_MARK + os.path.basename(_part_path(STARTED)).encode() + b"\n")
    except OSError:
        pass


def _hold_closed_std_fds():
    """A program started with standard input, output or error closed
    (`calipers run prog.py >&-`) must find it closed, as without calipers:
    while the engine starts, /dev/null holds each closed one's number so
    that none of the engine's own descriptors (the signal pipe) takes it.
    Returns the placeholders, for the caller to close.  With standard
    error closed calipers says nothing (_say): a file the program opens
    later may take its number."""
    held = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        if fd == 2:
            _state["quiet"] = True
        try:
            # The lowest free number: fd itself, those below it being open now.
            placeholder = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            if placeholder != fd:
                os.dup2(placeholder, fd, inheritable=False)
                os.close(placeholder)
        except OSError:
            continue
        held.append(fd)
    return held


def _awaiting(ident):
    """The asyncio tasks waiting in the event loop that thread `ident`
    runs, for the sampler (GIL held) to credit that loop's idle time to
    the lines they await.  For each task not itself waiting on other
    tasks (those are counted where the awaited ones wait): its coroutine
    chain as [(code, line), ...], outermost first.  Asks asyncio for the
    loop's tasks (all_tasks of the loop whose _run_once the thread is in;
    asyncio's registry where that frame cannot be found); anything
    unexpected gives no answer, and the wait stays where the loop waits."""
    tasks_mod = sys.modules.get("asyncio.tasks")
    if tasks_mod is None:
        return []
    try:
        loop = _idle_loop(ident)
        if loop is not None:
            # The loop's own list: from 3.14 on C tasks live in per-thread
            # lists that _scheduled_tasks no longer sees.
            tasks = list(tasks_mod.all_tasks(loop))
        else:
            pool = getattr(tasks_mod, "_scheduled_tasks", None)
            if pool is None:
                pool = getattr(tasks_mod, "_all_tasks", ())
            tasks = list(pool) + list(getattr(tasks_mod, "_eager_tasks", ()))
    except Exception:  # noqa: BLE001 - the set changed size meanwhile
        return []
    chains = []
    if len(tasks) > SAMPLE_TASKS:
        # Drawn at random (with replacement): each line's expected share
        # is still its share of the waiting tasks.
        tasks = [tasks[_rand_below(len(tasks))] for _ in range(SAMPLE_TASKS)]
    for task in tasks:
        try:
            if task.done() or getattr(task.get_loop(), "_thread_id", None) != ident:
                continue
            waiter = getattr(task, "_fut_waiter", None)
            if hasattr(waiter, "get_coro") or hasattr(waiter, "_children"):
                continue  # awaits a task, or a gather() of tasks
            chain = []
            coro = task.get_coro()
            while coro is not None and len(chain) < 256:
                frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
                if frame is None:
                    break
                chain.append((frame.f_code, frame.f_lineno))
                coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
            if chain:
                chains.append(chain)
        except Exception:  # noqa: BLE001 - never into the program
            continue
    return chains


def _idle_loop(ident):
    """The event loop thread `ident` is idle in (the `self` of its
    BaseEventLoop._run_once frame), or None."""
    frame = sys._current_frames().get(ident)
    while frame is not None:
        if frame.f_code.co_name == "_run_once":
            return frame.f_locals.get("self")
        frame = frame.f_back
    return None


#: Tasks looked at per idle sample of an event loop, at most (a bound on
#: the cost: a thousand tasks cost about a millisecond).
SAMPLE_TASKS = 64
_rng = [(time.perf_counter_ns() ^ os.getpid() << 32) | 1]


def _rand_below(n):
    """xorshift64: cheap, and no import of `random` into the program."""
    x = _rng[0]
    x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 7
    x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
    _rng[0] = x
    return x % n


def _is_child():
    return _state["pid"] != int(_state.get("main_pid") or _state["pid"])


def _part_path(suffix):
    """A child's file in the run directory: start time first, so that a
    directory listing is in the order the processes started."""
    return os.path.join(_state.get("run_dir") or "",
                        "%020d-%d%s" % (int(_state["start_unix"] * 1e9), _state["pid"], suffix))


def _cmdline():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            raw = f.read()
        return [a.decode("utf-8", "replace") for a in raw.split(b"\0")[:-1]]
    except OSError:
        return [sys.executable]


def _after_fork():
    """os.register_at_fork(after_in_child=...): profile the child afresh."""
    global _finish_lock
    _finish_lock = _thread.allocate_lock()
    if _state.get("finished") or not _state.get("follow"):
        return
    caller = sys._getframe(1).f_code
    if caller.co_name == "_execute_child" and "subprocess" in caller.co_filename:
        # subprocess with preexec_fn: this child runs that function and
        # execs; the program it execs profiles itself if it is Python.
        _state["finished"] = True
        return
    _state["ppid"] = _state["pid"]
    _state["forked"] = True
    _state["server"] = False
    try:
        _begin(_calipers.restart_in_child, forked=True)
        _state["snapshot_seq"] = 0
        _arm_periodic()
    except Exception:  # noqa: BLE001 - the child runs unprofiled
        _state["finished"] = True


def _wrap_os_exit():
    """os._exit ends the process without atexit: write the profile first."""
    real = os._exit

    def _exit(status):
        _finish("os._exit")
        real(status)

    os._exit = _dressed_as(_exit, real)
    _real_functions["_exit"] = (real, os._exit)


def _dressed_as(wrapper, real):
    """wrapper, with real's name and documentation (what help() and
    tracebacks show the program)."""
    wrapper.__doc__ = real.__doc__
    wrapper.__module__ = real.__module__
    wrapper.__qualname__ = real.__qualname__
    return wrapper


def _wrap_exec():
    """os.execv and os.execve (every os.exec* function ends in one of
    them) replace the program: write this one's profile first.  The
    main process merges what it has and writes the profile; if the new
    program is this Python, it profiles itself as the main process and
    merges this part in at its end, so the report is printed once, then."""
    for name in ("execv", "execve"):
        real = getattr(os, name)

        def exec_(path, args, *env, _real=real):
            if (_state.get("pid") == os.getpid() and not _state.get("finished")
                    and _can_exec(path)):
                follow = bool(_state.get("follow"))
                if follow:
                    # The program the main process execs goes on with its clock.
                    config = _state["config_text"]
                    if not _is_child():
                        config += RS + "exec_origin=%r" % _state["start_unix"]
                        if not env:
                            os.putenv("CALIPERS_CONFIG", config)
                    if env and "CALIPERS_CONFIG" not in env[0]:
                        env = (profiled_env(env[0], config, _state.get("shim")),)
                _state["successor"] = follow and _runs_this_python(path)
                _finish("exec")
            return _real(path, args, *env)

        setattr(os, name, _dressed_as(exec_, real))
        _real_functions[name] = (real, getattr(os, name))


def _can_exec(path):
    """Would exec of path get as far as replacing the process?  (execvp
    tries each directory of PATH in turn.)"""
    if isinstance(path, int):
        return True
    try:
        return os.access(path, os.X_OK) and not os.path.isdir(path)
    except (TypeError, ValueError):
        return False


def _runs_this_python(path):
    """Is path this Python interpreter, or a script that it runs (#!)?
    Then the new program profiles itself."""
    def same(p):
        return os.path.realpath(p) == os.path.realpath(sys.executable)

    if isinstance(path, int):
        return False  # an open file: what it is cannot be told cheaply
    try:
        if same(path):
            return True
        with open(path, "rb") as f:
            first = f.readline(256)
    except (OSError, TypeError, ValueError):
        return False
    words = first[2:].split() if first.startswith(b"#!") else []
    if len(words) > 1 and os.path.basename(words[0]) == b"env":
        words = words[1:]
    if not words:
        return False
    interp = os.fsdecode(words[0])
    if os.path.isabs(interp):
        return same(interp)
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        found = os.path.join(d, interp)
        if os.access(found, os.X_OK):
            return same(found)  # the one env runs
    return False


#: Frames kept of each traceback in the snapshots calipers run writes.
SNAPSHOT_FRAMES = 64


def _write_snapshot(reason):
    """Write a memory snapshot of this process beside the profile (the
    live sampled allocations with their tracebacks; calipers.memory reads
    it).  Returns its path."""
    import json

    seq = _state.get("snapshot_seq", 0) + 1
    _state["snapshot_seq"] = seq
    path = snapshot_path(_state.get("outfile"), os.getpid(), seq)
    current, peak = _calipers.memory_traced()
    info = _calipers.memory_info()
    meta = {"traceback_limit": SNAPSHOT_FRAMES, "pid": os.getpid(), "time": time.time(),
            "reason": reason, "argv": list(_state.get("argv", [])),
            "alloc_mean": info["alloc_mean"], "traced": [current, peak]}
    _calipers.snapshot_write(path, _calipers.memory_traces(SNAPSHOT_FRAMES, False),
                             json.dumps(meta, sort_keys=True))
    return path


def _periodic(reason):
    """Called by the sampler thread (GIL held) every --profile-interval
    seconds, or when `calipers dump` asks: write the profile so far; or
    every --snapshot-every seconds, or when `calipers snapshot` asks: write
    a memory snapshot.  The
    file is replaced whole (a temporary file renamed over it), so a reader
    never sees half of one.  Skipped while the final profile is being
    written."""
    if reason.startswith("snapshot"):
        _periodic_snapshot(reason)
        return
    if reason.startswith("heap"):
        _periodic_heap()
        return
    if not _finish_lock.acquire(False):
        return
    try:
        if _state.get("finished") or _is_child():
            return
        if _state.get("outfile") == "-":
            return  # standard output gets the profile once, at the end
        _calipers.snapshot()
        meta = _meta()
        meta["notes"] = list(meta["notes"]) + [
            "Written while the program ran (%s); it is rewritten at the end%s." % (
                "every %g s" % float(_state["profile_interval"]) if reason == "interval"
                else "on request", _children_note())]
        text = _calipers.write_json(_state.get("outfile") or "calipers-profile.json", meta)
        _, failed = _write_exports(text)
        if failed and not _state.get("periodic_export_failed"):
            _state["periodic_export_failed"] = True
            _say("calipers: while running: %s\n" % failed[0])
    except BaseException as exc:  # noqa: BLE001 - never into the program
        if not _state.get("periodic_failed"):
            _state["periodic_failed"] = True
            _say("calipers: could not write the profile while running: %s\n" % (exc,))
    finally:
        _finish_lock.release()
        if reason == "request":
            try:
                os.unlink(request_path(_state.get("run_dir")))
            except OSError:
                pass


def _periodic_snapshot(reason):
    try:
        if not _state.get("finished"):
            _write_snapshot("on request" if reason == "snapshot-request" else "interval")
    except BaseException as exc:  # noqa: BLE001 - never into the program
        if not _state.get("snapshot_failed"):
            _state["snapshot_failed"] = True
            _say("calipers: could not write a memory snapshot: %s\n" % (exc,))
    finally:
        if reason == "snapshot-request":
            try:
                os.unlink(snapshot_request_path(_state.get("run_dir"), os.getpid()))
            except OSError:
                pass


def _write_heap(reason):
    """Scan this process's heap (calipers.heap) and write it beside the
    profile as a heap dump.  Returns (the Heap, its path)."""
    from calipers import heap

    seq = _state.get("heap_seq", 0) + 1
    _state["heap_seq"] = seq
    path = heap_path(_state.get("outfile"), os.getpid(), seq)
    h = heap.scan()
    h.save(path, reason=reason, argv=list(_state.get("argv", [])))
    return h, path


def _periodic_heap():
    try:
        if not _state.get("finished"):
            _write_heap("on request")
    except BaseException as exc:  # noqa: BLE001 - never into the program
        _say("calipers: could not write a heap dump: %s\n" % (exc,))
    finally:
        try:
            os.unlink(heap_request_path(_state.get("run_dir"), os.getpid()))
        except OSError:
            pass


def _heap_at_exit():
    """--heap-at-exit: the main process's heap at its end, written beside the
    profile; its summary goes into the terminal report.  Profiling is
    switched off for the scan, so that its time and allocations are not
    the program's (and the run's switch file is no longer followed: it
    would switch it on again, and this process is ending)."""
    _calipers.set_switch(None)
    _calipers.set_paused(True)
    try:
        h, path = _write_heap("at exit")
        _state["heap_report"] = "%s\ncalipers: heap dump written to %s\n" % (
            h.summary(width=_terminal_width()), path)
        # The same, as data, for the profile's "heap" (the HTML report's heap
        # section and its treemap: more types and objects than the terminal's).
        import json

        data = h.summary_data(top=30, largest=10)
        data.update(dump=path, reason="at exit")
        _state["heap_json"] = json.dumps(data, sort_keys=True, allow_nan=False)
    except BaseException as exc:  # noqa: BLE001 - never a calipers traceback
        why = "calipers: could not write the heap at exit: %s\n" % (exc,)
        _state["heap_report"] = why
        if _state.get("no_report"):
            _say(why)


def _children_note():
    try:
        names = os.listdir(_state.get("run_dir") or "")
    except OSError:
        return ""
    if PARTS_FILE in names:
        return ", when the child processes are merged in"
    return ""


def _on_signal(signum):
    """Called by signals.c (helper thread, GIL held) before the process
    ends by signum."""
    _finish("signal", signum)


def _meta():
    return {
        "calipers_version": __version__,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "python_executable": sys.executable,
        # The free-threaded build (PEP 703) says so in its ABI flags.
        "python_build": "free-threaded" if "t" in getattr(sys, "abiflags", "") else "default",
        "cwd": _state.get("cwd", ""),
        "script": _state.get("script") or None,
        "module": _state.get("module") or None,
        "argv": list(_state.get("argv", [])),
        "pid": _state["pid"],
        "ppid": int(_state.get("ppid") or os.getppid()),
        "forked": bool(_state.get("forked")),
        "end": _state.get("end"),
        "signal": _state.get("signal") or 0,
        "heap": _state.get("heap_json"),
        "notes": _state.get("notes", []),
        "start_unix": float(_state.get("start_unix") or 0),
        "interval": _state["interval"],
        "profile_all": bool(_state.get("profile_all")),
        "profile_only": _state.get("profile_only", []),
        "profile_exclude": _state.get("profile_exclude", []),
        "cpu_only": not _state.get("memory"),
        "lines_off": _calipers.layout_problem() is not None,
    }


def _say(text):
    """Write to the real standard error, whatever the program did to
    sys.stderr; nothing if it was closed when profiling started."""
    if _state.get("quiet"):
        return
    data = text.encode("utf-8", "replace")
    while data:
        try:
            n = os.write(2, data)
        except InterruptedError:
            continue
        except OSError:
            return
        data = data[n:]


def _terminal_width():
    try:
        return os.get_terminal_size(2).columns
    except OSError:
        return int(os.environ.get("COLUMNS") or 100)


def _finish(end="exit", signum=0):
    """Stop the engine, write the profile; in the main process merge the
    children's and print the report.

    atexit (registered first, so it runs after the program's own atexit
    handlers), os._exit and signals.c call it; the first one writes, the
    others wait for it and return.  Never raises: a failure here is one
    line on standard error.
    """
    if os.getpid() != _state.get("pid"):
        return  # a forked child that is not profiled: the parent owns the profile
    with _finish_lock:
        if _state.get("finished"):
            return
        _state["finished"] = True
        _state["end"] = end
        _state["signal"] = signum
        # A process that ends without finalising the interpreter need not
        # wait for the profiler's threads to end (a forked child that
        # leaves at once would wait for them to have started).
        leaving = end in ("os._exit", "exec", "signal")
        try:
            if _state.get("heap_at_exit") and end != "exec" and not _is_child():
                _heap_at_exit()
            # The signal watch stays on while writing: a SIGTERM now (Pool
            # terminates its workers while they exit) waits for the write,
            # then ends the process as it would have.
            _calipers.stop(leaving)
            threading = sys.modules.get("threading")
            if threading is not None:
                names = {t.ident: t.name for t in threading.enumerate() if t.ident is not None}
                _calipers.set_thread_names(names)
            if _is_child():
                _write_part()
            elif end == "exec":
                # The program that follows merges this part in (and the
                # children's) if it profiles itself; the profile written
                # now stands if it does not.
                if _state.get("successor") and _state.get("run_dir"):
                    _write_part()
                if _state.get("run_dir"):
                    _merge_children(consume=not _state.get("successor"))
                _write_main(report=not _state.get("successor"),
                            stdout=not _state.get("successor"))
            else:
                if _state.get("run_dir"):
                    _merge_children()
                if _state.get("merge_files"):
                    _merge_files(_state["merge_files"])
                if not _state.get("discard"):
                    _write_main()
        except BaseException as exc:  # noqa: BLE001 - never a calipers traceback
            if not _is_child():
                _say("calipers: internal error while writing the profile: %s: %s\n"
                     % (type(exc).__name__, exc))
        finally:
            _calipers.unwatch_signals(leaving)


#: In the run directory: the one file every process's part is appended to.
PARTS_FILE = "parts"
#: Begins each part in PARTS_FILE, followed by the part's name (its
#: `<start>-<pid>`), a newline and the profile's JSON text, which never
#: holds this byte (JSON escapes every control character).
PART_MARK = b"\x1e"


def _write_part():
    """This process's profile, for the main process to merge: appended to
    the run directory's PARTS_FILE with one write() (O_APPEND: the parts
    of processes ending at once never mix).  One file for all, rather than
    one created per child: creating a file takes an inode, and that was
    the costliest thing a child that leaves at once did (a tenth of its
    time; ext4 without a journal scans past every inode freed in the last
    minutes).  A part cut short (the disk full, the process killed while
    writing) is read as a corrupt one and left out, and the others stay
    whole."""
    try:
        name = os.path.basename(_part_path(""))
        meta = _meta()
        meta["part"] = True  # no source text: the main process reads the files itself
        text = _calipers.json(meta)
        _append_part(PART_MARK + name.encode() + b"\n" + text.encode("utf-8", "surrogateescape"))
    except OSError:
        pass  # the run directory is gone: the main process ended first


def _append_part(data):
    """Append data to PARTS_FILE in one write(), creating the file (0600,
    exclusively) if this is the first part.  OSError if it cannot be
    opened, is not a regular file of this user's, or the write fails."""
    path = os.path.join(_state.get("run_dir") or "", PARTS_FILE)
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it meanwhile
            fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError(0, "not a regular file of ours", path)
        os.write(fd, data)
    finally:
        os.close(fd)


def _read_parts(run_dir):
    """The parts in run_dir's PARTS_FILE, as (name, text) in the order of
    their names (the order the processes started: the merge is the same
    whatever order they ended in); text is None for a part cut short.  The
    file is mapped, and each text copied out only when its turn comes."""
    import mmap

    try:
        with _open_regular(os.path.join(run_dir, PARTS_FILE)) as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # none, or empty
        return
    with data:
        spans = []
        at = data.find(PART_MARK)
        while at >= 0:
            end = data.find(PART_MARK, at + 1)
            newline = data.find(b"\n", at, len(data) if end < 0 else end)
            head = newline if newline >= 0 else (len(data) if end < 0 else end)
            name = data[at + 1:head].decode("utf-8", "replace")
            spans.append((name, newline + 1 if newline >= 0 else -1,
                          len(data) if end < 0 else end))
            at = end
        spans.sort(key=lambda span: span[0])
        for name, start, end in spans:
            yield name, (data[start:end] if start >= 0 else None)


def _pid_of(name):
    """The pid in a part's name, `<start>-<pid>`; None if it has none (a
    parts file that something else wrote to)."""
    pid = name.rpartition("-")[2]
    return int(pid) if pid.isdigit() and int(pid) > 0 else None


def _alive(name):
    """Whether the process that wrote the part `name` is still running."""
    pid = _pid_of(name)
    try:
        return pid is not None and os.kill(pid, 0) is None
    except OSError:
        return False


def _merge_children(consume=True):
    """Merge the children's profiles in the run directory; unless told
    not to consume them (an exec'd program merges them again), remove
    them and the directory."""
    run_dir = _state["run_dir"]
    try:
        names = sorted(os.listdir(run_dir))
    except OSError:
        return
    # Before an exec, the part just written is left out.
    own = None if consume else os.path.basename(_part_path(""))
    corrupt, running, lost = 0, [], []
    started, done = [], set()
    for name, text in _read_parts(run_dir):
        if name == own:
            continue
        if name.endswith(STARTED):
            started.append(name[:-len(STARTED)])
            continue
        try:
            if text is None:
                raise ValueError("cut short")
            _calipers.merge(text, _state["start_unix"])
        except ValueError:
            if _alive(name):  # still being written
                running.append(_pid_of(name))
            else:
                corrupt += 1
        done.add(name)
    for name in started:
        if name in done:
            continue
        if _pid_of(name) is None:
            corrupt += 1
        else:
            (running if _alive(name) else lost).append(_pid_of(name))
    if consume:
        for name in names:
            try:
                os.unlink(os.path.join(run_dir, name))
            except OSError:
                pass
        try:
            os.rmdir(run_dir)
        except OSError:
            pass
    notes = _state.setdefault("notes", [])
    if running:
        notes.append("%d child process%s (pid %s) %s still running when the program ended "
                     "and %s not in the profile."
                     % (len(running), "" if len(running) == 1 else "es",
                        ", ".join(map(str, running[:5])),
                        "was" if len(running) == 1 else "were",
                        "is" if len(running) == 1 else "are"))
    if lost:
        notes.append("%d child process%s (pid %s) ended without writing a profile "
                     "(killed with SIGKILL, or crashed); %s samples are missing."
                     % (len(lost), "" if len(lost) == 1 else "es",
                        ", ".join(map(str, lost[:5])),
                        "its" if len(lost) == 1 else "their"))
    if corrupt:
        notes.append("%d child profile%s could not be read and %s left out."
                     % (corrupt, "" if corrupt == 1 else "s",
                        "was" if corrupt == 1 else "were"))


def _merge_files(paths):
    """Merge the profiles at `paths` (stop_api's `merge`); those that
    cannot be read are counted in a note."""
    missing = []
    for path in paths:
        try:
            with _open_regular(path) as f:
                _calipers.merge(f.read(), _state["start_unix"])
        except (OSError, ValueError):
            missing.append(os.path.basename(path))
    if missing:
        _state.setdefault("notes", []).append(
            "%d profile%s to merge could not be read and %s left out: %s"
            % (len(missing), "" if len(missing) == 1 else "s",
               "was" if len(missing) == 1 else "were", ", ".join(missing[:5])))


def _write_main(report=True, stdout=True):
    """Write the profile (to `outfile`; with `-o -` to standard output,
    unless `stdout` is false: a Python program exec'd after this one
    writes it there at its end), the HTML report, and print the report.
    A profile that cannot be written where asked goes to a private
    directory (fallback_path) rather than be lost."""
    meta = _meta()
    outfile = _state.get("outfile") or "calipers-profile.json"
    written = text = None
    try:
        if outfile == "-":
            text = _calipers.json(meta)
            if stdout:
                _write_stdout(text)
                written = "standard output"
        else:
            text = _calipers.write_json(outfile, meta)
            written = outfile
    except OSError as exc:
        why = (target_problem(outfile) if outfile != "-" else None) or exc.strerror or exc
        where = "standard output" if outfile == "-" else outfile
        try:
            fallback = fallback_path()
            text = _calipers.write_json(fallback, meta)
            os.chmod(fallback, 0o600)
            written = fallback
            _say("calipers: could not write the profile to %s (%s); it is in %s\n"
                 % (where, why, fallback))
        except OSError as exc2:
            _say("calipers: could not write the profile to %s (%s), nor to a private "
                 "directory: %s\n" % (where, why, exc2))
    _state["written"] = written
    if text is None:
        text = _calipers.json(meta)
    html = _state.get("html")
    if html:
        try:
            write_file(html, _calipers.render_html(text).encode("utf-8"))
        except OSError as exc:
            _say("calipers: could not write %s: %s\n" % (html, exc.strerror or exc))
            html = None
    exported, failed = _write_exports(text)
    for why in failed:
        _say("calipers: %s\n" % why)
    if report and not _state.get("no_report"):
        report = _calipers.render_text(text, _terminal_width(), styled(2),
                                       float(_state.get("min_percent", 1.0)), 300, written)
        report += _state.get("heap_report", "")
        if html:
            report += "calipers: HTML report written to %s\n" % html
        for fmt, path in exported:
            report += "calipers: %s export written to %s\n" % (fmt, path)
        _say(report)


def _write_exports(text):
    """Write each --export FORMAT:FILE of the profile `text` (replaced
    whole, like the profile).  Returns ([(format, file) written], [why
    each of the others could not be, one line each])."""
    exported, failed = [], []
    for item in _state.get("exports") or []:
        fmt, _, path = item.partition(":")
        try:
            write_file(path, export_data(text, fmt))
            exported.append((fmt, path))
        except (OSError, ValueError) as exc:
            failed.append("could not write the %s export to %s: %s"
                          % (fmt, path, getattr(exc, "strerror", None) or exc))
    return exported, failed


def fallback_path():
    """Where a profile goes when it cannot be written where asked: a new
    directory of the user's own (mode 0700, created exclusively with a
    random name by mkdtemp) in the temporary directory, never a name
    someone else could have created first."""
    import tempfile

    directory = tempfile.mkdtemp(prefix="calipers-profile-")
    return os.path.join(directory, "calipers-profile-%d.json" % os.getpid())
