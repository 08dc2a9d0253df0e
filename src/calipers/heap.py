"""calipers.heap: the heap as it is now -- what holds the memory, and why.

``scan()`` walks every object reachable from the roots once, in C (the
walk runs no Python code and changes nothing in the program), and returns
a :class:`Heap`: each object's shallow size, type, dominator and retained
size (the bytes that would be freed if it went), and, for the allocations
calipers sampled, the line that made it::

    from calipers import heap
    h = heap.scan()
    print(h)                        # the types holding the most
    h.largest(10)                   # the objects retaining the most
    h.retained(obj)                 # what freeing obj would free
    h.why_alive(obj)                # a shortest path from a root to obj
    later = heap.scan(); print(later.diff(h))
    h.save("app.heap"); old = heap.load("app.heap")

Sizes are what ``sys.getsizeof`` says (the object's ``__sizeof__`` plus the
collector's header), computed without running Python code: see
docs/INTERNALS.md, "Heap scanner", for the roots, the sizing rules, the
dominator algorithm and the limits.  Rules (:class:`Rules`) change how
objects are counted: ignored, sized otherwise, or counted with their
``__dict__`` as one ("virtual objects").
"""

import sys

from . import _calipers

__all__ = ["scan", "load", "Heap", "Rules", "TypeStat", "Node"]

_IGNORE, _SIZE, _VIRTUAL = 0, 1, 2


class Rules:
    """How the scan counts some objects (seed 004's rules, in C).

    Per object, per exact type, or per class and its subclasses (the
    nearest class in the type's MRO wins; an exact-type rule beats a
    subclass rule):

    - ``ignore(t)``: size 0 and no references followed (what it alone
      holds is not scanned);
    - ``size(t, n)``: a fixed size; ``size(t, f)``: ``f(obj)`` gives it,
      called after the walk (it may run any code: it runs with the scan
      finished, on objects held for the while);
    - ``virtual(t)``: an instance and its ``__dict__`` count as one object
      (the dict's bytes go to the instance, the dict leaves the totals);
    - ``ignore_object(obj)``: this object only.

    NumPy arrays have a built-in rule: an array counts its data only when
    it owns it (``ndarray.__sizeof__``), and refers to its ``base``, so a
    buffer shared by several views is counted once, to its owner.
    """

    def __init__(self):
        self._rules = []
        self._objects = []

    def _add(self, t, subclasses, kind, value):
        if not isinstance(t, type):
            raise TypeError("a heap rule applies to a type, not %r" % type(t).__name__)
        self._rules.append((t, bool(subclasses), kind, value))
        return self

    def ignore(self, t, subclasses=True):
        """Objects of type ``t`` (and its subclasses) count 0, hold nothing."""
        return self._add(t, subclasses, _IGNORE, None)

    def size(self, t, size, subclasses=True):
        """Objects of type ``t`` have ``size`` bytes (an int >= 0, or a
        callable of the object returning one)."""
        if not callable(size) and (not isinstance(size, int) or size < 0):
            raise ValueError("a heap size rule takes an int >= 0 or a callable")
        return self._add(t, subclasses, _SIZE, size)

    def virtual(self, t, subclasses=True):
        """Instances of ``t`` count with their ``__dict__`` as one object."""
        return self._add(t, subclasses, _VIRTUAL, None)

    def ignore_object(self, obj):
        """This object counts 0 and holds nothing."""
        self._objects.append(obj)
        return self


class TypeStat:
    """One type's totals: ``count`` objects, ``size`` shallow bytes,
    ``retained`` bytes (held by its objects that no object of the same type
    holds)."""

    __slots__ = ("type", "count", "size", "retained")

    def __init__(self, name, count, size, retained):
        self.type, self.count, self.size, self.retained = name, count, size, retained

    def __repr__(self):
        return "<TypeStat %s count=%d size=%d retained=%d>" % (
            self.type, self.count, self.size, self.retained)


class Node:
    """One scanned object: its ``index`` in the heap, ``address`` (its
    ``id()`` at the scan), ``type`` name, ``size``, ``retained`` bytes and
    ``name`` (modules, types and functions) or None."""

    __slots__ = ("index", "address", "type", "size", "retained", "name", "_idom", "_heap")

    def __repr__(self):
        what = self.type + (" %s" % self.name if self.name else "")
        return "<%s at 0x%x: %d bytes, retains %d>" % (what, self.address, self.size,
                                                       self.retained)


_NO_RULES = Rules()


def _fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0


