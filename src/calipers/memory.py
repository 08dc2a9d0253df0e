"""calipers.memory: the standard library's ``tracemalloc`` API over
calipers' sampled allocations.

Code written for ``tracemalloc`` works by changing one import::

    import calipers.memory as tracemalloc

    tracemalloc.start()
    work()
    snapshot = tracemalloc.take_snapshot()
    for stat in snapshot.statistics("lineno")[:10]:
        print(stat)       # a.py:12: size=4.1 MiB ± 96.0 KiB, count=9012 ± 210, ...

The program must run under ``calipers run``, whose allocation shim samples
allocations (a block is chosen with a probability proportional to its
size, about one per ``--memory-interval`` bytes); :func:`start` raises
RuntimeError otherwise.  Python and native (``malloc``) allocations are
both seen: a trace's ``domain`` is :data:`PYTHON_DOMAIN` or
:data:`NATIVE_DOMAIN`.

What differs from ``tracemalloc``, and why:

- Each trace is a *sample*: ``Trace.size`` is the bytes it stands for (an
  unbiased estimate), ``Trace.block_size`` the size of the one block that
  was sampled.  ``Statistic.size`` and ``Statistic.count`` are estimates
  with standard errors (``size_stderr``, ``count_stderr``), printed as
  "± X"; traced exactly (``calipers run --memory-interval 1``) they are
  tracemalloc's numbers and the errors are zero.  The errors are those of
  independent (Horvitz-Thompson) sampling for blocks smaller than the
  sampling interval: calipers' sampler lays its sample points at more
  even gaps (src/core/cal_bsamp.h), so the real error is about that for a
  line whose allocations are scattered among others', and smaller, down
  to a third, for a line that allocates many blocks in a row: the errors
  err on the safe side, and ``StatisticDiff.significant`` towards "not
  significant".  A block at least as large as the interval gets the
  sampler's own variance (docs/INTERNALS.md, "Memory snapshots").
- With a limit of 16 frames or more, a deeper stack keeps both ends (a
  quarter of the limit at the root, where the work began, the rest at the
  leaf, where the block was allocated); the frames elided between them
  are shown by ``Traceback.format()`` as "... N frames elided ...".  A
  smaller limit keeps the innermost frames, as tracemalloc does.
- ``_get_traces()`` returns 6-tuples (domain, size, frames,
  total_nframe, block_size, root_kept); :class:`Snapshot` accepts
  tracemalloc's 4-tuples too.
- Allocations made by a thread that does not hold the GIL are counted in
  the profile but not traced.
- ``cumulative=True`` counts a frame once per trace, so a recursive
  function is not credited twice for one block (``tracemalloc`` adds it
  once per appearance, and can report more than was allocated).
- ``Snapshot.dump()`` writes calipers' binary snapshot file, not a pickle
  (loading a pickle runs code); snapshots still pickle.
- Traces made before :func:`start` are not reported, but the sampler
  itself runs for the whole ``calipers run``; :func:`stop` only stops
  reporting, and :func:`clear_traces` hides the traces made so far (the
  profile still follows them: :func:`get_tracemalloc_memory` does not
  shrink).

Importing this module has no side effects.
"""

import fnmatch
import json
import linecache
import math
import operator
import os
import sys
import time
from collections.abc import Iterable, Sequence
from functools import total_ordering

__all__ = [
    "PYTHON_DOMAIN", "NATIVE_DOMAIN",
    "start", "stop", "is_tracing", "take_snapshot", "get_traced_memory",
    "reset_peak", "clear_traces", "get_object_traceback", "get_traceback_limit",
    "get_tracemalloc_memory",
    "Frame", "Traceback", "Trace", "Statistic", "StatisticDiff", "BaseFilter",
    "Filter", "DomainFilter", "Snapshot",
]

#: The domain of blocks from Python's allocators (PyMem, PyObject), as in
#: ``tracemalloc``.
PYTHON_DOMAIN = 0
#: The domain of blocks from ``malloc`` and friends called by native code.
NATIVE_DOMAIN = 1

#: The most frames a traceback may keep (tracemalloc's limit).
MAX_NFRAME = 65535
_DEFAULT_NFRAME = 64

# The module's state.  Changed only by start() and stop(), under the GIL.
_tracing = False
_traceback_limit = _DEFAULT_NFRAME

_ENGINE_CALLS = ("memory_available", "memory_mark", "memory_traced",
                 "memory_reset_peak", "memory_traces", "memory_object_traceback",
                 "memory_info")
_CODEC_CALLS = ("snapshot_encode", "snapshot_decode", "snapshot_write", "snapshot_read",
                "snapshot_sums")


