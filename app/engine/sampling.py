"""The target's sampler chain (its settings are :class:`app.options.SamplingParams`).

The target samples every verified position with the same chain it would use in plain
decoding (llama.cpp's order: penalties → top-k → top-p → min-p → temperature → dist), and
a draft token is accepted while it equals that sample. Each emitted token costs exactly
one draw from the chain's random number generator in both modes, so with a fixed seed
speculation on and off produce the same tokens (up to floating-point differences between
batch sizes).
"""

from __future__ import annotations

import ctypes
import random
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from app.engine.divergence import TOP_N, SamplingTrace, TokenRecord
from app.engine.llama import LlamaContext, LlamaModel, lib
from app.options import SamplingParams


#: DRY's sequence breakers: a repeat is not followed across them (llama.cpp's defaults)
DRY_SEQUENCE_BREAKERS = ("\n", ":", "\"", "*")


def _dry_sampler(model: LlamaModel, params: SamplingParams) -> Any:
    """llama.cpp's DRY sampler ("Don't Repeat Yourself", p-e-w,
    https://github.com/oobabooga/text-generation-webui/pull/5677): the logit of a token
    that would extend a repeat of n ≥ ``dry_allowed_length`` earlier tokens is lowered by
    ``dry_multiplier · dry_base ** (n − dry_allowed_length)``. Its window is the model's
    training context."""
    L = lib()
    breakers = (ctypes.c_char_p * len(DRY_SEQUENCE_BREAKERS))(
        *(b.encode("utf-8") for b in DRY_SEQUENCE_BREAKERS))
    return L.llama_sampler_init_dry(model.vocab_ptr, params.dry_multiplier, params.dry_base,
                                    params.dry_allowed_length, model.n_ctx_train,
                                    breakers, len(DRY_SEQUENCE_BREAKERS))


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
        self._fast_greedy = params.greedy and params.repeat_penalty == 1.0 and params.dry_multiplier == 0.0
        self._penalties: Any = None  # the penalties sampler: the only one fed the prompt
        self._chain: Any = None
        self._n_vocab = model.n_vocab
        self._candidates: npt.NDArray[Any] | None = None  # made on the first traced sample
        self._p_full: npt.NDArray[np.float64] | None = None
        if not self._fast_greedy:
            L = lib()
            sp = L.llama_sampler_chain_default_params()
            sp.no_perf = True
            chain = L.llama_sampler_chain_init(sp)
            self._chain = chain
            add = L.llama_sampler_chain_add
            if params.repeat_penalty != 1.0 and params.repeat_last_n > 0:
                self._penalties = L.llama_sampler_init_penalties(
                    model.n_vocab, params.repeat_last_n, params.repeat_penalty, 0.0, 0.0)
                add(chain, self._penalties)
            if params.dry_multiplier > 0.0:
                add(chain, _dry_sampler(model, params))
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
        """Feed prompt tokens to the repeat penalty's window (as llama-server does).

        DRY is not fed the prompt: it sees only the reply, so a reply that copies the
        prompt (a code edit) is not penalised, while one that repeats itself (a loop) is.
        """
        if self._penalties is None:
            return
        L = lib()
        for t in list(tokens)[-self.params.repeat_last_n :]:
            L.llama_sampler_accept(self._penalties, t)

    def sample(self, ctx: LlamaContext, index: int) -> int:
        """Sample the token that follows batch position ``index`` of the last decode.

        The chain records the token (``llama_sampler_sample`` accepts it), so call this
        once per emitted position, in order.
        """
        if self._fast_greedy:
            return int(np.argmax(ctx.logits(index)))
        return int(lib().llama_sampler_sample(self._chain, ctx.ptr, index))

    def traced(self, trace: SamplingTrace) -> Callable[[LlamaContext, int], int]:
        """A :meth:`sample` that also appends a :class:`TokenRecord` to ``trace``.

        It draws exactly what :meth:`sample` draws: for a sampler chain it does what
        ``llama_sampler_sample`` does on the CPU (fill a candidate array with the logits,
        ``llama_sampler_apply``, ``llama_sampler_accept`` the selected token), but on an
        array it can read afterwards, which holds the final probabilities in the order
        the dist sampler walked them. Costs about an n_vocab-sized pass or two per token.
        """
        trace.begin(None if self.params.greedy else self.seed,
                    0.0 if self.params.greedy else self.params.temperature)
        records = trace.records

        def sample(ctx: LlamaContext, index: int) -> int:
            tok, rec = self._sample_recorded(ctx, index)
            records.append(rec)
            return tok

        return sample

    def _sample_recorded(self, ctx: LlamaContext, index: int) -> tuple[int, TokenRecord]:
        raw = ctx.logits(index)
        n = raw.shape[0]
        # the best TOP_N + 1 by raw logit: TOP_N are listed, the next bounds the rest
        best = np.argpartition(raw, n - TOP_N - 1)[n - TOP_N - 1 :] if n > TOP_N + 1 else np.arange(n)
        best = best[np.argsort(-raw[best], kind="stable")]
        top = best[:TOP_N]
        logit_rest = float(raw[best[TOP_N]]) if len(best) > TOP_N else -np.inf
        if self._fast_greedy:
            tok = int(np.argmax(raw))
            m = float(raw[tok])
            z = float(np.exp(raw - m, dtype=np.float32).sum(dtype=np.float64))
            probs_top = np.exp(raw[top].astype(np.float64) - m) / z
            return tok, TokenRecord(
                token=tok,
                logit=m,
                prob=1.0 / z,
                top_ids=tuple(int(t) for t in top),
                top_logits=tuple(float(v) for v in raw[top]),
                top_probs=tuple(float(v) for v in probs_top),
                logit_rest=logit_rest,
                prob_rest=float(np.exp(logit_rest - m) / z),
                n_candidates=n,
            )
        L = lib()
        cand = self._candidates
        if cand is None:
            cand = np.zeros(n, dtype=np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]))
            self._candidates = cand
        cand["id"] = np.arange(n, dtype=np.int32)
        cand["logit"] = raw
        cand["p"] = 0.0
        arr = L.llama_token_data_array(
            data=cand.ctypes.data_as(ctypes.POINTER(L.llama_token_data)),
            size=n,
            selected=-1,
            sorted=False,
        )
        L.llama_sampler_apply(self._chain, ctypes.byref(arr))
        size, sel = int(arr.size), int(arr.selected)
        if not 0 <= sel < size:
            raise RuntimeError(f"the sampler chain selected index {sel} of {size}")
        # Samplers may move ``data`` (llama.h: "this pointer can be modified"): read it back.
        buf = (L.llama_token_data * size).from_address(ctypes.addressof(arr.data.contents))
        out = np.frombuffer(buf, dtype=cand.dtype, count=size)
        tok = int(out["id"][sel])
        L.llama_sampler_accept(self._chain, tok)
        if self.params.greedy:
            # greedy with penalties: the distribution is the softmax of the penalized logits
            lg = out["logit"].astype(np.float64)
            m = float(lg.max())
            p = np.exp(lg - m)
            p /= p.sum()
        else:
            p = out["p"].astype(np.float64)
        ids = out["id"]
        p_full = self._p_full
        if p_full is None:
            p_full = self._p_full = np.zeros(n, dtype=np.float64)
        p_full[ids] = p
        top_probs = p_full[top]
        p_full[ids] = 0.0  # left all-zero for the next position: O(candidates), not O(n_vocab)
        unlisted = ~np.isin(ids, top)
        draw_low = draw_high = None
        if not self.params.greedy:
            draw_low = float(p[:sel].sum())
            draw_high = draw_low + float(p[sel])
        return tok, TokenRecord(
            token=tok,
            logit=float(raw[tok]),
            prob=float(p[sel]),
            top_ids=tuple(int(t) for t in top),
            top_logits=tuple(float(v) for v in raw[top]),
            top_probs=tuple(float(v) for v in top_probs),
            logit_rest=logit_rest,
            prob_rest=float(p[unlisted].max()) if unlisted.any() else 0.0,
            n_candidates=int(np.count_nonzero(p)),
            draw_low=draw_low,
            draw_high=draw_high,
        )

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

