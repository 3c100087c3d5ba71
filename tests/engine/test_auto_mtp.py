"""Auto prices the MTP head a model carries: from the published prior α and the load
check's c before it has drafted here, from the α and c measured over its replies
afterwards; it may choose it, even for a conversation's first reply, and its explanation
names it. The decision from made-up figures; the figures from real synthetic sessions
(checked against the formula on the session's own pass times, never against timings)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.catalog.loadcheck import cached_verdict
from app.engine.auto import (
    MARGIN,
    AutoChoice,
    DrafterEstimate,
    ReplyObservation,
    choose_drafter,
    estimate_drafters,
)
from app.engine.drafter_kinds.mtp import MTP_K, MTP_PRIOR_ACCEPTANCE
from app.engine.session import Session, SessionConfig
from app.engine.stats import expected_tokens_per_round
from app.options import SpecMode, SpeculationConfig, auto_candidates
from app.ui.explain import auto_explanation

MTP = SpecMode("mtp")
LOOKUP, SUFFIX, OFF = SpecMode.PROMPT_LOOKUP, SpecMode.SUFFIX, SpecMode.OFF
NOTHING = [DrafterEstimate(LOOKUP, {}), DrafterEstimate(SUFFIX, {})]


def _prior(speedup: float) -> DrafterEstimate:
    return DrafterEstimate(MTP, {2: speedup - 0.1, 4: speedup}, prior_acceptance=0.85,
                           cost_ratio=0.3)


def test_mtp_is_an_auto_candidate() -> None:
    assert MTP in auto_candidates()


def test_a_first_reply_runs_the_head_when_its_prior_predicts_a_gain() -> None:
    c = choose_drafter([*NOTHING, _prior(1.6)])
    assert (c.mode, c.draft_max, c.reason) == (MTP, 4, "estimate")
    lead = c.evidence[0]
    assert (lead.mode, lead.source, lead.assumed_acceptance, lead.cost_ratio) == (
        MTP, "prior", 0.85, 0.3)
    words = auto_explanation(c)
    assert words.startswith("MTP, k ≤ 4: not tried here yet; 1.60× plain "
                            "expected from the published 85% acceptance")
    assert "c = 0.30 measured by the load check" in words
    # stored with the reply and read back with its figures
    assert AutoChoice.from_dict(c.to_dict()) == c
    # a prior under the margin is no reason to leave the free prior drafter
    c = choose_drafter([*NOTHING, _prior(MARGIN - 0.01)], prior_k=16)
    assert (c.mode, c.draft_max, c.reason) == (SUFFIX, 16, "prior")


def test_with_replayed_figures_the_head_competes_on_its_estimate() -> None:
    replayed = DrafterEstimate(SUFFIX, {8: 1.3, 16: 1.4})
    assert choose_drafter([replayed, _prior(1.6)]).mode is MTP
    assert choose_drafter([replayed, _prior(1.2)]).mode is SUFFIX
    priced = DrafterEstimate(MTP, {4: 1.5}, measured_replies=2, measured_verified=40,
                             measured_accepted=30, cost_ratio=0.4)
    c = choose_drafter([replayed, priced])
    assert c.mode is MTP and c.evidence[0].source == "priced"
    assert auto_explanation(c) == ("MTP, k ≤ 4: 75% accepted in the last "
                                   "2 replies, c = 0.40 (estimated 1.50× plain)")


@pytest.fixture(scope="module")
def mtp_session(tiny_mtp: Path) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=tiny_mtp, n_ctx=256, n_threads=1))
    yield s
    s.close()


def _formula(session: Session, alpha: float, c: float, k: int) -> float:
    t1, tk = session.pass_time(1), session.pass_time(k + 1)
    assert t1 and tk
    return expected_tokens_per_round(alpha, k) * t1 / (tk + k * c * t1)


def test_the_session_prices_the_head_from_the_prior_then_from_its_replies(
        mtp_session: Session, tiny_mtp: Path) -> None:
    spec = SpeculationConfig(mode=SpecMode.AUTO, draft_max=8)
    verdict = cached_verdict(tiny_mtp)
    assert verdict is not None and verdict.mtp_cost_ratio is not None
    est = {e.mode: e for e in estimate_drafters(mtp_session, [], [], spec)}
    head = est[MTP]
    assert (head.prior_acceptance, head.cost_ratio) == (MTP_PRIOR_ACCEPTANCE,
                                                        verdict.mtp_cost_ratio)
    # the published α is for the head's first draft tokens: priced at its default k only
    assert set(head.predicted) == {MTP_K}
    for k, v in head.predicted.items():
        assert v == pytest.approx(_formula(mtp_session, MTP_PRIOR_ACCEPTANCE,
                                           verdict.mtp_cost_ratio, k))
    # its replies here: α = 30/40, c the mean of theirs
    seen = [ReplyObservation(MTP, 20, 0.5, 24, 18, 0.4),
            ReplyObservation(MTP, 10, 0.3, 16, 12, 0.6),
            ReplyObservation(LOOKUP, 50, 0.2, 10, 5, 0.0)]
    head = {e.mode: e for e in estimate_drafters(mtp_session, [], seen, spec)}[MTP]
    assert (head.prior_acceptance, head.cost_ratio) == (None, pytest.approx(0.5))
    assert (head.measured_replies, head.measured_verified, head.measured_accepted) == (2, 40, 30)
    assert set(head.predicted) == {2, 4, 8}  # one head chained on itself: no limit
    for k, v in head.predicted.items():
        assert v == pytest.approx(_formula(mtp_session, 0.75, 0.5, k))
    assert head.evidence(4).source == "priced"


def test_a_target_without_heads_gets_no_mtp_estimate(tiny_target: Path) -> None:
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=128, n_threads=1)) as s:
        spec = SpeculationConfig(mode=SpecMode.AUTO, draft_max=8)
        assert MTP not in {e.mode for e in estimate_drafters(s, [], [], spec)}


def test_observations_read_the_replys_cost_ratio() -> None:
    obs = ReplyObservation.from_stats({"mode": "mtp", "emitted": 5, "decode_time": 0.1,
                                       "verified": 4, "accepted": 3, "draft_cost_ratio": 0.4})
    assert obs is not None and obs.draft_cost_ratio == 0.4
    old = ReplyObservation.from_stats({"mode": "mtp", "emitted": 5, "decode_time": 0.1})
    assert old is not None and old.draft_cost_ratio is None
