"""Copy volume per line: bytes() of a bytearray, NumPy's copy(), and a
bytearray slice, each a known number of bytes through memcpy.  Truth: bytes
copied per line (the buffer sizes times the repetitions)."""
import numpy as np

import _truth

MB = 1 << 20


def main():
    ba = bytearray(64 * MB)
    arr = np.ones(32 * MB // 8)
    for _ in range(8):
        b = bytes(ba)  # @bytes
    for _ in range(8):
        c = arr.copy()  # @numpy_copy
    for _ in range(4):
        s = ba[:]  # @slice
    del b, c, s
    _truth.write(bytes={"bytes": 8 * 64 * MB, "numpy_copy": 8 * 32 * MB, "slice": 4 * 64 * MB})


main()
