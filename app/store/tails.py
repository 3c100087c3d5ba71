"""The messages that follow a version of a message that is not shown (its *tail*).

A conversation is a tree: every version of a message (a user message's edits, a reply's
regenerations) owns the messages that followed it. The history keeps the path that is
shown as rows of ``messages``, so every reader of a conversation sees that path and
nothing else; a version that is not shown is a row of ``reply_versions`` whose
``tail_json`` holds the messages that followed it when it was last shown, each with its
own versions and their tails, nested (a JSON list, :func:`read_tail`'s shape).

Showing another version moves the shown tail into JSON (:func:`read_tail`, then
:func:`drop_tail`) and the other one's back into rows (:func:`write_tail`): the rows get
new ids, after every other message of the conversation, so ordering by id still gives
the conversation's order. A tail lives in one place only (each switch rewrites the two
it swaps; none is ever copied). Everything here runs inside the caller's transaction: a tail that cannot
be read or written raises before the transaction commits, and nothing changes.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from app.formatting import loads_json

#: a message's own values, the same columns in ``messages`` and ``reply_versions``
VERSION_COLUMNS = ("content", "finish_reason", "stats_json", "draft_spans", "note", "seed",
                   "model", "created_at", "updated_at")

_ROLES = frozenset({"user", "assistant"})


def dumps(tail: list[dict[str, Any]]) -> str | None:
    """``tail`` as stored in ``tail_json`` (None for no messages). Text stays unescaped
    (``ensure_ascii=False``) so that a search for a word finds it in the JSON too.

    Raises:
        ValueError: versions nested too deep to write (hundreds of levels of edits
            inside kept messages); the caller's transaction then changes nothing.
    """
    try:
        return json.dumps(tail, ensure_ascii=False) if tail else None
    except RecursionError:
        raise ValueError("the versions after this message are nested too deep to keep "
                         "another level") from None


def loads(text: str | None) -> list[dict[str, Any]]:
    """A stored tail. Raises ValueError when it is not a list of messages (a database
    edited by hand): the caller's transaction then changes nothing."""
    if text is None:
        return []
    try:
        tail = loads_json(text)
    except ValueError as exc:  # not JSON, or nested too deep to read
        raise ValueError(f"the messages kept with that version are damaged ({exc})") from None
    if not isinstance(tail, list) or not all(
            isinstance(m, dict) and m.get("role") in _ROLES and isinstance(m.get("content"), str)
            for m in tail):
        raise ValueError("the messages kept with that version are damaged (not a list of "
                         "messages)")
    return tail


def read_tail(c: sqlite3.Connection, conversation_id: int, after_id: int) -> list[dict[str, Any]]:
    """The messages of a conversation after message ``after_id``, oldest first, as
    JSON-ready dicts: ``role``, :data:`VERSION_COLUMNS`, and ``versions`` (the message's
    versions not shown, each with its :data:`VERSION_COLUMNS` and its own ``tail``).

    Raises:
        ValueError: one of them is a reply still being written (another window's).
    """
    rows = c.execute("SELECT * FROM messages WHERE conversation_id = ? AND id > ? ORDER BY id",
                     (conversation_id, after_id)).fetchall()
    tail = []
    for row in rows:
        if row["status"] != "done":
            raise ValueError("a reply after it is still being written")
        versions = c.execute("SELECT * FROM reply_versions WHERE message_id = ?"
                             " ORDER BY created_at, id", (row["id"],)).fetchall()
        tail.append({"role": row["role"], **{k: row[k] for k in VERSION_COLUMNS},
                     "versions": [_version(v) for v in versions]})
    return tail


def _version(row: sqlite3.Row) -> dict[str, Any]:
    out = {k: row[k] for k in VERSION_COLUMNS}
    try:
        out["tail"] = loads(row["tail_json"])
    except ValueError:  # carried along as it is: nothing is lost by moving it
        out["tail_json"] = row["tail_json"]
    return out


def drop_tail(c: sqlite3.Connection, conversation_id: int, after_id: int) -> None:
    """Delete the messages after ``after_id`` (their versions go with them)."""
    c.execute("DELETE FROM messages WHERE conversation_id = ? AND id > ?",
              (conversation_id, after_id))


def write_tail(c: sqlite3.Connection, conversation_id: int, tail: list[dict[str, Any]]) -> None:
    """Insert ``tail`` (:func:`read_tail`'s shape) at the end of the conversation.

    Raises:
        ValueError: a message or version lacks a value (a database edited by hand).
    """
    cols = ", ".join(VERSION_COLUMNS)
    marks = ", ".join("?" for _ in VERSION_COLUMNS)
    try:
        for m in tail:
            cur = c.execute(
                f"INSERT INTO messages (conversation_id, role, status, {cols})"
                f" VALUES (?, ?, 'done', {marks})",
                (conversation_id, m["role"], *(m[k] for k in VERSION_COLUMNS)))
            for v in m.get("versions") or []:
                stored = dumps(v["tail"]) if "tail" in v else v.get("tail_json")
                c.execute(f"INSERT INTO reply_versions (message_id, {cols}, tail_json)"
                          f" VALUES (?, {marks}, ?)",
                          (cur.lastrowid, *(v[k] for k in VERSION_COLUMNS), stored))
    except (KeyError, TypeError, sqlite3.IntegrityError) as exc:
        raise ValueError(f"the messages kept with that version are damaged ({exc!r})") from None
