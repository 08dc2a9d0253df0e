"""Type-confusion fuzzing of the profile reader, `calipers view` and the
HTML viewer.

tests/c/fuzz_view.c and the mutation fuzzer in tests/c/test_core.c corrupt
a profile's bytes, and most of what they make is not JSON at all.  These
tests keep the JSON valid and confuse its *types*: they take the real
profiles in tests/data and change what members hold (a number becomes a
string, null, an array, an object or a boolean; numbers become huge,
negative or fractional; members go missing, unknown ones appear, a name
appears twice, values are nested deep, tokens JSON does not have take a
value's place), then check that

  (a) `calipers view`, text and HTML, renders the document or refuses it
      with one line and a non-zero status: never a traceback, never a
      crash; and it refuses every document that is not strict JSON or
      whose members the shipped JSON Schema finds of the wrong type;
  (b) every page `view --html` accepts loads in headless Chromium, and
      survives sorting every column and showing every line, with no page
      error and no console error (marked `browser`).

Seeded, so a failure reproduces.  The default run is bounded (300
documents for (a), 600 for (b), of which some tens are accepted and
loaded); a longer one on demand, e.g.

  CALIPERS_FUZZ_EXAMPLES=5000 CALIPERS_FUZZ_SEED=$RANDOM \\
      python -m pytest tests/security/test_fuzz_view.py

A failing document is kept under the test's tmp_path and named in the
message.
"""

import copy
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"
SEED = int(os.environ.get("CALIPERS_FUZZ_SEED", "17"))
#: Documents per test: (a) is cheap (one process renders them all), (b)
#: loads a page per accepted document.
EXAMPLES = int(os.environ.get("CALIPERS_FUZZ_EXAMPLES", "0")) or None


class Raw:
    """A token written as is: `NaN`, `Infinity`, `01`... (not JSON)."""

    def __init__(self, text):
        self.text = text


class Dup:
    """An object written with a member name twice (the pairs in order)."""

    def __init__(self, pairs):
        self.pairs = pairs


def dumps(v):
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, Dup):
        return "{" + ", ".join(json.dumps(k) + ": " + dumps(x) for k, x in v.pairs) + "}"
    if isinstance(v, dict):
        return "{" + ", ".join(json.dumps(k) + ": " + dumps(x) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(dumps(x) for x in v) + "]"
    return json.dumps(v)


def nested(depth):
    v = 0
    for _ in range(depth):
        v = [v]
    return v


#: What a member may be turned into.  Numbers at and past every edge a
#: renderer could trip on, every type, text that is not meant to be there.
CONFUSIONS = [
    "12", "", "NaN", "-Infinity", "null", "\u202e\u2066evil", "x" * 3000,
    None, True, False,
    0, -1, 0.5, -0.0, 1e-320, 2 ** 31, -(2 ** 31) - 1, 2 ** 53, 2 ** 53 + 2, 2 ** 64, -(2 ** 63),
    1e15, 1e300, -1e300, 1.7976931348623157e308,
    [], [0], ["x"], [[0, 0]], [None, None], [1, "2", 3], {}, {"python_s": 1}, {"line": "1"},
]
RAW = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "01", "+1", ".5", "0x10", "True",
       "undefined", "'x'"]
NUMBERS = [-1, -1e15, 0.1, 1e15, 2 ** 53, 2 ** 63, 1e100, 1e300, 4.5e9, 1e9 + 1, 101, 1.5]
KEYS = ["python_s", "line", "lines", "memory", "gpu", "timeline", "source", "path", "name",
        "total", "self", "processes", "__proto__", "constructor", "toString", "length", "0",
        "unknown", ""]


