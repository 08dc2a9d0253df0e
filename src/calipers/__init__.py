"""calipers: a profiler for Python programs, with its engine in C.

Run a program under the profiler with ``calipers run script.py [args...]`` or
``python -m calipers run -m module [args...]``.  The profile is written as
versioned JSON (see docs/FORMAT.md) and summarised in the terminal at exit.

Importing this package has no side effects: the engine starts only under
``calipers run``.
"""

__version__ = "0.1.0"

#: The schema identifier written into every profile.
SCHEMA = "calipers/1"
