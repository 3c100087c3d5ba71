"""The MTP drafter: the multi-token-prediction (nextn) layers a model carries in its own
GGUF draft for it (GLM-4.5, DeepSeek V3, Qwen3.5, …), fed the target's hidden states.

The protocol, as llama.cpp runs it (``common/speculative.cpp``,
``common_speculative_impl_draft_mtp``; ``tools/server/server-context.cpp``):

* The model is loaded with its nextn layers (``llama_model_params.load_mtp``). A second
  context of the same model with ``ctx_type = LLAMA_CONTEXT_TYPE_MTP`` runs only those
  layers and keeps its own small KV cache (the nextn layers' attention; no recurrent
  state even for a hybrid trunk). ``ctx_other`` is only for a separate assistant model
  that shares the target's KV cache (Gemma 4); a head inside the target's GGUF leaves it
  unset.
* The target context outputs its trunk's hidden state for every token it evaluates
  (``llama_set_embeddings_nextn(ctx, true, masked=false)``; read with
  ``llama_get_embeddings_nextn``: the state after the final norm that the output head
  reads, one row of ``n_embd_out`` floats per token).
* The head's KV cache holds, at each position q, the token there paired with the
  target's hidden state at q − 1 (zeros at q = 0): every batch the target evaluates —
  prefill chunks and verification passes — is mirrored into it, each token with the
  row before it (a batch's first token with the last row of the previous batch).
  Positions the target rejects leave the head's cache as they leave the target's.
* A draft of up to k tokens after the last token x at position p (not yet evaluated by
  the target): evaluate (x, h of the target at p − 1) at p; the head's logits give d₁;
  then (d₁, the head's own hidden state of that step) at p + 1 gives d₂, and so on —
  one head evaluation per draft token. The draft positions leave the head's cache
  again; the verification pass brings the accepted ones back with the target's states.
* A model with one nextn layer (GLM-4.5, DeepSeek V3, Qwen3.5) chains that one head for
  every draft token. A model with several trained heads (Step-3.5, DeepSeek-V3.2/V4,
  Bailing-MoE 3, Hunyuan V3) runs head i for draft token i (llama.cpp's ``chain_heads``
  mode): the draft is at most as long as the heads are many; each head is a layer with
  KV entries of its own, so a mirrored batch is evaluated once per head (the batch's
  positions removed before each, so that every head writes its layer into the same
  cells), and draft step i evaluates the whole prefix (x, d₁ … dᵢ) under head i, paired
  with (h at p − 1, the states heads 0 … i − 1 returned), after removing the draft
  positions again. Here the mirrored rows ride along with each head's draft step.

A separate assistant GGUF (Gemma 4's ``gemma4-assistant``, :class:`AssistantDrafter`)
drafts the same way with one difference, llama.cpp's ``is_mem_shared`` mode: its
context is created with ``ctx_other`` = the target's context and *reads the target's KV
cache* (its layers attend over the target's last sliding-window and last full-attention
layer) instead of keeping its own. Nothing is mirrored; every draft token is evaluated
at the same position p (the last token's, which the target has not evaluated yet), the
first with the target's hidden state at p − 1 and each later one with the assistant's
own output row of the step before (``nextn.post_projection``). The assistant is loaded
as the session's drafter model (:meth:`app.engine.session.Session.set_draft_model`
recognises it by its architecture) after the load check's child ran it with its target.

Here the target's context calls :meth:`MTPDrafter.observe` after each chunk it evaluates
(:meth:`app.engine.llama.LlamaContext.set_decode_listener`), which keeps the hidden
rows; :meth:`MTPDrafter.draft` first mirrors the rows of the accepted positions into the
head's cache (one head evaluation: a draft step's cost), then drafts. Verification and
rollback of the target are the loop's as for every drafter, so the output is the
target's own whatever the head proposes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.catalog.gguf_meta import inspect_gguf
from app.catalog.loadcheck import cached_verdict
from app.catalog.pairing import ASSISTANT_TARGETS
from app.engine.drafter_kinds import DrafterHost, DrafterPrediction, Unavailable, register
from app.engine.drafters import Drafter, DraftModelDrafter, common_prefix_length
from app.engine.llama import (
    CONTEXT_TYPE_MTP,
    LlamaContext,
    LlamaModel,
    mtp_chain_missing,
    mtp_staging_missing,
)
from app.engine.sampling import top_probability
from app.errors import TandemError
from app.options import DrafterInfo, DrafterNeeds, SpecMode, SpeculationConfig, mtp_draft_limit

log = logging.getLogger(__name__)

#: an MTP head's drafts fall off quickly with depth (llama.cpp's default draft length
#: for ``draft-mtp`` is its draft default, 3); the cost-aware policy shortens it further
MTP_K = 3

#: The acceptance rate α assumed for an MTP head before it has drafted here: the lower
#: end of what DeepSeek-V3's report measured for its MTP module's token ("the acceptance
#: rate of the second token prediction ranges between 85% and 90% across various
#: generation topics", DeepSeek-V3 Technical Report, arXiv:2412.19437, §5.4.3). That is
#: the head's first draft token; the head chained for later ones was not trained for
#: them and falls off with depth, which the cost-aware draft length answers by
#: verifying fewer. Replies measured here replace it (Auto, the gauge).
MTP_PRIOR_ACCEPTANCE = 0.85

MTP_INFO = DrafterInfo(
    mode="mtp", label="MTP (built into the model)", words="MTP",
    label_with_assistant="MTP (assistant: {name})",
    needs=DrafterNeeds.MTP_HEAD, default_k=MTP_K, options=("draft_p_min",),
    auto_rank=3, cli_flag="--mtp",
    summary="the multi-token-prediction (nextn) layers in the target's own GGUF, or an "
            "MTP assistant GGUF paired with it, draft from its hidden states",
    explanation=("The multi-token-prediction (nextn) layers in this model's own GGUF "
                 "draft from the target's hidden states; no second model"),
    picker_expect="from the head's measured cost",
    picker_status="the model's own MTP head",
    picker_tooltip=("Drafts with the multi-token-prediction (nextn) layers this model "
                    "carries, fed the target's hidden states; no second model. The "
                    "speedup assumes the acceptance rate DeepSeek-V3 reports for its MTP "
                    f"head ({MTP_PRIOR_ACCEPTANCE:.0%}) and the head's cost c measured by "
                    "the load check."),
    prior_acceptance=MTP_PRIOR_ACCEPTANCE)

#: rows for the head: tokens, their positions, the target's hidden state one position
#: before each
_Rows = tuple[list[int], list[int], list[npt.NDArray[np.float32]]]


def _pick(logits: npt.NDArray[np.float32], p_min: float) -> int | None:
    """The greedy draft token of one row of logits, or None when ``p_min`` > 0 and its
    probability (:func:`app.engine.sampling.top_probability`) is under ``p_min``."""
    if p_min <= 0.0:
        return int(logits.argmax())
    tok, p = top_probability(logits)
    return tok if p >= p_min else None


def _close(target_ctx: LlamaContext, listener: Callable[[Sequence[int], int], None],
           ctx: LlamaContext) -> None:
    """Stop watching the target's decodes (when ``listener`` is still the one installed)
    and free the drafter's context."""
    if not target_ctx.closed and target_ctx.decode_listener == listener:
        target_ctx.set_decode_listener(None)
    ctx.close()


