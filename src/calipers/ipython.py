"""The IPython / Jupyter magics: ``%load_ext calipers``, then

    %calipers [options] statement      profile one statement
    %%calipers [options]               profile the cell below

run the code profiled (CPU and memory, as calipers.start() does) and show
the report: the HTML viewer inline in a notebook (in a sandboxed iframe,
so its scripts and styles stay inside it, and offline), the terminal
report in a terminal IPython (one display with both forms; each front
end shows the richest it can).

HOW THE CELL'S LINES ARE FOUND.  IPython compiles a cell under a name
that is not a file (``<ipython-input-3-...>``, or ipykernel's
``/tmp/ipykernel_PID/HASH.py``, written only when a debugger asks), and
the report reads source text from disk.  So the magic runs the cell
itself: it writes the cell's text to a file of its own (created
exclusively, mode 0600, in a private directory made per session),
compiles IPython's transformation of the cell (magics, ``!cmd``) under
that file's name and runs it in the user's namespace.  IPython's
transformations keep line numbers, as its own tracebacks rely on, so the
profile's lines are the cell's lines and the report shows the cell.  The
file is under no library directory, so the default selection profiles it:
in a notebook the cell is the program.  As IPython does, the value of a
last expression statement is displayed (compiled in 'single' mode).

EARLIER CELLS.  A function defined by an earlier cell and called here is
profiled too where its cell has an absolute name (ipykernel's
``/tmp/ipykernel_PID/HASH.py``, under no library directory), but that
file is not on disk and the engine's writer finds no text for it.  IPython
keeps every cell's text in ``linecache``, so the magic fills those files'
``source`` from there (fill_sources) before the report is rendered, and
rewrites the profile with them.  Terminal IPython's ``<ipython-input-...>``
names are not paths: that code counts as a library's unless
``--profile-all``.

Imported only by calipers.load_ipython_extension: importing calipers does
not import IPython.
"""

import ast
import html
import json
import linecache
import os
import shlex
import sys
import tempfile

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display

import calipers
from calipers import _agent, _common, cli

HELP = """\
%calipers [options] statement    profile one statement
%%calipers [options]             profile the cell below

Runs the code profiled (CPU and memory) and shows the report: the HTML
viewer in a notebook, the terminal report in a terminal.

Options (as for `calipers run`):
  -o, --outfile FILE      write the profile (JSON) to FILE (by default to a
                          private temporary directory)
  --html FILE             also write the HTML report to FILE
  --interval T            mean CPU sampling interval (default 10ms)
  --memory-interval N     mean bytes between allocation samples (default 256k)
  --cpu-only              do not profile memory
  --profile-all           profile library code too
  --profile-only PATS     profile only files matching these (comma-separated)
  --profile-exclude PATS  never profile files matching these
  --min-percent P         terminal report: lines with at least P% (default 1)
  --text                  show the terminal report, not the HTML viewer
  -h, --help              this text
A statement that starts with '-' follows '--'."""

#: Options taking a value, and flags, with the key each sets.
WITH_VALUE = {"-o": "outfile", "--outfile": "outfile", "--html": "html",
              "--interval": "interval", "--memory-interval": "memory_interval",
              "--profile-only": "profile_only", "--profile-exclude": "profile_exclude",
              "--min-percent": "min_percent"}
FLAGS = {"--cpu-only": "cpu_only", "--profile-all": "profile_all", "--text": "text"}

#: The iframe's height: the report scrolls inside it; the frame around it
#: can be dragged taller.
FRAME_HEIGHT_PX = 640


