"""Blocks that cross calipers.stop() and start() (no preload): a C library
(argv[1], built by the test) is loaded after start and holds native blocks;
some are made before start and freed while profiled, some made while
profiled and freed after stop, and the reverse, through malloc (called,
and through a table of function pointers), calloc, realloc and free, in
this thread and others.  argv[2] gets {marker: bytes, "in_use": [which
malloc the library calls, while / after / while again / after again]} as
JSON.  Prints "ok"."""
import ctypes
import json
import sys
import threading

import calipers

libc_malloc = ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value
before = [bytearray(100_000) for _ in range(200)]  # made before start
in_use = []

with calipers.profile(sys.argv[3], memory_interval=64 << 10):
    lib = ctypes.CDLL(sys.argv[1])  # dlopen'ed while profiled
    lib.malloc_in_use.restype = ctypes.c_void_p
    lib.hold.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t]
    lib.release.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t]
    in_use.append(lib.malloc_in_use())
    got = lib.hold(0, 2000, 100_000)  # hold-line
    assert got == 2000, got
    lib.hold_via_table.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t]
    got = lib.hold_via_table(2500, 1000, 100_000)  # table-line
    assert got == 1000, got
    del before  # freed while profiled
    during = [bytearray(100_000) for _ in range(200)]
    worker = threading.Thread(target=lib.hold, args=(2000, 500, 50_000))
    worker.start()
    worker.join()

in_use.append(lib.malloc_in_use())
lib.release(0, 2000, 200_000)  # made while profiled, grown and freed after
lib.release(2000, 500, 10)
lib.release(2500, 1000, 10)
del during
after = [bytearray(100_000) for _ in range(200)]
lib.hold(0, 100, 1000)

with calipers.profile(sys.argv[3] + ".2", memory_interval=64 << 10):  # again
    in_use.append(lib.malloc_in_use())
    del after  # made after the first stop, freed while profiled
    got = lib.hold(100, 1000, 100_000)  # second-line
    assert got == 1000, got
lib.release(0, 1100, 64)
in_use.append(lib.malloc_in_use())

with open(sys.argv[2], "w") as f:
    json.dump({"hold-line": 2000 * 100_000, "table-line": 1000 * 100_000,
               "second-line": 1000 * 100_000,
               "in_use": in_use, "libc_malloc": libc_malloc}, f)
print("ok")
