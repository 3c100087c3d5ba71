"""The CLI's JSON outputs: one object per command, each with ``schema_version``.

Every ``--json`` output of ``python -m app …`` is one JSON object written by
:func:`print_json`; its first field is ``schema_version`` (:data:`SCHEMA_VERSION`), an
integer raised whenever a field is removed, renamed or changes meaning (adding a field
does not raise it). A command whose result is a list puts it under a named field
(``models``, ``drafts``, ``pairs``), so the version has a place. The fields of every
output are documented in ``docs/json.md``; ``tests/test_json_outputs.py`` checks that
the document and the outputs name the same fields.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from app.formatting import valid_text

#: version of the CLI's JSON outputs (docs/json.md)
SCHEMA_VERSION = 1


def json_safe(data: Any) -> Any:
    """``data`` with every string made valid Unicode, for JSON that is valid UTF-8.

    A file name that is not valid UTF-8 reaches Python as a string with surrogate escapes
    (PEP 383); such a string is written with each undecodable byte as ``\\xNN`` text (an
    unpaired surrogate of a Windows file name as ``\\uXXXX``:
    :func:`app.formatting.valid_text`), and the dict that holds it gets
    ``"<key>_undecodable": true`` next to it, so a reader knows the name is not the exact
    bytes on disk.
    """
    if isinstance(data, str):
        return valid_text(data)
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            safe = json_safe(v)
            out[valid_text(str(k))] = safe
            if _has_surrogates(v):
                out[f"{valid_text(str(k))}_undecodable"] = True
        return out
    if isinstance(data, (list, tuple)):
        return [json_safe(v) for v in data]
    return data


def _has_surrogates(v: Any) -> bool:
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(v, (list, tuple)):
        return any(_has_surrogates(x) for x in v)
    return False


def with_schema(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with ``schema_version`` as its first field."""
    return {"schema_version": SCHEMA_VERSION, **data}


def print_json(data: Mapping[str, Any], *, indent: int | None = 1) -> None:
    """Write ``data`` (with ``schema_version``) to stdout as one JSON object and a newline,
    valid UTF-8 whatever the file names in it (:func:`json_safe`)."""
    sys.stdout.write(json.dumps(json_safe(with_schema(data)), ensure_ascii=False, indent=indent) + "\n")
