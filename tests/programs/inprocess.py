"""Run a program profiled from inside, with calipers.profile() and no
preload: argv[1] the profile's path, argv[2] the memory interval (bytes),
argv[3] the program, the rest its arguments.  The program runs as
__main__ (runpy), so its lines are profiled as under `calipers run`."""
import os
import runpy
import sys

import calipers

assert "libcalipers_shim" not in os.environ.get("LD_PRELOAD", "")  # no preload of ours
assert "numpy" not in sys.modules  # a program's NumPy is imported after start
outfile, interval, program = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.argv = sys.argv[3:]
with calipers.profile(outfile, memory_interval=interval, interval=0.001):
    runpy.run_path(program, run_name="__main__")
