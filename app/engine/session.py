"""A loaded target (and optional draft) model, and the speculative decoding loop.

:class:`Session` owns the native objects (target model and context, draft model and
context) and the record of which tokens sit in the target's KV cache, so that a follow-up
chat turn re-uses the cached prefix instead of re-evaluating the whole conversation.

The loop (:meth:`Session.generate`), per round:

1. the drafter proposes up to k tokens, capped by ``max_tokens`` and the room left in
   n_ctx (plain decoding: no drafter, k = 0);
2. the target evaluates [last token + drafts] in one batch with logits at every position;
3. each position is sampled with the target's own sampler chain; a draft token is
   accepted while it equals the sample, and the first sample that differs (or the bonus
   sample after a fully accepted draft) is the round's own token;
4. rejected positions are removed from the target's KV cache (the return value of
   ``llama_memory_seq_rm`` is checked); the draft model re-syncs its own cache by
   common prefix on its next call.

Plain decoding runs the same loop with an empty draft, so both modes share one path.
Models whose memory cannot roll back (recurrent, hybrid) decode plainly, and the stats say
so. Cancellation is checked once per round and between prefill chunks.
"""

from __future__ import annotations

import logging
import os
import statistics
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.catalog.model_file import model_entry_path
from app.catalog.pairing import PairResult, check_pair
from app.engine.chat import ChatFormat, ChatMessage
from app.engine.divergence import SamplingTrace
from app.engine.drafters import (
    Drafter,
    DraftModelDrafter,
    PromptLookupDrafter,
    common_prefix_length,
)
from app.engine.events import Event, Finished, FinishReason, StatsUpdate, TextDelta
from app.engine.exact import EXACT_CONTEXT, EXACT_KV_BLOCK, exact_blockers
from app.engine.llama import (
    VOCAB_TYPE_NAMES,
    DecodeAborted,
    LlamaContext,
    LlamaModel,
    ProgressCallback,
    supports_gpu_offload,
    tiled_kquant_matmul_disabled,
    tiled_mm_env_at_start,
)
from app.engine.policy import DraftLengthPolicy, PassTimes
from app.engine.probe import probe_model
from app.engine.sampling import TargetSampler
from app.engine.stats import SpecStats
from app.engine.suffix import SuffixDrafter, SuffixIndex
from app.engine.text import TextStream, draft_length_before_end
from app.errors import (
    ContextOverflowError,
    IncompatibleDraftError,
    LoadCancelledError,
    ModelLoadError,
    TandemError,
)
from app.options import SamplingParams, SpecMode, SpeculationConfig

log = logging.getLogger(__name__)

#: How a drafter without a model (``token_keys``: prompt lookup, suffix lookup) gets its
#: draft length: ``choose`` (before drafting, from α̂: :meth:`DraftLengthPolicy.choose`,
#: as for a draft model), ``trim`` (the longest draft, cut after drafting where each
#: token's measured acceptance stops paying: :meth:`DraftLengthPolicy.trim`) or ``both``
#: (chosen, then cut).
FreeDraftRule = Literal["choose", "trim", "both"]

#: None: the measured rule (:func:`free_draft_rule`); a rule: that one always (for an A/B).
FREE_DRAFT_RULE: FreeDraftRule | None = None


def free_draft_rule(greedy: bool) -> FreeDraftRule:
    """The draft-length rule of a free drafter: ``both`` when greedy, ``trim`` when sampling
    (unless :data:`FREE_DRAFT_RULE` forces one).

    Measured on Gemma 3 270M, 2 threads, k = 8. Sampling, temperature 0.8: the cut took
    the suffix drafter on builtin:chat from 0.85× to 1.00× plain in a timed A/B
    (bench/trim_ab.py, docs/closing-note-round4.md). Greedy, replayed on recorded replies
    with measured pass times (bench/policy_replay.py --rules choose,trim,both --repeat 3,
    docs/closing-note-round6.md), ``both`` against ``choose``: 1.814× against 1.816× on
    builtin:code, 1.745× against 1.721× on builtin:agent, 1.571× against 1.534× on
    builtin:chat (``trim``: 1.799×, 1.742×, 1.598×). Timed A/Bs (bench/trim_ab.py
    --rules choose,both, one run each on code and agent) differed by −3.0 % to +3.8 %
    between the two, within this CPU's noise.
    """
    if FREE_DRAFT_RULE is not None:
        return FREE_DRAFT_RULE
    return "both" if greedy else "trim"