class MTPDrafter:
    """Drafts with the target model's own nextn layers on an MTP context.

    Args:
        target_ctx: the target's context; its decodes are mirrored through
            :meth:`observe` (installed by :meth:`listen`).
        ctx: the MTP context of the same model
            (``LlamaContext(context_type=CONTEXT_TYPE_MTP)``), ``n_ctx`` at least the
            target's.
        p_min: stop drafting when the head's top-token probability falls below this.
    """

    def __init__(self, target_ctx: LlamaContext, ctx: LlamaContext, p_min: float = 0.0) -> None:
        self.kind = SpecMode(MTP_INFO.mode)
        self.target_ctx = target_ctx
        self.ctx = ctx
        self.p_min = p_min
        self.forward_passes = 0
        #: seconds of passes over positions the head missed beyond what a round adds
        #: (after rounds that drafted nothing): drafting's cost, but no draft step of c
        self.catch_up_time = 0.0
        #: the last draft's length, and the context's then: the round after it leaves up
        #: to that many rows to mirror
        self._last_draft, self._drafted_at = 0, 0
        #: the head's cache: the token at each position 0, 1, …
        self._fed: list[int] = []
        #: (token, target hidden state) by position, as the target evaluated them
        self._rows: dict[int, tuple[int, npt.NDArray[np.float32]]] = {}
        self._zero = np.zeros(ctx.model.n_embd_out, dtype=np.float32)
        #: the target's decode count when this drafter last saw a decode
        self._seen = -1
        #: the target's state loads when this drafter last checked its rows
        self._loads = target_ctx.state_loads
        #: the trained heads chained one per draft position (1: one head for every one)
        self.n_heads = max(1, ctx.model.n_layer_nextn)
        #: the longest draft (the session caps its draft length by it), None: unbounded
        self.draft_limit: int | None = mtp_draft_limit(ctx.model.n_layer_nextn)

    # -- the target's side --------------------------------------------------------------
    def listen(self) -> bool:
        """Mirror the target's decodes from now on (until the target's listener is
        replaced: the session clears it when a reply starts). Returns False when the
        target evaluated something since this drafter last saw a decode (a reply with
        another drafter or none): the head's cache then lacks those positions."""
        self.target_ctx.set_decode_listener(self.observe)
        return self._seen == self.target_ctx.decode_count

    def observe(self, tokens: Sequence[int], pos0: int) -> None:
        """The target evaluated ``tokens`` at ``pos0…``: keep their hidden states. Rows
        at or after ``pos0`` from earlier decodes are stale (the target rolled back)."""
        self._forget_if_restored()
        if self._rows and max(self._rows) >= pos0:
            for q in [q for q in self._rows if q >= pos0]:
                del self._rows[q]
        h = self.target_ctx.hidden_states(len(tokens))
        for i, tok in enumerate(tokens):
            self._rows[pos0 + i] = (tok, h[i])
        self._seen = self.target_ctx.decode_count

    def _forget_if_restored(self) -> None:
        """Forget every row when the target put back a saved state since they were
        seen (:mod:`app.engine.prefix_cache`; nothing is decoded then): a row may hold
        the same token at the same position in another context. Positions without a
        row pair with zeros (see :meth:`_sync`); the last one's round decodes plainly."""
        if self._loads != self.target_ctx.state_loads:
            self._loads = self.target_ctx.state_loads
            self._rows = {}

    # -- the head's cache -----------------------------------------------------------------
    def _sync(self, context: Sequence[int]) -> tuple[npt.NDArray[np.float32] | None, _Rows]:
        """Bring the head's cache to ``context[:-1]`` (what the target's holds): drop
        what disagrees, and return the target's hidden state at the last of those
        positions (None when it was not seen) and the rows still to evaluate there
        (tokens, positions, the target's states one position earlier).

        llama.cpp needs a sequence's positions consecutive, so every position is
        evaluated; one whose preceding state was not seen (a reply regenerated from
        inside the cache) pairs with zeros, as llama.cpp pairs position 0: only that
        position's drafts are the worse for it.
        """
        self._forget_if_restored()
        n_past = len(context) - 1
        keep = common_prefix_length(self._fed[:n_past], context[:n_past])
        if keep < len(self._fed):
            if not self.ctx.seq_rm(keep, -1):
                self.ctx.clear()
                keep = 0
            del self._fed[keep:]
        todo: _Rows = ([], [], [])
        for q in range(len(self._fed), n_past):
            prev = self._rows.get(q - 1)
            ok = prev is not None and prev[0] == context[q - 1]
            todo[0].append(context[q])
            todo[1].append(q)
            todo[2].append(prev[1] if prev is not None and ok else self._zero)
        self._fed.extend(todo[0])
        for q in [q for q in self._rows if q < n_past - 1]:
            del self._rows[q]  # the next position pairs with n_past − 1's state only
        if n_past == 0:
            return self._zero, todo
        last = self._rows.get(n_past - 1)
        return (last[1] if last is not None and last[0] == context[n_past - 1] else None), todo

    def _evaluate(self, rows: _Rows, logits_last: bool) -> None:
        """Evaluate rows on the head, ``n_batch`` at a time (logits for the very last
        when asked): each evaluation is one forward pass of the head."""
        toks, poss, hs = rows
        step = self.ctx.n_batch
        for i in range(0, len(toks), step):
            last = logits_last and i + step >= len(toks)
            self.ctx.decode_with_hidden(toks[i:i + step], poss[i:i + step],
                                        np.stack(hs[i:i + step]), logits_last=last)
            self.forward_passes += 1

    # -- Drafter ------------------------------------------------------------------------
    def _mirror(self, rows: _Rows) -> None:
        """Evaluate rows without logits under every head (llama.cpp's ``process``): with
        chained heads, the rows' positions leave the cache before each head re-evaluates
        them, so every head writes its own layer's entries into the same cells."""
        if self.n_heads == 1 or not rows[0]:
            self._evaluate(rows, logits_last=False)
            return
        try:
            for head in range(self.n_heads):
                self._under_head(head, rows[1][0])
                self._evaluate(rows, logits_last=False)
        finally:
            self.ctx.set_nextn_layer_offset(0)

    def _under_head(self, head: int, pos0: int) -> None:
        """Remove positions ``pos0…`` from the head's cache and select ``head``."""
        if not self.ctx.seq_rm(pos0, -1):
            raise TandemError(f"the MTP cache could not remove positions {pos0}…")
        self.ctx.set_nextn_layer_offset(head)

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool] | None = None) -> None:
        passes = self.forward_passes
        try:
            self._mirror(self._sync(prompt)[1])
        except TandemError:
            self.reset()
        self.forward_passes = passes  # mirroring the prompt is prefill, not a draft step

    def draft(self, context: Sequence[int], n_max: int) -> list[int]:
        n_max = min(n_max, self.ctx.n_ctx - len(context), self.draft_limit or n_max)
        if n_max <= 0:
            return []
        if self.ctx.n_threads != self.target_ctx.n_threads:
            self.ctx.set_threads(self.target_ctx.n_threads, self.target_ctx.n_threads)
        out: list[int] = []
        try:
            h, todo = self._sync(context)
            if h is None:
                self._mirror(todo)
                return []  # the target's state there was not seen: this round is plain
            todo = self._catch_up(todo, len(context))
            if self.n_heads > 1:
                self._chain_heads(context, h, todo, n_max, out)
            else:
                self._chain(context, h, todo, n_max, out)
        except TandemError as exc:
            log.warning("the MTP head failed (%s); its cache starts again", exc)
            self.reset()  # the head's cache is unknown now; the rounds go on
            return out
        # the first row (the last token with the target's state before it) is what the
        # verification would mirror anyway: it stays; the draft's own rows leave again
        n_past = len(context) - 1
        if not self.ctx.seq_rm(n_past + 1, -1):
            self.reset()
        else:
            self._fed.append(context[-1])
        self._last_draft, self._drafted_at = len(out), len(context)
        return out

    def _catch_up(self, todo: _Rows, n_context: int) -> _Rows:
        """Mirror the rows beyond what one round adds (after rounds that drafted
        nothing) in a pass of their own, timed into :attr:`catch_up_time` and not
        counted as a draft step (as
        :meth:`app.engine.drafters.DraftModelDrafter._sync` does, from as many rows);
        returns the rows left for the draft step's first pass."""
        # the head drops its draft rows after drafting: the round right after a draft
        # leaves its accepted tokens to mirror (the context grew by them and one more)
        allowed = DraftModelDrafter.ROUND_TOKENS
        if n_context - self._drafted_at <= self._last_draft + 1:
            allowed = max(allowed, self._last_draft + 1)
        behind = len(todo[0]) - allowed
        if behind < DraftModelDrafter.CATCH_UP_MIN:
            return todo
        t0, passes = time.perf_counter(), self.forward_passes
        self._mirror((todo[0][:behind], todo[1][:behind], todo[2][:behind]))
        self.forward_passes = passes
        self.catch_up_time += time.perf_counter() - t0
        return todo[0][behind:], todo[1][behind:], todo[2][behind:]

    def _chain(self, context: Sequence[int], h: npt.NDArray[np.float32], todo: _Rows,
               n_max: int, out: list[int]) -> None:
        """Draft into ``out``: the head chained on its own hidden states, one pass per
        token (the first pass also mirrors ``todo``), greedy, stopping at ``n_max``
        tokens, an end-of-generation token or a top probability under ``p_min``."""
        pos, tok = len(context) - 1, context[-1]
        rows: _Rows = (todo[0] + [tok], todo[1] + [pos], todo[2] + [h])
        while True:
            self._evaluate(rows, logits_last=True)
            picked = _pick(self.ctx.logits(-1), self.p_min)
            if picked is None:
                return
            tok = picked
            out.append(tok)
            if len(out) >= n_max or self.ctx.model.is_eog(tok):
                return
            pos += 1
            rows = ([tok], [pos], [self.ctx.hidden_states(1)[0]])

    def _chain_heads(self, context: Sequence[int], h: npt.NDArray[np.float32], todo: _Rows,
                     n_max: int, out: list[int]) -> None:
        """Draft into ``out`` with head i for draft token i (llama.cpp's ``chain_heads``):
        head i evaluates ``todo`` and the prefix (x, d₁ … dᵢ) at p … p + i, x with the
        target's state ``h`` and dⱼ with the state head j − 1 returned, logits for the
        last; heads left after the draft stops (``n_max``, an end-of-generation token, a
        top probability under ``p_min``) evaluate ``todo`` and x only, so that every
        head's layer holds the rows the verification keeps. One pass per head."""
        pos, tok = len(context) - 1, context[-1]
        prefix: _Rows = ([tok], [pos], [h])
        start = todo[1][0] if todo[1] else pos
        drafting = True
        try:
            for head in range(self.n_heads):
                self._under_head(head, start)
                if not drafting:
                    self._evaluate((todo[0] + [tok], todo[1] + [pos], todo[2] + [h]),
                                   logits_last=False)
                    continue
                self._evaluate((todo[0] + prefix[0], todo[1] + prefix[1], todo[2] + prefix[2]),
                               logits_last=True)
                d = _pick(self.ctx.logits(-1), self.p_min)
                if d is None:
                    drafting = False
                    continue
                out.append(d)
                drafting = len(out) < n_max and not self.ctx.model.is_eog(d)
                if drafting:
                    prefix[0].append(d)
                    prefix[1].append(pos + len(out))
                    prefix[2].append(self.ctx.hidden_states(1)[0])
        finally:
            self.ctx.set_nextn_layer_offset(0)

    def reset(self) -> None:
        """Forget the head's cache (rebuilt from the rows the target evaluates next)."""
        self.ctx.clear()
        self._fed = []

    def close(self) -> None:
        _close(self.target_ctx, self.observe, self.ctx)


