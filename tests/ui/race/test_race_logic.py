"""The race window's Qt-free parts: replay counters, draft tinting spans, the end-of-race
table and Markdown, k parsing, the lookup verdict, and reading past conversations."""

from __future__ import annotations

import dataclasses

import pytest

from app.chat.history_source import (
    PastConversation,
    PastMessage,
    conversations_from_history,
    measured_lookup_alpha,
)
from app.chat.recording import (
    LaneRecorder,
    LaneRecording,
    RaceRecording,
    TextSegment,
    counters_at,
    draft_spans,
    visible_chars,
)
from app.engine.divergence import Divergence
from app.engine.events import StatsUpdate, TextDelta
from app.engine.measure.lookup import LookupEstimate, NgramHits
from app.engine.measure.race import RaceLane, RaceResult
from app.engine.stats import SpecStats
from app.options import parse_draft_lengths as parse_ks
from app.store.history import HistoryStore
from app.ui.race.lookup_view import verdict
from app.ui.race.report import (
    difference_text,
    identical_text,
    race_markdown,
    race_table_rows,
    speedup_headline,
)
from tests.engine.util import record


def _with_stats(lane: RaceLane, stats: SpecStats) -> RaceLane:
    return dataclasses.replace(lane, reply=dataclasses.replace(lane.reply, stats=stats))


def _lane(label: str, ids: tuple[int, ...], times: tuple[float, ...], text: str,
          stats: SpecStats) -> RaceLane:
    offsets = tuple(min(len(text), (i + 1) * 2) for i in range(len(ids)))
    return RaceLane(label, record(stats, text, ids, times), offsets)


def _race(on_ids: tuple[int, ...] = (1, 2, 3, 4), on_text: str = "abcdefgh") -> RaceResult:
    off_stats = SpecStats(mode="off", emitted=4, prefill_time=0.5, decode_time=2.0,
                          total_time=2.5, ttft=0.7)
    on_stats = SpecStats(mode="prompt-lookup", draft_max=2, emitted=4, rounds=2, verified=4,
                         proposed=4, draft_rounds=2,
                         accepted=2, prefill_time=0.5, decode_time=0.5, total_time=1.0,
                         ttft=0.6, target_step_time=0.1, draft_time=0.001)
    off = _lane("off", (1, 2, 3, 4), (0.7, 1.2, 1.9, 2.5), "abcdefgh", off_stats)
    on = _lane("on", on_ids, (0.6, 0.6, 1.0, 1.0), on_text, on_stats)
    from app.engine.divergence import first_difference

    diff = first_difference(off.token_ids, on.token_ids)
    return RaceResult(off, on, seed=7, temperature=0.0, identical=diff is None,
                      first_difference=diff)


def test_counters_follow_the_token_times_and_end_on_the_final_figures() -> None:
    r = _race()
    rec = LaneRecording(r.off)
    c = counters_at(rec, 0.1)
    assert (c.tokens, c.tps, c.finished) == (0, None, False)
    c = counters_at(rec, 1.5)
    assert c.tokens == 2 and c.elapsed == 1.5
    assert c.tps == pytest.approx(2 / (1.5 - 0.5))  # decode tok/s: prefill excluded
    end = counters_at(rec, 99.0)
    assert end.finished and end.tokens == 4 and end.elapsed == 2.5
    assert end.tps == pytest.approx(r.off.stats.decode_tps)
    assert visible_chars(rec, 1.5) == 4 and visible_chars(rec, 99.0) == 8


def test_recorder_keeps_draft_segments_and_the_alpha_history() -> None:
    r = _race()
    rec = LaneRecorder()
    rec.add(TextDelta("ab", False, 0.6, 1))
    rec.add(TextDelta("cd", True, 0.6, 2))
    rec.add(StatsUpdate(SpecStats(mode="prompt-lookup", verified=2, accepted=1, total_time=0.7)))
    rec.add(TextDelta("efgh", False, 1.0, 4))
    lane = rec.finish(r.on)
    assert [(s.start, s.end, s.from_draft) for s in lane.segments] == [
        (0, 2, False), (2, 4, True), (4, 8, False)]
    assert counters_at(lane, 0.65).alpha is None
    assert counters_at(lane, 0.8).alpha == pytest.approx(0.5)
    assert counters_at(lane, 5.0).alpha == pytest.approx(2 / 4)


