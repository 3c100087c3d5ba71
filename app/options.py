"""The one speculation and sampling vocabulary that every layer imports.

The lowest layer of the app (it imports nothing from it): the drafter modes
(:class:`SpecMode`, with the words the user sees for each) and the drafter registry's
declarations (:class:`DrafterInfo`, :func:`declare_drafter`: every list of drafters — the
pickers, the command-line switches, Auto's candidates, the docs table — is made from
them), the speculation settings of
one reply (:class:`SpeculationConfig`), its sampling settings (:class:`SamplingParams`)
and the largest draft length anywhere in the app (:data:`K_MAX`). The engine takes these
objects as they are, the settings file stores them as they are, the widgets and the
command line build them; no layer keeps a copy with other fields or other defaults.

Both configs are frozen pydantic models with ``extra="forbid"``; change one with
:meth:`SpeculationConfig.with_changes` / :meth:`SamplingParams.with_changes`, which
validate (pydantic's ``model_copy(update=…)`` does not).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Protocol, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import core_schema

#: The largest draft length k (tokens proposed per round) the engine, the settings, the
#: command line and the widgets accept. Longer drafts are also capped per round by the
#: context's outputs and the room left in n_ctx.
K_MAX = 64

#: Memory for saved prompt states by default, MiB (:mod:`app.engine.prefix_cache`): the
#: KV state of a sequence the context gave up (another conversation, an API request) is
#: kept so that returning to it re-reads only what is new. llama-server's ``--cache-ram``
#: plays the same part (default 8192 MiB there).
PROMPT_CACHE_MIB = 1024
#: The most memory the prompt cache may be given, MiB (1 TiB: a bound for typing errors)
PROMPT_CACHE_MAX_MIB = 1_048_576

#: llama.cpp's "random seed" value is 2³²−1, so the largest fixed seed is 2³²−2.
SEED_MAX = 2**32 - 2

#: The context window a model is loaded with unless one is given, tokens (the window's
#: Sampling → Model, every command's ``--n-ctx``).
N_CTX = 4096
#: jobs that may wait behind the running one in the chat service before submitting is
#: refused (QueueFullError; the local API's 429)
DEFAULT_QUEUE_LIMIT = 16
#: the port an OpenAI-compatible server listens on by default: Tandem's local API and the
#: commands it writes for llama-server (its default too; vLLM's is 8000)
DEFAULT_PORT = 8080
#: The context window's range in the settings and the window, tokens (1 Mi: a bound for
#: typing errors; a model's own maximum is checked at load).
N_CTX_MIN, N_CTX_MAX = 256, 1_048_576


#: llama.cpp's ``GGML_MAX_N_THREADS``: the most threads ggml runs
GGML_MAX_N_THREADS = 512


def max_threads() -> int:
    """The most CPU threads a config may ask for: 4 × the logical CPUs, at most
    :data:`GGML_MAX_N_THREADS`. More threads than cores only make the threads wait on
    each other; far more is a typo."""
    return min(GGML_MAX_N_THREADS, 4 * (os.cpu_count() or 1))


#: The draft length k of a drafter that costs no forward pass per draft token (prompt
#: lookup, suffix lookup, and auto, which picks among them): llama.cpp's own n-gram
#: drafters propose up to 48–64 tokens by default (``common_params_speculative``), and
#: with the cost-aware policy (:mod:`app.engine.policy`) a longer k is only a ceiling;
#: 16 was faster than 8 on the built-in sets (docs/benchmarks.md).
FREE_DRAFTER_K = 16
#: The draft length k of a draft model: every draft token is a forward pass of the
#: draft, and a round whose draft is rejected early wastes them (llama.cpp's default for
#: a draft model is 3, ``common_params_speculative_draft.n_max``).
DRAFT_MODEL_K = 4


class DrafterNeeds(str, Enum):
    """What a drafter needs besides the target: nothing, a second GGUF (a draft model
    with the target's tokenizer), or multi-token-prediction (nextn) layers in the
    target's own GGUF."""

    NOTHING = "nothing"
    DRAFT_MODEL = "draft-model"
    MTP_HEAD = "mtp-head"

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, slots=True)
class DrafterInfo:
    """What a drafter declares about itself; every list of drafters is made from these.

    Attributes:
        mode: the word stored in settings, statistics and JSON (never changes once
            released: stored values must keep reading back).
        label: the drafter in a picker ("Prompt lookup").
        words: the drafter inside a sentence ("prompt lookup").
        needs: what it needs besides the target (:class:`DrafterNeeds`).
        default_k: the draft length k a configuration of it gets unless one is given.
        options: the :class:`SpeculationConfig` fields it reads besides ``draft_max``,
            ``draft_min`` and ``adaptive``.
        auto_rank: None: Auto never picks it; a number: Auto may, and at equal scores
            prefers the lower number.
        cli_flag: its command-line switch (``--suffix``); a drafter that needs a draft
            model takes the model's path after it.
        summary: one sentence for the docs table (:func:`drafter_table_markdown`).
        picker_expect: the model picker's speedup column for it ("depends on
            repetition"; a draft model's is computed).
        picker_status: the picker's status column ("always available: …").
        picker_tooltip: the picker row's tooltip.
        explanation: a paragraph the picker shows when it is chosen (default:
            ``summary``).
        prior_acceptance: the acceptance rate α (0 … 1) Auto assumes for it before it
            has drafted in a conversation, when one is published for its kind (MTP
            heads); None: none is assumed.
        label_with_assistant: its label while a separate MTP assistant drafts for it,
            ``{name}`` standing for the assistant's file name (:meth:`label_for`);
            empty: ``label`` then too.
    """

    mode: str
    label: str
    words: str
    needs: DrafterNeeds
    default_k: int
    options: tuple[str, ...] = ()
    auto_rank: int | None = None
    cli_flag: str | None = None
    summary: str = ""
    picker_expect: str = ""
    picker_status: str = ""
    picker_tooltip: str = ""
    explanation: str = ""
    prior_acceptance: float | None = None
    label_with_assistant: str = ""

    def label_for(self, assistant: str | None = None) -> str:
        """The label in a picker; with ``assistant`` (the file name of a loaded MTP
        assistant) :attr:`label_with_assistant` filled in, where it declares one."""
        if assistant is None or not self.label_with_assistant:
            return self.label
        return self.label_with_assistant.replace("{name}", assistant)