def _extension(names, what):
    """The engine module, if it has every function in `names`; else raise
    RuntimeError saying that this build of calipers lacks `what`."""
    try:
        from calipers import _calipers
    except ImportError as exc:
        raise RuntimeError("calipers.memory: the calipers engine could not be "
                           "imported (%s)" % exc) from None
    missing = [name for name in names if not hasattr(_calipers, name)]
    if missing:
        raise RuntimeError("calipers.memory: this build of calipers has no %s "
                           "(calipers._calipers lacks %s)" % (what, missing[0]))
    return _calipers


def _engine():
    return _extension(_ENGINE_CALLS, "memory tracing engine")


def _codec():
    return _extension(_CODEC_CALLS, "snapshot file support")


# --- Sizes -----------------------------------------------------------------

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def _format_size(size, sign=False):
    """`size` bytes for a person, as tracemalloc writes them: "66 B",
    "12.3 KiB", "4096 KiB" (at most 4 digits, one decimal below 100)."""
    plus = "+" if sign else ""
    last = len(_UNITS) - 1
    for index, unit in enumerate(_UNITS):
        magnitude = abs(size)
        if index and magnitude < 100:
            return "%{}.1f %s".format(plus) % (size, unit)
        if magnitude < 10 * 1024 or index == last:
            return "%{}.0f %s".format(plus) % (size, unit)
        size = size / 1024
    raise AssertionError("unreachable")


def _format_error(stderr, size):
    """" ± X" when `stderr` is nonzero, else ""."""
    if not stderr:
        return ""
    if size:
        return " \u00b1 " + _format_size(stderr)
    return " \u00b1 %.0f" % stderr


# --- Frames, tracebacks, traces ---------------------------------------------

@total_ordering
class Frame:
    """One frame of a traceback: ``filename`` (str) and ``lineno`` (int)."""

    __slots__ = ("_frame",)

    def __init__(self, frame):
        # frame: the raw (filename, lineno) tuple
        self._frame = frame

    @property
    def filename(self):
        return self._frame[0]

    @property
    def lineno(self):
        return self._frame[1]

    def __eq__(self, other):
        if isinstance(other, Frame):
            return self._frame == other._frame
        return NotImplemented

    def __lt__(self, other):
        if isinstance(other, Frame):
            return self._frame < other._frame
        return NotImplemented

    def __hash__(self):
        return hash(self._frame)

    def __str__(self):
        return "%s:%s" % self._frame

    def __repr__(self):
        return "<Frame filename=%r lineno=%r>" % self._frame


@total_ordering
class Traceback(Sequence):
    """The frames where a block was allocated, a sequence of :class:`Frame`
    from the OLDEST to the most recent, as in ``tracemalloc``.

    `frames` are raw (filename, lineno) tuples, most recent first (as the
    engine gives them); `total_nframe` is how many frames the stack had
    (None: unknown); `root_kept` how many of the last raw frames are the
    root end of the stack.  When the stack was deeper than the frames kept,
    calipers keeps both ends: :attr:`elided_at` says where the missing
    frames were and :attr:`elided` how many.

    Equality, hashing and ordering look at the frames only, as
    ``tracemalloc``'s do.
    """

    __slots__ = ("_frames", "_total_nframe", "_root_kept")

    def __init__(self, frames, total_nframe=None, root_kept=0):
        self._frames = tuple(reversed(frames))
        self._total_nframe = total_nframe
        self._root_kept = root_kept

    @property
    def total_nframe(self):
        """Frames the stack had when the block was allocated (None if
        unknown, as in the tracebacks of statistics)."""
        return self._total_nframe

    @property
    def elided_at(self):
        """The index (oldest first) of the frame before which frames were
        elided: frames ``[:elided_at]`` are the root end of the stack,
        ``[elided_at:]`` the leaf end.  None when the frames kept have no
        gap between them: nothing was elided, or only the oldest frames
        were (``tracemalloc``'s way, ``root_kept == 0``)."""
        kept = self._root_kept
        if not kept or kept >= len(self._frames):
            return None
        if self._total_nframe is not None and self._total_nframe <= len(self._frames):
            return None
        return kept

    @property
    def elided(self):
        """How many frames of the stack are missing (0 when none; None if
        unknown)."""
        if self._total_nframe is None:
            return None
        return max(self._total_nframe - len(self._frames), 0)

    def __len__(self):
        return len(self._frames)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(Frame(frame) for frame in self._frames[index])
        return Frame(self._frames[index])

    def __contains__(self, frame):
        return isinstance(frame, Frame) and frame._frame in self._frames

    def __hash__(self):
        return hash(self._frames)

    def __eq__(self, other):
        if isinstance(other, Traceback):
            return self._frames == other._frames
        return NotImplemented

    def __lt__(self, other):
        if isinstance(other, Traceback):
            return self._frames < other._frames
        return NotImplemented

    def __str__(self):
        # tracemalloc shows the first frame of the sequence: the oldest.
        if not self._frames:
            return "<unknown>:0"
        return "%s:%s" % self._frames[0]

    def __repr__(self):
        text = "<Traceback %s" % (tuple(self),)
        if self._total_nframe is not None:
            text += " total_nframe=%s" % self._total_nframe
        if self.elided_at is not None:
            text += " elided_at=%s" % self.elided_at
        return text + ">"

    def __reduce__(self):
        # Rebuilt from the raw frames (most recent first), as given.
        return (Traceback, (tuple(reversed(self._frames)), self._total_nframe,
                            self._root_kept))

    def format(self, limit=None, most_recent_first=False):
        """The traceback as lines, like the ``traceback`` module's: ``File
        "x.py", line 3`` then the source line (when ``linecache`` finds it).

        `limit` > 0 keeps the `limit` most recent frames, < 0 the oldest
        ``-limit``.  Where frames were elided in the middle of the stack
        (:attr:`elided_at`) a line ``  ... N frames elided ...`` stands
        for them."""
        indices = range(len(self._frames))
        if limit is not None:
            indices = indices[-limit:] if limit > 0 else indices[:limit]
        gap = self.elided_at
        items = []
        for index in indices:
            if gap is not None and index == gap and index - 1 in indices:
                items.append(None)
            items.append(index)
        if most_recent_first:
            items.reverse()
        lines = []
        for index in items:
            if index is None:
                count = self.elided
                lines.append("  ... %s elided ..." % (
                    "frames" if count is None else
                    "%d frame%s" % (count, "" if count == 1 else "s")))
                continue
            filename, lineno = self._frames[index]
            lines.append('  File "%s", line %s' % (filename, lineno))
            source = linecache.getline(filename, lineno).strip()
            if source:
                lines.append("    %s" % source)
        return lines


