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
    ``elapsed``: seconds since the prefill began; ``seconds_left``: the time the rest
    will take (:class:`PrefillClock`; None before the first chunk).
    """

    done: int
    total: int
    cached: int
    elapsed: float
    seconds_left: float | None = None


class PrefillClock:
    """How long the rest of a prefill will take, from the chunks read so far.

    A prompt token at position ``p`` costs ``a + b·p`` seconds: the weights' work, the
    same at every position, plus attention over the ``p`` tokens before it, so that
    extrapolating the average rate (``b`` = 0) says far too little for a long prompt
    (45 s for 108 s in the run below). ``a`` and ``b`` are fitted to the chunks' times
    by least squares on the per-token time at each chunk's middle position, weighted by
    its tokens, with ``b`` ≥ 0 (one chunk, or a fit with ``b`` < 0: the average rate).
    Measured with ``bench/prefill_estimate.py`` (SmolLM2 135M, 8,000 tokens in 512-token
    chunks, one thread, quiet): over the chunks the estimate was a median 0.83× the time
    the rest took (the cost bends upward past 4,000 tokens, which a line fitted to the
    early chunks cannot know), the average rate's 0.46×.
    """

    def __init__(self) -> None:
        self._chunks: list[tuple[float, int, float]] = []  # (middle position, tokens, s)

    def add(self, first: int, tokens: int, seconds: float) -> None:
        """A chunk of ``tokens`` at positions ``first``… took ``seconds``."""
        if tokens > 0:
            self._chunks.append((first + (tokens - 1) / 2, tokens, max(seconds, 0.0)))

    def seconds_left(self, start: int, end: int) -> float | None:
        """Seconds to read the tokens at positions ``start`` … ``end`` − 1 (None before
        the first chunk)."""
        if not self._chunks:
            return None
        n = end - start
        if n <= 0:
            return 0.0
        a, b = self._fit()
        return max(0.0, a * n + b * (start + end - 1) * n / 2)

    def _fit(self) -> tuple[float, float]:
        """(a, b) of the per-token time ``a + b·p`` (see the class docstring)."""
        w = sum(t for _, t, _ in self._chunks)
        # the weighted mean per-token time is the average rate (the fit with b = 0)
        y = sum(s for _, _, s in self._chunks) / w
        m = sum(t * p for p, t, _ in self._chunks) / w
        spread = sum(t * (p - m) ** 2 for p, t, _ in self._chunks)
        b = (sum(t * (p - m) * (s / t - y) for p, t, s in self._chunks) / spread
             if spread > 0.0 else 0.0)
        return (max(y - b * m, 0.0), b) if b > 0.0 else (y, 0.0)


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
