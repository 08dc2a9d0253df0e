"""The HTML viewer in a real headless Chromium (Debian's `chromium`, driven
by Playwright; the browser is never downloaded).  Every page is checked for
console errors and for requests other than the page itself, and a
screenshot of each is saved under the test's output directory.

Marked `browser`: tools/test-all.sh runs these once (the html tier), not on
every CPython, since the page does not depend on the interpreter."""

import decimal
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fake_nvml
from conftest import PROGRAMS, line_of, validate

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
    assert "native: " in text and "waiting: " in text and "38% of the threads' time" in text
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


# ---- GPU figures (the fake NVML stands in for the driver) ----

GPU_PROGRAM = HERE / "programs" / "gpu.py"
GB = 1_000_000_000


@pytest.fixture(scope="module")
def nvml_lib(tmp_path_factory):
    return fake_nvml.build(tmp_path_factory.mktemp("nvml"))


@pytest.fixture(scope="module")
def nvml_lib_device_only(tmp_path_factory):
    """A fake NVML without the per-process functions: device-wide figures."""
    return fake_nvml.build(tmp_path_factory.mktemp("nvml-device"), omit=(
        "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses"))


def shown_bytes(b):
    """The viewer's bytes(): decimal units, one decimal place above bytes,
    rounded as JavaScript's toFixed does: the double's exact value, a tie
    away from zero (1.25 GB shows as 1.3 GB; Python's "%.1f" would round
    that tie to even, 1.2 GB; it happened in CI with a GPU average)."""
    units, i = ["B", "KB", "MB", "GB", "TB"], 0
    b = float(b)
    while abs(b) >= 999.95 and i < len(units) - 1:
        b, i = b / 1000, i + 1
    exact = decimal.Decimal(b).quantize(decimal.Decimal("0.1" if i else "1"),
                                        rounding=decimal.ROUND_HALF_UP)
    return str(exact) + " " + units[i]


def byte_count(text):
    """The bytes a shown_bytes() text stands for (to its rounding)."""
    number, unit = text.split()
    return float(number) * 1000 ** ["B", "KB", "MB", "GB", "TB"].index(unit)


def shown_pct(p):
    """The viewer's GPU percentage (JavaScript's toFixed(0) rounds halves up)."""
    return "<1%" if 0 < p < 0.5 else "%d%%" % math.floor(p + 0.5)


def cells(table, column):
    """{first cell's text: the text under `column`} for a table's rows."""
    heads = table.locator("thead th").all_inner_texts()
    n = heads.index(column) + 1
    rows = table.locator("tbody tr:not(.gap)")
    return dict(zip(rows.locator("td:nth-child(1)").all_inner_texts(),
                    rows.locator("td:nth-child(%d)" % n).all_inner_texts()))