def _full(raw):
    """A raw trace as the engine's 6-tuple (domain, size, frames,
    total_nframe, block_size, root_kept); tracemalloc's 4-tuples are exact
    traces (block_size == size) that kept the leaf end."""
    if len(raw) == 6:
        return tuple(raw)
    domain, size, frames, total_nframe = raw
    return (domain, size, frames, total_nframe, size, 0)


class Trace:
    """One traced block: ``domain``, ``size``, ``traceback``; and, since it
    is a sample, ``block_size`` (the bytes of the block that was sampled)
    and ``count`` (how many blocks it stands for, ``size / block_size``)."""

    __slots__ = ("_trace",)

    def __init__(self, trace):
        # trace: a raw 6-tuple, or tracemalloc's 4-tuple (see _full)
        self._trace = trace

    @property
    def domain(self):
        return self._trace[0]

    @property
    def size(self):
        return self._trace[1]

    @property
    def block_size(self):
        return self._trace[4] if len(self._trace) > 4 else self._trace[1]

    @property
    def count(self):
        block_size = self.block_size
        return self.size / block_size if block_size else 1.0

    @property
    def traceback(self):
        raw = self._trace
        return Traceback(raw[2], raw[3], raw[5] if len(raw) > 5 else 0)

    def __eq__(self, other):
        if isinstance(other, Trace):
            return _full(self._trace) == _full(other._trace)
        return NotImplemented

    def __hash__(self):
        return hash(_full(self._trace))

    def __str__(self):
        return "%s: %s" % (self.traceback, _format_size(self.size))

    def __repr__(self):
        text = "<Trace domain=%s size=%s, traceback=%r" % (
            self.domain, _format_size(self.size), self.traceback)
        if self.block_size != self.size:
            text += " block_size=%s" % _format_size(self.block_size)
        return text + ">"


class _Traces(Sequence):
    """The traces of a snapshot: a sequence of :class:`Trace` made on
    demand from the raw tuples (``_traces``), so a snapshot of a million
    traces does not hold a million objects."""

    def __init__(self, traces):
        self._traces = traces

    def __len__(self):
        return len(self._traces)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(Trace(raw) for raw in self._traces[index])
        return Trace(self._traces[index])

    def __contains__(self, trace):
        if not isinstance(trace, Trace):
            return False
        wanted = _full(trace._trace)
        return any(_full(raw) == wanted for raw in self._traces)

    def __eq__(self, other):
        if not isinstance(other, _Traces):
            return NotImplemented
        if self._traces == other._traces:
            return True
        return (len(self._traces) == len(other._traces)
                and all(_full(a) == _full(b)
                        for a, b in zip(self._traces, other._traces)))

    __hash__ = None

    def __repr__(self):
        return "<Traces len=%s>" % len(self)


# --- Statistics --------------------------------------------------------------

