"""The HTML viewer in a real headless Chromium (Debian's `chromium`, driven
by Playwright; the browser is never downloaded).  Every page is checked for
console errors and for requests other than the page itself, and a
screenshot of each is saved under the test's output directory.

Marked `browser`: tools/test-all.sh runs these once (the html tier), not on
every CPython, since the page does not depend on the interpreter."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import validate

pytestmark = pytest.mark.browser

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


def chromium_path():
    path = os.environ.get("CALIPERS_CHROMIUM") or shutil.which("chromium")
    assert path, "Chromium is missing: tools/test-all.sh installs Debian's chromium package"
    return path


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield b
        b.close()


class Page:
    """A loaded report page, with what it said and asked for."""

    def __init__(self, browser, html, shot, width=1280, dark=False):
        self.errors, self.requests, self.dialogs = [], [], []
        ctx = browser.new_context(viewport={"width": width, "height": 900},
                                  color_scheme="dark" if dark else "light")
        self.page = ctx.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.url = Path(html).resolve().as_uri()
        self.page.goto(self.url)
        self.page.wait_for_load_state("load")
        self.page.screenshot(path=str(shot), full_page=True)

    def clean(self):
        assert self.errors == []
        assert self.requests == [self.url]  # nothing fetched: no network, no fonts, no CDN
        assert self.dialogs == []


def html_of(profile_path, tmp_path, name="report.html"):
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "calipers", "view", "--html", str(out),
                           str(profile_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return out


def test_memory_profile_renders_sorts_and_hovers(browser, tmp_path):
    html = html_of(DATA / "memory.json", tmp_path)
    assert html.stat().st_size < 1_000_000
    view = Page(browser, html, tmp_path / "memory.png")
    view.clean()
    page = view.page
    assert page.inner_text("#title") == "examples/demo.py"
    assert "49.2 MB" in page.inner_text("#facts")
    # The memory chart, with the peak marked.
    assert page.locator("#memory-chart path.curve").count() == 1
    assert page.locator("#peak-marker").count() == 1
    # The file table: rows in line order, the source beside each.
    table = page.locator("details.file table").first
    lines = [int(t) for t in table.locator("tbody tr:not(.gap) td:nth-child(1)").all_inner_texts()]
    assert lines == sorted(lines) and 23 in lines
    row23 = table.locator("tbody tr:not(.gap)").nth(lines.index(23))
    assert "zlib.compress(data[: 1 << 18], 6)" in row23.inner_text()
    # Clicking "time" sorts by time, longest first; again, shortest first.
    table.locator("th", has_text="time").first.click()
    times = table.locator("tbody tr td:nth-child(1)").all_inner_texts()
    assert times[0] == "23"  # zlib.compress: the line with the most time
    table.locator("th", has_text="time").first.click()
    assert table.locator("tbody tr td:nth-child(1)").all_inner_texts()[0] != "23"
    # Hovering a time bar shows the breakdown.
    table.locator("th", has_text="line").first.click()
    bar = table.locator("tbody tr:not(.gap)").nth(lines.index(23)).locator(".bar").first
    bar.hover()
    tip = page.locator("#tip")
    assert tip.is_visible()
    text = tip.inner_text()
    assert "native: " in text and "waiting: " in text and "38% of the time" in text
    # The functions view is sorted by total time.
    names = page.locator("#functions tbody tr td:nth-child(1)").all_inner_texts()
    assert names[0] in ("<module>", "main")
    # Themes: the toggle switches to dark and back.
    page.click("#theme")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    page.screenshot(path=str(tmp_path / "memory-dark.png"), full_page=True)


def test_cpu_only_and_empty_profiles(browser, tmp_path):
    cpu = Page(browser, html_of(DATA / "cpu.json", tmp_path, "cpu.html"), tmp_path / "cpu.png",
               dark=True)
    cpu.clean()
    assert cpu.page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert "memory not profiled" in cpu.page.inner_text("#facts")
    assert cpu.page.locator("#memory-chart").count() == 0
    headers = cpu.page.locator("details.file th").all_inner_texts()
    assert "allocated" not in headers and "time" in headers

    empty = Page(browser, html_of(DATA / "empty.json", tmp_path, "empty.html"),
                 tmp_path / "empty.png", width=800)
    empty.clean()
    notes = empty.page.inner_text("#notes")
    assert "no profiled lines" in notes and "--interval" in notes


def test_hostile_source_and_file_names_execute_nothing(browser, tmp_path, run_calipers):
    """A program whose source holds a script element, in a file whose name
    is an <img> with an onerror handler: the page shows both as text."""
    name = "<img src=x onerror=\"window.pwned=1;alert(1)\">.py"
    prog = tmp_path / name
    prog.write_text(
        "import time\n"
        "s = '</script><script>window.pwned=2;alert(2)</script><!--'\n"
        "t = time.perf_counter()\n"
        "while time.perf_counter() - t < 0.3:\n"
        "    sum(range(1000))  # </script><img src=y onerror=alert(3)>\n")
    html = tmp_path / "hostile.html"
    run = run_calipers(prog, options=["--html", str(html)], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    validate(run.profile)
    view = Page(browser, html, tmp_path / "hostile.png")
    view.clean()
    page = view.page
    assert page.evaluate("window.pwned === undefined")
    assert page.locator("img").count() == 0
    assert name in page.inner_text("#title")
    page.check("#all-lines")
    body = page.inner_text("details.file")
    assert "</script><script>window.pwned=2;alert(2)</script><!--" in body
    assert name in page.inner_text("details.file summary")
    # The embedded profile parses back to the profile written beside it.
    assert page.evaluate("JSON.parse(document.getElementById('profile').textContent)") == \
        json.loads(run.outfile.read_text())


def test_leak_panel_names_the_line(browser, tmp_path, run_calipers):
    prog = Path(__file__).resolve().parent / "programs" / "leaks.py"
    html = tmp_path / "leaks.html"
    run = run_calipers(prog, "leak", options=["--html", str(html)])
    assert run.returncode == 0, run.stderr
    leak = run.profile["leaks"][0]
    view = Page(browser, html, tmp_path / "leaks.png")
    view.clean()
    panel = view.page.inner_text("#leaks")
    assert "leaks.py:%d" % leak["line"] in panel
    assert "leak.append(bytearray(4000))" in panel
    assert "%d%%" % round(100 * leak["likelihood"]) in panel
    # ... and the line's row in the file table is marked.
    assert view.page.locator("tr.leak").count() == 1


def test_processes_table(browser, tmp_path, run_calipers):
    """A run of several processes lists them, with their commands."""
    prog = Path(__file__).resolve().parent / "programs" / "procs.py"
    html = tmp_path / "procs.html"
    run = run_calipers(prog, "pool", "fork", options=["--html", str(html)])
    assert run.returncode == 0, run.stderr
    view = Page(browser, html, tmp_path / "procs.png")
    view.clean()
    rows = view.page.locator("#process-table tr")
    assert rows.count() == 1 + len(run.profile["processes"]) >= 4
    text = view.page.inner_text("#processes")
    assert "main" in text and "fork of %d" % run.profile["processes"][0]["pid"] in text
    assert "procs.py pool fork" in text
