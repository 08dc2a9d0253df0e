"""Memory snapshot files through the extension (_calipers.snapshot_*):
raw traces round trip exactly, shared frames come back shared, bad input is
refused with TypeError/ValueError, and no corrupt file crashes the reader
(docs/FORMAT.md, "Snapshot files")."""

import errno
import os
import stat
import struct
import subprocess
import sys
import textwrap
import tracemalloc

import pytest

from calipers import _calipers

A = ("a.py", 10)
B = ("lib/b.py", 20)
C = ("π/ü.py", 30)


def fnv1a(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def reseal(data):
    """The bytes with the checksum that ends them made right again."""
    data = bytes(data)
    return data[:-8] + struct.pack("<Q", fnv1a(data[:-8]))


def sample_traces():
    return [
        (0, 100, (A, B), 2, 100, 0),
        (1, 4096, (A, B), 2, 512, 0),
        (0, 0, (C,), 9, 1, 1),  # elided: 8 frames between the two parts
        (389047, 2**62, (B, A, C), 3, 2**40, 3),  # a domain of numpy's
        (0, 7, (), 0, 7, 0),
        (0, 1, ((A[0], -1), (A[0], 2**31 - 1), (A[0], -2**31)), 3, 1, 0),
    ]


def test_round_trip_and_same_bytes():
    traces = sample_traces()
    data = _calipers.snapshot_encode(traces, '{"limit": 3}')
    assert data[:8] == b"\x89CALSNP\n"
    assert _calipers.snapshot_decode(data) == (traces, '{"limit": 3}')
    assert _calipers.snapshot_encode(traces, '{"limit": 3}') == data
    again = _calipers.snapshot_encode(*_calipers.snapshot_decode(data))
    assert again == data
    # bytes-like objects too
    assert _calipers.snapshot_decode(bytearray(data)) == (traces, '{"limit": 3}')
    assert _calipers.snapshot_decode(memoryview(data))[0] == traces


def test_tracemalloc_four_tuples():
    traces = [(0, 24, (A, B), 2), (0, 0, (A, B), 7), (2, 5, (C,), 1)]
    decoded, meta = _calipers.snapshot_decode(_calipers.snapshot_encode(traces, "{}"))
    # block_size = size (1 for a size of 0: a block, of no bytes), root_kept 0
    assert decoded == [(0, 24, (A, B), 2, 24, 0), (0, 0, (A, B), 7, 1, 0),
                       (2, 5, (C,), 1, 5, 0)]
    assert meta == "{}"
    # tracemalloc's own traces, as tracemalloc.take_snapshot() reads them
    tracemalloc.start(5)
    try:
        keep = [bytearray(1000 + i) for i in range(50)]
        raw = tracemalloc._get_traces()
    finally:
        tracemalloc.stop()
    assert keep and raw
    decoded, _ = _calipers.snapshot_decode(_calipers.snapshot_encode(raw, "{}"))
    assert [t[:4] for t in decoded] == [tuple(t[:4]) for t in raw]
    assert all(t[4] == max(t[1], 1) and t[5] == 0 for t in decoded)


def test_unicode_and_odd_file_names():
    names = ["π/ü.py", "日本語.py", "emoji-\U0001F600.py", "", "<frozen importlib._bootstrap>",
             "a b\tc\n.py"]
    traces = [(0, 1, ((n, i),), 1) for i, n in enumerate(names)]
    decoded, _ = _calipers.snapshot_decode(_calipers.snapshot_encode(traces, "{}"))
    assert [t[2][0][0] for t in decoded] == names
    # A name that is not valid Unicode (undecodable bytes, surrogateescape)
    # is kept with backslash escapes rather than refused.
    odd = b"caf\xe9.py".decode("utf-8", "surrogateescape")
    decoded, _ = _calipers.snapshot_decode(_calipers.snapshot_encode([(0, 1, ((odd, 1),), 1)],
                                                                      "{}"))
    assert decoded[0][2][0][0] == "caf\\udce9.py"


def test_empty_snapshot():
    data = _calipers.snapshot_encode([], "{}")
    assert _calipers.snapshot_decode(data) == ([], "{}")
    assert _calipers.snapshot_encode(iter(()), "{}") == data
    # traces whose tracebacks have no frames at all
    only_empty = [(0, 5, (), 0, 5, 0), (1, 6, (), 3, 6, 0)]
    assert _calipers.snapshot_decode(_calipers.snapshot_encode(only_empty, "{}"))[0] == only_empty
    meta = '{"title": "é", "nested": {"a": [1, 2.5, null, true]}}'
    assert _calipers.snapshot_decode(_calipers.snapshot_encode([], meta)) == ([], meta)


def test_many_traces():
    frames = [tuple(("mod%d.py" % (i % 37), j) for j in range(i % 11)) for i in range(1000)]
    traces = [(i % 2, i * 8, frames[i % 1000], 10 + i % 11, 8, 0) for i in range(100_000)]
    data = _calipers.snapshot_encode(traces, "{}")
    assert len(data) < 100_000 * 24 + 200_000  # the tracebacks are stored once
    decoded, _ = _calipers.snapshot_decode(data)
    assert decoded == traces
    # one frames tuple per distinct frames (whatever the totals), one tuple per frame
    assert len({id(t[2]) for t in decoded}) == len(set(frames))
    assert len({id(f) for t in decoded for f in t[2]}) == len({f for t in frames for f in t})


def test_decoded_tracebacks_and_frames_are_shared():
    traces = [(0, 1, (A, B), 2), (0, 2, (A, B), 2), (0, 3, (B, A), 2), (0, 4, (A, B), 5)]
    # equal but distinct objects going in
    traces = [(d, s, tuple((str(f + ""), int(l)) for f, l in fr), t) for d, s, fr, t in traces]
    decoded, _ = _calipers.snapshot_decode(_calipers.snapshot_encode(traces, "{}"))
    assert decoded[0][2] is decoded[1][2]  # the same traceback: one tuple
    assert decoded[0][2] is not decoded[2][2]
    assert decoded[0][2][0] is decoded[2][2][1]  # the same frame: one tuple
    assert decoded[0][2][1] is decoded[2][2][0]
    # A traceback with another total is another traceback, of the same frames.
    assert decoded[3][2] == decoded[0][2] and decoded[3][3] == 5
    assert decoded[3][2][0] is decoded[0][2][0]


@pytest.mark.parametrize("trace, error, words", [
    ([1, 2, 3, 4], TypeError, "raw trace 0: expected a tuple"),
    ((0, 1, (A,)), TypeError, "expected a tuple"),
    ((0, 1, (A,), 1, 1), TypeError, "of 5 items"),
    (("0", 1, (A,), 1), TypeError, "domain must be an int"),
    ((-1, 1, (A,), 1), ValueError, "domain -1 is not in 0..4294967295"),
    ((2**32, 1, (A,), 1), ValueError, "domain"),
    ((0, -1, (A,), 1), ValueError, "size -1 is not in"),
    ((0, 2**63, (A,), 1), ValueError, "size"),
    ((0, 1.5, (A,), 1), TypeError, "size must be an int, not float"),
    ((0, 1, [A], 1), TypeError, "frames must be a tuple"),
    ((0, 1, (["a.py", 1],), 1), TypeError, "frame 0 must be a (filename, lineno) tuple"),
    ((0, 1, (("a.py",),), 1), TypeError, "frame 0"),
    ((0, 1, ((b"a.py", 1),), 1), TypeError, "a file name must be a str, not bytes"),
    ((0, 1, (("a\0.py", 1),), 1), ValueError, "holds a NUL"),
    ((0, 1, (("a.py", 2**31),), 1), ValueError, "a lineno 2147483648 is not in"),
    ((0, 1, (("a.py", None),), 1), TypeError, "a lineno must be an int"),
    ((0, 1, (A, B), 1), ValueError, "total_nframe 1 is not in 2.."),
    ((0, 1, (A,), 2**32), ValueError, "total_nframe"),
    ((0, 1, (A,), 1, 0, 0), ValueError, "block_size 0 is not in 1.."),
    ((0, 1, (A,), 1, -5, 0), ValueError, "block_size"),
    ((0, 1, (A,), 1, 1, 2), ValueError, "root_kept 2 is not in 0..1"),
    ((0, 1, (A,), 1, 1, -1), ValueError, "root_kept"),
])
def test_bad_traces_refused(trace, error, words):
    with pytest.raises(error) as e:
        _calipers.snapshot_encode([(0, 1, (A,), 1), trace][1:], "{}")
    assert words in str(e.value)
    with pytest.raises(error, match="raw trace 1"):
        _calipers.snapshot_encode([(0, 1, (A,), 1), trace], "{}")


@pytest.mark.parametrize("meta, error, words", [
    (b"{}", TypeError, "meta_json must be a str"),
    (None, TypeError, "meta_json must be a str"),
    ("[]", ValueError, "meta_json: meta is not a JSON object"),
    ("", ValueError, "meta_json: meta is not JSON"),
    ('{"a": }', ValueError, "meta is not JSON"),
    ('{"a": "\0"}', ValueError, "NUL"),
])
def test_bad_meta_refused(meta, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(")):
        _calipers.snapshot_encode([], meta)


def test_bad_containers_refused():
    with pytest.raises(TypeError, match="raw_traces must be an iterable"):
        _calipers.snapshot_encode(5, "{}")
    with pytest.raises(TypeError):
        _calipers.snapshot_decode("not bytes")


def test_corrupt_bytes_refused():
    data = _calipers.snapshot_encode(sample_traces(), '{"limit": 3}')
    for n in range(len(data)):
        with pytest.raises(ValueError, match="truncated|not a calipers snapshot"):
            _calipers.snapshot_decode(data[:n])
    with pytest.raises(ValueError, match="not a calipers snapshot"):
        _calipers.snapshot_decode(b'{"schema": "calipers/1"}')
    with pytest.raises(ValueError, match=r"^snapshot format version 2 is newer than this "
                                         r"calipers reads \(1\)$"):
        _calipers.snapshot_decode(reseal(data[:8] + struct.pack("<I", 2) + data[12:]))
    with pytest.raises(ValueError, match="checksum mismatch"):
        _calipers.snapshot_decode(data[:-20] + bytes([data[-20] ^ 1]) + data[-19:])
    with pytest.raises(ValueError, match="bytes after the traces"):
        _calipers.snapshot_decode(reseal(data[:-8] + b"\0" + data[-8:]))


FUZZ = textwrap.dedent("""
    import random, struct, sys
    from calipers import _calipers
    traces, rounds = eval(sys.argv[1]), int(sys.argv[2])
    data = _calipers.snapshot_encode(traces, '{"limit": 3, "name": "fuzz"}')
    def fnv1a(b):
        h = 0xCBF29CE484222325
        for x in b:
            h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        return h
    rng = random.Random(1234)
    accepted = refused = 0
    for r in range(rounds):
        m = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            m[rng.randrange(len(m))] = rng.randrange(256)
        if r % 2:
            m[-8:] = struct.pack("<Q", fnv1a(m[:-8]))
        try:
            out = _calipers.snapshot_decode(bytes(m))
        except ValueError as e:
            assert str(e) and "\\n" not in str(e), repr(e)
            refused += 1
        else:
            assert _calipers.snapshot_decode(_calipers.snapshot_encode(*out)) == out
            accepted += 1
    print(accepted, refused)
""")


def test_mutations_never_crash():
    """Random byte mutations (half with the checksum made right, so that they
    reach the checks behind it), in a subprocess: a crash is a failure, not
    the end of the test run."""
    proc = subprocess.run([sys.executable, "-c", FUZZ, repr(sample_traces()), "4000"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    accepted, refused = map(int, proc.stdout.split())
    assert accepted + refused == 4000 and accepted > 50 and refused > 2000


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_write_and_read_a_file(tmp_path, umask):
    path = tmp_path / "mem.calsnap"
    old = os.umask(umask)
    try:
        _calipers.snapshot_write(str(path), sample_traces(), '{"limit": 3}')
    finally:
        os.umask(old)
    assert mode(path) == 0o666 & ~umask
    assert path.read_bytes() == _calipers.snapshot_encode(sample_traces(), '{"limit": 3}')
    assert _calipers.snapshot_read(str(path)) == (sample_traces(), '{"limit": 3}')
    assert _calipers.snapshot_read(path) == (sample_traces(), '{"limit": 3}')  # PathLike
    assert os.listdir(tmp_path) == ["mem.calsnap"]  # no temporary file left
    # replaced whole
    _calipers.snapshot_write(path, [], "{}")
    assert _calipers.snapshot_read(path) == ([], "{}")


def test_write_refuses_links_and_non_files(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "link.calsnap"
    link.symlink_to(victim)
    with pytest.raises(OSError) as e:
        _calipers.snapshot_write(str(link), sample_traces(), "{}")
    assert e.value.errno == errno.ELOOP and e.value.filename == str(link)
    assert link.is_symlink() and victim.read_text() == "precious\n"
    dangling = tmp_path / "dangling.calsnap"
    dangling.symlink_to(tmp_path / "created")
    with pytest.raises(OSError):
        _calipers.snapshot_write(str(dangling), [], "{}")
    assert not (tmp_path / "created").exists()
    with pytest.raises(IsADirectoryError):
        _calipers.snapshot_write(str(tmp_path), [], "{}")
    with pytest.raises(FileNotFoundError):
        _calipers.snapshot_write(str(tmp_path / "no" / "such.calsnap"), [], "{}")
    # bad traces: nothing written
    with pytest.raises(ValueError):
        _calipers.snapshot_write(str(tmp_path / "bad.calsnap"), [(0, -1, (), 0)], "{}")
    assert not (tmp_path / "bad.calsnap").exists()


def test_read_refuses_what_is_not_a_snapshot_file(tmp_path):
    with pytest.raises(IsADirectoryError):
        _calipers.snapshot_read(str(tmp_path))
    with pytest.raises(FileNotFoundError) as e:
        _calipers.snapshot_read(str(tmp_path / "missing"))
    assert e.value.filename == str(tmp_path / "missing")
    good = tmp_path / "good.calsnap"
    _calipers.snapshot_write(str(good), sample_traces(), "{}")
    link = tmp_path / "link"
    link.symlink_to(good)
    with pytest.raises(OSError) as e:
        _calipers.snapshot_read(str(link))
    assert e.value.errno == errno.ELOOP
    profile = tmp_path / "profile.json"
    profile.write_text('{"schema": "calipers/1"}\n')
    with pytest.raises(ValueError, match="profile.json: not a calipers snapshot"):
        _calipers.snapshot_read(str(profile))
    bad = tmp_path / "bad.calsnap"
    bad.write_bytes(good.read_bytes()[:-1])
    with pytest.raises(ValueError, match="bad.calsnap: truncated"):
        _calipers.snapshot_read(str(bad))
    # A FIFO is refused at once: opening it must not wait for a writer
    # (in a subprocess, so that a regression hangs only that).
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys\nfrom calipers import _calipers\n"
         "try:\n    _calipers.snapshot_read(sys.argv[1])\n"
         "except ValueError as e:\n    print(e)\n", str(fifo)],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "not a regular file" in proc.stdout
