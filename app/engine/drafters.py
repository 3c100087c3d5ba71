"""Drafters: anything that proposes the next k tokens for the target to verify.

* :class:`DraftModelDrafter` runs a small model with the target's tokenizer greedily on
  its own llama.cpp context, stops early when its top-token probability falls below
  ``draft_p_min``, and keeps its KV cache in step with the accepted prefix: each round it
  evaluates only the tokens it has not seen (the target's correction or bonus token),
  across rounds and across chat turns.
* :class:`PromptLookupDrafter` needs no model: it finds the most recent earlier
  occurrence of the last n tokens (n from ``ngram_max`` down to ``ngram_min``) in the
  prompt plus the reply so far and proposes what followed it (Saxena 2023, "Prompt
  Lookup Decoding"; llama.cpp's ``lookup`` example). It shines when the reply repeats
  its input, as in code editing.

Plain decoding is the same loop with no drafter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

from app.engine.llama import DecodeAborted, LlamaContext, LlamaModel
from app.engine.prefix_cache import PrefixStateCache, reuse_prefix
from app.engine.prefix_cache import common_prefix_length as common_prefix_length  # re-exported
from app.engine.sampling import top_probability
from app.errors import TandemError
from app.options import SpecMode


class Drafter(Protocol):
    """Proposes draft tokens. Implementations keep any state they need between calls.

    A drafter without a model may also define ``token_keys() -> tuple[Hashable, ...]``:
    one key per token of its latest draft, grouping tokens that the target tends to
    accept equally often (prompt lookup: the matched n-gram size and the position; suffix
    lookup: its probability estimate, match length and source). Its drafts cost nothing,
    so when sampling the session proposes the longest draft and lets
    :meth:`app.engine.policy.DraftLengthPolicy.trim` cut it by those keys.

    A drafter with a model may define ``catch_up_time``: the seconds it spent evaluating
    tokens it had not seen, beyond what one round adds (after rounds that drafted
    nothing). Its :meth:`draft` calls include that time; the rounds count it apart from
    the draft steps (:attr:`~app.engine.stats.SpecStats.draft_catch_up_time`). It may
    also define ``time_step() -> float | None``: one draft step timed alone, which the
    rounds call when the policy asks (:meth:`~app.engine.policy.DraftLengthPolicy.
    take_step_timing`).
    """

    #: the mode this drafter implements
    kind: SpecMode
    #: forward passes the drafter has run so far (0 for drafters without a model)
    forward_passes: int
    #: the longest draft it can make (the rounds cap the draft length by it), or None
    #: when it drafts as long as asked (MTP's chained heads draft one token per head)
    draft_limit: int | None

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool] | None = None) -> None:
        """A reply starts after ``prompt`` (all its tokens; the last is not yet decoded).

        Called during the prefill; a draft model evaluates the prompt here so that its
        prefill time is not charged to drafting. ``should_stop`` turning True (a cancel)
        may end that early; the drafter then re-syncs on its next call.
        """

    def draft(self, context: Sequence[int], n_max: int) -> list[int]:
        """Propose up to ``n_max`` tokens to follow ``context``.

        Args:
            context: every token of the sequence so far; the last one is the token the
                target will evaluate next. Between calls it only grows by what the
                target accepted, except across replies (then :meth:`begin` is called).
            n_max: the most tokens to propose (already capped by max_tokens and n_ctx).
        """

    def close(self) -> None:
        """Free native resources. Idempotent."""


class DraftModelDrafter:
    """Greedy drafting with a second GGUF model that shares the target's tokenizer.

    Args:
        model: the draft model (checked compatible with the target by the caller).
        ctx: its context; ``n_ctx`` at least the target's.
        p_min: stop drafting when the draft's top-token probability falls below this
            (llama.cpp's ``--draft-p-min``); 0 disables the check.
        saved_states: where the draft's states are saved when a prompt that shares
            little with its cache comes, and put back on a return
            (:func:`~app.engine.prefix_cache.reuse_prefix`); None: none are kept.
    """

    kind = SpecMode.DRAFT_MODEL
    draft_limit: int | None = None

    def __init__(self, model: LlamaModel, ctx: LlamaContext, p_min: float = 0.0,
                 saved_states: PrefixStateCache | None = None) -> None:
        self.model = model
        self.saved_states = saved_states if saved_states is not None else PrefixStateCache(0)
        self.ctx = ctx
        self.p_min = p_min
        self.forward_passes = 0
        #: seconds of passes that caught up with more tokens than a round adds (after
        #: rounds that drafted nothing): drafting's cost, but no draft step of c
        self.catch_up_time = 0.0
        self._kv: list[int] = []  # tokens held in the draft KV cache, positions 0..len-1

    #: the most tokens a round adds that the draft has not evaluated: the target's own
    #: token, and the last draft token when the whole draft was accepted
    ROUND_TOKENS = 2
    #: tokens beyond :attr:`ROUND_TOKENS` from which they are a catch-up pass of their
    #: own; fewer ride in the draft step's pass (a second pass would cost about a step)
    CATCH_UP_MIN = 8

    def _sync(self, tokens: Sequence[int], need_logits: bool) -> None:
        """Make the draft KV cache hold exactly ``tokens``; logits for the last if asked.

        With logits asked, the pass that gives them is a draft step; when at least
        :attr:`CATCH_UP_MIN` more tokens than a round adds are missing (after rounds that
        drafted nothing), they are evaluated first in a pass of their own, a catch-up
        (:attr:`catch_up_time`), so that a draft step's time stays one step's. A failed
        pass forgets the cache (llama.cpp may keep part of a long batch), so the next
        call evaluates everything again.

        Raises:
            TandemError: llama.cpp failed to decode.
        """
        # with logits wanted, the last token is evaluated again even when it is held
        reuse = tokens[:-1] if need_logits and tokens else tokens
        keep = reuse_prefix(self.ctx, self._kv, reuse, self.saved_states,
                            recurrent=self.model.is_recurrent)
        todo = list(tokens[keep:])
        if not todo:
            return
        try:
            behind = len(todo) - self.ROUND_TOKENS
            if need_logits and behind >= self.CATCH_UP_MIN:
                t0 = time.perf_counter()
                self.ctx.decode(todo[:behind], keep, logits="none")
                self._kv.extend(todo[:behind])
                self.catch_up_time += time.perf_counter() - t0
                keep, todo = keep + behind, todo[behind:]
            self.ctx.decode(todo, keep, logits="last" if need_logits else "none")
        except BaseException:
            self.reset()
            raise
        self._kv.extend(todo)
        self.forward_passes += 1

    def time_step(self) -> float | None:
        """Seconds of one draft step, timed now for the draft-length policy: one token
        evaluated after the cache's last and removed again, twice, the faster of the two
        (the first may build the one-token graph again after a batch); nothing else
        changes and no draft step is counted (no draft is made). None with an empty
        cache, or when llama.cpp fails (the cache is then forgotten)."""
        n = len(self._kv)
        if n == 0 or n >= self.ctx.n_ctx:
            return None
        times = []
        try:
            for _ in range(2):
                t0 = time.perf_counter()
                self.ctx.decode([self._kv[-1]], n, logits="last")
                times.append(time.perf_counter() - t0)
                if not self.ctx.seq_rm(n, -1):
                    raise TandemError("the timed token could not be removed")
        except TandemError:
            self.reset()
            return None
        return min(times)

    def reset(self) -> None:
        """Forget the draft KV cache (the next call re-evaluates everything)."""
        self.ctx.clear()
        self._kv = []

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool] | None = None) -> None:
        passes, catch_up = self.forward_passes, self.catch_up_time
        try:
            with self.ctx.abortable(should_stop):
                self._sync(prompt[:-1], need_logits=False)
        except DecodeAborted:
            self.reset()
        # the prompt prefill is neither a draft step nor drafting's catch-up
        self.forward_passes, self.catch_up_time = passes, catch_up

    def draft(self, context: Sequence[int], n_max: int) -> list[int]:
        if n_max <= 0:
            return []
        room = self.ctx.n_ctx - len(context)
        n_max = min(n_max, room)
        if n_max <= 0:
            return []
        self._sync(context, need_logits=True)
        out: list[int] = []
        while True:
            logits = self.ctx.logits(-1)
            if self.p_min > 0.0:
                tok, p = top_probability(logits)
                if p < self.p_min:
                    break
            else:
                tok = int(logits.argmax())
            out.append(tok)
            if len(out) >= n_max:
                break  # the last draft token is evaluated next round if accepted
            if self.model.is_eog(tok):
                break  # nothing after the end of the reply can be emitted
            self.ctx.decode([tok], len(self._kv), logits="last")
            self._kv.append(tok)
            self.forward_passes += 1
        return out

    def close(self) -> None:
        self.ctx.close()


class PromptLookupDrafter:
    """Draft by n-gram lookup over the prompt and the reply so far (no model).

    Args:
        ngram_min, ngram_max: n-gram sizes tried, longest first (1 ≤ min ≤ max).

    An index from n-gram to the most recent start position that has a continuation is
    kept and extended incrementally, so a lookup costs O(ngram_max) dictionary probes.
    """

    kind = SpecMode.PROMPT_LOOKUP
    draft_limit: int | None = None

    def __init__(self, ngram_min: int = 2, ngram_max: int = 4) -> None:
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self.forward_passes = 0
        self._tokens: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}
        self._indexed_upto = 0  # n-grams whose continuation starts before this are indexed
        self._last: tuple[int, int] = (0, 0)  # (match length, draft length)

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool] | None = None) -> None:
        self._tokens = list(prompt)
        self._index.clear()
        self._indexed_upto = 0

    def _extend(self, context: Sequence[int]) -> None:
        n_old = len(self._tokens)
        if len(context) < n_old or (n_old and context[n_old - 1] != self._tokens[-1]):
            self.begin(context)
        elif len(context) > n_old:
            self._tokens.extend(context[n_old:])
        toks = self._tokens
        # Index every n-gram that ends before the last token, so that it has at least one
        # continuation token and is never the pattern being looked up itself.
        end_limit = len(toks) - 1
        for end in range(self._indexed_upto, end_limit):
            for n in range(self.ngram_min, self.ngram_max + 1):
                start = end - n + 1
                if start < 0:
                    break
                self._index[tuple(toks[start : end + 1])] = start
        self._indexed_upto = max(self._indexed_upto, end_limit)

    def draft(self, context: Sequence[int], n_max: int) -> list[int]:
        if n_max <= 0:
            return []
        self._extend(context)
        toks = self._tokens
        for n in range(self.ngram_max, self.ngram_min - 1, -1):
            if n > len(toks):
                continue
            start = self._index.get(tuple(toks[-n:]))
            if start is not None:
                cont = toks[start + n : start + n + n_max]
                if cont:
                    self._last = (self._match_length(start, n), len(cont))
                    return list(cont)
        self._last = (0, 0)
        return []

    #: how far back a match is measured (the longest match class starts at 12)
    MATCH_SPAN = 32

    def _match_length(self, start: int, n: int) -> int:
        """Tokens the context's end shares with the text before ``start + n`` (at least
        the matched n-gram ``n``; at most :data:`MATCH_SPAN`)."""
        toks = self._tokens
        m = n
        while m < self.MATCH_SPAN and start - (m - n) - 1 >= 0 and \
                toks[start - (m - n) - 1] == toks[-m - 1]:
            m += 1
        return m

    def token_keys(self) -> tuple[Hashable, ...]:
        """Per token of the latest draft, a key for the draft-length policy
        (:meth:`app.engine.policy.DraftLengthPolicy.trim`): ("lookup", match class,
        position capped at 3). The match class is that of the number of tokens the
        context's end shares with the text the draft follows: 0 for 1–2, 1 for 3–5, 2
        for 6–11, 3 for 12 or more (measured back to :data:`MATCH_SPAN`)."""
        m, length = self._last
        mc = 0 if m <= 2 else 1 if m <= 5 else 2 if m <= 11 else 3
        return tuple(("lookup", mc, min(i, 3)) for i in range(length))

    #: acceptance before any is measured, per match class (:meth:`token_keys`)
    _MATCH_PRIOR = (0.55, 0.8, 0.9, 0.96)

    @staticmethod
    def key_prior(key: Hashable) -> float:
        """The acceptance rate the draft-length policy assumes for a :meth:`token_keys`
        key before it has measured any: per match class, the rate of a draft token given
        the ones before it were accepted, measured on the recorded Gemma 3 270M replies
        of the built-in agent, code and chat sets (tests/engine/data; 0.55–0.88 after
        1–2 matched tokens, 0.80–0.90 after 3–5, 0.90–0.92 after 6–11, 0.95–0.97 after
        12 or more). Without it a flat prior holds back every draft on a CPU whose
        verification passes are dear, and prompt lookup never gets to show its worth.
        """
        if isinstance(key, tuple) and len(key) == 3 and key[0] == "lookup":
            return PromptLookupDrafter._MATCH_PRIOR[key[1]]
        return 0.6

    def close(self) -> None:
        self._index.clear()
