"""The 512 MB test (seed 000, section 6.3): one 512 MiB array, of which
BENCH_TOUCH (0 to 1) is written.  An allocation profiler should report
512 MiB for the allocating line whatever the fraction; a profiler that reads
the resident set size sees only the part touched."""
import os
import time

import numpy as np

import _truth

SIZE = 512 << 20


def main():
    touch = float(os.environ.get("BENCH_TOUCH", "1"))
    a = np.empty(SIZE, dtype=np.uint8)  # @alloc
    a[:int(SIZE * touch)] = 1
    time.sleep(0.3)
    del a
    _truth.write(bytes={"alloc": SIZE}, touched=touch)


main()
