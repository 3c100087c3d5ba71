"""The one speculation and sampling vocabulary that every layer imports.

The lowest layer of the app (it imports nothing from it): the drafter modes
(:class:`SpecMode`, with the words the user sees for each), the speculation settings of
one reply (:class:`SpeculationConfig`), its sampling settings (:class:`SamplingParams`)
and the largest draft length anywhere in the app (:data:`K_MAX`). The engine takes these
objects as they are, the settings file stores them as they are, the widgets and the
command line build them; no layer keeps a copy with other fields or other defaults.

Both configs are frozen pydantic models with ``extra="forbid"``; change one with
:meth:`SpeculationConfig.with_changes` / :meth:`SamplingParams.with_changes`, which
validate (pydantic's ``model_copy(update=…)`` does not).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

#: The largest draft length k (tokens proposed per round) the engine, the settings, the
#: command line and the widgets accept. Longer drafts are also capped per round by the
#: context's outputs and the room left in n_ctx.
K_MAX = 64

#: llama.cpp's "random seed" value is 2³²−1, so the largest fixed seed is 2³²−2.
SEED_MAX = 2**32 - 2


class SpecMode(str, Enum):
    """How a reply is drafted. The value is the word stored in settings, statistics and
    JSON; :attr:`label` is what a picker shows; :attr:`words` fits inside a sentence.

    To add a drafter, add a member here and its two texts to :data:`_TEXTS` below.
    """

    OFF = "off"
    PROMPT_LOOKUP = "prompt-lookup"
    DRAFT_MODEL = "draft-model"
    SUFFIX = "suffix"
    AUTO = "auto"

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def _missing_(cls, value: object) -> SpecMode | None:
        # "plain" is how statistics stored before this vocabulary existed said "off".
        return cls.OFF if value == "plain" else None

    @property
    def label(self) -> str:
        """The mode in a picker: "Off", "Prompt lookup", "Draft model", "Suffix lookup"."""
        return _TEXTS[self][0]

    @property
    def words(self) -> str:
        """The mode inside a sentence: "no speculation", "prompt lookup", "draft model"."""
        return _TEXTS[self][1]


#: (label, words) of every mode
_TEXTS: dict[SpecMode, tuple[str, str]] = {
    SpecMode.OFF: ("Off", "no speculation"),
    SpecMode.PROMPT_LOOKUP: ("Prompt lookup", "prompt lookup"),
    SpecMode.DRAFT_MODEL: ("Draft model", "draft model"),
    SpecMode.SUFFIX: ("Suffix lookup", "suffix lookup"),
    SpecMode.AUTO: ("Auto", "the drafter measured fastest here"),
}


#: The draft length k of a drafter that costs no forward pass per draft token (prompt
#: lookup, suffix lookup, and auto, which picks among them): llama.cpp's own n-gram
#: drafters propose up to 48–64 tokens by default (``common_params_speculative``), and
#: with the cost-aware policy (:mod:`app.engine.policy`) a longer k is only a ceiling.
#: Measured on Gemma 3 270M, 2 threads, suffix lookup, 16 against 8: replayed on recorded
#: replies (bench/policy_replay.py --k 8,16 --repeat 3) builtin:agent 2.080× against
#: 2.032× plain, builtin:code 1.962× against 1.855×, builtin:chat 1.655× against 1.608×,
#: builtin:chat at temperature 0.8 1.044× against 1.045×; timed in one run each
#: (python -m app bench --suffix --k 8,16 --repeat 3, docs/closing-note-round7.md)
#: builtin:code 1.725× against 1.658× (ratio of median reply rates), builtin:chat
#: greedy 1.356× against 1.325×; builtin:agent even within noise (1.972× against 1.947×
#: in one run, 1.943× against 2.019× in another).
FREE_DRAFTER_K = 16
#: The draft length k of a draft model: every draft token is a forward pass of the
#: draft, and a round whose draft is rejected early wastes them (llama.cpp's default for
#: a draft model is 3, ``common_params_speculative_draft.n_max``).
DRAFT_MODEL_K = 4


def default_draft_max(mode: SpecMode | str) -> int:
    """The draft length k a configuration of this drafter gets unless one is given:
    :data:`DRAFT_MODEL_K` for the draft model, :data:`FREE_DRAFTER_K` otherwise.

    Raises:
        ValueError: ``mode`` is no :class:`SpecMode` value.
    """
    return DRAFT_MODEL_K if SpecMode(mode) is SpecMode.DRAFT_MODEL else FREE_DRAFTER_K


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
            matched context token (vLLM's ``suffix_decoding_max_spec_factor``).
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
        "suffix lookup: the most draft tokens per matched context token"))
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

    def with_changes(self, **changes: Any) -> SpeculationConfig:
        """A copy with ``changes`` applied and validated (raises ValueError). Another
        ``mode`` without a ``draft_max`` takes the k :meth:`k_for` keeps."""
        if "mode" in changes and "draft_max" not in changes:
            try:
                changes["draft_max"] = self.k_for(changes["mode"])
            except (ValueError, TypeError):
                pass  # an unknown mode: validation names it
        return _with_changes(self, changes)


class SamplingParams(BaseModel):
    """Sampling and stopping settings for one reply.

    ``temperature`` ≤ 0 means greedy decoding. ``seed`` −1 picks a random seed, which is
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
    seed: int = Field(-1, ge=-1, le=SEED_MAX, description=(
        "-1 = a new random seed per reply (the seed used is reported with it)"))
    max_tokens: int = Field(512, ge=1, le=1_000_000, description=(
        "the most tokens one reply may have"))
    stop: tuple[str, ...] = Field((), description="text that ends the reply where it appears")

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
