"""calipers: a profiler for Python programs, with its engine in C.

Run a program under the profiler with ``calipers run script.py [args...]`` or
``python -m calipers run -m module [args...]``.  The profile is written as
versioned JSON (see docs/FORMAT.md) and summarised in the terminal at exit.

Or from inside a program, without ``calipers run``::

    import calipers

    with calipers.profile("profile.json"):
        work()

    calipers.start("profile.json")   # or start and stop by hand
    work()
    calipers.stop()

Profiling can be switched off and on around the part of a program that
matters (``calipers run --off`` starts it off)::

    calipers.on()
    handle_requests()
    calipers.off()

In IPython or Jupyter, ``%load_ext calipers`` adds the ``%calipers``
(one statement) and ``%%calipers`` (a cell) magics.

Importing this package has no side effects: the engine starts only under
``calipers run`` or when asked to.

In pytest, ``pytest --calipers`` and the ``limit_memory`` and
``limit_leaks`` markers: see :mod:`calipers.pytest_plugin`.  (The package
registers that plugin, so pytest would rewrite its asserts, and warn
under ``calipers run -m pytest``, where it is imported first;
PYTEST_DONT_REWRITE: it has none to rewrite.)
"""

__version__ = "0.1.0"

#: The schema identifier written into every profile.
SCHEMA = "calipers/1"


def start(outfile="calipers-profile.json", *, interval=0.01, memory_interval=256 << 10,
          cpu_only=False, profile_all=False, profile_only=(), profile_exclude=(),
          report=False, html=None):
    """Start profiling this process (every thread) from now on.

    The profile is written to `outfile` by :func:`stop`, or when the process
    ends if :func:`stop` is never called.  `interval` is the mean sampling
    interval in seconds; `memory_interval` the mean bytes between allocation
    samples; `profile_all`, `profile_only` and `profile_exclude` choose the
    files as the command line's options do; `report=True` prints the
    terminal report to standard error at the end, `html` also writes the
    HTML report there.

    Memory is profiled too, without ``calipers run``: the allocation shim
    is loaded and the allocator entries (malloc and its kin, memcpy,
    memmove, dlopen) of every loaded library, and of those loaded later,
    are redirected to it until :func:`stop` puts them back.  A library that
    cannot be redirected is named in a one-line note.  Under ``calipers
    run`` the shim is preloaded instead.  Child processes are followed only
    under ``calipers run``.

    Raises RuntimeError if this process is already being profiled.
    """
    from calipers import _agent

    _agent.start_api(outfile, float(interval), 0 if cpu_only else int(memory_interval),
                     profile_all, profile_only, profile_exclude, report, html)


def stop():
    """Stop profiling, write the profile, and return the path it was
    written to (None if it could not be written; the reason is printed).

    Raises RuntimeError if profiling was not started with :func:`start`.
    """
    from calipers import _agent

    return _agent.stop_api()


def on():
    """Switch profiling on: in every process of a ``calipers run`` (a run
    started with ``--off`` begins switched off), or in this process under
    :func:`start`.  Returns whether this process is being profiled; when
    it is not, this does nothing, so the call can stay in the code."""
    from calipers import _agent

    return _agent.switch(True)


def off():
    """Switch profiling off until :func:`on`: the time and allocations
    meanwhile are not credited to lines (the profile's ``paused_s`` says
    how long it was off).  Returns whether this process is being
    profiled."""
    from calipers import _agent

    return _agent.switch(False)


class profile:
    """``with calipers.profile(outfile, **options): ...`` profiles the
    block: :func:`start` on entry, :func:`stop` on exit (exception or not).
    The options are :func:`start`'s; ``.path`` is the profile's path
    afterwards."""

    def __init__(self, outfile="calipers-profile.json", **options):
        self.outfile = outfile
        self.options = options
        self.path = None

    def __enter__(self):
        start(self.outfile, **self.options)
        return self

    def __exit__(self, *exc):
        self.path = stop()
        return False


def load_ipython_extension(ipython):
    """``%load_ext calipers``: the ``%calipers`` and ``%%calipers`` magics
    (calipers.ipython, imported only now)."""
    from calipers import ipython as _ipython

    _ipython.load(ipython)