class Statistic:
    """Memory allocated at one place (a :class:`Traceback`): ``size`` bytes
    in ``count`` blocks, both estimated from the samples, with their
    standard errors ``size_stderr`` and ``count_stderr`` (0 when traced
    exactly)."""

    __slots__ = ("traceback", "size", "count", "size_stderr", "count_stderr")

    def __init__(self, traceback, size, count, *, size_stderr=0.0, count_stderr=0.0):
        self.traceback = traceback
        self.size = size
        self.count = count
        self.size_stderr = size_stderr
        self.count_stderr = count_stderr

    def _key(self):
        return (self.traceback, self.size, self.count, self.size_stderr,
                self.count_stderr)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        if isinstance(other, Statistic):
            return self._key() == other._key()
        return NotImplemented

    def __str__(self):
        text = "%s: size=%s%s, count=%i%s" % (
            self.traceback, _format_size(self.size),
            _format_error(self.size_stderr, True), self.count,
            _format_error(self.count_stderr, False))
        if self.count:
            text += ", average=%s" % _format_size(self.size / self.count)
        return text

    def __repr__(self):
        text = "<Statistic traceback=%r size=%i count=%i" % (
            self.traceback, self.size, self.count)
        if self.size_stderr or self.count_stderr:
            text += " size_stderr=%.0f count_stderr=%.1f" % (
                self.size_stderr, self.count_stderr)
        return text + ">"

    def _sort_key(self):
        return (self.size, self.count, self.traceback)


class StatisticDiff:
    """The change at one place between an old snapshot and a new one:
    ``size`` and ``count`` now, ``size_diff`` and ``count_diff`` since,
    with standard errors (``size_stderr``, ``count_stderr``,
    ``size_diff_stderr``, ``count_diff_stderr``; 0 when traced exactly).

    The errors of a difference treat the two snapshots as independent
    samples, which overstates them for blocks that live through both."""

    __slots__ = ("traceback", "size", "size_diff", "count", "count_diff",
                 "size_stderr", "count_stderr", "size_diff_stderr",
                 "count_diff_stderr")

    def __init__(self, traceback, size, size_diff, count, count_diff, *,
                 size_stderr=0.0, count_stderr=0.0, size_diff_stderr=0.0,
                 count_diff_stderr=0.0):
        self.traceback = traceback
        self.size = size
        self.size_diff = size_diff
        self.count = count
        self.count_diff = count_diff
        self.size_stderr = size_stderr
        self.count_stderr = count_stderr
        self.size_diff_stderr = size_diff_stderr
        self.count_diff_stderr = count_diff_stderr

    @property
    def significant(self):
        """Whether the change is more than noise: ``|size_diff|`` above
        three standard errors; traced exactly, any change."""
        if not self.size_diff_stderr:
            return bool(self.size_diff or self.count_diff)
        return abs(self.size_diff) > 3 * self.size_diff_stderr

    def _key(self):
        return (self.traceback, self.size, self.size_diff, self.count,
                self.count_diff, self.size_stderr, self.count_stderr,
                self.size_diff_stderr, self.count_diff_stderr)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        if isinstance(other, StatisticDiff):
            return self._key() == other._key()
        return NotImplemented

    def __str__(self):
        text = "%s: size=%s%s (%s%s), count=%i%s (%+i%s)" % (
            self.traceback,
            _format_size(self.size), _format_error(self.size_stderr, True),
            _format_size(self.size_diff, True),
            _format_error(self.size_diff_stderr, True),
            self.count, _format_error(self.count_stderr, False),
            self.count_diff, _format_error(self.count_diff_stderr, False))
        if self.count:
            text += ", average=%s" % _format_size(self.size / self.count)
        return text

    def __repr__(self):
        text = "<StatisticDiff traceback=%r size=%i (%+i) count=%i (%+i)" % (
            self.traceback, self.size, self.size_diff, self.count, self.count_diff)
        if self.size_diff_stderr or self.count_diff_stderr:
            text += " size_diff_stderr=%.0f count_diff_stderr=%.1f" % (
                self.size_diff_stderr, self.count_diff_stderr)
        return text + ">"

    def _sort_key(self):
        return (abs(self.size_diff), self.size, abs(self.count_diff), self.count,
                self.traceback)


# --- Filters -------------------------------------------------------------------

def _normalize_filename(filename):
    filename = os.path.normcase(filename)
    if filename.endswith(".pyc"):
        return filename[:-1]
    return filename


class BaseFilter:
    """A filter of :meth:`Snapshot.filter_traces`: ``inclusive`` filters
    keep the traces they match, exclusive ones drop them."""

    def __init__(self, inclusive):
        self.inclusive = inclusive

    def _match(self, trace):
        raise NotImplementedError