def test_draft_spans_split_and_merge_runs() -> None:
    segs = (TextSegment(0, 2, False, 0), TextSegment(2, 4, True, 0),
            TextSegment(4, 6, True, 0), TextSegment(6, 9, False, 0))
    assert draft_spans(segs, 0, 9) == [(0, 2, False), (2, 6, True), (6, 9, False)]
    assert draft_spans(segs, 3, 7) == [(3, 6, True), (6, 7, False)]
    assert draft_spans(segs, 9, 12) == [(9, 12, False)]
    assert draft_spans((), 0, 3) == [(0, 3, False)]


def test_table_rows_have_every_figure_of_a_race() -> None:
    rows = {name: (off, on) for name, off, on in race_table_rows(_race())}
    for name in ("TTFT", "decode tok/s", "end-to-end time", "acceptance rate α",
                 "mean acceptance length τ", "measured speedup (decode)", "end-to-end speedup",
                 "predicted speedup", "identical text"):
        assert name in rows, name
    assert rows["decode tok/s"] == ("2.0", "8.0")
    assert rows["measured speedup (decode)"][1] == "4.00×"
    assert rows["end-to-end speedup"][1] == "2.50×"
    assert rows["identical text"][1] == "yes"
    # α from 4 drafts: the count is shown and the prediction held
    assert rows["acceptance rate α"][1] == "0.50 (2/4 draft tokens)"
    assert rows["predicted speedup"][1] == "— (needs 30 draft tokens)"
    r = _race()
    enough = dataclasses.replace(r, on=_with_stats(
        r.on, dataclasses.replace(r.on.stats, verified=40, accepted=20, proposed=40)))
    rows = {name: (off, on) for name, off, on in race_table_rows(enough)}
    assert rows["acceptance rate α"][1] == "0.50"
    assert rows["predicted speedup"][1].endswith("×")


def _diverged(verdict: str = "near-tie", sampled: bool = False) -> RaceResult:
    r = _race(on_ids=(1, 2, 9, 4), on_text="abcdXYgh")
    d = Divergence(verdict=verdict, reason="within-threshold" if verdict == "near-tie" else "logit-shift",  # type: ignore[arg-type]
                   index=2, off_token=3, on_token=9, off_text=" x", on_text=" y",
                   off_probs=(0.41, 0.39), on_probs=(0.38, 0.43), sampled=sampled,
                   logit_shift=0.2 if verdict == "near-tie" else 4.0)
    return dataclasses.replace(r, divergence=d)


def test_difference_is_said_with_the_four_probabilities_and_the_verdict() -> None:
    r = _diverged()
    assert not r.identical and r.first_difference == 2
    text = difference_text(r)
    assert text is not None
    assert text.startswith("At token 3 plain decoding chose ' x' (41%), speculation chose "
                           "' y' (39% in the plain run; 38% and 43% in the speculative run)")
    assert "a near-tie" in text and "0.20 logits" in text and "suspect" not in text
    assert "near-tie" in identical_text(r) and "token 3" in identical_text(r)
    sampled = difference_text(_diverged(sampled=True)) or ""
    assert "plain decoding drew ' x'" in sampled and "same random number" in sampled
    bad = difference_text(_diverged("suspect")) or ""
    assert "suspect" in bad and "4.00 logits" in bad and "near-tie" not in bad
    assert "suspect" in identical_text(_diverged("suspect"))
    # no fixed paragraph: unmeasured differences say that they were not measured
    unmeasured = difference_text(dataclasses.replace(r, divergence=None)) or ""
    assert "not measured" in unmeasured and "near-tie" not in unmeasured
    assert difference_text(_race()) is None


def test_difference_span_covers_the_first_differing_token_in_both_lanes() -> None:
    r = _diverged()
    # _lane gives each token two characters: token 2 (0-based) is characters 4..6
    assert r.difference_span(r.off) == (4, 6) and r.difference_span(r.on) == (4, 6)
    assert r.on.text[4:6] == "XY" and r.off.text[4:6] == "ef"
    assert _race().difference_span(_race().off) is None


