"""The race window offscreen: a real race on Gemma 3 270M (identical text at k ≤ 2),
replay, export, the k sweep and the lookup estimate on the tiny model, the calculator,
and closing mid-race without leaving a thread running."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from app.chat.events import JobDone, JobStarted
from app.chat.history_source import PastConversation, PastMessage
from app.chat.requests import RaceProgressed
from app.engine.chat import ChatMessage
from app.engine.measure.lookup import estimate_lookup_hit_rate, model_tokenizer
from app.engine.stats import MIN_VERIFIED_FOR_ESTIMATE
from app.options import SamplingParams, SpeculationConfig
from app.ui.race.report import speedup_headline
from app.ui.race import RaceWindow
from app.ui.race.lane_pane import DRAFT_TINT
from app.ui.service_bridge import ServiceBridge
from tests.ui.race.conftest import session_of

RACE_TIMEOUT_MS = 240_000
GREEDY = SamplingParams(temperature=0.0, seed=1234, max_tokens=24)
LOOKUP = SpeculationConfig(mode="prompt-lookup", draft_max=2, adaptive=False)


def _open(qtbot, bridge: ServiceBridge, **kwargs) -> RaceWindow:  # type: ignore[no-untyped-def]
    info = _model_info(bridge)
    w = RaceWindow(bridge, info, sampling=kwargs.pop("sampling", GREEDY),
                   speculation=kwargs.pop("speculation", LOOKUP), **kwargs)
    qtbot.addWidget(w)
    w.show()
    return w


def _model_info(bridge: ServiceBridge):  # type: ignore[no-untyped-def]
    from app.chat.service import describe_session

    return describe_session(session_of(bridge), 0.0)


def _table(w: RaceWindow) -> dict[str, tuple[str, str]]:
    t = w.race_view.table
    return {t.item(i, 0).text(): (t.item(i, 1).text(), t.item(i, 2).text())
            for i in range(t.rowCount())}


# -- fast: no race ---------------------------------------------------------------------
@pytest.mark.parametrize(("alpha", "k", "c", "e", "s"), [
    (0.6, 3, 0.05, 2.18, 1.9), (0.7, 4, 0.05, 2.77, 2.3), (0.8, 5, 0.05, 3.69, 3.0),
    (0.75, 6, 0.05, None, 2.7), (1.0, 4, 0.0, 5.0, 5.0),
])
def test_calculator_matches_the_formula(qtbot, tiny_bridge: ServiceBridge, alpha: float, k: int,
                                        c: float, e: float | None, s: float) -> None:
    w = _open(qtbot, tiny_bridge)
    calc = w.calculator
    calc.set_inputs(alpha, k, c)
    r = calc.calculation
    assert r is not None
    # computed by hand, independently of app.engine.stats: E = 1 + α + … + α^k
    hand_e = sum(alpha ** i for i in range(k + 1))
    assert r.expected_tokens == pytest.approx(hand_e)
    assert r.speedup == pytest.approx(hand_e / (1 + c * k))
    if e is not None:
        assert r.expected_tokens == pytest.approx(e, abs=0.005)
    assert r.speedup == pytest.approx(s, abs=0.05)
    assert calc.s_label.text() == f"{r.speedup:.2f}×"
    assert calc.e_label.text() == f"{r.expected_tokens:.2f} tokens"
    # charted to k = 16, or to the best k past it (at α = 1 and c = 0: K_MAX)
    assert len(calc.curve.points()) == max(16, r.best_k)
    w.close()


def test_conversation_prompt_drops_the_trailing_reply(qtbot, tiny_bridge: ServiceBridge) -> None:
    msgs = [ChatMessage("user", "▁def x"), ChatMessage("assistant", "▁return")]
    w = _open(qtbot, tiny_bridge, messages=msgs)
    spec = w.prompt_spec()
    assert spec.messages == (msgs[0],)
    assert w.prompt_combo.currentText().startswith("This conversation")
    assert w.speculation().mode == "prompt-lookup" and w.speculation().draft_max == 2
    w.close()


def test_speculation_off_in_the_chat_races_with_prompt_lookup(qtbot, tiny_bridge: ServiceBridge) -> None:
    w = _open(qtbot, tiny_bridge,
              speculation=SpeculationConfig(mode="off", draft_max=3, adaptive=False),
              prompt="▁hello ▁world")
    assert w.speculation().mode == "prompt-lookup" and w.speculation().draft_max == 3
    assert not w.speculation().adaptive  # as the chat window had it
    assert w.prompt_spec().text == "▁hello ▁world"
    w.set_race_settings(adaptive=True, k=5)
    assert w.speculation().adaptive and w.speculation().draft_max == 5
    assert w.race_view.on_pane.subtitle.text() == "prompt lookup, k ≤ 5 (adaptive)"
    w.close()


def test_the_race_drafter_keeps_a_chosen_k_and_settings_set_the_drafter_first(
        qtbot, tiny_bridge: ServiceBridge) -> None:  # type: ignore[no-untyped-def]
    w = _open(qtbot, tiny_bridge, speculation=SpeculationConfig(mode="prompt-lookup"))
    assert w.speculation().draft_max == 16  # the model-free drafters' default
    w.k_spin.setValue(7)
    w.drafter_combo.setCurrentIndex(w.drafter_combo.findData("suffix"))
    assert (w.speculation().mode, w.speculation().draft_max) == ("suffix", 7)
    w.set_race_settings(drafter="prompt-lookup", k=5)
    assert (w.speculation().mode, w.speculation().draft_max) == ("prompt-lookup", 5)
    w.close()


def test_the_k_sweep_also_measures_the_k_in_use(qtbot, tiny_bridge: ServiceBridge) -> None:  # type: ignore[no-untyped-def]
    """The sweep's default draft lengths (1 … 8) gain the race's k (a lookup drafter's
    16) and follow it until the user types their own."""
    w = _open(qtbot, tiny_bridge, speculation=SpeculationConfig(mode="prompt-lookup"))
    assert w.sweep_view.ks() == (1, 2, 3, 4, 5, 6, 8, 16)
    w.k_spin.setValue(12)
    assert w.sweep_view.ks() == (1, 2, 3, 4, 5, 6, 8, 12)
    w.k_spin.setValue(16)
    w.drafter_combo.setCurrentIndex(w.drafter_combo.findData("draft-model"))  # k 16 → 4
    assert w.speculation().draft_max == 4 and w.sweep_view.ks() == (1, 2, 3, 4, 5, 6, 8)
    w.sweep_view.ks_edit.setText("2, 3")
    w.k_spin.setValue(10)
    assert w.sweep_view.ks() == (2, 3)  # typed: kept
    w.close()


# -- tiny model: sweep and lookup ------------------------------------------------------
def test_k_sweep_gives_one_point_per_k_and_applies_the_best(qtbot, tiny_bridge: ServiceBridge) -> None:
    w = _open(qtbot, tiny_bridge, prompt="▁def ▁x ( ▁y ) : ▁return ▁y",
              speculation=SpeculationConfig(mode="draft-model", draft_max=2),
              sampling=SamplingParams(temperature=0.0, seed=1, max_tokens=16))
    w.set_race_settings(max_tokens=16)
    w.sweep_view.ks_edit.setText("1, 2, 3, 4")
    w.sweep_view.warm_check.setChecked(False)
    busy: list[bool] = []
    w.busy_changed.connect(busy.append)
    assert w.start_sweep()
    assert w.busy and w.sweep_view.running
    qtbot.waitUntil(lambda: not w.busy, timeout=RACE_TIMEOUT_MS)
    assert busy == [True, False]
    result = w.sweep_view.result
    assert result is not None and not result.cancelled
    assert [p.k for p in result.points] == [1, 2, 3, 4]
    measured = w.sweep_view.series_points("measured tok/s")
    assert [x for x, _ in measured] == [1, 2, 3, 4]
    assert all(y > 0 for _, y in measured)
    assert result.acceptance_rate == 1.0  # the model drafts for itself
    predicted = w.sweep_view.series_points("predicted")
    assert len(predicted) == 4
    assert predicted[0][1] == pytest.approx(result.predicted_curve[0][1] * result.plain_decode_tps)
    assert w.sweep_view.table.rowCount() == 4
    k = result.recommended_k
    if k is None:  # no k beat speculation off here, or other work disturbed every run
        assert result.no_k_beat_off or result.all_busy
        assert not w.sweep_view.apply_button.isEnabled()
        w.close()
        return
    assert k in (1, 2, 3, 4)
    assert w.sweep_view.apply_button.isEnabled()
    with qtbot.waitSignal(w.draft_length_applied) as sig:
        w.sweep_view.apply_button.click()
    assert sig.args == [k]
    assert w.speculation().draft_max == k
    w.close()


def test_lookup_estimate_over_chosen_conversations(qtbot, tiny_bridge: ServiceBridge) -> None:
    reply = "▁def ▁x ( ▁y ) : ▁return ▁y"
    convs = [
        PastConversation(1, "repeat", (
            PastMessage("user", f"copy this: {reply}"),
            PastMessage("assistant", reply, {"mode": "prompt-lookup", "verified": 8,
                                             "accepted": 6}),
        )),
        PastConversation(2, "other", (
            PastMessage("user", "▁hello"), PastMessage("assistant", "▁world ▁model"),
        )),
    ]
    w = _open(qtbot, tiny_bridge, conversations=convs)
    view = w.lookup_view
    assert view.list.count() == 2
    view.list.item(1).setCheckState(view.list.item(1).checkState().Unchecked)
    assert [c.title for c in view.selected_conversations()] == ["repeat"]
    assert "0.75" in view.measured_label.text()  # stored α of the chosen conversation
    assert w.start_estimate()
    qtbot.waitUntil(lambda: view.estimate is not None, timeout=30_000)
    expected = estimate_lookup_hit_rate([convs[0].messages],
                                        model_tokenizer(session_of(tiny_bridge).target))
    assert view.estimate == expected
    assert view.table.rowCount() == 4
    assert [view.table.item(i, 0).text() for i in range(4)] == ["2", "3", "4", "5"]
    assert view.verdict_label.text()
    w.close()


# -- Gemma 3 270M: the race ------------------------------------------------------------
@pytest.mark.slow
def test_gemma_race_is_identical_replays_and_exports(qtbot, gemma_bridge: ServiceBridge,
                                                     tmp_path: Path) -> None:
    w = _open(qtbot, gemma_bridge)
    w.select_example("rename-variable")
    w.set_race_settings(k=2, seed=1234, temperature=0.0, max_tokens=24)
    assert w.start_race()
    qtbot.waitUntil(lambda: not w.busy, timeout=RACE_TIMEOUT_MS)
    assert w.message.isHidden(), w.message.text()
    rec = w.race_view.recording
    assert rec is not None
    r = rec.result
    assert not r.cancelled and r.identical, r.first_difference
    assert len(r.off.token_ids) == len(r.on.token_ids) > 0

    # the replay runs at true pace from t = 0; the table appears when it ends
    assert w.race_view.replaying and not w.race_view.results_visible
    with qtbot.waitSignal(w.race_view.replay_finished, timeout=60_000):
        pass
    assert w.race_view.results_visible
    assert w.race_view.off_pane.shown_text == r.off.text
    assert w.race_view.on_pane.shown_text == r.on.text
    assert w.race_view.on_pane.tokens.value.text() == str(len(r.on.token_ids))
    assert w.race_view.on_pane.alpha.value.text() == f"{r.on.stats.acceptance_rate:.2f}"
    table = _table(w)
    assert table["identical text"][1] == "yes"
    # five interleaved off/on pairs, the lanes' own first; the headline is their median
    assert len(r.pairs) == 5 and r.pairs[0].off_tps == r.off.stats.decode_tps
    assert table["off/on pairs timed"][1].startswith("5")
    assert w.race_view.headline.text() == speedup_headline(r)
    # the rates beside the median speedup are the median pair's own
    n_kept = len(r.kept_pairs)
    medians = r.median_decode_tps or (r.off.stats.decode_tps, r.on.stats.decode_tps)
    rate_row = (f"decode tok/s, median of {n_kept} pairs" if n_kept > 1
                else f"decode tok/s, pair {r.pairs.index(r.kept_pairs[0]) + 1} of 5"
                if n_kept else "decode tok/s, replayed pair")
    assert table[rate_row] == (f"{medians[0]:.1f}", f"{medians[1]:.1f}")
    assert "Identical text" in w.race_view.verdict.text()
    assert w.race_view.explanation.isHidden()
    # text that came from accepted drafts is tinted in the "on" pane, and only there
    if any(seg.from_draft for seg in rec.on.segments):
        doc = w.race_view.on_pane.text.document()
        assert any(fr.charFormat().background().color() == DRAFT_TINT for fr in _fragments(doc))
    off_doc = w.race_view.off_pane.text.document()
    assert not any(fr.charFormat().background().color() == DRAFT_TINT for fr in _fragments(off_doc))

    png, md = tmp_path / "race.png", tmp_path / "race.md"
    w.export_png(png)
    w.export_markdown(md)
    img = QImage(str(png))
    assert not img.isNull() and img.width() > 400 and img.height() > 300
    text = md.read_text(encoding="utf-8")
    assert f"| {rate_row} | {medians[0]:.1f} | {medians[1]:.1f} |" in text
    assert "| identical text |  | yes |" in text
    assert "acceptance rate α" in text and "predicted speedup" in text
    assert r.off.text in text and "## Speculation off" in text
    # the calculator was offered the measured α and c, unless they rest on few drafts
    enough = r.on.stats.verified >= MIN_VERIFIED_FOR_ESTIMATE
    assert w.calculator.measured_button.isEnabled() == enough
    w.close()


def test_race_progress_shows_each_pair_as_it_arrives(qtbot) -> None:  # type: ignore[no-untyped-def]
    from app.engine.measure.race import RacePair
    from app.ui.race.race_view import RaceViewWidget

    v = RaceViewWidget()
    qtbot.addWidget(v)
    v.begin_race()
    v.show_progress("off", 10, 96)
    assert "First pair, speculation off" in v.status.text()
    v.show_progress("pairs", 1, 3, RacePair(50.0, 70.0, 0.0, 0.0))
    assert v.status.text() == "Timed 1 of 3 off/on pairs (speedup per pair: 1.40×). Timing the next…"
    v.show_progress("pairs", 2, 3, RacePair(50.0, 20.0, 0.0, 1.4))
    v.show_progress("pairs", 3, 3, RacePair(50.0, 72.0, 0.0, 0.0))
    assert v.status.text() == "Timed 3 of 3 off/on pairs (speedup per pair: 1.40×, disturbed, 1.44×)."
    assert v.progress.value() == 3 and v.progress.maximum() == 3


def _blocks(doc):  # type: ignore[no-untyped-def]
    b = doc.begin()
    while b.isValid():
        yield b
        b = b.next()


def _fragments(doc):  # type: ignore[no-untyped-def]
    for b in _blocks(doc):
        it = b.begin()
        while not it.atEnd():
            fr = it.fragment()
            if fr.isValid():
                yield fr
            it += 1


@pytest.mark.slow
def test_closing_mid_race_stops_its_job_and_frees_the_session(qtbot, gemma_bridge: ServiceBridge) -> None:
    w = _open(qtbot, gemma_bridge)
    w.select_example("rename-variable")
    w.set_race_settings(k=2, max_tokens=300)
    progress: list[tuple[str, int]] = []
    gemma_bridge.event_received.connect(
        lambda e: progress.append((e.lane, e.tokens)) if isinstance(e, RaceProgressed) else None)
    assert w.start_race()
    job = w._race
    assert job is not None
    qtbot.waitUntil(lambda: any(lane == "off" and n > 0 for lane, n in progress),
                    timeout=RACE_TIMEOUT_MS)
    w.close()
    assert not w.busy
    rec = job.result(60)  # the race stopped within a round and returned what it had
    assert rec.result.cancelled
    # the engine left its loop: the session is free for the next job
    fin = gemma_bridge.service.complete([1, 100], GREEDY.with_changes(max_tokens=2),
                                        SpeculationConfig()).result(60)
    assert fin.reason in ("length", "stop")


def test_a_race_waits_in_the_queue_behind_a_chat_reply(qtbot, tiny_bridge: ServiceBridge) -> None:
    service = tiny_bridge.service
    order: list[object] = []
    unsubscribe = service.subscribe(order.append)
    w = _open(qtbot, tiny_bridge, prompt="▁def ▁x ( ▁y ) : ▁return ▁y")
    try:
        reply = service.complete([1, 300, 301], SamplingParams(temperature=0.0, max_tokens=50),
                                 SpeculationConfig(), origin="window")
        assert w.start_race()  # no refusal: it queues
        race = w._race
        assert race is not None
        qtbot.waitUntil(lambda: not w.busy, timeout=60_000)
        assert w.race_view.recording is not None and w.message.isHidden()
        reply_done = next(i for i, e in enumerate(order)
                          if isinstance(e, JobDone) and e.job_id == reply.id)
        race_started = next(i for i, e in enumerate(order)
                            if isinstance(e, JobStarted) and e.job_id == race.id)
        assert reply_done < race_started  # one generation at a time, in order
    finally:
        unsubscribe()
    w.close()


def test_closing_the_parent_closes_the_race_window_and_cancels_its_job(
        qtbot, tiny_bridge: ServiceBridge) -> None:
    from PySide6.QtWidgets import QMainWindow

    parent = QMainWindow()
    qtbot.addWidget(parent)
    parent.show()
    w = RaceWindow(tiny_bridge, _model_info(tiny_bridge), sampling=GREEDY.with_changes(max_tokens=200),
                   speculation=LOOKUP, prompt="▁def ▁x ( ▁y ) : ▁return ▁y", parent=parent)
    w.show()
    assert w.isWindow() and w.start_race()
    job = w._race
    assert job is not None
    parent.close()
    assert not w.isVisible() and job.cancelled
    assert job.wait(60) is not None


def test_esc_and_ctrl_w_close_the_race_window(qtbot, tiny_bridge: ServiceBridge) -> None:
    """Esc (with nothing running) and the platform's Close key close the race window
    (their shortcuts fired directly: the offscreen platform activates no window to send
    keys to)."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QKeySequence, QShortcut

    for key in (QKeySequence(Qt.Key.Key_Escape), QKeySequence(QKeySequence.StandardKey.Close)):
        w = _open(qtbot, tiny_bridge)
        [shortcut] = [s for s in w.findChildren(QShortcut) if s.key() == key]
        shortcut.activated.emit()
        qtbot.waitUntil(lambda w=w: not w.isVisible(), timeout=5000)
