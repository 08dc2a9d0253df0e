"""Native memory held, then Python's large blocks made and freed many
times over: pymalloc hands each block over 512 bytes to malloc() and back,
and every byte of them is Python's coming and going, so the program ends
holding what native code holds and little Python memory.

    python large_python_frees.py
"""
import ctypes

MiB = 1 << 20

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
held = libc.malloc(256 * MiB)  # native, kept to the end
assert held

for _ in range(100):
    blocks = [bytes(16 * 1024) for _ in range(400)]  # 6.4 MB of Python's large blocks
    lists = [[None] * 500 for _ in range(400)]       # and 1.6 MB of lists' item arrays
    del blocks, lists
