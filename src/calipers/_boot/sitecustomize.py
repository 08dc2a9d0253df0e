"""calipers bootstrap, imported by ``site`` in the profiled process.

``calipers run`` puts this directory first on PYTHONPATH and re-executes the
interpreter on the user's program, so the program runs exactly as under
``python script.py`` (its own ``__main__``, ``sys.argv``, tracebacks and exit
status) while the engine starts before the first line of it.  This module
undoes every trace of that: it removes its directory from ``sys.path``,
restores PYTHONPATH and LD_PRELOAD, removes the calipers variables from the environment, and
then imports the user's own ``sitecustomize`` if there is one.
"""


def _calipers_boot():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    config = os.environ.pop("CALIPERS_CONFIG", None)
    saved = os.environ.pop("CALIPERS_PYTHONPATH", None)
    if saved is None or saved == "\x1f":  # cli.NO_PYTHONPATH
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = saved
    # The allocation shim stays loaded in this process; children get the
    # user's LD_PRELOAD back.
    preload = os.environ.pop("CALIPERS_LD_PRELOAD", None)
    if preload == "\x1f":
        os.environ.pop("LD_PRELOAD", None)
    elif preload is not None:
        os.environ["LD_PRELOAD"] = preload
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    sys.path_importer_cache.pop(here, None)

    if config is not None:
        try:
            from calipers import _agent

            _agent.start(config)
        except Exception as exc:  # never break the program
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
