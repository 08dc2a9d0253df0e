"""The IPython / Jupyter magics in a real kernel: ipykernel started by
jupyter_client's KernelManager (both from PyPI, in the `test` extra), a
`%%calipers` cell and a `%calipers` statement that do known work, checked
in the display data the kernel sends (the HTML report in a sandboxed
iframe, the terminal report as text/plain) and in the profile written;
a terminal IPython shows the text report.  The test marked `browser`
loads the display HTML in headless Chromium.

One kernel serves the module (started once: about a second, allowed
minutes on a loaded machine)."""

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("IPython", reason="IPython is in the test extra")
jupyter_client = pytest.importorskip("jupyter_client", reason="jupyter_client is in the test extra")
pytest.importorskip("ipykernel", reason="ipykernel is in the test extra")

from conftest import cpu, validate  # noqa: E402
from test_html import Page, browser  # noqa: E402,F401 - the browser fixture, shared

#: Generous: a kernel starting on a loaded 2-core machine.
TIMEOUT = 240

#: The cell: a hot loop line and a large allocation line (line numbers
#: count the %%calipers line, as the notebook does).
CELL = """\
%%calipers -o {outfile}
total = 0
for i in range(3_000_000): total += i * i
blob = bytearray(96 << 20)
len(blob)
"""
LOOP_LINE, ALLOC_LINE = 3, 4


class Kernel:
    """A real ipykernel, and the messages each execution produced."""

    def __init__(self, directory):
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager

        # A kernel spec of our own: this Python, whatever kernels the
        # machine's user has installed.
        spec = directory / "kernels" / "calipers-test"
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "calipers test", "language": "python"}))
        # TMPDIR: the magic's private directory (cell files, profiles) too.
        env = dict(os.environ, IPYTHONDIR=str(directory / "ipython"), TMPDIR=str(directory))
        env.pop("LD_PRELOAD", None)
        self.km = KernelManager(kernel_name="calipers-test",
                                kernel_spec_manager=KernelSpecManager(
                                    kernel_dirs=[str(directory / "kernels")]),
                                connection_file=str(directory / "connection.json"))
        self.km.start_kernel(cwd=str(directory), env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=TIMEOUT)
        except RuntimeError:
            self.close()
            raise

    def run(self, code):
        """Execute `code`: (the reply's content, [(msg_type, content)] of
        the outputs)."""
        outputs = []
        reply = self.kc.execute_interactive(
            code, timeout=TIMEOUT,
            output_hook=lambda m: outputs.append((m["msg_type"], m["content"])))
        return reply["content"], outputs

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def displays(outputs):
    return [c["data"] for t, c in outputs if t == "display_data"]


def stderr_of(outputs):
    return "".join(c["text"] for t, c in outputs if t == "stream" and c["name"] == "stderr")


def srcdoc(display_html):
    """The report page inside the display's iframe."""
    m = re.search(r'<iframe srcdoc="([^"]*)"', display_html)
    assert m, display_html[:300]
    return html.unescape(m.group(1))


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("kernel"))
    reply, _ = k.run("%load_ext calipers")
    assert reply["status"] == "ok", reply
    yield k
    k.close()


@pytest.fixture(scope="module")
def cell_run(kernel, tmp_path_factory):
    """The cell, run once: (reply, outputs, profile)."""
    outfile = tmp_path_factory.mktemp("cell") / "cell.json"
    reply, outputs = kernel.run(CELL.format(outfile=outfile))
    profile = validate(json.loads(outfile.read_text())) if outfile.exists() else None
    return reply, outputs, profile


def cell_file(profile):
    files = [f for f in profile["files"] if re.search(r"/In\[\d+\]\.py$", f["path"])]
    assert len(files) == 1, [f["path"] for f in profile["files"]]
    return files[0]


