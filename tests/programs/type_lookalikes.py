"""Blocks of Python's object allocator that hold no object (an extension's
buffers: tests/programs/objbuffers.c) but whose words
look like an object header: a small reference count, then a pointer to
memory shaped like a type (its own header alive, its type `type`, READY).
calipers reads a sampled block's type after the allocation returns; it
must call these "unknown", never read through the look-alike's pointers
(its name, its dict, its qualified name are garbage here)."""
import ctypes
import random
import struct
import sys

import objbuffers

READY, HEAPTYPE = 1 << 12, 1 << 9
TP_FLAGS = 168          # offsetof(PyTypeObject, tp_flags), 3.9-3.14 on 64-bit
GARBAGE = 0x465F54524F505845   # "EXPORT_F": no pointer anywhere


def lookalike(flags):
    """Memory shaped like a type header; every later word garbage."""
    buf = ctypes.create_string_buffer(2048)
    for at in range(0, 2048, 8):
        struct.pack_into("Q", buf, at, GARBAGE)
    # ob_refcnt, ob_type, ob_size, tp_name (garbage: unmapped), tp_basicsize
    struct.pack_into("QQQQQ", buf, 0, 1, id(type), 0, GARBAGE, 16)
    struct.pack_into("Q", buf, TP_FLAGS, flags)
    return buf


fakes = [lookalike(READY), lookalike(READY | HEAPTYPE)]
for fake in fakes:
    words = struct.pack("QQ", 1, ctypes.addressof(fake)) * 3
    kept = objbuffers.keep(words, 20000)  # @lookalikes
# Then words drawn at random from a pool: counts, real types, a class,
# live and freed objects, look-alikes and pointers into them, garbage.
class Kept:
    pass


freed = [Kept() for _ in range(8)]
pool = [0, 1, 2, 1 << 40, GARBAGE, id(type), id(int), id(dict), id(Kept), id(Kept()),
        id(fakes), id(freed[3])]
del freed
pool += [ctypes.addressof(fake) + 8 * k for fake in fakes for k in range(0, 40, 3)]
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
for _ in range(20000):
    words = struct.pack("6Q", *(rng.choice(pool) for _ in range(6)))
    kept = objbuffers.keep(words, 1)  # @random
print("kept", kept)
objbuffers.release()
sys.exit(0)
