"""Numbers in the race window that must not mislead: the lane header keeps the k
of the run it reports, the k-sweep caption says only what is true of the chart, the
calculator does not offer an α measured on almost no drafts, and "Is prompt lookup worth
it?" takes a measured race into account."""

from __future__ import annotations

import pytest

from app.chat.service import describe_session
from app.engine.measure.lookup import LookupEstimate, NgramHits
from app.engine.measure.sweep import KSweepPoint, KSweepResult
from app.engine.stats import MIN_VERIFIED_FOR_ESTIMATE, predicted_speedup
from app.options import SamplingParams, SpeculationConfig
from app.ui.race import RaceWindow
from app.ui.race.calculator import SpeedupCalculatorWidget
from app.ui.race.lookup_view import LookupEstimateWidget, LookupMeasurement, verdict
from app.ui.race.sweep_view import KSweepWidget
from app.ui.service_bridge import ServiceBridge
from tests.ui.race.conftest import session_of

RACE_TIMEOUT_MS = 240_000


def test_lane_header_keeps_the_k_of_the_race_shown(qtbot, tiny_bridge: ServiceBridge) -> None:
    info = describe_session(session_of(tiny_bridge), 0.0)
    w = RaceWindow(tiny_bridge, info, sampling=SamplingParams(temperature=0.0, seed=1, max_tokens=12),
                   speculation=SpeculationConfig(mode="draft-model", draft_max=4, adaptive=True),
                   prompt="▁def ▁x ( ▁y ) : ▁return ▁y")
    qtbot.addWidget(w)
    w.show()
    assert w.start_race()
    qtbot.waitUntil(lambda: not w.busy, timeout=RACE_TIMEOUT_MS)
    assert w.race_view.recording is not None
    shown = w.race_view.on_pane.subtitle.text()
    assert shown.startswith("draft model") and shown.endswith(", k ≤ 4 (adaptive)")
    w.set_race_settings(k=8, adaptive=False)  # the controls now say something else …
    assert w.race_view.on_pane.subtitle.text() == shown  # … the run shown does not
    w.race_view.skip_replay()
    assert w.race_view.table.horizontalHeaderItem(2).text().endswith("k ≤ 4 (adaptive)")
    assert w.start_race()  # the next race is described by the new settings
    assert w.race_view.on_pane.subtitle.text() == "draft model, k = 8"
    qtbot.waitUntil(lambda: not w.busy, timeout=RACE_TIMEOUT_MS)
    w.close()


def _long_conversation_window(bridge: ServiceBridge) -> RaceWindow:
    from app.engine.chat import ChatMessage
    from app.options import ContextOverflow

    info = describe_session(session_of(bridge), 0.0)
    said = "the quick brown fox jumps over the lazy dog " * 4
    messages = tuple(ChatMessage(role, f"{i}: {said}") for i in range(6)
                     for role in ("user", "assistant")) + (ChatMessage("user", "and now?"),)
    return RaceWindow(bridge, info, messages=messages, sampling=SamplingParams(
        temperature=0.0, seed=1, max_tokens=12, context_overflow=ContextOverflow.TRUNCATE_MIDDLE),
        speculation=SpeculationConfig(mode="prompt-lookup", draft_max=4))


def test_a_conversation_longer_than_the_context_is_raced_as_the_chat_shortens_it(
        qtbot, tiny_bridge: ServiceBridge) -> None:
    """"This conversation" follows the chat's overflow policy: earlier messages are
    dropped as a reply's would be, both lanes race that, and the window says what was
    dropped."""
    w = _long_conversation_window(tiny_bridge)
    qtbot.addWidget(w)
    w.show()
    assert w.start_race()
    qtbot.waitUntil(lambda: not w.busy, timeout=RACE_TIMEOUT_MS)
    rec = w.race_view.recording
    assert rec is not None and rec.context is not None and rec.context.dropped_messages > 0
    assert rec.result.off.stats.emitted == 12 and rec.result.on.stats.emitted == 12
    assert "Dropped" in w.message.text()
    w.close()


def test_a_k_sweep_of_a_conversation_longer_than_the_context_says_what_it_dropped(
        qtbot, tiny_bridge: ServiceBridge) -> None:
    w = _long_conversation_window(tiny_bridge)
    qtbot.addWidget(w)
    w.show()
    w.sweep_view.ks_edit.setText("2")
    assert w.start_sweep()
    qtbot.waitUntil(lambda: not w.busy, timeout=RACE_TIMEOUT_MS)
    result = w.sweep_view.result
    assert result is not None and result.context is not None
    assert result.context.dropped_messages > 0
    assert result.to_dict()["context"]["dropped_messages"] == result.context.dropped_messages
    assert "Dropped" in w.message.text()
    w.close()


def _sweep(predicted_speedups: list[float], measured: list[float], plain: float = 40.0,
           alpha: float | None = 0.9) -> KSweepResult:
    ks = list(range(1, len(measured) + 1))
    points = tuple(KSweepPoint(k=k, decode_tps=m, acceptance_rate=alpha,
                               mean_acceptance_length=1.5, draft_cost_ratio=0.01,
                               predicted_speedup=p, measured_speedup=m / plain, identical=True)
                   for k, m, p in zip(ks, measured, predicted_speedups, strict=True))
    curve = tuple(zip(ks, predicted_speedups, strict=True)) if alpha is not None else ()
    return KSweepResult(plain, points, alpha, 0.01 if alpha is not None else None, curve,
                        fastest_k=1, predicted_best_k=len(ks))


