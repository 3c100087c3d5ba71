"""Export… on a conversation: ask where, write it (:mod:`app.ui.chat.export`), report a
failure through the controller's one error path."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

from app.chat.conversation import ChatController
from app.chat.events import UserError
from app.ui.chat.export import export_conversation


def export_to(controller: ChatController, conversation_id: int, path: Path) -> bool:
    """Write a conversation, every version included, as Markdown (or JSON for a
    ``.json`` name); a failure is reported (message bar) and False returned."""
    store = controller.store
    if store is None:
        return False
    try:
        export_conversation(store, conversation_id, path)
    except (OSError, KeyError, ValueError, TypeError, sqlite3.Error) as exc:
        controller.report(UserError("Export failed", f"{path} was not written: {exc}",
                                    origin="export"))
        return False
    return True


def export_stem(title: str, limit: int = 60) -> str:
    """A file name (without extension) from a conversation's title: a title cut short
    ("… balcony. Wh…") loses its last, partial word; punctuation goes; words are joined
    by spaces, at most ``limit`` characters, cut between words ("" when nothing is left)."""
    if title.endswith("\u2026"):
        title = title[:-1].rsplit(" ", 1)[0] if " " in title else title[:-1]
    title = title.replace("'", "").replace("\u2019", "")  # "I'm" stays one word
    words = "".join(ch if ch.isalnum() or ch in "-_" else " " for ch in title).split()
    stem = ""
    for word in words:
        if len(stem) + len(word) + (1 if stem else 0) > limit:
            break
        stem = f"{stem} {word}" if stem else word
    return stem or (words[0][:limit] if words else "")


_FILTERS = {"Markdown (*.md)": ".md", "JSON (*.json)": ".json"}
#: extensions a typed name keeps (its own decides the format: JSON, else Markdown)
_KEPT_SUFFIXES = frozenset({".md", ".markdown", ".json", ".txt"})


def export_path(name: str, selected_filter: str) -> Path:
    """The file a save dialog's answer names: a name typed without one of
    :data:`_KEPT_SUFFIXES` gets the chosen type's (JSON chosen: "summary" → "summary.json",
    "report 1.5" → "report 1.5.json"); "summary.md" is written as typed."""
    path = Path(name)
    if path.suffix.lower() in _KEPT_SUFFIXES:
        return path
    stem = path.name.rstrip(".") or "conversation"  # "..." is no name
    return path.with_name(stem + _FILTERS.get(selected_filter, ".md"))


def export_open_conversation(parent: QWidget, controller: ChatController) -> bool:
    """File → Export conversation…: :func:`export_with_dialog` of the open conversation;
    a new chat with nothing in it yet says so instead."""
    if controller.current_conversation is None:
        controller.report(UserError("Nothing to export", "This chat has no messages yet.",
                                    level="warning", origin="history"))
        return False
    return export_with_dialog(parent, controller, controller.current_conversation)


def export_with_dialog(parent: QWidget, controller: ChatController,
                       conversation_id: int) -> bool:
    """Ask for a file name (Markdown by default, JSON on request; in the folder of the
    last export), then :func:`export_to`."""
    title = next((c.title for c in controller.conversations() if c.id == conversation_id),
                 "conversation")
    stem = export_stem(title)
    ui = controller.settings.ui
    folder = Path(ui.export_folder) if ui.export_folder else Path.home()
    if not folder.is_dir():  # gone since (a USB stick): home, as the first time
        folder = Path.home()
    name, chosen = QFileDialog.getSaveFileName(
        parent, "Export conversation", str(folder / f"{stem or 'conversation'}.md"),
        ";;".join(_FILTERS))
    if not name:
        return False
    path = export_path(name, chosen)
    if not export_to(controller, conversation_id, path):
        return False
    ui.export_folder = str(path.parent)
    controller.save_settings()
    controller.report(UserError("Exported", f"The conversation was saved to {path}.",
                                level="info", origin="export"))
    return True
