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


def test_prompt_lookup_with_draft_min_2_drafts(tiny_target: Path) -> None:
    """With draft_min 2 the default adaptive length used to explore d = 1 forever, which
    draft_min discards: a draft step every round and never a draft (issue 12, item 6)."""
    prompt = [BOS] + [300, 301, 302, 303, 304, 305] * 6
    spec = SpeculationConfig(mode="prompt-lookup", draft_max=4, draft_min=2)
    with Session.open(SessionConfig(target_path=tiny_target, n_ctx=256, n_threads=2)) as s:
        r = run(s, prompt, SamplingParams(temperature=0.0, max_tokens=24), spec)
    st = r.stats
    assert st.draft_rounds > 0 and st.proposed >= 2 * st.draft_rounds, st  # never a 1-token draft