class Filter(BaseFilter):
    """Keep (``inclusive``) or drop the traces allocated in files matching
    `filename_pattern` (``fnmatch``; a ``.pyc`` suffix is read as ``.py``),
    at line `lineno` (None: any), looking at the most recent frame only or
    at ``all_frames``, in `domain` (None: any)."""

    def __init__(self, inclusive, filename_pattern, lineno=None, all_frames=False,
                 domain=None):
        super().__init__(inclusive)
        self._filename_pattern = _normalize_filename(filename_pattern)
        self.lineno = lineno
        self.all_frames = all_frames
        self.domain = domain

    @property
    def filename_pattern(self):
        return self._filename_pattern

    def __repr__(self):
        return "<Filter inclusive=%r filename_pattern=%r lineno=%r all_frames=%r " \
               "domain=%r>" % (self.inclusive, self._filename_pattern, self.lineno,
                               self.all_frames, self.domain)

    def _frame_matches(self, filename, lineno):
        if not fnmatch.fnmatch(_normalize_filename(filename), self._filename_pattern):
            return False
        return self.lineno is None or lineno == self.lineno

    def _match_frame(self, filename, lineno):
        """Whether to keep a trace whose most recent frame is this one."""
        return self._frame_matches(filename, lineno) == bool(self.inclusive)

    def _match_traceback(self, frames):
        """Whether to keep a trace with these raw frames (most recent
        first), its domain aside."""
        if not self.all_frames:
            return self._match_frame(*frames[0])
        found = any(self._frame_matches(filename, lineno) for filename, lineno in frames)
        return found == bool(self.inclusive)

    def _match(self, trace):
        keep = self._match_traceback(trace[2])
        if self.domain is None:
            return keep
        if self.inclusive:
            return keep and trace[0] == self.domain
        return keep or trace[0] != self.domain


class DomainFilter(BaseFilter):
    """Keep (``inclusive``) or drop the traces of one `domain`."""

    def __init__(self, inclusive, domain):
        super().__init__(inclusive)
        self._domain = domain

    @property
    def domain(self):
        return self._domain

    def __repr__(self):
        return "<DomainFilter inclusive=%r domain=%r>" % (self.inclusive, self._domain)

    def _match(self, trace):
        return (trace[0] == self._domain) == bool(self.inclusive)


# --- Snapshots -------------------------------------------------------------------

# The per-traceback sums that statistics are made of: [size, count, variance
# of size, variance of count].  Sums over traces, so they add up.
_SIZE, _COUNT, _VAR_SIZE, _VAR_COUNT = range(4)


def _sum_by_frames(raw_traces, mean=None):
    """The sums of `raw_traces` per distinct frames tuple: a list of
    [frames, total_nframe, root_kept, size, count, var_size, var_count]
    (total_nframe None if its traces disagree; root_kept the first's).

    HOW IT WORKS: a trace that sampled a block of b bytes with weight s
    (s >= b) stands for s bytes, in c = s / b blocks: read as if the block
    was chosen independently with probability p = b / s.  That is the
    Horvitz-Thompson estimator,
    whose variance is estimated, per sampled unit, by y**2 (1 - p) / p**2:
    s (s - b) for the bytes (y = b) and c (c - 1) for the count (y = 1).
    Exact traces (s == b) add nothing.  Sums over traces, so each group's
    variance is the sum of its traces'.

    LIMITATION: calipers' sampler (cal_bsamp.h) is not independent: its
    sample points are laid at gaps drawn from [mean/2, 3 mean/2], which
    spreads them more evenly than independent sampling would, and gives a
    block k points (weight k * mean) rather than weight b / p.  Both are
    unbiased, but the variance of the even gaps depends on how a line's
    allocations interleave with the others', which a snapshot does not
    record.  Blocks of one line far apart in the stream are sampled
    almost independently (the variance here), blocks close together less
    so (less variance: a line allocating 5,000 blocks in a row spread a
    third as much as this says); and a block larger than the mean gets
    k * mean with k within one of b / mean, far less variance than
    s (s - b).  So in practice these are upper bounds.

    When the sampling mean m is known (the snapshot's meta `alloc_mean`),
    a block of at least m bytes is counted with the renewal process's own
    variance instead: the number of points in b bytes has variance
    b sigma^2 / m^3 for gaps of variance sigma^2 = m^2 / 12 (Cox, Renewal
    Theory, 1962, 4.5), so var(s) = b m / 12 and var(c) = m / (12 b).

    The engine shares one frames tuple between the traces of one
    traceback, so traces are first summed by the tuple's identity, in C
    (snapshot_sums: a million traces in milliseconds, and without an
    object per trace, which --memory-interval 1 would trace); equal tuples
    that are not the same object are merged by the callers, which hash
    each distinct tuple once.  `raw_traces` keeps every tuple alive
    meanwhile.
    """
    return _codec().snapshot_sums(raw_traces, mean or 0)


