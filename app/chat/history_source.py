"""Past conversations as the prompt-lookup estimate reads them.

The "is prompt lookup worth it for me?" panel takes a plain list of
:class:`PastConversation`, so it can be tested without a database;
:func:`conversations_from_history` builds that list from the chat history store
(:class:`app.store.history.HistoryStore`). No Qt here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.stats import SpecStats
from app.options import SpecMode
from app.store.history import HistoryStore


@dataclass(frozen=True, slots=True)
class PastMessage:
    """One message of a past conversation.

    ``stats``: the engine's ``SpecStats.to_dict()`` stored with a finished reply (None for
    user messages and replies without statistics); it carries the measured α.
    """

    role: str
    content: str
    stats: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class PastConversation:
    """A conversation offered to the estimate: an id (−1 when not stored), a title and
    its messages in order."""

    id: int
    title: str
    messages: tuple[PastMessage, ...]

    @property
    def assistant_replies(self) -> int:
        return sum(1 for m in self.messages if m.role == "assistant" and m.content)


def conversations_from_history(
    store: HistoryStore | None, limit: int = 200
) -> list[PastConversation]:
    """The newest ``limit`` conversations of ``store`` that hold at least one finished
    assistant reply (replies still streaming are skipped). ``store`` None gives []."""
    if store is None:
        return []
    out: list[PastConversation] = []
    for conv in store.list_conversations()[:limit]:
        msgs: list[PastMessage] = []
        if conv.system_prompt.strip():
            msgs.append(PastMessage("system", conv.system_prompt))
        for m in store.messages(conv.id):
            if m.status != "done" or not m.content:
                continue
            msgs.append(PastMessage(m.role, m.content, m.stats))
        if any(m.role == "assistant" for m in msgs):
            out.append(PastConversation(conv.id, conv.title, tuple(msgs)))
    return out


def measured_lookup_alpha(
    conversations: Sequence[PastConversation],
) -> tuple[float | None, int]:
    """α measured on the prompt-lookup replies of ``conversations``.

    Pooled as Σ accepted / Σ verified over every assistant reply whose stored statistics
    say ``mode == "prompt-lookup"`` (exactly as if all were one reply).

    Returns:
        (α or None when no such reply drafted anything, number of such replies).
    """
    accepted = verified = replies = 0
    for conv in conversations:
        for m in conv.messages:
            if m.role != "assistant" or not m.stats:
                continue
            try:
                s = SpecStats.from_dict(dict(m.stats))
            except (TypeError, ValueError):
                continue  # statistics from an unknown version: not evidence either way
            if s.mode is not SpecMode.PROMPT_LOOKUP or s.verified <= 0:
                continue
            replies += 1
            verified += s.verified
            accepted += s.accepted
    return (accepted / verified if verified else None), replies
