"""Log files: one per front end (``tandem.log`` for the window, ``tandem-cli.log`` for the
command line) in platformdirs' user log folder (:func:`app.store.paths.log_dir`).

Each process that starts logging writes a header first: Tandem's version, the OS, Python,
and the fields its caller adds (Qt, llama-cpp-python and the llama.cpp commit, the
backend; see :func:`app.engine.llama.build_info`), so a log sent with a bug report says
what produced it. Files rotate at 2 MB (two old files kept). Qt-free; the header fields
about llama.cpp and Qt are passed in, so this module imports neither.

A fatal signal (a crash in llama.cpp or Qt, or a bus error when a memory-mapped model
file is shortened while it is loaded) ends the process before any of that can log:
:func:`watch_fatal_errors` has Python's ``faulthandler`` write the threads' tracebacks
to ``crash.log`` (the window) or the terminal (the command line), and the window's next
start says what happened (:func:`take_last_crash`).
"""

from __future__ import annotations

import datetime as _dt
import faulthandler
import logging
import logging.handlers
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from app.store import paths

#: file name per front end
LOG_FILES = {"gui": "tandem.log", "cli": "tandem-cli.log"}
MAX_BYTES = 2_000_000
BACKUPS = 2

_handlers: dict[Path, logging.Handler] = {}

#: where the window's faulthandler writes (in the log folder)
CRASH_FILE = "crash.log"
_crash_file: IO[str] | None = None

#: what a fatal signal most likely means, by faulthandler's name for it
_CRASH_HINTS = {
    "Bus error": "Most often a model file was shortened or overwritten while it was "
                 "loaded (Tandem reads models in place): replace a model file only while "
                 "another model is loaded or Tandem is closed.",
}


def take_last_crash() -> str | None:
    """The sentence for the user when the window's previous run ended with a fatal signal
    (its ``crash.log`` holds faulthandler's report), else None. The report is kept as
    ``crash.log.1`` (the one before it is replaced), so that this says it once.
    Never raises: an unreadable log folder reads as no crash."""
    try:
        path = paths.log_dir() / CRASH_FILE
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        if not text.strip():
            return None
        kept = path.with_name(CRASH_FILE + ".1")
        path.replace(kept)
    except OSError:
        return None
    first = text.strip().splitlines()[0]  # "Fatal Python error: Bus error"
    what = first.partition(": ")[2].strip() or first
    hint = _CRASH_HINTS.get(what, "If it happens again, that file helps a bug report.")
    return f"Tandem stopped unexpectedly last time ({what}). {hint} The report is {kept}."


_previous_crash: str | None = None


def remember_last_crash() -> None:
    """:func:`take_last_crash`, kept for the window to show (:func:`pop_previous_crash`)."""
    global _previous_crash
    _previous_crash = take_last_crash()


def pop_previous_crash() -> str | None:
    """The sentence :func:`remember_last_crash` kept (once: it is cleared)."""
    global _previous_crash
    words, _previous_crash = _previous_crash, None
    return words


def watch_fatal_errors(kind: str) -> None:
    """Have ``faulthandler`` report a fatal signal's tracebacks: the window's into
    ``crash.log`` in the log folder (read at its next start by :func:`take_last_crash`,
    which must run first), the command line's on stderr. Without a writable log folder
    the window's go to stderr too."""
    global _crash_file
    if kind == "gui":
        try:
            _crash_file = open(paths.log_dir() / CRASH_FILE, "w", encoding="utf-8")  # noqa: SIM115 (open for the process's life)
        except OSError:
            _crash_file = None
    target = _crash_file if _crash_file is not None else sys.stderr
    try:
        faulthandler.enable(file=target, all_threads=True)
    except (OSError, ValueError, RuntimeError):  # a stderr without a file descriptor
        pass


def os_description() -> str:
    """The OS in words: the distribution's name on Linux (os-release), else the
    platform string (``macOS 14.5 arm64``, ``Windows 11 10.0.22631``)."""
    if sys.platform.startswith("linux"):
        try:
            pretty = platform.freedesktop_os_release().get("PRETTY_NAME", "")
        except OSError:
            pretty = ""
        return f"{pretty or 'Linux'} (kernel {platform.release()}, {platform.machine()})"
    if sys.platform == "darwin":
        return f"macOS {platform.mac_ver()[0]} {platform.machine()}"
    if sys.platform == "win32":
        release, version, *_ = platform.win32_ver()
        return f"Windows {release} {version} {platform.machine()}"
    return platform.platform()


def header_lines(kind: str, fields: Mapping[str, str]) -> list[str]:
    """The header of a log: a start line, then ``name: value`` lines.

    Args:
        kind: ``gui`` or ``cli``.
        fields: extra ``name: value`` pairs (Qt, llama.cpp, backend …), in order.
    """
    from app import __version__

    started = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    frozen = " (frozen app)" if getattr(sys, "frozen", False) else ""
    lines = [
        f"==== Tandem {__version__} ({'window' if kind == 'gui' else 'command line'}) "
        f"started {started}, pid {os.getpid()} ====",
        f"OS: {os_description()}",
        f"Python: {platform.python_version()} ({platform.python_implementation()}, "
        f"{sys.executable}){frozen}",
    ]
    lines += [f"{name}: {value}" for name, value in fields.items()]
    return lines


def start_log(kind: str, fields: Mapping[str, str] | None = None,
              level: int = logging.INFO) -> Path | None:
    """Log to this front end's file from now on, starting with a header.

    Handlers already on the root logger keep the level they had (a terminal that showed
    warnings still shows only warnings); the file gets ``level`` and above. Calling it
    again for the same file does nothing.

    Args:
        kind: ``gui`` (``tandem.log``) or ``cli`` (``tandem-cli.log``).
        fields: extra header lines (see :func:`header_lines`).
        level: the file's level.

    Returns:
        The log file, or None when it cannot be written (the folder is unwritable): the
        app then runs without a log file rather than not at all.
    """
    try:
        path = paths.log_dir() / LOG_FILES[kind]
    except OSError:
        return None
    if path in _handlers:
        return path
    try:
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8",
            errors="backslashreplace",  # a file name that is not UTF-8 must not break logging
        )
    except OSError:
        return None
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(level)
    root = logging.getLogger()
    for existing in root.handlers:
        if existing.level == logging.NOTSET:
            existing.setLevel(root.getEffectiveLevel())
    root.addHandler(handler)
    if root.getEffectiveLevel() > level:
        root.setLevel(level)
    for line in header_lines(kind, fields or {}):
        handler.handle(logging.makeLogRecord(
            {"name": "app.log", "levelno": logging.INFO, "levelname": "INFO", "msg": line}
        ))
    _handlers[path] = handler
    return path


def stop_log(kind: str) -> None:
    """Detach and close a file started by :func:`start_log` (tests; no-op if none)."""
    for path, handler in list(_handlers.items()):
        if path.name == LOG_FILES[kind]:
            logging.getLogger().removeHandler(handler)
            handler.close()
            del _handlers[path]
