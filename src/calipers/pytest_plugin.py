"""calipers.pytest_plugin: calipers in pytest (registered as the ``calipers``
plugin by the package's ``pytest11`` entry point).

``pytest --calipers`` profiles the tests (CPU and memory, in-process, as
:func:`calipers.start` does) into one profile, ``calipers-profile.json``
unless ``--calipers-output`` says otherwise, and prints a table of the
tests (time, bytes allocated, peak) in the terminal summary.  With
pytest-xdist each worker profiles itself and the controller merges the
workers' profiles into the one file.

Two markers put limits on a test's memory; they work with or without
``--calipers`` (a marker is a request: the memory engine is started for
the run when a collected test carries one)::

    @pytest.mark.limit_memory("24 MB")   # the test's peak, over its start
    @pytest.mark.limit_leaks("1 MiB")    # allocated by the test, alive at its end

A test over a limit fails with the lines that allocated the most in it.
What is measured, and how exactly, is in docs/INTERNALS.md ("The pytest
plugin").

Without ``--calipers`` and without a limit marker among the collected
tests the plugin does nothing: it registers its options and markers, and
no engine is started, no hook measures anything.
"""

import gc
import math
import os
import re
import shutil
import tempfile
import time

import pytest

#: The mean bytes between allocation samples when no leak limit asks for
#: finer (calipers.start's default).
DEFAULT_MEMORY_INTERVAL = 256 << 10

#: A leak limit L samples at least every L / LEAK_RESOLUTION bytes: the
#: estimate of a test's leaked bytes near its limit then has a relative
#: standard error of at most about sqrt(1 / LEAK_RESOLUTION) = 6%.
LEAK_RESOLUTION = 256

#: Lines listed in a failure message.
TOP_LINES = 5

_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*([A-Za-z]*)\s*\Z")


