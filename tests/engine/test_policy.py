"""The cost-aware draft length explores and picks only lengths that draft_min allows."""

from __future__ import annotations

from pathlib import Path

from app.engine.policy import DraftLengthPolicy, PassTimes
from app.engine.sampling import SamplingParams
from app.engine.session import Session, SessionConfig, SpeculationConfig
from tests.engine.util import run
from tests.synthetic import BOS


def test_exploration_and_choice_respect_draft_min() -> None:
    times = PassTimes()
    times.observe(1, 0.010)
    policy = DraftLengthPolicy(times, prior_alpha=0.9)
    explored = []
    for _ in range(20):
        d = policy.choose(4, draft_min=2)
        explored.append(d)
        times.observe(d + 1, 0.010 + 0.001 * d)  # what the round would have timed
    assert 1 not in explored and {2, 3, 4} <= set(explored)
    assert all(times.count(n) >= policy.min_observations for n in (3, 4, 5))
    assert times.count(2) == 0  # a 1-token draft would be discarded: never timed, never chosen
    assert policy.choose(4, draft_min=2) in (0, 2, 3, 4)
    assert policy.choose(1, draft_min=2) == 0  # no length allowed


def _timed(policy: DraftLengthPolicy, times: PassTimes, k: int) -> None:
    """Time every size up to k + 1 as the policy asks (its exploration), 10 ms + 2 ms/token."""
    for _ in range(4 * k):
        d = policy.choose(k)
        times.observe(d + 1, 0.010 + 0.002 * d)


def test_a_size_the_policy_does_not_pick_is_timed_again_every_refresh_decisions() -> None:
    times = PassTimes()
    times.observe(1, 0.010)
    policy = DraftLengthPolicy(times, prior_alpha=0.0)  # drafting never pays: d = 0
    _timed(policy, times, 4)
    picks = []
    for _ in range(4 * policy.refresh_every):
        picks.append(policy.choose(4))
        times.observe(picks[-1] + 1, 0.010 + 0.002 * picks[-1])
    forced = [i for i, d in enumerate(picks) if d > 0]
    # one re-timing per refresh_every decisions, each of the size seen longest ago: the
    # four draft lengths in turn
    assert len(forced) == 4
    assert all(b - a == policy.refresh_every for a, b in zip(forced, forced[1:]))
    assert [picks[i] for i in forced] == [1, 2, 3, 4]


def test_sizes_timed_while_the_machine_was_busy_are_timed_again_when_it_is_not() -> None:
    """Passes timed during a burst of other work keep the estimates of the sizes the
    policy then stops verifying high: with nothing to bring them down, speculation
    stayed off long after the burst (retime_above)."""

    def rounds(retime_above: float) -> list[int]:
        times = PassTimes()
        times.observe(1, 0.010)
        policy = DraftLengthPolicy(times, prior_alpha=0.9)
        policy.retime_above = retime_above
        _timed(policy, times, 4)
        for _ in range(12):  # the burst: every pass 3× slower, the one-token ones too
            for n in range(1, 6):
                times.observe(n, 3 * (0.010 + 0.002 * (n - 1)))
        for _ in range(4):  # over: one-token passes are fast again at once
            times.observe(1, 0.010)
        verified = []
        for _ in range(200):
            d = policy.trim([None] * 4)
            verified.append(d)
            times.observe(d + 1, 0.010 + 0.002 * d)  # the machine is quiet now
        return verified

    stuck = rounds(float("inf"))
    assert stuck[:50] == [0] * 50  # without the re-timing: no draft verified at all
    back = rounds(DraftLengthPolicy.retime_above)
    first = next(i for i, d in enumerate(back) if d)
    assert first <= DraftLengthPolicy.retime_after
    assert back[-20:] == [4] * 20  # drafting again at the length that pays


def test_a_lasting_change_of_one_sizes_cost_is_timed_again_once() -> None:
    times = PassTimes()
    times.observe(1, 0.010)
    policy = DraftLengthPolicy(times, prior_alpha=0.0)  # drafting never pays: d = 0
    _timed(policy, times, 4)
    for _ in range(12):  # from now on a 5-token pass costs twice as much
        times.observe(5, 2 * 0.018)
    forced = []
    for i in range(20 * DraftLengthPolicy.retime_after):
        d = policy.choose(4)
        forced += [i] if d else []
        times.observe(d + 1, 2 * 0.018 if d == 4 else 0.010 + 0.002 * d)
    # re-timed once, then taken as it is (not every retime_after passes for ever); the
    # refresh (every refresh_every decisions) comes on top
    assert len(forced) == 1 + 20 * DraftLengthPolicy.retime_after // policy.refresh_every