def scan(rules=None):
    """Scan the heap now; returns a :class:`Heap`.

    ``rules``: a :class:`Rules`, or None.  Raises RuntimeError on a
    free-threaded Python (nothing would stop other threads from changing
    the heap during the walk).
    """
    if rules is not None and not isinstance(rules, Rules):
        raise TypeError("rules must be a calipers.heap.Rules")
    # No temporary containers: one freed onto the interpreter's free lists
    # would stay counted by the collector (gc.get_count()) as allocated.
    r = rules if rules is not None else _NO_RULES
    numpy = sys.modules.get("numpy")
    ndarray = None
    if numpy is not None:
        ndarray = getattr(numpy, "__dict__", None)
        ndarray = ndarray.get("ndarray") if type(ndarray) is dict else None
    graph = _calipers.heap_scan(r._rules, r._objects,
                                ndarray if isinstance(ndarray, type) else None)
    return Heap(graph)


def load(path):
    """The :class:`Heap` saved in the heap dump file ``path``
    (:meth:`Heap.save`, ``calipers run --heap-at-exit``, ``calipers heap
    PID``).  It answers the same questions as a scan's, but those about a
    live object: its objects were another moment's (often another
    process's), so ``find``, and ``retained``, ``dominator`` and
    ``why_alive`` given an object, raise TypeError; give them a
    :class:`Node` (from ``largest()``, ``node()``, ``of_type()``).
    ``meta`` holds what the writer recorded (pid, time, reason, ...).

    Raises OSError when the file cannot be read (a symbolic link is not
    followed), ValueError with a one-line reason when it is not a valid
    heap dump (every count, index and byte is checked)."""
    graph, meta = _calipers.heap_read(path)
    return Heap(graph, meta)