def test_gpu_figures_in_header_chart_and_tables(browser, tmp_path, run_calipers, nvml_lib):
    """The program sets 80% and 3 GB, then spins on the `heavy` line; then
    20% and 0.5 GB on the `light` one: the page shows those figures."""
    html = tmp_path / "gpu.html"
    run = run_calipers(GPU_PROGRAM, options=["--html", str(html)], env=fake_nvml.env(nvml_lib))
    assert run.returncode == 0, run.stderr
    gpu = run.profile["summary"]["gpu"]
    assert gpu["available"] and gpu["utilization_source"] == gpu["memory_source"] == "process"
    assert gpu["memory_peak_bytes"] == 3 * GB
    lines = run.lines("gpu.py")
    heavy = lines[line_of(GPU_PROGRAM, "heavy")]["gpu"]
    light = lines[line_of(GPU_PROGRAM, "light")]["gpu"]
    assert 75 <= heavy["utilization_avg_percent"] <= 80 and heavy["samples"] > 0
    assert 2.8 * GB <= heavy["memory_avg_bytes"] <= 3 * GB == heavy["memory_peak_bytes"]
    assert 15 <= light["utilization_avg_percent"] <= 25
    assert 0.4 * GB <= light["memory_avg_bytes"] <= 0.5 * GB == light["memory_peak_bytes"]

    view = Page(browser, html, tmp_path / "gpu.png")
    view.clean()
    page = view.page
    # The header: average utilisation, memory peak, the device; all the run's own.
    util = page.inner_text("#gpu-util")
    assert shown_pct(gpu["utilization_avg_percent"]) in util and "GPU utilisation" in util
    assert page.inner_text("#gpu-memory").split("\n")[0] == "3.0 GB"
    assert "Fake GPU 0" in page.inner_text("#gpu-devices")
    assert "device-wide" not in page.inner_text("#facts")
    assert "GPU-fake0000" in page.get_attribute("#gpu-devices", "title")
    # The GPU memory chart, beside the memory one, its peak marked.
    assert page.locator("#memory-chart").count() == 1
    assert page.locator("#gpu-chart path.curve").count() == 1
    assert "GPU memory" in page.locator("#timeline h2").all_inner_texts()
    page.hover("#gpu-peak-marker")
    assert page.inner_text("#tip").startswith("GPU memory peak 3.0 GB at ")
    # The line table: gpu% and gpu mem, as set while each line ran.
    table = page.locator("details.file table").first
    pcts, mems = cells(table, "gpu%"), cells(table, "gpu mem")
    h, l = str(line_of(GPU_PROGRAM, "heavy")), str(line_of(GPU_PROGRAM, "light"))
    assert pcts[h] == shown_pct(heavy["utilization_avg_percent"]) and pcts[h] in ("79%", "80%")
    assert mems[h] == shown_bytes(heavy["memory_avg_bytes"])
    assert pcts[l] == shown_pct(light["utilization_avg_percent"])
    assert mems[l] == shown_bytes(light["memory_avg_bytes"])
    # Lines without GPU readings (the source around the profiled lines) are blank.
    ctx = table.locator("tbody tr.ctx")
    assert ctx.count() > 0
    for n in range(ctx.count()):
        texts = ctx.nth(n).locator("td").all_inner_texts()
        heads = table.locator("thead th").all_inner_texts()
        assert texts[heads.index("gpu%")] == texts[heads.index("gpu mem")] == ""
    # The peak is in the column's title and in the cell's tooltip.
    assert "peak" in table.locator("th", has_text="gpu mem").get_attribute("title")
    table.locator("tbody tr:not(.gap)").nth(list(pcts).index(h)).locator(".gpu-mem").hover()
    tip = page.inner_text("#tip")
    assert "peak 3.0 GB" in tip and "average " + mems[h] in tip
    # Sortable: the heaviest GPU line first, then the least.  (A line next to
    # `heavy` that one or two samples found while the GPU was at 80% can
    # show as much as it, or more: CI once put line 19 first at 80% over
    # the loop's 79%.  The order is checked, not which of them leads.)
    table.locator("th", has_text="gpu%").click()
    order = table.locator("tbody tr:not(.gap) td:nth-child(1)").all_inner_texts()
    shown = [int(pcts[n].rstrip("%")) for n in order if pcts.get(n, "").rstrip("%").isdigit()]
    assert len(shown) >= 2 and shown == sorted(shown, reverse=True), (order, pcts)
    assert shown[0] >= int(pcts[h].rstrip("%"))
    # The same for GPU memory (a line before `heavy`, found once while the
    # GPU held 3 GB, led it in one run).
    table.locator("th", has_text="gpu mem").click()
    order = table.locator("tbody tr:not(.gap) td:nth-child(1)").all_inner_texts()
    shown = [byte_count(mems[n]) for n in order if mems.get(n)]
    assert len(shown) >= 2 and shown == sorted(shown, reverse=True), (order, mems)
    assert shown[0] >= byte_count(mems[h])
    # The function table has the same two columns, inclusive.
    fns = page.locator("#functions table")
    fpcts, fmems = cells(fns, "gpu%"), cells(fns, "gpu mem")
    fn = run.functions("gpu.py")
    assert fpcts["heavy"] == shown_pct(fn["heavy"]["gpu"]["utilization_avg_percent"]) in ("79%", "80%")
    assert fmems["light"] == shown_bytes(fn["light"]["gpu"]["memory_avg_bytes"])
    assert fmems["<module>"] == shown_bytes(fn["<module>"]["gpu"]["memory_avg_bytes"])
    fns.locator("th", has_text="gpu%").click()
    assert fns.locator("tbody tr td:nth-child(1)").all_inner_texts()[0] == "heavy"
    page.click("#theme")
    page.screenshot(path=str(tmp_path / "gpu-dark.png"), full_page=True)


