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


def elided(widget: QWidget, text: str, width: int,
           mode: Qt.TextElideMode = Qt.TextElideMode.ElideMiddle) -> str:
    """``text`` shortened with "…" (in the middle, or where ``mode`` says) to fit
    ``width`` pixels in ``widget``'s font."""
    return widget.fontMetrics().elidedText(text, mode, max(0, width))


class _ElidedText:
    """What the label and the button share: the whole text, size hints that ask for the
    text's width between ``_min_px`` and ``_max_px``, and eliding again on every resize.
    The widget class sets :attr:`PADDING_PX` and :meth:`_text_width`."""

    #: pixels around the text (frame, padding)
    PADDING_PX = 4
    _full: str
    _max_px: int
    _min_px: int
    _keep = ""  # a text never elided (keep_whole)
    _prefix = ""  # the start of the text never elided (keep_prefix)
    _mode = Qt.TextElideMode.ElideMiddle  # where "…" goes

    def full_text(self) -> str:
        return self._full

    def keep_whole(self, text: str) -> None:
        """Never get narrower than ``text`` in the widget's current font (a short text
        such as "CPU only" then always shows whole; longer ones are elided)."""
        self._keep = text
        self.updateGeometry()  # type: ignore[attr-defined]

    def keep_prefix(self, prefix: str) -> None:
        """Never shorten ``prefix`` when the text starts with it: the rest is shortened
        instead ("Draft: gemma…q4_k_m", not "Draft…q4_k_m")."""
        self._prefix = prefix
        self._elide()

    def sizeHint(self) -> QSize:
        h = super().sizeHint()  # type: ignore[misc]
        want = self.fontMetrics().horizontalAdvance(self._full) + self.PADDING_PX  # type: ignore[attr-defined]
        return QSize(max(self._min_px, min(self._max_px, want)), h.height())

    def minimumSizeHint(self) -> QSize:
        least = self._min_px
        if self._keep:
            least = max(least, self.fontMetrics().horizontalAdvance(self._keep)  # type: ignore[attr-defined]
                        + self.PADDING_PX)
        return QSize(least, super().minimumSizeHint().height())  # type: ignore[misc]

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)  # type: ignore[misc]
        self._elide()

    def _text_width(self) -> int:
        raise NotImplementedError

    def _elide(self) -> None:
        width, full, prefix = self._text_width(), self._full, self._prefix
        if prefix and full.startswith(prefix) and len(full) > len(prefix):
            metrics = self.fontMetrics()  # type: ignore[attr-defined]
            rest = width - metrics.horizontalAdvance(prefix)
            # the prefix kept whole where the rest still shows a few characters around "…"
            if rest >= metrics.horizontalAdvance("ab…yz"):
                self.setText(prefix + elided(self, full[len(prefix):], rest))  # type: ignore[attr-defined, arg-type]
                return
        self.setText(elided(self, full, width, self._mode))  # type: ignore[attr-defined, arg-type]


class ElidedLabelWidget(_ElidedText, QLabel):
    """A one-line label that elides its text (in the middle, "…") to the width it gets:
    it asks for its text's width up to ``max_px`` and shrinks to ``min_px`` when space is
    short, never wraps and never widens its window. The whole text is :meth:`full_text`
    and the tooltip. ``sentence``: the text is words, not a name: it is cut at its end,
    so what shows reads from the start."""

    def __init__(self, text: str = "", parent: QWidget | None = None, *,
                 max_px: int = 10_000, min_px: int = 60, sentence: bool = False) -> None:
        QLabel.__init__(self, parent)
        if sentence:
            self._mode = Qt.TextElideMode.ElideRight
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

    def _text_width(self) -> int:
        return self.contentsRect().width()


class ElidedButtonWidget(_ElidedText, QPushButton):
    """A push button whose text is elided like :class:`ElidedLabelWidget`'s."""

    PADDING_PX = 24

    def __init__(self, text: str = "", parent: QWidget | None = None, *,
                 max_px: int = 10_000, min_px: int = 90) -> None:
        QPushButton.__init__(self, parent)
        # Preferred, not QPushButton's Minimum: the layout may shrink it below its text
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self._max_px, self._min_px = max_px, min_px
        self._full = ""
        self.set_full_text(text)

    def set_full_text(self, text: str) -> None:
        self._full = text
        self.updateGeometry()
        self._elide()

    def _text_width(self) -> int:
        return self.width() - self.PADDING_PX
