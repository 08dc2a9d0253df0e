"""The in-process side of ``calipers run``: starts the engine from the
configuration the launcher passed, and writes the profile at exit.

Imported by the bootstrap before the program's first line, so it imports
nothing the interpreter has not already loaded (``atexit`` is built in) and
does all its remaining work at exit.
"""

import atexit
import os
import sys

from calipers import __version__, _calipers

RS = "\x1e"  # separates settings
US = "\x1f"  # separates items of a list setting
LIST_KEYS = ("argv", "profile_only", "profile_exclude", "library")

_state = {}


def encode_config(config):
    """Encode a flat dict of str, number, bool and list-of-str values."""
    parts = []
    for key, value in config.items():
        if key in LIST_KEYS:
            value = US.join(value)
        elif isinstance(value, bool):
            value = "1" if value else ""
        elif value is None:
            continue
        parts.append("%s=%s" % (key, value))
    return RS.join(parts)


def decode_config(text):
    config = {}
    for part in text.split(RS):
        key, _, value = part.partition("=")
        if key in LIST_KEYS:
            config[key] = value.split(US) if value else []
        else:
            config[key] = value
    return config


def start(text):
    """Start profiling this process with the launcher's configuration."""
    config = decode_config(text)
    interval = float(config.get("interval") or 0.01)
    alloc_mean = int(config.get("memory_interval") or 0)
    memory = _calipers.start(
        interval,
        profile_all=bool(config.get("profile_all")),
        only=config.get("profile_only", []),
        exclude=config.get("profile_exclude", []),
        library=config.get("library", []),
        self_dir=os.path.dirname(os.path.abspath(__file__)),
        cwd=config.get("cwd") or os.getcwd(),
        alloc_mean=alloc_mean,
        copy_mean=4 * alloc_mean,
        threshold=max(1 << 20, 4 * alloc_mean),
    )
    _state.update(config)
    _state["memory"] = bool(memory)
    _state["interval"] = interval
    _state["pid"] = os.getpid()
    atexit.register(_finish)


def _meta():
    return {
        "calipers_version": __version__,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "python_executable": sys.executable,
        "cwd": _state.get("cwd", ""),
        "script": _state.get("script") or None,
        "module": _state.get("module") or None,
        "argv": list(_state.get("argv", [])),
        "pid": _state["pid"],
        "start_unix": float(_state.get("start_unix") or 0),
        "interval": _state["interval"],
        "profile_all": bool(_state.get("profile_all")),
        "profile_only": _state.get("profile_only", []),
        "profile_exclude": _state.get("profile_exclude", []),
        "cpu_only": not _state.get("memory"),
    }


def _say(text):
    """Write to the real standard error, whatever the program did to sys.stderr."""
    data = text.encode("utf-8", "replace")
    while data:
        try:
            n = os.write(2, data)
        except InterruptedError:
            continue
        except OSError:
            return
        data = data[n:]


def _terminal_width():
    try:
        return os.get_terminal_size(2).columns
    except OSError:
        return int(os.environ.get("COLUMNS") or 100)


def styled(fd):
    """Colour and block glyphs on a terminal, unless NO_COLOR is set."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _finish():
    """atexit: stop the engine, write the profile, print the report.

    Registered first, so it runs after the program's own atexit handlers.
    Never raises: a failure here is one line on standard error.
    """
    if os.getpid() != _state.get("pid"):
        return  # a forked child: the parent owns the profile
    try:
        _calipers.stop()
        threading = sys.modules.get("threading")
        if threading is not None:
            names = {t.ident: t.name for t in threading.enumerate() if t.ident is not None}
            _calipers.set_thread_names(names)
        meta = _meta()
        outfile = _state.get("outfile") or "calipers-profile.json"
        written = text = None
        try:
            text = _calipers.write_json(outfile, meta)
            written = outfile
        except OSError as exc:
            import tempfile

            fallback = os.path.join(tempfile.gettempdir(), "calipers-profile-%d.json" % os.getpid())
            try:
                text = _calipers.write_json(fallback, meta)
                written = fallback
                _say("calipers: could not write %s (%s); profile saved to %s\n"
                     % (outfile, exc.strerror or exc, fallback))
            except OSError as exc2:
                _say("calipers: could not write the profile: %s\n" % (exc2,))
        if text is None:
            text = _calipers.json(meta)
        html = _state.get("html")
        if html:
            try:
                with open(html, "w", encoding="utf-8") as f:
                    f.write(_calipers.render_html(text))
            except OSError as exc:
                _say("calipers: could not write %s: %s\n" % (html, exc.strerror or exc))
                html = None
        if not _state.get("no_report"):
            report = _calipers.render_text(text, _terminal_width(), styled(2),
                                           float(_state.get("min_percent", 1.0)), 300, written)
            if html:
                report += "calipers: HTML report written to %s\n" % html
            _say(report)
    except BaseException as exc:  # noqa: BLE001 - never a calipers traceback
        _say("calipers: internal error while writing the profile: %s: %s\n"
             % (type(exc).__name__, exc))