class AssistantDrafter:
    """Drafts with a separate MTP assistant model that shares the target's KV cache
    (llama.cpp's ``is_mem_shared`` protocol; see the module docstring).

    Args:
        target_ctx: the target's context; its decodes are watched through
            :meth:`observe` (installed by :meth:`listen`) for the hidden state of the
            position before the draft.
        ctx: the assistant's MTP context, created with ``ctx_other=target_ctx``.
        p_min: stop drafting when the assistant's top-token probability falls below this.
    """

    def __init__(self, target_ctx: LlamaContext, ctx: LlamaContext, p_min: float = 0.0) -> None:
        self.kind = SpecMode(MTP_INFO.mode)
        self.target_ctx = target_ctx
        self.ctx = ctx
        self.p_min = p_min
        self.forward_passes = 0
        #: drafts as long as asked (:attr:`app.engine.drafters.Drafter.draft_limit`)
        self.draft_limit: int | None = None
        #: (token, target hidden state) by position, from the target's latest decode
        self._rows: dict[int, tuple[int, npt.NDArray[np.float32]]] = {}
        #: the target's decode count when this drafter last saw a decode
        self._seen = -1

    def listen(self) -> None:
        """Watch the target's decodes from now on (the session clears the listener when
        a reply starts) and forget the rows seen before: a reply's prefill may put back
        a saved state (:mod:`app.engine.prefix_cache`) without decoding anything, and a
        row kept from an earlier reply can then hold the same token at the same
        position in another context. Until the target decodes again, drafts are empty
        (the round decodes plainly)."""
        self._rows = {}
        self.target_ctx.set_decode_listener(self.observe)

    def observe(self, tokens: Sequence[int], pos0: int) -> None:
        """The target evaluated ``tokens`` at ``pos0…``: keep this chunk's hidden states
        (a draft needs only the row before its position, which the latest chunk holds)."""
        h = self.target_ctx.hidden_states(len(tokens))
        self._rows = {pos0 + i: (tok, h[i]) for i, tok in enumerate(tokens)}
        self._seen = self.target_ctx.decode_count

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool] | None = None) -> None:
        """Nothing to catch up: the assistant reads the target's own cache."""

    def draft(self, context: Sequence[int], n_max: int) -> list[int]:
        pos = len(context) - 1
        n_max = min(n_max, self.ctx.n_ctx - len(context))
        prev = self._rows.get(pos - 1)
        if (n_max <= 0 or prev is None or prev[0] != context[pos - 1]
                or self._seen != self.target_ctx.decode_count):
            # the target's state there was not seen, or the target decoded since
            # without this drafter watching (as :class:`MTPDrafter` checks): plain round
            return []
        if self.ctx.n_threads != self.target_ctx.n_threads:
            self.ctx.set_threads(self.target_ctx.n_threads, self.target_ctx.n_threads)
        out: list[int] = []
        tok, h = context[-1], prev[1]
        try:
            while len(out) < n_max:
                # every step at the same position: the target's cache holds exactly the
                # positions before it, and the assistant writes nothing there
                self.ctx.decode_with_hidden([tok], [pos], h[None, :], logits_last=True)
                self.forward_passes += 1
                picked = _pick(self.ctx.logits(-1), self.p_min)
                if picked is None:
                    break
                tok = picked
                out.append(tok)
                if self.ctx.model.is_eog(tok):
                    break
                h = self.ctx.hidden_states(1)[0]
        except TandemError as exc:
            log.warning("the MTP assistant failed (%s); this round drafts less", exc)
        return out

    def reset(self) -> None:
        """Forget the hidden states seen (the next target decode brings new ones)."""
        self._rows = {}

    def close(self) -> None:
        _close(self.target_ctx, self.observe, self.ctx)


