"""One-line labels and buttons that elide their text instead of growing.

A file name or a model name shown in a bar or a header must not set the width of its
window: these widgets ask for their text's width (up to a maximum), shrink to a small
minimum when space is short, and then show the text shortened in the middle with "…";
the whole text is in the tooltip.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QPushButton, QSizePolicy, QWidget


def elided(widget: QWidget, text: str, width: int) -> str:
    """``text`` shortened in the middle with "…" to fit ``width`` pixels in ``widget``'s font."""
    return widget.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle, max(0, width))


class ElidedLabelWidget(QLabel):
    """A one-line label that elides its text (in the middle, "…") to the width it gets:
    it asks for its text's width up to ``max_px`` and shrinks to ``min_px`` when space is
    short, never wraps and never widens its window. The whole text is :meth:`full_text`
    and the tooltip."""

    def __init__(self, text: str = "", parent: QWidget | None = None, *,
                 max_px: int = 10_000, min_px: int = 60) -> None:
        super().__init__(parent)
        self.setWordWrap(False)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self._max_px, self._min_px = max_px, min_px
        self._full = ""
        self.set_full_text(text)

    def set_full_text(self, text: str, tooltip: str | None = None) -> None:
        self._full = " ".join(text.split())  # one line, whatever the text holds
        self.setToolTip(self._full if tooltip is None else tooltip)
        self.updateGeometry()
        self._elide()

    def full_text(self) -> str:
        return self._full

    def sizeHint(self) -> QSize:
        h = super().sizeHint()
        want = self.fontMetrics().horizontalAdvance(self._full) + 4
        return QSize(max(self._min_px, min(self._max_px, want)), h.height())

    def minimumSizeHint(self) -> QSize:
        return QSize(self._min_px, super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        self.setText(elided(self, self._full, self.contentsRect().width()))


class ElidedButtonWidget(QPushButton):
    """A push button whose text is elided like :class:`ElidedLabelWidget`'s."""

    #: pixels of the button's frame and padding around its text
    PADDING_PX = 24

    def __init__(self, text: str = "", parent: QWidget | None = None, *,
                 max_px: int = 10_000, min_px: int = 90) -> None:
        super().__init__(parent)
        # Preferred, not QPushButton's Minimum: the layout may shrink it below its text
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self._max_px, self._min_px = max_px, min_px
        self._full = ""
        self.set_full_text(text)

    def set_full_text(self, text: str) -> None:
        self._full = text
        self.updateGeometry()
        self._elide()

    def full_text(self) -> str:
        return self._full

    def sizeHint(self) -> QSize:
        h = super().sizeHint()
        want = self.fontMetrics().horizontalAdvance(self._full) + self.PADDING_PX
        return QSize(max(self._min_px, min(self._max_px, want)), h.height())

    def minimumSizeHint(self) -> QSize:
        return QSize(self._min_px, super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        self.setText(elided(self, self._full, self.width() - self.PADDING_PX))
