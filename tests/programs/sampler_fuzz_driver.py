"""The sampler fuzzer's profiled process (tests/test_sampler_fuzz.py): one
long-lived interpreter that runs the test's action lists, one a line of JSON
on stdin, and answers each with a line of JSON on stdout: what every step
read of the shim (calipers._calipers._sampler_probe) and, for every
profiling session the list started and stopped, the profile's
allocated_types records of this file's lines.

Each kind of step is made on its own line (the `# step:` markers, reported
at start-up) so that the profile's per-line records are the model's
per-kind predictions.  The collector is disabled: the only collections are
the list's own "collect" steps, which the model counts.
"""
import gc
import json
import os
import struct
import sys
import tempfile

import calipers
from calipers import _calipers

probe = _calipers._sampler_probe


class Slotted:
    """An instance: one block of the object domain with the collector's
    pre-header before the object (its size is sys.getsizeof's)."""
    __slots__ = ("a",)

N = 9 * 2 + 4  # int64s a probe returns (the layout is the test's)


def markers():
    lines = {}
    with open(__file__) as f:
        for no, text in enumerate(f, 1):
            if "# step: " in text and "= probe(box" in text:
                lines[text.split("# step:")[1].strip()] = no
    return lines


def profile_records(path):
    with open(path) as f:
        prof = json.load(f)
    at = prof.get("allocated_types") or {}
    here = os.path.realpath(__file__)
    lines = {str(rec["line"]): rec for rec in at.get("lines", [])
             if os.path.realpath(rec["file"]) == here}
    return {"present": "allocated_types" in prof,
            "gc_collections": at.get("gc_collections", 0), "lines": lines}


def run(actions, tmp):
    boxes = {}
    out = []
    profiling = None
    for act in actions:
        op = act[0]
        if op == "start":
            os.environ["CALIPERS_SAMPLER_SEED"] = str(act[2])
            profiling = os.path.join(tmp, "p%d.json" % len(out))
            calipers.start(profiling, interval=5.0, memory_interval=act[1],
                           profile_all=True)
            out.append(None)
        elif op == "stop":
            calipers.stop()
            out.append(profile_records(profiling))
            os.unlink(profiling)
        elif op == "off":
            calipers.off()
            out.append(None)
        elif op == "on":
            calipers.on()
            out.append(None)
        elif op == "collect":
            gc.collect()
            out.append(None)
        else:
            if op == "new":
                box = boxes[act[1]] = [None]
                kind, n = act[2], act[3]
                # ["new", slot, kind, n, "point"]: n bytes past the next
                # sample point (op + 16).
                at = 16 if len(act) > 4 else 0
                if kind == "bytes":
                    r = probe(box, at + 0, n)  # step: bytes
                elif kind == "str":
                    r = probe(box, at + 1, n)  # step: str
                elif kind == "object":
                    box[0] = Slotted
                    r = probe(box, 6, 1)  # step: object
                elif kind == "pymem":
                    r = probe(box, at + 2, n)  # step: pymem
                else:
                    r = probe(box, at + 3, n)  # step: native
            elif op == "realloc":
                box = boxes[act[1]]
                r = probe(box, 4, act[2])  # step: realloc
            else:
                box = boxes.pop(act[1])
                r = probe(box, 5, 1)  # step: free
            out.append(list(struct.unpack("=%dq" % N, r)))
    boxes.clear()  # after the last stop: unprofiled
    return out


def main():
    gc.disable()
    os.environ.pop("CALIPERS_SAMPLER_SEED", None)
    print(json.dumps({"lines": markers(), "object_size": sys.getsizeof(Slotted()),
                      "object_type": "%s.%s" % (Slotted.__module__, Slotted.__qualname__),
                      "free_threaded":
                      getattr(sys, "_is_gil_enabled", lambda: True)() is False}),
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for line in sys.stdin:
            try:
                reply = {"steps": run(json.loads(line), tmp)}
            except Exception as e:  # the test shows it; the process goes on
                reply = {"error": "%s: %s" % (type(e).__name__, e)}
                try:
                    calipers.stop()
                except Exception:
                    pass
            print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
