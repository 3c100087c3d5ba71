"""One pane of the race: the reply as it appears, live counters and a timeline.

The race view drives a pane with :meth:`RaceLaneWidget.show_at` from its replay timer
(about every 30 ms): new text is appended in one batch per call, text that came from
accepted drafts is tinted as in the chat view, and the counters (tokens, tok/s, elapsed,
α) are refreshed only when the caller says so (the race view does it at most 10 times a
second). The pane never looks at the engine; it reads a
:class:`~app.chat.recording.LaneRecording`.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QPainter,
    QPaintEvent,
    QTextCharFormat,
    QTextCursor,
)
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QPlainTextEdit,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.chat.recording import LaneCounters, LaneRecording, counters_at, draft_spans, visible_chars
from app.formatting import or_dash
from app.ui.labels import Label

#: background of text that came from accepted draft tokens (the chat view's tint)
DRAFT_TINT = QColor("#fde7c4")
#: The first token where the two runs differ (both panes), distinct from the draft tint.
DIFFERENCE_MARK = QColor("#f4a3a3")
_ACCENT_OFF = QColor("#718096")
_ACCENT_ON = QColor("#2b6cb0")


class StatWidget(QWidget):
    """A big number over a small caption."""

    def __init__(self, caption: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(0)
        self.value = Label("—")
        self.value.setObjectName("statValue")
        self.caption = Label(caption)
        self.caption.setObjectName("statCaption")
        col.addWidget(self.value)
        col.addWidget(self.caption)

    def set_text(self, text: str) -> None:
        if self.value.text() != text:
            self.value.setText(text)


class TimelineWidget(QWidget):
    """Where this lane stands on the race's common time axis.

    The full width is the replay's length (the slower lane's end-to-end time); the lane's
    own run is the light span, the part already replayed is filled, and the end of the
    run is marked with its time. Two panes' timelines compare at true relative speed.
    """

    def __init__(self, accent: QColor, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._accent = accent
        self._total = 0.0
        self._duration = 0.0
        self._t = 0.0
        self.setFixedHeight(18)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_span(self, duration: float, total: float) -> None:
        self._duration, self._total, self._t = duration, total, 0.0
        self.update()

    def set_time(self, t: float) -> None:
        if t != self._t:
            self._t = t
            self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        r = QRectF(self.rect()).adjusted(1, 4, -1, -4)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor("#edf0f4"))
        p.drawRoundedRect(r, 4, 4)
        if self._total <= 0:
            return
        span = QRectF(r.left(), r.top(), r.width() * min(1.0, self._duration / self._total),
                      r.height())
        light = QColor(self._accent)
        light.setAlpha(60)
        p.setBrush(light)
        p.drawRoundedRect(span, 4, 4)
        done = QRectF(span.left(), span.top(),
                      r.width() * min(self._t, self._duration) / self._total, span.height())
        p.setBrush(self._accent)
        p.drawRoundedRect(done, 4, 4)


class RaceLaneWidget(QFrame):
    """One side of the race (see the module docstring).

    Args:
        side: "off" (speculation off) or "on"; the "on" pane shows α and tints drafts.
    """

    def __init__(self, side: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.side = side
        self.setObjectName("raceLane")
        self.setProperty("side", side)
        self._rec: LaneRecording | None = None
        self.marked: tuple[int, int] | None = None  # the marked first difference
        self._shown = 0
        self._finished = False
        col = QVBoxLayout(self)
        col.setContentsMargins(12, 10, 12, 10)
        col.setSpacing(6)

        head = QHBoxLayout()
        self.title = Label("Speculation off" if side == "off" else "Speculation on")
        self.title.setObjectName("laneTitle")
        self.subtitle = Label("plain decoding" if side == "off" else "")
        self.subtitle.setObjectName("laneSubtitle")
        self.badge = Label("")
        self.badge.setObjectName("laneBadge")
        self.badge.hide()
        head.addWidget(self.title)
        head.addWidget(self.subtitle)
        head.addStretch(1)
        head.addWidget(self.badge)
        col.addLayout(head)

        self.text = QPlainTextEdit()
        self.text.setObjectName("laneText")
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        mono.setPointSize(max(9, QFont().pointSize()))
        self.text.setFont(mono)
        self.text.setPlaceholderText("Waiting for the race…")
        col.addWidget(self.text, 1)

        stats = QHBoxLayout()
        stats.setSpacing(22)
        self.tokens = StatWidget("tokens")
        self.tps = StatWidget("decode tok/s")
        self.elapsed = StatWidget("elapsed")
        self.alpha = StatWidget("acceptance α")
        for w in (self.tokens, self.tps, self.elapsed, self.alpha):
            stats.addWidget(w)
        self.alpha.setVisible(side == "on")
        stats.addStretch(1)
        col.addLayout(stats)
        self.timeline = TimelineWidget(_ACCENT_ON if side == "on" else _ACCENT_OFF)
        col.addWidget(self.timeline)

    # -- state ------------------------------------------------------------------------
    def set_subtitle(self, text: str) -> None:
        self.subtitle.setText(text)

    def clear(self, placeholder: str = "Waiting for the race…") -> None:
        """Empty the pane (before a new race)."""
        self._rec = None
        self._shown = 0
        self._finished = False
        self.marked = None
        self.text.clear()
        self.text.setPlaceholderText(placeholder)
        self.badge.setText("")
        self.badge.hide()
        self.badge.setProperty("winner", False)
        self._repolish(self.badge)
        for w in (self.tokens, self.tps, self.elapsed, self.alpha):
            w.set_text("—")
        self.timeline.set_span(0.0, 0.0)

    def set_recording(self, rec: LaneRecording, total: float) -> None:
        """Prepare to replay ``rec`` on a time axis of ``total`` seconds."""
        self.clear("")
        self._rec = rec
        self.timeline.set_span(rec.duration, total)
        self.show_at(0.0, counters=True)

    @property
    def recording(self) -> LaneRecording | None:
        return self._rec

    @property
    def shown_text(self) -> str:
        return self.text.toPlainText()

    @property
    def finished(self) -> bool:
        return self._finished

    def show_at(self, t: float, *, counters: bool) -> LaneCounters | None:
        """Show the lane as it was ``t`` seconds after its start: append the text that
        appeared since the last call (one batch), move the timeline, and with
        ``counters`` refresh the counters. Returns the counters (None without a run)."""
        rec = self._rec
        if rec is None:
            return None
        n = visible_chars(rec, t)
        if n < self._shown:  # the replay went back to the start
            self.text.clear()
            self._shown = 0
            self.marked = None
        if n > self._shown:
            self._append(rec, self._shown, n)
            self._shown = n
        self.timeline.set_time(t)
        c = counters_at(rec, t)
        if counters or (c.finished and not self._finished):
            self._show_counters(c)
        if c.finished and not self._finished:
            self._finished = True
            self.badge.setText(f"finished in {rec.duration:.2f} s")
            self.badge.show()
        return c

    def mark_winner(self, text: str) -> None:
        """Highlight the badge (the lane that finished first)."""
        self.badge.setText(text)
        self.badge.show()
        self.badge.setProperty("winner", True)
        self._repolish(self.badge)

    def mark_difference(self, start: int, end: int) -> None:
        """Mark characters [start, end) of the lane's text (the first token where the two
        runs differ) and scroll to them. Offsets are Python string indices; the document
        counts UTF-16 units, so they are converted."""
        text = self.shown_text
        start = min(start, len(text))
        end = max(start + 1, min(end, len(text)))  # an empty piece still gets one mark
        end = min(end, len(text))
        if end <= start:
            return

        def units(i: int) -> int:
            return len(text[:i].encode("utf-16-le")) // 2

        cursor = QTextCursor(self.text.document())
        cursor.setPosition(units(start))
        cursor.setPosition(units(end), QTextCursor.MoveMode.KeepAnchor)
        mark = QTextCharFormat()
        mark.setBackground(DIFFERENCE_MARK)
        mark.setFontUnderline(True)
        mark.setToolTip("first token where the two runs differ")
        cursor.mergeCharFormat(mark)
        self.marked = (start, end)
        shown = QTextCursor(self.text.document())
        shown.setPosition(units(start))
        self.text.setTextCursor(shown)
        self.text.ensureCursorVisible()

    def _show_counters(self, c: LaneCounters) -> None:
        self.tokens.set_text(str(c.tokens))
        self.tps.set_text(or_dash(c.tps, ".1f"))
        self.elapsed.set_text(f"{c.elapsed:.2f} s")
        self.alpha.set_text(or_dash(c.alpha, ".2f"))

    def _append(self, rec: LaneRecording, start: int, end: int) -> None:
        bar = self.text.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        cursor = QTextCursor(self.text.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        plain = QTextCharFormat()
        tinted = QTextCharFormat()
        tinted.setBackground(DRAFT_TINT)
        text = rec.lane.text
        spans = draft_spans(rec.segments, start, end) if self.side == "on" else [(start, end, False)]
        for a, b, draft in spans:
            cursor.insertText(text[a:b], tinted if draft else plain)
        if at_bottom:
            bar.setValue(bar.maximum())

    @staticmethod
    def _repolish(w: QWidget) -> None:
        style = w.style()
        style.unpolish(w)
        style.polish(w)