def _add(group, key, entry):
    """Add the sums of a _sum_by_frames entry to group[key]."""
    sums = group.get(key)
    if sums is None:
        group[key] = [entry[3], entry[4], entry[5], entry[6]]
    else:
        sums[0] += entry[3]
        sums[1] += entry[4]
        sums[2] += entry[5]
        sums[3] += entry[6]


_UNKNOWN_FRAME = ("<unknown>", 0)


class Snapshot:
    """The traces of the sampled blocks alive at one moment.

    `traces` are raw tuples: the engine's (domain, size, frames,
    total_nframe, block_size, root_kept) or ``tracemalloc``'s (domain,
    size, frames, total_nframe), which are exact traces; `frames` are
    (filename, lineno) tuples, most recent first.  ``traces`` is a
    sequence of :class:`Trace`; ``meta`` a dict of what is known of where
    the snapshot was taken (pid, time, alloc_mean: the mean bytes between
    samples, traced: the exact (current, peak) bytes, argv), possibly
    empty."""

    def __init__(self, traces, traceback_limit, meta=None):
        self.traces = _Traces(traces)
        self.traceback_limit = traceback_limit
        self.meta = dict(meta) if meta else {}

    # -- Files

    def _extra_attributes(self):
        extras = {}
        for name, value in vars(self).items():
            if name in ("traces", "traceback_limit", "meta"):
                continue
            _check_json(value, "snapshot attribute %r" % name)
            extras[name] = value
        return extras

    def _meta_json(self):
        meta = {}
        for name, value in self.meta.items():
            _check_json(value, "snapshot.meta[%r]" % (name,))
            meta[name] = value
        meta["traceback_limit"] = self.traceback_limit
        meta["attributes"] = self._extra_attributes()
        return json.dumps(meta, sort_keys=True, allow_nan=False)

    def dump(self, filename):
        """Write the snapshot to `filename` (a path, or a binary file object)
        in calipers' snapshot format (docs/FORMAT.md, "Snapshot files").

        Attributes a program added to the snapshot are saved with it if
        they are JSON values (str, numbers, bools, None, lists, dicts with
        str keys); others raise TypeError."""
        codec = _codec()
        meta_json = self._meta_json()
        raw = [_full(trace) for trace in self.traces._traces]
        if hasattr(filename, "write"):
            filename.write(codec.snapshot_encode(raw, meta_json))
        else:
            codec.snapshot_write(os.fspath(filename), raw, meta_json)

    @staticmethod
    def load(filename):
        """Read a snapshot written by :meth:`dump` from `filename` (a path, or
        a binary file object).  Raises ValueError if it is not a snapshot
        file, or is damaged."""
        codec = _codec()
        if hasattr(filename, "read"):
            raw, meta_json = codec.snapshot_decode(filename.read())
        else:
            raw, meta_json = codec.snapshot_read(os.fspath(filename))
        meta = json.loads(meta_json) if meta_json else {}
        if not isinstance(meta, dict):
            raise ValueError("calipers.memory: the snapshot's metadata is not a "
                             "JSON object")
        limit = meta.pop("traceback_limit", None)
        extras = meta.pop("attributes", None) or {}
        snapshot = Snapshot(list(raw), limit, meta)
        for name, value in extras.items():
            setattr(snapshot, name, value)
        return snapshot

    @staticmethod
    def merge(snapshots):
        """One snapshot holding the traces of all of `snapshots`: the
        processes of a run (``calipers run --snapshot-every`` writes a file
        per process), taken at about the same time.  Its traceback limit is
        the largest; its meta keeps what they all agree on (the sampling
        mean among it, which the standard errors use) and ``pids``."""
        snapshots = list(snapshots)
        if not snapshots:
            raise ValueError("calipers.memory: no snapshots to merge")
        raw = []
        for snapshot in snapshots:
            if not isinstance(snapshot, Snapshot):
                raise TypeError("expected Snapshot, got %s" % type(snapshot).__name__)
            raw.extend(snapshot.traces._traces)
        limits = [s.traceback_limit for s in snapshots if s.traceback_limit is not None]
        first = snapshots[0].meta
        meta = {k: v for k, v in first.items()
                if all(k in s.meta and s.meta[k] == v for s in snapshots[1:])}
        meta["pids"] = [s.meta.get("pid") for s in snapshots]
        return Snapshot(raw, max(limits) if limits else None, meta)

    # -- Filters

    def filter_traces(self, filters):
        """A new snapshot with the traces that pass `filters` (a list of
        :class:`Filter` and :class:`DomainFilter`): a trace is kept if it
        matches at least one inclusive filter (when there are any) and no
        exclusive one.  An empty list copies the snapshot."""
        if not isinstance(filters, Iterable):
            raise TypeError("filters must be a list of filters, not %s"
                            % type(filters).__name__)
        filters = list(filters)
        raw_traces = self.traces._traces
        if not filters:
            return Snapshot(list(raw_traces), self.traceback_limit, self.meta)
        include = [f for f in filters if f.inclusive]
        exclude = [f for f in filters if not f.inclusive]

        def keep(raw):
            if include and not any(f._match(raw) for f in include):
                return False
            return all(f._match(raw) for f in exclude)

        if all(type(f) in (Filter, DomainFilter) for f in filters):
            # Our filters look only at the domain and the frames: decide
            # once per (domain, frames tuple).
            decided = {}
            kept = []
            for raw in raw_traces:
                key = (raw[0], id(raw[2]))
                verdict = decided.get(key)
                if verdict is None:
                    verdict = decided[key] = keep(raw)
                if verdict:
                    kept.append(raw)
        else:
            kept = [raw for raw in raw_traces if keep(raw)]
        return Snapshot(kept, self.traceback_limit, self.meta)

    # -- Statistics

    def _sampling_mean(self):
        """The mean bytes between samples the traces were taken with, if
        the snapshot says (more than 1: sampled), else None."""
        mean = self.meta.get("alloc_mean")
        return mean if isinstance(mean, (int, float)) and mean > 1 else None

    def _group_by(self, key_type, cumulative):
        """{Traceback: [size, count, var_size, var_count]} by `key_type`."""
        if key_type not in ("traceback", "filename", "lineno"):
            raise ValueError("unknown key_type: %r" % (key_type,))
        if cumulative and key_type == "traceback":
            raise ValueError("cumulative mode cannot by used with key type %r"
                             % key_type)
        group = {}
        entries = _sum_by_frames(self.traces._traces, self._sampling_mean())
        if key_type == "traceback":
            # Equal frames from different trace tuples share one key.  Its
            # traceback has no total_nframe (as tracemalloc's), unless
            # frames were elided from the middle of the stack: then the
            # first trace says where, and the total is kept if every trace
            # agrees on it, for format() to say how many.
            shapes = {}
            for entry in entries:
                frames = entry[0]
                _add(group, frames, entry)
                total, kept = entry[1], entry[2]
                # (Totals that differ: some stack was deeper than the frames.)
                elided = bool(kept) and (total is None or total > len(frames))
                shape = shapes.get(frames)
                if shape is None:
                    shapes[frames] = [total if elided else None, kept if elided else 0]
                elif shape[0] != total:
                    shape[0] = None
            return {Traceback(frames, *shapes[frames]): sums
                    for frames, sums in group.items()}
        if key_type == "lineno":
            for entry in entries:
                frames = entry[0] or (_UNKNOWN_FRAME,)
                if cumulative:
                    for frame in set(frames):
                        _add(group, frame, entry)
                else:
                    _add(group, frames[0], entry)
            return {Traceback((frame,)): sums for frame, sums in group.items()}
        for entry in entries:  # "filename"
            frames = entry[0] or (_UNKNOWN_FRAME,)
            if cumulative:
                for filename in {frame[0] for frame in frames}:
                    _add(group, filename, entry)
            else:
                _add(group, frames[0][0], entry)
        return {Traceback(((filename, 0),)): sums for filename, sums in group.items()}

    def statistics(self, key_type, cumulative=False):
        """The allocations grouped by `key_type` ("filename", "lineno" or
        "traceback"), largest first: a list of :class:`Statistic`.

        With `cumulative`, a trace counts for every frame of its traceback
        (once per frame, however often it recurs), not only the most
        recent; not with "traceback"."""
        statistics = [
            Statistic(traceback, sums[0], round(sums[1]),
                      size_stderr=math.sqrt(sums[2]), count_stderr=math.sqrt(sums[3]))
            for traceback, sums in self._group_by(key_type, cumulative).items()]
        statistics.sort(key=Statistic._sort_key, reverse=True)
        return statistics

    def compare_to(self, old_snapshot, key_type, cumulative=False):
        """What changed since `old_snapshot`, grouped by `key_type` as in
        :meth:`statistics`: a list of :class:`StatisticDiff`, the biggest
        change first (by ``abs(size_diff)``, size, ``abs(count_diff)``,
        count, traceback)."""
        new = self._group_by(key_type, cumulative)
        old = old_snapshot._group_by(key_type, cumulative)
        nothing = (0, 0, 0, 0.0)
        statistics = []
        for traceback in list(new) + [tb for tb in old if tb not in new]:
            now = new.get(traceback, nothing)
            then = old.get(traceback, nothing)
            count, old_count = round(now[1]), round(then[1])
            statistics.append(StatisticDiff(
                traceback, now[0], now[0] - then[0], count, count - old_count,
                size_stderr=math.sqrt(now[2]), count_stderr=math.sqrt(now[3]),
                size_diff_stderr=math.sqrt(now[2] + then[2]),
                count_diff_stderr=math.sqrt(now[3] + then[3])))
        statistics.sort(key=StatisticDiff._sort_key, reverse=True)
        return statistics


