"""Hybrid and MTP together, on a synthetic Qwen3.5 (``qwen35``) GGUF: a Gated DeltaNet
layer and an attention layer in the trunk, one multi-token-prediction (nextn) layer.

The target's recurrent state rolls back through llama.cpp's snapshots (``n_rs_seq``)
while the MTP head drafts from its hidden states. Here: the context keeps snapshots and
the load note gives their memory and the MTP layer's; the MTP head, prompt lookup and
suffix lookup each equal plain decoding at k = 1, 2, 4 (greedy exactly, seeded up to
draws within float error of an interval edge); the head is rejected often, so
rollbacks ran, and a rollback that keeps rejected tokens is caught; without snapshots
speculation stays off and says so; the statistics invariants hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.catalog.gguf_meta import inspect_gguf
from app.catalog.loadcheck import check_loads
from app.engine.divergence import SamplingTrace, compare_traces
from app.engine.llama import CONTEXT_TYPE_MTP, LlamaContext
from app.engine.rounds import Verifier
from tests.faults import FAULTS
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpecMode, SpeculationConfig
from tests.engine.test_hybrid_rollback import DRAW_NEAR_TIE
from tests.engine.test_lossless_synthetic import SAMPLINGS, prompts
from tests.engine.util import check_invariants, run

MAX_TOKENS = 40
DEPTH = 16


@pytest.fixture(scope="module")
def qwen35(tiny_qwen35_mtp: Path) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=tiny_qwen35_mtp, n_ctx=256, n_threads=1,
                                   rollback_depth=DEPTH))
    yield s
    s.close()


def test_the_hybrid_keeps_snapshots_and_carries_a_head(qwen35: Session,
                                                       tiny_qwen35_mtp: Path) -> None:
    assert qwen35.target.is_recurrent and qwen35.rollback_supported
    assert qwen35.ctx.n_rs_seq == DEPTH and qwen35.draft_bound == DEPTH
    assert qwen35.target.n_layer_nextn == 1 and qwen35.target.mtp_loaded
    assert inspect_gguf(tiny_qwen35_mtp).nextn_layers == 1
    assert check_loads(tiny_qwen35_mtp).mtp == "ok"  # the probe ran the head too
    assert any(f"{DEPTH} state snapshots" in n for n in qwen35.notes)
    assert any("1 MTP (nextn) layer stays loaded" in n for n in qwen35.notes)


@pytest.mark.parametrize("sampling", SAMPLINGS[:2], ids=["greedy", "t0.8"])
@pytest.mark.parametrize("mode", ["mtp", "prompt-lookup", "suffix"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_every_drafter_equals_plain_decoding(qwen35: Session, sampling: SamplingParams,
                                             mode: str, k: int) -> None:
    verified = accepted = 0
    for prompt in prompts()[::3]:
        off, on = SamplingTrace(), SamplingTrace()
        plain = run(qwen35, prompt, sampling, SpeculationConfig(mode="off"), trace=off)
        spec = run(qwen35, prompt, sampling, SpeculationConfig(
            mode=mode, draft_max=k, adaptive=False, ngram_min=1), trace=on)
        if spec.ids != plain.ids:
            d = compare_traces(off, on)
            assert sampling.temperature > 0 and d.draw_consistent, d
            assert d.draw_boundary is not None and d.draw_boundary < DRAW_NEAR_TIE, d
        assert spec.finished.note is None and spec.stats.mode is SpecMode(mode)
        check_invariants(spec, MAX_TOKENS)
        assert not any(spec.stats.verified_at[DEPTH:])  # bounded by the snapshots
        verified += spec.stats.verified
        accepted += spec.stats.accepted
    assert verified > 0
    if mode == "mtp":
        # the head is right often, not always: the recurrent state was rolled back
        # through the snapshots after each rejection, and the output stayed the target's
        assert 0 < accepted < verified


def test_the_heads_own_cache_rolls_back_draft_positions(qwen35: Session) -> None:
    """llama.cpp gives the MTP context of a hybrid Qwen a plain attention KV cache (its
    nextn layer only): the draft's positions leave it again, so the head never has to
    rebuild its cache from the whole conversation (which cost 14 target steps per draft
    step at k = 2 while this was refused as for recurrent memory)."""
    model = qwen35.target
    head = LlamaContext(model, n_ctx=64, n_batch=64, n_threads=1, n_outputs_max=1,
                        context_type=CONTEXT_TYPE_MTP)
    try:
        rows = np.zeros((4, model.n_embd_out), dtype=np.float32)
        head.decode_with_hidden([1, 5, 6, 7], [0, 1, 2, 3], rows, logits_last=True)
        head.decode_with_hidden([8, 9], [4, 5], rows[:2], logits_last=True)
        assert head.seq_rm(4, -1) and head.pos_max() == 3  # both draft positions
        head.decode_with_hidden([8], [4], rows[:1], logits_last=True)
        assert head.seq_rm(4, -1) and head.pos_max() == 3
    finally:
        head.close()


def test_a_rollback_that_keeps_rejected_state_is_caught(qwen35: Session) -> None:
    greedy = SAMPLINGS[0]
    differs = 0
    try:
        for prompt in prompts()[:6]:
            qwen35.verifier = Verifier()
            qwen35.reset_cache()
            plain = run(qwen35, prompt, greedy, SpeculationConfig(mode="off"))
            qwen35.verifier = FAULTS["keep-rejected-kv"]()
            qwen35.reset_cache()
            spec = run(qwen35, prompt, greedy, SpeculationConfig(
                mode="mtp", draft_max=4, adaptive=False))
            differs += spec.ids != plain.ids
    finally:
        qwen35.verifier = Verifier()
        qwen35.reset_cache()
    assert differs > 0


def test_without_snapshots_mtp_stays_off_and_says_so(tiny_qwen35_mtp: Path) -> None:
    with Session.open(SessionConfig(target_path=tiny_qwen35_mtp, n_ctx=128, n_threads=1,
                                    rollback_depth=0)) as s:
        assert not s.rollback_supported
        r = run(s, prompts()[0], SAMPLINGS[0], SpeculationConfig(mode="mtp"))
        assert r.stats.verified == 0
        assert r.finished.note is not None and "cannot roll back" in r.finished.note
