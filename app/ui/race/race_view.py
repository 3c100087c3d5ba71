"""The race view: two panes replaying off and on at their true pace, then the table.

The runs themselves happen on the race worker, one after the other; while they run the
view shows which run is going and how far it got. When the recording arrives, both panes
start from t = 0 together and a :class:`QTimer` (every 30 ms) reveals each lane's tokens
at the times they were really produced, so the faster side visibly pulls ahead. Text is
appended once per tick and the counters repaint at most 10 times a second. When the
slower lane ends (or the user skips), the table of figures, the verdict on the two texts
and, where they differ, the reason in plain words appear; the finished race can be
exported as PNG (a grab of this view) and Markdown.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QStackedLayout,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.chat.recording import RaceRecording
from app.engine.measure.race import RacePair
from app.formatting import draft_length_words
from app.ui.labels import Label
from app.ui.race.lane_pane import RaceLaneWidget
from app.ui.race.report import (
    difference_text,
    identical_text,
    lane_winner,
    prediction_note,
    race_markdown,
    race_table_rows,
    replay_status,
    speedup_headline,
)

TICK_MS = 30
COUNTER_INTERVAL_S = 0.1


class RaceViewWidget(QWidget):
    """The race tab (see the module docstring)."""

    replay_finished = Signal()
    """Both lanes have been replayed to the end (or the replay was skipped)."""
    export_png_clicked = Signal()
    """The user asked to export the finished race as a PNG image."""
    export_markdown_clicked = Signal()
    """The user asked to export the finished race as Markdown."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._pair_texts: list[str] = []  # each timed pair's speedup, as it arrives
        self.setObjectName("raceView")
        self._rec: RaceRecording | None = None
        self._next_on_subtitle = ""
        self._t0 = 0.0
        self._last_counters = 0.0
        self._replaying = False
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        self._build()

    def _build(self) -> None:
        col = QVBoxLayout(self)
        col.setContentsMargins(10, 8, 10, 8)
        col.setSpacing(8)

        status = QHBoxLayout()
        self.status = Label("Press “Start race”: the prompt runs with speculation off, then "
                             "on, and both replies then replay side by side at their real speed.")
        self.status.setObjectName("raceStatus")
        self.status.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setFixedWidth(220)
        self.progress.setTextVisible(True)
        self.progress.hide()
        self.replay_button = QPushButton("Replay")
        self.replay_button.setToolTip("Play both replies again from t = 0")
        self.replay_button.clicked.connect(self._on_replay_button_clicked)
        self.skip_button = QPushButton("Skip to end")
        self.skip_button.clicked.connect(self._on_skip_button_clicked)
        status.addWidget(self.status, 1)
        status.addWidget(self.progress)
        status.addWidget(self.replay_button)
        status.addWidget(self.skip_button)
        col.addLayout(status)

        lanes = QHBoxLayout()
        lanes.setSpacing(10)
        self.off_pane = RaceLaneWidget("off")
        self.on_pane = RaceLaneWidget("on")
        lanes.addWidget(self.off_pane, 1)
        lanes.addWidget(self.on_pane, 1)
        col.addLayout(lanes, 1)

        self.results = QFrame()
        self.results.setObjectName("raceResults")
        self._results_stack = QStackedLayout(self.results)
        self.placeholder = Label("The table of figures appears here when the replay ends.")
        self.placeholder.setObjectName("racePlaceholder")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._results_stack.addWidget(self.placeholder)
        self._results_page = QWidget()
        self._results_stack.addWidget(self._results_page)
        res = QHBoxLayout(self._results_page)
        res.setContentsMargins(10, 8, 10, 8)
        res.setSpacing(14)
        self.table = QTableWidget(0, 3)
        self.table.setObjectName("raceTable")
        self.table.setHorizontalHeaderLabels(["", "speculation off", "speculation on"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.table.setShowGrid(False)
        self.table.setAlternatingRowColors(True)
        hh = self.table.horizontalHeader()
        # the row names whole; the "on" column, whose header names the drafter and its
        # model file (any length), takes the rest and elides that header (its tooltip
        # holds it whole)
        hh.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        hh.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        hh.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setDefaultSectionSize(21)
        self.table.setMinimumWidth(470)
        self.table.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        res.addWidget(self.table, 3)

        side_box = QWidget()
        side_box.setObjectName("raceSide")
        side = QVBoxLayout(side_box)
        side.setContentsMargins(0, 0, 4, 0)
        side.setSpacing(8)
        self.headline = Label("")
        self.headline.setObjectName("raceHeadline")
        self.headline.setWordWrap(True)
        side.addWidget(self.headline)
        self.verdict = Label("")
        self.verdict.setObjectName("raceVerdict")
        self.verdict.setWordWrap(True)
        self.explanation = Label("")
        self.explanation.setObjectName("raceExplanation")
        self.explanation.setWordWrap(True)
        self.explanation.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.settings_line = Label("")
        self.settings_line.setObjectName("raceSettings")
        self.settings_line.setWordWrap(True)
        side.addWidget(self.verdict)
        self.prediction = Label("")
        self.prediction.setObjectName("racePrediction")
        self.prediction.setWordWrap(True)
        side.addWidget(self.prediction)
        side.addWidget(self.explanation)
        side.addWidget(self.settings_line)
        side.addStretch(1)
        scroll = QScrollArea()
        scroll.setObjectName("raceSideScroll")
        scroll.setWidget(side_box)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.viewport().setAutoFillBackground(False)
        side_box.setAutoFillBackground(False)
        right = QVBoxLayout()
        right.setSpacing(6)
        right.addWidget(scroll, 1)
        buttons = QHBoxLayout()
        self.png_button = QPushButton("Export PNG…")
        self.png_button.clicked.connect(self.export_png_clicked)
        self.md_button = QPushButton("Export Markdown…")
        self.md_button.clicked.connect(self.export_markdown_clicked)
        buttons.addStretch(1)
        buttons.addWidget(self.png_button)
        buttons.addWidget(self.md_button)
        right.addLayout(buttons)
        res.addLayout(right, 2)
        self.results.setFixedHeight(262)
        col.addWidget(self.results)
        self._set_results_visible(False)
        self._update_buttons()

    # -- public -----------------------------------------------------------------------
    @property
    def recording(self) -> RaceRecording | None:
        """The race shown (None before the first one finished)."""
        return self._rec

    @property
    def replaying(self) -> bool:
        return self._replaying

    @property
    def finished(self) -> bool:
        """A race is shown and its replay has ended: the table is up, export works."""
        return self._rec is not None and not self._replaying

    def set_lane_titles(self, on_subtitle: str) -> None:
        """Describe the "on" side of the next race ("prompt lookup, k = 4"). While a race
        is shown, its lane keeps the drafter and k of that run (the controls may already
        say something else); the new words appear when the next race begins."""
        self._next_on_subtitle = on_subtitle
        if self._rec is None:
            self.on_pane.set_subtitle(on_subtitle)

    def begin_race(self) -> None:
        """Clear both panes and the table: a new race starts running."""
        self.stop_replay()
        self._rec = None
        self.on_pane.set_subtitle(self._next_on_subtitle)
        self.off_pane.clear("Running…")
        self.on_pane.clear("Waiting for the first run…")
        self._set_results_visible(False)
        self.progress.setValue(0)
        self.progress.show()
        self.status.setText("Warming up…")
        self._update_buttons()

    def show_progress(self, lane: str, tokens: int, max_tokens: int,
                      pair: RacePair | None = None) -> None:
        """A run is going: ``lane`` ("warm-up", "off", "on") has ``tokens`` so far; or
        ("pairs") ``tokens`` of ``max_tokens`` off/on pairs were timed, ``pair`` the last."""
        self.progress.setMaximum(max(1, max_tokens))
        self.progress.setValue(min(tokens, max_tokens))
        if lane == "pairs":
            if tokens == 1:
                self._pair_texts = []
            if pair is not None:
                x = pair.speedup
                self._pair_texts.append(
                    # the other run's load is the reference while the race runs
                    ("disturbed" if pair.disturbed(pair.off_other) else f"{x:.2f}×")
                    if x is not None else "—")
            self.progress.setFormat(f"%v / {max_tokens} pairs")
            self.status.setText(
                f"Timed {tokens} of {max_tokens} off/on pairs (speedup per pair: {', '.join(self._pair_texts)})."
                + (" Timing the next…" if tokens < max_tokens else ""))
            return
        if lane == "warm-up":
            self.status.setText("Warming up (first race of this window: a few untimed tokens "
                                "so neither run pays for loading the weights)…")
            return
        which = "speculation off" if lane == "off" else "speculation on"
        self.progress.setFormat(f"%v / {max_tokens} tokens")
        self.status.setText(f"First pair, {which}. The replay starts when every pair has "
                            "been timed.")
        if lane == "on":
            self.off_pane.clear("Done; waiting for the replay…")
            self.on_pane.clear("Running…")

    def end_without_race(self, message: str) -> None:
        """A race failed or was stopped before anything could be shown."""
        self.progress.hide()
        self.off_pane.clear("")
        self.on_pane.clear("")
        self.status.setText(message)
        self._update_buttons()

    def show_recording(self, rec: RaceRecording, *, replay: bool = True) -> None:
        """Show a race: replay it from t = 0 at true pace, or (``replay`` False) show the
        final state and the table at once."""
        self.stop_replay()
        self._rec = rec
        self.progress.hide()
        r = rec.result
        self.on_pane.set_subtitle(f"{rec.drafter}, {draft_length_words(r.on.draft_max, rec.adaptive)}")
        self.off_pane.set_recording(rec.off, rec.duration)
        self.on_pane.set_recording(rec.on, rec.duration)
        self._fill_results(rec)
        if replay and rec.duration > 0:
            self.replay()
        else:
            self._finish_replay()

    def replay(self) -> None:
        """Play the shown race again from t = 0."""
        rec = self._rec
        if rec is None:
            return
        self._set_results_visible(False)
        self.off_pane.set_recording(rec.off, rec.duration)
        self.on_pane.set_recording(rec.on, rec.duration)
        self._replaying = True
        self._t0 = time.monotonic()
        self._last_counters = 0.0
        self.status.setText(f"Replaying both runs from t = 0 at their real speed "
                            f"({rec.duration:.1f} s).")
        self._timer.start()
        self._update_buttons()

    def skip_replay(self) -> None:
        """Jump to the end of the replay."""
        if self._replaying:
            self._show_at(float("inf"))
            self._finish_replay()

    def stop_replay(self) -> None:
        self._timer.stop()
        self._replaying = False

    def export_png(self, path: Path) -> None:
        """Save a picture of this view (panes, table, verdict) as PNG.

        Raises:
            OSError: the image could not be written.
        """
        pixmap = self.grab()
        if not pixmap.save(str(path), "PNG"):
            raise OSError(f"Could not write the image {path}.")

    def export_markdown(self, path: Path) -> None:
        """Save the finished race as Markdown (:func:`race_markdown`).

        Raises:
            ValueError: no race is shown.
            OSError: the file could not be written.
        """
        if self._rec is None:
            raise ValueError("There is no finished race to export.")
        Path(path).write_text(race_markdown(self._rec), encoding="utf-8")

    # -- replay -----------------------------------------------------------------------
    @Slot()
    def _on_timer_timeout(self) -> None:
        now = time.monotonic()
        t = now - self._t0
        counters = now - self._last_counters >= COUNTER_INTERVAL_S
        if counters:
            self._last_counters = now
        self._show_at(t, counters=counters)
        if self._rec is not None and t >= self._rec.duration:
            self._finish_replay()

    def _show_at(self, t: float, counters: bool = True) -> None:
        self.off_pane.show_at(t, counters=counters)
        self.on_pane.show_at(t, counters=counters)

    def _finish_replay(self) -> None:
        self._timer.stop()
        self._replaying = False
        rec = self._rec
        if rec is None:
            return
        self._show_at(float("inf"))
        r = rec.result
        for pane in (self.off_pane, self.on_pane):
            span = r.difference_span(pane.recording.lane) if pane.recording is not None else None
            if span is not None and not r.cancelled:
                pane.mark_difference(*span)
        winner = lane_winner(r)
        if winner is not None:
            pane = self.on_pane if winner[0] == "on" else self.off_pane
            pane.mark_winner(winner[1])
        self.status.setText(replay_status(r))
        self._set_results_visible(True)
        self._update_buttons()
        self.replay_finished.emit()

    # -- results ----------------------------------------------------------------------
    def _fill_results(self, rec: RaceRecording) -> None:
        r = rec.result
        rows = race_table_rows(r)
        on_header = f"on: {rec.drafter}, {draft_length_words(r.on.draft_max, rec.adaptive)}"
        self.table.setHorizontalHeaderLabels(["", "speculation off", on_header])
        header_item = self.table.horizontalHeaderItem(2)
        if header_item is not None:
            header_item.setToolTip(on_header)
        self.table.setRowCount(len(rows))
        bold_rows = ("decode tok/s", "measured speedup (decode)", "identical text")
        for i, (name, off, on) in enumerate(rows):
            for j, text in enumerate((name, off, on)):
                item = QTableWidgetItem(text)
                if j:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if name.startswith(bold_rows):  # "decode tok/s, median of 3 pairs"
                    f = item.font()
                    f.setBold(True)
                    item.setFont(f)
                if name == "identical text" and j == 2:
                    item.setForeground(QColor("#2f855a" if r.identical else "#c05621"))
                self.table.setItem(i, j, item)
        self.headline.setText(speedup_headline(r))
        self.headline.setProperty("faster", r.verdict == "faster" if r.pairs
                                  else bool((r.measured_speedup or 0.0) >= 1.0))
        note = prediction_note(r, rec.cpu_backend)
        self.prediction.setText(note or "")
        self.prediction.setVisible(bool(note))
        self.verdict.setText(identical_text(r))
        self.verdict.setProperty("identical", bool(r.identical))
        for label in (self.verdict, self.headline):
            label.style().unpolish(label)
            label.style().polish(label)
        diff = difference_text(r)
        self.explanation.setText(diff or "")
        self.explanation.setVisible(bool(diff))
        self.settings_line.setText(
            f"Target {rec.model_name} · seed {r.seed} · temperature {r.temperature:g} · "
            f"at most {rec.max_tokens} tokens · {'CPU' if rec.cpu_backend else 'GPU'} backend"
            f"{' · exact verification' if rec.exact_verification else ''}. Decode tok/s excludes the prefill; α and τ are for the speculating run.")

    def _set_results_visible(self, visible: bool) -> None:
        self._results_stack.setCurrentWidget(self._results_page if visible else self.placeholder)

    @property
    def results_visible(self) -> bool:
        """The table is shown (the replay has ended)."""
        return self._results_stack.currentWidget() is self._results_page

    def _update_buttons(self) -> None:
        has = self._rec is not None
        self.replay_button.setEnabled(has and not self._replaying)
        self.skip_button.setEnabled(self._replaying)
        done = self.finished
        self.png_button.setEnabled(done)
        self.md_button.setEnabled(done)

    @Slot()
    def _on_replay_button_clicked(self) -> None:
        self.replay()

    @Slot()
    def _on_skip_button_clicked(self) -> None:
        self.skip_replay()
