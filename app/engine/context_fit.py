"""Fitting a conversation into the context window: the context overflow policies.

A chat reply needs its prompt (the conversation through the chat template) and room for
the reply in the target's context window of ``n_ctx`` tokens. When the conversation is
longer, :func:`fit_conversation` applies the reply's
:class:`~app.options.ContextOverflow` policy (LM Studio's three): it drops earlier
messages — never the system prompt, never the message being answered — in whole
exchanges (a user message and the replies to it, so that roles still alternate as chat
templates require) until the prompt leaves :func:`reply_room` tokens free, or at least
fits; ``stop`` drops nothing and refuses a prompt that does not fit at all.

The result says what was dropped (:class:`ContextFit`, data only: the window and the
API word it). Token counts come from rendering the whole shortened conversation through
the template (``tokenize``), so they are exact for the model; the number of exchanges to
drop is found by bisection, so a long conversation is rendered O(log n) times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.chat import ChatMessage
from app.errors import ContextOverflowError, WouldFitByDroppingError
from app.options import ContextOverflow

#: the most of the window kept free for the reply when messages are dropped (a quarter)
REPLY_ROOM_FRACTION = 0.25
#: messages are dropped in steps of this much of the window (see :func:`fit_conversation`)
DROP_STEP_FRACTION = 0.25


@dataclass(frozen=True, slots=True)
class ContextFit:
    """Earlier messages were dropped so that a conversation fits the context window.

    ``dropped_messages`` messages of ``dropped_tokens`` prompt tokens (the prompt went
    from ``prompt_tokens + dropped_tokens`` to ``prompt_tokens``) under ``policy``, to
    fit a window of ``n_ctx`` tokens while leaving ``reply_room`` tokens for the reply
    (fewer when even the shortest prompt could not leave that many). ``kept_first``: the
    conversation's first exchange was kept (truncate-middle, when that was enough).
    ``kept_system``: the conversation starts with a system prompt, which is always kept.
    """

    policy: ContextOverflow
    n_ctx: int
    dropped_messages: int
    dropped_tokens: int
    prompt_tokens: int
    reply_room: int
    kept_first: bool = False
    kept_system: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (stored with the reply's statistics, sent by the local API)."""
        return {"policy": self.policy.value, "n_ctx": self.n_ctx,
                "dropped_messages": self.dropped_messages,
                "dropped_tokens": self.dropped_tokens,
                "prompt_tokens": self.prompt_tokens, "reply_room": self.reply_room,
                "kept_first": self.kept_first, "kept_system": self.kept_system}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ContextFit | None:
        """From :meth:`to_dict`; None when a field is missing or of the wrong kind."""
        try:
            return cls(ContextOverflow(data["policy"]), int(data["n_ctx"]),
                       int(data["dropped_messages"]), int(data["dropped_tokens"]),
                       int(data["prompt_tokens"]), int(data.get("reply_room", 0)),
                       bool(data.get("kept_first", False)),
                       bool(data.get("kept_system", False)))
        except (KeyError, TypeError, ValueError):
            return None


def reply_room(n_ctx: int, max_tokens: int) -> int:
    """Tokens kept free for the reply when messages must be dropped: ``max_tokens``, at
    most :data:`REPLY_ROOM_FRACTION` of the window, at least 1."""
    return max(1, min(max_tokens, int(n_ctx * REPLY_ROOM_FRACTION)))


def _exchanges(body: Sequence[ChatMessage]) -> list[list[ChatMessage]]:
    """``body`` cut before every user message: each part is one exchange."""
    parts: list[list[ChatMessage]] = []
    for m in body:
        if m.role == "user" or not parts:
            parts.append([m])
        else:
            parts[-1].append(m)
    return parts


def drop_order(n_exchanges: int, policy: ContextOverflow) -> list[int]:
    """The order in which exchanges (0 = oldest) are dropped: the oldest first for a
    rolling window; for truncate-middle the second oldest first and the first last."""
    if policy is ContextOverflow.TRUNCATE_MIDDLE:
        return [*range(1, n_exchanges), *range(min(1, n_exchanges))]
    return list(range(n_exchanges))