def _check_json(value, what):
    """Raise TypeError unless `value` survives a trip through JSON unchanged."""
    try:
        same = json.loads(json.dumps(value, allow_nan=False)) == value
    except (TypeError, ValueError):
        same = False
    if not same:
        raise TypeError("calipers.memory: %s cannot be saved in a snapshot file: "
                        "only JSON values are (str, int, float, bool, None, and "
                        "lists and dicts with str keys of them), not %s"
                        % (what, type(value).__name__))


# --- Tracing ----------------------------------------------------------------

def start(nframe=_DEFAULT_NFRAME):
    """Start reporting this process's sampled allocations, with tracebacks
    of at most `nframe` frames (both ends of a deeper stack are kept).

    Traces made before are not reported, and :func:`get_traced_memory`
    counts from now.  Does nothing if already tracing.  Raises ValueError
    if `nframe` is not in [1; 65535], and RuntimeError if this process's
    allocations are not being sampled (it must run under ``calipers
    run``)."""
    global _tracing, _traceback_limit
    nframe = operator.index(nframe)
    if not 1 <= nframe <= MAX_NFRAME:
        raise ValueError("the number of frames must be in range [1; %d]" % MAX_NFRAME)
    if _tracing:
        return
    engine = _engine()
    if not engine.memory_available():
        raise RuntimeError("calipers.memory: this process's allocations are not "
                           "being sampled; run the program under `calipers run`")
    engine.memory_mark()
    _traceback_limit = nframe
    _tracing = True


