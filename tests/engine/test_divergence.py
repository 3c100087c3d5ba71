"""The divergence check (app/engine/divergence.py): the rule on hand-made records, the
replay of llama.cpp's random draws, and the recorder on a real (synthetic) model.

The reference uniforms were printed by a C++ program built with g++ 12 / libstdc++:
``std::mt19937 g(seed); std::uniform_real_distribution<double> d(0.0f, 1.0f); d(g)…``,
exactly what llama.cpp's dist sampler draws.
"""

from __future__ import annotations

from app.engine.rounds import Verifier
from tests.faults import FAULTS

import math
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from app.engine.divergence import (
    NEAR_TIE_LOGIT_SHIFT,
    SamplingTrace,
    TokenRecord,
    compare_traces,
    dist_uniforms,
)
from app.engine.reply import ReplyRecord
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig

CPP_UNIFORMS = {
    5489: [0.1354770042967805, 0.8350085899945795, 0.96886777112423139, 0.2210340429827049],
    11: [0.068306848215933358, 0.66472031805186427, 0.19411562184412465, 0.92628296015899025],
    1234: [0.49766366630595166, 0.81783844288953322, 0.61211189358442275, 0.77135991905474999],
}


@pytest.mark.parametrize("seed", sorted(CPP_UNIFORMS))
def test_uniforms_replay_libstdcxx(seed: int) -> None:
    assert dist_uniforms(seed, 4) == CPP_UNIFORMS[seed]
    assert dist_uniforms(seed, 0) == []


# -- the rule on hand-made records -----------------------------------------------------


def rec(token: int, logits: dict[int, float], *, temp: float = 0.0,
        draw: tuple[float, float] | None = None) -> TokenRecord:
    """A record whose final distribution is the softmax of ``logits`` / temp (1 if greedy)."""
    t = temp or 1.0
    m = max(logits.values())
    z = sum(math.exp((v - m) / t) for v in logits.values())
    probs = {k: math.exp((v - m) / t) / z for k, v in logits.items()}
    ids = sorted(logits, key=lambda k: -logits[k])
    return TokenRecord(
        token=token, logit=logits[token], prob=probs[token],
        top_ids=tuple(ids), top_logits=tuple(logits[i] for i in ids),
        top_probs=tuple(probs[i] for i in ids), logit_rest=min(logits.values()) - 5.0,
        prob_rest=0.0, n_candidates=len(ids),
        draw_low=draw[0] if draw else None, draw_high=draw[1] if draw else None,
    )


def trace(records: Sequence[TokenRecord], seed: int | None = None, temp: float = 0.0) -> SamplingTrace:
    t = SamplingTrace()
    t.begin(seed, temp)
    t.records.extend(records)
    return t


SAME = {5: 3.0, 6: 1.0, 7: 0.0}


def test_identical_runs() -> None:
    a = trace([rec(5, SAME), rec(5, SAME)])
    d = compare_traces(a, trace([rec(5, SAME), rec(5, SAME)]))
    assert d.verdict == "identical" and d.index is None
    assert set(d.to_dict()) == {"index", "off_token", "on_token", "off_text", "on_text",
                                "off_probs", "on_probs", "verdict"}


def test_greedy_near_tie_reports_both_runs_probabilities() -> None:
    off = trace([rec(5, SAME), rec(1, {1: 2.00, 2: 1.95, 3: 0.0})])
    on = trace([rec(5, SAME), rec(2, {1: 1.97, 2: 2.01, 3: 0.0})])
    d = compare_traces(off, on, lambda t: f"<{t}>")
    assert (d.verdict, d.reason, d.index) == ("near-tie", "within-threshold", 1)
    assert (d.off_token, d.on_token, d.off_text, d.on_text) == (1, 2, "<1>", "<2>")
    z_off = math.exp(2.0) + math.exp(1.95) + 1.0
    assert d.off_probs == pytest.approx((math.exp(2.0) / z_off, math.exp(1.95) / z_off))
    assert d.on_probs[1] > d.on_probs[0]
    assert d.logit_shift == pytest.approx(0.05 + 0.04)
    assert d.to_dict()["off_probs"] == list(d.off_probs)


