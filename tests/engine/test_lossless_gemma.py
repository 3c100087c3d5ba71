"""Speculation on vs off on the real Gemma 3 270M Q4_K_M, 20 prompts.

On this CPU backend a verification batch is computed with other kernels than a one-token
pass (docs/proof.md), so speculative output may part from plain decoding at a near-tie,
at any k. These tests therefore record both runs (:class:`SamplingTrace`) and require
that every difference is measured as a ``near-tie``, never ``suspect``
(:func:`compare_traces`); a deliberately broken engine must be called suspect; and with
exact verification (a Q5_1 copy of the model, flash attention, Q8_0 KV cache) the
outputs must be identical.

A prompt longer than Gemma's 512-token sliding window checks that rolling back rejected
drafts stays correct with the small (n_swa + n_ubatch) sliding-window cache.
"""

from __future__ import annotations

from app.engine.rounds import Verifier
from tests.faults import FAULTS

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.chat import tokenize_plain
from app.engine.divergence import Divergence, SamplingTrace, compare_traces
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig
from tests.engine.util import Run, check_invariants, run

pytestmark = pytest.mark.slow

PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
    "The capital of France is",
    "import os\nimport sys\n\nfor path in sys.argv[1:]:\n",
    "Once upon a time, in a small village,",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
    "The three primary colors are",
    "SELECT name, email FROM users WHERE",
    "1, 2, 3, 4, 5, 6, 7, 8,",
    "Water boils at",
    "To make a cup of tea, first",
    "<html>\n<head>\n<title>My page</title>\n</head>\n<body>\n",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Monday, Tuesday, Wednesday,",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "The largest planet in the solar system is",
    "Dear Sir or Madam,\n\nI am writing to",
    "for (int i = 0; i < n; i++) {\n",
    "A haiku about autumn:\n",
    "The mitochondria is",
    "x = [1, 2, 3]\ny = [a * 2 for a in x]\nprint(",
]
MAX_TOKENS = 16
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
WARM = SamplingParams(temperature=0.8, seed=1234, max_tokens=MAX_TOKENS)


def traced(session: Session, prompt: list[int], sampling: SamplingParams,
           spec: SpeculationConfig) -> tuple[Run, SamplingTrace]:
    tr = SamplingTrace()
    r = run(session, prompt, sampling, spec, trace=tr)
    return r, tr


def piece(session: Session) -> object:
    return lambda t: session.target.token_to_piece(t).decode("utf-8", "backslashreplace")


@pytest.fixture(scope="module")
def gemma(gemma_path: Path) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=gemma_path, draft_path=gemma_path, n_ctx=1024, n_threads=2))
    yield s
    s.close()


@pytest.fixture(scope="module")
def plain_runs(gemma: Session) -> dict[tuple[str, float], SamplingTrace]:
    """Plain decoding of every prompt at both temperatures, recorded once."""
    out = {}
    for text in PROMPTS:
        prompt = tokenize_plain(gemma.target, text)
        for sampling in (GREEDY, WARM):
            r, tr = traced(gemma, prompt, sampling, SpeculationConfig(mode="off"))
            check_invariants(r, MAX_TOKENS)
            out[(text, sampling.temperature)] = tr
    return out


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("sampling", [GREEDY, WARM], ids=["greedy", "t0.8-seed"])
@pytest.mark.parametrize("mode", ["draft-model", "prompt-lookup"])
def test_twenty_prompts_no_suspect_difference_with_k2(
    gemma: Session, plain_runs: dict[tuple[str, float], SamplingTrace],
    mode: str, sampling: SamplingParams,
) -> None:
    assert len(PROMPTS) >= 20
    drafted = 0
    found: list[Divergence] = []
    for text in PROMPTS:
        prompt = tokenize_plain(gemma.target, text)
        spec, tr = traced(gemma, prompt, sampling,
                          SpeculationConfig(adaptive=False, mode=mode, draft_max=2, ngram_min=1, ngram_max=3))  # type: ignore[arg-type]
        d = compare_traces(plain_runs[(text, sampling.temperature)], tr, piece(gemma))  # type: ignore[arg-type]
        assert d.verdict != "suspect", (text, mode, d)
        found.append(d)
        check_invariants(spec, MAX_TOKENS)
        drafted += spec.stats.verified
    assert drafted > 0
    print(f"{mode} k=2 T={sampling.temperature}: "
          f"{sum(d.verdict == 'identical' for d in found)}/{len(found)} identical")


@pytest.mark.timeout(1200)
def test_k4_differs_only_at_near_ties(gemma: Session, plain_runs: dict[tuple[str, float], SamplingTrace]) -> None:
    shifts = []
    for text in PROMPTS[:10]:
        prompt = tokenize_plain(gemma.target, text)
        spec, tr = traced(gemma, prompt, GREEDY,
                          SpeculationConfig(adaptive=False, mode="draft-model", draft_max=4))
        check_invariants(spec, MAX_TOKENS)
        d = compare_traces(plain_runs[(text, 0.0)], tr, piece(gemma))  # type: ignore[arg-type]
        assert d.verdict != "suspect", (text, d)
        if d.verdict == "near-tie":
            assert d.off_probs is not None and d.on_probs is not None
            assert d.off_probs[0] >= d.off_probs[1] and d.on_probs[1] >= d.on_probs[0]  # greedy: each run's best
            shifts.append(round(d.logit_shift or 0.0, 3))
    # how often and by how much (visible with -rP)
    print(f"k=4 diverged on {len(shifts)}/10 prompts; logit shifts {shifts}")


