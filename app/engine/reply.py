"""One reply, recorded: what was asked, the speculation used, and what came back.

:class:`ReplyRecord` is the last event of every generation
(:meth:`app.engine.session.Session.generate`) and the one value every consumer keeps of
a reply, in the spirit of simonw/llm's ``Response``: the chat service returns it as a
reply job's value (filling in the conversation, the speculation asked for and Auto's
choice), the window stores it, the local API answers from it and shows it on the gauge,
the race and the benchmarks wrap it with their own context (a lane label, a prompt name).
Qt-free and frozen, so it crosses threads as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from app.engine.stats import SpecStats
from app.options import SamplingParams, SpecMode, SpeculationConfig

if TYPE_CHECKING:
    from app.engine.auto import AutoChoice
    from app.engine.chat import ChatMessage
    from app.engine.context_fit import ContextFit

FinishReason = Literal["stop", "length", "cancelled"]
"""``stop``: an end-of-generation token or a stop string; ``length``: max_tokens or the
context window was reached; ``cancelled``: the cancel event was set."""

#: how a reply ended when it was cut short (its token limit or the context window, a
#: stop; ``interrupted``: the history's word for one the app closed on): it can go on
CUT_SHORT = frozenset({"length", "cancelled", "interrupted"})

_CONTEXT_FULL = ("The context window (", " tokens) is full; raise the context length or "
                 "start a new conversation.")


def context_full_note(n_ctx: int) -> str:
    """The note of a reply that ended because the context window of ``n_ctx`` tokens
    was full (its finish reason is ``length``, as OpenAI's API says it)."""
    return f"{_CONTEXT_FULL[0]}{n_ctx}{_CONTEXT_FULL[1]}"


def can_continue(finish_reason: str | None, text: str, note: str | None) -> bool:
    """Whether a finished reply can go on (Continue): it was cut short (:data:`CUT_SHORT`)
    with some text, and not because the context window was full (``note``:
    :func:`context_full_note`; going on would drop the conversation to make room)."""
    return finish_reason in CUT_SHORT and bool(text) and not ended_at_full_context(note)


def ended_at_full_context(note: str | None) -> bool:
    """Whether ``note`` ends with :func:`context_full_note`'s line (for any window size;
    an earlier line, such as a drafter's fallback, may come before it)."""
    last = note.rsplit("\n", 1)[-1] if note is not None else ""
    return last.startswith(_CONTEXT_FULL[0]) and last.endswith(_CONTEXT_FULL[1])


Span = tuple[int, int]
"""``(start, end)``: a character range of a reply's text."""


def add_span(spans: list[Span], start: int, end: int) -> None:
    """Append the range ``start`` … ``end`` of draft text to ``spans``, merged with the
    last range when they touch (in place). Empty ranges are ignored."""
    if end <= start:
        return
    if spans and spans[-1][1] == start:
        spans[-1] = (spans[-1][0], end)
    else:
        spans.append((start, end))


def clip_spans(spans: Sequence[Span], length: int) -> list[Span]:
    """``spans`` cut to the first ``length`` characters (a stop string may have shortened
    the final text)."""
    return [(a, min(b, length)) for a, b in spans if a < length]


def draft_spans(pieces: Iterable[tuple[str, bool]]) -> tuple[Span, ...]:
    """The character ranges of draft text in a text made of ``pieces`` (text, from an
    accepted draft), touching ranges merged."""
    spans: list[Span] = []
    n = 0
    for text, from_draft in pieces:
        if from_draft:
            add_span(spans, n, n + len(text))
        n += len(text)
    return tuple(spans)


@dataclass(frozen=True, slots=True)
class ReplyRequest:
    """What a reply was asked for.

    ``sampling``: the sampling settings as given (a chat template's stop strings are not
    added here). ``speculation``: the speculation asked for (``auto`` stays ``auto``; what
    was used is :attr:`ReplyRecord.speculation`). ``prompt_tokens``: the prompt's length
    in tokens. ``messages``: the conversation of a chat reply (empty for a completion);
    ``prompt``: a completion's prompt text (None when given as token ids, and for a chat
    reply).
    """

    sampling: SamplingParams
    speculation: SpeculationConfig
    prompt_tokens: int
    messages: tuple[ChatMessage, ...] = ()
    prompt: str | None = None

    @property
    def kind(self) -> Literal["chat", "completion"]:
        """``chat`` (through the chat template) or ``completion`` (a raw prompt)."""
        return "chat" if self.messages else "completion"


@dataclass(frozen=True, slots=True)
class ReplyRecord:
    """A finished reply (stopped, cut at max_tokens or the context, or cancelled).

    Attributes:
        request: what was asked (:class:`ReplyRequest`).
        speculation: the speculation actually used: Auto resolved to its drafter and k
            (:attr:`auto` says why); a drafter that could not run leaves the asked
            configuration here and says so in :attr:`note`, with ``stats.mode`` off.
        reason: why it ended (:data:`FinishReason`).
        text: the reply's final text (after stop-string and UTF-8 hold-back).
        token_ids: the reply's tokens (no end-of-generation token).
        token_times: when each token was sampled, seconds since the request started.
        stats: the final statistics (:class:`~app.engine.stats.SpecStats`: counts, α, τ,
            TTFT, prefill and decode times in seconds, the mode and k in effect).
        seed: the sampler's seed actually used.
        note: for the user when something noteworthy happened, a line each (speculation
            fell back to plain decoding; the context window filled up, always the last
            line: :func:`ended_at_full_context`).
        spans: character ranges of :attr:`text` that came from accepted draft tokens.
        auto: Auto's choice for this reply and why (None unless Auto was asked for).
        context: what was dropped from a chat conversation to fit the context window
            (:class:`~app.engine.context_fit.ContextFit`; None: nothing was).
        started_at: wall-clock time the request started, seconds since the epoch
            (``time.time()``; 0.0 when unknown).
        began: False for a reply cancelled before it began (:func:`not_started`).
    """

    request: ReplyRequest
    speculation: SpeculationConfig
    reason: FinishReason
    text: str
    token_ids: tuple[int, ...]
    token_times: tuple[float, ...]
    stats: SpecStats
    seed: int
    note: str | None = None
    spans: tuple[Span, ...] = ()
    auto: AutoChoice | None = None
    started_at: float = 0.0
    context: ContextFit | None = None
    began: bool = True

    @property
    def mode(self) -> SpecMode:
        """The drafter that drafted (off when none did, also after a fallback)."""
        return self.stats.mode

    @property
    def draft_max(self) -> int:
        """The draft length k in effect (0 without a drafter)."""
        return self.stats.draft_max

    def asked(self, **changes: Any) -> ReplyRecord:
        """This record with fields of its :attr:`request` changed (the chat service
        fills in the conversation and the speculation asked for).

        Raises:
            TypeError: a name is no field of :class:`ReplyRequest`.
        """
        return dataclasses.replace(self, request=dataclasses.replace(self.request, **changes))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the request's settings, the speculation used, the outcome and the
        statistics (token ids and times left out)."""
        return {
            "kind": self.request.kind,
            "sampling": self.request.sampling.model_dump(mode="json"),
            "speculation_asked": self.request.speculation.model_dump(mode="json"),
            "speculation": self.speculation.model_dump(mode="json"),
            "auto": self.auto.to_dict() if self.auto is not None else None,
            "context": self.context.to_dict() if self.context is not None else None,
            "prompt_tokens": self.request.prompt_tokens,
            "finish_reason": self.reason,
            "text": self.text,
            "draft_spans": [list(s) for s in self.spans],
            "seed": self.seed,
            "note": self.note,
            "started_at": self.started_at,
            "stats": self.stats.to_dict(),
        }


class ReplyFields:
    """The reply's own fields, read through for a record that wraps a
    :class:`ReplyRecord` as ``reply`` (a bench run, a race lane)."""

    __slots__ = ()
    reply: ReplyRecord

    @property
    def mode(self) -> SpecMode:
        """The drafter that drafted (off when none did)."""
        return self.reply.stats.mode

    @property
    def draft_max(self) -> int:
        return self.reply.stats.draft_max

    @property
    def text(self) -> str:
        return self.reply.text

    @property
    def finish_reason(self) -> str:
        return self.reply.reason

    @property
    def token_ids(self) -> tuple[int, ...]:
        return self.reply.token_ids

    @property
    def token_times(self) -> tuple[float, ...]:
        return self.reply.token_times

    @property
    def stats(self) -> SpecStats:
        return self.reply.stats


def not_started(request: ReplyRequest) -> ReplyRecord:
    """The record of a reply cancelled before it began: no text, no statistics, reason
    ``cancelled``, ``began`` False (seed -1: none was drawn)."""
    return ReplyRecord(request, request.speculation, "cancelled", "", (), (), SpecStats(),
                       seed=-1, began=False)