class CarriesHeads(Protocol):
    """A target as far as :func:`drafter_unusable` needs it: how many
    multi-token-prediction (nextn) layers its GGUF carries
    (:class:`app.catalog.gguf_meta.GGUFInfo`, :class:`app.chat.events.ModelInfo`)."""

    @property
    def nextn_layers(self) -> int: ...


def drafter_unusable(info: DrafterInfo, target: CarriesHeads | None, *,
                     assistant: bool = False) -> str | None:
    """Why the drafter ``info`` cannot draft for ``target``, as a status phrase for a
    picker row or a tooltip; None when it can, or when ``target`` is unknown (None).

    The one availability rule the model picker, the chat window's drafter menu, the
    race and Auto share: a drafter that needs MTP drafts with nextn layers the target
    carries (at least one; several are chained heads, one per draft position) or with
    a separate MTP assistant loaded for it (``assistant``: one is loaded, as
    :attr:`app.chat.events.ModelInfo.draft_is_assistant` says). What the build or the
    load check says about running them is known only once the model is loaded, and
    the session says it then.
    """
    if info.needs is not DrafterNeeds.MTP_HEAD or target is None or assistant:
        return None
    if target.nextn_layers <= 0:
        return ("needs multi-token-prediction (nextn) layers in the target's GGUF or a "
                "loaded MTP assistant: this one has neither")
    return None


def mtp_draft_limit(nextn_layers: int, *, assistant: bool = False) -> int | None:
    """The longest draft MTP makes for a target with ``nextn_layers`` nextn layers, or
    None when it has no limit of its own: several layers are chained heads, one per
    draft token, so the draft is at most as long as they are many; one head chained on
    itself, or a separate MTP assistant (``assistant``), drafts as long as asked."""
    return nextn_layers if nextn_layers > 1 and not assistant else None


class _SpecModes(type):
    """The metaclass of :class:`SpecMode`: iteration, ``SpecMode(value)`` look-up."""

    _members: dict[str, SpecMode]

    def __iter__(cls) -> Iterator[SpecMode]:
        """Off, the declared drafters in declaration order, then Auto."""
        modes = list(cls._members.values())
        return iter([m for m in modes if m not in _LAST] + [m for m in modes if m in _LAST])

    def __len__(cls) -> int:
        return len(cls._members)

    def __call__(cls, value: object) -> SpecMode:
        if isinstance(value, SpecMode):
            return value
        if isinstance(value, str) and value in cls._members:
            return cls._members[value]
        known = ", ".join(repr(str(m)) for m in cls)
        raise ValueError(f"{value!r} is not a drafter mode; the modes are {known}")


