"""The terminal report and `calipers view`: golden files, the width and
mode rules, and one-line errors for bad input.

The golden files (tests/golden) are the reports of four saved profiles
(tests/data: a CPU-only run of threads.py, a full run of examples/demo.py, a
run too short to sample) at 80 and 160 columns, in colour and plain.  After a
deliberate change to the report, rewrite them with
CALIPERS_UPDATE_GOLDEN=1 and read the diff."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROGRAMS, line_of, main_thread_lines

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
GOLDEN = HERE / "golden"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def calipers(*args, env=None, cwd=None):
    full_env = dict(os.environ)
    full_env.pop("NO_COLOR", None)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "calipers", *map(str, args)], capture_output=True,
                          text=True, env=full_env, cwd=cwd, timeout=120)


def visible(line):
    return len(ANSI.sub("", line))


@pytest.mark.parametrize("profile", ["cpu", "memory", "empty", "procs"])
@pytest.mark.parametrize("width", [80, 160])
@pytest.mark.parametrize("color", ["never", "always"])
def test_golden(profile, width, color):
    out = calipers("view", "--width", width, "--color", color, DATA / (profile + ".json"))
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    golden = GOLDEN / ("%s-%d-%s.txt" % (profile, width, color))
    if os.environ.get("CALIPERS_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(out.stdout)
    assert out.stdout == golden.read_text()
    # The rules the golden files must keep: no row wider than the width, no
    # trailing blanks, plain mode is ASCII (the fixtures' text is ASCII).
    for line in out.stdout.splitlines():
        assert visible(line) <= width, line
    if color == "never":
        assert out.stdout.isascii() and "\x1b" not in out.stdout


def test_report_content_memory_profile():
    text = calipers("view", "--width", "160", "--color", "never", DATA / "memory.json").stdout
    demo = (HERE.parent / "examples" / "demo.py").read_text().splitlines()
    # The header: the program, its times, the memory headline, a sparkline.
    assert text.startswith("calipers: examples/demo.py ran 0.90 s; CPU 0.93 s")
    assert "memory peak 49.2 MB (Python 98%) reached at demo.py:40" in text
    assert re.search(r"footprint [_,:;+il|]{20,} growth 18\.1 MB/s", text)
    # The file table: rows in line order, with the source beside them.
    table = text[text.index("examples/demo.py: "):]
    rows = [ln for ln in table.splitlines() if re.match(r"^ {0,5}\d+ ", ln)]
    numbers = [int(r.split()[0]) for r in rows]
    assert numbers == sorted(numbers)
    zlib_row = next(r for r in rows if r.split()[0] == "23")
    assert demo[22].strip() in zlib_row
    # 0.61 s of the run's 1.60 s (both threads): 38%; native and waiting
    # (for the GIL, or the other core) half and half.
    assert re.search(r"^ +23 +0\.61s +38% =+\.+ +1% +49% +1% +49% +70\.8MB +78%", zlib_row)
    # Lines under 1% are not shown unless they are context.
    assert "import hashlib" not in table
    # The functions of the file, by inclusive time.
    funcs = table[table.index("function (inclusive"):]
    assert funcs.index("<module>") < funcs.index("native_work") < funcs.index("kernel_work")


def test_min_percent_and_max_rows():
    every = calipers("view", "--color", "never", "--width", "120", "--min-percent", "0",
                     DATA / "memory.json").stdout
    few = calipers("view", "--color", "never", "--width", "120", "--min-percent", "20",
                   DATA / "memory.json").stdout
    capped = calipers("view", "--color", "never", "--width", "120", "--max-rows", "3",
                      DATA / "memory.json").stdout

    def rows(text):
        return [ln for ln in text.splitlines() if re.match(r"^ {0,5}\d+( |$)", ln)]

    assert len(rows(every)) > len(rows(few)) >= 3
    assert "     4 " in every  # line 4 allocates a little: shown at 0%
    # one line with its context; the rest counted
    assert len(rows(capped)) == 3 and "more lines above 1% not shown" in capped


def test_no_color_and_pipes_are_plain(run_calipers):
    run = run_calipers(PROGRAMS / "waits.py", env={"NO_COLOR": "1"})
    assert run.returncode == 0
    assert "\x1b" not in run.stderr
    # `calipers view` to a pipe is plain too, unless asked
    out = calipers("view", DATA / "cpu.json")
    assert "\x1b" not in out.stdout and out.stdout.isascii()
    out = calipers("view", "--color", "always", DATA / "cpu.json")
    assert "\x1b[" in out.stdout and "█" in out.stdout


def test_run_writes_html_and_report(run_calipers, tmp_path):
    html = tmp_path / "report.html"
    run = run_calipers(PROGRAMS / "waits.py", options=["--html", str(html)])
    assert run.returncode == 0, run.stderr
    page = html.read_text()
    assert page.startswith("<!doctype html>")
    assert "HTML report written to %s" % html in run.stderr
    # The embedded profile is the JSON profile written beside it.
    embedded = page[page.index('id="profile">') + len('id="profile">'):]
    embedded = embedded[:embedded.index("</script>")]
    assert json.loads(embedded) == run.profile
    # The report names the sleeping line with its source.
    assert "time.sleep(0.4)" in run.stderr


def test_run_html_unwritable_is_a_usage_error(run_calipers, tmp_path):
    run = run_calipers(PROGRAMS / "waits.py", options=["--html", str(tmp_path / "no" / "r.html")])
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "calipers: error: cannot write the HTML report to %s: no such directory"
        % (tmp_path / "no" / "r.html"))


def test_view_renders_a_fresh_profile_like_run(run_calipers):
    run = run_calipers(PROGRAMS / "leaks.py", "leak", env={"COLUMNS": "100"})
    assert run.returncode == 0, run.stderr
    view = calipers("view", "--width", "100", "--color", "never", run.outfile)
    # The same report, less the line that says where the profile went.
    said = run.stderr[:run.stderr.index("\ncalipers: profile written to")]
    assert view.stdout == said
    assert "likely leak at leaks.py:%d" % line_of(PROGRAMS / "leaks.py", "leak-line") in said


@pytest.mark.parametrize("content, why", [
    (b"", "corrupt profile: line 1 column 1: unexpected end of input"),
    (b'{"schema": "calipers/1", "files": [', "corrupt profile: line 1 column 36"),
    (b"\x89PNG\r\n\x1a\n", "corrupt profile: line 1 column 1: unexpected character"),
    (b'{"schema": "calipers/2", "program": {}, "summary": {}, "files": []}',
     "profile schema calipers/2 is not the one this calipers reads (calipers/1)"),
    (b'{"traceEvents": []}', 'not a calipers profile (no "schema": "calipers/1")'),
    (b'{"schema": "calipers/1", "program": {}, "summary": {}}',
     'corrupt profile: "files" is missing or malformed'),
])
def test_view_rejects_bad_profiles_in_one_line(tmp_path, content, why):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    for mode in (["--text"], ["--html", str(tmp_path / "out.html")]):
        out = calipers("view", *mode, bad)
        assert out.returncode == 1
        assert out.stdout == ""
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
        assert out.stderr.startswith("calipers: error: %s: %s" % (bad, why)), out.stderr
    assert not (tmp_path / "out.html").exists()


@pytest.mark.parametrize("args, message", [
    ([], "no profile to view (calipers view profile.json)"),
    (["missing.json"], "cannot read missing.json: No such file or directory"),
    (["--width", "0", "x.json"], "--width: expected a positive whole number, not '0'"),
    (["--min-percent", "200", "x.json"], "--min-percent: expected a percentage from 0 to 100, not '200'"),
    (["--color", "sometimes", "x.json"], "--color: expected auto, always or never, not 'sometimes'"),
    (["--bogus", "x.json"], "unknown option --bogus (see calipers --help)"),
    (["a.json", "b.json"], "calipers view takes one profile, not 'b.json' too"),
])
def test_view_usage_errors(tmp_path, args, message):
    out = calipers("view", *args, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr == "calipers: error: %s\n" % message


def test_profile_carries_source_whole_or_near_profiled_lines(run_calipers, tmp_path):
    """A small file's every line; of a file over 32 KiB, only the lines within
    3 of a profiled line or of a function's first line."""
    padding = "".join("# padding line %05d %s\n" % (i, "x" * 60) for i in range(600))
    (tmp_path / "big_helper.py").write_text(padding + (
        "def spin(seconds):\n"
        "    import time\n"
        "    t = time.perf_counter()\n"
        "    while time.perf_counter() - t < seconds:\n"
        "        sum(range(500))\n"))
    main = tmp_path / "main.py"
    main.write_text("import big_helper\n\n\nbig_helper.spin(0.4)\n")
    run = run_calipers(main, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    files = {Path(f["path"]).name: f for f in run.profile["files"]}
    small = files["main.py"]["source"]
    assert small == [[1, "import big_helper"], [2, ""], [3, ""], [4, "big_helper.spin(0.4)"]]
    big = files["big_helper.py"]
    assert (tmp_path / "big_helper.py").stat().st_size > 32 << 10
    marks = [ln["line"] for ln in big["lines"]] + [fn["line"] for fn in big["functions"]]
    kept = [n for n, _ in big["source"]]
    assert kept == sorted(kept) and 601 in kept and 605 in kept
    assert all(min(abs(n - m) for m in marks) <= 3 for n in kept)
    text = (tmp_path / "big_helper.py").read_text().splitlines()
    assert all(text[n - 1] == t for n, t in big["source"])


def test_run_min_percent(run_calipers):
    def rows(text):
        return [ln for ln in text.splitlines() if re.match(r"^ {0,5}\d+( |$)", ln)]

    every = run_calipers(HERE.parent / "examples" / "demo.py", options=["--min-percent", "0"])
    few = run_calipers(HERE.parent / "examples" / "demo.py", options=["--min-percent", "30"])
    assert every.returncode == few.returncode == 0
    assert len(rows(few.stderr)) < len(rows(every.stderr))
    bad = run_calipers(PROGRAMS / "waits.py", options=["--min-percent", "x"])
    assert bad.returncode == 2
    assert bad.stderr == "calipers: error: --min-percent: expected a percentage from 0 to 100, not 'x'\n"


def test_the_profile_says_which_build_ran_it(run_calipers, tmp_path):
    """A free-threaded interpreter (PEP 703) is named in the profile and in
    the report's header, where CPU above wall time is then normal."""
    import sysconfig

    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    prog = tmp_path / "short.py"
    prog.write_text("sum(range(100000))\n")
    run = run_calipers(prog)
    assert run.returncode == 0, run.stderr
    program = run.profile["program"]
    assert program["python_build"] == ("free-threaded" if free_threaded else "default")
    header = run.stderr.split("\n\n")[0]
    said = "free-threaded Python %st" % program["python_version"]
    assert (said in " ".join(header.split())) == free_threaded, header


def test_copy_rate_needs_time_to_mean_something(tmp_path):
    # A line that copied 150 MB in the 5 ms credited to it has no rate worth
    # printing (it would read 30000 MB/s): shown from 10 ms of time on.
    profile = json.loads((DATA / "memory.json").read_text())
    line = next(ln for f in profile["files"] for ln in f["lines"] if ln["line"] == 23)
    for key in ("python_s", "native_s", "system_s", "waiting_s"):
        line[key] = 0.001
    line["memory"]["copy_mb_per_s"] = 30000.0
    path = tmp_path / "short.json"
    path.write_text(json.dumps(profile))
    out = calipers("view", "--width", 160, "--color", "never", path)
    assert out.returncode == 0, out.stderr
    row = next(r for r in out.stdout.splitlines() if "zlib.compress(data" in r)
    assert "MB " not in row.split("zlib.compress")[0].split("1.3MB")[-1], row
    # ... and the untouched line 40 keeps its rate.
    assert re.search(r"\b1057MB\b", out.stdout), out.stdout


def test_the_hottest_lines_of_every_file_come_first(run_calipers):
    # A program whose hot lines are in two files: before the files' tables,
    # one list of the hottest lines of both, most important first, each
    # with its file.  (With one file the file's table is that list.)
    prog = PROGRAMS / "twofiles" / "main.py"
    helper = PROGRAMS / "twofiles" / "helper.py"
    run = run_calipers(prog)
    assert run.returncode == 0, run.stderr
    text = run.stderr
    head, _, rest = text.partition("the hottest lines, of every file\n")
    assert rest, text
    hot = rest.split("\n\n")[0].splitlines()[1:]  # below the column heads
    found = {(row.split(": ", 1)[0].split()[-1], int(row.split()[0])) for row in hot}
    for where in [("helper.py", line_of(helper, "crunch-line")),
                  ("main.py", line_of(prog, "main-line"))]:
        assert where in found, (where, hot)
    # The list comes before the first file's table.
    assert "% of the" not in head and "% of the" in rest, text


def hot_view(path, hottest, width=200):
    """`calipers view --hottest VIEW`: (caption, rows), each row (file
    name, line, shown time, shown share)."""
    out = calipers("view", "--hottest", hottest, "--width", width, "--color", "never", path)
    assert out.returncode == 0, out.stderr
    rest = out.stdout.split("\nthe hottest lines, of every file: ", 1)[1]
    block = rest.split("\n\n")[0].splitlines()
    heads = next(i for i, row in enumerate(block) if row.split()[:3] == ["line", "time", "%"])
    rows = []
    for row in block[heads + 1:]:
        no, shown, share, _, where = row.split(None, 4)
        rows.append((where.split(":")[0], int(no), shown, share))
    return " ".join(block[1:heads]), rows


def test_hottest_lines_views_in_the_terminal(run_calipers, tmp_path):
    """`calipers view --hottest cpu|main|main,cpu` (issue 18): the HTML
    viewer's views of the hottest lines, in the terminal; each row checked
    against the profile's figures (the main thread's from its stack table)."""
    prog = PROGRAMS / "twofiles" / "threaded.py"
    main_line, sleep_line = line_of(prog, "main-line"), line_of(prog, "sleep-line")
    crunch_line = line_of(PROGRAMS / "twofiles" / "helper.py", "crunch-line")
    join_line = line_of(prog, "join-line")
    run = run_calipers(prog, options=["--no-report"])
    assert run.returncode == 0, run.stderr
    prof = run.profile
    cpu = lambda t: t["python_s"] + t["native_s"] + t["system_s"]
    secs = lambda s: "%.2fs" % s
    pct = lambda part, whole: "<1%" if part / whole < 0.005 else "%.0f%%" % (100 * part / whole)
    lines = {(Path(f["path"]).name, l["line"]): l for f in prof["files"] for l in f["lines"]}

    # CPU time only, every thread: the lines by CPU time, a share of the threads' CPU time.
    caption, rows = hot_view(run.outfile, "cpu")
    cpu_all = cpu(prof["summary"])
    want = sorted((k for k, l in lines.items() if cpu(l) > 0 and 100 * cpu(l) / cpu_all >= 1),
                  key=lambda k: -cpu(lines[k]))[:10]
    assert [r[:2] for r in rows] == want, (rows, want)
    assert ("helper.py", crunch_line) in want and ("threaded.py", sleep_line) not in want
    for where, no, shown, share in rows:
        assert (shown, share) == (secs(cpu(lines[where, no])), pct(cpu(lines[where, no]), cpu_all))
    assert "%% of the threads' CPU time (%s)" % secs(cpu_all) in caption, caption
    cpu_rows = rows

    # The main thread only, all its time: the sleep and join lines (the join's waiting is in
    # threading.py's frames, charged to it), not the worker's lines.
    mine = main_thread_lines(prof)
    main = next(th for th in prof["threads"] if th["main"])
    caption, rows = hot_view(run.outfile, "main")
    found = [r[:2] for r in rows]
    assert {("threaded.py", main_line), ("threaded.py", sleep_line),
            ("threaded.py", join_line)} <= set(found), rows
    assert ("helper.py", crunch_line) not in found
    whole = cpu(main) + main["waiting_s"]
    for where, no, shown, share in rows:
        s = mine[where, no][0] + mine[where, no][1]
        assert (shown, share) == (secs(s), pct(s, whole)), (where, no)
    assert found == sorted(found, key=lambda k: -sum(mine[k][:2]))
    assert "The main thread's time (CPU and waiting)" in caption
    assert "%% of its time (%s)" % secs(whole) in caption, caption

    # Both: the main thread's CPU time; the sleeping line drops out.
    caption, rows = hot_view(run.outfile, "main,cpu")
    assert ("threaded.py", main_line) in [r[:2] for r in rows]
    assert ("threaded.py", sleep_line) not in [r[:2] for r in rows]
    for where, no, shown, share in rows:
        assert (shown, share) == (secs(mine[where, no][0]), pct(mine[where, no][0], cpu(main)))
    assert "%% of its CPU time (%s)" % secs(cpu(main)) in caption, caption

    # A profile without a stack table (before 0.2) says why there is no main-thread view.
    del prof["stacks"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(prof))
    out = calipers("view", "--hottest", "main", "--width", 100, "--color", "never", old)
    assert out.returncode == 0, out.stderr
    assert "main thread only: not shown, this profile has no stack table" in out.stdout
    # The CPU view needs none: the same rows.
    assert hot_view(old, "cpu")[1] == cpu_rows


@pytest.mark.parametrize("args, message", [
    (["--hottest", "gpu", "x.json"], "--hottest: expected cpu, main or main,cpu, not 'gpu'"),
    (["--hottest", "", "x.json"], "--hottest: expected cpu, main or main,cpu, not ''"),
    (["--hottest", "cpu", "--html", "x.html", "x.json"],
     "--hottest is for the terminal report: the HTML report offers the same views as "
     "selectors above its list of the hottest lines"),
])
def test_hottest_usage_errors(tmp_path, args, message):
    out = calipers("view", *args, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr == "calipers: error: %s\n" % message