def test_greedy_large_logit_shift_is_suspect() -> None:
    off = trace([rec(1, {1: 5.0, 2: 2.0, 3: 0.0})])
    on = trace([rec(2, {1: 2.0, 2: 5.0, 3: 0.0})])
    d = compare_traces(off, on)
    assert (d.verdict, d.reason) == ("suspect", "logit-shift")
    assert d.logit_shift == pytest.approx(6.0)
    assert d.logit_shift > NEAR_TIE_LOGIT_SHIFT


def test_token_outside_the_recorded_best_is_suspect() -> None:
    off = trace([rec(1, {1: 5.0, 2: 4.99})])
    on = trace([rec(9, {9: 5.0, 1: 4.99})])  # 9 is not among the plain run's recorded best
    d = compare_traces(off, on)
    assert (d.verdict, d.reason, d.probs_exact) == ("suspect", "unlisted-token", False)


def test_sampled_near_tie_needs_the_shared_draw() -> None:
    seed = 11
    u = CPP_UNIFORMS[seed]
    first = rec(5, SAME, temp=0.8, draw=(u[0] - 0.01, u[0] + 0.01))
    # position 1 (u = 0.6647): off's token 1 covers (0.60, 0.6648], on's token 2 starts
    # just below the draw: the cumulative distribution moved across it by 0.0002
    off = trace([first, rec(1, {1: 2.0, 2: 1.9}, temp=0.8, draw=(0.60, 0.6648))], seed, 0.8)
    on = trace([first, rec(2, {1: 1.98, 2: 1.93}, temp=0.8, draw=(0.6646, 0.90))], seed, 0.8)
    d = compare_traces(off, on)
    assert (d.verdict, d.draw_consistent) == ("near-tie", True)
    assert d.draw == u[1] and d.draw_boundary == pytest.approx(0.6648 - u[1])
    # the same choices when on's token does not contain the draw: out of step
    on_bad = trace([first, rec(2, {1: 1.98, 2: 1.93}, temp=0.8, draw=(0.70, 0.90))], seed, 0.8)
    d = compare_traces(off, on_bad)
    assert (d.verdict, d.reason, d.draw_consistent) == ("suspect", "draw-out-of-step", False)


def test_traces_sampled_differently_are_refused() -> None:
    with pytest.raises(ValueError):
        compare_traces(trace([rec(5, SAME)], 1, 0.8), trace([rec(5, SAME)], 2, 0.8))
    with pytest.raises(ValueError):  # one run stops before they differ: nothing to measure
        compare_traces(trace([rec(5, SAME), rec(5, SAME)]), trace([rec(5, SAME)]))


# -- the recorder on a real model ------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tiny_target: Path, tiny_draft_perturbed: Path) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=tiny_target, draft_path=tiny_draft_perturbed,
                                   n_ctx=256, n_threads=2))
    yield s
    s.close()


def generate(s: Session, prompt: list[int], sampling: SamplingParams, spec: SpeculationConfig,
             tr: SamplingTrace | None = None) -> ReplyRecord:
    fin = None
    for ev in s.generate(prompt, sampling, spec, trace=tr):
        if isinstance(ev, ReplyRecord):
            fin = ev
    assert fin is not None
    return fin


def prompts(n: int = 3) -> list[list[int]]:
    rng = random.Random(5)
    return [[1, *[rng.randrange(259, 512) for _ in range(rng.randrange(4, 20))]] for _ in range(n)]