def test_gpu_device_wide_figures_say_so(browser, tmp_path, run_calipers, nvml_lib_device_only):
    """Without NVML's per-process functions the figures are the device's:
    the header and the chart say so, with the profile's reason as a title."""
    html = tmp_path / "gpu-device.html"
    run = run_calipers(GPU_PROGRAM, options=["--html", str(html)],
                       env=fake_nvml.env(nvml_lib_device_only))
    assert run.returncode == 0, run.stderr
    gpu = run.profile["summary"]["gpu"]
    assert gpu["available"] and gpu["memory_source"] == "device" and gpu["fallback"]
    view = Page(browser, html, tmp_path / "gpu-device.png")
    view.clean()
    page = view.page
    assert "GPU memory peak (device-wide)" in page.inner_text("#gpu-memory")
    assert page.get_attribute("#gpu-memory", "title") == gpu["fallback"]
    assert "GPU memory (device-wide)" in page.locator("#timeline h2").all_inner_texts()
    heavy = run.lines("gpu.py")[line_of(GPU_PROGRAM, "heavy")]["gpu"]
    table = page.locator("details.file table").first
    assert cells(table, "gpu mem")[str(line_of(GPU_PROGRAM, "heavy"))] == \
        shown_bytes(heavy["memory_avg_bytes"])
    assert "device-wide" in table.locator("th", has_text="gpu mem").get_attribute("title")
    # The fallback is in the notes once (the profile's own note).
    assert page.inner_text("#notes").count(gpu["fallback"]) == 1


def test_no_gpu_columns_without_gpu_figures(browser, tmp_path, run_calipers, nvml_lib):
    """--no-gpu (summary.gpu null): nothing about the GPU.  NVML failing
    (available false): nothing but the reason, once, in the notes."""
    off_html = tmp_path / "no-gpu.html"
    off = run_calipers(GPU_PROGRAM, options=["--html", str(off_html), "--no-gpu"],
                       env=fake_nvml.env(nvml_lib))
    assert off.returncode == 0, off.stderr
    assert off.profile["summary"]["gpu"] is None
    view = Page(browser, off_html, tmp_path / "no-gpu.png")
    view.clean()
    page = view.page
    headers = page.locator("table th").all_inner_texts()
    assert "time" in headers and "allocated" in headers
    assert not [h for h in headers if "gpu" in h.lower()]
    for part in ("#facts", "#notes", "#timeline", "#functions"):
        assert "GPU" not in page.inner_text(part)
    assert page.locator("#gpu-chart, #gpu-util, #gpu-memory, #gpu-devices").count() == 0
    assert page.locator("#memory-chart").count() == 1

    failed_html = tmp_path / "gpu-failed.html"
    failed = run_calipers(GPU_PROGRAM, options=["--html", str(failed_html), "--gpu"],
                          env=fake_nvml.env(nvml_lib, fail="nvmlInit_v2=9"))
    assert failed.returncode == 0, failed.stderr
    gpu = failed.profile["summary"]["gpu"]
    assert gpu == {"available": False, "reason": gpu["reason"]} and "Driver Not Loaded" in gpu["reason"]
    view = Page(browser, failed_html, tmp_path / "gpu-failed.png")
    view.clean()
    page = view.page
    assert not [h for h in page.locator("table th").all_inner_texts() if "gpu" in h.lower()]
    assert page.locator("#gpu-chart, #gpu-util, #gpu-memory, #gpu-devices").count() == 0
    assert page.inner_text("body").count(gpu["reason"]) == 1
    assert gpu["reason"] in page.inner_text("#notes")


def test_hottest_lines_of_every_file(browser, tmp_path, run_calipers):
    prog = PROGRAMS / "twofiles" / "main.py"
    run = run_calipers(prog, options=["--no-report"])
    assert run.returncode == 0, run.stderr
    view = Page(browser, html_of(run.outfile, tmp_path), tmp_path / "hottest.png")
    view.clean()
    hot = view.page.locator("#hottest")
    assert hot.count() == 1
    rows = hot.locator("tbody tr").all_inner_texts()
    assert 2 <= len(rows) <= 10
    assert any("helper.py: t += i * i % 7" in r for r in rows), rows
    assert any("main.py: total += k % 3" in r for r in rows), rows
    # It comes before the files' own tables.
    first = view.page.locator("#files details").first
    assert first.get_attribute("id") == "hottest"
    # A program with one file has none: its table is that list.
    single = Page(browser, html_of(DATA / "memory.json", tmp_path, "single.html"),
                  tmp_path / "single.png")
    single.clean()
    assert single.page.locator("#hottest").count() == 0