def test_headline_says_nothing_was_drafted_instead_of_a_drafter_speedup() -> None:
    r = _race()
    assert speedup_headline(r).startswith("Speculation decoded 4.00× as fast")
    plain = dataclasses.replace(r, on=_with_stats(r.on, dataclasses.replace(
        r.on.stats, proposed=0, verified=0, accepted=0, draft_rounds=0, rounds=4)))
    words = speedup_headline(plain)
    assert words.startswith("Nothing was drafted") and "4.00×" in words
    # the lanes alone are one pair: no verdict either way (see test_race_verdicts.py)
    assert "One pair only" in words and "as fast" not in words


def test_markdown_has_table_texts_and_safe_fences() -> None:
    r = _race(on_text="x ``` y")
    rec = RaceRecording(r, LaneRecording(r.off), LaneRecording(r.on), "m.gguf",
                        "prompt lookup", "Fix:\n```py\nx=1\n```", 32)
    md = race_markdown(rec)
    assert md.startswith("# Tandem race: m.gguf")
    assert "| decode tok/s | 2.0 | 8.0 |" in md
    assert "| identical text |  | yes |" in md or "identical text" in md
    assert "````text\nFix:\n```py\nx=1\n```\n````" in md
    assert "````text\nx ``` y\n````" in md
    assert "## Speculation off" in md and "abcdefgh" in md


def test_parse_ks() -> None:
    assert parse_ks("1, 2, 3, 4, 5, 6, 8") == (1, 2, 3, 4, 5, 6, 8)
    assert parse_ks("4 2,2") == (2, 4)
    for bad in ("", "a", "0", "65"):
        with pytest.raises(ValueError):
            parse_ks(bad)


def test_verdict_words() -> None:
    def est(rate: float) -> LookupEstimate:
        return LookupEstimate((NgramHits(2, 100, 50, int(rate * 100)),), 3, 100)

    assert verdict(est(0.5)).startswith("Lookup would have predicted 50%")
    assert "race it to see" in verdict(est(0.5)) and "worth it" not in verdict(est(0.5)).lower()
    assert verdict(est(0.2)).startswith("Lookup would have predicted 20%")
    assert verdict(est(0.02)).startswith("Probably not")
    assert "nothing to estimate" in verdict(LookupEstimate((NgramHits(2),), 0, 0))


def test_conversations_from_history_and_measured_alpha() -> None:
    with HistoryStore.open() as store:
        a = store.create_conversation("code edit")
        store.add_user_message(a.id, "rename x")
        reply = store.begin_reply(a.id)
        stats = SpecStats(mode="prompt-lookup", draft_max=4, verified=10, accepted=7).to_dict()
        store.finish_reply(reply.id, "def f(count): return count", "stop", stats)
        b = store.create_conversation("no reply yet")
        store.add_user_message(b.id, "hello")
        convs = conversations_from_history(store)
    assert [c.title for c in convs] == ["code edit"]
    assert [m.role for m in convs[0].messages] == ["user", "assistant"]
    assert convs[0].assistant_replies == 1
    assert measured_lookup_alpha(convs) == (pytest.approx(0.7), 1)
    plain = PastConversation(-1, "t", (PastMessage("assistant", "x", {"mode": "plain"}),))
    assert measured_lookup_alpha([plain]) == (None, 0)
    assert conversations_from_history(None) == []


def test_headline_and_prediction_note() -> None:
    import dataclasses

    from app.ui.race.report import prediction_note, speedup_headline

    r = _race()
    assert speedup_headline(r) == "Speculation decoded 4.00× as fast, and finished 2.50× sooner."
    few_slow = dataclasses.replace(r, on=_with_stats(
        r.on, dataclasses.replace(r.on.stats, decode_time=1.5)))
    assert prediction_note(few_slow, cpu_backend=True) is None  # 4 drafts: no prediction
    r = dataclasses.replace(r, on=_with_stats(
        r.on, dataclasses.replace(r.on.stats, verified=40, accepted=20, proposed=40)))
    assert prediction_note(r, cpu_backend=True) is None  # measured beats predicted
    slow_on = _with_stats(r.on, dataclasses.replace(r.on.stats, decode_time=1.5))
    slow = dataclasses.replace(r, on=slow_on)
    note = prediction_note(slow, cpu_backend=True)
    assert note is not None and "on this CPU backend, checking 3 tokens" in note
    # with the passes of the drafting rounds timed, the note gives what they cost
    timed = dataclasses.replace(slow, on=_with_stats(slow_on, dataclasses.replace(
        slow_on.stats, draft_passes=20, draft_pass_time=1.0, plain_step_time=0.02)))
    assert timed.on.stats.draft_max == 2 and timed.on.stats.proposed == 40
    note = prediction_note(timed, cpu_backend=True)
    assert note is not None and ("on this CPU backend, the target's checks of 3.0 tokens on "
                                 "average took 2.5 one-token steps each, so the measured") in note
    slower = dataclasses.replace(r, on=_with_stats(
        r.on, dataclasses.replace(r.on.stats, decode_time=4.0, total_time=4.5)))
    assert speedup_headline(slower).startswith("Speculation was slower here: 0.50×")


