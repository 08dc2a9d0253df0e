"""For test_attach.py's injection test: spins in C (programs/inject_state.c,
built by the test, argv[1]) argv[2] times, printing each result, then
blocks in a raw read(2) of its standard input and prints what it returned
(1, or minus an errno)."""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.spin.restype = ctypes.c_double
lib.spin.argtypes = [ctypes.c_long]
lib.read_one.restype = ctypes.c_long
lib.read_one.argtypes = [ctypes.c_int]
print("ready", flush=True)
for _ in range(int(sys.argv[2])):
    print("spun %r" % lib.spin(int(sys.argv[3])), flush=True)
print("reading", flush=True)
print("read %d" % lib.read_one(0), flush=True)