def _in_steps(n_min: int, tokens: list[int], n_full: int, n_parts: int,
              policy: ContextOverflow, n_ctx: int,
              prompt_without: Callable[[int], list[int]]) -> tuple[int, list[int]]:
    """Round the fewest exchanges to drop (``n_min``, leaving ``tokens``) up to where the
    dropped tokens reach the next multiple of :data:`DROP_STEP_FRACTION` of the window.

    Why: as a conversation grows the fewest exchanges to drop never decreases, and the
    order they go in is fixed, so a cut rounded to fixed steps stays where it is for
    several turns — and with it the start of the prompt, which the KV cache then keeps
    (a cut that moves every turn makes every turn read everything after it again).
    llama.cpp's context shift likewise discards half the window at once. The most recent
    exchange (and under truncate-middle the first) is never dropped only for rounding.
    Returns (exchanges to drop, the prompt without them)."""
    step = max(1, int(n_ctx * DROP_STEP_FRACTION))
    limit = -(-(n_full - len(tokens)) // step) * step
    spare = 2 if policy is ContextOverflow.TRUNCATE_MIDDLE else 1
    lo, hi = n_min, max(n_min, n_parts - spare)  # the most to drop with at most `limit`
    while lo < hi:
        mid = (lo + hi + 1) // 2
        candidate = prompt_without(mid)
        if n_full - len(candidate) <= limit:
            lo, tokens = mid, candidate
        else:
            hi = mid - 1
    return lo, tokens


def dropped_indices(roles: Sequence[str], fit: ContextFit) -> list[int]:
    """Which messages of a request :func:`fit_conversation` dropped, from their roles in
    order (leading ``system`` messages and the message answered included) and the
    :class:`ContextFit` it returned: indices into ``roles``, ascending (the same cut into
    exchanges and :func:`drop_order`, until ``fit.dropped_messages`` are counted)."""
    head_n = 0
    while head_n < len(roles) - 1 and roles[head_n] == "system":
        head_n += 1
    parts: list[list[int]] = []
    for i in range(head_n, len(roles) - 1):
        if roles[i] == "user" or not parts:
            parts.append([i])
        else:
            parts[-1].append(i)
    gone: list[int] = []
    for n in drop_order(len(parts), fit.policy):
        if len(gone) >= fit.dropped_messages:
            break
        gone += parts[n]
    return sorted(gone)


def fit_conversation(
    messages: Sequence[ChatMessage],
    tokenize: Callable[[Sequence[ChatMessage]], list[int]],
    n_ctx: int,
    max_tokens: int,
    policy: ContextOverflow,
) -> tuple[list[int], ContextFit | None]:
    """The prompt tokens for ``messages`` within ``n_ctx``, and what was dropped.

    Args:
        messages: the conversation; leading ``system`` messages and the last message are
            always kept.
        tokenize: renders messages through the chat template into prompt tokens.
        n_ctx: the context window, tokens.
        max_tokens: the reply's token limit (the room kept is :func:`reply_room`).
        policy: what to do when the conversation does not fit.

    The fewest exchanges that make the prompt fit are dropped, rounded up to a step of
    :data:`DROP_STEP_FRACTION` of the window (:func:`_in_steps`: the cut then stays put
    for several turns, and so does the KV cache of the prompt's start).

    Returns:
        (prompt tokens, None) when nothing had to be dropped (a prompt that fits but
        leaves less room than :func:`reply_room` is kept whole: the reply stops when the
        window is full); else (the shortened prompt, :class:`ContextFit`).

    Raises:
        WouldFitByDroppingError: ``stop``, and the prompt does not fit but would with
            earlier messages dropped.
        ContextOverflowError: ``stop`` and the prompt does not fit; or even the system
            prompt and the last message alone do not fit.
    """
    full = tokenize(messages)
    room = reply_room(n_ctx, max_tokens)
    if len(full) + room <= n_ctx or (len(full) < n_ctx and policy is ContextOverflow.STOP):
        return full, None
    head_n = 0
    while head_n < len(messages) - 1 and messages[head_n].role == "system":
        head_n += 1
    head, body, last = messages[:head_n], messages[head_n:-1], messages[-1:]
    parts = _exchanges(body)
    if not parts and len(full) < n_ctx:
        return full, None  # nothing to drop: the reply gets the room there is
    if not parts:
        raise ContextOverflowError(
            f"The prompt is {len(full):,} tokens long but the context window holds {n_ctx:,}. "
            "Shorten it or raise the context length.")
    order = drop_order(len(parts), policy)

    def prompt_without(n_dropped: int) -> list[int]:
        gone = set(order[:n_dropped])
        kept = [m for i, part in enumerate(parts) if i not in gone for m in part]
        return tokenize([*head, *kept, *last])

    def fits(tokens: list[int], with_room: bool) -> bool:
        return len(tokens) + (room if with_room else 1) <= n_ctx

    shortest = prompt_without(len(parts))
    with_room = fits(shortest, True)
    if policy is ContextOverflow.STOP and fits(shortest, False):  # dropping would do
        raise WouldFitByDroppingError(
            f"The conversation is {len(full):,} tokens long but the context window holds "
            f"{n_ctx:,}. Start a new conversation, shorten it, raise the context length, or "
            "let Tandem drop earlier messages.")
    if not with_room and not fits(shortest, False):
        what, them = (("The system prompt and the last message alone are", "them") if head
                      else ("The last message alone is", "it"))
        raise ContextOverflowError(
            f"{what} {len(shortest):,} tokens; the context window holds {n_ctx:,}. Shorten "
            f"{them} or raise the context length.")
    lo, hi, best = 1, len(parts), shortest  # the fewest exchanges to drop that fit
    while lo < hi:
        mid = (lo + hi) // 2
        tokens = prompt_without(mid)
        if fits(tokens, with_room):
            hi, best = mid, tokens
        else:
            lo = mid + 1
    hi, best = _in_steps(hi, best, len(full), len(parts), policy, n_ctx, prompt_without)
    dropped = sum(len(parts[i]) for i in order[:hi])
    kept_first = policy is ContextOverflow.TRUNCATE_MIDDLE and 0 not in order[:hi]
    return best, ContextFit(policy, n_ctx, dropped, len(full) - len(best), len(best),
                            min(room, n_ctx - len(best)), kept_first, bool(head))