#: Deliberate bugs that tests inject (``Session._fault``) to show that the divergence
#: check calls them suspect (issue 8). ``keep-rejected-kv``: after a rejection the
#: rejected draft tokens stay in the target's KV cache and the positions move past them,
#: so the model attends to tokens that are not in the text (a stale cache after a
#: rollback). ``extra-draw``: after a rejection the sampler also samples the next batch
#: position and throws the token away, so every later draw is one step out of line.
EngineFault = Literal["keep-rejected-kv", "extra-draw"]


def max_threads() -> int:
    """The most CPU threads a config may ask for: 4 × the logical CPUs, at most 512."""
    return min(512, 4 * (os.cpu_count() or 1))


def default_threads() -> int:
    """CPU threads for decoding: all cores up to 4, else half (skip hyper-threads)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 2
    return n if n <= 4 else max(4, n // 2)


class SessionConfig(BaseModel):
    """What to load and how.

    ``n_gpu_layers`` None: all layers on the GPU when the build supports offload, else 0.
    ``n_threads`` None: :func:`default_threads`.
    ``exact_verification``: load the configuration in which verification batches were
    measured bit for bit like one-token passes (docs/proof.md; flash attention on, a Q8_0 KV
    cache, no weight repacking; CPU backend, weights of the types in
    :mod:`app.engine.exact`). Where that is not possible a note says why and llama.cpp's
    defaults are kept.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_path: Path
    draft_path: Path | None = None
    n_ctx: int = Field(4096, ge=16)
    n_batch: int = Field(512, ge=1)
    n_gpu_layers: int | None = None
    n_threads: int | None = Field(None, ge=1)
    use_mmap: bool = True
    exact_verification: bool = False

    @field_validator("n_threads")
    @classmethod
    def _threads_this_computer_can_use(cls, v: int | None) -> int | None:
        # More threads than cores only make the threads wait on each other; far more is a
        # typo. llama.cpp itself stops at GGML_MAX_N_THREADS (512).
        if v is not None and v > max_threads():
            raise ValueError(
                f"{v} threads is more than this computer can use: it has {os.cpu_count() or 1} CPU "
                f"threads, so at most {max_threads()} are allowed"
            )
        return v


def _exact_possible(config: SessionConfig, notes: list[str]) -> bool:
    """Whether exact verification holds for this target here; a note says why not."""
    on_gpu = config.n_gpu_layers != 0 and supports_gpu_offload()
    tiled_off = tiled_kquant_matmul_disabled()
    blockers = exact_blockers(config.target_path, tiled_off=tiled_off)
    name = Path(config.target_path).name
    if blockers:
        kquant = not tiled_off and not set(blockers) - {"Q4_K", "Q6_K"}
        notes.append(
            f"Exact verification needs weights whose CPU kernels do not change with the batch "
            f"size; {name} has {', '.join(blockers)} weights, so speculative output can still "
            "part from plain decoding at near-ties. "
            + (_tiled_kernel_advice() + ", or convert the model" if kquant else "Convert the model")
            + f": python -m app.engine.exact {name} <new file> Q5_1"
        )
    if on_gpu:
        notes.append(
            "Exact verification is measured on the CPU backend only; with layers on the GPU "
            "speculative output can part from plain decoding at near-ties."
        )
    return not blockers and not on_gpu


def _tiled_kernel_advice() -> str:
    """How to get ggml's tiled K-quant kernel off (it is read once per process)."""
    user = tiled_mm_env_at_start()
    if user is not None:
        return (f"GGML_CPU_TILED_MM is set to {user!r} in Tandem's environment; start it with "
                "GGML_CPU_TILED_MM=0 for these weights")
    return ("Restart Tandem with exact verification on: it then starts with ggml's tiled "
            "K-quant kernel off (GGML_CPU_TILED_MM=0), which these weights need")


