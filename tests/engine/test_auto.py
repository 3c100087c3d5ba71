"""The auto drafter choice: the decision from made-up figures (no timing), and the
figures gathered from a real (synthetic) session without asserting on their values."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.auto import (
    AUTO_KS,
    FLOOR,
    MARGIN,
    MIN_MEASURED_TOKENS,
    AutoChoice,
    DrafterEstimate,
    auto_ks,
    ReplyObservation,
    choose_drafter,
    estimate_drafters,
    measured_speedups,
    resolve_auto,
)
from app.engine.measure.draft_replay import ReplayCounts, replay_reply
from app.engine.session import Session, SessionConfig
from app.engine.suffix import SuffixDrafter, SuffixIndex
from app.options import SamplingParams, SpecMode, SpeculationConfig

LOOKUP, SUFFIX, DRAFT, OFF = (SpecMode.PROMPT_LOOKUP, SpecMode.SUFFIX, SpecMode.DRAFT_MODEL,
                              SpecMode.OFF)
ENOUGH = MIN_MEASURED_TOKENS


def test_the_best_estimate_wins_with_its_k() -> None:
    c = choose_drafter([
        DrafterEstimate(LOOKUP, {2: 1.10, 4: 1.25, 8: 1.20}),
        DrafterEstimate(SUFFIX, {2: 1.15, 4: 1.40, 8: 1.55}),
    ])
    assert (c.mode, c.draft_max, c.reason) == (SUFFIX, 8, "estimate")
    assert c.score == pytest.approx(1.55)
    assert {(m, k) for m, k, _ in c.scores} == {(LOOKUP, 4), (SUFFIX, 8)}


def test_nothing_worth_it_decodes_plainly() -> None:
    c = choose_drafter([DrafterEstimate(LOOKUP, {4: 1.01}), DrafterEstimate(SUFFIX, {4: 0.9})])
    assert (c.mode, c.draft_max, c.reason) == (OFF, 0, "no-gain")
    assert choose_drafter([]).reason == "no-drafter"
    assert choose_drafter([DrafterEstimate(LOOKUP, {})]).mode is OFF  # nothing replayed yet
    # the margin is the edge: just above it, the drafter is used
    assert choose_drafter([DrafterEstimate(LOOKUP, {4: MARGIN})]).mode is LOOKUP


def test_with_nothing_to_score_the_model_free_prior_runs_at_the_largest_k() -> None:
    nothing = [DrafterEstimate(LOOKUP, {}), DrafterEstimate(SUFFIX, {})]
    c = choose_drafter(nothing, prior_k=4)
    assert (c.mode, c.draft_max, c.reason) == (SUFFIX, 4, "prior")
    assert choose_drafter(nothing).draft_max == max(AUTO_KS) == 16
    # an untried draft model's α = 1 hope is no evidence: the prior still runs first
    hopeful = DrafterEstimate(DRAFT, {4: 2.0}, optimistic=True)
    assert choose_drafter([*nothing, hopeful]).reason == "prior"
    # any figure at all is evidence: the usual decision applies
    c = choose_drafter([DrafterEstimate(LOOKUP, {4: 1.01}), DrafterEstimate(SUFFIX, {})])
    assert (c.mode, c.reason) == (OFF, "no-gain")
    c = choose_drafter([DrafterEstimate(LOOKUP, {}),
                        DrafterEstimate(SUFFIX, {}, measured_speedup=0.9,
                                        measured_tokens=ENOUGH)])
    assert c.mode is OFF and c.dropped == (SUFFIX,)


def test_auto_lengths_respect_draft_min_and_draft_max() -> None:
    """A k below draft_min would be refused by the configuration (a prior of 4 for
    draft_max 7, draft_min 5 would fail validation on every first reply)."""
    spec = SpeculationConfig(mode="auto", draft_max=7, draft_min=5)
    assert auto_ks(spec) == (7,)
    assert spec.with_changes(mode=SUFFIX, draft_max=max(auto_ks(spec))).draft_max == 7
    assert auto_ks(SpeculationConfig(mode="auto", draft_max=8)) == (2, 4, 8)
    assert auto_ks(SpeculationConfig(mode="auto", draft_max=8, draft_min=3)) == (4, 8)


def test_a_drafter_measured_below_the_floor_is_dropped_for_the_conversation() -> None:
    estimates = [
        DrafterEstimate(SUFFIX, {4: 1.6}, measured_speedup=FLOOR - 0.01, measured_tokens=ENOUGH),
        DrafterEstimate(LOOKUP, {4: 1.2}),
    ]
    c = choose_drafter(estimates)
    assert c.mode is LOOKUP and c.dropped == (SUFFIX,)
    # too few tokens: the measurement does not count yet, the estimate does
    few = [DrafterEstimate(SUFFIX, {4: 1.6}, measured_speedup=0.5, measured_tokens=ENOUGH - 1)]
    assert choose_drafter(few).mode is SUFFIX


def test_a_measured_speedup_replaces_the_estimate() -> None:
    c = choose_drafter([
        DrafterEstimate(SUFFIX, {4: 1.1}, measured_speedup=1.8, measured_tokens=200),
        DrafterEstimate(LOOKUP, {4: 1.5}),
    ])
    assert (c.mode, c.draft_max, c.reason) == (SUFFIX, 4, "measured")
    # measured at 1.00×: no better than plain (below the margin), so off
    c = choose_drafter([DrafterEstimate(SUFFIX, {4: 1.4}, measured_speedup=1.0,
                                        measured_tokens=200)])
    assert c.mode is OFF and c.reason == "no-gain"


def test_an_untried_draft_model_is_tried_only_when_nothing_else_pays() -> None:
    hopeful = DrafterEstimate(DRAFT, {4: 2.0}, optimistic=True)
    assert choose_drafter([DrafterEstimate(LOOKUP, {4: 1.2}), hopeful]).mode is LOOKUP
    c = choose_drafter([DrafterEstimate(LOOKUP, {4: 1.0}), hopeful])
    assert (c.mode, c.draft_max) == (DRAFT, 4)
    # a draft as costly as the target: even α = 1 cannot beat plain, never tried
    costly = DrafterEstimate(DRAFT, {2: 3 / 3.1, 4: 5 / 5.2}, optimistic=True)
    assert choose_drafter([costly]).mode is OFF
    # once it has run here, its measurement decides
    tried = DrafterEstimate(DRAFT, {4: 2.0}, optimistic=True, measured_speedup=0.84,
                            measured_tokens=300)
    c = choose_drafter([tried, DrafterEstimate(LOOKUP, {4: 1.0})])
    assert c.mode is OFF and c.dropped == (DRAFT,)


def test_ties_prefer_the_earlier_candidate() -> None:
    c = choose_drafter([DrafterEstimate(LOOKUP, {4: 1.3}), DrafterEstimate(SUFFIX, {4: 1.3})])
    assert c.mode is SUFFIX


def test_measured_speedups_pool_tokens_and_time_per_drafter() -> None:
    obs = [
        ReplyObservation(SUFFIX, emitted=100, decode_time=1.0),
        ReplyObservation(SUFFIX, emitted=50, decode_time=1.0),
        ReplyObservation(OFF, emitted=100, decode_time=2.0),
        ReplyObservation(LOOKUP, emitted=0, decode_time=0.0),
    ]
    m = measured_speedups(obs, plain_tps=50.0)
    assert m == {SUFFIX: (pytest.approx(1.5), 150)}
    assert measured_speedups(obs, plain_tps=None) == {}


def test_a_reply_is_measured_against_plain_steps_timed_under_its_own_conditions() -> None:
    """A plain reply decoded at 9.5 tok/s with a 3,000-token prompt on one thread is no
    baseline for a suffix reply at 38.7 tok/s on two, whose own plain steps give 0.81×:
    each reply's own plain step time is used; the session's plain rate only where a reply
    has none."""
    own = ReplyObservation(SUFFIX, emitted=100, decode_time=100 / 38.7,
                           plain_step_time=1 / 48.0)
    m = measured_speedups([own], plain_tps=9.47)
    assert m[SUFFIX][0] == pytest.approx(38.7 / 48.0)
    # pooled as times: (100 / 48 + 50 / 20) s of plain decoding over the replies' 4 s
    other = ReplyObservation(SUFFIX, emitted=50, decode_time=4 - 100 / 38.7)
    m = measured_speedups([own, other], plain_tps=20.0)
    assert m[SUFFIX] == (pytest.approx((100 / 48 + 50 / 20) / 4), 150)
    assert ReplyObservation.from_stats({"mode": "suffix", "emitted": 3, "decode_time": 0.1,
                                        "plain_step_time": 0.02}).plain_step_time == 0.02


def test_observations_read_stored_statistics() -> None:
    o = ReplyObservation.from_stats({"mode": "suffix", "emitted": 12, "decode_time": 0.5,
                                     "verified": 8, "accepted": 6, "auto": {"mode": "suffix"}})
    assert o == ReplyObservation(SUFFIX, 12, 0.5, 8, 6)
    assert ReplyObservation.from_stats({"mode": "no such drafter"}) is None
    assert AutoChoice(SUFFIX, 4, "estimate", 1.2, ((SUFFIX, 4, 1.2),)).to_dict() == {
        "mode": "suffix", "draft_max": 4, "reason": "estimate", "score": 1.2,
        "scores": [["suffix", 4, 1.2]], "dropped": [], "evidence": [],
        "replayed_from": "conversation"}


@pytest.fixture(scope="module")
def session(tiny_target: Path) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=tiny_target, n_ctx=256, n_threads=2))
    yield s
    s.close()


def test_estimates_from_a_session_replay_both_lookups(session: Session) -> None:
    reply = [300, 301, 302, 303, 304, 305] * 4
    turns = [([1, 5, 6, 7], reply), ([1, 5, 6, 7] + reply + [8, 9], reply)]
    spec = SpeculationConfig(mode=SpecMode.AUTO, draft_max=8)
    est = {e.mode: e for e in estimate_drafters(session, turns, [], spec)}
    assert set(est) == {LOOKUP, SUFFIX}  # no draft model loaded
    for e in est.values():
        assert set(e.predicted) == {2, 4, 8} and all(v > 0 for v in e.predicted.values())
        assert e.measured_speedup is None
    for n in (1, 3, 5, 9):
        assert session.pass_time(n) is not None  # timed once for the estimates
    chosen, choice = resolve_auto(session, turns, [], spec)
    assert chosen.mode is choice.mode and chosen.mode is not SpecMode.AUTO
    assert chosen.mode is OFF or chosen.draft_max == choice.draft_max
    # the chosen configuration runs
    events = list(session.generate([1, 5, 6, 7], SamplingParams(temperature=0.0, max_tokens=8), chosen))
    assert events[-1].stats.mode is chosen.mode


def test_suffix_lookup_is_priced_with_the_drafts_a_replay_verifies_whole(session: Session) -> None:
    """Auto's replay verifies every draft token, so it prices suffix lookup with a fixed
    k's drafts (capped by the match length), not the longer ones a session's policy cuts:
    verified whole, those would make a drafter that pays look like one that does not."""
    reply = [300, 301, 302, 303, 304, 305, 306, 307, 308, 309]
    turns = [([1, 5, 6], reply), ([1, 7, 300], [301, 302, 303, 400, 401, 402, 403, 404])]
    spec = SpeculationConfig(mode=SpecMode.AUTO, draft_max=8)
    est = {e.mode: e for e in estimate_drafters(session, turns, [], spec)}

    def replayed(past_cap: bool) -> ReplayCounts:
        index, total = SuffixIndex(), ReplayCounts()
        for prompt, r in turns:
            total = total + replay_reply(SuffixDrafter(index, past_cap=past_cap), prompt, r, 8)
            index.add_reply(r)
        return total

    assert replayed(True).proposed > replayed(False).proposed  # the two drafters differ here
    assert est[SUFFIX].replayed[8] == replayed(False)