def parse_size(value):
    """Bytes from a size: an int (bytes) or a string such as "24 MB",
    "1.5 MiB", "512KB" or "100" (bytes).  Units, in any case: B, KB, MB,
    GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (powers of 1024).
    Raises ValueError, saying what is accepted, for anything else
    (negative, a fraction of a byte left over is rounded down)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError("a size is a string such as \"24 MB\" or a number of bytes, "
                         "not %r" % (value,))
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative: %r" % (value,))
        return value
    match = _SIZE.match(value)
    unit = match and (match.group(2).lower() or "b")
    if not match or unit not in _UNITS:
        raise ValueError("%r is not a size: write a number and a unit, e.g. \"24 MB\", "
                         "\"1.5 MiB\" or \"512KB\" (units B, KB, MB, GB, TB, "
                         "KiB, MiB, GiB, TiB)" % (value,))
    return int(float(match.group(1)) * _UNITS[unit])


def format_size(size):
    """`size` bytes for a person: "512 B", "1.5 MiB"."""
    size = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return ("%.0f %s" if unit == "B" else "%.1f %s") % (size, unit)
        size /= 1024
    raise AssertionError("unreachable")


def pytest_addoption(parser):
    group = parser.getgroup("calipers", "calipers profiler")
    group.addoption("--calipers", action="store_true", default=False,
                    help="profile the tests (CPU and memory) with calipers and "
                         "summarise each test's time, allocations and peak")
    group.addoption("--calipers-output", metavar="PATH", default="calipers-profile.json",
                    help="where --calipers writes the profile (default: "
                         "calipers-profile.json)")
    group.addoption("--calipers-memory-interval", metavar="SIZE", default=None,
                    help="mean bytes between allocation samples, e.g. \"64 KiB\" (default "
                         "256 KiB, finer when a limit_leaks marker asks; 1: every "
                         "allocation, exact)")
    group.addoption("--calipers-top", metavar="N", type=int, default=10,
                    help="tests listed in the summary, the slowest first (default 10; "
                         "0: all)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "limit_memory(size): fail the test if its memory peak (over its "
                   "start) is above `size`, e.g. \"24 MB\" (calipers)")
    config.addinivalue_line(
        "markers", "limit_leaks(size): fail the test if the memory it allocated and "
                   "still holds at its end is above `size`, e.g. \"1 MiB\" (calipers)")
    config.pluginmanager.register(_Calipers(config), "calipers-session")


def _limit_text(item, name):
    """The marker as written: 'limit_memory("24 MB")'."""
    return "%s(%r)" % (name, item.get_closest_marker(name).args[0])


def _limits(item):
    """(limit_memory, limit_leaks) of `item` in bytes, None where absent.
    Raises ValueError on a malformed marker."""
    found = []
    for name in ("limit_memory", "limit_leaks"):
        mark = item.get_closest_marker(name)
        if mark is None:
            found.append(None)
            continue
        if len(mark.args) != 1 or mark.kwargs:
            raise ValueError("@pytest.mark.%s takes one size, e.g. %s(\"24 MB\")"
                             % (name, name))
        try:
            found.append(parse_size(mark.args[0]))
        except ValueError as exc:
            raise ValueError("@pytest.mark.%s: %s" % (name, exc)) from None
    return tuple(found)


class _Calipers:
    """The plugin's state for one pytest process (a worker's own under
    xdist)."""

    def __init__(self, config):
        self.config = config
        self.profile = bool(config.getoption("calipers"))
        self.output = os.path.join(str(config.invocation_params.dir),
                                   config.getoption("calipers_output"))
        workerinput = getattr(config, "workerinput", None)
        self.worker = workerinput is not None
        self.parts_dir = workerinput.get("calipers_parts") if self.worker else None
        self.engine = None      # calipers._calipers once memory is measured
        self.started = False    # we called calipers.start()
        self.inherited = False  # the process was being profiled already
        self.interval = None
        self.measure = False    # the per-test hooks are on
        self.results = []       # (nodeid, figures) of each test's call
        self.workers = []       # xdist's controller: the workers' ids
        self.written = None
        self.note = None
        interval = config.getoption("calipers_memory_interval")
        try:
            self.base_interval = (DEFAULT_MEMORY_INTERVAL if interval is None
                                  else max(1, parse_size(interval)))
        except ValueError as exc:
            raise pytest.UsageError("--calipers-memory-interval: %s" % exc) from None

    # -- Starting and stopping

    def _start(self, outfile, memory_interval, write):
        from calipers import _agent, _calipers
        if _calipers.running():
            # `calipers run -m pytest`, or the program started calipers:
            # measure through the engine already running.
            self.inherited = True
        else:
            _agent.start_api(outfile, 0.01, memory_interval, False, (), (), False, None,
                             write=write)
            self.started = True
        self.engine = _calipers
        if _calipers.memory_available():
            self.interval = _calipers.memory_info().get("alloc_mean")
        else:
            self.note = ("calipers could not measure memory in this process (%s)"
                         % (_agent._redirect_note() or "the allocation shim is not loaded"))

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        """xdist's controller, before a worker starts: the worker's
        profile goes to a private directory, merged at the end."""
        if not self.profile:
            return
        if self.parts_dir is None:
            self.parts_dir = tempfile.mkdtemp(prefix="calipers-xdist-")
            self._start(self.output, self.base_interval, True)
        node.workerinput["calipers_parts"] = self.parts_dir
        self.workers.append(node.workerinput["workerid"])

    def pytest_collection_finish(self, session):
        if session.config.option.collectonly or self.engine is not None:
            return
        leak_limits = []
        marked = False
        for item in session.items:
            try:
                memory, leaks = _limits(item)
            except ValueError:
                marked = True  # reported when the test runs
                continue
            if memory is not None or leaks is not None:
                marked = True
            if leaks is not None:
                leak_limits.append(leaks)
        if not (self.profile or marked):
            return
        interval = self.base_interval
        if leak_limits:
            interval = max(1, min(interval, min(leak_limits) // LEAK_RESOLUTION))
        if self.worker and self.profile and self.parts_dir:
            outfile = os.path.join(self.parts_dir,
                                   "%s.json" % self.config.workerinput["workerid"])
        else:
            outfile = self.output
        self._start(outfile, interval, write=self.profile)
        self.measure = True

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        if not self.started:
            return
        from calipers import _agent
        merge = []
        if self.profile and not self.worker and self.parts_dir:
            # Every worker started (a missing profile is named in a note).
            merge = [os.path.join(self.parts_dir, "%s.json" % workerid)
                     for workerid in sorted(set(self.workers))]
        self.started = False
        self.written = _agent.stop_api(merge=merge)
        if self.parts_dir and not self.worker:
            shutil.rmtree(self.parts_dir, ignore_errors=True)

    # -- Each test

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        if not self.measure:
            yield
            return
        try:
            limit_memory, limit_leaks = _limits(item)
        except ValueError as exc:
            item._calipers = {"error": str(exc)}
            yield
            return
        engine = self.engine if self.interval else None
        if engine and (limit_memory is not None or limit_leaks is not None):
            # Garbage of earlier tests, freed now rather than during this
            # test (where its frees would hide the test's own growth).
            gc.collect()
        if engine:
            engine.memory_mark()
        start = time.perf_counter()
        yield
        figures = {"time": time.perf_counter() - start,
                   "limit_memory": limit_memory, "limit_leaks": limit_leaks}
        if engine:
            if limit_leaks is not None:
                gc.collect()
            figures["current"], figures["peak"] = engine.memory_traced()
            figures["allocated"], figures["lines"] = engine.memory_window()
            if limit_leaks is not None:
                figures["leaks"] = engine.memory_traces(1, True)
        item._calipers = figures

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        if call.when != "call":
            return
        figures = getattr(item, "_calipers", None)
        if figures is None:
            return
        del item._calipers
        report = outcome.get_result()
        if "error" in figures:
            if report.passed:
                report.outcome = "failed"
                report.longrepr = "calipers: %s" % figures["error"]
            return
        report.calipers = {name: figures.get(name)
                           for name in ("time", "allocated", "peak")}
        if not report.passed:
            return
        failures = self._check(item, figures)
        if failures:
            report.outcome = "failed"
            report.longrepr = "\n\n".join(failures)

    def _check(self, item, figures):
        """The failure messages of `item`'s limits (empty: within them)."""
        limit_memory, limit_leaks = figures["limit_memory"], figures["limit_leaks"]
        if limit_memory is None and limit_leaks is None:
            return []
        if "peak" not in figures:
            return ["calipers: the memory limits of this test cannot be checked: %s"
                    % self.note]
        failures = []
        root = str(item.config.rootpath)
        if limit_memory is not None and figures["peak"] > limit_memory:
            lines = sorted(figures["lines"], key=lambda t: (-t[2], t[0], t[1]))
            failures.append(
                "calipers: the test's memory peak was %s, over its %s = %s "
                "(%s allocated in all).\nThe lines that allocated the most in it "
                "(sampled every ~%s):\n%s"
                % (format_size(figures["peak"]), _limit_text(item, "limit_memory"),
                   format_size(limit_memory),
                   format_size(figures["allocated"]), format_size(self.interval),
                   _format_lines([(f, n, b, None) for f, n, b in lines[:TOP_LINES]], root)))
        if limit_leaks is not None:
            from calipers.memory import Snapshot
            snapshot = Snapshot(figures["leaks"], 1, {"alloc_mean": self.interval})
            stats = snapshot.statistics("lineno")
            leaked = sum(stat.size for stat in stats)
            stderr = math.sqrt(sum(stat.size_stderr ** 2 for stat in stats))
            if leaked > limit_leaks:
                # Every allocation tracked (interval 1): no error to state.
                how = ("~%s (\u00b1 %s;" % (format_size(leaked), format_size(stderr))
                       if stderr else "%s (exact;" % format_size(leaked))
                failures.append(
                    "calipers: the test leaked %s allocated by it and still "
                    "alive at its end, after gc.collect()), over its %s = %s.\n"
                    "The lines that allocated what is left (sampled every ~%s):\n%s"
                    % (how,
                       _limit_text(item, "limit_leaks"), format_size(limit_leaks),
                       format_size(self.interval),
                       _format_lines([(s.traceback[0].filename, s.traceback[0].lineno,
                                       s.size, s.size_stderr) for s in stats[:TOP_LINES]],
                                     root)))
        return failures

    # -- The summary

    def pytest_runtest_logreport(self, report):
        figures = getattr(report, "calipers", None)
        if figures and self.profile:
            self.results.append((report.nodeid, figures))

    def pytest_terminal_summary(self, terminalreporter):
        if not self.profile or self.worker:
            return
        tr = terminalreporter
        tr.write_sep("=", "calipers")
        if self.inherited:
            tr.write_line("profiled by the calipers run this pytest runs under: the profile "
                          "is that run's")
        elif self.written:
            tr.write_line("profile written to %s" % self.written)
        if self.note:
            tr.write_line(self.note)
        if not self.results:
            return
        top = self.config.getoption("calipers_top")
        rows = sorted(self.results, key=lambda r: (-(r[1].get("time") or 0), r[0]))
        if top > 0:
            rows = rows[:top]
        tr.write_line("%9s %11s %11s  %s" % ("time", "allocated", "peak",
                                             "test (%d of %d, slowest first)"
                                             % (len(rows), len(self.results))))
        for nodeid, figures in rows:
            def size(name):
                value = figures.get(name)
                return "-" if value is None else format_size(value)
            tr.write_line("%8.3fs %11s %11s  %s" % (figures.get("time") or 0.0,
                                                   size("allocated"), size("peak"), nodeid))


def _format_lines(lines, root):
    """The lines of a failure message: "  path:line  size  source"."""
    import linecache
    if not lines:
        return "  (no sampled allocation in a profiled line)"
    out = []
    for filename, lineno, size, stderr in lines:
        shown = filename
        if filename.startswith(root + os.sep):
            shown = filename[len(root) + 1:]
        amount = format_size(size)
        if stderr:
            amount += " \u00b1 " + format_size(stderr)
        source = linecache.getline(filename, lineno).strip()
        out.append("  %s:%d  %s%s" % (shown, lineno, amount,
                                      ("  " + source) if source else ""))
    return "\n".join(out)
