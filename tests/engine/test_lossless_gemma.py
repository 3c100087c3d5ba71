"""Speculation on equals off on the real Gemma 3 270M Q4_K_M, 20 prompts.

On this CPU backend, passes of 1–3 tokens give bit-identical logits while passes of 4 or
more take another kernel path (8- and 16-token passes were seen to disagree), so the
exact-equality test uses k = 2 (verification batches of 3). With a draft model equal to
the target and with prompt lookup, greedy and at temperature 0.8 with a fixed seed, the
token ids must be identical. For k = 4 the outputs may part at a near-tie; that test
checks that every divergence is one: at the first differing position, the logits of the
two tokens are within a small margin of each other and of the best.

A prompt longer than Gemma's 512-token sliding window checks that rolling back rejected
drafts stays exact with the small (n_swa + n_ubatch) sliding-window cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.engine.chat import tokenize_plain
from app.engine.llama import LlamaContext
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig
from tests.engine.util import check_invariants, run

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


@pytest.fixture(scope="module")
def gemma(gemma_path: Path) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=gemma_path, draft_path=gemma_path, n_ctx=1024, n_threads=2))
    yield s
    s.close()


@pytest.fixture(scope="module")
def plain_runs(gemma: Session) -> dict[tuple[str, float], tuple[int, ...]]:
    """Plain decoding of every prompt at both temperatures, computed once."""
    out = {}
    for text in PROMPTS:
        prompt = tokenize_plain(gemma.target, text)
        for sampling in (GREEDY, WARM):
            r = run(gemma, prompt, sampling, SpeculationConfig(mode="off"))
            check_invariants(r, MAX_TOKENS)
            out[(text, sampling.temperature)] = r.ids
    return out


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("sampling", [GREEDY, WARM], ids=["greedy", "t0.8-seed"])
@pytest.mark.parametrize("mode", ["draft-model", "prompt-lookup"])
def test_twenty_prompts_identical_with_k2(
    gemma: Session, plain_runs: dict[tuple[str, float], tuple[int, ...]],
    mode: str, sampling: SamplingParams,
) -> None:
    assert len(PROMPTS) >= 20
    drafted = 0
    for text in PROMPTS:
        prompt = tokenize_plain(gemma.target, text)
        spec = run(gemma, prompt, sampling,
                   SpeculationConfig(adaptive=False, mode=mode, draft_max=2, ngram_min=1, ngram_max=3))  # type: ignore[arg-type]
        assert spec.ids == plain_runs[(text, sampling.temperature)], (text, mode, sampling.temperature)
        check_invariants(spec, MAX_TOKENS)
        drafted += spec.stats.verified
    assert drafted > 0


@pytest.mark.timeout(1200)
def test_k4_differs_only_at_near_ties(gemma: Session) -> None:
    margins = []
    for text in PROMPTS[:10]:
        prompt = tokenize_plain(gemma.target, text)
        plain = run(gemma, prompt, GREEDY, SpeculationConfig(mode="off"))
        spec = run(gemma, prompt, GREEDY, SpeculationConfig(adaptive=False, mode="draft-model", draft_max=4))
        check_invariants(spec, MAX_TOKENS)
        if spec.ids == plain.ids:
            continue
        i = next(i for i, (a, b) in enumerate(zip(spec.ids, plain.ids)) if a != b)
        # Recompute the plain one-token logits at the first difference.
        # Plain decoding built its KV cache one token at a time after a batched prefill
        # of prompt[:-1]; rebuild exactly that (batch shape decides the numerics).
        ctx = LlamaContext(gemma.target, n_ctx=512, n_threads=2)
        try:
            seq = [*prompt, *plain.ids[:i]]
            ctx.decode(prompt[:-1], 0, logits="none")
            for p in range(len(prompt) - 1, len(seq)):
                ctx.decode([seq[p]], p, logits="last")
            logits = np.array(ctx.logits(-1))
        finally:
            ctx.close()
        a, b = plain.ids[i], spec.ids[i]
        # The KV-cache layout also shifts the last bits, so even this recomputation may
        # rank the two the other way: what matters is that they are close.
        margin = float(logits[a] - logits[b])
        assert abs(margin) < 2.0, (text, i, margin)
        top = float(np.max(logits))
        assert top - max(logits[a], logits[b]) < 2.0  # both are among the best candidates
        margins.append(round(margin, 3))
    # record how often and by how much (visible with -rP)
    print(f"k=4 diverged on {len(margins)}/10 prompts; logit margins {margins}")


@pytest.mark.timeout(1200)
def test_past_the_sliding_window_identical_with_k2(gemma: Session) -> None:
    code = (
        "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
        "    return total / len(values)\n\n"
    )
    text = code * 20 + "def median(values):\n"
    prompt = tokenize_plain(gemma.target, text)
    assert len(prompt) > 600 > gemma.target.n_swa == 512
    sampling = SamplingParams(temperature=0.0, max_tokens=32)
    plain = run(gemma, prompt, sampling, SpeculationConfig(mode="off"))
    spec = run(gemma, prompt, sampling,
               SpeculationConfig(adaptive=False, mode="prompt-lookup", draft_max=2, ngram_min=1))
    assert spec.stats.verified > 0
    assert spec.ids == plain.ids
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
