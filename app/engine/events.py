"""Events yielded by :meth:`app.engine.session.Session.generate`.

Small frozen dataclasses, so the UI can pass them across threads as signal payloads and
the CLI can print them. Times are seconds since the request started
(``time.perf_counter`` based).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.context_fit import ContextFit
from app.engine.reply import ReplyRecord
from app.engine.stats import SpecStats


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Final text released by the stream (after UTF-8 and stop-string hold-back).

    ``from_draft``: the text came from accepted draft tokens (the chat view can tint it).
    ``t``: when it was released. ``n_tokens``: reply tokens emitted so far.
    """

    text: str
    from_draft: bool
    t: float
    n_tokens: int


@dataclass(frozen=True, slots=True)
class StatsUpdate:
    """A statistics snapshot, yielded at most every ``stats_interval`` seconds."""

    stats: SpecStats


@dataclass(frozen=True, slots=True)
class PrefillProgress:
    """Prompt processing advanced: yielded before the first chunk and after each chunk
    of at most ``n_batch`` tokens is evaluated.

    ``done`` of ``total`` tokens this prefill evaluates have been read; ``cached``: prompt
    tokens taken from the KV cache or a saved state instead (not in ``total``);
    ``elapsed``: seconds since the prefill began.
    """

    done: int
    total: int
    cached: int
    elapsed: float

    @property
    def seconds_left(self) -> float | None:
        """Time left at the rate so far, seconds (None before the first chunk)."""
        return prefill_seconds_left(self.done, self.total, self.elapsed)


def prefill_seconds_left(done: int, total: int, elapsed: float) -> float | None:
    """Seconds left to read ``total`` prompt tokens at the rate of the ``done`` read in
    ``elapsed`` seconds (None before the first chunk)."""
    if done <= 0 or elapsed <= 0.0:
        return None
    return elapsed / done * (total - done)


@dataclass(frozen=True, slots=True)
class ContextTrimmed:
    """Earlier messages were dropped so that the conversation fits the context window
    (yielded first, by :meth:`app.engine.session.Session.chat` only; the record says it
    again in :attr:`~app.engine.reply.ReplyRecord.context`)."""

    fit: ContextFit


Event = TextDelta | StatsUpdate | PrefillProgress | ContextTrimmed | ReplyRecord
"""What a generation yields: prompt-processing progress, text deltas and statistics
snapshots (a chat reply whose conversation was shortened first yields a
:class:`ContextTrimmed` before them), then exactly one
:class:`~app.engine.reply.ReplyRecord` (the whole reply, :mod:`app.engine.reply`)."""
