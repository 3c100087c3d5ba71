"""Deliberately broken verifiers: set one as ``Session.verifier`` to show that the
divergence check calls such an engine suspect (tests, and ``bench/proof_divergence.py
--fault``; docs/proof.md, "Catching real bugs")."""

from __future__ import annotations

from app.engine.llama import LlamaContext
from app.engine.rounds import Sample, Verifier


class KeepRejectedKV(Verifier):
    """A deliberate bug: rejected draft tokens stay in the KV cache and the positions move
    past them, so the model attends to tokens that are not in the text."""

    def kept(self, n_acc: int, n_batch: int) -> int:
        return n_batch


class ExtraDraw(Verifier):
    """A deliberate bug: after a rejection the sampler also samples the next position and
    throws the token away, so every later random draw is one step out of line."""

    def after_rejection(self, ctx: LlamaContext, draw: Sample, i: int, n_batch: int) -> None:
        if i + 1 < n_batch:
            draw(ctx, i + 1)


#: the deliberately broken verifiers by name (``--fault`` of the proof benchmark)
FAULTS: dict[str, type[Verifier]] = {"keep-rejected-kv": KeepRejectedKV, "extra-draw": ExtraDraw}
