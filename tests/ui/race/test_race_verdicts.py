"""Verdicts in the race window, on the cases where a careless one is untrue (gemma-3-270m
Q5_1 target, Q4_K_M draft model, and prompt lookup): a race in which nothing was drafted but every pair
ran slower, table rates from one pair beside a median speedup over three, a k sweep that
advised speculation off yet offered a k, a tok/s column cut off, and "Likely worth it"
from a hit rate alone."""

from __future__ import annotations

import dataclasses

from PySide6.QtWidgets import QTableWidget

from app.chat.recording import LaneRecording, RaceRecording
from app.engine.measure.lookup import LookupEstimate, NgramHits
from app.engine.measure.race import RacePair, RaceResult
from app.engine.measure.sweep import KSweepPoint, KSweepResult, k_sweep_from_records
from app.ui.race.lookup_view import (
    LookupEstimateWidget,
    LookupMeasurement,
    verdict,
    verdict_tone,
)
from app.ui.race.report import prediction_note, race_markdown, race_table_rows, speedup_headline
from app.ui.race.sweep_view import KSweepWidget
from tests.engine.test_bench import _rec
from tests.ui.race.test_race_logic import _race, _with_stats


def _nothing_drafted(*pairs: RacePair) -> RaceResult:
    """A race with a draft model that proposed nothing (its policy declined every
    draft), whose lane read the prompt too (TTFT 1815 ms against 969 ms)."""
    r = _race()
    on = dataclasses.replace(r.on.stats, mode="draft-model", proposed=0, verified=0,
                             accepted=0, draft_rounds=0, rounds=40, emitted=40,
                             draft_steps=40, draft_time=0.30, declined=40, ttft=1.815,
                             decode_time=1.6)
    off = dataclasses.replace(r.off.stats, ttft=0.969)
    return dataclasses.replace(r, off=_with_stats(r.off, off), on=_with_stats(r.on, on),
                               pairs=pairs)


def test_nothing_drafted_yet_slower_in_every_pair_is_called_slower_with_its_cost() -> None:
    slower = _nothing_drafted(RacePair(30, 20, 0.0, 0.0), RacePair(30, 28.5, 0.0, 0.0),
                              RacePair(30, 24, 0.0, 0.0))
    assert slower.verdict == "slower"
    words = speedup_headline(slower)
    assert words == ("Nothing was drafted, and speculation was still slower: 0.80× the decode "
                     "speed (median of 3 pairs, 0.67–0.95×), slower in every pair.")
    assert "run-to-run variation" not in words and "plainly" not in words
    note = prediction_note(slower, cpu_backend=True) or ""
    assert note.startswith("The draft model still ran: it read the prompt too (TTFT 1815 ms "
                           "against 969 ms off); its 40 draft steps took 0.30 s (19% of the "
                           "1.60 s decode)")
    assert "declined all 40 drafts" in note
    md = race_markdown(RaceRecording(slower, LaneRecording(slower.off), LaneRecording(slower.on),
                                     "m.gguf", "draft model", "p", 32))
    assert words in md and note in md

    # only pairs that do not agree are run-to-run variation
    mixed = _nothing_drafted(RacePair(30, 29, 0.0, 0.0), RacePair(30, 31, 0.0, 0.0),
                             RacePair(30, 30, 0.0, 0.0))
    assert mixed.verdict == "unclear"
    assert "run-to-run variation, not a speedup" in speedup_headline(mixed)
    assert "0.97–1.03×" in speedup_headline(mixed)
    two = _nothing_drafted(RacePair(30, 33, 0.0, 0.0), RacePair(30, 34, 0.0, 0.0))
    assert "Only 2 undisturbed pairs" in speedup_headline(two)
    assert "run-to-run variation" not in speedup_headline(two)  # they do agree
    faster = _nothing_drafted(RacePair(30, 33, 0.0, 0.0), RacePair(30, 34, 0.0, 0.0),
                              RacePair(30, 33.5, 0.0, 0.0))
    assert "did not come from drafting" in speedup_headline(faster)
    assert "run-to-run" not in speedup_headline(faster)
    # prompt lookup that found nothing: its lookups, not a prompt read, are what it cost
    lookup = dataclasses.replace(slower, on=_with_stats(slower.on, dataclasses.replace(
        slower.on.stats, mode="prompt-lookup", draft_steps=0, draft_time=0.004, declined=0,
        ttft=0.97)))
    note = prediction_note(lookup, cpu_backend=True) or ""
    assert note.startswith("Prompt lookup still ran: its lookups in 40 rounds took 4 ms")
    assert "found nothing to propose" in note and "prompt too" not in note
    # what it found was declined: not "found nothing" beside "declined all 6 drafts"
    declined = dataclasses.replace(lookup, on=_with_stats(lookup.on, dataclasses.replace(
        lookup.on.stats, declined=6)))
    note = prediction_note(declined, cpu_backend=True) or ""
    assert "declined all 6 drafts" in note and "found nothing" not in note