def test_headline_of_several_pairs_gives_a_verdict_only_when_they_agree() -> None:
    import dataclasses

    from app.engine.measure.race import RacePair
    from app.ui.race.report import race_table_rows, speedup_headline

    r = _race()
    agree = dataclasses.replace(r, pairs=(RacePair(50, 70, 0.0, 0.0), RacePair(50, 75, 0.0, 0.0),
                                          RacePair(50, 80, 0.0, 0.0)))
    assert speedup_headline(agree) == ("Speculation decoded 1.50× as fast (median of 3 pairs, "
                                       "1.40–1.60×).")
    rows = dict((name, on) for name, _, on in race_table_rows(agree))
    assert rows["measured speedup (decode)"] == "1.50× (1.40–1.60 over 3 pairs)"
    assert rows["off/on pairs timed"] == "3"
    busy = dataclasses.replace(r, pairs=(RacePair(50, 18, 0.0, 1.2), RacePair(50, 73, 0.0, 0.0),
                                         RacePair(50, 48, 0.0, 0.0)))
    assert speedup_headline(busy) == (
        "No verdict: the pairs ran 0.96–1.46× (median 1.21×); a verdict needs every pair "
        "more than 2% to the same side of 1×. The machine was busy: 1 run of 6 was disturbed "
        "by other work and its pair left out.")
    assert dict((n, on) for n, _, on in race_table_rows(busy))["off/on pairs timed"] == (
        "3, 2 kept; 1 run of 6 disturbed by other work")
    every = dataclasses.replace(r, pairs=(RacePair(50, 70, 0.9, 0.0),))
    assert speedup_headline(every).startswith("No speedup to report: other work disturbed "
                                              "every pair.")
    # the replayed (first) pair was the disturbed one: its times are marked as such
    first = dict((n, on) for n, _, on in race_table_rows(busy))
    assert busy.first_pair_disturbed
    assert first["end-to-end speedup, replayed pair"].endswith("(disturbed)")
    assert first["replayed pair"].startswith("disturbed by other work")
    assert not agree.first_pair_disturbed and "replayed pair" not in rows


def test_a_load_through_the_whole_race_is_said_though_no_pair_is_left_out() -> None:
    """A busy process beside the whole race slows both sides alike (no run differs from
    the race's typical load, so none is left out), and the headline says it was there."""
    import dataclasses
    import os

    from app.engine.measure.race import RacePair
    from app.ui.race.report import race_table_rows, speedup_headline

    steady = dataclasses.replace(_race(), pairs=tuple(RacePair(40, 44 + i, 1.0, 1.05)
                                                      for i in range(3)))
    assert steady.disturbed_runs == 0 and len(steady.kept_speedups) == 3
    assert speedup_headline(steady).endswith(
        f"Other programs kept 1.0 of this machine's {os.cpu_count()} cores busy through the "
        "race; both sides ran under that load.")
    assert dict((n, on) for n, _, on in race_table_rows(steady))["off/on pairs timed"] == "3"
    quiet = dataclasses.replace(steady, pairs=tuple(RacePair(40, 60, 0.05, 0.0) for _ in range(3)))
    assert "Other programs" not in speedup_headline(quiet)


