"""Auto's explanation and the context note in words (app/ui/explain.py), from the figures
the engine records: a choice scored from replays or from its own replies, a choice of no
speculation because nothing matched, the prior, and a stored choice read back."""

from __future__ import annotations

import dataclasses

from app.engine.auto import (
    AutoChoice,
    DrafterEstimate,
    choose_drafter,
)
from app.engine.context_fit import ContextFit
from app.engine.measure.draft_replay import ReplayCounts
from app.options import ContextOverflow, SpecMode
from app.ui.explain import (
    auto_explanation,
    context_fit_words,
    stored_auto_explanation,
    stored_context_words,
)

LOOKUP, SUFFIX = SpecMode.PROMPT_LOOKUP, SpecMode.SUFFIX


def _nothing_matched(mode: SpecMode) -> DrafterEstimate:
    # replayed: every pass a plain one (no draft round), so 1.0× at each k
    counts = ReplayCounts(rounds=40, emitted=40, pass_sizes=(1,) * 40)
    return DrafterEstimate(mode, {4: 1.0, 16: 1.0}, replayed={4: counts, 16: counts},
                           replayed_replies=1)


def test_no_match_anywhere_reads_as_no_match_in_this_conversation() -> None:
    choice = choose_drafter([_nothing_matched(LOOKUP), _nothing_matched(SUFFIX)])
    assert (choice.mode, choice.reason) == (SpecMode.OFF, "no-gain")
    assert [e.draft_rounds for e in choice.evidence] == [0, 0]
    assert auto_explanation(choice) == ("no speculation: suffix lookup and prompt lookup "
                                        "found no match in this conversation yet")


def test_a_measured_drafter_reads_as_its_acceptance_over_its_replies() -> None:
    suffix = DrafterEstimate(SUFFIX, {16: 1.5}, measured_speedup=1.85, measured_tokens=300,
                             measured_replies=3, measured_verified=200, measured_accepted=184)
    choice = choose_drafter([_nothing_matched(LOOKUP), suffix])
    assert (choice.mode, choice.reason) == (SUFFIX, "measured")
    assert choice.evidence[0].mode is SUFFIX  # the winner's evidence first
    assert auto_explanation(choice) == ("suffix lookup, k ≤ 16: 92% accepted in the last "
                                        "3 replies (measured 1.85× plain)")


def test_an_estimate_reads_as_the_replayed_acceptance() -> None:
    counts = ReplayCounts(rounds=10, draft_rounds=8, proposed=40, verified=30, accepted=24,
                          emitted=34, pass_sizes=(5,) * 8 + (1, 1))
    lookup = DrafterEstimate(LOOKUP, {8: 1.6}, replayed={8: counts}, replayed_replies=2)
    choice = choose_drafter([lookup])
    words = auto_explanation(choice)
    assert words == ("prompt lookup, k ≤ 8: 80% of its drafts would have been accepted over "
                     "2 replies in this conversation (estimated 1.60× plain)")
    again = AutoChoice.from_dict(choice.to_dict())
    assert again == choice
    assert stored_auto_explanation({"auto": choice.to_dict()}) == words
    # an estimate from fewer drafts than a rate is built on says how few
    few = ReplayCounts(rounds=10, draft_rounds=3, proposed=14, verified=14, accepted=14,
                       emitted=24, pass_sizes=(5,) * 3 + (1,) * 7)
    lookup = DrafterEstimate(LOOKUP, {8: 2.21}, replayed={8: few}, replayed_replies=1)
    assert auto_explanation(choose_drafter([lookup])) == (
        "prompt lookup, k ≤ 8: 14 of its 14 drafts would have been accepted over 1 reply "
        "in this conversation (estimated 2.21× plain, from few drafts)")


def test_the_prior_a_dropped_drafter_and_old_records() -> None:
    prior = choose_drafter([DrafterEstimate(LOOKUP), DrafterEstimate(SUFFIX)])
    assert auto_explanation(prior).startswith("suffix lookup, k ≤ 16: nothing to learn from")
    slow = DrafterEstimate(SUFFIX, {}, measured_speedup=0.8, measured_tokens=100,
                           measured_replies=2)
    choice = choose_drafter([_nothing_matched(LOOKUP), slow])
    assert choice.dropped == (SUFFIX,)
    assert auto_explanation(choice) == (
        "no speculation: prompt lookup found no match in this conversation yet; suffix "
        "lookup left out: measured 0.80× plain here")
    # a choice stored before the evidence was recorded still reads back and is worded
    old = {"mode": "off", "draft_max": 0, "reason": "no-gain", "score": 1.01,
           "scores": [["prompt-lookup", 4, 1.01]], "dropped": []}
    assert stored_auto_explanation({"auto": old}) == "no speculation: no drafter could be priced here"
    assert stored_auto_explanation({"auto": {"mode": "sideways"}}) is None
    assert stored_auto_explanation(None) is None


def test_the_context_note_says_what_was_dropped_and_kept() -> None:
    fit = ContextFit(ContextOverflow.TRUNCATE_MIDDLE, 4096, 3, 1240, 3000, 1024, True, True)
    assert context_fit_words(fit) == (
        "Dropped 3 earlier messages (1,240 tokens) to fit the 4,096-token window "
        "(truncate middle: the system prompt and the first exchange were kept)")
    # a conversation without a system prompt: none is said to be kept
    assert context_fit_words(dataclasses.replace(fit, kept_system=False)).endswith(
        "(truncate middle: the first exchange was kept)")
    rolling = ContextFit(ContextOverflow.ROLLING_WINDOW, 4096, 1, 40, 3000, 1024)
    assert context_fit_words(rolling).endswith("window (rolling window)")
    assert stored_context_words({"context": fit.to_dict()}) == context_fit_words(fit)
    assert stored_context_words({}) is None
