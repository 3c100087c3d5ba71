"""A conversation written out as Markdown or JSON, every version of every message included.

Qt-free (the window's "Export…" calls it; tests call it directly). The Markdown is for
reading: the conversation as shown, each message with the version the conversation
continued from (a reply with its footer: drafter and speed, what was dropped to fit the
context) and its other versions in ``<details>`` blocks, so plain and speculative
versions can be compared in any Markdown viewer; a version that other messages followed
says how many (they are in the JSON). As in the chat, what the user typed (messages,
the system prompt) is shown exactly, in a fenced ``text`` block, and replies as
Markdown, their headings moved two levels down (``#`` → ``###``) so that they sit
under the message's ``##`` and their line breaks kept; the JSON has every text
unchanged.
The JSON is the whole conversation, for programs and backups:
:data:`EXPORT_SCHEMA_VERSION`, the conversation, and per message its text, finish
reason, statistics (``SpecStats.to_dict()`` with ``auto`` and ``context`` when
recorded) and, for a message with versions (a regenerated reply, an edited user
message), ``versions``: every version in the order they were written, the shown one
marked, and a version not shown with ``followed_by``: the messages that followed it,
in the same form (their own versions included).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from app.chat.conversation import CONTINUED_NOTE, CONTINUED_SUMMARY
from app.store.history import (
    Conversation,
    HistoryStore,
    ReplyVersion,
    StoredMessage,
    stats_from_json,
)
from app.store.files import write_text_atomic
from app.ui.chat.footer import reply_figures, reply_footer

#: the JSON export's layout version (fields are only ever added within one version)
EXPORT_SCHEMA_VERSION = 1


def _version_dict(v: ReplyVersion) -> dict[str, Any]:
    return {"number": v.number, "shown": v.shown, "content": v.content,
            "finish_reason": v.finish_reason, "stats": v.stats,
            "draft_spans": [list(s) for s in v.draft_spans], "note": v.note, "seed": v.seed,
            "model": v.model, "created_at": v.created_at}


def _time(value: object) -> float:
    """A kept time stamp as seconds (0.0 when it is not a number: edited by hand)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return 0.0


def _kept_entry(m: object) -> dict[str, Any]:
    """A kept message (:func:`app.store.tails.read_tail`'s shape) as an exported one;
    values of the wrong kinds (a database edited by hand) are exported as missing, and
    kept messages that could not be read as their stored text (``followed_by_raw``)."""
    m = m if isinstance(m, dict) else {}

    def values(v: dict[str, Any]) -> dict[str, Any]:
        return {"content": v.get("content"), "finish_reason": v.get("finish_reason"),
                "stats": stats_from_json(v.get("stats_json")), "model": v.get("model"),
                "note": v.get("note"), "seed": v.get("seed"), "created_at": v.get("created_at")}

    def version(v: dict[str, Any]) -> dict[str, Any]:
        out = {**values(v), "shown": False}
        if isinstance(v.get("tail"), list) and v["tail"]:
            out["followed_by"] = [_kept_entry(k) for k in v["tail"]]
        elif isinstance(v.get("tail_json"), str):
            out["followed_by_raw"] = v["tail_json"]
        return out

    entry: dict[str, Any] = {"role": m.get("role"), **values(m)}
    others = m.get("versions")
    others = [v for v in others if isinstance(v, dict)] if isinstance(others, list) else []
    if others:
        shown = {**values(m), "shown": True}
        versions = sorted([version(v) for v in others] + [shown],
                          key=lambda v: _time(v["created_at"]))
        entry["version"] = next(i for i, v in enumerate(versions) if v is shown) + 1
        entry["versions"] = [{"number": i + 1, **v} for i, v in enumerate(versions)]
    return entry


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
            kept = store.kept_messages(m.id)
            entry["version"] = m.version
            entry["versions"] = [
                {**_version_dict(v), **({"followed_by": [_kept_entry(k) for k in kept[v.number]]}
                                        if v.number in kept else {})}
                for v in store.versions(m.id)]
        messages.append(entry)
    return {"schema_version": EXPORT_SCHEMA_VERSION, "title": conv.title,
            "system_prompt": conv.system_prompt, "created_at": conv.created_at,
            "updated_at": conv.updated_at, "messages": messages}