def assistant_context(assistant: LlamaModel, target_ctx: LlamaContext) -> LlamaContext:
    """The MTP context of ``assistant`` on ``target_ctx``'s KV cache: one token a pass,
    logits and hidden state for it, ``n_ctx`` and threads as the target's, and the
    target's KV settings (the assistant reads the cache's tensors as the target laid
    them out: with flash attention off llama.cpp stores V transposed).

    Raises:
        ModelLoadError: llama.cpp could not create it.
    """
    return LlamaContext(assistant, n_ctx=target_ctx.n_ctx, n_batch=1,
                        n_threads=target_ctx.n_threads, n_outputs_max=1,
                        context_type=CONTEXT_TYPE_MTP, ctx_other=target_ctx,
                        **target_ctx.kv_settings)


def _create_assistant(host: DrafterHost, spec: SpeculationConfig, assistant: LlamaModel
                      ) -> Drafter | Unavailable:
    """The session's assistant drafter (made once per loaded assistant) listening to this
    reply's target decodes, or why it cannot draft."""
    missing = mtp_staging_missing()
    if missing:
        return Unavailable(f"This llama-cpp-python build lacks {missing}, which MTP "
                           "needs; decoding without speculation.")

    def make() -> Drafter | Unavailable:
        tctx = host.ctx
        try:
            ctx = assistant_context(assistant, tctx)
        except TandemError as exc:
            return Unavailable(f"The MTP assistant's context could not be created: {exc}")
        return AssistantDrafter(tctx, ctx)

    made = host.kept_drafter(SpecMode(MTP_INFO.mode), make)
    if isinstance(made, AssistantDrafter):
        made.p_min = spec.draft_p_min
        made.listen()
    return made