def split_line(line):
    """The magic line's leading options, as words, and the statement after
    them (its text untouched: quotes and spacing are the statement's).
    Options end at the first word that does not start with '-', or at
    '--'.  Raises UsageError for unbalanced quotes among the options."""
    words, rest = [], line.strip()
    want_value = False
    while rest and (want_value or rest.startswith("-")):
        lexer = shlex.shlex(rest, posix=True)
        lexer.whitespace_split = True
        lexer.commenters = ""
        try:
            word = lexer.get_token()
        except ValueError as exc:  # No closing quotation
            raise UsageError("%%calipers: %s in the options" % exc)
        # shlex reads one character past the word: its separator.
        rest = rest[lexer.instream.tell():].lstrip()
        if word == "--" and not want_value:
            break
        words.append(word)
        name = word.partition("=")[0]
        if want_value:
            want_value = False
        elif name in WITH_VALUE and "=" not in word:
            want_value = True
    return words, rest


def parse_options(words):
    """The options' settings from their words (calipers run's spelling and
    value parsers).  Raises UsageError with one line for a bad one."""
    opts = {"outfile": None, "html": None, "interval": 0.01,
            "memory_interval": cli.DEFAULT_MEMORY_INTERVAL, "profile_only": [],
            "profile_exclude": [], "min_percent": 1.0, "cpu_only": False,
            "profile_all": False, "text": False, "help": False}
    i = 0
    try:
        while i < len(words):
            word = words[i]
            name, eq, value = cli.split_option(word)
            if name in ("-h", "--help") and not eq:
                opts["help"] = True
            elif name in FLAGS and not eq:
                opts[FLAGS[name]] = True
            elif name in WITH_VALUE:
                value, i = cli.option_value(words, i, name, eq, value)
                key = WITH_VALUE[name]
                if key == "interval":
                    opts[key] = cli.parse_interval(value)
                elif key == "memory_interval":
                    opts[key] = cli.parse_size(value)
                elif key == "min_percent":
                    opts[key] = cli.parse_percent(value)
                elif key in ("profile_only", "profile_exclude"):
                    opts[key] += cli.split_patterns(value, name)
                elif value == "-":
                    raise cli.UsageError("%s -: the magic shows the report; give a file name"
                                         % name)
                elif not value:
                    raise cli.UsageError("%s: expected a file name" % name)
                else:
                    what = "the profile" if key == "outfile" else "the HTML report"
                    opts[key] = cli.check_outfile(value, "--" + key, what)
            else:
                raise cli.UsageError("unknown option %s (see %%calipers --help)" % word)
            i += 1
    except cli.UsageError as exc:
        raise UsageError("calipers: %s" % exc) from None
    return opts


class _Session:
    """The private directory of this IPython session's cell files and
    default profiles (mkdtemp: mode 0700, a random name, created
    exclusively), made on first use."""

    def __init__(self):
        self.directory = None

    def new_file(self, stem, suffix):
        """A new empty file, mode 0600, created exclusively: stem + suffix,
        or stem-2 + suffix and so on if taken.  Returns its path."""
        if self.directory is None or not os.path.isdir(self.directory):
            self.directory = tempfile.mkdtemp(prefix="calipers-ipython-")
        for n in range(1, 1000):
            path = os.path.join(self.directory, stem + ("" if n == 1 else "-%d" % n) + suffix)
            try:
                _common.create_private(path)
                return path
            except FileExistsError:
                continue
        raise OSError("no free file name in %s" % self.directory)