def stop():
    """Stop reporting allocations: :func:`take_snapshot` raises and
    :func:`get_traced_memory` reads (0, 0) until :func:`start`.  (The
    sampler keeps running for the profile.)"""
    global _tracing
    _tracing = False


def is_tracing():
    """Whether :func:`start` was called (and not :func:`stop`)."""
    return _tracing


def get_traceback_limit():
    """The most frames a trace's traceback keeps: `nframe` of the last
    :func:`start` (64 before any)."""
    return _traceback_limit


def _get_traces():
    return _engine().memory_traces(get_traceback_limit(), True)


def _get_meta():
    meta = {"pid": os.getpid(), "time": time.time(), "argv": list(sys.argv)}
    try:
        engine = _engine()
        meta["alloc_mean"] = engine.memory_info().get("alloc_mean")
        meta["traced"] = list(engine.memory_traced())
    except RuntimeError:
        pass
    return meta


def take_snapshot():
    """A :class:`Snapshot` of the sampled blocks alive now, allocated
    since :func:`start` (or :func:`clear_traces`).

    Raises RuntimeError if not tracing.  (The message is
    "calipers.memory must be tracing memory allocations to take a
    snapshot": tracemalloc's wording, with its subject.)"""
    if not is_tracing():
        raise RuntimeError("calipers.memory must be tracing memory allocations "
                           "to take a snapshot")
    traces = _get_traces()
    return Snapshot(traces, get_traceback_limit(), _get_meta())


def get_traced_memory():
    """(current, peak): how much the bytes allocated and not freed grew
    since :func:`start` or :func:`clear_traces`, and the most they grew
    since then or :func:`reset_peak`.  Exact (the shim counts every
    allocation and free), not estimated.  Unlike tracemalloc's, a block
    allocated before :func:`start` or :func:`clear_traces` and freed
    after it lowers current.  (0, 0) when not tracing."""
    if not _tracing:
        return (0, 0)
    current, peak = _engine().memory_traced()
    return (current, peak)


def reset_peak():
    """Set the peak of :func:`get_traced_memory` to the current bytes.
    Does nothing when not tracing."""
    if _tracing:
        _engine().memory_reset_peak()


def clear_traces():
    """Forget the traces made so far: snapshots and
    :func:`get_traced_memory` start again from now.  Does nothing when
    not tracing."""
    if _tracing:
        _engine().memory_mark()


def get_object_traceback(obj):
    """The :class:`Traceback` where `obj` was allocated, or None: when not
    tracing, or, usually, when its block was not one of the sampled ones
    (with the default sampling most objects are not)."""
    if not _tracing:
        return None
    found = _engine().memory_object_traceback(obj, get_traceback_limit())
    if found is None:
        return None
    frames, total_nframe, root_kept = found
    return Traceback(frames, total_nframe, root_kept)


def get_tracemalloc_memory():
    """The bytes the engine uses to trace allocations (0 in a build without
    the memory engine)."""
    try:
        engine = _engine()
    except RuntimeError:
        return 0
    return int(engine.memory_info().get("overhead_bytes", 0))