def _probe_says(target: LlamaModel) -> str | None:
    """Why the load check's child could not run this model's MTP head (it crashed or
    failed there), or None when it ran or was not checked."""
    for n_gpu_layers in (target.n_gpu_layers_requested, None):
        try:
            verdict = cached_verdict(target.path, n_gpu_layers=n_gpu_layers)
        except TandemError:
            return None
        if verdict is not None and verdict.mtp is not None:
            return None if verdict.mtp == "ok" else verdict.mtp
    return None


def create(host: DrafterHost, spec: SpeculationConfig) -> Drafter | Unavailable:
    """The session's MTP drafter (made once) listening to this reply's target decodes:
    the loaded MTP assistant's when there is one, else the target's own nextn layers';
    or why the model or the build cannot draft with MTP."""
    target = host.target
    if host.loaded_assistant is not None:
        return _create_assistant(host, spec, host.loaded_assistant)
    if target.n_layer_nextn <= 0:
        wants = [a for a, targets in ASSISTANT_TARGETS.items()
                 if target.meta("general.architecture") in targets]
        more = f" and no MTP assistant ({wants[0]}) is loaded" if wants else ""
        return Unavailable(f"This model carries no MTP (nextn) layers{more}; decoding "
                           "without speculation.")
    missing = mtp_staging_missing()
    if missing:
        return Unavailable(f"This llama-cpp-python build lacks {missing}, which MTP "
                           "needs; decoding without speculation.")
    if not target.mtp_loaded:
        return Unavailable("The model was loaded without its MTP layers; reload it to "
                           "draft with them.")
    chain_missing = mtp_chain_missing() if target.n_layer_nextn > 1 else None
    if chain_missing:
        return Unavailable(f"This llama-cpp-python build lacks {chain_missing}, which "
                           f"this model's {target.n_layer_nextn} chained MTP heads need; "
                           "decoding without speculation.")

    def make() -> Drafter | Unavailable:
        failed = _probe_says(target)
        if failed:
            return Unavailable(f"This model's MTP layers failed the load check: {failed}.")
        tctx = host.ctx
        try:
            ctx = LlamaContext(target, n_ctx=tctx.n_ctx, n_batch=tctx.n_batch,
                               n_threads=tctx.n_threads, n_outputs_max=1,
                               context_type=CONTEXT_TYPE_MTP)
        except TandemError as exc:
            return Unavailable(f"The MTP context could not be created: {exc}")
        return MTPDrafter(tctx, ctx)

    made = host.kept_drafter(SpecMode(MTP_INFO.mode), make)
    if isinstance(made, MTPDrafter):
        made.p_min = spec.draft_p_min
        if not made.listen():
            # the head must see the target's state at every position it holds: the
            # prefill evaluates the whole conversation again (once, after a switch)
            host.drop_target_cache()
            made.reset()
    return made