def paths_of(v, path=()):
    """Every (path, value) under v, the document itself excluded."""
    out = []
    if isinstance(v, dict):
        for k, x in v.items():
            out.append((path + (k,), x))
            out += paths_of(x, path + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out.append((path + (i,), x))
            out += paths_of(x, path + (i,))
    return out


def parent_of(doc, path):
    for p in path[:-1]:
        doc = doc[p]
    return doc


def choose_path(rng, doc):
    """Half the time any member, half the time any *kind* of member (a path
    with its indices as *), so that the one summary is hit as often as one
    of many lines."""
    paths = paths_of(doc)
    if rng.random() < 0.5:
        return rng.choice(paths)
    kinds = {}
    for p, x in paths:
        kinds.setdefault(tuple("*" if isinstance(k, int) else k for k in p), []).append((p, x))
    return rng.choice(kinds[rng.choice(sorted(kinds, key=repr))])


def mutate(rng, doc):
    """Change doc (a copy) once; returns a word for what was done."""
    path, value = choose_path(rng, doc)
    parent, key = parent_of(doc, path), path[-1]
    what = rng.random()
    if what < 0.45:
        parent[key] = copy.deepcopy(rng.choice(CONFUSIONS))
        return "retype %s" % (path,)
    if what < 0.55 and isinstance(value, (int, float)) and not isinstance(value, bool):
        parent[key] = rng.choice(NUMBERS) * (rng.choice([1, -1]))
        return "renumber %s" % (path,)
    if what < 0.67 and isinstance(parent, dict):
        del parent[key]
        return "delete %s" % (path,)
    if what < 0.75:
        target = value if isinstance(value, dict) else parent
        if isinstance(target, dict):
            target[rng.choice(KEYS)] = copy.deepcopy(rng.choice(CONFUSIONS))
            return "extra key near %s" % (path,)
    if what < 0.82 and isinstance(parent, dict):
        pairs = list(parent.items())
        pairs.insert(rng.randrange(len(pairs) + 1), (key, copy.deepcopy(rng.choice(CONFUSIONS))))
        grand = parent_of(doc, path[:-1]) if len(path) > 1 else None
        if grand is not None:
            grand[path[-2]] = Dup(pairs)
            return "duplicate %s" % (path,)
    if what < 0.89:
        parent[key] = Raw(rng.choice(RAW))
        return "raw token at %s" % (path,)
    if what < 0.95:
        parent[key] = nested(rng.choice([8, 60, 63, 64, 70])) if rng.random() < 0.5 else [value]
        return "nest %s" % (path,)
    parent[key] = {"value": value}
    return "wrap %s" % (path,)


def with_gpu_and_leaks(doc):
    """memory.json as if it had run on a GPU and leaked: no seed in
    tests/data has either, and the viewer draws both."""
    doc = copy.deepcopy(doc)
    wall = doc["summary"]["wall_s"]
    doc["summary"]["gpu"] = {
        "available": True, "reason": None, "stopped_at_s": None,
        "utilization_source": "process", "memory_source": "device",
        "fallback": "a container's host PIDs", "utilization_avg_percent": 37.5,
        "memory_avg_bytes": 2 << 30, "memory_peak_bytes": 3 << 30, "readings": 12,
        "devices": [{"index": 0, "uuid": "GPU-0", "name": "Fake GPU",
                     "memory_total_bytes": 16 << 30, "utilization_avg_percent": 37.5,
                     "memory_peak_bytes": 3 << 30}],
        "timeline": [[0.0, 0], [wall / 2, 3 << 30], [wall, 1 << 30]],
    }
    f = doc["files"][0]
    usage = {"utilization_avg_percent": 50.0, "memory_avg_bytes": 1 << 30,
             "memory_peak_bytes": 2 << 30, "samples": 3}
    for rec in f["lines"] + f["functions"]:
        rec["gpu"] = dict(usage)
    line = f["lines"][0]
    doc["leaks"] = [{"path": f["path"], "line": line["line"], "function": line["function"],
                     "likelihood": 0.99, "rate_bytes_per_s": 1e6, "live_end_bytes": 5 << 20,
                     "watched": 40, "freed": 0, "process": 0}]
    return doc


def seeds():
    docs = {p.stem: json.loads(p.read_text()) for p in sorted(DATA.glob("*.json"))}
    docs["memory-gpu-leaks"] = with_gpu_and_leaks(docs["memory"])
    return docs


def make_documents(directory, count, seed):
    """`count` mutated documents in directory: {file name: what was done}."""
    rng = random.Random(seed)
    base = seeds()
    names = sorted(base)
    made = {}
    for i in range(count):
        name = names[i % len(names)]
        doc = copy.deepcopy(base[name])
        done = [mutate(rng, doc) for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 4))]
        file = "%05d-%s.json" % (i, name)
        (directory / file).write_text(dumps(doc))
        made[file] = "%s (seed %d): %s" % (name, seed, "; ".join(done))
    return made


#: Runs `calipers view` (the CLI's own main()) on every document in one
#: process, text and HTML; records each one's status, words and any
#: exception that escaped.  A crash ends the process: "progress" names the
#: document it was on.
DRIVER = r"""
import contextlib, io, json, os, sys, traceback
from calipers import cli
docs, out = sys.argv[1], sys.argv[2]
progress = os.path.join(out, "progress")
results = {}
for name in sorted(os.listdir(docs)):
    with open(progress, "w") as f:
        f.write(name)
    path = os.path.join(docs, name)
    html = os.path.join(out, name[:-5] + ".html")
    entry = results[name] = {}
    for mode, args in (("text", ["view", "--width", "100", "--color", "never", path]),
                       ("html", ["view", "--html", html, path])):
        stdout, stderr = io.StringIO(), io.StringIO()
        status, escaped = 0, None
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                cli.main(args)
            except SystemExit as exc:
                status = exc.code
            except BaseException:
                escaped = traceback.format_exc()
        written = html if mode == "html" and os.path.exists(html) else None
        entry[mode] = {"status": status, "stdout": stdout.getvalue(), "stderr": stderr.getvalue(),
                       "escaped": escaped, "html": written}
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(results, f)
os.unlink(progress)
"""


