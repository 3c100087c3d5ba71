"""The message input: Enter sends, Shift+Enter adds a line; grows with its text."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit, QSizePolicy, QWidget

_MIN_LINES, _MAX_LINES = 2, 8


class ChatInputWidget(QPlainTextEdit):
    """A plain-text box for the next message."""

    submitted = Signal()
    """Enter was pressed (without Shift) while the box had text."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatInput")
        self.setPlaceholderText("Message  (Enter sends, Shift+Enter adds a line)")
        self.setTabChangesFocus(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().contentsChanged.connect(self._on_document_contents_changed)
        self._on_document_contents_changed()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            mods = event.modifiers()
            if mods & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
                return
            if not mods & (Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier):
                if self.toPlainText().strip():
                    self.submitted.emit()
                return
        super().keyPressEvent(event)

    @Slot()
    def _on_document_contents_changed(self) -> None:
        lines = max(_MIN_LINES, min(_MAX_LINES, self.document().blockCount()))
        line_h = self.fontMetrics().lineSpacing()
        margins = self.contentsMargins()
        h = lines * line_h + 2 * int(self.document().documentMargin()) + margins.top() + margins.bottom() + 4
        self.setFixedHeight(h)