class SpecMode(str, metaclass=_SpecModes):
    """How a reply is drafted: off, auto, or one declared drafter (:class:`DrafterInfo`).

    The value is the word stored in settings, statistics and JSON; :attr:`label` is what
    a picker shows; :attr:`words` fits inside a sentence. ``SpecMode(value)`` returns the
    one member with that value (members compare with ``is``) and raises ValueError for
    an unknown value; iterating gives every mode, off first and auto last.

    The vocabulary is open: :func:`declare_drafter` adds a drafter's mode. The drafters
    declared here are the ones whose words the settings file and its defaults use; a
    drafter declared in its own engine module (:mod:`app.engine.drafter_kinds`) is known
    once that package is imported, which every front end does before reading settings.
    """

    __slots__ = ()

    OFF: ClassVar[SpecMode]
    PROMPT_LOOKUP: ClassVar[SpecMode]
    DRAFT_MODEL: ClassVar[SpecMode]
    SUFFIX: ClassVar[SpecMode]
    AUTO: ClassVar[SpecMode]

    @classmethod
    def _add(cls, value: str) -> SpecMode:
        member = cls._members.get(value)
        if member is None:
            member = str.__new__(cls, value)
            cls._members[value] = member
        return member

    @property
    def value(self) -> str:
        return str.__str__(self)

    def __str__(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"SpecMode({str.__str__(self)!r})"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return SpecMode, (self.value,)

    def __copy__(self) -> SpecMode:
        return self

    def __deepcopy__(self, memo: object) -> SpecMode:
        return self

    @property
    def label(self) -> str:
        """The mode in a picker: "Off", "Prompt lookup", "Draft model", "Suffix lookup"."""
        info = _INFOS.get(self)
        return info.label if info is not None else _OWN_TEXTS[self][0]

    @property
    def words(self) -> str:
        """The mode inside a sentence: "no speculation", "prompt lookup", "draft model"."""
        info = _INFOS.get(self)
        return info.words if info is not None else _OWN_TEXTS[self][1]

    @property
    def info(self) -> DrafterInfo | None:
        """The drafter's declaration; None for off and auto."""
        return _INFOS.get(self)

    @property
    def needs(self) -> DrafterNeeds | None:
        """What the drafter needs besides the target; None for off and auto."""
        info = _INFOS.get(self)
        return info.needs if info is not None else None

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler
                                     ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls, serialization=core_schema.plain_serializer_function_ser_schema(
                str, return_schema=core_schema.str_schema(), when_used="json"))

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return {"type": "string", "enum": [m.value for m in cls]}


SpecMode._members = {}
SpecMode.OFF = SpecMode._add("off")
SpecMode.PROMPT_LOOKUP = SpecMode._add("prompt-lookup")
SpecMode.DRAFT_MODEL = SpecMode._add("draft-model")
SpecMode.SUFFIX = SpecMode._add("suffix")
SpecMode.AUTO = SpecMode._add("auto")
#: iterated after every drafter
_LAST = frozenset({SpecMode.AUTO})
#: (label, words) of the modes that are no drafter
_OWN_TEXTS: dict[SpecMode, tuple[str, str]] = {
    SpecMode.OFF: ("Off", "no speculation"),
    SpecMode.AUTO: ("Auto", "the drafter measured fastest here"),
}
#: every declared drafter, in declaration order
_INFOS: dict[SpecMode, DrafterInfo] = {}


def declare_drafter(info: DrafterInfo) -> SpecMode:
    """Add a drafter to the vocabulary and return its mode.

    Declaring the same info again returns the same mode (a module imported twice).

    Raises:
        ValueError: the mode is taken by off, auto or another declaration, or the
            declaration is malformed (an empty word, k outside 1 … :data:`K_MAX`).
    """
    if not info.mode or not info.label or not info.words:
        raise ValueError(f"a drafter needs a mode, a label and words: {info!r}")
    if not 1 <= info.default_k <= K_MAX:
        raise ValueError(f"the default k of {info.mode!r} must be within 1 … {K_MAX}")
    existing = SpecMode._members.get(info.mode)
    if existing is not None and (existing in _OWN_TEXTS or _INFOS.get(existing, info) != info):
        raise ValueError(f"the drafter mode {info.mode!r} is already declared")
    mode = SpecMode._add(info.mode)
    _INFOS[mode] = info
    return mode


