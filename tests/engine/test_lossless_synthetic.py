"""Speculation on equals speculation off, on synthetic F32 models (exact arithmetic paths).

A draft identical to the target must give α = 1.0 exactly; a perturbed copy gives
0 < α < 1; prompt lookup drafts from the context. In every case the token ids equal
plain decoding, greedily and at temperature 0.8 with a fixed seed, for k up to 8.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig
from tests.engine.util import check_invariants, run

N_PROMPTS = 20
MAX_TOKENS = 40


def prompts(n_vocab: int = 512) -> list[list[int]]:
    rng = random.Random(1234)
    out = []
    for i in range(N_PROMPTS):
        body = [rng.randrange(259, n_vocab) for _ in range(rng.randrange(4, 30))]
        if i % 3 == 0:  # repetitive prompts give prompt lookup something to find
            body = body[:6] * 4
        out.append([1, *body])
    return out


@pytest.fixture(scope="module")
def self_draft_session(tiny_target: Path) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=tiny_target, draft_path=tiny_target, n_ctx=256, n_threads=2))
    yield s
    s.close()


@pytest.fixture(scope="module")
def perturbed_session(tiny_target: Path, tiny_draft_perturbed: Path) -> Iterator[Session]:
    s = Session.open(
        SessionConfig(target_path=tiny_target, draft_path=tiny_draft_perturbed, n_ctx=256, n_threads=2)
    )
    yield s
    s.close()


SAMPLINGS = [
    SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS),
    SamplingParams(temperature=0.8, seed=42, top_k=0, top_p=1.0, min_p=0.0, max_tokens=MAX_TOKENS),
    SamplingParams(temperature=0.8, seed=7, top_k=40, top_p=0.9, min_p=0.05, repeat_penalty=1.1,
                   max_tokens=MAX_TOKENS),
]


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["greedy", "t0.8", "t0.8-topk-penalty"])
@pytest.mark.parametrize("k", [1, 4, 8])
def test_draft_equal_to_target_accepts_everything_and_changes_nothing(
    self_draft_session: Session, sampling: SamplingParams, k: int
) -> None:
    s = self_draft_session
    for prompt in prompts():
        plain = run(s, prompt, sampling, SpeculationConfig(mode="off"))
        spec = run(s, prompt, sampling, SpeculationConfig(adaptive=False, mode="draft-model", draft_max=k))
        assert spec.ids == plain.ids
        assert spec.finished.text == plain.finished.text
        check_invariants(plain, MAX_TOKENS)
        check_invariants(spec, MAX_TOKENS)
        if spec.stats.verified and sampling.temperature == 0.0:
            assert spec.stats.acceptance_rate == 1.0
        assert plain.stats.verified == 0 and plain.stats.acceptance_rate is None
    if sampling.temperature == 0.0:
        assert spec.stats.verified > 0


@pytest.mark.parametrize("sampling", SAMPLINGS[:2], ids=["greedy", "t0.8"])
def test_perturbed_draft_partial_acceptance_same_tokens(
    perturbed_session: Session, sampling: SamplingParams
) -> None:
    s = perturbed_session
    drafted = accepted = 0
    for prompt in prompts():
        plain = run(s, prompt, sampling, SpeculationConfig(mode="off"))
        spec = run(s, prompt, sampling, SpeculationConfig(adaptive=False, mode="draft-model", draft_max=5))
        assert spec.ids == plain.ids
        check_invariants(spec, MAX_TOKENS)
        drafted += spec.stats.verified
        accepted += spec.stats.accepted
    alpha = accepted / drafted
    assert 0.0 < alpha < 1.0


@pytest.mark.parametrize("sampling", SAMPLINGS[:2], ids=["greedy", "t0.8"])
@pytest.mark.parametrize("k", [2, 8])
def test_prompt_lookup_same_tokens(self_draft_session: Session, sampling: SamplingParams, k: int) -> None:
    s = self_draft_session
    drafted = 0
    for prompt in prompts():
        plain = run(s, prompt, sampling, SpeculationConfig(mode="off"))
        spec = run(s, prompt, sampling, SpeculationConfig(adaptive=False, mode="prompt-lookup", draft_max=k, ngram_min=1))
        assert spec.ids == plain.ids
        check_invariants(spec, MAX_TOKENS)
        drafted += spec.stats.verified
    assert drafted > 0


def test_fixed_seed_reproduces_and_random_seed_is_reported(self_draft_session: Session) -> None:
    s = self_draft_session
    p = prompts()[1]
    a = run(s, p, SAMPLINGS[1])
    b = run(s, p, SAMPLINGS[1])
    assert a.ids == b.ids and a.finished.seed == 42
    r = run(s, p, SamplingParams(temperature=0.8, seed=-1, max_tokens=MAX_TOKENS))
    again = run(s, p, SamplingParams(temperature=0.8, seed=r.finished.seed, max_tokens=MAX_TOKENS))
    assert again.ids == r.ids


DRY_SAMPLINGS = [
    SamplingParams(temperature=0.0, dry_multiplier=2.0, dry_allowed_length=1, max_tokens=MAX_TOKENS),
    SamplingParams(temperature=0.8, seed=7, top_p=0.9, dry_multiplier=0.8, max_tokens=MAX_TOKENS),
]


@pytest.mark.parametrize("sampling", DRY_SAMPLINGS, ids=["greedy-dry", "t0.8-dry"])
def test_dry_in_the_sampler_chain_changes_the_reply_and_speculation_still_equals_plain(
    self_draft_session: Session, perturbed_session: Session, sampling: SamplingParams
) -> None:
    """DRY (the demo's loop control) is part of the target's chain: prompt lookup and a
    perturbed draft model give plain decoding's tokens, and DRY does change replies (so
    the comparison is not of the same text as without it)."""
    changed = drafted = 0
    for prompt in prompts()[:4]:
        plain = run(self_draft_session, prompt, sampling, SpeculationConfig(mode="off"))
        without = run(self_draft_session, prompt, sampling.with_changes(dry_multiplier=0.0),
                      SpeculationConfig(mode="off"))
        changed += plain.ids != without.ids
        lookup = run(self_draft_session, prompt, sampling,
                     SpeculationConfig(adaptive=False, mode="prompt-lookup", draft_max=8, ngram_min=1))
        assert lookup.ids == plain.ids
        check_invariants(lookup, MAX_TOKENS)
        drafted += lookup.stats.verified
        other = run(perturbed_session, prompt, sampling, SpeculationConfig(mode="off"))
        spec = run(perturbed_session, prompt, sampling,
                   SpeculationConfig(adaptive=False, mode="draft-model", draft_max=5))
        assert spec.ids == other.ids
    assert changed > 0 and drafted > 0