def _write_text(path, text):
    """Write `text` into the file we just created (O_NOFOLLOW: still ours)."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def iframe(report_html, note=""):
    """The HTML report as notebook output: the whole page in the srcdoc of
    a sandboxed iframe (scripts allowed, no same-origin: it can neither
    reach nor restyle the notebook, and its content security policy keeps
    it offline), in a box that can be dragged taller; `note` (text) under
    it."""
    frame = ('<iframe srcdoc="%s" sandbox="allow-scripts" title="calipers report" '
             'style="width:100%%;height:100%%;border:0;display:block"></iframe>'
             % html.escape(report_html, quote=True))
    box = ('<div class="calipers-report" style="resize:vertical;overflow:hidden;'
           'height:%dpx;border:1px solid rgba(128,128,128,.35)">%s</div>' % (FRAME_HEIGHT_PX, frame))
    if note:
        box += '<div style="font-size:smaller;opacity:.75">%s</div>' % html.escape(note)
    return box


@magics_class
class CalipersMagics(Magics):
    def __init__(self, shell):
        super().__init__(shell)
        self.session = _Session()

    @line_cell_magic
    def calipers(self, line, cell=None):
        """Profile a statement (%calipers) or a cell (%%calipers), CPU and
        memory, and show the report.  %calipers --help lists the options."""
        words, rest = split_line(line)
        opts = parse_options(words)
        if opts["help"]:
            print(HELP)
            return None
        magic = "%%calipers" if cell is not None else "%calipers"
        if cell is None:
            source = rest
            if not source.strip():
                raise UsageError("calipers: %calipers needs a statement (or %%calipers on a "
                                 "cell); %calipers --help lists the options")
        else:
            if rest:
                raise UsageError("calipers: unexpected %r after the options of %%%%calipers "
                                 "(the code goes in the cell below)" % rest)
            source = cell
        if _agent._state.get("pid") == os.getpid() and not _agent._state.get("finished"):
            raise UsageError("calipers: this process is already being profiled (calipers run "
                             "or calipers.start()); its profile is written when that ends, so "
                             "%s cannot profile the code on its own" % magic)
        return self._run(magic, line, source, opts, cell is None)

    def _run(self, magic, line, source, opts, is_line):
        shell = self.shell
        count = _cell_number(shell)
        path = self.session.new_file("In[%d]" % count, ".py")
        # A cell's file starts with the magic's line, as the cell does: the
        # report's line numbers are the notebook's.
        head = "%s %s\n" % (magic, line.strip()) if not is_line else ""
        _write_text(path, head + source + ("" if source.endswith("\n") else "\n"))
        # A SyntaxError goes up to IPython, which shows it as its own (no
        # frames) and fails the cell.
        body, tail = _compile(shell, shell.transform_cell(source), path, bool(head), is_line)
        outfile = opts["outfile"] or self.session.new_file("In[%d]" % count, ".json")
        glb, loc = shell.user_global_ns, shell.user_ns
        value = None
        calipers.start(outfile, interval=opts["interval"], cpu_only=opts["cpu_only"],
                       memory_interval=opts["memory_interval"],
                       profile_all=opts["profile_all"], profile_only=opts["profile_only"],
                       profile_exclude=opts["profile_exclude"])
        # The report is titled with the magic as typed and names the cell's file.
        _agent._state["argv"] = ["%s %s" % (magic, line.strip()) if line.strip() else magic]
        _agent._state["script"] = path
        # Switched on for the code alone: the engine's starting and
        # stopping (joining its threads, in a kernel with a dozen of
        # them) ran under the magic's caller, the line of the cell that
        # holds the magic, and was charged there.
        calipers.off()
        try:
            calipers.on()
            try:
                exec(body, glb, loc)
                if tail is not None:
                    if is_line:
                        value = eval(tail, glb, loc)
                    else:
                        exec(tail, glb, loc)
            finally:
                calipers.off()
        finally:
            written = calipers.stop()
            self._show(written, opts)
        return value

    def _show(self, written, opts):
        """Display the report of the profile at `written` (None: not
        written; stop() has said why on standard error)."""
        if not written:
            print("calipers: the profile could not be written; no report", file=sys.stderr)
            return
        try:
            text = cli.read_profile(written)
            filled = fill_sources(text)
            if filled is not text:
                _common.write_file(written, filled)
                text = filled
            report = _calipers().render_text(text, _width(), 0, opts["min_percent"], 300,
                                             written)
            page = _calipers().render_html(text)
        except (cli.InputError, OSError, ValueError) as exc:
            print("calipers: could not read the profile %s: %s" % (written, exc),
                  file=sys.stderr)
            return
        note = "calipers: profile written to %s" % written
        if opts["html"]:
            try:
                _common.write_file(opts["html"], page.encode("utf-8"))
                note += "; HTML report written to %s" % opts["html"]
                report += "calipers: HTML report written to %s\n" % opts["html"]
            except OSError as exc:
                print("calipers: could not write %s: %s" % (opts["html"], exc.strerror or exc),
                      file=sys.stderr)
        if opts["text"]:
            print(report, end="")
        else:
            display({"text/plain": report, "text/html": iframe(page, note)}, raw=True)


def _compile(shell, code, path, shifted, is_line):
    """(the code of all but a last expression statement, the code of that
    expression or None), compiled under `path`: the last expression in
    'eval' mode for a statement (its value is returned), 'single' for a
    cell (IPython's display hook shows it).  `shifted`: the file has the
    magic's line first, so every line is one further down.  The user's
    AST transformers are applied, as IPython does.  Raises SyntaxError,
    its line the file's."""
    try:
        tree = ast.parse(code, filename=path)
    except SyntaxError as exc:
        if shifted and exc.lineno:
            exc.lineno += 1
        raise
    if shifted:
        ast.increment_lineno(tree, 1)
    tree = shell.transform_ast(tree)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body.pop()
    body = compile(tree, path, "exec")
    if last is None:
        return body, None
    if is_line:
        return body, compile(ast.Expression(last.value), path, "eval")
    return body, compile(ast.Interactive([last]), path, "single")


#: As the engine's writer (cal_report.c): a cell's whole text up to this
#: size, else the lines within SOURCE_CONTEXT of a profiled line.
SOURCE_WHOLE_BYTES = 32 << 10
SOURCE_CONTEXT = 3


def fill_sources(text):
    """The JSON profile `text` (bytes) with the text of the profiled files
    the writer could not read (``"source": null``) that IPython holds in
    linecache (earlier cells), or `text` itself when there are none.  The
    rest of the document is left byte for byte: each such file's
    ``"source": null`` is replaced where it follows the file's path (the
    writer puts ``path`` first and ``source`` last in a file's object)."""
    doc = json.loads(text)
    out, at = [], 0
    for f in doc.get("files") or []:
        if f.get("source") is not None:
            continue
        entry = linecache.cache.get(f["path"])
        if not entry or not isinstance(entry[2], list):
            continue
        lines = [ln.rstrip("\r\n") for ln in entry[2]]
        if sum(len(ln) + 1 for ln in lines) <= SOURCE_WHOLE_BYTES:
            keep = range(1, len(lines) + 1)
        else:
            wanted = {r["line"] for r in f.get("lines", [])}
            wanted |= {r["line"] for r in f.get("functions", [])}
            keep = sorted({n for w in wanted
                           for n in range(w - SOURCE_CONTEXT, w + SOURCE_CONTEXT + 1)
                           if 1 <= n <= len(lines)})
        source = json.dumps([[n, lines[n - 1]] for n in keep], ensure_ascii=False)
        key = b'"path": ' + json.dumps(f["path"], ensure_ascii=False).encode("utf-8")
        start = text.find(key, at)
        null = text.find(b'"source": null', start) if start >= 0 else -1
        if null < 0:
            continue
        out += [text[at:null], b'"source": ', source.encode("utf-8")]
        at = null + len(b'"source": null')
    return b"".join(out) + text[at:] if out else text


def _cell_number(shell):
    """The number IPython shows for the running cell (In [n]): the running
    execution's; IPython 9 has already counted past it in
    shell.execution_count, IPython 8 has not."""
    running = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    count = getattr(running, "execution_count", None)
    return count if isinstance(count, int) else getattr(shell, "execution_count", 0)


def _calipers():
    from calipers import _calipers as ext

    return ext


def _width():
    """The terminal's width in a terminal IPython; 100 in a kernel."""
    try:
        return os.get_terminal_size(1).columns if os.isatty(1) else 100
    except OSError:
        return 100


def load(shell):
    """%load_ext calipers: register the magics with `shell`."""
    shell.register_magics(CalipersMagics)


__all__ = ["CalipersMagics", "load", "split_line", "parse_options", "iframe", "HELP"]
