"""A reply while it streams: its text, which stretches came from accepted drafts, and
when it is due to be saved.

The service sends text in batches (:class:`~app.chat.events.ReplyStreamed`);
:class:`ReplyBuffer` joins them into the text and the draft spans the chat view tints,
and says when a partial save is due (:data:`SAVE_EVERY_S`), so that a killed app loses
at most that much of a reply. No Qt: the window shows what the buffer holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from app.engine.events import TextDelta
from app.engine.reply import Span, add_span

#: A streaming reply is written to the history at least this often, seconds.
SAVE_EVERY_S = 0.5

@dataclass
class ReplyBuffer:
    """Text and draft spans of one reply, built from the engine's deltas.

    ``spans``: ``(start, end)`` character ranges of text from accepted draft tokens,
    adjacent ranges merged. ``last``: the latest delta (its time and token count feed the
    gauge's rolling rate). ``clock``: seconds, for the save schedule.
    """

    text: str = ""
    spans: list[Span] = field(default_factory=list)
    last: TextDelta | None = None
    clock: Callable[[], float] = time.monotonic
    saved_len: int = 0
    _last_save: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self._last_save = self.clock()

    def add(self, deltas: Iterable[TextDelta]) -> bool:
        """Append ``deltas``; True when the text changed."""
        changed = False
        for d in deltas:
            self.last = d
            if not d.text:
                continue
            start = len(self.text)
            self.text += d.text
            changed = True
            if d.from_draft:
                add_span(self.spans, start, len(self.text))
        return changed

    def save_due(self) -> bool:
        """Whether unsaved text has waited :data:`SAVE_EVERY_S` or longer."""
        return len(self.text) != self.saved_len and self.clock() - self._last_save >= SAVE_EVERY_S

    def saved(self, ok: bool = True) -> None:
        """Record a save attempt: on success the text so far counts as saved; either way
        the next attempt waits :data:`SAVE_EVERY_S` (a failing disk is not retried on
        every batch)."""
        self._last_save = self.clock()
        if ok:
            self.saved_len = len(self.text)
