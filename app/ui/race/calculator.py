"""The speedup calculator: α, k and c give E and the predicted speedup.

Formulas (Leviathan, Kalman & Matias 2023, eq. 1 and Theorem 3.8), computed by
:func:`app.engine.stats.calculate_speedup`:

* expected tokens per round  E(α, k) = (1 − α^(k+1)) / (1 − α)   (k + 1 at α = 1)
* predicted speedup          S = E(α, k) / (1 + c·k)

A small chart shows S for k = 1..16 at the chosen α and c, with the chosen k and the best
k marked, and the measured α and c of the latest race can be filled in with one click.
"""

from __future__ import annotations

from PySide6.QtCharts import QChart, QChartView, QLineSeries, QScatterSeries, QValueAxis
from PySide6.QtCore import QMargins, QPointF, Qt, Slot
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.engine.stats import MIN_VERIFIED_FOR_ESTIMATE, SpeedupCalculation, calculate_speedup
from app.options import K_MAX
from app.ui.labels import Label

#: the longest draft the calculator charts, unless the chosen k or the best k is longer
#: (then up to it); the best k is searched up to the app's K_MAX
CHART_K_MAX = 16


class SpeedupCalculatorWidget(QWidget):
    """The calculator tab (see the module docstring)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("calculatorView")
        self._measured: tuple[float, float] | None = None
        self._measured_k: int | None = None
        self._calc: SpeedupCalculation | None = None
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 8, 10, 8)
        row.setSpacing(16)

        left = QVBoxLayout()
        form = QFormLayout()
        self.alpha_spin = QDoubleSpinBox()
        self.alpha_spin.setRange(0.0, 1.0)
        self.alpha_spin.setDecimals(3)
        self.alpha_spin.setSingleStep(0.05)
        self.alpha_spin.setValue(0.7)
        self.alpha_spin.setToolTip("Acceptance rate: accepted draft tokens ÷ verified draft tokens")
        self.k_spin = QSpinBox()
        self.k_spin.setRange(1, K_MAX)
        self.k_spin.setValue(4)
        self.k_spin.setToolTip("Draft length: tokens proposed per round")
        self.c_spin = QDoubleSpinBox()
        self.c_spin.setRange(0.0, 5.0)
        self.c_spin.setDecimals(3)
        self.c_spin.setSingleStep(0.01)
        self.c_spin.setValue(0.05)
        self.c_spin.setToolTip("Draft cost ratio: one draft step's time ÷ one plain target step's")
        form.addRow("acceptance rate α", self.alpha_spin)
        form.addRow("draft length k", self.k_spin)
        form.addRow("draft cost ratio c", self.c_spin)
        left.addLayout(form)
        self.measured_button = QPushButton("Use the race's measured α and c")
        self.measured_button.setEnabled(False)
        self.measured_button.clicked.connect(self._on_measured_button_clicked)
        left.addWidget(self.measured_button)

        self.e_label = Label()
        self.e_label.setObjectName("calcBig")
        self.s_label = Label()
        self.s_label.setObjectName("calcBig")
        self.best_label = Label()
        self.best_label.setWordWrap(True)
        grid = QFormLayout()
        grid.addRow("expected tokens per round E", self.e_label)
        grid.addRow("predicted speedup", self.s_label)
        left.addLayout(grid)
        left.addWidget(self.best_label)
        formula = Label(
            "E(α, k) = (1 − α<sup>k+1</sup>) / (1 − α), and E = k + 1 at α = 1<br>"
            "speedup = E / (1 + c·k)<br><br>"
            "<span style='color:#718096'>Leviathan, Kalman &amp; Matias 2023. The formula "
            "assumes the target checks k + 1 tokens in the time of one; on a CPU a batch "
            "costs more, so the measured speedup is lower.</span>", rich=True)
        formula.setWordWrap(True)
        formula.setObjectName("calcFormula")
        left.addWidget(formula)
        left.addStretch(1)
        row.addLayout(left, 2)

        self.chart = QChart()
        self.chart.setTitle("Predicted speedup against k at this α and c")
        self.chart.legend().hide()
        self.chart.setMargins(QMargins(4, 4, 4, 4))
        self.curve = QLineSeries()
        self.curve.setPen(QPen(QColor("#2b6cb0"), 2))
        self.chosen = QScatterSeries()
        self.chosen.setColor(QColor("#2b6cb0"))
        self.chosen.setMarkerSize(11)
        self.best = QScatterSeries()
        self.best.setColor(QColor("#2f855a"))
        self.best.setMarkerSize(15)
        self.ax = QValueAxis()
        self.ax.setRange(0, CHART_K_MAX + 1)
        self.ax.setTickType(QValueAxis.TickType.TicksDynamic)
        self.ax.setTickAnchor(0)
        self.ax.setTickInterval(2)
        self.ax.setLabelFormat("%d")
        self.ax.setTitleText("draft length k")
        self.ay = QValueAxis()
        self.ay.setTitleText("predicted speedup ×")
        self.ay.setLabelFormat("%.1f")
        self.chart.addAxis(self.ax, Qt.AlignmentFlag.AlignBottom)
        self.chart.addAxis(self.ay, Qt.AlignmentFlag.AlignLeft)
        for s in (self.curve, self.best, self.chosen):
            self.chart.addSeries(s)
            s.attachAxis(self.ax)
            s.attachAxis(self.ay)
        view = QChartView(self.chart)
        view.setRenderHint(QPainter.RenderHint.Antialiasing)
        view.setMinimumSize(380, 260)
        row.addWidget(view, 3)

        self.alpha_spin.valueChanged.connect(self._on_alpha_spin_value_changed)
        self.c_spin.valueChanged.connect(self._on_c_spin_value_changed)
        self.k_spin.valueChanged.connect(self._on_k_spin_value_changed)
        self.recalculate()

    @property
    def calculation(self) -> SpeedupCalculation | None:
        return self._calc

    def set_inputs(self, alpha: float, k: int, c: float) -> None:
        """Set α, k and c (clamped to the spin boxes' ranges) and recalculate."""
        for spin in (self.alpha_spin, self.k_spin, self.c_spin):
            spin.blockSignals(True)
        self.alpha_spin.setValue(alpha)
        self.k_spin.setValue(k)
        self.c_spin.setValue(c)
        for spin in (self.alpha_spin, self.k_spin, self.c_spin):
            spin.blockSignals(False)
        self.recalculate()

    def set_measured(self, alpha: float | None, c: float | None, k: int | None = None,
                     verified: int | None = None) -> None:
        """Offer the latest race's measured α and c (None: none yet).

        ``verified``: the verified draft tokens α rests on. With fewer than
        :data:`~app.engine.stats.MIN_VERIFIED_FOR_ESTIMATE` the figures are not offered
        (one accepted draft is "α = 1.00", which would predict k + 1 times the speed).
        """
        self._measured_k = k
        if alpha is None or c is None:
            self._measured = None
            self.measured_button.setEnabled(False)
            self.measured_button.setText("Use the race's measured α and c")
            self.measured_button.setToolTip("Run a race with speculation to measure them.")
            return
        if verified is not None and verified < MIN_VERIFIED_FOR_ESTIMATE:
            self._measured = None
            self.measured_button.setEnabled(False)
            self.measured_button.setText(
                f"The race drafted {verified} token{'s' if verified != 1 else ''}: too few to "
                f"measure α (needs {MIN_VERIFIED_FOR_ESTIMATE})")
            self.measured_button.setToolTip(
                "Race with a longer reply, or a prompt the reply repeats, to measure α.")
            return
        self._measured = (alpha, c)
        self.measured_button.setEnabled(True)
        self.measured_button.setToolTip("")
        self.measured_button.setText(f"Use the race's measured α = {alpha:.2f}, c = {c:.3f}"
                                     + (f" ({verified} draft tokens)" if verified is not None else ""))

    def recalculate(self) -> SpeedupCalculation:
        alpha, k, c = self.alpha_spin.value(), self.k_spin.value(), self.c_spin.value()
        calc = calculate_speedup(alpha, k, c, k_max=K_MAX)
        k_max = max(CHART_K_MAX, k, calc.best_k)
        self._calc = calc
        self.e_label.setText(f"{calc.expected_tokens:.2f} tokens")
        self.s_label.setText(f"{calc.speedup:.2f}×")
        self.best_label.setText(
            f"Best k for this α and c (1–{K_MAX}): k = {calc.best_k}, "
            f"{calc.best_speedup:.2f}×.")
        curve = [QPointF(kk, calculate_speedup(alpha, kk, c, k_max=1).speedup)
                 for kk in range(1, k_max + 1)]
        self.curve.replace(curve)
        self.ax.setRange(0, k_max + 1)
        self.ax.setTickInterval(2 if k_max <= CHART_K_MAX else 8)
        self.chosen.replace([QPointF(k, calc.speedup)])
        self.best.replace([QPointF(calc.best_k, calc.best_speedup)])
        top = max([p.y() for p in curve] + [calc.speedup, 1.0])
        self.ay.setRange(0, top * 1.15)
        self.ay.applyNiceNumbers()
        return calc

    @Slot(float)
    def _on_alpha_spin_value_changed(self, _value: float) -> None:
        self.recalculate()

    @Slot(float)
    def _on_c_spin_value_changed(self, _value: float) -> None:
        self.recalculate()

    @Slot(int)
    def _on_k_spin_value_changed(self, _value: int) -> None:
        self.recalculate()

    @Slot()
    def _on_measured_button_clicked(self) -> None:
        if self._measured is not None:
            a, c = self._measured
            self.set_inputs(a, self._measured_k or self.k_spin.value(), c)
