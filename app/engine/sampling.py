"""The target's sampler chain (its settings are :class:`app.options.SamplingParams`).

The target samples every verified position with the same chain it would use in plain
decoding (llama.cpp's order: penalties → top-k → top-p → min-p → temperature → dist), and
a draft token is accepted while it equals that sample. Each emitted token costs exactly
one draw from the chain's random number generator in both modes, so with a fixed seed
speculation on and off produce the same tokens (up to floating-point differences between
batch sizes).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import numpy as np

from app.engine.llama import LlamaContext, LlamaModel, lib
from app.options import SamplingParams


class TargetSampler:
    """The target model's sampler chain for one reply.

    Args:
        model: the target model (its vocabulary size sizes the penalty sampler).
        params: sampling settings; a seed of −1 is replaced by a random one.

    Greedy decoding without penalties takes the argmax of the logits directly (the same
    first-maximum rule as llama.cpp's greedy sampler) instead of building a candidate
    array of n_vocab entries per token.
    """

    def __init__(self, model: LlamaModel, params: SamplingParams) -> None:
        self.params = params
        self.seed = params.seed if params.seed >= 0 else random.randrange(2**32 - 1)  # < 2³²−1
        self._fast_greedy = params.greedy and params.repeat_penalty == 1.0
        self._chain: Any = None
        if not self._fast_greedy:
            L = lib()
            sp = L.llama_sampler_chain_default_params()
            sp.no_perf = True
            chain = L.llama_sampler_chain_init(sp)
            self._chain = chain
            add = L.llama_sampler_chain_add
            if params.repeat_penalty != 1.0 and params.repeat_last_n > 0:
                add(
                    chain,
                    L.llama_sampler_init_penalties(
                        model.n_vocab, params.repeat_last_n, params.repeat_penalty, 0.0, 0.0
                    ),
                )
            if params.greedy:
                add(chain, L.llama_sampler_init_greedy())
            else:
                if params.top_k > 0:
                    add(chain, L.llama_sampler_init_top_k(params.top_k))
                if params.top_p < 1.0:
                    add(chain, L.llama_sampler_init_top_p(params.top_p, 1))
                if params.min_p > 0.0:
                    add(chain, L.llama_sampler_init_min_p(params.min_p, 1))
                add(chain, L.llama_sampler_init_temp(params.temperature))
                add(chain, L.llama_sampler_init_dist(self.seed))

    def accept_prompt(self, tokens: Iterable[int]) -> None:
        """Feed prompt tokens to the penalty window (as llama-server does)."""
        if self._chain is None or self.params.repeat_penalty == 1.0:
            return
        L = lib()
        for t in list(tokens)[-self.params.repeat_last_n :]:
            L.llama_sampler_accept(self._chain, t)

    def sample(self, ctx: LlamaContext, index: int) -> int:
        """Sample the token that follows batch position ``index`` of the last decode.

        The chain records the token (``llama_sampler_sample`` accepts it), so call this
        once per emitted position, in order.
        """
        if self._fast_greedy:
            return int(np.argmax(ctx.logits(index)))
        return int(lib().llama_sampler_sample(self._chain, ctx.ptr, index))

    def close(self) -> None:
        if self._chain is not None:
            lib().llama_sampler_free(self._chain)
            self._chain = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


#: llama.cpp's draft sampler keeps the top 10 candidates before its softmax
#: (common/speculative.cpp: ``params.top_k = 10``), so ``--draft-p-min`` compares with the
#: probability among those ten.
DRAFT_TOP_K = 10


def top_probability(
    logits: np.ndarray[Any, np.dtype[np.float32]], top_k: int = DRAFT_TOP_K
) -> tuple[int, float]:
    """(argmax id, its softmax probability among the ``top_k`` best) of one row of logits.

    Args:
        logits: shape (n_vocab,).
        top_k: candidates kept before the softmax, as llama.cpp's draft sampler does
            (0: the whole vocabulary).

    Cost: an argmax and a partition over the vocabulary; no exponential over it.
    """
    best = int(np.argmax(logits))
    m = float(logits[best])
    if 0 < top_k < logits.shape[0]:
        vals = np.partition(logits, -top_k)[-top_k:]
        z = float(np.exp(vals - m).sum())
    else:
        z = float(np.exp(logits - m, dtype=np.float32).sum())
    return best, 1.0 / z

