"""Run a program with memory tracing from its start, at a traceback limit:
calipers.memory (under `calipers run`) or tracemalloc, both started the
same way, so that the two differ only in the tracer:

    calipers run bench/trace_start.py calipers N program.py [args...]
    python bench/trace_start.py tracemalloc N program.py [args...]
"""
import os
import runpy
import sys

if sys.argv[1] == "calipers":
    import calipers.memory as memory
else:
    import tracemalloc as memory

memory.start(int(sys.argv[2]))
sys.argv = sys.argv[3:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
