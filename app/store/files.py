"""Writing a small file so that a crash leaves the old one or the new one, never half.

:func:`write_text_atomic` writes a temporary file next to the target, flushes it to the
disk (``fsync``), then renames it over the target (``os.replace``, atomic on POSIX and
Windows). Settings, the library configuration and the download notes all go through it.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any


def write_text_atomic(path: Path, text: str) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) atomically; the folder is created if needed.

    The temporary name carries the process and thread, so concurrent writers of the same
    file (two downloads updating one manifest) never share one.

    Returns:
        ``path``.

    Raises:
        OSError: the folder is not writable or the disk is full (the old file is kept,
            the temporary one removed).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def write_json_atomic(path: Path, data: Any, *, indent: int = 2, sort_keys: bool = False) -> Path:
    """:func:`write_text_atomic` of ``data`` as JSON (non-ASCII kept, newline at the end).

    A lone surrogate in a string (a file name that is not UTF-8, decoded with PEP 383's
    escapes) cannot be written as UTF-8: it is written as the JSON escape ``\\uXXXX``,
    which :func:`json.loads` turns back into the same string."""
    text = json.dumps(data, indent=indent, sort_keys=sort_keys, ensure_ascii=False)
    if not text.isascii():  # a surrogate can only stand inside a JSON string
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return write_text_atomic(path, text + "\n")
