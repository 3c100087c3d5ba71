"""The serving crossover: speculation on vs off on a server as concurrency grows.

Shows a :class:`~app.remote.crossover.CrossoverResult` that ``python -m app bench
--server … --server-off … --out FILE.json`` saved: two charts (QtCharts) against the
concurrency — aggregate and per-stream decode tok/s, and p95 latency — one line for the
server that speculates and one for the server that does not, a table of every figure,
and the verdict (where speculation stops paying). "Open crossover…" loads a JSON file.
:func:`render_png` draws the same widget into a PNG without a window (the CLI's chart).
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCharts import QChart, QChartView, QLineSeries, QLogValueAxis, QValueAxis
from PySide6.QtCore import QMargins, QPointF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.errors import TandemError
from app.formatting import or_dash
from app.remote.crossover import CrossoverResult, LevelSide, load_crossover
from app.ui.labels import Label

_ON = QColor("#2b6cb0")
_OFF = QColor("#4a5568")
#: per-stream lines: lighter shades of the same two colours, dashed
_ON_STREAM = QColor("#63b3ed")
_OFF_STREAM = QColor("#a0aec0")
_COLUMNS = ("c", "side", "stream tok/s", "aggregate tok/s", "speedup", "TTFT p50 s",
            "TTFT p95 s", "latency p50 s", "latency p95 s", "α", "τ", "errors")


def verdict_words(result: CrossoverResult) -> str:
    """Where speculation stops paying (or that it still paid at the highest level), any
    level below 1× before that, and how busy the machine was."""
    levels = ", ".join(str(on.concurrency) for on, _ in result.levels)
    stop, below = result.stops_paying_at, result.not_paying
    if stop is None:
        text = (f"Speculation still paid at the highest concurrency measured (levels: "
                f"{levels}): its aggregate tok/s stayed at or above the server without it.")
    else:
        speedup = result.speedup([on.concurrency for on, _ in result.levels].index(stop))
        text = (f"Speculation stops paying at concurrency {stop} ({speedup:.3f}×): from there "
                f"on the server without it serves more tokens per second in total (levels: "
                f"{levels}).")
    dips = [c for c in below if stop is None or c < stop]
    if dips:
        text += (f" Below 1× also at {', '.join(map(str, dips))}, though a higher level paid: "
                 "noise of a busy machine or a real dip (rerun to tell).")
    if result.load_average is not None:
        text += (f" Load average during the run: {result.load_average[0]:.1f} → "
                 f"{result.load_average[1]:.1f}.")
    return text


class CrossoverWidget(QWidget):
    """The crossover tab (see the module docstring)."""

    open_clicked = Signal()
    """"Open crossover…" was clicked (the window asks for the file)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("crossoverView")
        self.result: CrossoverResult | None = None
        col = QVBoxLayout(self)
        col.setContentsMargins(10, 8, 10, 8)
        top = QHBoxLayout()
        self.source_label = Label("Run python -m app bench --server URL --server-off URL "
                                   "--concurrency 1,2,4,8 --out crossover.json, then open "
                                   "the file here.")
        self.source_label.setWordWrap(True)
        top.addWidget(self.source_label, 1)
        self.open_button = QPushButton("Open crossover…")
        self.open_button.clicked.connect(self.open_clicked)
        top.addWidget(self.open_button)
        col.addLayout(top)
        charts = QHBoxLayout()
        self.rate_chart = self._chart("Decode tok/s against concurrency")
        self.latency_chart = self._chart("Latency p95 (s) against concurrency")
        for chart in (self.rate_chart, self.latency_chart):
            view = QChartView(chart)
            view.setRenderHint(QPainter.RenderHint.Antialiasing)
            view.setMinimumHeight(260)
            charts.addWidget(view, 1)
        col.addLayout(charts, 3)
        self.verdict_label = Label("")
        self.verdict_label.setObjectName("crossoverVerdict")
        self.verdict_label.setWordWrap(True)
        col.addWidget(self.verdict_label)
        self.table = QTableWidget(0, len(_COLUMNS))
        self.table.setHorizontalHeaderLabels(list(_COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        col.addWidget(self.table, 2)

    @staticmethod
    def _chart(title: str) -> QChart:
        chart = QChart()
        chart.setTitle(title)
        chart.setMargins(QMargins(4, 4, 4, 4))
        chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
        return chart

    def load(self, path: Path) -> CrossoverResult:
        """Read ``path`` and show it.

        Raises:
            TandemError: the file is not a crossover result.
        """
        result = load_crossover(path)
        self.show_result(result, source=str(path))
        return result

    def show_result(self, result: CrossoverResult, source: str = "") -> None:
        """Draw the charts, the verdict and the table for ``result``."""
        self.result = result
        self.source_label.setText(
            f"{source + ': ' if source else ''}on {result.server_on} vs off "
            f"{result.server_off} · {result.model_on} · {result.prompt_set}, "
            f"max {result.max_tokens} tokens, greedy · {result.started_at}")
        self._plot(self.rate_chart, result, (
            ("aggregate, on", lambda s: s.aggregate_tps, _ON, Qt.PenStyle.SolidLine),
            ("aggregate, off", lambda s: s.aggregate_tps, _OFF, Qt.PenStyle.SolidLine),
            ("per stream, on", lambda s: s.stream_tps_median, _ON_STREAM, Qt.PenStyle.DashLine),
            ("per stream, off", lambda s: s.stream_tps_median, _OFF_STREAM,
             Qt.PenStyle.DashLine)))
        self._plot(self.latency_chart, result, (
            ("latency p95, on", lambda s: s.to_dict()["latency_p95"], _ON, Qt.PenStyle.SolidLine),
            ("latency p95, off", lambda s: s.to_dict()["latency_p95"], _OFF,
             Qt.PenStyle.SolidLine)))
        self.verdict_label.setText(verdict_words(result))
        self._fill_table(result)

    @staticmethod
    def _plot(chart: QChart, result: CrossoverResult, lines: tuple[tuple, ...]) -> None:  # type: ignore[type-arg]
        chart.removeAllSeries()
        for axis in chart.axes():
            chart.removeAxis(axis)
        x_axis = QLogValueAxis()
        x_axis.setBase(2.0)
        x_axis.setLabelFormat("%d")
        x_axis.setTitleText("concurrent streams")
        y_axis = QValueAxis()
        y_axis.setLabelFormat("%.0f")
        chart.addAxis(x_axis, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(y_axis, Qt.AlignmentFlag.AlignLeft)
        top = 0.0
        cs = [on.concurrency for on, _ in result.levels]
        for name, value, color, style in lines:
            series = QLineSeries()
            series.setName(name)
            series.setPointsVisible(True)
            series.setPen(QPen(color, 2.2, style))
            side = 0 if name.endswith(", on") else 1
            for pair in result.levels:
                y = value(pair[side])
                if y is not None:
                    series.append(QPointF(pair[side].concurrency, y))
                    top = max(top, y)
            chart.addSeries(series)
            series.attachAxis(x_axis)
            series.attachAxis(y_axis)
        x_axis.setRange(min(cs) / 1.25 if cs else 1, max(cs) * 1.25 if cs else 8)
        y_axis.setRange(0.0, top * 1.15 if top > 0 else 1.0)
        y_axis.applyNiceNumbers()

    def _fill_table(self, result: CrossoverResult) -> None:
        rows: list[tuple[LevelSide, float | None]] = []
        for i, (on, off) in enumerate(result.levels):
            rows += [(on, result.speedup(i)), (off, None)]
        self.table.setRowCount(len(rows))
        for r, (side, speedup) in enumerate(rows):
            d = side.to_dict()
            cells = (str(side.concurrency), side.side, or_dash(d["stream_tps_median"], ".1f"),
                     or_dash(d["aggregate_tps"], ".1f"),
                     or_dash(speedup, ".2f", "×") if side.side == "on" else "",
                     or_dash(d["ttft_p50"], ".3f"), or_dash(d["ttft_p95"], ".3f"),
                     or_dash(d["latency_p50"], ".2f"), or_dash(d["latency_p95"], ".2f"),
                     or_dash(d["acceptance_rate"], ".2f"),
                     or_dash(d["mean_acceptance_length"], ".2f"), str(side.errors))
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                self.table.setItem(r, c, item)


def render_png(json_path: Path, png_path: Path, *, width: int = 1200, height: int = 760) -> None:
    """Draw the crossover in ``json_path`` into ``png_path`` (no window is shown; run
    with ``QT_QPA_PLATFORM=offscreen`` where there is no display).

    Raises:
        TandemError: the JSON is not a crossover result, or the PNG cannot be written.
    """
    from app.ui.launch import create_application

    app = create_application(sys.argv[:1])
    widget = CrossoverWidget()
    widget.open_button.hide()
    widget.load(json_path)
    widget.resize(width, height)
    widget.show()
    app.processEvents()
    if not widget.grab().save(str(png_path), "PNG"):
        raise TandemError(f"Cannot write the chart {png_path}.")
    widget.close()


def main(argv: list[str]) -> int:
    """``IN.json OUT.png``: :func:`render_png`; 2 with one line for bad input."""
    if len(argv) != 2:
        print("usage: IN.json OUT.png", file=sys.stderr)
        return 2
    try:
        render_png(Path(argv[0]), Path(argv[1]))
    except TandemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
