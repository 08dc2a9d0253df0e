"""Hostile and careless input at the command line's first contact: numbers
out of every range, standard streams closed, files that are not profiles
(devices, FIFOs, huge files), profiles with members of the wrong type,
text that would reorder or rewrite the terminal, and `--help` on every
command.  Each gets one line and a non-zero status, or works as it would
without calipers; never a traceback, never a hang."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"


def calipers(*args, env=None, cwd=None, timeout=60):
    full = dict(os.environ)
    full.pop("NO_COLOR", None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "calipers", *map(str, args)], capture_output=True,
                          text=True, env=full, cwd=cwd, timeout=timeout)


def one_line_error(proc, status, fragment=""):
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("calipers: error: "), proc.stderr
    assert fragment in lines[0], (fragment, lines[0])


# ---- numbers -----------------------------------------------------------------

BAD_NUMBERS = ["inf", "-inf", "nan", "NaN", "-1", "0", "1e400", "-1e400", "99999999999999999999999",
               "9" * 5000, "²", "١٢", "0x10", "", " ", "1_000_000_000_000", "1e-400"]


#: Not bad at all: a percentage of 0, and 12 (Python's float() reads the
#: digits of any script) as a percentage, seconds between profiles or bytes
#: between allocation samples (1 byte, every allocation, is the least).
VALID = {("--min-percent", "0"), ("--min-percent", "1e-400"), ("--min-percent", "١٢"),
         ("--profile-interval", "١٢"), ("--memory-interval", "١٢"),
         ("--snapshot-every", "١٢")}


@pytest.mark.parametrize("option", ["--interval", "--memory-interval", "--profile-interval",
                                    "--snapshot-every", "--min-percent"])
@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_run_numeric_options_refuse_in_one_line(tmp_path, option, value):
    if (option, value) in VALID:
        return
    (tmp_path / "x.py").write_text("open('ran', 'w').close()\n")
    for args in ([option, value], [option + "=" + value]):
        one_line_error(calipers("run", *args, "x.py", cwd=tmp_path), 2, option)
        assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("option", ["--width", "--max-rows"])
@pytest.mark.parametrize("value", BAD_NUMBERS + ["100000000000", "1.5"])
def test_view_numeric_options_refuse_in_one_line(option, value):
    one_line_error(calipers("view", option, value, DATA / "cpu.json"), 2, option)


def test_view_numeric_options_at_their_limits():
    wide = calipers("view", "--width", "10000", "--max-rows", "1000000", "--color", "never",
                    DATA / "memory.json")
    assert wide.returncode == 0, wide.stderr
    one_line_error(calipers("view", "--width", "10001", DATA / "cpu.json"), 2,
                   "--width: 10001 is out of range (1 to 10000)")
    one_line_error(calipers("view", "--max-rows", "1000001", DATA / "cpu.json"), 2,
                   "--max-rows: 1000001 is out of range (1 to 1000000)")


@pytest.mark.parametrize("columns", ["abc", "-5", "0", "1e400", "99999999999999999999", "²"])
def test_a_bad_columns_variable_is_ignored(columns):
    """Piped, the width comes from $COLUMNS; one that is not a width is
    ignored (100 columns), as ls does, not blamed on the profile."""
    proc = calipers("view", "--color", "never", DATA / "cpu.json", env={"COLUMNS": columns})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 100
    assert proc.stdout == calipers("view", "--width", "100", "--color", "never",
                                   DATA / "cpu.json").stdout


@pytest.mark.parametrize("command", ["dump", "on", "off"])
@pytest.mark.parametrize("pid", ["²", "١٢", "99999999999999999999999", "-1", "0x10", "1e3", ""])
def test_pid_arguments_refuse_in_one_line(command, pid):
    one_line_error(calipers(command, pid), 2, "usage: calipers %s PID" % command)


# ---- --help ------------------------------------------------------------------

@pytest.mark.parametrize("command", ["run", "view", "dump", "on", "off"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_its_own_help(command, flag):
    proc = calipers(command, flag)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("usage: calipers ") and "calipers %s " % command in first, first
    assert calipers("help", command).stdout == proc.stdout
    for other in {"run", "view", "dump"} - {command}:  # its own help, not the whole manual
        assert "calipers %s " % other not in proc.stdout, (other, proc.stdout)


def test_help_texts_name_their_options():
    assert "--memory-interval SIZE" in calipers("run", "--help").stdout
    view = calipers("view", "--help").stdout
    assert "--max-rows N" in view and "128 MiB" in view and "--memory-interval" not in view
    assert "PID" in calipers("dump", "--help").stdout


# ---- standard streams closed at start -------------------------------------------

#: Reports what it found at its first line, and writes where its standard
#: output and error are (or a file of its own took the number).
PROBE = r"""
import os, sys
def state(fd):
    try:
        os.fstat(fd)
        return "open"
    except OSError:
        return "closed"
