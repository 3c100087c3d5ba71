"""The k sweep: measured decode tok/s against the draft length k, the predicted curve,
and the recommended k applied with one click.

The sweep itself is :func:`app.engine.measure.sweep.run_k_sweep`, a job of the chat service; this
widget only shows its :class:`~app.engine.measure.sweep.KSweepResult`. The chart (QtCharts) has
one point per k, a dashed line for "speculation off", and the predicted curve
E(α, k) / (1 + c·k) drawn from the α pooled over the whole sweep and the median c, scaled
to tok/s by multiplying with the plain decode tok/s measured in the same sweep (so a
predicted speedup of 1× lies on the "off" line).
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCharts import (
    QChart,
    QChartView,
    QLineSeries,
    QScatterSeries,
    QValueAxis,
    QXYSeries,
)
from PySide6.QtCore import QMargins, QPointF, Qt, Signal, Slot
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.engine.measure.sweep import DEFAULT_SWEEP_KS, KSweepPoint, KSweepResult
from app.formatting import or_dash
from app.options import parse_draft_lengths
from app.ui.labels import Label

_MEASURED = QColor("#2b6cb0")
_PREDICTED = QColor("#dd6b20")
_OFF = QColor("#8a94a3")
_BEST = QColor("#2f855a")
#: the y axis reaches at most this multiple of the fastest measured figure
CLIP_FACTOR = 2.5
CAPTION = ("Each point is one k: the same prompt and seed, decode tok/s with the prefill "
           "excluded.")


def sweep_caption(result: KSweepResult, y_max: float) -> str:
    """The words under the chart, true of the chart drawn with a y axis up to ``y_max``.

    The predicted curve is described only when it is drawn, the dotted line only when
    speculation off was measured, and "leaves the chart" is said only for the k whose
    prediction lies above ``y_max``, with how far the measured points there fall short.
    """
    parts = [CAPTION]
    predicted = list(result.predicted_tps)
    if predicted:
        parts.append(
            "The predicted curve is E(α, k) / (1 + c·k) from the α (pooled over every k) and "
            "the median c this sweep measured, multiplied by the decode tok/s of speculation "
            "off in the same sweep, so a predicted 1× lies on the dotted line.")
        above = [(k, y) for k, y in predicted if y > y_max]
        if above:
            measured = {p.k: p.decode_tps for p in result.points if p.decode_tps is not None}
            pred = dict(predicted)
            shares = [measured[k] / pred[k] for k, _ in above if k in measured and pred[k] > 0]
            top_k, top_y = max(above, key=lambda kv: kv[1])
            text = (f"The curve leaves the chart at the top for k ≥ {above[0][0]} (it reaches "
                    f"{top_y:.0f} tok/s at k = {top_k}).")
            if shares:
                text += (f" The points measured there reach at most {max(shares) * 100:.0f}% "
                         "of it: the formula assumes the target checks k + 1 tokens in the "
                         "time of one.")
            parts.append(text)
    elif result.plain_decode_tps is None:
        parts.append("No predicted curve: speculation off was not measured.")
    elif result.acceptance_rate is None:
        parts.append("No predicted curve: nothing was drafted, so there is no α.")
    else:
        parts.append("No predicted curve: the draft cost ratio c was not measured.")
    if result.plain_decode_tps is not None:
        parts.append("The dotted line is speculation off.")
    return " ".join(parts)


class KSweepWidget(QWidget):
    """The k-sweep tab (see the module docstring)."""

    run_clicked = Signal()
    """The user asked to run the sweep (read :meth:`ks`, :meth:`repeat`, :meth:`warm_up`)."""
    stop_clicked = Signal()
    """The user asked to stop the running sweep."""
    apply_clicked = Signal(int)
    """k: the user applied this draft length (the recommended one)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sweepView")
        self._result: KSweepResult | None = None
        self._running = False
        self._build()
        self._update_buttons()

    def _build(self) -> None:
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 8, 10, 8)
        row.setSpacing(12)

        left = QVBoxLayout()
        self.chart = QChart()
        self.chart.setTitle("Decode speed against draft length k")
        self.chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
        self.chart.setMargins(QMargins(6, 6, 6, 6))
        self.chart.setBackgroundRoundness(6)
        self.chart_view = QChartView(self.chart)
        self.chart_view.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.chart_view.setMinimumSize(520, 300)
        left.addWidget(self.chart_view, 1)
        self.caption = Label(CAPTION)
        self.caption.setObjectName("sweepCaption")
        self.caption.setWordWrap(True)
        left.addWidget(self.caption)
        row.addLayout(left, 3)

        right = QVBoxLayout()
        right.setSpacing(8)
        form = QFormLayout()
        self._offered_ks = ", ".join(str(k) for k in DEFAULT_SWEEP_KS)  # not edited yet
        self.ks_edit = QLineEdit(self._offered_ks)
        self.ks_edit.setToolTip("Draft lengths to measure, separated by commas")
        self.repeat_spin = QSpinBox()
        self.repeat_spin.setRange(1, 9)
        self.repeat_spin.setValue(1)
        self.repeat_spin.setToolTip("Runs per k; the median is used")
        self.warm_check = QCheckBox("untimed warm-up run per k")
        self.warm_check.setChecked(True)
        form.addRow("Draft lengths k", self.ks_edit)
        form.addRow("Runs per k", self.repeat_spin)
        form.addRow("", self.warm_check)
        right.addLayout(form)
        self.run_button = QPushButton("Run k sweep")
        self.run_button.setObjectName("primaryButton")
        self.run_button.clicked.connect(self._on_run_button_clicked)
        right.addWidget(self.run_button)
        self.progress = QProgressBar()
        self.progress.hide()
        right.addWidget(self.progress)
        self.error_label = Label("")
        self.error_label.setObjectName("sweepError")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        right.addWidget(self.error_label)
        self.recommendation = Label("Run the sweep to see which k is fastest on this machine.")
        self.recommendation.setObjectName("sweepRecommendation")
        self.recommendation.setWordWrap(True)
        right.addWidget(self.recommendation)
        self.apply_button = QPushButton("Apply k")
        self.apply_button.setToolTip("Use this draft length in the chat window")
        self.apply_button.clicked.connect(self._on_apply_button_clicked)
        right.addWidget(self.apply_button)
        self.table = QTableWidget(0, 7)
        self.table.setHorizontalHeaderLabels(["k", "tok/s", "× off", "α", "τ", "pred ×", "same"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        hh = self.table.horizontalHeader()
        hh.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        # the tok/s column may carry a note ("8.5 (1 busy run out)"): always whole
        hh.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setDefaultSectionSize(21)
        right.addWidget(self.table, 1)
        row.addLayout(right, 2)

    # -- public -----------------------------------------------------------------------
    def offer_k(self, k: int) -> None:
        """Add the race's k to the default draft lengths (1 … 8), so that the sweep also
        measures the k in use (a lookup drafter's default is 16); draft lengths the user
        typed are left as they are."""
        if self.ks_edit.text() == self._offered_ks:
            self._offered_ks = ", ".join(str(n) for n in sorted({*DEFAULT_SWEEP_KS, k}))
            self.ks_edit.setText(self._offered_ks)

    def ks(self) -> tuple[int, ...]:
        """The draft lengths typed in (raises ValueError with a message for the user)."""
        return parse_draft_lengths(self.ks_edit.text())

    def repeat(self) -> int:
        return self.repeat_spin.value()

    def warm_up(self) -> bool:
        return self.warm_check.isChecked()

    @property
    def result(self) -> KSweepResult | None:
        return self._result

    @property
    def running(self) -> bool:
        return self._running

    def begin(self, total_runs: int) -> None:
        """A sweep started with ``total_runs`` timed runs."""
        self._running = True
        self.error_label.hide()
        self.progress.setRange(0, max(1, total_runs))
        self.progress.setValue(0)
        self.progress.setFormat("%v / %m runs")
        self.progress.show()
        self.recommendation.setText("Measuring… (speculation off, then each k, same prompt "
                                    "and seed)")
        self._update_buttons()

    def show_progress(self, done: int, total: int, label: str, tps: float | None) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)
        self.recommendation.setText(f"Measured {label}: {or_dash(tps, '.1f', ' tok/s')}")

    def show_error(self, message: str) -> None:
        """The sweep failed or the input is invalid: say so next to the button."""
        self._running = False
        self.progress.hide()
        self.error_label.setText(message)
        self.error_label.show()
        self._update_buttons()

    def show_result(self, result: KSweepResult) -> None:
        """Draw a finished (or partial, when cancelled) sweep."""
        self._running = False
        self._result = result
        self.progress.hide()
        self._draw_chart(result)
        self._fill_table(result)
        self.recommendation.setText(self.recommendation_text(result))
        self._update_buttons()

    @staticmethod
    def recommendation_text(result: KSweepResult) -> str:
        """The recommendation in words."""
        if result.fastest_k is None:
            return "No k finished; nothing to recommend." if not result.cancelled else \
                "Stopped before any k finished."
        best = result.point(result.fastest_k)
        assert best is not None  # fastest_k is one of the points
        text = (f"Fastest measured: k = {best.k}, {or_dash(best.decode_tps, '.1f')} tok/s "
                f"({or_dash(best.measured_speedup, '.2f', '×')} speculation off).")
        if result.all_busy:
            text += (" Other work disturbed every run of every k (marked busy), so no k is "
                     "recommended: run the sweep again when the machine is quieter.")
        elif result.no_k_beat_off:
            text += (" No k beat speculation off on this prompt here, so no k is recommended: "
                     "keep speculation off (or adaptive) for prompts like it.")
        if result.predicted_best_k is not None:
            text += f" The formula alone would pick k = {result.predicted_best_k}."
        if result.acceptance_rate is not None:
            text += f" Measured α = {result.acceptance_rate:.2f}"
            text += f", c = {result.draft_cost_ratio:.3f}." if result.draft_cost_ratio is not None else "."
        if result.cancelled:
            text += " (Stopped early: only the k that finished are shown.)"
        return text

    def series_points(self, name: str) -> list[tuple[float, float]]:
        """The (x, y) points of the chart series whose name starts with ``name``."""
        for s in self.chart.series():
            if s.name().startswith(name) and isinstance(s, QLineSeries | QScatterSeries):
                return [(p.x(), p.y()) for p in s.points()]
        return []

    # -- drawing ----------------------------------------------------------------------
    def _draw_chart(self, result: KSweepResult) -> None:
        chart = self.chart
        chart.removeAllSeries()
        for axis in chart.axes():
            chart.removeAxis(axis)
        measured = [(p.k, p.decode_tps) for p in result.points if p.decode_tps is not None]
        predicted = list(result.predicted_tps)
        ks = [p.k for p in result.points] or [1]
        x_max = max(ks) + 1
        series: list[QXYSeries] = []

        line = QLineSeries()
        line.setName("measured tok/s")
        line.setPen(QPen(_MEASURED, 2.5))
        dots = QScatterSeries()
        dots.setName("measured k")
        dots.setColor(_MEASURED)
        dots.setBorderColor(_MEASURED)
        dots.setMarkerSize(9)
        for k, tps in measured:
            line.append(QPointF(k, tps))
            dots.append(QPointF(k, tps))
        series += [line, dots]

        if predicted:
            pred = QLineSeries()
            pred.setName("predicted: off tok/s × E(α,k)/(1+c·k)")
            pen = QPen(_PREDICTED, 2)
            pen.setStyle(Qt.PenStyle.DashLine)
            pred.setPen(pen)
            for k, tps in predicted:
                pred.append(QPointF(k, tps))
            series.append(pred)
        plain = result.plain_decode_tps
        if plain is not None:
            off = QLineSeries()
            off.setName(f"speculation off ({plain:.1f} tok/s)")
            pen = QPen(_OFF, 1.5)
            pen.setStyle(Qt.PenStyle.DotLine)
            off.setPen(pen)
            off.append(QPointF(0, plain))
            off.append(QPointF(x_max, plain))
            series.append(off)
        if result.recommended_k is not None:
            best = QScatterSeries()
            best.setName(f"recommended k = {result.recommended_k}")
            best.setColor(_BEST)
            best.setBorderColor(QColor("white"))
            best.setMarkerSize(15)
            point = result.point(result.recommended_k)
            if point is not None and point.decode_tps is not None:
                best.append(QPointF(point.k, point.decode_tps))
            series.append(best)

        seen = [y for _, y in measured] + ([plain] if plain else [])
        ys = seen + [y for _, y in predicted]
        y_max = max(ys, default=1.0) * 1.15 or 1.0
        if seen and y_max > CLIP_FACTOR * max(seen):
            # The textbook curve can sit far above what a CPU measures; keep the measured
            # points readable and let the curve leave the plot at the top.
            y_max = CLIP_FACTOR * max(seen)
        ax = QValueAxis()
        ax.setTitleText("draft length k")
        ax.setRange(0, x_max)
        ax.setTickType(QValueAxis.TickType.TicksDynamic)
        ax.setTickAnchor(0)
        ax.setTickInterval(max(1, -(-x_max // 10)))
        ax.setLabelFormat("%d")
        ay = QValueAxis()
        ay.setTitleText("decode tok/s")
        ay.setRange(0, y_max)
        ay.applyNiceNumbers()
        ay.setLabelFormat("%.0f")
        chart.addAxis(ax, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(ay, Qt.AlignmentFlag.AlignLeft)
        for s in series:
            chart.addSeries(s)
            s.attachAxis(ax)
            s.attachAxis(ay)
        # after applyNiceNumbers: the caption describes the axis actually drawn
        self.caption.setText(sweep_caption(result, ay.max()))
        # the "measured k" dots repeat the line's points: no second legend entry
        for marker in chart.legend().markers(dots):
            marker.setVisible(False)

    def _fill_table(self, result: KSweepResult) -> None:
        pts: Sequence[KSweepPoint] = result.points
        self.table.setRowCount(len(pts))
        for i, p in enumerate(pts):
            busy = (("busy", "Other work disturbed every run of this k: not recommended "
                     "while another k has an undisturbed run.") if p.all_disturbed
                    else (f"{p.disturbed} busy run{'s' if p.disturbed != 1 else ''} out",
                          f"{p.disturbed} run{'s' if p.disturbed != 1 else ''} of this k "
                          "disturbed by other work, left out of the median.")
                    if p.disturbed else None)
            cells = [
                str(p.k),
                or_dash(p.decode_tps, ".1f") + (f" ({busy[0]})" if busy else ""),
                or_dash(p.measured_speedup, ".2f", "×"),
                or_dash(p.acceptance_rate, ".2f"),
                or_dash(p.mean_acceptance_length, ".2f"),
                or_dash(p.predicted_speedup, ".2f", "×"),
                "yes" if p.identical else "no",
            ]
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                if j == 1 and busy:
                    item.setToolTip(busy[1])
                if p.k == result.recommended_k:
                    f = item.font()
                    f.setBold(True)
                    item.setFont(f)
                    item.setForeground(_BEST)
                self.table.setItem(i, j, item)

    def _update_buttons(self) -> None:
        self.run_button.setText("Stop" if self._running else "Run k sweep")
        k = self._result.recommended_k if self._result is not None else None
        busy = self._result is not None and self._result.all_busy
        none_beat = self._result is not None and self._result.no_k_beat_off and not busy
        self.apply_button.setEnabled(k is not None and not self._running)
        self.apply_button.setText(f"Apply k = {k}" if k is not None
                                  else "No k to apply: every run was busy" if busy
                                  else "No k to apply: none beat speculation off" if none_beat
                                  else "Apply k")
        self.apply_button.setToolTip(
            "Other work disturbed every run of every k in this sweep" if busy
            else "No k decoded faster than speculation off in this sweep" if none_beat
            else "Use this draft length in the chat window")
        # the words turn from green to amber when they recommend no k (none beat
        # speculation off, or other work disturbed every run)
        self.recommendation.setProperty("none_beat", none_beat or busy)
        self.recommendation.style().unpolish(self.recommendation)
        self.recommendation.style().polish(self.recommendation)
        self.ks_edit.setEnabled(not self._running)
        self.repeat_spin.setEnabled(not self._running)
        self.warm_check.setEnabled(not self._running)

    def set_enabled_to_run(self, enabled: bool) -> None:
        """Allow starting a sweep (False while a race runs on the same worker)."""
        self.run_button.setEnabled(enabled or self._running)

    @Slot()
    def _on_run_button_clicked(self) -> None:
        if self._running:
            self.stop_clicked.emit()
        else:
            self.run_clicked.emit()

    @Slot()
    def _on_apply_button_clicked(self) -> None:
        if self._result is not None and self._result.recommended_k is not None:
            self.apply_clicked.emit(self._result.recommended_k)