def physical_memory_bytes() -> int | None:
    """Total physical memory, bytes, where the OS tells (POSIX ``sysconf``), else None."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _checked_context_length(model: LlamaModel, config: SessionConfig, notes: list[str]) -> int:
    """The context length to create: the requested one, capped at the model's training
    context (beyond it quality collapses and memory grows for nothing), and refused when
    its KV cache alone would not fit in this computer's memory.

    Raises:
        ModelLoadError: the KV cache of the (capped) context exceeds 90% of physical memory.
    """
    n_ctx = config.n_ctx
    if model.n_ctx_train > 0 and n_ctx > model.n_ctx_train:
        notes.append(
            f"The context length was lowered from {n_ctx} to {model.n_ctx_train} tokens, the "
            "length this model was trained for."
        )
        n_ctx = model.n_ctx_train
    total = physical_memory_bytes()
    on_cpu = config.n_gpu_layers == 0 or not supports_gpu_offload()
    if total and on_cpu:
        need = model.kv_cache_bytes(n_ctx)
        if need > 0.9 * total:
            raise ModelLoadError(
                f"A context of {n_ctx} tokens needs about {need / 2**30:.1f} GiB for its KV "
                f"cache, more than this computer's {total / 2**30:.0f} GiB of memory. Lower the "
                "context length."
            )
    return n_ctx


class ModelVocab:
    """A loaded model seen as a :class:`~app.catalog.pairing.VocabView`."""

    def __init__(self, model: LlamaModel) -> None:
        self._m = model

    @property
    def vocab_type(self) -> str:
        return VOCAB_TYPE_NAMES.get(self._m.vocab_type, str(self._m.vocab_type))

    @property
    def n_vocab(self) -> int:
        return self._m.n_vocab

    @property
    def add_bos(self) -> bool:
        return self._m.add_bos

    @property
    def bos_id(self) -> int | None:
        return self._m.bos if self._m.bos >= 0 else None

    @property
    def add_eos(self) -> bool:
        return self._m.add_eos

    @property
    def eos_id(self) -> int | None:
        return self._m.eos if self._m.eos >= 0 else None

    def token_texts(self, start: int, stop: int) -> list[bytes]:
        return [self._m.token_text(i) for i in range(start, stop)]


def check_loaded_pair(target: LlamaModel, draft: LlamaModel) -> PairResult:
    """llama.cpp's pairing rule applied to two loaded models."""
    return check_pair(
        ModelVocab(target),
        ModelVocab(draft),
        target_size=target.size_bytes,
        draft_size=draft.size_bytes,
    )