class Heap:
    """A scan's result (see the module's docstring).  Holds no reference to
    the program's objects: only their addresses, types and sizes, in C."""

    def __init__(self, graph, meta=None):
        import json

        self._g = graph
        self._types = _calipers.heap_types(graph)
        self.info = _calipers.heap_info(graph)
        try:  # a JSON object (checked in C), read as Python reads JSON
            self.meta = json.loads(meta) if meta else {}
        except (ValueError, RecursionError):
            self.meta = {}
        if not isinstance(self.meta, dict):
            self.meta = {}

    @property
    def loaded(self):
        """True for a heap read from a dump file (no live objects)."""
        return self.info["loaded"]

    def save(self, path, **meta):
        """Write this heap to the file ``path`` (docs/FORMAT.md, "Heap dump
        files"; read it with :func:`load`): replaced whole (a temporary file
        renamed over it), never through a symbolic link, never over what is
        not a regular file.  ``meta``: JSON-serialisable values recorded with
        it.  Raises OSError."""
        import json
        import os
        import time

        record = dict(self.meta)
        if not self.loaded:
            record.update(pid=os.getpid(), time=time.time(),
                          python="%d.%d.%d" % sys.version_info[:3],
                          walk_seconds=self.info["walk_seconds"],
                          analysis_seconds=self.info["analysis_seconds"])
        record.update(meta)
        _calipers.heap_write(self._g, path, json.dumps(record, sort_keys=True))

    def _index(self, x):
        """The node index of ``x``: a Node of this heap, or a live object
        (-1 if the scan did not see it)."""
        if isinstance(x, Node):
            if x._heap is not self:
                raise ValueError("that Node belongs to another Heap")
            return x.index
        if self.loaded:
            raise TypeError("this Heap was loaded from a dump: its objects are not this "
                            "process's; pass a Node (from largest(), node(), of_type())")
        return _calipers.heap_find(self._g, x)

    def __len__(self):
        return self.info["nodes"]

    @property
    def total(self):
        """Shallow bytes of every object scanned."""
        return sum(s.size for s in self.by_type())

    def by_type(self):
        """[TypeStat], most retained bytes first."""
        rows = [TypeStat(self._types[t], c, s, r)
                for t, c, s, r in _calipers.heap_by_type(self._g)]
        rows.sort(key=lambda s: (-s.retained, -s.size, s.type))
        return rows

    def by_module(self):
        """[(module name, retained bytes)] for each module object scanned,
        most first: what dropping the module would free, if nothing else
        held its objects."""
        mt = [t for t, name in enumerate(self._types) if name == "module"]
        out = []
        for t in mt:
            for i in _calipers.heap_of_type(self._g, t):
                n = self.node(i)
                out.append((n.name or "?", n.retained))
        out.sort(key=lambda x: (-x[1], x[0]))
        return out

    def by_line(self):
        """[(filename, lineno, count, size, retained)] of the objects whose
        allocation calipers sampled (under ``calipers run``), by the line
        that made them, most bytes first; empty when memory is not being
        sampled."""
        rows = [(f, l, c, s, r)
                for (f, l), (c, s, r) in _calipers.heap_by_line(self._g).items()]
        rows.sort(key=lambda x: (-x[3], x[0], x[1]))
        return rows

    def node(self, index):
        """The :class:`Node` at ``index``."""
        addr, t, size, ret, idom, name = _calipers.heap_node(self._g, index)
        n = Node()
        n.index, n.address, n.type, n.size, n.retained = index, addr, self._types[t], size, ret
        n.name, n._idom, n._heap = name, idom, self
        return n

    def find(self, obj):
        """The :class:`Node` of ``obj`` (by identity), or None if the scan did
        not see it (made after, or held only where the scan does not look).
        TypeError for a loaded heap."""
        i = self._index(obj)
        return None if i < 0 else self.node(i)

    def of_type(self, name):
        """The :class:`Node` of every object of the type named ``name`` (as
        by_type() names it), in scan order."""
        ids = [t for t, n in enumerate(self._types) if n == name]
        return [self.node(i) for t in ids for i in _calipers.heap_of_type(self._g, t)]

    def largest(self, n=10, by="retained"):
        """The ``n`` objects with the most ``retained`` (or ``size``) bytes,
        as :class:`Node`, largest first."""
        if by not in ("retained", "size"):
            raise ValueError("by is 'retained' or 'size'")
        return [self.node(i) for i in _calipers.heap_largest(self._g, n, by == "retained")]

    def retained(self, obj):
        """Bytes that would be freed if ``obj`` (an object, or a
        :class:`Node`) went (its dominator-tree subtree), or None if the
        scan did not see it."""
        i = self._index(obj)
        return None if i < 0 else self.node(i).retained

    def dominator(self, obj):
        """The :class:`Node` that every path from a root to ``obj`` (an
        object or a :class:`Node`) passes through nearest to it, or None (a
        root dominates it alone, or the scan did not see it)."""
        i = self._index(obj)
        n = None if i < 0 else self.node(i)
        return None if n is None or n._idom < 0 else self.node(n._idom)

    def why_alive(self, obj):
        """A shortest path from a root to ``obj``: a list of
        ``(description, edge)`` pairs, root first, ``obj`` last; ``edge``
        names how the previous object refers to this one (``.attr``,
        ``['key']``, ``[3]``, ...) where that is cheap to tell and the
        previous object is still alive, else None.  None if the scan did not
        see ``obj``.  ``obj`` may be a :class:`Node` (the only choice for a
        loaded heap, whose edges are never named)."""
        i = self._index(obj)
        if i < 0:
            return None
        nodes, objs = _calipers.heap_path(self._g, i)
        out = []
        for k, idx in enumerate(nodes):
            n = self.node(idx)
            desc = n.type + (" %s" % n.name if n.name else "")
            edge = None
            if 0 < k < len(objs):
                edge = _edge_label(objs[k - 1], objs[k])
            if k == 0:
                edge = "root"
            out.append((desc, edge))
        del objs
        return out

    def diff(self, older):
        """What changed since ``older`` (an earlier scan), by type:
        [(type, count change, size change, retained change)], largest size
        change first, unchanged types left out."""
        old = {s.type: s for s in older.by_type()}
        new = {s.type: s for s in self.by_type()}
        rows = []
        for t in set(old) | set(new):
            o, n = old.get(t), new.get(t)
            d = ((n.count if n else 0) - (o.count if o else 0),
                 (n.size if n else 0) - (o.size if o else 0),
                 (n.retained if n else 0) - (o.retained if o else 0))
            if d != (0, 0, 0):
                rows.append((t,) + d)
        rows.sort(key=lambda r: (-abs(r[2]), r[0]))
        return rows

    def format(self, top=20):
        """A table of the ``top`` types by retained bytes."""
        i = self.info
        if self.loaded:
            # The meta is the file's: any JSON object, shown only as it is.
            pid, secs = self.meta.get("pid"), self.meta.get("walk_seconds")
            head = "heap dump%s: %d objects, %s shallow%s" % (
                " of process %d" % pid if type(pid) is int else "", i["nodes"],
                _fmt_bytes(self.total),
                "; scanned in %.2f s" % secs if type(secs) in (int, float) else "")
        else:
            head = ("heap: %d objects, %s shallow; scanned in %.2f s + %.2f s analysis, "
                    "scanner memory %s" % (i["nodes"], _fmt_bytes(self.total),
                                           i["walk_seconds"], i["analysis_seconds"],
                                           _fmt_bytes(i["peak_bytes"])))
        lines = [head, "%12s %12s %12s  %s" % ("retained", "size", "count", "type")]
        for s in self.by_type()[:top]:
            lines.append("%12s %12s %12d  %s" % (_fmt_bytes(s.retained), _fmt_bytes(s.size),
                                                 s.count, s.type))
        return "\n".join(lines)

    def format_path(self, path):
        """A why_alive() path on one line, as Python would reach the object
        where the edges are known (``__main__.table['held'][3]``, a module
        by its name, a module's globals as attributes), followed by the
        object's type; with `` -> `` between objects where an edge is not
        known (a loaded heap's)."""
        if not path:
            return ""
        out, namespace, prev = "", False, ("", "")
        for k, (desc, edge) in enumerate(path):
            kind, _, name = desc.partition(" ")
            if k == 0:
                out = name or desc
            elif prev == ("dict", "sys.modules") and kind == "module" and name:
                out = name  # a module, by its name
            elif prev[0] == "module" and (edge == ".__dict__" or
                                          (kind == "dict" and name.endswith(".__dict__"))):
                namespace = True
                prev = (kind, name)
                continue
            elif not edge:
                out = "%s -> %s" % (out, desc)
            elif namespace and edge[:2] == "['" and edge[2:-2].isidentifier():
                out += "." + edge[2:-2]
            else:
                out += edge
            namespace = False
            prev = (kind, name)
        if len(path) == 1:
            return "%s: a root (held by the interpreter, C code or a running frame)" % out
        return "%s  (%s)" % (out, path[-1][0])

    def _is_data(self, n):
        """Is node n the program's data, rather than its code and namespaces
        (modules, classes, functions, the roots, and their dicts)?"""
        if n.name is not None:
            return False
        if n.type == "dict" and n._idom >= 0:  # a class's namespace, say
            owner = self.node(n._idom)
            return owner.name is None or owner.type == "dict"
        return True

    def _largest_data(self, n):
        """The ``n`` data objects (``_is_data``) retaining the most."""
        return [x for x in self.largest(max(50, 10 * n)) if self._is_data(x)][:n]

    def summary_data(self, top=10, largest=5):
        """summary() as data, the profile's ``heap`` member (docs/FORMAT.md;
        the agent adds ``dump``, the file's path, and ``reason``): the ``top`` types by
        retained bytes and the ``largest`` data objects, each with its
        why_alive() path, as steps and on one line."""
        i = self.info
        types = [{"type": s.type, "count": s.count, "size_bytes": s.size,
                  "retained_bytes": s.retained} for s in self.by_type()[:top]]
        objects = []
        for n in self._largest_data(largest):
            path = self.why_alive(n) or []
            objects.append({"type": n.type, "size_bytes": n.size, "retained_bytes": n.retained,
                            "path": self.format_path(path),
                            "steps": [{"object": d, "edge": e} for d, e in path]})
        scan_s = (i.get("walk_seconds") or 0) + (i.get("analysis_seconds") or 0)
        return {"objects": i["nodes"],
                "shallow_bytes": self.total, "scan_s": round(scan_s, 6), "types": types,
                "largest": objects}

    def summary(self, top=10, largest=5, width=100):
        """The terminal report's heap block: the ``top`` types by retained
        bytes, then the ``largest`` objects by retained bytes that are data
        (modules, classes, functions and their dicts left out: they retain
        everything below them), each with a shortest path from a root (why
        it is alive)."""
        lines = [self.format(top)]
        big = self._largest_data(largest)
        if big:
            lines.append("largest objects, not counting modules, classes and functions "
                         "(retained, size, why alive):")
        for n in big:
            path = self.format_path(self.why_alive(n))
            head = "%12s %12s  " % (_fmt_bytes(n.retained), _fmt_bytes(n.size))
            room = max(20, width - len(head))
            if len(path) > room:
                path = "... " + path[-(room - 4):]
            lines.append(head + path)
        return "\n".join(lines)

    def __str__(self):
        return self.format()

    def __repr__(self):
        return "<calipers.heap.Heap: %d objects>" % len(self)


def _edge_label(parent, child):
    """How ``parent`` refers to ``child``, looked at without running the
    program's code (exact builtin containers and a few known slots), or
    None."""
    tp = type(parent)
    if tp is dict:
        for k, v in dict.items(parent):
            if v is child:
                return "[%r]" % (k,) if type(k) in (str, int, float, bytes, bool) else "[key]"
            if k is child:
                return "key"
        return None
    if tp in (list, tuple):
        for k, v in enumerate(tp.__iter__(parent)):
            if v is child:
                return "[%d]" % k
        return None
    if tp in (set, frozenset):
        return "member"
    if isinstance(parent, type):
        for name in ("__dict__", "__mro__", "__bases__", "__base__"):
            try:
                if type.__getattribute__(parent, name) is child:
                    return "." + name
            except AttributeError:
                pass
        return None
    if tp is type(sys) or tp is type(_edge_label):
        for name in ("__dict__", "__globals__", "__code__", "__closure__", "__defaults__",
                     "__kwdefaults__"):
            try:
                if object.__getattribute__(parent, name) is child:
                    return "." + name
            except AttributeError:
                pass
    # An instance's attributes: reading its __dict__ could build one (3.11+
    # keeps them inline until asked), which the program never asked for.
    return None