@pytest.mark.timeout(1200)
def test_injected_stale_kv_cache_is_called_suspect(
    gemma: Session, plain_runs: dict[tuple[str, float], SamplingTrace]
) -> None:
    """A real bug — rejected draft tokens left in the KV cache after a rollback — must be
    found by the comparison: the check is shown to catch what it is for."""
    verdicts = []
    gemma.verifier = FAULTS["keep-rejected-kv"]()
    try:
        for text in PROMPTS[:6]:
            prompt = tokenize_plain(gemma.target, text)
            _, tr = traced(gemma, prompt, GREEDY,
                           SpeculationConfig(adaptive=False, mode="prompt-lookup", draft_max=4, ngram_min=1))
            d = compare_traces(plain_runs[(text, 0.0)], tr, piece(gemma))  # type: ignore[arg-type]
            verdicts.append((text, d.verdict, d.reason, d.logit_shift))
    finally:
        gemma.verifier = Verifier()
    print(verdicts)
    # The verdict judges the first difference only: a bug that first shows where the
    # plain run itself was at a near-tie passes there (docs/proof.md), so not every run
    # is flagged, but most must be.
    suspect = sum(v[1] == "suspect" for v in verdicts)
    near_tie = sum(v[1] == "near-tie" for v in verdicts)
    assert suspect >= 3 and suspect > near_tie, verdicts


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("sampling", [GREEDY, WARM], ids=["greedy", "t0.8-seed"])
def test_exact_verification_is_identical_at_every_k(gemma_q5_1: Path, sampling: SamplingParams) -> None:
    cfg = SessionConfig(target_path=gemma_q5_1, n_ctx=1024, n_threads=2, n_gpu_layers=0,
                        exact_verification=True)
    sampling = sampling.model_copy(update={"max_tokens": 32})
    with Session.open(cfg) as s:
        assert s.exact_verification
        drafted = 0
        for text in (PROMPTS[0], PROMPTS[4], PROMPTS[13]):
            prompt = tokenize_plain(s.target, text)
            plain = run(s, prompt, sampling, SpeculationConfig())
            for k in (1, 3, 4, 8):
                spec = run(s, prompt, sampling,
                           SpeculationConfig(adaptive=False, mode="prompt-lookup", draft_max=k, ngram_min=1))
                assert spec.ids == plain.ids, (text, k)
                drafted += spec.stats.verified
        assert drafted > 0


@pytest.mark.timeout(1200)
def test_past_the_sliding_window_no_suspect_difference_with_k2(gemma: Session) -> None:
    code = (
        "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
        "    return total / len(values)\n\n"
    )
    # a tail the pattern does not predict, so some drafts are rejected (measured: 22
    # verified, 21 accepted at 32 tokens; a bare "def median(values):" is copied whole)
    text = code * 20 + "def median(values):\n    values = sorted(values)\n"
    prompt = tokenize_plain(gemma.target, text)
    assert len(prompt) > 600 > gemma.target.n_swa == 512
    sampling = SamplingParams(temperature=0.0, max_tokens=32)
    _, plain = traced(gemma, prompt, sampling, SpeculationConfig(mode="off"))
    spec, tr = traced(gemma, prompt, sampling,
                      SpeculationConfig(adaptive=False, mode="prompt-lookup", draft_max=2, ngram_min=1))
    assert spec.stats.verified > spec.stats.accepted  # rejections: rollbacks happened
    d = compare_traces(plain, tr, piece(gemma))  # type: ignore[arg-type]
    assert d.verdict != "suspect", d
    check_invariants(spec, 32)


@pytest.mark.timeout(1200)
def test_editing_far_back_after_the_window_slid_reevaluates(gemma_path: Path) -> None:
    """With n_batch 64 the sliding-window cache holds 512 + 64 cells: after a 900-token
    prompt, positions before ~300 are gone from it, so continuing from an edit at 300
    would silently attend to nothing there. The session must notice and re-evaluate."""
    code = "def mean(values):\n    return sum(values) / len(values)\n\n"
    cfg = SessionConfig(target_path=gemma_path, n_ctx=2048, n_batch=64, n_threads=2)
    sampling = SamplingParams(temperature=0.0, max_tokens=12)
    with Session.open(cfg) as warm:
        long_prompt = tokenize_plain(warm.target, code * 60)
        assert len(long_prompt) > 900
        run(warm, long_prompt, sampling)
        edited = [*long_prompt[:300], *tokenize_plain(warm.target, "def median(v):\n")[1:]]
        again = run(warm, edited, sampling)
        assert again.stats.prefill_tokens == len(edited) - 1  # nothing stale was reused
    with Session.open(cfg) as cold:
        fresh = run(cold, edited, sampling)
    assert again.ids == fresh.ids