def predict(target: Path, n_gpu_layers: int | None = None,
            assistant: Path | None = None) -> DrafterPrediction | None:
    """What the MTP head of the GGUF at ``target`` (or the MTP ``assistant`` GGUF paired
    with it) promises before it drafts: α = :data:`MTP_PRIOR_ACCEPTANCE`, c as the load
    check's child measured it (:attr:`app.catalog.loadcheck.LoadVerdict.mtp_cost_ratio`
    of the target's verdict, or of the pair's; checked with ``n_gpu_layers``, else with
    the build's default), k = :data:`MTP_K` (at most the number of heads of a model with
    several chained ones). None when the file (pair) was not checked yet, its head did
    not run there, or c was not measured (a verdict remembered before it was)."""
    for layers in dict.fromkeys((n_gpu_layers, None)):
        try:
            verdict = (cached_verdict(target, n_gpu_layers=layers) if assistant is None
                       else cached_verdict(assistant, n_gpu_layers=layers, target=target))
        except TandemError:
            return None
        if verdict is not None and verdict.mtp == "ok" and verdict.mtp_cost_ratio is not None:
            k = _draft_length(target) if assistant is None else MTP_K
            return DrafterPrediction(MTP_PRIOR_ACCEPTANCE, verdict.mtp_cost_ratio, k,
                                     "measured by the load check")
    return None


def _draft_length(target: Path) -> int:
    """:data:`MTP_K`, capped at the number of heads where the GGUF at ``target`` carries
    several chained ones (the drafter drafts no more; :func:`app.options.mtp_draft_limit`)."""
    try:
        limit = mtp_draft_limit(inspect_gguf(target).nextn_layers)
    except TandemError:
        return MTP_K
    return min(MTP_K, limit) if limit is not None else MTP_K


KIND = register(MTP_INFO, create, predict=predict)
