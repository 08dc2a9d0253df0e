"""What was allocated and how long it lived (the profile's allocated_types):
the type of each sampled allocation and whether it survived a garbage
collection, checked against a program that measures its own truth
(tests/programs/alloc_types.py), and the collector's view left alone."""

import json
import os
import subprocess
import sys

import pytest

from conftest import PROGRAMS, build_extension, line_of, validate

PROGRAM = PROGRAMS / "alloc_types.py"

try:
    import numpy  # noqa: F401
    HAVE_NUMPY = True
except ImportError:
    HAVE_NUMPY = False

FREE_THREADED = bool(getattr(sys, "_is_gil_enabled", lambda: True)() is False)

# The types a line's sampled bytes may rightly carry.  A container's storage
# (a list's items, a bytearray's body) is a block of Python's allocator that
# holds no object: "buffer" when PyMem made it, "unknown" when the object
# allocator did (bytearray's body, in some versions): never a guessed type.
# NumPy's data is malloc's: "native".
RIGHT = {
    "str": {"str"},
    "bytes": {"bytes"},
    "point": {"__main__.Point"},
    "list": {"list", "buffer"},
    "bytearray": {"bytearray", "buffer", "unknown"},
    "ndarray": {"numpy.ndarray", "native"},
}


@pytest.fixture(scope="module")
def typed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("types")
    out, truth = tmp / "profile.json", tmp / "truth.json"
    proc = subprocess.run(
        [sys.executable, "-m", "calipers", "run", "-o", str(out), "--memory-interval", "8k",
         str(PROGRAM), str(truth)], capture_output=True, text=True, cwd=tmp, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return validate(json.loads(out.read_text())), json.loads(truth.read_text()), out


def line_record(profile, marker):
    no = line_of(PROGRAM, marker)
    for rec in profile["allocated_types"]["lines"]:
        if rec["file"].endswith("alloc_types.py") and rec["line"] == no:
            return rec
    raise AssertionError("no allocated_types record for line %d (%s)" % (no, marker))


def markers():
    return [m for m in RIGHT if m != "ndarray" or HAVE_NUMPY]


@pytest.mark.skipif(FREE_THREADED, reason="free-threaded builds read no types (no GIL keeps "
                    "a block from being freed while it is read): every Python block is unknown")
@pytest.mark.parametrize("marker", markers())
def test_each_line_gets_its_type(typed_run, marker):
    profile, _, _ = typed_run
    rec = line_record(profile, marker)
    assert rec["samples"] >= 100, rec
    right = sum(t["bytes"] for t in rec["types"] if t["type"] in RIGHT[marker])
    assert right >= 0.95 * rec["bytes"], (marker, rec["types"])
    # The line's types add up to the line.
    assert sum(t["bytes"] for t in rec["types"]) == rec["bytes"]
    assert sum(t["samples"] for t in rec["types"]) == rec["samples"]


@pytest.mark.parametrize("marker", markers())
def test_survival_per_line_matches_the_truth(typed_run, marker):
    profile, truth, _ = typed_run
    rec = line_record(profile, marker)
    if rec["untracked_bytes"] > rec["bytes"] / 2:
        # NumPy releases the GIL around its calloc; where the interpreter
        # then shows no GIL holder (3.9, seen) such samples are credited but
        # not followed (INTERNALS.md), and what is left is too few to test.
        assert marker == "ndarray", rec
        pytest.skip("most of this line's samples were made without the GIL: not followed")
    if rec["survived_fraction"] is None:
        pytest.fail("no survival figure for %s: %r" % (marker, rec))
    # Sampled bytes: each line's objects have one size, so the fraction of
    # bytes that survived estimates the fraction of objects.  With >= 100
    # samples (most lines have thousands) 5 points is over 2 standard errors
    # at worst (p = 0.5, 170 samples: 3.8 points) and the sampler's
    # randomness is the only noise: the truth is the same event.
    assert abs(rec["survived_fraction"] - truth[marker]["survived"]) <= 0.05, (
        marker, rec["survived_fraction"], truth[marker])
    # Objects that were dropped at once died young, and only those: the
    # bytes line keeps none.
    if marker == "bytes":
        assert rec["died_young_bytes"] >= 0.95 * rec["bytes"]


def test_types_summary_is_consistent(typed_run):
    profile, _, _ = typed_run
    sec = profile["allocated_types"]
    assert sec["gc_collections"] > 0
    names = [t["type"] for t in sec["types"]]
    assert len(names) == len(set(names)), "a type is interned once"
    by_bytes = [t["bytes"] for t in sec["types"]]
    assert by_bytes == sorted(by_bytes, reverse=True)
    # Per type, the sums over lines (lines are only the profiled ones).
    for t in sec["types"]:
        fates = (t["died_young_bytes"] + t["survived_bytes"] + t["alive_end_bytes"]
                 + t["untracked_bytes"])
        assert fates == t["bytes"], t
        if t["survived_fraction"] is not None:
            assert 0 <= t["survived_fraction"] <= 1
    dropped = line_record(profile, "bytes")
    # Died at once: a lifetime of about one object on the allocation clock.
    assert dropped["median_lifetime_bytes"] is not None
    assert dropped["median_lifetime_bytes"] < 64 * 1024, dropped
    assert dropped["median_lifetime_s"] < 0.5


def test_collector_view_unchanged(typed_run, run_plain, tmp_path):
    """gc.callbacks, thresholds and gc.isenabled() read as without calipers:
    the collections are counted from the collector's own statistics."""
    _, truth, _ = typed_run
    plain_file = tmp_path / "plain-truth.json"
    plain = run_plain(PROGRAM, plain_file)
    assert plain.returncode == 0, plain.stderr
    plain_truth = json.loads(plain_file.read_text())
    assert truth["_gc"]["unchanged"] is True
    assert truth["_gc"] == plain_truth["_gc"]


def test_terminal_block(typed_run):
    _, _, out = typed_run
    view = subprocess.run([sys.executable, "-m", "calipers", "view", "--width", "100",
                           "--color", "never", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert view.returncode == 0, view.stderr
    text = view.stdout
    assert "what is allocated:" in text
    block = text[text.index("what is allocated:"):].splitlines()
    assert block[1].split()[:4] == ["type", "bytes", "share", "survived"]
    shown = [row.split()[0] for row in block[2:10] if row.startswith("  ") and row.split()]
    # The free-threaded build reads no types: its block says so.
    expected = ["unknown"] if FREE_THREADED else ["str", "bytes"]
    assert all(name in shown for name in expected), (shown, block)
    for row in block:
        assert len(row) <= 100


def test_words_shaped_like_a_type_header_read_as_unknown(tmp_path):
    """An extension's buffers from Python's object allocator, holding no
    object, whose words point at memory shaped like a type header (every
    pointer past it garbage): each is "unknown", and nothing past the
    look-alike's header is read.  Reading its name, dict or qualified name
    directly crashed a pytest session one run in a few hundred (ElementTree's
    uninitialised parent stack, with a stale word)."""
    program = PROGRAMS / "type_lookalikes.py"
    out = tmp_path / "profile.json"
    env = dict(os.environ, PYTHONPATH=str(build_extension("objbuffers", tmp_path)))
    proc = subprocess.run(
        [sys.executable, "-m", "calipers", "run", "-o", str(out), "--memory-interval", "1",
         str(program)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "kept 60000" in proc.stdout
    profile = validate(json.loads(out.read_text()))

    def types_at(marker):
        no = line_of(program, marker)
        rec = next(r for r in profile["allocated_types"]["lines"]
                   if r["file"].endswith("type_lookalikes.py") and r["line"] == no)
        return {t["type"]: t["samples"] for t in rec["types"]}

    # Every allocation is sampled: the 40000 buffers, besides the list of
    # them (PyMem's: "buffer") and the int keep returns.
    types = types_at("@lookalikes")
    assert types.get("unknown", 0) >= 40000, types
    assert set(types) <= {"unknown", "buffer", "int"}, types
    # Then 20000 buffers of words drawn from a pool: a pair that reads as a
    # live header of a real type is named that type (indistinguishable from
    # one); nothing else is named, and nothing crashes.
    types = types_at("@random")
    assert sum(types.values()) >= 20000, types
    assert set(types) <= {"unknown", "buffer", "int", "tuple", "type", "dict", "__main__.Kept"}, types
    assert types.get("unknown", 0) >= 10000, types
