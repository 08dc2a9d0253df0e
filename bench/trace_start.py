"""Run a program with calipers.memory tracing from the start, at a
traceback limit, as `python -X tracemalloc=N` does with tracemalloc:

    calipers run bench/trace_start.py N program.py [args...]
"""
import os
import runpy
import sys

import calipers.memory

calipers.memory.start(int(sys.argv[1]))
sys.argv = sys.argv[2:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