_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX_HEADING = re.compile(r"^( {0,3})(#{1,6})(?=[ \t]|$)")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_NOT_A_PARAGRAPH = re.compile(r"^\s*(?:#|[-*+>|]|\d{1,9}[.)])")


def _verbatim(text: str) -> str:
    """Typed text as the chat shows it (every character, no Markdown): a fenced
    ``text`` block whose fence is longer than any run of backticks in it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _under_heading(text: str) -> str:
    """A reply's Markdown with its headings two levels down (at most ``######``), outside
    fenced code, so that they sit under the message's ``##``: ATX ones (``#``), and
    Setext ones (a paragraph underlined with ``===`` or ``---``) written as ATX; a
    paragraph's line breaks end with two spaces (a Markdown line break), as the chat
    shows them."""
    out: list[str] = []
    fence: str | None = None
    para = 0  # lines of the plain paragraph that ends the output so far
    for line in text.split("\n"):
        if (m := _FENCE_LINE.match(line)) is not None:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip(
                    ).strip(mark[0]):
                fence = None
            para = 0
        elif fence is not None:
            para = 0
        elif (h := _ATX_HEADING.match(line)) is not None:
            level = min(6, len(h.group(2)) + 2)
            line = h.group(1) + "#" * level + line[h.end():]
            para = 0
        elif para and (u := _SETEXT_UNDERLINE.match(line)) is not None:
            title = " ".join(x.strip() for x in out[-para:])
            del out[-para:]
            out.append(("###" if u.group(1)[0] == "=" else "####") + " " + title)
            para = 0
            continue
        elif not line.strip() or _NOT_A_PARAGRAPH.match(line):
            para = 0
        elif line.startswith(("    ", "\t")):
            para = para + 1 if para else 0  # continues a paragraph, never starts one (code)
        else:
            para += 1
        if para > 1 and not out[-1].endswith(("  ", "\\")):
            out[-1] += "  "  # a line break, as the chat shows it (Markdown joins the lines)
        out.append(line)
    return "\n".join(out)


def _shown(role: str, text: str) -> str:
    return _under_heading(text) if role == "assistant" else _verbatim(text)


def _figures(stats: dict[str, Any] | None, finish_reason: str | None,
             note: str | None = None) -> str:
    """``75 tokens · 18.3 tok/s · prompt lookup k=16 · α 95%``: the footer's first line
    (:func:`app.ui.chat.footer.reply_figures`)."""
    return " · ".join(reply_figures(stats, finish_reason, note))


def _message_markdown(store: HistoryStore, m: StoredMessage) -> list[str]:
    """One message of the shown path: the version shown, the others in ``<details>``."""
    versions = store.versions(m.id) if m.versions > 1 else []
    kept = {n: len(t) for n, t in store.kept_messages(m.id).items()} if versions else {}
    reply = m.role == "assistant"
    head = ("## Assistant" + (f" · {m.model}" if m.model else "") if reply
            else "## You" if m.role == "user" else f"## {m.role}")
    if versions:
        head += f" (version {m.version} of {m.versions}, the one the conversation continued from)"
    out = [head, "", _shown(m.role, m.content), ""]
    if reply:
        footer = reply_footer(m.stats, m.finish_reason, m.note)
        out += [*(f"*{line.strip()}*" for line in footer.splitlines() if line.strip()), ""]
    for v in versions:
        if v.shown:
            continue
        about = [_figures(v.stats, v.finish_reason, v.note)] if reply else []
        if reply and v.note and CONTINUED_NOTE in v.note:  # figures of its added text only
            about.append(CONTINUED_SUMMARY)
        if kept.get(v.number):
            n = kept[v.number]
            about.append(f"{n} message{'' if n == 1 else 's'} followed it (in the JSON export)")
        out += [f"<details><summary>Version {v.number} of {len(versions)}"
                + "".join(f" · {a}" for a in about) + "</summary>", "",
                _shown(m.role, v.content), "",
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
        out += ["**System prompt:**", "", _verbatim(conv.system_prompt), ""]
    for m in store.messages(conversation_id):
        out += _message_markdown(store, m)
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