def withdraw_drafter(mode: SpecMode | str) -> None:
    """Take a drafter declared with :func:`declare_drafter` out of the vocabulary again
    (:func:`app.engine.drafter_kinds.unregister`: a test's drafter, an unloaded plug-in).
    Values of the mode made before stay equal to its word but no longer read back.

    Raises:
        ValueError: ``mode`` is unknown, off, auto, or a drafter declared in this module
            (the settings' defaults use them).
    """
    mode = SpecMode(mode)
    if mode in _OWN_TEXTS or mode in _BUILT_IN:
        raise ValueError(f"the drafter mode {mode.value!r} cannot be withdrawn")
    _INFOS.pop(mode, None)
    SpecMode._members.pop(mode.value, None)


def drafter_infos() -> tuple[DrafterInfo, ...]:
    """Every declared drafter, in declaration order (off and auto are no drafters)."""
    return tuple(_INFOS.values())


def auto_candidates() -> tuple[SpecMode, ...]:
    """The drafters Auto may pick, the preferred at equal scores first."""
    ranked = sorted((i.auto_rank, n, i.mode) for n, i in enumerate(_INFOS.values())
                    if i.auto_rank is not None)
    return tuple(SpecMode(mode) for _, _, mode in ranked)


def drafter_table_markdown() -> str:
    """The drafters as the Markdown table docs/cli.md carries (a test keeps it current)."""
    rows = ["| mode | picker | needs | command line | Auto may pick it | k by default "
            "| its own settings |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for i in _INFOS.values():
        flag = i.cli_flag or ""
        if flag and i.needs is DrafterNeeds.DRAFT_MODEL:
            flag += " PATH"
        own = ", ".join(f"`--{o.replace('_', '-')}`" for o in i.options)
        rows.append(f"| `{i.mode}` | {i.label} | {i.needs} | {f'`{flag}`' if flag else ''} | "
                    f"{'yes' if i.auto_rank is not None else 'no'} | {i.default_k} | {own} |")
    return "\n".join(rows) + "\n"

PROMPT_LOOKUP_INFO = DrafterInfo(
    mode="prompt-lookup", label="Prompt lookup", words="prompt lookup",
    needs=DrafterNeeds.NOTHING, default_k=FREE_DRAFTER_K, options=("ngram_min", "ngram_max"),
    auto_rank=1, cli_flag="--prompt-lookup",
    summary="copies what followed the last n tokens earlier in the prompt or reply",
    picker_expect="depends on repetition",
    picker_status="always available: drafts from text already in the chat",
    picker_tooltip=("Drafts by matching the last tokens against the conversation "
                    "(n-gram lookup); no second model. Best when the reply repeats "
                    "the prompt: code edits, summaries, quotes."),
    explanation=("Drafts come from the conversation itself: the last few tokens are looked "
                 "up in the text so far and what followed them is proposed (n-gram lookup). "
                 "No second model and nothing to check; it helps most when the reply "
                 "repeats the prompt (code edits, summaries, quotes)."))
DRAFT_MODEL_INFO = DrafterInfo(
    mode="draft-model", label="Draft model", words="draft model",
    needs=DrafterNeeds.DRAFT_MODEL, default_k=DRAFT_MODEL_K, options=("draft_p_min",),
    auto_rank=2, cli_flag="--draft",
    summary="a small GGUF with the target's tokenizer drafts greedily")
SUFFIX_INFO = DrafterInfo(
    mode="suffix", label="Suffix lookup", words="suffix lookup",
    needs=DrafterNeeds.NOTHING, default_k=FREE_DRAFTER_K,
    options=("suffix_spec_factor", "suffix_min_prob"), auto_rank=0, cli_flag="--suffix",
    summary="matches the conversation and earlier replies in a suffix index",
    picker_expect="depends on repetition",
    picker_status="always available: drafts from this chat and earlier replies",
    picker_tooltip=("Drafts by matching the text so far against this conversation "
                    "and the replies of earlier ones (suffix decoding); no second "
                    "model. Best for repeated work: tool calls, fixes to the same "
                    "code, summaries."),
    explanation=("Drafts come from this conversation and the replies of earlier ones: the "
                 "longest match of the text so far is found in them and what most often "
                 "followed it is proposed, as long as the match supports it (suffix "
                 "decoding). No second model; it helps most with repeated work (tool "
                 "calls, fixes to the same code, summaries)."))
#: the drafters declared here: the settings' defaults use their words
_BUILT_IN = frozenset(declare_drafter(i) for i in (PROMPT_LOOKUP_INFO, DRAFT_MODEL_INFO,
                                                   SUFFIX_INFO))


def default_draft_max(mode: SpecMode | str) -> int:
    """The draft length k a configuration of this drafter gets unless one is given: its
    declared :attr:`DrafterInfo.default_k` (:data:`DRAFT_MODEL_K` for the draft model),
    :data:`FREE_DRAFTER_K` for off and auto.

    Raises:
        ValueError: ``mode`` is no :class:`SpecMode` value.
    """
    info = SpecMode(mode).info
    return info.default_k if info is not None else FREE_DRAFTER_K


_M = TypeVar("_M", bound=BaseModel)


def _with_changes(model: _M, changes: dict[str, Any]) -> _M:
    return type(model).model_validate({**model.model_dump(), **changes})


class SpeculationConfig(BaseModel):
    """How one reply is drafted.

    Fields:
        mode: the drafter (:class:`SpecMode`).
        draft_max: the draft length k, tokens proposed per round (1 … :data:`K_MAX`);
            when not given, the drafter's default (:func:`default_draft_max`).
        draft_min: a draft shorter than this is discarded and the round decodes
            plainly (llama.cpp's ``--draft-min``).
        draft_p_min: the draft model stops drafting when its top probability falls
            below this (``--draft-p-min``; probability among its 10 best tokens).
        ngram_min / ngram_max: n-gram sizes prompt lookup matches, in tokens.
        suffix_spec_factor: the suffix drafter proposes at most this many tokens per
            matched context token (vLLM's ``suffix_decoding_max_spec_factor``) with a
            fixed k; while ``adaptive`` it scores the matches, and the chosen one's
            draft runs on to k for the policy to cut.
        suffix_min_prob: the suffix drafter stops where its count-estimated probability
            of the next token falls below this (``suffix_decoding_min_token_prob``;
            :mod:`app.engine.suffix`).
        adaptive: k is a maximum and each round verifies only as many draft tokens as
            the costs measured on this machine make worthwhile
            (:mod:`app.engine.policy`); False: always draft up to k (for k sweeps).

    Raises:
        pydantic.ValidationError (a ValueError): a value out of range, or draft_min
            above k while a drafter is chosen.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: SpecMode = Field(SpecMode.OFF, description="the drafter, or off")
    draft_max: int = Field(FREE_DRAFTER_K, ge=1, le=K_MAX, description=(
        "draft length k: the most tokens proposed per round"))
    draft_min: int = Field(0, ge=0, le=K_MAX, description=(
        "a draft shorter than this is dropped and the round decodes plainly "
        "(llama.cpp's --draft-min)"))
    draft_p_min: float = Field(0.0, ge=0.0, le=1.0, description=(
        "the draft model stops when its top-token probability falls below this "
        "(llama.cpp's --draft-p-min)"))
    ngram_min: int = Field(2, ge=1, le=16, description=(
        "prompt lookup: the shortest n-gram it matches"))
    ngram_max: int = Field(4, ge=1, le=16, description=(
        "prompt lookup: the longest n-gram it matches"))
    suffix_spec_factor: float = Field(1.0, gt=0.0, le=float(K_MAX), description=(
        "suffix lookup: the most draft tokens per matched context token with a fixed k "
        "(adaptive: the cap that scores the matches; the chosen draft runs on to k)"))
    suffix_min_prob: float = Field(0.1, ge=0.0, le=1.0, description=(
        "suffix lookup: stop drafting where the next token's estimated probability "
        "falls below this"))
    adaptive: bool = Field(True, description=(
        "adaptive: verify only as many draft tokens as this machine's measured costs make "
        "worthwhile (False: always draft up to k)"))

    @model_validator(mode="before")
    @classmethod
    def _default_k_of_the_drafter(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "draft_max" not in data:
            try:
                return {**data, "draft_max": default_draft_max(data.get("mode", SpecMode.OFF))}
            except (ValueError, TypeError):
                return data  # an unknown mode: the field's own error says so
        return data

    @field_validator("draft_min")
    @classmethod
    def _draft_min_within_k(cls, v: int, info: ValidationInfo) -> int:
        # every draft would be discarded: the "speculation" would only cost draft steps
        k = info.data.get("draft_max")  # declared above, so validated first
        if info.data.get("mode", SpecMode.OFF) is not SpecMode.OFF and k is not None and v > k:
            raise ValueError(
                f"draft_min ({v}) is larger than the draft length k ({k}), so every draft would "
                "be discarded; lower draft_min or raise k"
            )
        return v

    @field_validator("ngram_max")
    @classmethod
    def _ngram_range(cls, v: int, info: ValidationInfo) -> int:
        low = info.data.get("ngram_min")  # declared above, so validated first
        if info.data.get("mode", SpecMode.OFF) is not SpecMode.OFF and low is not None and v < low:
            raise ValueError(
                f"ngram_max ({v}) is smaller than ngram_min ({low}): prompt lookup matches "
                "n-grams from ngram_max tokens down to ngram_min; swap them")
        return v

    @property
    def speculating(self) -> bool:
        """Whether a drafter is chosen (mode is not off; auto counts as chosen)."""
        return self.mode is not SpecMode.OFF

    def k_for(self, mode: SpecMode | str) -> int:
        """The k to keep when the drafter changes to ``mode``: a k at this drafter's
        default becomes the new drafter's default, a k chosen by hand stays.

        Raises:
            ValueError: an unknown mode.
        """
        if self.draft_max == default_draft_max(self.mode):
            return default_draft_max(mode)
        return self.draft_max

    def keeping_k(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """``changes`` with the k :meth:`k_for` keeps added where they name another
        ``mode`` and no ``draft_max`` (an unknown mode is left for validation to name)."""
        out = dict(changes)
        if "mode" in out and "draft_max" not in out:
            try:
                out["draft_max"] = self.k_for(out["mode"])
            except (ValueError, TypeError):
                pass
        return out

    def with_changes(self, **changes: Any) -> SpeculationConfig:
        """A copy with ``changes`` applied and validated (raises ValueError). Another
        ``mode`` without a ``draft_max`` takes the k :meth:`k_for` keeps."""
        return _with_changes(self, self.keeping_k(changes))


class ContextOverflow(str, Enum):
    """What a chat reply does when the conversation does not fit in the context window
    (LM Studio's three policies, by the same names).

    The system prompt and the message being answered are always kept; earlier messages
    are dropped in whole exchanges (a user message with the reply to it), so that the
    roles still alternate as chat templates require:

    * ``truncate-middle``: keep the first exchange (it usually states the task) and drop
      the oldest exchanges after it; the first goes too only when nothing else is left;
    * ``rolling-window``: drop the oldest exchanges;
    * ``stop``: drop nothing; a conversation that does not fit is refused with an error.
    """

    TRUNCATE_MIDDLE = "truncate-middle"
    ROLLING_WINDOW = "rolling-window"
    STOP = "stop"

    @property
    def label(self) -> str:
        """The policy in a picker: "Truncate middle", "Rolling window", "Stop"."""
        return {"truncate-middle": "Truncate middle", "rolling-window": "Rolling window",
                "stop": "Stop at the limit"}[self.value]


class SamplingParams(BaseModel):
    """Sampling and stopping settings for one reply.

    ``context_overflow``: what a chat reply does with a conversation longer than the
    context window (:class:`ContextOverflow`; a plain completion that does not fit is
    always refused). ``temperature`` ≤ 0 means greedy decoding. ``seed`` −1 picks a random seed, which is
    reported back so a reply can be reproduced (2³²−1 is llama.cpp's own "random seed"
    value, so the largest fixed seed is :data:`SEED_MAX`). ``max_tokens`` counts reply
    tokens (the end-of-generation token is not counted). Defaults are llama.cpp's
    (``common_params_sampling``), except ``max_tokens``.

    Raises:
        pydantic.ValidationError (a ValueError): a value out of range.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(0.8, ge=0.0, le=5.0, description=(
        "temperature; 0 = greedy (always the most likely token)"))
    top_k: int = Field(40, ge=0, le=100_000, description=(
        "keep the k most likely tokens (0 = all)"))
    top_p: float = Field(0.95, gt=0.0, le=1.0, description=(
        "nucleus sampling: keep the smallest set with this probability mass"))
    min_p: float = Field(0.05, ge=0.0, le=1.0, description=(
        "drop tokens below this fraction of the top token's probability"))
    repeat_penalty: float = Field(1.0, gt=0.0, le=5.0, description=(
        "1 = off; above 1 discourages repeating recent tokens (the last repeat_last_n)"))
    repeat_last_n: int = Field(64, ge=0, description=(
        "tokens the repeat penalty looks back over"))
    dry_multiplier: float = Field(0.0, ge=0.0, le=5.0, description=(
        "DRY: 0 = off; above 0 discourages the reply from repeating its own earlier "
        "token sequences (loops), not from copying the prompt"))
    dry_base: float = Field(1.75, ge=1.0, le=4.0, description=(
        "DRY: the penalty grows as dry_base ** (repeat length - dry_allowed_length)"))
    dry_allowed_length: int = Field(2, ge=1, le=64, description=(
        "DRY: repeats up to this many tokens are free"))
    seed: int = Field(-1, ge=-1, le=SEED_MAX, description=(
        "-1 = a new random seed per reply (the seed used is reported with it)"))
    max_tokens: int = Field(512, ge=1, le=1_000_000, description=(
        "the most tokens one reply may have"))
    stop: tuple[str, ...] = Field((), description="text that ends the reply where it appears")
    context_overflow: ContextOverflow = Field(ContextOverflow.TRUNCATE_MIDDLE, description=(
        "when a conversation does not fit in the context window: drop earlier messages "
        "from the middle (keeping the first exchange) or the oldest ones, or stop with an "
        "error; the system prompt is always kept"))

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def with_changes(self, **changes: Any) -> SamplingParams:
        """A copy with ``changes`` applied and validated (raises ValueError)."""
        return _with_changes(self, changes)


def parse_draft_lengths(text: str) -> tuple[int, ...]:
    """Draft lengths from text such as ``"1, 2, 3, 4, 5, 6, 8"`` (sorted, distinct).

    Commas, semicolons and spaces separate the numbers. Used by ``--k`` on the command
    line and by the race window's k sweep.

    Raises:
        ValueError: not whole numbers, none at all, or outside 1 … :data:`K_MAX` (the
            message is written for the user).
    """
    parts = [p for p in text.replace(";", ",").replace(" ", ",").split(",") if p.strip()]
    try:
        ks = sorted({int(p) for p in parts})
    except ValueError:
        raise ValueError(
            f"Draft lengths must be whole numbers separated by commas, not {text!r}."
        ) from None
    if not ks:
        raise ValueError("Give at least one draft length k.")
    if ks[0] < 1 or ks[-1] > K_MAX:
        raise ValueError(f"Draft lengths must be between 1 and {K_MAX}.")
    return tuple(ks)


@dataclass(frozen=True, slots=True)
class FieldSchema:
    """What a front end needs to offer one numeric field of :class:`SamplingParams` or
    :class:`SpeculationConfig`: its default, its description (help and tooltip text) and
    its bounds. ``low``/``high``: the bound, None where there is none; ``low_open``/
    ``high_open``: the bound itself is not allowed (pydantic's ``gt``/``lt``)."""

    name: str
    default: Any
    description: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def range_text(self) -> str:
        """The bounds in words for help texts: ``0 … 5``, ``> 0 … 1``, ``≥ 0``."""
        low = "" if self.low is None else ("> " if self.low_open else "") + _num(self.low)
        high = "" if self.high is None else ("< " if self.high_open else "") + _num(self.high)
        if low and high:
            return f"{low} … {high}"
        if low:
            return low if self.low_open else f"≥ {low}"
        return high if self.high_open else (f"≤ {high}" if high else "")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def field_schema(model: type[BaseModel], name: str) -> FieldSchema:
    """The :class:`FieldSchema` of field ``name`` of ``model`` (read from its pydantic
    ``Field``), so that command-line help, widget ranges and tooltips come from here.

    Raises:
        KeyError: ``model`` has no such field.
    """
    info = model.model_fields[name]
    bounds: dict[str, Any] = {}
    for m in info.metadata:
        for key, attr, is_open in (("low", "ge", False), ("low", "gt", True),
                                   ("high", "le", False), ("high", "lt", True)):
            value = getattr(m, attr, None)
            if value is not None:
                bounds[key] = value
                bounds[f"{key}_open"] = is_open
    return FieldSchema(name=name, default=info.default, description=info.description or "",
                       **bounds)