class Session:
    """A target model with its context, optionally a draft model, and the decoding loop.

    Use :meth:`open`. Not thread-safe for concurrent generations: one generation at a time
    (the UI runs them on one worker thread). :meth:`close` may be called from another
    thread; it waits for the current round to finish and the generation then ends.
    """

    def __init__(self, config: SessionConfig, target: LlamaModel, ctx: LlamaContext) -> None:
        self.config = config
        self.target = target
        self.ctx = ctx
        self.chat_format = ChatFormat(target)
        self.draft_model: LlamaModel | None = None
        self._draft_drafter: DraftModelDrafter | None = None
        self._kv_tokens: list[int] = []
        self._lock = threading.RLock()
        self._busy = False
        self._closed = False
        self._closing = False  # set by close() without the lock, so a prefill can abort
        self._target_step_samples: list[float] = []
        self._pass_times = PassTimes()
        self._draft_step_probe: float | None = None  # see draft_step_time
        self._policies: dict[str, DraftLengthPolicy] = {}
        #: earlier replies for the suffix drafter; the chat layer fills it
        #: (:meth:`SuffixIndex.load_replies` at start, :meth:`SuffixIndex.add_reply` as
        #: replies finish). Token ids of this target's vocabulary.
        self.suffix_index = SuffixIndex()
        #: decode tok/s of the latest plain (speculation off) reply in this session
        self.last_plain_decode_tps: float | None = None
        #: sentences for the user about how the model was loaded (e.g. a shorter context)
        self.notes: list[str] = []
        if self.chat_format.template_error:
            self.notes.append(self.chat_format.template_error)
        #: layers actually offloaded to the GPU (0: everything runs on the CPU)
        self.n_gpu_layers = target.n_layer
        if config.n_gpu_layers == 0 or not supports_gpu_offload():
            self.n_gpu_layers = 0
        elif config.n_gpu_layers is not None and config.n_gpu_layers >= 0:
            self.n_gpu_layers = min(config.n_gpu_layers, target.n_layer)
        self.rollback_supported = not target.is_recurrent
        #: whether verification is batch-invariant here (see SessionConfig.exact_verification)
        self.exact_verification = False
        #: tests only: a deliberate bug in the loop (:data:`EngineFault`); never set otherwise
        self._fault: EngineFault | None = None

    # -- loading --------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        config: SessionConfig,
        progress: ProgressCallback | None = None,
    ) -> Session:
        """Load the target (and the draft, when ``config.draft_path`` is set).

        Args:
            progress: called with overall progress 0..1; return False to cancel.

        Raises:
            ModelLoadError, GGUFError: a file is missing, malformed or does not fit.
            LoadCancelledError: ``progress`` returned False.
            IncompatibleDraftError: the draft's tokenizer does not match the target's.
        """
        share = 0.8 if config.draft_path else 1.0

        def target_progress(p: float) -> bool:
            return progress(p * share) if progress else True

        target_path, part_note = model_entry_path(config.target_path)
        probe_model(target_path, n_gpu_layers=config.n_gpu_layers,
                    should_stop=lambda: progress is not None and not progress(0.0))
        notes: list[str] = [part_note] if part_note else []
        # exact settings only where they make verification exact (a Q8_0 cache otherwise
        # changes the numerics for nothing)
        exact = config.exact_verification and _exact_possible(config, notes)
        target = LlamaModel(
            target_path,
            n_gpu_layers=config.n_gpu_layers,
            use_mmap=config.use_mmap,
            progress=target_progress,
            use_extra_bufts=not exact,
        )
        try:
            n_ctx = _checked_context_length(target, config, notes)
            if exact and any(d % EXACT_KV_BLOCK for d in target.head_dims()):
                exact = False
                notes.append(
                    f"Exact verification needs attention heads whose size is a multiple of "
                    f"{EXACT_KV_BLOCK} (for its Q8_0 KV cache); this model's are "
                    f"{'/'.join(map(str, target.head_dims()))}."
                )
            ctx = LlamaContext(
                target,
                n_ctx=n_ctx,
                n_batch=config.n_batch,
                n_threads=config.n_threads or default_threads(),
                **(EXACT_CONTEXT if exact else {}),
            )
        except BaseException:
            target.close()
            raise
        try:
            session = cls(config, target, ctx)
            session.exact_verification = exact
            session.notes.extend(notes)
            session._calibrate_target_step()
        except BaseException:
            target.close()  # closes ctx first
            raise
        try:
            if progress is not None and not progress(share):
                raise LoadCancelledError("Loading was cancelled.")
            if config.draft_path is not None:

                def draft_progress(p: float) -> bool:
                    return progress(share + p * (1 - share)) if progress else True

                session.set_draft_model(config.draft_path, progress=draft_progress)
        except BaseException:
            session.close()
            raise
        if progress is not None:
            progress(1.0)
        return session

    def set_draft_model(
        self, path: Path | None, progress: ProgressCallback | None = None
    ) -> PairResult | None:
        """Load (or with None, unload) the draft model without touching the target.

        Returns:
            The pairing result for a loaded draft.

        Raises:
            IncompatibleDraftError: the draft cannot draft for this target (the draft is
                not kept); the message names the failed rule.
        """
        with self._lock:
            self._check_idle()
            if self._draft_drafter is not None:
                self._draft_drafter.close()
                self._draft_drafter = None
            self._draft_step_probe = None
            if self.draft_model is not None:
                self.draft_model.close()
                self.draft_model = None
            if path is None:
                return None
            path, part_note = model_entry_path(path)
            probe_model(path, n_gpu_layers=self.config.n_gpu_layers,
                        should_stop=lambda: progress is not None and not progress(0.0))
            if part_note:
                self.notes.append(part_note)
            draft = LlamaModel(
                path,
                n_gpu_layers=self.config.n_gpu_layers,
                use_mmap=self.config.use_mmap,
                progress=progress,
            )
            try:
                result = check_loaded_pair(self.target, draft)
                if not result.compatible:
                    raise IncompatibleDraftError(
                        f"{draft.path.name} cannot draft for {self.target.path.name}: "
                        f"{result.reason()}"
                    )
                dctx = LlamaContext(
                    draft,
                    n_ctx=self.ctx.n_ctx,
                    n_batch=self.config.n_batch,
                    n_threads=self.config.n_threads or default_threads(),
                    n_outputs_max=1,  # the draft only ever needs its last position
                )
            except BaseException:
                draft.close()
                raise
            self.draft_model = draft
            self._draft_drafter = DraftModelDrafter(draft, dctx)
            for w in result.warnings:
                log.warning("%s", w)
            return result

    # -- state ----------------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        return self.ctx.n_ctx

    @property
    def target_step_time(self) -> float | None:
        """Median time of a plain one-token target pass seen in this session, seconds."""
        s = self._target_step_samples
        return statistics.median(s) if s else None

    @property
    def cached_tokens(self) -> int:
        """Tokens currently held in the target's KV cache."""
        return len(self._kv_tokens)

    @property
    def busy(self) -> bool:
        """Whether a generation is in progress (its iterator not yet exhausted or closed)."""
        return self._busy

    def reset_cache(self) -> None:
        """Forget the KV caches of target and draft, so the next prompt is evaluated cold.

        A new conversation does not need this (prefixes are matched); benchmarks do.

        Raises:
            TandemError: a generation is in progress or the session is closed.
        """
        with self._lock:
            self._check_idle()
            self.ctx.clear()
            self._kv_tokens = []
            if self._draft_drafter is not None:
                self._draft_drafter.reset()

    # -- measured costs (for the auto drafter choice, app.engine.auto) ---------------
    def pass_time(self, n_tokens: int) -> float | None:
        """Measured (or interpolated) time of a target pass over ``n_tokens``, seconds
        (:class:`~app.engine.policy.PassTimes`); None before anything was timed."""
        return self._pass_times(n_tokens)

    def measure_pass_times(self, sizes: Sequence[int], passes: int = 2) -> None:
        """Time target passes over each of ``sizes`` tokens never timed in this session
        (fastest of ``passes``, logits for every position as a verification needs), on
        an empty cache that is emptied again: the next reply re-evaluates its prompt.

        Raises:
            TandemError: a generation is in progress or the session is closed.
        """
        with self._lock:
            self._check_idle()
            token = self.target.bos if self.target.bos >= 0 else 0
            todo = [n for n in sorted(set(sizes))
                    if 1 <= n <= min(self.n_ctx, self.ctx.n_outputs_max)
                    and self._pass_times.count(n) == 0]
            for n in todo:
                best = float("inf")
                for _ in range(max(1, passes)):
                    self.ctx.clear()
                    t = time.perf_counter()
                    self.ctx.decode([token] * n, 0, logits="all")
                    best = min(best, time.perf_counter() - t)
                self._pass_times.observe(n, best)
            if todo:
                self.ctx.clear()
                self._kv_tokens = []

    def draft_step_time(self) -> float | None:
        """Seconds per draft-model forward step: as measured while drafting in this
        session, else one one-token pass of the draft timed now (fastest of 3, its cache
        emptied again); None without a draft model.

        Raises:
            TandemError: a generation is in progress or the session is closed.
        """
        with self._lock:
            self._check_idle()
            policy = self._policies.get(SpecMode.DRAFT_MODEL)
            if policy is not None and policy.draft_step_time > 0.0:
                return policy.draft_step_time
            drafter = self._draft_drafter
            if drafter is None:
                return None
            if self._draft_step_probe is None:
                token = drafter.model.bos if drafter.model.bos >= 0 else 0
                best = float("inf")
                for _ in range(3):
                    drafter.reset()
                    t = time.perf_counter()
                    drafter.ctx.decode([token], 0, logits="last")
                    best = min(best, time.perf_counter() - t)
                drafter.reset()
                self._draft_step_probe = best
            return self._draft_step_probe

    def _check_idle(self) -> None:
        if self._closed:
            raise TandemError("The model has been unloaded.")
        if self._busy:
            raise TandemError("A reply is still being generated.")

    # -- prompts --------------------------------------------------------------------
    def chat_prompt(self, messages: Sequence[ChatMessage]) -> list[int]:
        """Prompt tokens for a conversation, through the model's chat template.

        Raises:
            TandemError: the session is closed, or the template failed.
        """
        with self._lock:
            if self._closed:
                raise TandemError("The model has been unloaded.")
            return self.chat_format.tokenize(messages)

    def chat(
        self,
        messages: Sequence[ChatMessage],
        sampling: SamplingParams,
        speculation: SpeculationConfig,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """:meth:`generate` for a conversation; the format's stop strings are added."""
        prompt = self.chat_prompt(messages)
        if self.chat_format.stop:
            sampling = sampling.model_copy(
                update={"stop": tuple(sampling.stop) + self.chat_format.stop}
            )
        return self.generate(prompt, sampling, speculation, cancel)

    # -- the loop -------------------------------------------------------------------
    def _make_drafter(self, spec: SpeculationConfig) -> tuple[Drafter | None, str | None]:
        if spec.mode is SpecMode.OFF:
            return None, None
        if not self.rollback_supported:
            return None, (
                "This model's memory (recurrent or hybrid) cannot roll back rejected "
                "draft tokens, so speculation is off for it."
            )
        if spec.mode is SpecMode.PROMPT_LOOKUP:
            return PromptLookupDrafter(spec.ngram_min, max(spec.ngram_min, spec.ngram_max)), None
        if spec.mode is SpecMode.SUFFIX:
            return SuffixDrafter(
                self.suffix_index,
                spec_factor=spec.suffix_spec_factor,
                min_token_prob=spec.suffix_min_prob,
            ), None
        if spec.mode is not SpecMode.DRAFT_MODEL:
            raise TandemError(f"No drafter implements the mode {spec.mode.value!r}.")
        if self._draft_drafter is None:
            return None, "No draft model is loaded; decoding without speculation."
        assert self.draft_model is not None
        if self.draft_model.is_recurrent:
            return None, "The draft model's memory cannot roll back; speculation is off."
        self._draft_drafter.p_min = spec.draft_p_min
        return self._draft_drafter, None

    def _sync_prefix(self, tokens: Sequence[int], cancel: threading.Event | None) -> int:
        """Make the target KV cache hold ``tokens``; returns how many were evaluated."""
        keep = self.ctx.truncate(common_prefix_length(self._kv_tokens, tokens), len(self._kv_tokens))
        del self._kv_tokens[keep:]
        todo = list(tokens[keep:])
        if not todo:
            return 0
        n_batch = self.ctx.n_batch
        done = 0

        def should_stop() -> bool:
            return self._closing or (cancel is not None and cancel.is_set())

        try:
            with self.ctx.abortable(should_stop):
                while done < len(todo):
                    if should_stop():
                        break
                    chunk = todo[done : done + n_batch]
                    self.ctx.decode(chunk, keep + done, logits="none")
                    self._kv_tokens.extend(chunk)
                    done += len(chunk)
        except DecodeAborted:
            # part of the chunk may be cached: start clean next time (the cancel is set)
            self.ctx.clear()
            self._kv_tokens = []
        return done

    def generate(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        speculation: SpeculationConfig | None = None,
        cancel: threading.Event | None = None,
        *,
        stats_interval: float = 0.1,
        clock: Callable[[], float] = time.perf_counter,
        trace: SamplingTrace | None = None,
    ) -> Iterator[Event]:
        """Generate a reply to ``prompt`` (token ids, starting with BOS where the model adds one).

        Yields :class:`TextDelta` as text becomes final, :class:`StatsUpdate` at most every
        ``stats_interval`` seconds, and exactly one :class:`Finished` last.

        ``trace``: when given, every sampled position is recorded in it (what the sampler
        drew from and chose, :mod:`app.engine.divergence`), for comparing this run with
        another; it costs time per token, so only comparisons pass one.

        Raises:
            ContextOverflowError: the prompt does not fit in the context window.
            TandemError: the session is closed or busy, or llama.cpp failed.
        """
        spec = speculation or SpeculationConfig()
        with self._lock:
            self._check_idle()
            if not prompt:
                raise TandemError("The prompt is empty.")
            if len(prompt) >= self.ctx.n_ctx:
                raise ContextOverflowError(
                    f"The conversation is {len(prompt)} tokens long but the context window "
                    f"holds {self.ctx.n_ctx}. Start a new conversation, shorten it, or raise "
                    "the context length."
                )
            self._busy = True
        try:
            yield from self._generate(prompt, sampling, spec, cancel, stats_interval, clock, trace)
        finally:
            self._busy = False

    def _generate(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        spec: SpeculationConfig,
        cancel: threading.Event | None,
        stats_interval: float,
        clock: Callable[[], float],
        trace: SamplingTrace | None,
    ) -> Iterator[Event]:
        t0 = clock()
        model, ctx = self.target, self.ctx
        n_ctx = ctx.n_ctx
        drafter, note = self._make_drafter(spec)
        mode = drafter.kind if drafter is not None else SpecMode.OFF
        k = spec.draft_max if drafter is not None else 0
        is_cancelled = cancel.is_set if cancel is not None else (lambda: False)

        # -- prefill: everything but the last prompt token (it opens the first round) --
        with self._lock:
            if self._closed:
                raise TandemError("The model has been unloaded.")
            prefill_tokens = self._sync_prefix(prompt[:-1], cancel)
            sampler = TargetSampler(model, sampling)
            sampler.accept_prompt(prompt)
            # chosen once: without a trace the loop calls the plain sampler, nothing more
            sample = sampler.sample if trace is None else sampler.traced(trace)
            fault = self._fault
            policy: DraftLengthPolicy | None = None
            if drafter is not None:
                policy = self._policies.get(drafter.kind)
                if policy is None:
                    policy = self._policies[drafter.kind] = DraftLengthPolicy(self._pass_times)
            if drafter is not None and not is_cancelled():
                drafter.begin(prompt, lambda: self._closing or is_cancelled())
            # a drafter without a model may draft at full length for the policy to cut
            rule = free_draft_rule(sampling.greedy)
            token_keys: Callable[[], tuple[Hashable, ...]] | None = (
                getattr(drafter, "token_keys", None) if rule != "choose" else None)
            choose_first = token_keys is None or rule == "both"
        t_prefill = clock()

        stream = TextStream(sampling.stop)
        history = list(prompt)  # every token; history[-1] is not yet in the target KV
        n_past = len(prompt) - 1
        emitted: list[int] = []
        times: list[float] = []
        rounds = draft_rounds = verified = proposed = accepted = 0
        accepted_at = [0] * k
        verified_at = [0] * k
        draft_time = target_time = 0.0
        passes0 = drafter.forward_passes if drafter is not None else 0
        t_first: float | None = None
        last_stats = t0
        reason: FinishReason | None = None
        max_tokens = sampling.max_tokens

        def snapshot(now: float) -> SpecStats:
            return SpecStats(
                mode=mode,
                draft_max=k,
                prompt_tokens=len(prompt),
                prefill_tokens=prefill_tokens,
                emitted=len(emitted),
                rounds=rounds,
                draft_rounds=draft_rounds,
                verified=verified,
                proposed=proposed,
                accepted=accepted,
                accepted_at=tuple(accepted_at),
                verified_at=tuple(verified_at),
                draft_steps=(drafter.forward_passes - passes0) if drafter is not None else 0,
                draft_time=draft_time,
                target_time=target_time,
                target_step_time=self.target_step_time,
                ttft=(t_first - t0) if t_first is not None else 0.0,
                prefill_time=t_prefill - t0,
                decode_time=now - t_prefill,
                total_time=now - t0,
                fallback_reason=note,
                calibrated=self.target_step_time is not None,
            )

        if is_cancelled():
            reason = "cancelled"
        try:
            while reason is None:
                if is_cancelled() or self._closing:
                    reason = "cancelled"
                    break
                deltas: list[TextDelta] = []
                with self._lock:
                    if self._closed:
                        reason = "cancelled"
                        break
                    remaining = max_tokens - len(emitted)
                    room = n_ctx - n_past - 1  # positions left after the last token's
                    if room < 0:
                        reason = "length"
                        note = note or (
                            f"The context window ({n_ctx} tokens) is full; raise the context "
                            "length or start a new conversation."
                        )
                        break
                    drafts: list[int] = []
                    keys: tuple[Hashable, ...] | None = None
                    if drafter is not None and policy is not None:
                        n_draft_max = min(k, remaining - 1, room, ctx.n_outputs_max - 1)
                        if n_draft_max < spec.draft_min:
                            n_draft_max = 0  # the draft would be discarded: do not pay for it
                        if spec.adaptive and n_draft_max > 0 and choose_first:
                            n_draft_max = policy.choose(n_draft_max, spec.draft_min)
                        if n_draft_max > 0:
                            steps0 = drafter.forward_passes
                            td = clock()
                            drafts = drafter.draft(history, n_draft_max)[:n_draft_max]
                            if token_keys is not None:
                                keys = token_keys()
                            dtd = clock() - td
                            draft_time += dtd
                            policy.observe_draft_steps(drafter.forward_passes - steps0, dtd)
                            for i, t in enumerate(drafts):
                                # vocabularies may differ by up to 128 ids (pairing rule)
                                if not 0 <= t < model.n_vocab:
                                    del drafts[i:]
                                    break
                            # a token that would end the reply is the pass's own last
                            # sample anyway, and nothing after it is emitted
                            del drafts[draft_length_before_end(
                                drafts, stream, model.token_to_piece, model.is_eog):]
                            if keys is not None:
                                keys = keys[: len(drafts)]
                                if spec.adaptive and drafts:
                                    # a free draft is proposed at full length and cut
                                    # where its expected rate peaks (policy module doc)
                                    del drafts[policy.trim(keys, spec.draft_min,
                                                           after_choose=choose_first):]
                            if len(drafts) < spec.draft_min:
                                drafts = []
                        if not drafts:
                            policy.observe_no_draft()
                    batch = [history[-1], *drafts]
                    tt = clock()
                    ctx.decode(batch, n_past, logits="all")
                    n_emitted_before = len(emitted)
                    n_acc = 0  # drafts that matched: their KV entries stay
                    n_verified = n_counted = 0
                    for i in range(len(batch)):
                        tok = sample(ctx, i)
                        is_draft = i < len(drafts)
                        match = is_draft and tok == drafts[i]
                        if match:
                            n_acc += 1
                        if model.is_eog(tok):
                            # The end-of-generation position is not a reply token: it is
                            # counted neither as drafted nor as accepted, whether the
                            # draft matched it or not (SpecStats: "counting rules").
                            reason = "stop"
                            break
                        if is_draft:
                            n_verified += 1
                            verified += 1
                            verified_at[i] += 1
                            if match:
                                accepted += 1
                                accepted_at[i] += 1
                                n_counted += 1
                        now = clock()
                        if t_first is None:
                            t_first = now
                        emitted.append(tok)
                        history.append(tok)
                        times.append(now - t0)
                        for chunk in stream.push(model.token_to_piece(tok), match):
                            deltas.append(TextDelta(chunk.text, chunk.from_draft, now - t0, len(emitted)))
                        if stream.stopped:
                            reason = "stop"
                            break
                        if len(emitted) >= max_tokens:
                            reason = "length"
                            break
                        if not match:
                            if fault == "extra-draw" and i + 1 < len(batch):
                                sampler.sample(ctx, i + 1)  # the injected bug: one draw too many
                            break
                    proposed += len(drafts)
                    if len(emitted) > n_emitted_before:
                        # A pass that only sampled the end-of-generation token emitted
                        # nothing: it is no round, drafting or plain (τ = emitted /
                        # rounds stays ≥ 1); its drafts were proposed but never verified.
                        rounds += 1
                        draft_rounds += 1 if drafts else 0
                    dt = clock() - tt
                    target_time += dt
                    self._pass_times.observe(len(batch), dt)
                    if policy is not None and n_verified:
                        policy.observe_verification(n_verified, n_counted, keys)
                    if len(batch) == 1:
                        self._target_step_samples.append(dt)
                        del self._target_step_samples[:-64]
                    # Keep [last token + accepted drafts]; drop the rejected positions.
                    n_keep = 1 + n_acc
                    if fault == "keep-rejected-kv" and len(batch) > n_keep:
                        n_keep = len(batch)  # the injected bug: rejected tokens stay cached
                    if len(batch) > n_keep and not ctx.seq_rm(n_past + n_keep, -1):
                        # Should not happen (recurrent models never draft); stay correct.
                        log.warning("KV cache refused a partial removal; re-evaluating")
                        ctx.clear()
                        self._kv_tokens = []
                        self._sync_prefix([*history[:n_past], *batch[:n_keep]], None)
                        self.rollback_supported = False
                        drafter = None
                        note = "The KV cache could not roll back; speculation was turned off."
                    else:
                        self._kv_tokens.extend(batch[:n_keep])
                    n_past += n_keep
                yield from deltas
                now = clock()
                if now - last_stats >= stats_interval:
                    last_stats = now
                    yield StatsUpdate(snapshot(now))
        finally:
            sampler.close()
        with self._lock:
            # a cut reply (Stop, max_tokens) drops a held-back start of a stop string
            for chunk in stream.flush(cut=reason in ("cancelled", "length")):
                now = clock()
                yield TextDelta(chunk.text, chunk.from_draft, now - t0, len(emitted))
        end = clock()
        stats = snapshot(end)
        if mode is SpecMode.OFF and reason != "cancelled" and stats.decode_tps:
            self.last_plain_decode_tps = stats.decode_tps
        yield Finished(
            reason=reason or "stop",
            text=stream.text,
            token_ids=tuple(emitted),
            token_times=tuple(times),
            stats=stats,
            seed=sampler.seed,
            note=note,
        )

    def _calibrate_target_step(self, passes: int = 3) -> None:
        """Time a plain one-token target pass (the denominator of the draft cost ratio c).

        Speculative rounds never run one-token passes, so at load time the target
        evaluates one token alone a few times on an empty cache (the first pass includes
        graph setup; the fastest counts), and the cache is emptied again. This happens
        before any reply, so it never shows in TTFT, prefill or decode times.
        """
        token = self.target.bos if self.target.bos >= 0 else 0
        best = float("inf")
        for _ in range(passes):
            t = time.perf_counter()
            self.ctx.decode([token], 0, logits="last")
            best = min(best, time.perf_counter() - t)
            self.ctx.clear()
        self._kv_tokens = []
        self._target_step_samples.append(best)
        self._pass_times.observe(1, best)

    # -- lifetime -------------------------------------------------------------------
    def close(self) -> None:
        """Free every native object. Idempotent; safe while another thread generates
        (the generation ends with ``cancelled`` at its next round)."""
        self._closing = True  # aborts a running prefill so the lock is released soon
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._draft_drafter is not None:
                self._draft_drafter.close()
                self._draft_drafter = None
            if self.draft_model is not None:
                self.draft_model.close()
                self.draft_model = None
            self.ctx.close()
            self.target.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