SAMPLINGS = [
    SamplingParams(temperature=0.0, max_tokens=40),
    SamplingParams(temperature=0.0, repeat_penalty=1.3, max_tokens=40),
    SamplingParams(temperature=0.8, seed=11, max_tokens=40),
    SamplingParams(temperature=1.0, seed=3, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.1,
                   max_tokens=40),
]
SPEC = SpeculationConfig(mode="draft-model", draft_max=4, adaptive=False)


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["greedy", "greedy-penalty", "t0.8", "t1-full-vocab"])
def test_recording_changes_nothing_and_matches_the_draws(tiny: Session, sampling: SamplingParams) -> None:
    for prompt in prompts():
        for spec in (SpeculationConfig(), SPEC):
            plain = generate(tiny, prompt, sampling, spec)
            tr = SamplingTrace()
            recorded = generate(tiny, prompt, sampling, spec, tr)
            assert recorded.token_ids == plain.token_ids
            ids = list(recorded.token_ids)
            assert tr.tokens[: len(ids)] == ids and len(tr.records) - len(ids) in (0, 1)
            for r in tr.records:
                assert 0.0 < r.prob <= 1.0 and len(r.top_ids) == 32
                assert r.logit_of(r.token) == (r.logit, True)
                if sampling.greedy and sampling.repeat_penalty == 1.0:
                    assert r.token == r.top_ids[0]
            if tr.sampled:
                assert tr.seed == sampling.seed
                u = dist_uniforms(sampling.seed, len(tr.records))
                assert all(r.draw_selects(u[j]) for j, r in enumerate(tr.records))


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["greedy", "greedy-penalty", "t0.8", "t1-full-vocab"])
def test_synthetic_f32_speculation_is_identical_by_the_check(tiny: Session, sampling: SamplingParams) -> None:
    drafted = 0
    for prompt in prompts():
        off, on = SamplingTrace(), SamplingTrace()
        generate(tiny, prompt, sampling, SpeculationConfig(), off)
        fin = generate(tiny, prompt, sampling, SPEC, on)
        drafted += fin.stats.verified - fin.stats.accepted
        assert compare_traces(off, on).verdict == "identical"
    assert drafted > 0  # rejections happened, so rollbacks were exercised


def test_injected_extra_draw_is_caught_as_suspect(tiny: Session) -> None:
    """The sampler drawing one random number too many after a rejection (a real class
    of bug) must be called suspect, from the draws alone."""
    sampling = SamplingParams(temperature=0.8, seed=11, max_tokens=40)
    verdicts = []
    tiny.verifier = FAULTS["extra-draw"]()
    try:
        for prompt in prompts(6):
            off, on = SamplingTrace(), SamplingTrace()
            tiny.verifier = Verifier()
            generate(tiny, prompt, sampling, SpeculationConfig(), off)
            tiny.verifier = FAULTS["extra-draw"]()
            generate(tiny, prompt, sampling, SPEC, on)
            d = compare_traces(off, on)
            verdicts.append((d.verdict, d.reason))
    finally:
        tiny.verifier = Verifier()
    assert ("suspect", "draw-out-of-step") in verdicts
    assert all(v in (("identical", "identical"), ("suspect", "draw-out-of-step")) for v in verdicts), verdicts


def test_bench_measures_and_counts_the_injected_fault(tiny: Session) -> None:
    """Through ``run_bench``: each run that differs carries its measured divergence in
    the JSON, and the configuration's summary counts it as suspect."""
    from app.engine.measure.bench import run_bench
    from app.engine.measure.prompts import PreparedPrompt

    sampling = SamplingParams(temperature=0.8, seed=11, max_tokens=40)
    prepared = [PreparedPrompt(tokens=tuple(p), name=f"p{i}") for i, p in enumerate(prompts(6))]
    tiny.verifier = FAULTS["extra-draw"]()  # harmless to plain runs: it acts only after a rejection
    try:
        report = run_bench(tiny, prepared, [SPEC], sampling, repeat=1, warmup=False)
    finally:
        tiny.verifier = Verifier()
    on = report.summaries[1]
    assert on.compared == 6 and on.suspect >= 1 and on.near_tie == 0
    assert on.identical + on.suspect == 6 and on.unmeasured == 0
    runs = report.to_dict()["runs"]
    for r in runs:
        if r["label"] == "off" or r["identical_to_off"]:
            assert "divergence" not in r
        else:
            d = r["divergence"]
            assert set(d) == {"index", "off_token", "on_token", "off_text", "on_text",
                              "off_probs", "on_probs", "verdict"}
            assert d["verdict"] == "suspect" and d["index"] == r["first_difference"]
            assert len(d["off_probs"]) == len(d["on_probs"]) == 2
            assert r["divergence_evidence"]["reason"] == "draw-out-of-step"
    # unrecorded: differences are counted, not measured
    tiny.verifier = FAULTS["extra-draw"]()
    try:
        bare = run_bench(tiny, prepared, [SPEC], sampling, repeat=1, warmup=False, record=False)
    finally:
        tiny.verifier = Verifier()
    assert bare.summaries[1].unmeasured == on.suspect and bare.summaries[1].suspect == 0
