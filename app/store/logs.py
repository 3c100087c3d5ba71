"""Log files: one per front end (``tandem.log`` for the window, ``tandem-cli.log`` for the
command line) in platformdirs' user log folder (:func:`app.store.paths.log_dir`).

Each process that starts logging writes a header first: Tandem's version, the OS, Python,
and the fields its caller adds (Qt, llama-cpp-python and the llama.cpp commit, the
backend; see :func:`app.engine.llama.build_info`), so a log sent with a bug report says
what produced it. Files rotate at 2 MB (two old files kept). Qt-free; the header fields
about llama.cpp and Qt are passed in, so this module imports neither.
"""

from __future__ import annotations

import datetime as _dt
import logging
import logging.handlers
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

from app.store import paths

#: file name per front end
LOG_FILES = {"gui": "tandem.log", "cli": "tandem-cli.log"}
MAX_BYTES = 2_000_000
BACKUPS = 2

_handlers: dict[Path, logging.Handler] = {}


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