found = {"stdout": sys.stdout is None, "stderr": sys.stderr is None,
         "fd1": state(1), "fd2": state(2)}
print("to stdout")
log = open("program.log", "w")   # takes the lowest free number: 1 or 2 if closed
log.write("program's own log (fd %d)\n" % log.fileno())
log.flush()
x = [i * i for i in range(300000)]
with open("found.json", "w") as f:
    f.write(__import__("json").dumps(found))
sys.exit(3)
"""


@pytest.mark.parametrize("closed", [">&-", "2>&-", ">&- 2>&-", "<&- >&- 2>&-"])
def test_closed_standard_streams_the_program_runs_as_without_calipers(tmp_path, closed):
    (tmp_path / "probe.py").write_text(PROBE)
    runs = {}
    for name, cmd in (("plain", '"%s" probe.py' % sys.executable),
                      ("calipers", '"%s" -m calipers run -o p.json probe.py' % sys.executable)):
        for f in ("found.json", "program.log"):
            (tmp_path / f).unlink(missing_ok=True)
        proc = subprocess.run("exec %s %s" % (cmd, closed), shell=True, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        found = tmp_path / "found.json"
        assert found.exists(), (name, proc.stderr)  # the program ran
        runs[name] = (proc.returncode, json.loads(found.read_text()),
                      (tmp_path / "program.log").read_text(), proc.stdout)
    # The same status, the same view of its streams, the same log: nothing
    # of calipers' own (the signal pipe, the report) took a closed number.
    assert runs["calipers"][:3] == runs["plain"][:3]
    assert runs["plain"][0] == 3
    assert "calipers" not in runs["calipers"][2]
    profile = json.loads((tmp_path / "p.json").read_text())
    assert profile["schema"] == "calipers/1"  # still profiled


def test_closed_streams_usage_and_errors_do_not_raise(tmp_path):
    def sh(cmd):
        return subprocess.run("exec %s" % cmd, shell=True, cwd=tmp_path, capture_output=True,
                              text=True, timeout=60)

    py = '"%s" -m calipers' % sys.executable
    # Help and version with nowhere to print: done all the same.
    for args in ("--help", "--version", "run --help", "dump --help"):
        proc = sh("%s %s >&-" % (py, args))
        assert proc.returncode == 0 and proc.stderr == "", (args, proc.stderr)
    # Errors with nowhere to say them: the status says it.
    proc = sh("%s run missing.py 2>&-" % py)
    assert proc.returncode == 2 and proc.stdout == ""
    proc = sh("%s view --width ² x.json 2>&-" % py)
    assert proc.returncode == 2
    # A report with nowhere to go is an error, said on standard error.
    proc = sh('%s view "%s" >&-' % (py, DATA / "cpu.json"))
    one_line_error(proc, 1, "cannot write the report: standard output is closed")
    proc = sh('%s view --html out.html "%s" 2>&-' % (py, DATA / "cpu.json"))
    assert proc.returncode == 0 and (tmp_path / "out.html").exists()


# ---- files that are not profiles ---------------------------------------------

def test_view_refuses_a_device_at_once():
    start = time.monotonic()
    for device in ("/dev/zero", "/dev/urandom", "/dev/null"):
        for mode in (["--text"], ["--html", "/tmp/never-written-%d.html" % os.getpid()]):
            one_line_error(calipers("view", *mode, device, timeout=30), 2,
                           "cannot read %s: not a regular file" % device)
    assert time.monotonic() - start < 30
    assert not os.path.exists("/tmp/never-written-%d.html" % os.getpid())


def test_view_refuses_a_fifo_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "profile.json"
    os.mkfifo(fifo)
    one_line_error(calipers("view", fifo, timeout=30), 2, "not a regular file")


def test_view_refuses_a_directory(tmp_path):
    one_line_error(calipers("view", tmp_path), 2, "cannot read %s: Is a directory" % tmp_path)


def test_view_refuses_a_file_over_the_limit(tmp_path):
    from calipers import cli

    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: no disk used
        f.truncate(cli.MAX_PROFILE_BYTES + 1)
    start = time.monotonic()
    one_line_error(calipers("view", big), 2, "larger than the 128 MiB calipers view reads")
    assert time.monotonic() - start < 20  # refused from its size, not read
    # At the limit exactly it is read (and is not JSON).
    with open(big, "r+b") as f:
        f.truncate(cli.MAX_PROFILE_BYTES)
    one_line_error(calipers("view", big, timeout=120), 1, "corrupt profile")


def test_view_refuses_too_many_values_before_memory_runs_out(tmp_path):
    """A dense document of small values takes 32 bytes a value in the
    reader's tree: 16 million zeros (32 MB of JSON) would have taken over
    1 GB; the reader stops at its limit instead."""
    import resource

    dense = tmp_path / "dense.json"
    with open(dense, "w") as f:
        f.write('{"schema": "calipers/1", "files": [' + "0," * (1 << 24) + "0]}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    one_line_error(calipers("view", dense, timeout=120), 1, "more than 16777216 values")
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert peak_kb < 900 * 1024 or peak_kb == before, peak_kb  # ~0.6 GB


def test_view_follows_a_link_to_a_profile(tmp_path):
    link = tmp_path / "latest.json"
    link.symlink_to(DATA / "cpu.json")
    assert calipers("view", "--width", "100", link).stdout == \
        calipers("view", "--width", "100", DATA / "cpu.json").stdout


# ---- profiles with members of the wrong type ----------------------------------

def edited(tmp_path, edit, base="memory"):
    doc = json.loads((DATA / (base + ".json")).read_text())
    edit(doc)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    return path


def setter(path, value):
    def edit(doc):
        *parents, last = path
        for p in parents:
            doc = doc[p]
        doc[last] = value
    return edit


#: A string for a number, a number for a string, null for an object, an
#: object for an array...: each once made a page whose script threw after
#: "HTML report written".
CONFUSED = [
    (("summary", "wall_s"), "0.9", "summary.wall_s: expected a number, not a string"),
    (("summary", "python_s"), None, "summary.python_s: expected a number, not null"),
    (("summary", "memory", "peak_bytes"), "49174280",
     "summary.memory.peak_bytes: expected a whole number, not a string"),
    (("summary", "memory", "timeline"), {},
     "summary.memory.timeline: expected an array, not an object"),
    (("summary", "memory", "peak_line"), [],
     "summary.memory.peak_line: expected an object or null"),
    (("files", 0, "path"), 7, "files[0].path: expected a string, not a number"),
    (("files", 0, "lines"), {"0": {}}, "files[0].lines: expected an array, not an object"),
    (("files", 0, "lines", 2, "line"), "23", "files[0].lines[2].line: expected a whole number"),
    (("files", 0, "lines", 2, "memory"), "lots",
     "files[0].lines[2].memory: expected an object or null"),
    (("files", 0, "lines", 2, "memory", "timeline", 0), 5,
     "files[0].lines[2].memory.timeline[0]: expected an array, not a number"),
    (("files", 0, "functions", 0, "total"), None,
     "files[0].functions[0].total: expected an object"),
    (("files", 0, "source"), "text", "files[0].source: expected an array or null, not a string"),
    (("files", 0, "source", 3), [4], "files[0].source[3]: expected 2 items, not 1"),
    (("program", "argv"), "demo.py", "program.argv: expected an array, not a string"),
    (("notes",), [1], "notes[0]: expected a string, not a number"),
    (("leaks",), {}, "leaks: expected an array, not an object"),
    (("threads", 0, "main"), "yes", "threads[0].main: expected true or false, not a string"),
    (("config", "interval_s"), -0.01, "config.interval_s: -0.01 is out of range"),
    (("files", 0, "lines", 2, "line"), 1e300, "files[0].lines[2].line: 1e+300 is out of range"),
]


@pytest.mark.parametrize("path, value, why", CONFUSED,
                         ids=[".".join(map(str, c[0])) for c in CONFUSED])
def test_type_confused_profile_is_refused_naming_the_member(tmp_path, path, value, why):
    profile = edited(tmp_path, setter(path, value))
    html = tmp_path / "out.html"
    for mode in (["--text"], ["--html", str(html)]):
        proc = calipers("view", *mode, profile)
        one_line_error(proc, 1, "%s: corrupt profile: %s" % (profile, why))
    assert not html.exists()


def test_member_named_twice_is_refused(tmp_path):
    """C would read the first, the browser the last: what is checked must
    be what is drawn."""
    text = (DATA / "cpu.json").read_text()
    twice = text.replace('"wall_s": ', '"wall_s": "x", "wall_s": ', 1)
    path = tmp_path / "twice.json"
    path.write_text(twice)
    one_line_error(calipers("view", path), 1, 'two members named "wall_s" in one object')


def test_error_messages_quote_the_profile_as_printable_ascii(tmp_path):
    """A schema name or a member name from the profile is quoted in the
    error: escape sequences and bidi controls in it are not obeyed."""
    path = tmp_path / "p.json"
    path.write_text('{"schema": "calipers/\\u001b]0;pwned\\u0007\\u202e", "files": []}')
    proc = calipers("view", path)
    one_line_error(proc, 1, "profile schema calipers/?]0;pwned?? is not the one")
    path.write_text('{"\\u001b[2J": 1, "\\u001b[2J": 2}')
    proc = calipers("view", path)
    one_line_error(proc, 1, 'two members named "?[2J"')
    assert proc.stderr.isascii()


# ---- text that would rewrite the terminal or reorder the source ------------------

EVIL = {
    "path": "/src/\u202eyp.nimda\u2066.py",
    "source": "access = 'user' # \u202e } \u2066if is_admin\u2069 \u2066 begin admins only",
    "function": "check\u200fname\u061c",
    "argv": "\u001b]0;owned\u0007prog\u0085.py",
}


def evil_profile(tmp_path):
    def edit(doc):
        f = doc["files"][0]
        f["path"] = EVIL["path"]
        hot = max(f["lines"], key=lambda ln: ln["python_s"] + ln["native_s"] + ln["waiting_s"])
        for pair in f["source"]:
            if pair[0] == hot["line"]:
                pair[1] = EVIL["source"]
        f["functions"][0]["name"] = EVIL["function"]
        doc["program"]["argv"][0] = EVIL["argv"]
    return edited(tmp_path, edit)


@pytest.mark.parametrize("color", ["never", "always"])
def test_terminal_report_shows_controls_as_codes(tmp_path, color):
    out = calipers("view", "--width", "200", "--color", color, evil_profile(tmp_path)).stdout
    for raw in "\u202e\u2066\u2069\u200f\u061c\u0085\u0007":
        assert raw not in out, repr(raw)
    if color == "never":
        assert "\x1b" not in out
    else:  # only our own colours: every escape is a colour (SGR)
        import re

        assert "\x1b]" not in out and not re.search(r"\x1b(?!\[[0-9;]*m)", out)
    assert "/src/<U+202E>yp.nimda<U+2066>.py" in out
    assert "# <U+202E> } <U+2066>if is_admin<U+2069> <U+2066> begin admins only" in out
    assert "check<U+200F>name<U+061C>" in out
    assert "calipers: <U+001B>]0;owned<U+0007>prog<U+0085>.py ran" in out


@pytest.mark.browser
def test_html_viewer_shows_controls_as_codes(tmp_path):
    from playwright.sync_api import sync_playwright

    from test_html import chromium_path

    html = tmp_path / "evil.html"
    assert calipers("view", "--html", html, evil_profile(tmp_path)).returncode == 0
    page_text = html.read_text()
    title = page_text[page_text.index("<title>"):page_text.index("</title>")]
    assert "\u202e" not in title and "&lt;U+001B&gt;]0;owned&lt;U+0007&gt;prog" in title
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(html.as_uri())
        page.check("#all-lines")
        text = page.evaluate("document.body.innerText + document.title")
        titles = page.evaluate(
            "[...document.querySelectorAll('[title]')].map(e => e.title).join(' ')")
        browser.close()
    assert errors == []
    for raw in "\u202e\u2066\u2069\u200f\u061c\u0085\u0007\u001b":
        assert raw not in text and raw not in titles, repr(raw)
    assert "<U+202E>yp.nimda<U+2066>.py" in text
    assert "<U+202E> } <U+2066>if is_admin<U+2069> <U+2066> begin admins only" in text
    assert "check<U+200F>name<U+061C>" in text


# ---- documents the check accepts, at the edges of what the page draws ---------------

def edge_profiles(tmp_path):
    base = json.loads((DATA / "memory.json").read_text())

    def variant(name, edit):
        doc = json.loads(json.dumps(base))
        edit(doc)
        path = tmp_path / (name + ".json")
        path.write_text(json.dumps(doc))
        return path

    def many_lines(doc):  # more than a spread argument list holds
        f = doc["files"][0]
        line = dict(f["lines"][0], memory=None)
        f["lines"] = [dict(line, line=i + 1) for i in range(130000)]
        f["functions"] = f["functions"][:1]
        f["source"] = None
        doc["summary"]["memory"] = None

    def long_timeline(doc):
        doc["summary"]["memory"]["timeline"] = [[i * 1e-6, i] for i in range(130000)]

    def bare_gpu(doc):  # a GPU record without its figures (only the two required members)
        doc["summary"]["gpu"] = {"available": True, "reason": None}

    def null_line_memory(doc):
        doc["files"][0]["lines"][2]["memory"] = None

    def edges(doc):
        s = doc["summary"]
        s["wall_s"] = 1e9
        s["memory"]["peak_bytes"] = 2 ** 53
        s["memory"]["growth_bytes_per_s"] = -1e18
        doc["files"][0]["lines"][0]["line"] = -2 ** 31
        doc["program"]["start_time_unix"] = 4e9

    paths = [variant("many-lines", many_lines), variant("long-timeline", long_timeline),
             variant("bare-gpu", bare_gpu), variant("null-line-memory", null_line_memory),
             variant("edges", edges)]
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + (DATA / "cpu.json").read_bytes())
    return paths + [bom]


def test_edge_profiles_render_as_text(tmp_path):
    for path in edge_profiles(tmp_path):
        proc = calipers("view", "--width", "120", "--color", "never", path, timeout=120)
        assert proc.returncode == 0 and proc.stderr == "", (path.name, proc.stderr)


@pytest.mark.browser
def test_edge_profiles_load_in_the_browser(tmp_path):
    """Each of these once threw in the page: a byte order mark before the
    JSON, more lines or points than Math.max(...spread) takes, a GPU record
    or a line's memory that may be null or bare."""
    from playwright.sync_api import sync_playwright

    from test_html import chromium_path

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        for path in edge_profiles(tmp_path):
            html = path.with_suffix(".html")
            proc = calipers("view", "--html", html, path, timeout=120)
            assert proc.returncode == 0, proc.stderr
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(html.as_uri(), timeout=120000)
            page.evaluate("() => { for (const th of document.querySelectorAll('#functions th, "
                          "details.file:first-of-type th')) th.click(); }")
            drawn = page.inner_text("#title")
            page.close()
            assert errors == [] and drawn, (path.name, errors)
        browser.close()
