"""Lines that allocate objects of known types, keeping some and dropping the
rest, measuring their own truth: for each line, the fraction of its objects
that were alive when a garbage collection ran (the collector's own count,
gc.get_stats(), read at birth and at death: a weakref finalizer where the
type takes weak references, the moment of `del` where it does not).  Writes
{marker: {"survived": fraction}} and the collector's view (callbacks,
counts, thresholds, enabled) to argv[1]."""

import gc
import json
import random
import sys
import weakref

try:
    import numpy as np
except ImportError:
    np = None

N = 20000


def collections():
    return sum(s["collections"] for s in gc.get_stats())


class Point:
    __slots__ = ("x", "y", "z", "t", "u", "v", "w", "s", "__weakref__")


PIECE = "abcdef"


truth = {}
kept = []
pick = random.Random(22)


def measure(marker, make, keep, weak):
    born_dead = []  # [born, died or None] per object

    def died(rec):
        rec[1] = collections()

    for i in range(N):
        obj = make(i)
        rec = [collections(), None]
        born_dead.append(rec)
        if weak:
            weakref.finalize(obj, died, rec)
        # Kept at random, not every k-th: a periodic choice could keep in
        # step with the sampler's phase (its gaps vary by only +/-50%).
        if pick.random() < keep:
            kept.append(obj)
        else:
            del obj
            if not weak:
                rec[1] = collections()
        obj = None
    truth.setdefault(marker, []).extend(born_dead)


# Each marked line makes its object and nothing else (a call's argument
# tuple or a formatting buffer would be bytes of other lives on the line).
def make_str(i):
    return PIECE * 400  # str


def make_bytes(i):
    return bytes(2400)  # bytes


def make_point(i):
    p = Point()  # point
    p.x = i
    return p


def make_list(i):
    return [i] * 300  # list


def make_bytearray(i):
    return bytearray(2400)  # bytearray


def make_array(i):
    return np.zeros(1024)  # ndarray


view_before = (list(gc.callbacks), gc.get_threshold(), gc.isenabled())
measure("str", make_str, 0.5, False)
measure("bytes", make_bytes, 0, False)
for _ in range(6):  # small objects: more of them for as many samples
    measure("point", make_point, 0.33, True)
for _ in range(4):
    measure("list", make_list, 0.25, False)
measure("bytearray", make_bytearray, 0.5, False)
if np is not None:
    measure("ndarray", make_array, 0.2, True)
view_after = (list(gc.callbacks), gc.get_threshold(), gc.isenabled())

gc.collect()
end = collections()
out = {}
for marker, recs in truth.items():
    survived = sum(1 for born, died in recs if (end if died is None else died) > born)
    out[marker] = {"survived": survived / len(recs), "objects": len(recs)}
out["_gc"] = {"callbacks": len(view_after[0]), "threshold": list(view_after[1]),
              "enabled": view_after[2], "unchanged": view_before == view_after}
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