def test_table_rates_come_from_the_same_pairs_as_the_median_speedup() -> None:
    # the replayed pair ran 23.9 off and 25.4 on, the median speedup was 0.98×
    r = dataclasses.replace(_race(), pairs=(RacePair(23.9, 25.4, 0.0, 0.0),
                                            RacePair(26.0, 25.0, 0.0, 0.0),
                                            RacePair(25.0, 24.5, 0.0, 0.0)))
    rows = {name: (off, on) for name, off, on in race_table_rows(r)}
    # the median pair's own rates: their ratio is the speedup beside them
    assert rows["decode tok/s, median of 3 pairs"] == ("25.0", "24.5")
    assert rows["measured speedup (decode)"][1] == "0.98× (0.96–1.06 over 3 pairs)"
    assert r.median_decode_tps == (25.0, 24.5)
    # each side's own median would read 59.0 off and 57.2 on (0.97×) beside a 1.10×
    # speedup: the rows come from one pair
    spread = dataclasses.replace(r, pairs=(RacePair(40.0, 57.2, 0.0, 0.0),
                                           RacePair(59.0, 64.9, 0.0, 0.0),
                                           RacePair(78.6, 54.2, 0.0, 0.0)))
    rows = {name: (off, on) for name, off, on in race_table_rows(spread)}
    assert rows["decode tok/s, median of 3 pairs"] == ("59.0", "64.9")
    assert rows["measured speedup (decode)"][1].startswith("1.10×")
    # the rows that are the replayed pair's own say so
    assert {"TTFT, replayed pair", "end-to-end time, replayed pair",
            "end-to-end speedup, replayed pair"} <= set(rows)
    # a left-out pair counts in neither the speedup nor the rates
    busy = dataclasses.replace(r, pairs=(RacePair(23.9, 25.4, 0.0, 1.0),
                                         RacePair(26.0, 25.0, 0.0, 0.0),
                                         RacePair(25.0, 24.5, 0.0, 0.0)))
    rows = {name: (off, on) for name, off, on in race_table_rows(busy)}
    assert rows["decode tok/s, median of 2 pairs"] == ("25.5", "24.8")
    one = dataclasses.replace(r, pairs=(RacePair(23.9, 25.4, 0.0, 1.0),
                                        RacePair(26.0, 25.0, 0.0, 0.0),
                                        RacePair(25.0, 24.5, 1.0, 0.0)))
    assert ("decode tok/s, pair 2 of 3", "26.0", "25.0") in race_table_rows(one)
    # one pair: the lanes are the pair, the row keeps its plain name
    assert ("decode tok/s", "2.0", "8.0") in race_table_rows(_race())


def _sweep_records(tps: dict[int, float], off: float = 10.0) -> KSweepResult:
    records = [_rec("off", 0, off)]
    for k, rate in tps.items():
        records.append(_rec(f"k={k}", k, rate, verified=10, accepted=2, rounds=5,
                            draft_time=0.01 * k, steps=k, identical=True))
    return k_sweep_from_records(records)


def test_a_sweep_where_no_k_beat_off_recommends_no_k(qtbot) -> None:  # type: ignore[no-untyped-def]
    slow = _sweep_records({1: 8.5, 2: 7.9, 4: 6.0})
    assert slow.fastest_k == 1 and slow.no_k_beat_off and slow.recommended_k is None
    assert slow.to_dict()["recommended_k"] is None and slow.to_dict()["fastest_k"] == 1
    fast = _sweep_records({1: 12.0, 2: 13.0, 4: 11.0})
    assert fast.recommended_k == 2 and not fast.no_k_beat_off

    view = KSweepWidget()
    qtbot.addWidget(view)
    view.show_result(slow)
    names = [s.name() for s in view.chart.series()]
    assert not any("recommended" in n for n in names), names
    assert not view.apply_button.isEnabled()
    assert view.apply_button.text() == "No k to apply: none beat speculation off"
    text = view.recommendation.text()
    assert "No k beat speculation off" in text and "no k is recommended" in text
    assert view.recommendation.property("none_beat") is True
    assert not any(view.table.item(i, 0).font().bold() for i in range(view.table.rowCount()))
    view.show_result(fast)
    assert "recommended k = 2" in [s.name() for s in view.chart.series()]
    assert view.apply_button.isEnabled() and view.apply_button.text() == "Apply k = 2"
    assert view.series_points("recommended") == [(2.0, 13.0)]


