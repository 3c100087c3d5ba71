"""A conversation written out as Markdown or JSON, every version of every message included.

Qt-free (the window's "Export…" calls it; tests call it directly). The Markdown is for
reading: each reply shows the version the conversation continued from, with its
drafter and speed, and the other versions follow it in ``<details>`` blocks, so plain
and speculative versions can be compared in any Markdown viewer. The JSON is for
programs: :data:`EXPORT_SCHEMA_VERSION`, the conversation, and per message its text,
finish reason, statistics (``SpecStats.to_dict()`` with ``auto`` and ``context`` when
recorded) and, for a message with versions (a regenerated reply, an edited user
message), ``versions``: every version in the order they were written, the shown one
marked. Both write the conversation's shown path: the messages that followed a version
not shown are not written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.options import SpecMode
from app.store.history import Conversation, HistoryStore, ReplyVersion, StoredMessage
from app.store.files import write_text_atomic

#: the JSON export's layout version (fields are only ever added within one version)
EXPORT_SCHEMA_VERSION = 1


def _version_dict(v: ReplyVersion) -> dict[str, Any]:
    return {"number": v.number, "shown": v.shown, "content": v.content,
            "finish_reason": v.finish_reason, "stats": v.stats,
            "draft_spans": [list(s) for s in v.draft_spans], "note": v.note, "seed": v.seed,
            "model": v.model, "created_at": v.created_at}


def conversation_data(store: HistoryStore, conversation_id: int) -> dict[str, Any]:
    """The conversation as JSON-ready data (see the module docstring).

    Raises:
        KeyError: no such conversation.
    """
    conv = store.conversation(conversation_id)
    messages = []
    for m in store.messages(conversation_id):
        entry: dict[str, Any] = {
            "role": m.role, "content": m.content, "finish_reason": m.finish_reason,
            "stats": m.stats, "model": m.model, "note": m.note, "seed": m.seed,
            "created_at": m.created_at}
        if m.versions > 1:
            entry["version"] = m.version
            entry["versions"] = [_version_dict(v) for v in store.versions(m.id)]
        messages.append(entry)
    return {"schema_version": EXPORT_SCHEMA_VERSION, "title": conv.title,
            "system_prompt": conv.system_prompt, "created_at": conv.created_at,
            "updated_at": conv.updated_at, "messages": messages}


def _figures(stats: dict[str, Any] | None, finish_reason: str | None) -> str:
    """``75 tokens · 18.3 tok/s · prompt lookup k=16 · α 95%`` (what the footer says first)."""
    if not stats:
        return finish_reason or ""
    parts = [f"{stats.get('emitted', 0)} tokens"]
    if stats.get("decode_tps"):
        parts.append(f"{stats['decode_tps']:.1f} tok/s")
    try:
        mode = SpecMode(stats.get("mode", "off"))
        words = mode.words + (f" k={stats.get('draft_max', 0)}" if mode is not SpecMode.OFF
                              else "")
    except ValueError:
        words = str(stats.get("mode"))
    parts.append(("Auto: " if isinstance(stats.get("auto"), dict) else "") + words)
    if stats.get("acceptance_rate") is not None:
        parts.append(f"α {stats['acceptance_rate'] * 100:.0f}%")
    if finish_reason and finish_reason != "stop":
        parts.append(finish_reason)
    return " · ".join(parts)


def _reply_markdown(m: StoredMessage, versions: list[ReplyVersion]) -> list[str]:
    head = "## Assistant" + (f" · {m.model}" if m.model else "")
    if m.versions > 1:
        head += f" (version {m.version} of {m.versions}, the one the conversation continued from)"
    out = [head, "", m.content, "", f"*{_figures(m.stats, m.finish_reason)}*", ""]
    for v in versions:
        if v.shown:
            continue
        out += [f"<details><summary>Version {v.number} of {len(versions)} · "
                f"{_figures(v.stats, v.finish_reason)}</summary>", "", v.content, "",
                "</details>", ""]
    return out


def conversation_markdown(store: HistoryStore, conversation_id: int) -> str:
    """The conversation as Markdown (see the module docstring).

    Raises:
        KeyError: no such conversation.
    """
    conv: Conversation = store.conversation(conversation_id)
    out = [f"# {conv.title}", ""]
    if conv.system_prompt.strip():
        out += ["**System prompt:**", "", conv.system_prompt, ""]
    for m in store.messages(conversation_id):
        if m.role == "assistant":
            out += _reply_markdown(m, store.versions(m.id) if m.versions > 1 else [])
        else:
            head = "## You" if m.role == "user" else f"## {m.role}"
            if m.versions > 1:  # an edited message: the text the conversation went on from
                head += f" (version {m.version} of {m.versions})"
            out += [head, "", m.content, ""]
    return "\n".join(out).rstrip() + "\n"


def export_conversation(store: HistoryStore, conversation_id: int, path: Path) -> Path:
    """Write the conversation to ``path``: JSON for a ``.json`` name, else Markdown.

    Raises:
        KeyError: no such conversation.
        OSError: the file could not be written (the old one, if any, is kept).
    """
    if path.suffix.lower() == ".json":
        text = json.dumps(conversation_data(store, conversation_id), indent=2,
                          ensure_ascii=False) + "\n"
    else:
        text = conversation_markdown(store, conversation_id)
    return write_text_atomic(path, text)
