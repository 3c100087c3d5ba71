"""The words beside a streaming reply: its place in the queue, its prompt processing,
or "writing…".

A reply waits in the chat service's queue behind whatever runs (an API request, a race);
then the target reads its prompt in chunks; then it writes. The message header says
which, from the controller's :class:`~app.chat.conversation.ActiveReply` state.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.chat.events import PrefillProgressed
from app.formatting import format_duration

WRITING = "● writing…"

#: what a queued job is called, by origin and then by kind (else "job")
_BY_ORIGIN = {"api": "API request", "race": "race"}
_BY_KIND = {"load": "model load", "draft": "draft model load", "demo": "demo model",
            "reply": "reply", "completion": "completion",
            "race": "race", "sweep": "k sweep", "lookup": "estimate"}


def _job_word(kind: str, origin: str) -> str:
    return _BY_ORIGIN.get(origin) or _BY_KIND.get(kind, "job")


def ahead_words(ahead: Sequence[tuple[str, str]]) -> str:
    """``[("completion", "api")]`` → ``1 API request``; several kinds → ``2 API requests
    and 1 race`` (in the order they run)."""
    counts: dict[str, int] = {}
    for kind, origin in ahead:
        word = _job_word(kind, origin)
        counts[word] = counts.get(word, 0) + 1
    parts = [f"{n} {word}{'' if n == 1 else 's'}" for word, n in counts.items()]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def waiting_words(ahead: Sequence[tuple[str, str]]) -> str:
    """``● waiting for 1 API request · next in the queue``; with n jobs ahead (one of them
    running) the reply is at place n − 1 + 1 of the queue."""
    place = "next in the queue" if len(ahead) <= 1 else f"place {len(ahead)} in the queue"
    return f"● waiting for {ahead_words(ahead)} · {place}"


def prefill_words(p: PrefillProgressed) -> str:
    """``● reading the prompt: 1,024 / 5,120 tokens · 12 s left`` (``· 3,400 cached`` when
    part of it came from the cache)."""
    text = f"● reading the prompt: {p.done:,} / {p.total:,} tokens"
    if p.cached:
        text += f" · {p.cached:,} cached"
    left = p.seconds_left
    if left is not None and p.done < p.total:
        text += f" · {format_duration(left)} left"
    return text


def reply_status_words(ahead: Sequence[tuple[str, str]], started: bool,
                       prefill: PrefillProgressed | None, has_text: bool) -> str:
    """The header's words for a streaming reply (see the module docstring)."""
    if not started and ahead:
        return waiting_words(ahead)
    if prefill is not None and prefill.done < prefill.total and not has_text:
        return prefill_words(prefill)
    return WRITING
