"""A library that dlopens another by bare name through its RUNPATH, called
while profiled without preload (argv[1]: the outer library, argv[2]: the
profile).  Prints "ok" if the inner library was found and its block
allocated."""
import ctypes
import sys

import calipers

try:  # found only through the outer library's RUNPATH
    ctypes.CDLL("libcalipers_test_inner.so")
    sys.exit("libcalipers_test_inner.so is found without the RUNPATH")
except OSError:
    pass

with calipers.profile(sys.argv[2], memory_interval=64 << 10):
    outer = ctypes.CDLL(sys.argv[1])
    outer.load_inner_and_grab.restype = ctypes.c_void_p
    outer.load_inner_and_grab.argtypes = [ctypes.c_size_t]
    blocks = [outer.load_inner_and_grab(1 << 20) for _ in range(100)]  # inner-line
assert all(blocks), "the inner library was not found"
print("ok")