def test_a_size_asked_for_but_not_reached_is_not_asked_for_every_round() -> None:
    # greedy free drafts ("both"): choose() asks for a length to re-time a slow size, but
    # the drafter proposes less; the short draft is cut as usual, and the size is not
    # asked for again before retime_after passes
    times = PassTimes()
    times.observe(1, 0.010)
    policy = DraftLengthPolicy(times, prior_alpha=0.9)
    _timed(policy, times, 8)
    for _ in range(12):
        times.observe(9, 3 * 0.026)  # the burst hit only the 9-token passes
    asked, cut = [], []
    for _ in range(4 * DraftLengthPolicy.retime_after):
        d = policy.choose(8)
        asked.append(d)
        draft = min(d, 3)  # the drafter has 3 tokens
        v = policy.trim([None] * draft, after_choose=True) if draft else 0
        cut.append(v)
        times.observe(v + 1, 0.010 + 0.002 * v)
    assert 1 <= asked.count(8) <= 4  # once per retime_after passes at most
    assert max(cut) <= 3


def test_a_load_that_slows_every_size_alike_times_nothing_again() -> None:
    times = PassTimes()
    times.observe(1, 0.010)
    policy = DraftLengthPolicy(times, prior_alpha=0.0)  # drafting never pays: d = 0
    _timed(policy, times, 4)
    for _ in range(12):
        for n in range(1, 6):
            times.observe(n, 2 * (0.010 + 0.002 * (n - 1)))
    picks = []
    for _ in range(4 * DraftLengthPolicy.retime_after):  # the load goes on
        picks.append(policy.choose(4))
        times.observe(picks[-1] + 1, 2 * (0.010 + 0.002 * picks[-1]))
    assert picks == [0] * len(picks)


def test_choose_then_trim_is_one_decision_and_keeps_a_length_chosen_to_time() -> None:
    # greedy free drafts are chosen, then cut (session.free_draft_rule: "both")
    times = PassTimes()
    times.observe(1, 0.010)
    policy = DraftLengthPolicy(times, prior_alpha=0.0)  # drafting never pays
    _timed(policy, times, 4)
    verified = []
    for _ in range(2 * policy.refresh_every):
        d = policy.choose(4)
        d = policy.trim([("ctx", 0, 0)] * d, after_choose=True) if d else 0
        verified.append(d)
        times.observe(d + 1, 0.010 + 0.002 * d)
    forced = [i for i, d in enumerate(verified) if d > 0]
    # the cut keeps the re-timing choose() asked for, and the refresh still comes every
    # refresh_every rounds, not every refresh_every / 2 (one decision per round)
    assert len(forced) == 2 and forced[1] - forced[0] == policy.refresh_every
    # on its own, the cut is the round's decision: one re-timing per refresh_every cuts
    alone = [policy.trim([("ctx", 0, 0)] * 4) for _ in range(policy.refresh_every)]
    assert sum(d > 0 for d in alone) == 1


def test_trim_cuts_a_draft_where_its_tokens_stop_paying() -> None:
    times = PassTimes()
    times.observe(1, 0.010)
    policy = DraftLengthPolicy(times, prior_alpha=0.9)
    _timed(policy, times, 6)
    sure, unsure = ("ctx", 3, 3), ("ctx", 0, 0)
    for _ in range(60):  # measured: "sure" tokens are accepted, "unsure" ones never
        policy.observe_verification(2, 1, [sure, unsure])
    assert policy.acceptance(sure) > 0.95 and policy.acceptance(unsure) < 0.1
    assert policy.keys_measured == 2
    # cut before the first unsure token; an unsure first token: nothing verified
    assert policy.trim([sure, sure, sure, unsure, sure, sure]) == 3
    assert policy.trim([unsure, sure, sure]) == 0
    assert policy.trim([sure] * 6) == 6
    # a draft must beat plain decoding by the margin: a token of unknown key (α̂ 0.28)
    # is worth (1 + 0.28) / 12 ms, 1.07 × plain's 1 / 10 ms: below the 10 % margin
    policy.alpha = 0.28
    assert policy.margin == 0.10 and policy.trim([None]) == 0
    policy.margin = 0.0
    assert policy.trim([None]) == 1
    # a cut to nothing lets an unlucky key recover toward the prior (0.9), never drags a
    # well-measured one down
    policy.margin, policy.alpha = 0.10, 0.9
    before = policy.acceptance(unsure)
    assert policy.trim([unsure]) == 0 and policy.acceptance(unsure) > before
    for _ in range(100):
        policy.trim([unsure])
    assert policy.acceptance(unsure) > 0.3  # from < 0.1: worth trying again
    good = ("ctx", 2, 3)
    for _ in range(40):
        policy.observe_verification(1, 1, [good])
    times.observe(2, 0.050)  # a 1-token draft now costs more than it can win
    times.observe(2, 0.050)
    times.observe(2, 0.050)
    level = policy.acceptance(good)
    assert policy.trim([good]) == 0 and policy.acceptance(good) == level


def test_prompt_lookup_with_draft_min_2_drafts(tiny_target: Path) -> None:
    """With draft_min 2 the adaptive length must not explore d = 1, which draft_min
    discards: that would be a draft step every round and never a draft."""
    prompt = [BOS] + [300, 301, 302, 303, 304, 305] * 6
    spec = SpeculationConfig(mode="prompt-lookup", draft_max=4, draft_min=2)
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=256, n_threads=2)) as s:
        r = run(s, prompt, SamplingParams(temperature=0.0, max_tokens=24), spec)
    st = r.stats
    assert st.draft_rounds > 0 and st.proposed >= 2 * st.draft_rounds, st  # never a 1-token draft