def view_all(tmp_path, count, seed):
    """Make the documents and view each; returns (what was done, results)."""
    docs, out = tmp_path / "docs", tmp_path / "out"
    docs.mkdir()
    out.mkdir()
    made = make_documents(docs, count, seed)
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(docs), str(out)],
                          capture_output=True, text=True, timeout=600)
    progress = out / "progress"
    if proc.returncode != 0 or progress.exists():
        on = progress.read_text() if progress.exists() else "?"
        pytest.fail("calipers view died (status %d) on %s: %s\n%s"
                    % (proc.returncode, docs / on, made.get(on), proc.stderr[-3000:]))
    return made, json.loads((out / "results.json").read_text()), docs


def test_seeds_are_accepted(tmp_path):
    """The unmutated seeds render in both modes: the fuzzing starts from
    documents the check accepts, so what it refuses is the mutation's."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, doc in seeds().items():
        (docs / (name + ".json")).write_text(json.dumps(doc))
    for name in os.listdir(docs):
        for mode in (["--text"], ["--html", str(tmp_path / "out.html")]):
            proc = subprocess.run([sys.executable, "-m", "calipers", "view", *mode,
                                   str(docs / name)], capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, (name, proc.stderr)


def strict_json(text):
    """The document as a strict reader sees it, or None if it is not JSON
    (NaN, Infinity, a member named twice...)."""
    def no_duplicates(pairs):
        if len({k for k, _ in pairs}) != len(pairs):
            raise ValueError("duplicate member")
        return dict(pairs)

    def no_constant(name):
        raise ValueError(name)

    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except (ValueError, RecursionError):
        return None


def type_errors(doc):
    """Where the shipped JSON Schema finds a member of the wrong JSON type
    (not a wrong value, a missing member or an unknown one: the reader
    is lenient there, for older and newer calipers/1 profiles)."""
    import jsonschema

    from conftest import SCHEMA

    def wrong_type(e):
        if e.validator == "type":
            return True
        return e.validator in ("anyOf", "oneOf") and e.context and all(map(wrong_type, e.context))

    return [e for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(doc) if wrong_type(e)]


def test_view_renders_or_refuses_in_one_line(tmp_path):
    count = EXAMPLES or 300
    made, results, docs = view_all(tmp_path, count, SEED)
    assert len(results) == count
    accepted = refused = 0
    for name, entry in sorted(results.items()):
        where = "%s: %s" % (docs / name, made[name])
        # What must be refused: not JSON, or a member of the wrong type.
        doc = strict_json((docs / name).read_text())
        if doc is None or type_errors(doc):
            assert entry["text"]["status"] == 1, "%s: accepted, but %s" % (
                where, "not JSON" if doc is None else type_errors(doc)[0].message)
        for mode in ("text", "html"):
            r = entry[mode]
            assert r["escaped"] is None, "%s: %s view raised\n%s" % (where, mode, r["escaped"])
            if r["status"] == 0:
                accepted += mode == "text"
                said = "" if mode == "text" else "calipers: HTML report written to %s\n" % r["html"]
                assert r["stderr"] == said, where
                assert r["stdout"] if mode == "text" else r["html"], where
            else:
                refused += mode == "text"
                assert r["status"] in (1, 2), where
                assert r["stdout"] == "" and r["html"] is None, where
                lines = r["stderr"].splitlines()
                assert len(lines) == 1, (where, r["stderr"])
                assert lines[0].startswith("calipers: error: "), (where, r["stderr"])
                assert "Traceback" not in r["stderr"], where
                # One printable line: nothing from the document reaches the
                # terminal unescaped through an error message.
                assert lines[0].isprintable() and lines[0].isascii(), (where, lines[0])
        # The text and HTML paths read the same check: both or neither.
        assert (entry["text"]["status"] == 0) == (entry["html"]["status"] == 0), where
    # The campaign exercised both outcomes (a mutation generator that only
    # made junk, or only harmless changes, would test little).
    assert accepted >= count // 25 and refused >= count // 4, (accepted, refused)


@pytest.mark.browser
def test_accepted_pages_load_without_errors(tmp_path):
    from playwright.sync_api import sync_playwright

    from test_html import chromium_path

    # Most mutations are refused (as they should be): make enough documents
    # for some tens of pages.
    count = EXAMPLES or 600
    made, results, docs = view_all(tmp_path, count, SEED + 1)
    pages = [(name, e["html"]["html"]) for name, e in sorted(results.items()) if e["html"]["html"]]
    assert len(pages) >= count // 20
    failures = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        for name, html in pages:
            errors = []
            page = ctx.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(Path(html).as_uri())
            page.wait_for_load_state("load")
            # Sort by every column, show every line: each runs more of the
            # page's script over the document.
            page.evaluate("""() => {
                for (const th of document.querySelectorAll("th")) th.click();
                const all = document.getElementById("all-lines");
                if (all) { all.click(); all.dispatchEvent(new Event("change")); }
                for (const th of document.querySelectorAll("th")) th.click();
            }""")
            if not page.inner_text("#title") and not errors:
                errors.append("nothing drawn")
            page.close()
            if errors:
                failures.append("%s: %s\n    %s"
                                % (docs / name, made[name], "\n    ".join(errors[:3])))
        browser.close()
    assert not failures, "%d of %d pages failed:\n%s" % (len(failures), len(pages),
                                                         "\n".join(failures[:20]))