def test_cell_magic_profiles_the_cell_and_displays_the_report(cell_run):
    reply, outputs, profile = cell_run
    assert reply["status"] == "ok", reply
    # The last expression's value is shown, as IPython shows it.
    results = [c["data"]["text/plain"] for t, c in outputs if t == "execute_result"]
    assert results == [str(96 << 20)]
    # The profile: the cell's own file, its lines the notebook's, its text.
    assert profile is not None
    f = cell_file(profile)
    lines = {ln["line"]: ln for ln in f["lines"]}
    mem = lines[ALLOC_LINE]["memory"]
    # Sampled (a mean of 256 KiB between samples): a few samples either
    # way of the 384 this block is worth.
    assert mem["alloc_python_bytes"] + mem["alloc_native_bytes"] == pytest.approx(96 << 20, rel=0.05)
    assert mem["live_peak_bytes"] == pytest.approx(96 << 20, rel=0.05), mem
    source = dict(f["source"])
    assert source[1].startswith("%%calipers -o ")
    assert source[LOOP_LINE] == "for i in range(3_000_000): total += i * i"
    assert profile["program"]["argv"][0].startswith("%%calipers -o ")
    assert not profile["config"]["cpu_only"]
    # One display: the HTML report in a sandboxed iframe, the text report
    # beside it for front ends without HTML.
    (data,) = displays(outputs)
    page = srcdoc(data["text/html"])
    assert 'sandbox="allow-scripts"' in data["text/html"]
    assert page.lstrip().lower().startswith("<!doctype html>")
    assert "for i in range(3_000_000): total += i * i" in page
    assert "calipers: profile written to %s" % Path(profile_path(outputs)) in data["text/html"]
    text = data["text/plain"]
    assert "%%calipers" in text and "In[" in text
    assert "for i in range(3_000_000)" in text
    # The hottest line is the loop's.
    hottest = max(lines.values(), key=cpu)
    assert hottest["line"] == LOOP_LINE, {n: cpu(ln) for n, ln in lines.items()}
    assert cpu(hottest) > 0.05


def profile_path(outputs):
    (data,) = displays(outputs)
    return re.search(r"calipers: profile written to ([^<;]+)", data["text/html"]).group(1)


def test_line_magic_returns_the_value_and_profiles_the_call(kernel, tmp_path):
    out = tmp_path / "line.json"
    reply, _ = kernel.run("def spin(n):\n"
                          "    s = 0\n"
                          "    for i in range(n): s += i\n"
                          "    return s\n")
    assert reply["status"] == "ok"
    reply, outputs = kernel.run("r = %%calipers --cpu-only -o %s spin(3_000_000)\nr" % out)
    assert reply["status"] == "ok", reply
    results = [c["data"]["text/plain"] for t, c in outputs if t == "execute_result"]
    assert results == [str(sum(range(3_000_000)))]
    assert len(displays(outputs)) == 1
    profile = validate(json.loads(out.read_text()))
    assert profile["config"]["cpu_only"]
    # The statement's own file holds the call; spin() was defined by an
    # earlier cell (under ipykernel's name for it), and its loop line is
    # where the time went.
    stmt = cell_file(profile)
    assert dict(stmt["source"]) == {1: "spin(3_000_000)"}
    # That cell is no file: its text comes from IPython's line cache, and
    # the report shows it.
    (spin,) = [f for f in profile["files"] if f["path"] != stmt["path"]
               and any(fn["name"] == "spin" for fn in f["functions"])]
    assert dict(spin["source"])[3] == "    for i in range(n): s += i"
    (data,) = displays(outputs)
    assert "for i in range(n): s += i" in srcdoc(data["text/html"])
    lines = [(f["path"], ln["line"], cpu(ln)) for f in profile["files"] for ln in f["lines"]]
    top = max(lines, key=lambda x: x[2])
    assert top[0] == spin["path"] and top[1] == 3 and top[2] > 0.02, lines


def test_bad_flag_is_one_line_and_runs_nothing(kernel):
    reply, outputs = kernel.run("%%calipers --bogus\nran = 'yes'\n")
    assert reply["status"] == "error"
    assert reply["ename"] == "UsageError"
    assert reply["evalue"] == "calipers: unknown option --bogus (see %calipers --help)"
    assert displays(outputs) == []
    reply, _ = kernel.run("%calipers --interval 50 1")
    assert reply["evalue"] == "calipers: --interval: 50 is out of range (0.1ms to 10s)"
    reply, _ = kernel.run("%calipers")
    assert reply["evalue"] == ("calipers: %calipers needs a statement (or %%calipers on a "
                               "cell); %calipers --help lists the options")
    reply, outputs = kernel.run("print('ran' in dir())")
    assert [c["text"] for t, c in outputs if t == "stream"] == ["False\n"]


