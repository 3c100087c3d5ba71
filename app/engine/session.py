"""A loaded target (and optional draft) model, and the speculative decoding loop.

:class:`Session` owns the native objects (target model and context, draft model and
context) and the record of which tokens sit in the target's KV cache, so that a follow-up
chat turn re-uses the cached prefix instead of re-evaluating the whole conversation.

The loop (:meth:`Session.generate`) runs one :class:`~app.engine.rounds.Round` after
another (draft → verify → accept and roll back; plain decoding is a round with no draft),
and between rounds lets :class:`~app.engine.cpu.ThreadGovernor` fit the thread count to
the cores other processes leave free. Models whose memory cannot roll back (recurrent,
hybrid) decode plainly, and the stats say so. Cancellation is checked once per round and
between prefill chunks.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import statistics
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.catalog.gguf_meta import GGUFInfo, inspect_gguf, load_vocab
from app.catalog.model_file import model_entry_path
from app.catalog.pairing import (
    ModelShape,
    PairResult,
    check_drafter_pair,
    check_pair,
    is_assistant_arch,
)
from app.engine.chat import ChatFormat, ChatMessage
from app.engine.context_fit import ContextFit, fit_conversation
from app.engine.divergence import SamplingTrace
from app.engine.drafter_kinds import Unavailable, kind_for
from app.engine.drafters import Drafter, DraftModelDrafter
from app.engine.events import (
    ContextTrimmed,
    Event,
    PrefillClock,
    PrefillProgress,
    StatsUpdate,
    TextDelta,
)
from app.engine.reply import (
    FinishReason,
    ReplyRecord,
    ReplyRequest,
    Span,
    add_span,
    clip_spans,
    context_full_note,
)
from app.engine.exact import EXACT_CONTEXT, EXACT_KV_BLOCK, ContextSettings, exact_blockers
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
from app.engine.cpu import ThreadGovernor, free_threads, measure_other_cores, thread_cap
from app.engine.policy import DraftLengthPolicy, PassTimes
from app.engine.prefix_cache import DEFAULT_PREFIX_CACHE_BYTES, PrefixStateCache, reuse_prefix
from app.engine.probe import probe_model
from app.engine.sampling import TargetSampler
from app.engine.stats import MIN_DRAFT_ROUNDS_FOR_SPEEDUP, MIN_VERIFIED_FOR_SPEEDUP, SpecStats
from app.engine.suffix import SuffixIndex
from app.engine.rounds import (
    Baseline,
    PlainStep,
    PlainSteps,
    Round,
    Verifier,
    combined_baseline,
)
from app.engine.text import TextStream
from app.errors import (
    ContextOverflowError,
    IncompatibleDraftError,
    LoadCancelledError,
    ModelLoadError,
    TandemError,
)
from app.options import (
    FREE_DRAFTER_K,
    K_MAX,
    N_CTX,
    SamplingParams,
    SpecMode,
    SpeculationConfig,
    max_threads,
)

log = logging.getLogger(__name__)

def default_threads() -> int:
    """CPU threads for decoding: the cores other processes leave free now (measured over
    0.2 s), up to :func:`app.engine.cpu.thread_cap`."""
    return free_threads(measure_other_cores(0.2), thread_cap())


class SessionConfig(BaseModel):
    """What to load and how.

    ``n_ctx``: the context window, tokens (lowered to the model's trained length, with a
    note). ``n_batch``: the most prompt tokens one decode call takes (llama.cpp's
    ``n_batch``; a longer prompt is read in chunks of this size, each a point where a
    stop is noticed). ``use_mmap``: map the weights from the file instead of reading
    them into memory (llama.cpp's default).
    ``n_gpu_layers`` None: all layers on the GPU when the build supports offload, else 0.
    ``n_threads`` None: :func:`default_threads` at load, then as many as the cores other
    processes leave free, changed between rounds (:class:`app.engine.cpu.ThreadGovernor`);
    a number: exactly that many, always.
    ``exact_verification``: load the configuration in which verification batches were
    measured bit for bit like one-token passes (docs/proof.md; flash attention on, a Q8_0 KV
    cache, no weight repacking; CPU backend, weights of the types in
    :mod:`app.engine.exact`). Where that is not possible a note says why and llama.cpp's
    defaults are kept.
    ``prefix_cache_bytes``: memory for the target's KV states of sequences its context
    had to give up (another conversation, an API request), kept least recently used
    first so that returning to one re-reads only what is new
    (:mod:`app.engine.prefix_cache`); a draft model's states get a quarter of it more.
    0 keeps none.
    ``rollback_depth``: for a recurrent or hybrid target (and draft), the recurrent-state
    snapshots its context keeps (``n_rs_seq``), which is also the longest draft verified
    there, as llama-server bounds drafts by ``llama_n_rs_seq``; each costs one recurrent
    state of memory (the load note gives the total). Ignored for other models.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_path: Path
    draft_path: Path | None = None
    n_ctx: int = Field(N_CTX, ge=16)
    n_batch: int = Field(512, ge=1)
    n_gpu_layers: int | None = None
    n_threads: int | None = Field(None, ge=1)
    use_mmap: bool = True
    exact_verification: bool = False
    rollback_depth: int = Field(FREE_DRAFTER_K, ge=0, le=K_MAX)
    prefix_cache_bytes: int = Field(DEFAULT_PREFIX_CACHE_BYTES, ge=0)

    @field_validator("n_threads")
    @classmethod
    def _threads_this_computer_can_use(cls, v: int | None) -> int | None:
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


def _bytes_words(n: int) -> str:
    """``n`` bytes in KiB, MiB or GiB for a note (binary units, 1 decimal)."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n / 2**10:.1f} KiB"


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
    """llama.cpp's pairing rule applied to two loaded models; the size warning compares
    their files' sizes, as ``models pair`` and the Models window do."""
    return check_pair(
        ModelVocab(target),
        ModelVocab(draft),
        target_size=_file_size(target),
        draft_size=_file_size(draft),
    )


def _file_size(model: LlamaModel) -> int:
    """The model's GGUF files' bytes (all parts), or its tensors' when unreadable."""
    try:
        return inspect_gguf(model.path).file_size
    except (OSError, TandemError):
        return model.size_bytes


def _asked(events: Iterator[Event], messages: tuple[ChatMessage, ...],
           sampling: SamplingParams, context: ContextFit | None = None) -> Iterator[Event]:
    """``events`` with the conversation and the sampling as asked, and what was dropped
    to fit the context window, in the final record. Closing it closes ``events`` (the
    session is free again at once)."""
    try:
        for ev in events:
            if isinstance(ev, ReplyRecord):
                ev = ev.asked(messages=messages, sampling=sampling)
                yield dataclasses.replace(ev, context=context) if context is not None else ev
            else:
                yield ev
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()


def _after(first: Event, events: Iterator[Event]) -> Iterator[Event]:
    """``first``, then ``events``; closing it closes ``events`` (``yield from``)."""
    yield first
    yield from events


class _Reply:
    """One reply in progress: its tokens, text, times and what its rounds decided."""

    def __init__(self, prompt: Sequence[int], t0: float, stream: TextStream, max_tokens: int,
                 piece: Callable[[int], bytes]) -> None:
        self.prompt, self.t0, self.stream, self.max_tokens = prompt, t0, stream, max_tokens
        self.piece = piece
        self.note: str | None = None
        self.prefill_tokens = 0
        self.t_prefill = t0
        self.t_first: float | None = None
        self.history = list(prompt)  # every token; history[-1] is not yet in the target KV
        self.n_past = len(prompt) - 1
        self.emitted: list[int] = []
        self.times: list[float] = []
        self.own_plain: list[float] = []  # this reply's one-token pass times, seconds
        #: stretches at earlier thread counts: (decode seconds, their plain baseline), and
        #: when the current one began (None: at the prefill's end)
        self.stretches: list[tuple[float, Baseline | None]] = []
        self.stretch_start: float | None = None
        self.last_pass = 0  # tokens in the reply's latest target pass (0: the prefill's)
        self.passes0 = 0  # the drafter's forward passes before this reply
        self.end: FinishReason | None = None
        self.t_end: float | None = None  # end of decoding (before any baseline passes)
        self.spans: list[Span] = []  # draft text, characters
        self._n_chars = 0
        self._deltas: list[TextDelta] = []

    def accept(self, tok: int, from_draft: bool, now: float) -> bool:
        """Emit ``tok``; False when the reply ends with it (a stop string, max_tokens)."""
        if self.t_first is None:
            self.t_first = now
        self.emitted.append(tok)
        self.history.append(tok)
        self.times.append(now - self.t0)
        for chunk in self.stream.push(self.piece(tok), from_draft):
            self._deltas.append(self.delta(chunk.text, chunk.from_draft, now))
        if self.stream.stopped:
            self.end = "stop"
        elif len(self.emitted) >= self.max_tokens:
            self.end = "length"
        return self.end is None

    def delta(self, text: str, from_draft: bool, now: float) -> TextDelta:
        """The event for released text (its draft range recorded in :attr:`spans`)."""
        if from_draft:
            add_span(self.spans, self._n_chars, self._n_chars + len(text))
        self._n_chars += len(text)
        return TextDelta(text, from_draft, now - self.t0, len(self.emitted))

    def take_deltas(self) -> list[TextDelta]:
        """The text deltas made final since the last call."""
        out, self._deltas = self._deltas, []
        return out


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
        #: an MTP assistant GGUF loaded in the draft model's place (drafter "mtp")
        self.assistant_model: LlamaModel | None = None
        #: drafters kept across replies (see kept_drafter), closed with the session
        self._kept: dict[SpecMode, Drafter | Unavailable] = {}
        self._kv_tokens: list[int] = []
        #: states of sequences the context gave up, to be put back (prefix cache)
        self.saved_states = PrefixStateCache(config.prefix_cache_bytes)
        self._lock = threading.RLock()
        self._busy = False
        self._closed = False
        self._closing = False  # set by close() without the lock, so a prefill can abort
        self._target_step_samples: list[float] = []
        #: the target's pass times per thread count
        self._pass_times: dict[int, PassTimes] = {}
        #: a pass's seconds by size, timed at load (:meth:`_calibrate_pass_sizes`)
        self._calibration: dict[int, float] = {}
        self._plain_steps = PlainSteps()
        #: follows other processes' load; changes the thread count between rounds when
        #: the config left it open
        self._governor = ThreadGovernor(
            thread_cap() if config.n_threads is None else ctx.n_threads,
            adjust=config.n_threads is None)
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
        #: whether rejected draft tokens can leave the target's memory: always for
        #: attention-only models; for recurrent and hybrid ones through llama.cpp's
        #: recurrent-state snapshots (``n_rs_seq``), where the architecture has them
        self.rollback_supported = not target.is_recurrent or ctx.n_rs_seq > 0
        #: the longest draft verified in one round (None: no bound but k and the context)
        self.draft_bound: int | None = ctx.n_rs_seq if target.is_recurrent else None
        #: bytes of the recurrent-state snapshots the target's context keeps (0: none)
        self.snapshot_bytes = 0
        #: bytes of the MTP (nextn) layers loaded with the target (0: none)
        self.mtp_bytes = 0
        #: whether verification is batch-invariant here (see SessionConfig.exact_verification)
        self.exact_verification = False
        #: the notes (also in :attr:`notes`) that say why it is not, when it was asked for
        self.exact_notes: tuple[str, ...] = ()
        #: samples the verified positions (a deliberately broken one in fault-injection
        #: tests: ``tests/faults.py``)
        self.verifier: Verifier = Verifier()

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
        # the target's weights fill most of its share; creating the context and timing
        # the pass sizes (about 2 s on a 2-core CPU) the rest, so the bar is not at
        # 100 % while they run
        weights = 0.85 * share

        def target_progress(p: float) -> bool:
            return progress(p * weights) if progress else True

        target_path, part_note = model_entry_path(config.target_path)
        probe_model(target_path, n_gpu_layers=config.n_gpu_layers,
                    should_stop=lambda: progress is not None and not progress(0.0))
        notes: list[str] = [part_note] if part_note else []
        exact_notes: list[str] = []  # why exact verification is not possible
        # exact settings only where they make verification exact (a Q8_0 cache otherwise
        # changes the numerics for nothing)
        exact = config.exact_verification and _exact_possible(config, exact_notes)
        target = LlamaModel(
            target_path,
            n_gpu_layers=config.n_gpu_layers,
            use_mmap=config.use_mmap,
            progress=target_progress,
            use_extra_bufts=not exact,
            load_mtp=True,  # a model's own MTP (nextn) layers draft for it (drafter "mtp")
        )
        try:
            n_ctx = _checked_context_length(target, config, notes)
            if exact and any(d % EXACT_KV_BLOCK for d in target.head_dims()):
                exact = False
                exact_notes.append(
                    f"Exact verification needs attention heads whose size is a multiple of "
                    f"{EXACT_KV_BLOCK} (for its Q8_0 KV cache); this model's are "
                    f"{'/'.join(map(str, target.head_dims()))}."
                )
            ctx = LlamaContext(
                target,
                n_ctx=n_ctx,
                n_batch=config.n_batch,
                n_threads=config.n_threads or default_threads(),
                n_rs_seq=config.rollback_depth if target.is_recurrent else 0,
                **(EXACT_CONTEXT if exact else ContextSettings()),
            )
        except BaseException:
            target.close()
            raise
        if progress is not None and not progress(0.9 * share):
            target.close()
            raise LoadCancelledError("Loading was cancelled.")
        try:
            session = cls(config, target, ctx)
            session.exact_verification = exact
            session.exact_notes = tuple(exact_notes)
            session.notes.extend(notes + exact_notes)
            session._calibrate_target_step()
            session._note_recurrent_rollback()
            session._note_mtp_layers(target_path)
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

        An MTP assistant GGUF (its architecture is one of
        :data:`app.catalog.pairing.ASSISTANT_TARGETS`, e.g. Gemma 4's
        ``gemma4-assistant``) is loaded as :attr:`assistant_model` instead: it drafts
        through the MTP drafter, paired by
        :func:`app.catalog.pairing.check_assistant_pair`, after the load check's child
        ran it with this target.

        Returns:
            The pairing result for a loaded draft.

        Raises:
            IncompatibleDraftError: the draft cannot draft for this target; the message
                names the failed rule. Found from the draft's metadata before anything
                loads or is unloaded (the draft loaded before stays); the loaded pair is
                checked again once it has loaded (then it is not kept).
            ModelPathError, GGUFError: ``path`` is missing or cannot be read as a GGUF
                (broken, truncated); raised before anything is unloaded, so the draft or
                assistant loaded before stays loaded. Any later failure leaves no draft
                loaded.
        """
        with self._lock:
            self._check_idle(reading=())  # a draft changed on disk can still be replaced
            part_note, assistant, paired = None, False, None
            if path is not None:  # a file that cannot be read leaves the loaded draft
                path, part_note = model_entry_path(path)
                header = inspect_gguf(path)
                assistant = is_assistant_arch(header.architecture)
                # an incompatible file is refused before it loads, and before the draft
                # loaded now is unloaded
                paired = self._pair_from_headers(path, header)
            self._drop_assistant()
            if self._draft_drafter is not None:
                self._draft_drafter.close()
                self._draft_drafter = None
            self._draft_step_probe = None
            self._policies.pop(SpecMode.DRAFT_MODEL, None)  # its α̂ and step time were the old draft's
            if self.draft_model is not None:
                self.draft_model.close()
                self.draft_model = None
            if path is None:
                return None
            if assistant:
                assert paired is not None
                return self._load_assistant(path, paired, progress)
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
                    n_threads=self.config.n_threads or self.ctx.n_threads,
                    n_outputs_max=1,  # the draft only ever needs its last position
                )
            except BaseException:
                draft.close()
                raise
            self.draft_model = draft
            self._draft_drafter = DraftModelDrafter(
                draft, dctx, saved_states=PrefixStateCache(self.config.prefix_cache_bytes // 4))
            for w in result.warnings:
                log.warning("%s", w)
            return result

    def _pair_from_headers(self, path: Path, info: GGUFInfo) -> PairResult:
        """The pairing rules (:func:`~app.catalog.pairing.check_drafter_pair`: an MTP
        assistant's, else llama.cpp's) between the loaded target and ``path``'s GGUF
        metadata (``info``: its header), before anything of ``path`` loads.

        Raises:
            IncompatibleDraftError: a rule failed; the message names it.
            GGUFError: ``path``'s vocabulary cannot be read.
        """
        result = check_drafter_pair(
            ModelVocab(self.target), load_vocab(path), target_shape=self.target_shape,
            draft_shape=ModelShape.from_header(info), target_size=self.target.size_bytes,
            draft_size=info.file_size)
        if not result.compatible:
            raise IncompatibleDraftError(
                f"{path.name} cannot draft for {self.target.path.name}: {result.reason()}")
        return result

    def _load_assistant(self, path: Path, result: PairResult,
                        progress: ProgressCallback | None) -> PairResult:
        """Probe the pair in a child, then load the MTP assistant at ``path`` as
        :attr:`assistant_model` (``result``: its pairing, :meth:`_pair_from_headers`).

        Raises:
            ModelLoadError: the pair failed or crashed in the load check's child.
        """
        probe_model(path, n_gpu_layers=self.config.n_gpu_layers, target=self.target.path,
                    should_stop=lambda: progress is not None and not progress(0.0))
        self.assistant_model = LlamaModel(path, n_gpu_layers=self.config.n_gpu_layers,
                                          use_mmap=self.config.use_mmap, progress=progress)
        return result

    def _drop_assistant(self) -> None:
        """Close the MTP assistant and the drafter made with it (kept under "mtp")."""
        if self.assistant_model is None:
            return
        mtp = SpecMode("mtp")
        kept = self._kept.pop(mtp, None)
        if kept is not None and not isinstance(kept, Unavailable):
            kept.close()
        self._policies.pop(mtp, None)  # its α̂ and step time were the assistant's
        self.assistant_model.close()
        self.assistant_model = None

    @property
    def target_shape(self) -> ModelShape:
        """The target's architecture and hidden sizes (for assistant pairing)."""
        t = self.target
        return ModelShape(t.meta("general.architecture") or "unknown", t.n_embd, t.n_embd_out)

    # -- state ----------------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        return self.ctx.n_ctx

    @property
    def n_threads(self) -> int:
        """CPU threads the target decodes with now (the thread governor changes it
        between rounds when ``config.n_threads`` is None)."""
        return self.ctx.n_threads

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
        """Forget the KV caches of target and draft and the saved states, so the next
        prompt is evaluated cold.

        A new conversation does not need this (prefixes are matched); benchmarks do.

        Raises:
            TandemError: a generation is in progress or the session is closed.
        """
        with self._lock:
            self._check_idle(reading=())
            self.ctx.clear()
            self._kv_tokens = []
            self.saved_states.clear()
            if self._draft_drafter is not None:
                self._draft_drafter.reset()
                self._draft_drafter.saved_states.clear()

    # -- measured costs (for the auto drafter choice, app.engine.auto) ---------------
    def pass_time(self, n_tokens: int) -> float | None:
        """Measured (or interpolated) time of a target pass over ``n_tokens``, seconds
        (:class:`~app.engine.policy.PassTimes`); None before anything was timed."""
        return self._pass_table()(n_tokens)

    def calibrated_pass_times(self) -> dict[int, float]:
        """The pass times timed at load, seconds by batch size (1 included): the cost
        curve that sizes not yet verified at the current thread count borrow from
        (:meth:`~app.engine.policy.PassTimes.calibrate`)."""
        return self._pass_table().calibrated

    def measure_pass_times(self, sizes: Sequence[int], passes: int = PassTimes.trusted_after) -> None:
        """Time target passes over each of ``sizes`` tokens never timed in this session
        (``passes`` each after one that builds the graph, logits for every position as a
        verification needs), on an empty cache that is emptied again: the next reply
        re-evaluates its prompt.

        Raises:
            TandemError: a generation is in progress or the session is closed.
        """
        with self._lock:
            self._check_idle()
            todo = [n for n in sorted(set(sizes))
                    if 1 <= n <= min(self.n_ctx, self.ctx.n_outputs_max)
                    and not any(t.count(n) for t in self._pass_times.values())]
            if todo:
                self._reuse_prefix([])  # saves the live state, when worth it, and empties
            for n in todo:
                for i in range(max(1, passes) + 1):
                    dt = self._time_pass(n)
                    if i:
                        self._pass_table().observe(n, dt)
            if todo:
                self._kv_tokens = []

    def _time_pass(self, n_tokens: int) -> float:
        """Seconds of one target pass over ``n_tokens`` tokens on an empty cache, with
        logits at every position as a verification takes them, waited for to the end
        (:meth:`~app.engine.llama.LlamaContext.synchronize`); the cache is emptied
        before and after. The caller holds the lock or is loading the session.

        Raises:
            TandemError: llama.cpp failed to decode.
        """
        token = self.target.bos if self.target.bos >= 0 else 0
        self.ctx.clear()
        t = time.perf_counter()
        self.ctx.decode([token] * n_tokens, 0, logits="all")
        self.ctx.synchronize()
        dt = time.perf_counter() - t
        self.ctx.clear()
        return dt

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

    def _check_idle(self, reading: Sequence[LlamaModel | None] | None = None) -> None:
        """Raises TandemError when the session cannot run a pass now: closed, busy, or a
        model file it is ``reading`` (default: every model loaded; ``()``: none, for
        what reads no weights) changed size on disk since it was loaded
        (:meth:`LlamaModel.changed_on_disk`). Checked before each use, so a file
        truncated during a reply is not caught."""
        if self._closed:
            raise TandemError("The model has been unloaded.")
        if self._busy:
            raise TandemError("A reply is still being generated.")
        if reading is None:
            reading = (self.target, self.draft_model, self.assistant_model)
        for model in reading:
            if model is not None and (why := model.changed_on_disk()) is not None:
                raise TandemError(f"{why}: reading it now could crash Tandem. Load the "
                                  "model again.")

    # -- prompts --------------------------------------------------------------------
    def chat_prompt(self, messages: Sequence[ChatMessage], continuation: str = "") -> list[int]:
        """Prompt tokens for a conversation, through the model's chat template (ending
        with ``continuation``, the start of the reply: :meth:`ChatFormat.tokenize
        <app.engine.chat.ChatFormat.tokenize>`).

        Raises:
            TandemError: the session is closed, or the template failed.
        """
        with self._lock:
            if self._closed:
                raise TandemError("The model has been unloaded.")
            return self.chat_format.tokenize(messages, continuation)

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` alone, as a message's content is tokenized (no BOS, control
        tokens spelled out count as text); safe from any thread (waits for the session
        between rounds).

        Raises:
            TandemError: the session is closed.
        """
        with self._lock:
            if self._closed:
                raise TandemError("The model has been unloaded.")
            return len(self.target.tokenize(text, add_special=False, parse_special=False))

    def chat(
        self,
        messages: Sequence[ChatMessage],
        sampling: SamplingParams,
        speculation: SpeculationConfig,
        cancel: threading.Event | None = None,
        *,
        continuation: str = "",
    ) -> Iterator[Event]:
        """:meth:`generate` for a conversation; the format's stop strings are added.
        With ``continuation`` (the start of the reply, cut short before) the reply goes
        on from it: its events and record hold the new text only.

        A conversation longer than the context window is shortened first by
        ``sampling.context_overflow`` (:func:`app.engine.context_fit.fit_conversation`);
        then a :class:`ContextTrimmed` saying what was dropped comes before the other
        events, and the record carries it too (``context``).

        Raises:
            ContextOverflowError: (at the call) the policy is ``stop`` and the
                conversation does not fit, or nothing can be dropped to make it fit.
            TandemError: the session is closed, or the template failed.
        """
        prompt, fit = fit_conversation(
            messages, lambda ms: self.chat_prompt(ms, continuation), self.n_ctx,
            sampling.max_tokens, sampling.context_overflow)
        asked = sampling
        if self.chat_format.stop:
            sampling = sampling.model_copy(
                update={"stop": tuple(sampling.stop) + self.chat_format.stop}
            )
        events = _asked(self.generate(prompt, sampling, speculation, cancel),
                        messages=tuple(messages), sampling=asked, context=fit)
        return events if fit is None else _after(ContextTrimmed(fit), events)

    # -- the loop -------------------------------------------------------------------
    def _make_drafter(self, spec: SpeculationConfig) -> tuple[Drafter | None, str | None]:
        """The reply's drafter from the registry (:mod:`app.engine.drafter_kinds`), or
        None and the sentence that says why the reply decodes plainly."""
        self.ctx.set_decode_listener(None)  # a drafter that mirrors the target re-installs it
        if spec.mode is SpecMode.OFF:
            return None, None
        if not self.rollback_supported:
            return None, (
                "This model's memory (recurrent or hybrid) cannot roll back rejected "
                "draft tokens, so speculation is off for it."
            )
        kind = kind_for(spec.mode)
        if kind is None:
            raise TandemError(f"No drafter implements the mode {spec.mode.value!r}.")
        made = kind.create(self, spec)
        if isinstance(made, Unavailable):
            return None, made.reason
        return made, None

    @property
    def loaded_draft(self) -> DraftModelDrafter | None:
        """The draft model's drafter when one is loaded (:class:`DrafterHost`)."""
        return self._draft_drafter

    @property
    def loaded_assistant(self) -> LlamaModel | None:
        """The MTP assistant when one is loaded (:class:`DrafterHost`)."""
        return self.assistant_model

    def kept_drafter(self, mode: SpecMode, make: Callable[[], Drafter | Unavailable]
                     ) -> Drafter | Unavailable:
        """The drafter this session keeps for ``mode`` (:class:`DrafterHost`): made once
        with ``make``, closed with the session; an :class:`Unavailable` is kept too."""
        if mode not in self._kept:
            self._kept[mode] = make()
        return self._kept[mode]

    def drop_target_cache(self) -> None:
        """Empty the target's KV cache (:class:`DrafterHost`): the reply's prefill then
        evaluates the whole prompt."""
        self.ctx.clear()
        self._kv_tokens = []

    def _sync_prefix(self, tokens: Sequence[int], cancel: threading.Event | None) -> int:
        """Make the target KV cache hold ``tokens``; returns how many were evaluated."""
        done = 0
        for progress in self._prefill(tokens, cancel):
            done = progress.done
        return done

    def _prefill(self, tokens: Sequence[int],
                 cancel: threading.Event | None) -> Iterator[PrefillProgress]:
        """Make the target KV cache hold ``tokens`` (call it under the lock): the cached
        prefix is kept (or a saved state put back, :meth:`_reuse_prefix`), the rest is
        evaluated in chunks of ``n_batch``. Yields a :class:`PrefillProgress` before the
        first chunk and after each; a cancel or :meth:`close` stops it between chunks and
        inside one (the abort callback), and a chunk cut short leaves the cache empty."""
        keep = self._reuse_prefix(tokens)
        todo = list(tokens[keep:])
        t0 = time.perf_counter()
        clock = PrefillClock()
        yield PrefillProgress(0, len(todo), keep, 0.0)
        if not todo:
            return
        n_batch = self.ctx.n_batch
        done = 0

        def should_stop() -> bool:
            return self._closing or (cancel is not None and cancel.is_set())

        while done < len(todo) and not should_stop():
            chunk = todo[done : done + n_batch]
            t_chunk = time.perf_counter()
            try:
                with self.ctx.abortable(should_stop):
                    self.ctx.decode(chunk, keep + done, logits="none")
            except DecodeAborted:
                # part of the chunk may be cached: start clean next time (the cancel is set)
                self.ctx.clear()
                self._kv_tokens = []
                return
            self._kv_tokens.extend(chunk)
            now = time.perf_counter()
            clock.add(keep + done, len(chunk), now - t_chunk)
            done += len(chunk)
            yield PrefillProgress(done, len(todo), keep, now - t0,
                                  clock.seconds_left(keep + done, keep + len(todo)))

    def _reuse_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the cached prefix of ``tokens``, or put back a saved state that shares
        more, saving the live state when much of it would be lost
        (:func:`~app.engine.prefix_cache.reuse_prefix`). Returns the tokens now held."""
        return reuse_prefix(self.ctx, self._kv_tokens, tokens, self.saved_states,
                            recurrent=self.target.is_recurrent)

    def generate(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        speculation: SpeculationConfig | None = None,
        cancel: threading.Event | None = None,
        *,
        stats_interval: float = 0.1,
        trace: SamplingTrace | None = None,
    ) -> Iterator[Event]:
        """Generate a reply to ``prompt`` (token ids, starting with BOS where the model adds one).

        Yields :class:`TextDelta` as text becomes final, :class:`StatsUpdate` at most every
        ``stats_interval`` seconds, and exactly one :class:`~app.engine.reply.ReplyRecord` last.

        ``trace``: when given, every sampled position is recorded in it (what the sampler
        drew from and chose, :mod:`app.engine.divergence`), for comparing this run with
        another; it costs time per token, so only comparisons pass one.

        Raises:
            ContextOverflowError: the prompt does not fit in the context window.
            TandemError: the session is closed or busy, a model file it reads changed
                size since it was loaded (:meth:`LlamaModel.changed_on_disk`), or
                llama.cpp failed.
        """
        spec = speculation or SpeculationConfig()
        with self._lock:
            # without speculation only the target's weights are read
            self._check_idle(reading=(self.target,) if spec.mode is SpecMode.OFF else None)
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
            yield from self._generate(prompt, sampling, spec, cancel, stats_interval, trace)
        finally:
            self._busy = False

    def _generate(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        spec: SpeculationConfig,
        cancel: threading.Event | None,
        stats_interval: float,
        trace: SamplingTrace | None,
    ) -> Iterator[Event]:
        started_at, clock = time.time(), time.perf_counter
        reply = _Reply(prompt, clock(), TextStream(sampling.stop), sampling.max_tokens,
                       self.target.token_to_piece)
        is_cancelled = cancel.is_set if cancel is not None else (lambda: False)
        with self._lock:
            if self._closed:
                raise TandemError("The model has been unloaded.")
            drafter, reply.note = self._make_drafter(spec)
            reply.passes0 = drafter.forward_passes if drafter is not None else 0
            for progress in self._prefill(prompt[:-1], cancel):
                reply.prefill_tokens = progress.done
                yield progress
            sampler = TargetSampler(self.target, sampling)
            sampler.accept_prompt(prompt)
            if drafter is not None and not is_cancelled():
                drafter.begin(prompt, lambda: self._closing or is_cancelled())
            rnd = Round(
                self.target, self.ctx, drafter, self._policy(drafter),
                spec.draft_max if drafter is not None else 0, spec.draft_min, spec.adaptive,
                sampler.sample if trace is None else sampler.traced(trace), sampler.sample,
                reply.stream, self.verifier, clock)
        reply.t_prefill = last_stats = clock()
        reason: FinishReason | None = "cancelled" if is_cancelled() else None
        try:
            yield StatsUpdate(self._snapshot(reply, rnd, reply.t_prefill))  # its settings
            while reason is None:
                if is_cancelled() or self._closing:
                    reason = "cancelled"
                    break
                with self._lock:
                    if self._closed:
                        reason = "cancelled"
                        break
                    reason = self._round(reply, rnd)
                yield from reply.take_deltas()
                now = clock()
                if now - last_stats >= stats_interval:
                    last_stats = now
                    yield StatsUpdate(self._snapshot(reply, rnd, now))
            reply.t_end = clock()
            if rnd.drafter is not None and reason != "cancelled":
                with self._lock:
                    self._time_plain_steps(reply, rnd, sampler.sample, is_cancelled)
        finally:
            sampler.close()
        with self._lock:
            # a cut reply (Stop, max_tokens) drops a held-back start of a stop string
            for chunk in reply.stream.flush(cut=reason in ("cancelled", "length")):
                yield reply.delta(chunk.text, chunk.from_draft, clock())
        stats = self._snapshot(reply, rnd, reply.t_end or clock())
        if rnd.mode is SpecMode.OFF and reason != "cancelled" and stats.decode_tps:
            self.last_plain_decode_tps = stats.decode_tps
        text = reply.stream.text
        yield ReplyRecord(
            request=ReplyRequest(sampling, spec, len(prompt)),
            speculation=spec,
            reason=reason or "stop",
            text=text,
            token_ids=tuple(reply.emitted),
            token_times=tuple(reply.times),
            stats=stats,
            seed=sampler.seed,
            note=reply.note,
            spans=tuple(clip_spans(reply.spans, len(text))),
            started_at=started_at,
        )

    def _policy(self, drafter: Drafter | None) -> DraftLengthPolicy | None:
        """The draft-length policy of this drafter kind in this session (None: plain)."""
        if drafter is None:
            return None
        policy = self._policies.get(drafter.kind)
        if policy is None:
            policy = self._policies[drafter.kind] = DraftLengthPolicy(
                self._pass_table(), key_prior=getattr(drafter, "key_prior", None))
        return policy

    def _pass_table(self) -> PassTimes:
        """The target's pass times at the current thread count."""
        table = self._pass_times.get(self.ctx.n_threads)
        if table is None:
            table = self._pass_times[self.ctx.n_threads] = PassTimes()
            for n, t in self._calibration.items():  # the shape measured at load
                table.calibrate(n, t)
        return table

    def _round(self, reply: _Reply, rnd: Round) -> FinishReason | None:
        """One round under the lock: threads, draft, verification, rollback. Returns why
        the reply ends after it, or None."""
        ctx, n_past = self.ctx, reply.n_past
        room = ctx.n_ctx - n_past - 1  # positions left after the last token's
        if room < 0:
            full = context_full_note(ctx.n_ctx)  # said last: the ending is read from it
            reply.note = f"{reply.note}\n{full}" if reply.note else full
            return "length"
        self._govern_threads(reply, rnd.clock())
        drafts: list[int] = []
        keys: tuple[Hashable, ...] | None = None
        now = time.monotonic()
        if rnd.drafter is not None:
            n_max = min(rnd.k, reply.max_tokens - len(reply.emitted) - 1, room,
                        ctx.n_outputs_max - 1,
                        K_MAX if self.draft_bound is None else self.draft_bound)
            drafts, keys = rnd.propose(reply.history, n_max)
        batch = [reply.history[-1], *drafts]
        v, n_keep, dt = rnd.run(reply.history, n_past, drafts, keys,
                                lambda tok, from_draft: reply.accept(tok, from_draft,
                                                                     time.perf_counter()))
        self._pass_table().observe(len(batch), dt)
        if not drafts and reply.last_pass == 1:
            # a baseline step only after another one-token pass: after a batch (the
            # prefill, a verification) llama.cpp builds the one-token graph anew, which
            # plain decoding does once (SmolLM2: 10.5 ms against 10.1, Gemma 3 270M 15.9
            # against 15.5 on a Zen 4, medians of 60)
            self._observe_plain_step(reply, dt, now)
        reply.last_pass = len(batch)
        if len(batch) > n_keep and not ctx.seq_rm(n_past + n_keep, -1):
            self._rollback_failed(reply, rnd, batch[:n_keep])
        else:
            self._kv_tokens.extend(batch[:n_keep])
        reply.n_past += n_keep
        return v.end or reply.end

    def _observe_plain_step(self, reply: _Reply, seconds: float, now: float) -> None:
        """A one-token pass: the plain baseline of the measured speedup and of c."""
        reply.own_plain.append(seconds)
        self._plain_steps.add(PlainStep(seconds, now, self.ctx.n_threads, self._governor.other))
        self._target_step_samples.append(seconds)
        del self._target_step_samples[:-64]

    #: the most seconds :meth:`_time_plain_steps` may add after a reply (by the pass
    #: table's t(1)): a model whose steps take longer gets its baseline from its own and
    #: recent passes only, rather than a reply that ends seconds late
    END_TIMING_BUDGET = 0.5

    def _time_plain_steps(self, reply: _Reply, rnd: Round,
                          sample: Callable[[LlamaContext, int], int],
                          is_cancelled: Callable[[], bool]) -> None:
        """After a speculative reply with fewer than :attr:`PlainSteps.min_own` comparable
        one-token passes (:class:`PlainSteps`), time that many at the reply's end (its
        last token at its depth, sampled, then removed again): the measured speedup's
        baseline under this reply's conditions. Costs that many target steps after the
        reply, not in it, and one more before them, untimed as a baseline, which builds
        the one-token graph when the reply's last pass was a batch; skipped when they
        would take more than :attr:`END_TIMING_BUDGET`; stops when the session closes or
        the reply is cancelled."""
        ctx, pos = self.ctx, reply.n_past
        c = rnd.counters
        warm = 1 if reply.last_pass != 1 else 0  # a pass that builds the one-token graph
        t1 = self._pass_table()(1) or 0.0
        # (not on recurrent state: its snapshots cannot undo a whole one-token decode)
        if (self._closed or self._closing or not self.rollback_supported
                or self.target.is_recurrent or pos + 1 >= ctx.n_ctx
                or c.draft_rounds < MIN_DRAFT_ROUNDS_FOR_SPEEDUP
                or c.verified < MIN_VERIFIED_FOR_SPEEDUP
                or len(reply.own_plain) >= PlainSteps.min_own
                or t1 * (PlainSteps.min_own + warm) > self.END_TIMING_BUDGET
                or self._plain_steps.comparable(time.monotonic(), ctx.n_threads,
                                                self._governor.other) >= PlainSteps.min_own):
            return
        for i in range(PlainSteps.min_own + warm):
            if self._closing or is_cancelled():
                return  # (each pass below leaves the cache as the reply left it)
            t = time.perf_counter()
            try:
                ctx.decode([reply.history[-1]], pos, logits="last")
                sample(ctx, 0)
            except TandemError:  # the reply is complete: it goes without a baseline
                ctx.clear()
                self._kv_tokens = []
                return
            dt = time.perf_counter() - t
            if not ctx.seq_rm(pos, -1):
                ctx.clear()
                self._kv_tokens = []
                return
            if i >= warm:
                self._observe_plain_step(reply, dt, time.monotonic())
            self._pass_table().observe(1, dt)  # the policy's t(1) at this thread count

    def _rollback_failed(self, reply: _Reply, rnd: Round, kept: list[int]) -> None:
        """``llama_memory_seq_rm`` refused a partial removal (a model whose memory cannot
        roll back): re-evaluate what is kept and decode plainly from here on."""
        log.warning("KV cache refused a partial removal; re-evaluating")
        self.ctx.clear()
        self._kv_tokens = []
        self._sync_prefix([*reply.history[:reply.n_past], *kept], None)
        self.rollback_supported = False
        rnd.drafter = rnd.policy = None
        reply.note = "The KV cache could not roll back; speculation was turned off."

    def _govern_threads(self, reply: _Reply, now: float) -> None:
        """Switch the thread count when the governor says the free cores changed; the
        stretch decoded at the old count keeps its own plain baseline (``now``: the
        reply's clock)."""
        old = self.ctx.n_threads
        n = self._governor.poll(old)
        if n is None:
            return
        start = reply.t_prefill if reply.stretch_start is None else reply.stretch_start
        reply.stretches.append((now - start, self._plain_steps.baseline(
            reply.own_plain, time.monotonic(), old, self._governor.other)))
        reply.stretch_start = now
        self.ctx.set_threads(n, n)
        reply.own_plain.clear()  # passes at the old count are no baseline any more
        reply.last_pass = 0  # nor is the next, the first at the new count
        if self._draft_drafter is not None:
            self._draft_drafter.ctx.set_threads(n, n)
        table = self._pass_table()
        for policy in self._policies.values():
            policy.pass_times = table

    def _snapshot(self, reply: _Reply, rnd: Round, now: float) -> SpecStats:
        c = rnd.counters
        n_threads = self.ctx.n_threads
        other = self._governor.other
        base = self._plain_steps.baseline(reply.own_plain, time.monotonic(), n_threads, other)
        if reply.stretches:  # the thread count changed: each stretch against its own
            start = reply.t_prefill if reply.stretch_start is None else reply.stretch_start
            base = combined_baseline([*reply.stretches, (now - start, base)])
        return SpecStats(
            mode=rnd.mode,
            draft_max=c.k,
            adaptive=rnd.adaptive and rnd.drafter is not None,
            prompt_tokens=len(reply.prompt),
            prefill_tokens=reply.prefill_tokens,
            emitted=len(reply.emitted),
            rounds=c.rounds,
            draft_rounds=c.draft_rounds,
            verified=c.verified,
            proposed=c.proposed,
            accepted=c.accepted,
            accepted_at=tuple(c.accepted_at),
            verified_at=tuple(c.verified_at),
            draft_steps=(rnd.drafter.forward_passes - reply.passes0) if rnd.drafter else 0,
            draft_time=c.draft_time,
            draft_catch_up_time=c.draft_catch_up_time,
            target_time=c.target_time,
            draft_passes=c.draft_passes,
            draft_pass_time=c.draft_pass_time,
            declined=c.declined,
            target_step_time=self.target_step_time,
            ttft=(reply.t_first - reply.t0) if reply.t_first is not None else 0.0,
            prefill_time=reply.t_prefill - reply.t0,
            decode_time=now - reply.t_prefill,
            total_time=now - reply.t0,
            fallback_reason=reply.note,
            calibrated=self.target_step_time is not None,
            plain_step_time=base[0] if base else None,
            plain_step_range=base[1] if base else None,
            plain_step_source=base[2] if base else None,
            n_threads=n_threads,
            other_cores=other,
            n_ctx=self.ctx.n_ctx,
        )

    def _calibrate_target_step(self, passes: int = 4) -> None:
        """Time plain one-token target passes (the denominator of the draft cost ratio c,
        and the draft-length policy's t(1)).

        Speculative rounds may never run one-token passes, so at load time the target
        evaluates one token alone a few times on an empty cache (the first pass builds the
        graph and is not counted), and the cache is emptied again. This happens before
        any reply, so it never shows in TTFT, prefill or decode times.
        """
        token = self.target.bos if self.target.bos >= 0 else 0
        times = []
        for _ in range(passes):
            t = time.perf_counter()
            self.ctx.decode([token], 0, logits="last")
            self.ctx.synchronize()
            times.append(time.perf_counter() - t)
            if self.ctx.n_rs_seq and not self.snapshot_bytes:
                self.snapshot_bytes = self.ctx.n_rs_seq * self.ctx.recurrent_state_bytes()
            self.ctx.clear()
        self._kv_tokens = []
        self._target_step_samples.append(min(times))
        self._calibrate_pass_sizes(min(times))
        for t in times[1:]:
            self._pass_table().observe(1, t)

    #: the pass sizes :meth:`_calibrate_pass_sizes` times, most telling first: the
    #: verifications of drafts of 1, 3, 7, 15 and 16 tokens, then the sizes at the
    #: steps of a CPU's cost curve (a size not timed is interpolated)
    CALIBRATION_SIZES = (2, 4, 8, 16, 17, 12, 5, 9, 13, 3)
    #: seconds :meth:`_calibrate_pass_sizes` may spend at load
    CALIBRATION_BUDGET = 1.0

    def _calibrate_pass_sizes(self, t1: float) -> None:
        """Time target passes of the sizes of :attr:`CALIBRATION_SIZES` that a draft may
        verify here, twice each in two sweeps, within :attr:`CALIBRATION_BUDGET` seconds,
        and keep the faster of each size's passes (``t1`` for one token: the fastest
        one-token pass timed at load) as the shape of the cost curve that every pass table
        of the session starts with (:meth:`_pass_table`,
        :meth:`~app.engine.policy.PassTimes.calibrate`). Called at load, before any pass
        table exists; the cache is left empty.

        On a CPU the cost of a pass is a stepped curve (the repacked Q4_K kernels of an
        AVX-512 build made 4, 8, 12 and 16 tokens cheaper than 5, 9, 13 and 17: 2.23,
        3.35, 4.28 and 5.13 against 3.43, 4.52, 5.53 and 6.39 one-token passes); a policy
        that knows only the sizes it has verified interpolates between them and misses
        the cheap steps. A pass that could overrun the budget is skipped (a pass over n
        tokens is taken to cost what it cost in the first sweep, else n one-token
        passes), so a large model times fewer sizes. The first pass of a shape larger
        than any before ran 10–15 % slower than the next (it builds its graph): the
        faster of two is kept.

        Raises:
            TandemError: llama.cpp failed to decode.
        """
        if not self.rollback_supported:
            return  # speculation stays off: no draft is ever verified
        bound = K_MAX if self.draft_bound is None else self.draft_bound
        limit = min(self.n_ctx, self.ctx.n_outputs_max, bound + 1)
        sizes = [n for n in self.CALIBRATION_SIZES if n <= limit]
        best: dict[int, float] = {1: t1}
        spent = 0.0
        for _ in range(2):
            for n in sizes:
                if spent + best.get(n, n * t1) > self.CALIBRATION_BUDGET:
                    continue
                dt = self._time_pass(n)
                spent += dt
                best[n] = min(dt, best.get(n, dt))
        self._kv_tokens = []
        self._calibration = best

    def _note_recurrent_rollback(self) -> None:
        """Say in the load notes how a recurrent or hybrid target rolls back, and what
        its snapshots cost, or that it cannot (then speculation stays off for it)."""
        if not self.target.is_recurrent:
            return
        if self.ctx.n_rs_seq > 0:
            self.notes.append(
                f"This model has recurrent state: to roll back rejected draft tokens its "
                f"context keeps {self.ctx.n_rs_seq} state snapshots "
                f"({_bytes_words(self.snapshot_bytes)}), so a draft is at most "
                f"{self.ctx.n_rs_seq} tokens long.")
        elif self.config.rollback_depth > 0:
            self.notes.append(
                "This model has recurrent state that llama.cpp cannot roll back for its "
                "architecture, so replies decode without speculation.")

    def _note_mtp_layers(self, path: Path) -> None:
        """Say in the load notes what the model's MTP (nextn) layers cost in memory: they
        are loaded with every model that carries them (for the MTP drafter), whichever
        drafter the replies use. The bytes are their tensors' in the GGUF
        (:attr:`app.catalog.gguf_meta.GGUFInfo.nextn_bytes`), which is what the
        process's resident memory grows by when they load (docs/benchmarks.md)."""
        if not (self.target.mtp_loaded and self.target.n_layer_nextn > 0):
            return
        self.mtp_bytes = 0
        try:
            info = inspect_gguf(path)
        except TandemError:
            return
        if not info.nextn_bytes:
            return
        self.mtp_bytes = info.nextn_bytes
        n = self.target.n_layer_nextn
        share = info.nextn_bytes / self.target.size_bytes if self.target.size_bytes else 0.0
        self.notes.append(
            f"This model's {n} MTP (nextn) layer{'s stay' if n != 1 else ' stays'} loaded for the "
            f"MTP drafter: {_bytes_words(info.nextn_bytes)} ({share:.0%} of its weights), "
            "whichever drafter the replies use.")

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
            for kept in self._kept.values():
                if not isinstance(kept, Unavailable):
                    kept.close()
            self._kept.clear()
            if self.draft_model is not None:
                self.draft_model.close()
                self.draft_model = None
            self._drop_assistant()
            self.ctx.close()
            self.target.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