def _y_max(view: KSweepWidget) -> float:
    from PySide6.QtCore import Qt

    [ay] = view.chart.axes(Qt.Orientation.Vertical)
    return float(ay.max())


def test_sweep_caption_says_the_curve_leaves_the_chart_only_when_it_does(qtbot) -> None:
    view = KSweepWidget()
    qtbot.addWidget(view)
    # predictions up to 105 tok/s over points up to 46: above 2.5 × the fastest point
    # with the margin (where a clipping rule would cut it), yet the whole curve fits the axis
    view.show_result(_sweep([1.3, 1.9, 2.4, 2.625], [44.0, 46.0, 45.0, 43.0]))
    y_top = _y_max(view)
    assert max(y for _, y in view.series_points("predicted")) <= y_top
    assert "leaves the chart" not in view.caption.text()
    assert "predicted curve is" in view.caption.text()
    # the textbook curve far above a CPU's points: clipped, and said for the right k
    view.show_result(_sweep([1.9, 2.7, 3.4, 4.0], [44.0, 40.0, 36.0, 30.0]))
    y_top = _y_max(view)
    above = [x for x, y in view.series_points("predicted") if y > y_top]
    assert above, "the test needs a clipped curve"
    assert f"leaves the chart at the top for k ≥ {int(above[0])}" in view.caption.text()
    # no α: no predicted curve, and the caption does not describe one
    view.show_result(_sweep([1.0, 1.0], [40.0, 41.0], alpha=None))
    assert view.series_points("predicted") == []
    assert "predicted curve is" not in view.caption.text()
    assert "nothing was drafted" in view.caption.text()


def test_calculator_does_not_offer_an_alpha_from_almost_no_drafts(qtbot) -> None:
    calc = SpeedupCalculatorWidget()
    qtbot.addWidget(calc)
    assert predicted_speedup(1.0, 16, 0.001) > 15  # what 1 lucky draft would predict
    calc.set_measured(1.0, 0.001, 16, verified=2)
    assert not calc.measured_button.isEnabled()
    assert "too few" in calc.measured_button.text() and "2 tokens" in calc.measured_button.text()
    calc.set_measured(0.8, 0.01, 4, verified=MIN_VERIFIED_FOR_ESTIMATE)
    assert calc.measured_button.isEnabled()
    calc.measured_button.click()
    assert calc.alpha_spin.value() == pytest.approx(0.8) and calc.k_spin.value() == 4


def _estimate(hit_rate: float) -> LookupEstimate:
    n = 100
    return LookupEstimate((NgramHits(2, positions=n, lookups=n, hits=int(hit_rate * n)),), 3, n)


def test_lookup_verdict_takes_a_measured_race_into_account(qtbot) -> None:
    est = _estimate(0.5)
    assert verdict(est).startswith("Lookup would have predicted 50%")  # the replay alone
    slow = [LookupMeasurement("this window's race", 0.9, verified=40, speedup=0.46)]
    text = verdict(est, slow)
    assert "worth it" not in text.lower().split(".")[0] and text.startswith("Not on this machine")
    assert "0.46×" in text
    fast = [LookupMeasurement("the k sweep", 0.9, speedup=1.31)]
    assert verdict(est, fast).startswith("Worth it here") and "1.31×" in verdict(est, fast)

    view = LookupEstimateWidget()
    qtbot.addWidget(view)
    view.show_estimate(est)
    assert view.verdict_label.text().startswith("Lookup would have predicted")
    view.set_measured_alpha("this window's race", 1.0, verified=2, speedup=0.46)
    assert view.verdict_label.text().startswith("Not on this machine")
    assert "too few to tell" in view.measured_label.text()
    assert "0.46×" in view.measured_label.text()


def test_calculator_charts_and_searches_up_to_a_k_past_its_usual_range(qtbot) -> None:
    """k can be set to 64: the chart reaches it, and "Best k" is searched up to K_MAX
    whatever k is chosen (at α = 1 and c = 0 the best k is the longest, 65×), instead
    of both stopping at 16 with nothing plotted there."""
    from app.options import K_MAX

    assert K_MAX == 64
    calc = SpeedupCalculatorWidget()
    qtbot.addWidget(calc)
    calc.alpha_spin.setValue(1.0)
    calc.c_spin.setValue(0.0)
    calc.k_spin.setValue(4)
    result = calc.recalculate()
    assert (result.best_k, result.best_speedup) == (64, pytest.approx(65.0))
    assert "(1–64): k = 64, 65.00×" in calc.best_label.text()
    assert calc.curve.count() == 64 and calc.ax.max() == 65  # the best k is charted
    calc.k_spin.setValue(64)
    assert calc.chosen.count() == 1 and calc.recalculate().speedup == pytest.approx(65.0)
    calc.alpha_spin.setValue(0.7)
    calc.c_spin.setValue(0.05)
    calc.k_spin.setValue(4)  # a best k within 1–16: the usual range
    assert calc.recalculate().best_k <= 16
    assert calc.curve.count() == 16 and calc.ax.max() == 17


def test_the_race_window_fits_a_1024_pixel_screen(qtbot, tiny_bridge: ServiceBridge) -> None:
    info = describe_session(session_of(tiny_bridge), 0.0)
    w = RaceWindow(tiny_bridge, info)
    qtbot.addWidget(w)
    w.show()
    hint = w.minimumSizeHint()
    assert hint.width() <= 1000 and hint.height() <= 740, hint
    w.close()