def test_a_sweep_whose_every_run_was_busy_recommends_no_k(qtbot) -> None:  # type: ignore[no-untyped-def]
    """A sweep whose every row is marked "busy" (other work disturbed every run) offers
    no "Apply k": figures disturbed throughout are no recommendation."""
    busy = [_rec("off", 0, 10.0)]
    for k, rate in {1: 12.0, 3: 13.0, 4: 11.0}.items():
        busy.append(dataclasses.replace(
            _rec(f"k={k}", k, rate, verified=10, accepted=2, rounds=5, draft_time=0.01 * k,
                 steps=k, identical=True), other_cores=1.0))
    result = k_sweep_from_records(busy)
    assert result.fastest_k == 3 and result.all_busy and result.recommended_k is None
    view = KSweepWidget()
    qtbot.addWidget(view)
    view.show_result(result)
    assert not view.apply_button.isEnabled()
    assert view.apply_button.text() == "No k to apply: every run was busy"
    assert "disturbed every run of every k" in view.recommendation.text()
    assert view.recommendation.property("none_beat") is True  # amber: no k recommended
    assert not _sweep_records({1: 12.0, 3: 13.0}).all_busy  # clean runs: as before


def _cells_fit(table: QTableWidget) -> list[str]:
    """The cells whose text is wider than their column (drawn elided: "8.5 …")."""
    fm = table.fontMetrics()
    cut = []
    for i in range(table.rowCount()):
        for j in range(table.columnCount()):
            item = table.item(i, j)
            if item is None:
                continue
            f = item.font()
            width = (fm if not f.bold() else type(fm)(f)).horizontalAdvance(item.text())
            if width + 6 > table.columnWidth(j):  # the text margins, 3 px each side
                cut.append(item.text())
    return cut


def test_sweep_table_shows_every_rate_whole(qtbot) -> None:  # type: ignore[no-untyped-def]
    def point(k: int, tps: float, disturbed: int, undisturbed: int) -> KSweepPoint:
        return KSweepPoint(k, tps, 0.42, 1.6, 0.9, 0.8, tps / 10.0, True, disturbed, undisturbed)

    result = KSweepResult(10.0, (point(1, 8.5, 1, 2), point(2, 7.9, 0, 3), point(4, 6.1, 3, 0)),
                          0.42, 0.9, ((1, 0.8), (2, 0.7), (4, 0.5)), 1, 1)
    view = KSweepWidget()
    qtbot.addWidget(view)
    view.resize(1340, 640)  # the race window's tab at its default 1360 × 860
    view.show()
    view.show_result(result)
    qtbot.waitExposed(view)
    assert view.table.item(0, 1).text() == "8.5 (1 busy run out)"
    assert "left out of the median" in view.table.item(0, 1).toolTip()
    assert view.table.item(2, 1).text() == "6.1 (busy)"
    assert _cells_fit(view.table) == []
    assert not view.table.horizontalScrollBar().isVisible()


def _estimate(hit_rate: float) -> LookupEstimate:
    n = 100
    return LookupEstimate((NgramHits(2, positions=n, lookups=n, hits=int(hit_rate * n)),), 3, n)


def test_a_hit_rate_alone_never_says_lookup_is_worth_it(qtbot) -> None:  # type: ignore[no-untyped-def]
    est = _estimate(0.46)
    alone = verdict(est)
    assert "worth it" not in alone.lower() and "likely" not in alone.lower()
    assert alone.startswith("Lookup would have predicted 46% of the reply tokens (n = 2)")
    assert "depends on this machine's cost of checking drafts: race it to see" in alone
    assert verdict_tone([]) == ""
    # measured here at well under plain speed
    slow = [LookupMeasurement("this window's race", 0.3, verified=60, speedup=0.35)]
    assert verdict(est, slow).startswith("Not on this machine so far: prompt lookup decoded "
                                         "at 0.35×")
    assert verdict_tone(slow) == "costs"
    even = [LookupMeasurement("this window's race", 0.3, verified=60, speedup=1.01)]
    assert verdict(est, even).startswith("No gain measured here so far")
    assert verdict_tone(even) == ""
    assert verdict_tone([LookupMeasurement("the k sweep", 0.9, speedup=1.3)]) == "pays"
    # a race whose pairs did not agree (0.94–1.27×, median 1.11×) is no "worth it"
    split = [LookupMeasurement("this window's race", 0.98, verified=55, speedup=1.11,
                               settled=False)]
    assert verdict(est, split).startswith("No verdict yet: in this window's race prompt "
                                          "lookup decoded at a median 1.11×")
    assert verdict_tone(split) == ""

    view = LookupEstimateWidget()
    qtbot.addWidget(view)
    view.show_estimate(est)
    assert view.verdict_label.property("tone") == ""
    assert "worth it" not in view.verdict_label.text().lower()
    view.set_measured_alpha("this window's race", 0.3, verified=60, speedup=0.35)
    assert view.verdict_label.text().startswith("Not on this machine")
    assert view.verdict_label.property("tone") == "costs"
