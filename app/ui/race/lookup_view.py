""""Is prompt lookup worth it for me?": the n-gram hit rate over past conversations.

The user ticks past conversations; the race worker replays n-gram lookup over their
assistant replies with :func:`app.engine.measure.lookup.estimate_lookup_hit_rate`
(tokenized with the loaded target, no model runs) and this widget shows, per n = 2..5,
the hit rate (share of reply tokens lookup would have predicted), the precision (right
proposals / proposals, the figure comparable with α at draft position 1) and the coverage
(how often lookup had anything to propose), next to any α actually measured with prompt
lookup: in the stored statistics of the same conversations, in this window's race and in
its k sweep. A speedup measured with prompt lookup in this window (a race, a sweep)
decides the verdict: a high hit rate says lookup could propose the right tokens, not that
proposing them pays on this machine.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.chat.history_source import PastConversation, measured_lookup_alpha
from app.engine.measure.lookup import LookupEstimate
from app.engine.measure.race import VERDICT_MARGIN
from app.engine.stats import MIN_VERIFIED_FOR_ESTIMATE
from app.formatting import or_dash
from app.ui.labels import Label

#: best-n hit rate at or above which the verdict says the replies repeat a lot (whether
#: that pays is this machine's to measure: :func:`verdict`)
WORTH_IT = 0.30
#: below this, lookup seldom proposes the right token
NOT_WORTH_IT = 0.10


def _pct(v: float | None) -> str:
    return or_dash(v * 100 if v is not None else None, ".0f", "%")


@dataclass(frozen=True, slots=True)
class LookupMeasurement:
    """Prompt lookup measured on this machine: where (``source``), its α, how many
    verified drafts that α rests on (None: unknown) and the decode speedup it achieved
    over speculation off in the same run (None: not measured); ``settled``: whether that
    speedup is a verdict (False: a race whose pairs did not agree gave none)."""

    source: str
    alpha: float | None
    verified: int | None = None
    speedup: float | None = None
    settled: bool = True


def verdict(estimate: LookupEstimate, measured: Sequence[LookupMeasurement] = ()) -> str:
    """A plain-words verdict.

    A speedup measured with prompt lookup on this machine (a race, a k sweep) decides:
    what the replay finds in the stored replies says how often lookup could propose the
    right token, not whether proposing pays here. Without one, the best n's hit rate is
    reported for what it is (the thresholds :data:`WORTH_IT` and :data:`NOT_WORTH_IT`
    only choose the words): whether it pays depends on this machine's cost of checking
    drafts, which a race measures. The best measured speedup counts as a gain or a loss
    only beyond :data:`~app.engine.measure.race.VERDICT_MARGIN` of 1×.
    """
    best = estimate.best_n
    if best is None or not estimate.reply_tokens:
        return "No assistant replies in the chosen conversations: nothing to estimate."
    h = estimate.for_n(best).hit_rate or 0.0
    share = f"{h * 100:.0f}% of the reply tokens"
    timed = [m for m in measured if m.speedup is not None and m.settled]
    if not timed and (unsettled := [m for m in measured if m.speedup is not None]):
        return (f"No verdict yet: in {unsettled[0].source} prompt lookup decoded at a median "
                f"{unsettled[0].speedup or 0.0:.2f}× the speed of speculation off, but its "
                "runs did not agree on a side. The replay says lookup would have predicted "
                f"{share} (n = {best}). Race again when the machine is quieter.")
    if timed:
        top = max(timed, key=lambda m: m.speedup or 0.0)
        speed = top.speedup or 0.0
        if speed < 1.0 - VERDICT_MARGIN:
            return (f"Not on this machine so far: prompt lookup decoded at {speed:.2f}× the "
                    f"speed of speculation off in {top.source}, even at its best. The replay "
                    f"says lookup would have predicted {share} (n = {best}), but here checking "
                    "its drafts cost more than they saved. Race again on a prompt your replies "
                    "repeat (code edits, rewrites) before turning it on.")
        if speed <= 1.0 + VERDICT_MARGIN:
            return (f"No gain measured here so far: prompt lookup decoded at {speed:.2f}× the "
                    f"speed of speculation off in {top.source}, even at its best, within "
                    f"{VERDICT_MARGIN:.0%} of it. The replay says lookup would have predicted "
                    f"{share} (n = {best}). Race on a prompt your replies repeat to see "
                    "whether it pays there.")
        return (f"Worth it here: prompt lookup decoded {speed:.2f}× as fast as speculation off "
                f"in {top.source}, and the replay says it would have predicted {share} of "
                f"your replies (n = {best}).")
    pays = ("Whether that pays depends on this machine's cost of checking drafts: race it "
            "to see.")
    if h >= WORTH_IT:
        return (f"Lookup would have predicted {share} (n = {best}): your replies repeat a lot "
                "of what came before (code edits, rewrites, quotes), which is where prompt "
                f"lookup can help. {pays}")
    if h >= NOT_WORTH_IT:
        return (f"Lookup would have predicted {share} (n = {best}): some of your replies "
                f"repeat the conversation, most do not. {pays}")
    return (f"Probably not: even with n = {best}, lookup would have predicted only {share}. "
            "When it finds no match it proposes nothing, so leaving it on costs little, but "
            "it has little to gain on replies like these.")


def verdict_tone(measured: Sequence[LookupMeasurement]) -> str:
    """How :func:`verdict` leans, for its colour: "pays" when a speedup measured here
    beat speculation off by more than the margin, "costs" when the best one fell below
    it, "" (neutral) when nothing was timed or the best was within the margin."""
    speeds = [m.speedup for m in measured if m.speedup is not None and m.settled]
    if not speeds:
        return ""
    top = max(speeds)
    return ("pays" if top > 1.0 + VERDICT_MARGIN
            else "costs" if top < 1.0 - VERDICT_MARGIN else "")


class LookupEstimateWidget(QWidget):
    """The prompt-lookup estimate tab (see the module docstring)."""

    estimate_clicked = Signal()
    """The user asked for an estimate over :meth:`selected_conversations`."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("lookupView")
        self._conversations: list[PastConversation] = []
        self._estimate: LookupEstimate | None = None
        self._measured: dict[str, LookupMeasurement] = {}
        self._busy = False
        self._build()

    def _build(self) -> None:
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 8, 10, 8)
        row.setSpacing(12)

        left = QVBoxLayout()
        left.addWidget(Label("Past conversations to replay:"))
        self.list = QListWidget()
        self.list.setObjectName("lookupConversations")
        self.list.itemChanged.connect(self._on_list_item_changed)
        left.addWidget(self.list, 1)
        buttons = QHBoxLayout()
        self.all_button = QPushButton("All")
        self.all_button.clicked.connect(self._on_all_button_clicked)
        self.none_button = QPushButton("None")
        self.none_button.clicked.connect(self._on_none_button_clicked)
        self.estimate_button = QPushButton("Estimate")
        self.estimate_button.setObjectName("primaryButton")
        self.estimate_button.clicked.connect(self._on_estimate_button_clicked)
        buttons.addWidget(self.all_button)
        buttons.addWidget(self.none_button)
        buttons.addStretch(1)
        buttons.addWidget(self.estimate_button)
        left.addLayout(buttons)
        row.addLayout(left, 2)

        right = QVBoxLayout()
        about = Label(
            "Prompt lookup drafts by finding the last n tokens earlier in the conversation "
            "and proposing what followed them. This replays that rule over your stored "
            "replies, without running a model. <b>Hit rate</b>: share of reply tokens it "
            "would have predicted. <b>Precision</b>: right proposals ÷ proposals, the "
            "figure to compare with a measured α. <b>Coverage</b>: how often it had "
            "anything to propose.", rich=True)
        about.setWordWrap(True)
        about.setObjectName("lookupAbout")
        right.addWidget(about)
        self.table = QTableWidget(0, 5)
        self.table.setHorizontalHeaderLabels(["n", "hit rate", "precision", "coverage",
                                              "tokens"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.setMaximumHeight(150)
        right.addWidget(self.table)
        self.summary = Label("Choose conversations and press Estimate.")
        self.summary.setObjectName("lookupSummary")
        self.summary.setWordWrap(True)
        right.addWidget(self.summary)
        self.measured_label = Label("", rich=True)  # conversation titles escaped
        self.measured_label.setObjectName("lookupMeasured")
        self.measured_label.setWordWrap(True)
        right.addWidget(self.measured_label)
        self.verdict_label = Label("")
        self.verdict_label.setObjectName("lookupVerdict")
        self.verdict_label.setWordWrap(True)
        right.addWidget(self.verdict_label)
        right.addStretch(1)
        row.addLayout(right, 3)

    # -- conversations ----------------------------------------------------------------
    def set_conversations(self, conversations: Sequence[PastConversation]) -> None:
        """Offer these conversations, all ticked."""
        self._conversations = list(conversations)
        self.list.clear()
        for conv in self._conversations:
            n = conv.assistant_replies
            item = QListWidgetItem(f"{conv.title}  ·  {n} repl{'y' if n == 1 else 'ies'}")
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked)
            self.list.addItem(item)
        if not self._conversations:
            self.summary.setText("No past conversations with replies yet. Chat a little, "
                                 "then come back.")
        self._update_measured()
        self._update_buttons()

    def selected_conversations(self) -> list[PastConversation]:
        return [c for i, c in enumerate(self._conversations)
                if self.list.item(i).checkState() == Qt.CheckState.Checked]

    def set_all_checked(self, checked: bool) -> None:
        state = Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked
        for i in range(self.list.count()):
            self.list.item(i).setCheckState(state)

    # -- results ----------------------------------------------------------------------
    @property
    def estimate(self) -> LookupEstimate | None:
        return self._estimate

    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        if busy:
            self.summary.setText("Replaying n-gram lookup over the chosen replies…")
        self._update_buttons()

    def set_measured_alpha(self, source: str, alpha: float | None, *,
                           verified: int | None = None, speedup: float | None = None,
                           settled: bool = True) -> None:
        """Show prompt lookup as measured elsewhere (``source``: "this window's race", "the
        k sweep"): its α, the drafts it rests on and the decode speedup over speculation
        off (``settled``: False when the race gave no verdict). With neither α nor a
        speedup the entry is removed. The verdict takes a settled speedup into account."""
        if alpha is None and speedup is None:
            self._measured.pop(source, None)
        else:
            self._measured[source] = LookupMeasurement(source, alpha, verified, speedup,
                                                       settled)
        self._update_measured()
        if self._estimate is not None:
            self._show_verdict(self._estimate)

    def measurements(self) -> list[LookupMeasurement]:
        """What was measured with prompt lookup in this window (races, sweeps)."""
        return list(self._measured.values())

    def show_estimate(self, estimate: LookupEstimate) -> None:
        self._busy = False
        self._estimate = estimate
        hits = list(estimate.by_n)
        self.table.setRowCount(len(hits))
        best = estimate.best_n
        for i, h in enumerate(hits):
            cells = [str(h.n), _pct(h.hit_rate), _pct(h.precision), _pct(h.coverage),
                     f"{h.hits}/{h.positions}"]
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                if h.n == best:
                    f = item.font()
                    f.setBold(True)
                    item.setFont(f)
                self.table.setItem(i, j, item)
        self.summary.setText(f"{estimate.replies} assistant replies, {estimate.reply_tokens} "
                             "tokens replayed.")
        self._show_verdict(estimate)
        self._update_measured()
        self._update_buttons()

    def _show_verdict(self, estimate: LookupEstimate) -> None:
        measured = self.measurements()
        self.verdict_label.setText(verdict(estimate, measured))
        self.verdict_label.setProperty("tone", verdict_tone(measured))
        self.verdict_label.style().unpolish(self.verdict_label)
        self.verdict_label.style().polish(self.verdict_label)

    def show_error(self, message: str) -> None:
        self._busy = False
        self.summary.setText(message)
        self._update_buttons()

    def measured_entries(self) -> list[tuple[str, float, int | None]]:
        """(source, α, replies or None) of every measured α on show."""
        out: list[tuple[str, float, int | None]] = []
        alpha, n = measured_lookup_alpha(self.selected_conversations())
        if alpha is not None:
            out.append(("stored prompt-lookup replies of these conversations", alpha, n))
        out += [(m.source, m.alpha, None) for m in self._measured.values() if m.alpha is not None]
        return out

    def _update_measured(self) -> None:
        entries = self.measured_entries()
        timed = [m for m in self._measured.values() if m.speedup is not None]
        if not entries and not timed:
            self.measured_label.setText(
                "No α measured with prompt lookup yet (chat with prompt lookup on, or race "
                "with it here, to have one to compare).")
            return
        lines = []
        best = self._estimate.for_n(self._estimate.best_n) if (
            self._estimate is not None and self._estimate.best_n is not None) else None
        for src, a, n in entries:
            extra = f" ({n} repl{'y' if n == 1 else 'ies'})" if n is not None else ""
            m = self._measured.get(src)
            if m is not None and m.verified is not None:
                extra = f" ({m.verified} draft{'s' if m.verified != 1 else ''}"
                extra += ", too few to tell)" if m.verified < MIN_VERIFIED_FOR_ESTIMATE else ")"
            lines.append(f"Measured α = <b>{a:.2f}</b> in {html.escape(src)}{html.escape(extra)}")
        for m in timed:
            lines.append(f"Measured speedup = <b>{m.speedup:.2f}×</b> in {html.escape(m.source)}"
                         + ("" if m.settled else " (no verdict: its runs disagreed)"))
        if best is not None and best.precision is not None:
            lines.append(f"Estimated precision at n = {best.n}: <b>{best.precision:.2f}</b>")
        self.measured_label.setText("<br>".join(lines))

    def _update_buttons(self) -> None:
        has = bool(self._conversations)
        self.estimate_button.setEnabled(has and not self._busy)
        self.all_button.setEnabled(has)
        self.none_button.setEnabled(has)

    @Slot(QListWidgetItem)
    def _on_list_item_changed(self, _item: QListWidgetItem) -> None:
        self._update_measured()

    @Slot()
    def _on_all_button_clicked(self) -> None:
        self.set_all_checked(True)

    @Slot()
    def _on_none_button_clicked(self) -> None:
        self.set_all_checked(False)

    @Slot()
    def _on_estimate_button_clicked(self) -> None:
        self.estimate_clicked.emit()
