"""A label that shows its text as plain text.

Qt's default for a ``QLabel`` (``Qt.AutoText``) renders any text that looks like HTML as
rich text, so a model's name, a file name, a chat template's error or a server's reply
would draw headings, images (read from local files) and links in the window. Every
label in the window is a :class:`Label`; the few that show Tandem's own markup ask for
rich text, and escape whatever untrusted text they carry (``html.escape``).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget


class Label(QLabel):
    """A ``QLabel`` with plain text, or rich text with ``rich=True`` (Tandem's own markup
    only: escape any other text in it)."""

    def __init__(self, text: str = "", parent: QWidget | None = None, *,
                 rich: bool = False) -> None:
        super().__init__(text, parent)
        self.setTextFormat(Qt.TextFormat.RichText if rich else Qt.TextFormat.PlainText)