def test_the_finished_first_badge_never_contradicts_the_verdict() -> None:
    """The lanes replay one pair; its winner is badged only when the race's verdict over
    every pair is that side and it finished more than 2 % sooner."""
    import dataclasses

    from app.engine.measure.race import RacePair
    from app.ui.race.report import lane_winner, replay_status

    r = _race()  # the on lane finished 2.5× sooner, no pairs: the lanes are the race
    assert lane_winner(r) == ("on", "finished first: 1.00 s, 2.50× sooner")
    unclear = dataclasses.replace(r, pairs=(RacePair(50, 48, 0.0, 0.0), RacePair(50, 73, 0.0, 0.0)))
    assert unclear.verdict == "unclear" and lane_winner(unclear) is None
    faster = dataclasses.replace(r, pairs=(RacePair(50, 70, 0.0, 0.0), RacePair(50, 73, 0.0, 0.0),
                                           RacePair(50, 71, 0.0, 0.0)))
    assert lane_winner(faster) is not None and lane_winner(faster)[0] == "on"  # type: ignore[index]
    two = dataclasses.replace(faster, pairs=faster.pairs[:2])  # two agreeing pairs: no verdict
    assert two.verdict == "unclear" and lane_winner(two) is None
    assert speedup_headline(two) == ("Only 2 undisturbed pairs, 1.40–1.46× (median 1.43×): a "
                                     "verdict needs 3 that agree, run the race again.")
    slower = dataclasses.replace(r, pairs=(RacePair(50, 40, 0.0, 0.0), RacePair(50, 41, 0.0, 0.0),
                                           RacePair(50, 42, 0.0, 0.0)))
    assert lane_winner(slower) is None  # the replayed pair's on lane won, the race did not
    off_first = dataclasses.replace(slower, off=r.on, on=r.off)  # lanes swapped: off faster
    assert lane_winner(off_first) == ("off", "finished first: 1.00 s, 2.50× sooner")
    left_out = dataclasses.replace(r, pairs=(RacePair(50, 70, 0.0, 1.0), RacePair(50, 73, 0.0, 0.0),
                                             RacePair(50, 75, 0.0, 0.0), RacePair(50, 74, 0.0, 0.0)))
    assert left_out.verdict == "faster" and lane_winner(left_out) is None  # its pair was left out
    every = dataclasses.replace(r, pairs=(RacePair(50, 70, 1.0, 0.0), RacePair(50, 73, 0.0, 1.0)))
    assert not every.kept_speedups and "median" not in replay_status(every)
    tie = dataclasses.replace(r, off=_with_stats(r.off, dataclasses.replace(
        r.off.stats, total_time=r.on.duration * 1.01)))
    assert lane_winner(tie) is None  # 1.01× sooner is no finish to badge
    assert lane_winner(dataclasses.replace(r, cancelled=True)) is None
    # the texts differ in length: the on lane stopped after 2 tokens, sooner but with
    # half the work, so the badge compares decode rates (8 against 2 tok/s), not times
    short = dataclasses.replace(r, on=_with_stats(r.on, dataclasses.replace(
        r.on.stats, emitted=2, decode_time=0.25, total_time=0.75)))
    assert lane_winner(short) == ("on", "decoded 4.00× as fast (2 tokens against 4)")
    assert replay_status(faster).startswith("Finished. The lanes replayed the first of 3")
    assert replay_status(r) == "Finished."


def test_recommendation_warns_when_no_k_beats_off() -> None:
    from app.engine.measure.sweep import KSweepPoint, KSweepResult
    from app.ui.race.sweep_view import KSweepWidget

    def point(k: int, tps: float) -> KSweepPoint:
        return KSweepPoint(k, tps, 0.9, 2.0, 0.01, 2.0, tps / 50.0, True)

    slow = KSweepResult(50.0, (point(1, 45.0), point(2, 40.0)), 0.9, 0.01,
                        ((1, 1.9), (2, 2.7)), 1, 2)
    text = KSweepWidget.recommendation_text(slow)
    assert text.startswith("Fastest measured: k = 1, 45.0 tok/s (0.90× speculation off).")
    assert "No k beat speculation off" in text
    fast = KSweepResult(50.0, (point(1, 60.0), point(2, 80.0)), 0.9, 0.01,
                        ((1, 1.9), (2, 2.7)), 2, 2)
    assert "No k beat" not in KSweepWidget.recommendation_text(fast)
