"""calipers bootstrap, imported by ``site`` in the profiled process.

``calipers run`` puts this directory first on PYTHONPATH and re-executes the
interpreter on the user's program, so the program runs exactly as under
``python script.py`` (its own ``__main__``, ``sys.argv``, tracebacks and exit
status) while the engine starts before the first line of it.  This module
undoes every trace of that the program could see: it removes its directory
from ``sys.path``, shows the program its own PYTHONPATH and LD_PRELOAD in
``os.environ`` and none of the calipers variables, and then imports the
user's own ``sitecustomize`` if there is one.

To follow child processes (the default; ``--no-follow`` turns it off) the
variables stay in the process's C environment, which is what children
inherit when started without an explicit environment (``subprocess`` with
``env=None``, every ``multiprocessing`` start method, ``os.system``,
``os.exec*``): a Python child imports this module and profiles itself.
Only ``os.environ``, the program's view, is cleaned.  A child that cannot
be profiled (another Python version, calipers not importable) starts
silently as it would have.

So a child that is not Python (``sh``, ``make``, ``gcc``) sees them too:
CALIPERS_CONFIG, CALIPERS_PYTHONPATH, CALIPERS_LD_PRELOAD, PYTHONPATH with
this directory first and LD_PRELOAD with the shim first (not with
--cpu-only).  They cannot be taken from it: a shell between the program
and a Python grandchild is common (``os.system`` is one), and only
wrapping the exec calls could tell the two apart.  What is done instead:
the shim finds no Python in such a process and stays inert, and a Python
that is not the launcher's version finds this module does nothing.
docs/INTERNALS.md ("Files calipers creates") has the whole list;
tests/security/test_environment.py pins it down.
"""


def _calipers_boot():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    env = os.environ
    launch = env.pop("CALIPERS_LAUNCH", None)
    if launch is not None:
        # Started by the native launcher (src/launcher): `run`'s options
        # are checked here, before the program's first line, and become
        # this process's configuration and, in its C environment, that of
        # the children it starts.
        try:
            from calipers import cli

            env["CALIPERS_CONFIG"] = cli.launched(launch)
        except Exception as exc:  # never break the program
            if sys.stderr is not None:
                sys.stderr.write("calipers: profiling disabled: %s\n" % (exc,))
    config = env.get("CALIPERS_CONFIG")
    # The settings this module needs, read without calipers (which another
    # Python version cannot import); _common.decode_config reads them all.
    settings = dict(part.partition("=")[::2] for part in (config or "").split("\x1e"))
    follow = settings.get("follow") == "1"
    # The program's view of its environment; the C environment (what
    # children inherit) keeps the calipers variables when following.
    data = getattr(env, "_data", None)
    hide_only = follow and isinstance(data, dict) and hasattr(env, "encodekey")

    def set_view(key, value):
        if hide_only:
            k = env.encodekey(key)
            if value is None:
                data.pop(k, None)
            else:
                data[k] = env.encodevalue(value)
        elif value is None:
            env.pop(key, None)
        else:
            env[key] = value

    saved = env.get("CALIPERS_PYTHONPATH")
    preload = env.get("CALIPERS_LD_PRELOAD")
    for key in ("CALIPERS_CONFIG", "CALIPERS_PYTHONPATH", "CALIPERS_LD_PRELOAD"):
        set_view(key, None)
    set_view("PYTHONPATH", None if saved in (None, "\x1f") else saved)  # "\x1f": _common.UNSET
    # The allocation shim stays loaded in this process.
    if preload is not None:
        set_view("LD_PRELOAD", None if preload == "\x1f" else preload)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    sys.path_importer_cache.pop(here, None)

    if config is not None:
        # Only the program calipers started says why it is not profiled;
        # one the main process exec'd (exec_origin) is quiet, as children are.
        main = settings.get("main_pid") == str(os.getpid()) and not settings.get("exec_origin")
        try:
            if settings.get("python") != "%d.%d" % sys.version_info[:2]:
                raise RuntimeError("another Python version than the launcher's")
            from calipers import _agent

            _agent.start(config)
        except Exception as exc:  # never break the program
            if main and sys.stderr is not None:  # None: started with it closed
                sys.stderr.write("calipers: profiling disabled: %s\n" % (exc,))

    # Chain to the user's sitecustomize, as if this one had never existed.
    # With none to chain to, leave as a missing sitecustomize would: raising
    # ImportError(name="sitecustomize") makes the import system drop this
    # module from sys.modules and site.py ignore the import silently.
    ours = sys.modules.pop("sitecustomize")
    try:
        import sitecustomize  # noqa: F401  (the user's, now in sys.modules)
    except ImportError as exc:
        if exc.name != "sitecustomize":
            raise
        sys.modules["sitecustomize"] = ours
        raise ImportError("no sitecustomize besides calipers'", name="sitecustomize")


_calipers_boot()