def test_an_exception_in_the_cell_still_shows_the_report_and_fails_it(kernel):
    reply, outputs = kernel.run("%%calipers --cpu-only\nx = 1\nraise ValueError('boom')\n")
    assert reply["status"] == "error" and reply["ename"] == "ValueError"
    assert len(displays(outputs)) == 1
    # A syntax error: IPython's own display of it, at the notebook's line.
    reply, outputs = kernel.run("%%calipers\nx = 1\ny = (\n")
    assert reply["status"] == "error" and reply["ename"] == "SyntaxError", reply
    tb = re.sub(r"\x1b\[[0-9;]*m", "", "".join(reply["traceback"]))
    assert re.search(r'In\[\d+\]\.py(:|", line )3\b', tb), tb
    assert displays(outputs) == []


def test_already_profiling_says_so(kernel, tmp_path):
    reply, _ = kernel.run("import calipers\ncalipers.start(%r, cpu_only=True)"
                          % str(tmp_path / "whole.json"))
    assert reply["status"] == "ok", reply
    try:
        reply, outputs = kernel.run("%calipers 1 + 1")
        assert reply["status"] == "error" and reply["ename"] == "UsageError"
        assert "already being profiled" in reply["evalue"]
        assert displays(outputs) == []
    finally:
        reply, _ = kernel.run("calipers.stop()")
        assert reply["status"] == "ok"


def test_terminal_ipython_shows_the_text_report(tmp_path):
    env = dict(os.environ, IPYTHONDIR=str(tmp_path / "ipython"), TMPDIR=str(tmp_path))
    env.pop("LD_PRELOAD", None)
    script = ("%load_ext calipers\n"
              "%calipers --cpu-only sum(i * i for i in range(1_000_000))\n"
              "exit\n")
    proc = subprocess.run([sys.executable, "-m", "IPython", "--no-banner", "--simple-prompt"],
                          input=script, capture_output=True, text=True, cwd=str(tmp_path),
                          env=env, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert "calipers: %calipers --cpu-only sum(" in proc.stdout, proc.stdout
    assert "sum(i * i for i in range(1_000_000))" in proc.stdout
    assert "<iframe" not in proc.stdout


@pytest.mark.browser
def test_display_html_renders_in_chromium(browser, cell_run, tmp_path):
    _, outputs, _ = cell_run
    (data,) = displays(outputs)
    # A bare host page around the display HTML, as a notebook's output
    # area holds it.
    host = tmp_path / "notebook.html"
    host.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
                    "<div class='output'>%s</div></body></html>" % data["text/html"],
                    encoding="utf-8")
    view = Page(browser, host, tmp_path / "notebook.png", width=1100)
    view.clean()  # no errors, nothing fetched
    page = view.page
    report = page.frame_locator("iframe")
    assert report.locator("#title").inner_text().startswith("%%calipers -o ")
    table = report.locator("details.file table").first
    rows = table.locator("tbody tr:not(.gap)")
    numbers = [int(t) for t in rows.locator("td:nth-child(1)").all_inner_texts()]
    assert LOOP_LINE in numbers
    assert "for i in range(3_000_000): total += i * i" in rows.nth(numbers.index(LOOP_LINE)).inner_text()
    # The report's styles stay in its frame: the host page has none, and
    # its theme attribute is the frame's own.
    assert page.evaluate("document.styleSheets.length") == 0
    assert page.evaluate("document.documentElement.dataset.theme") is None
    box = page.locator("div.calipers-report").bounding_box()
    assert box["height"] > 600 and box["width"] > 1000


def test_importing_calipers_does_not_import_ipython():
    code = ("import sys, calipers\n"
            "assert callable(calipers.load_ipython_extension)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('IPython', 'ipykernel', 'calipers')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['calipers']"


def split(line):
    from calipers.ipython import split_line

    return split_line(line)


def test_option_words_and_statement():
    assert split('-o "a b.json" --cpu-only f("-x", 1)') == (
        ["-o", "a b.json", "--cpu-only"], 'f("-x", 1)')
    assert split("--interval=1ms -- -x + 1") == (["--interval=1ms"], "-x + 1")
    assert split("x  =  1") == ([], "x  =  1")
    assert split("") == ([], "")
