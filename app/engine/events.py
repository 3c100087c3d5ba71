"""Events yielded by :meth:`app.engine.session.Session.generate`.

Small frozen dataclasses, so the UI can pass them across threads as signal payloads and
the CLI can print them. Times are seconds since the request started
(``time.perf_counter`` based).
"""

from __future__ import annotations

from dataclasses import dataclass

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


Event = TextDelta | StatsUpdate | ReplyRecord
"""What a generation yields: text deltas and statistics snapshots, then exactly one
:class:`~app.engine.reply.ReplyRecord` (the whole reply, :mod:`app.engine.reply`)."""
