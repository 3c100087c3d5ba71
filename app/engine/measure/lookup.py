"""Would prompt lookup have helped? An n-gram hit-rate estimate over past conversations.

The race view's "is prompt lookup worth it for me?" panel replays the
user's own conversations without running any model: for every token of every assistant
reply it asks what an n-gram lookup over the prompt plus the reply so far would have
proposed as the next token, and counts how often that was the token the model actually
wrote. This is the first-position acceptance rate prompt lookup would have had with
greedy decoding (the model wrote these tokens), so it can be shown next to a measured α.

The lookup rule is :class:`app.engine.drafters.PromptLookupDrafter`'s for a single n:
the most recent earlier occurrence of the last n tokens that has a continuation
(Saxena 2023, "Prompt Lookup Decoding"; llama.cpp's ``lookup`` example).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.engine.drafters import PromptLookupDrafter

DEFAULT_NGRAM_SIZES: tuple[int, ...] = (2, 3, 4, 5)


class MessageLike(Protocol):
    """Anything with a chat role and text (:class:`app.engine.chat.ChatMessage`, a stored
    history message…)."""

    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...


@dataclass(frozen=True, slots=True)
class NgramHits:
    """Counts for one n-gram size.

    * ``positions``: reply tokens examined (each is one chance for the lookup);
    * ``lookups``: positions where the last n tokens occurred earlier with a
      continuation, so prompt lookup would have proposed a token;
    * ``hits``: lookups whose proposed token was the token actually written.

    ``hit_rate`` = hits / positions: the share of reply tokens lookup would have
    predicted. ``precision`` = hits / lookups: how often a proposal was right, the
    figure comparable with a measured acceptance rate α at draft position 1.
    """

    n: int
    positions: int = 0
    lookups: int = 0
    hits: int = 0

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.positions if self.positions else None

    @property
    def precision(self) -> float | None:
        return self.hits / self.lookups if self.lookups else None

    @property
    def coverage(self) -> float | None:
        """lookups / positions: how often lookup had anything to propose."""
        return self.lookups / self.positions if self.positions else None

    def __add__(self, other: NgramHits) -> NgramHits:
        if other.n != self.n:
            raise ValueError(f"cannot add counts for n={self.n} and n={other.n}")
        return NgramHits(self.n, self.positions + other.positions,
                         self.lookups + other.lookups, self.hits + other.hits)

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "positions": self.positions,
            "lookups": self.lookups,
            "hits": self.hits,
            "hit_rate": self.hit_rate,
            "precision": self.precision,
            "coverage": self.coverage,
        }


def lookup_hits(prompt: Sequence[int], reply: Sequence[int], n: int) -> NgramHits:
    """Replay n-gram lookup over one reply.

    For each reply position i, the context is ``prompt + reply[:i]``; if its last ``n``
    tokens occurred earlier in the context with at least one token after them, the token
    after their most recent such occurrence is the proposal, and it is a hit when it
    equals ``reply[i]``.

    Args:
        prompt: the tokens the reply was generated after.
        reply: the reply's tokens.
        n: n-gram size ≥ 1.

    Returns:
        Counts over ``len(reply)`` positions. Runs in O((len(prompt) + len(reply))·n).

    Raises:
        ValueError: n < 1.
    """
    if n < 1:
        raise ValueError(f"n-gram size must be >= 1, got {n}")
    # The drafter itself, restricted to n-grams of size n, so the estimate follows
    # exactly the lookup rule that decoding uses.
    drafter = PromptLookupDrafter(n, n)
    seq = list(prompt)
    drafter.begin(seq)
    positions = lookups = hits = 0
    for tok in reply:
        positions += 1
        proposal = drafter.draft(seq, 1)
        if proposal:
            lookups += 1
            if proposal[0] == tok:
                hits += 1
        seq.append(tok)
    return NgramHits(n, positions, lookups, hits)


@dataclass(frozen=True, slots=True)
class LookupEstimate:
    """The estimate over a set of conversations: one :class:`NgramHits` per n.

    ``replies``: assistant replies examined; ``reply_tokens``: their tokens.
    ``best_n``: the n with the highest hit rate (ties: the smaller n), None without data.
    """

    by_n: tuple[NgramHits, ...]
    replies: int
    reply_tokens: int

    @property
    def best_n(self) -> int | None:
        rated = [h for h in self.by_n if h.hit_rate is not None]
        if not rated:
            return None
        return max(rated, key=lambda h: (h.hit_rate or 0.0, -h.n)).n

    def for_n(self, n: int) -> NgramHits:
        for h in self.by_n:
            if h.n == n:
                return h
        raise KeyError(n)

    def to_dict(self) -> dict[str, Any]:
        return {
            "replies": self.replies,
            "reply_tokens": self.reply_tokens,
            "best_n": self.best_n,
            "by_n": [h.to_dict() for h in self.by_n],
        }


def estimate_lookup_hit_rate(
    conversations: Iterable[Sequence[MessageLike]],
    tokenize: Callable[[str], Sequence[int]],
    ngram_sizes: Sequence[int] = DEFAULT_NGRAM_SIZES,
) -> LookupEstimate:
    """Estimate prompt lookup's hit rate on the assistant replies of past conversations.

    Each assistant message is a reply; its prompt is every earlier message of the same
    conversation, tokenized and concatenated in order (the chat template's few control
    tokens are left out: they seldom take part in an n-gram match, and this keeps the
    estimate independent of the model's template).

    Args:
        conversations: each a sequence of messages with ``role`` and ``content``.
        tokenize: text → token ids, without BOS (e.g. :func:`model_tokenizer`).
        ngram_sizes: the n values to try (default 2, 3, 4, 5).

    Returns:
        Counts per n summed over all replies.

    Raises:
        ValueError: an n-gram size < 1.
    """
    sizes = list(dict.fromkeys(ngram_sizes))
    if any(n < 1 for n in sizes):
        raise ValueError(f"n-gram sizes must be >= 1, got {sizes}")
    totals = {n: NgramHits(n) for n in sizes}
    replies = reply_tokens = 0
    for conv in conversations:
        context: list[int] = []
        for msg in conv:
            toks = list(tokenize(msg.content))
            if msg.role == "assistant" and toks:
                replies += 1
                reply_tokens += len(toks)
                for n in sizes:
                    totals[n] = totals[n] + lookup_hits(context, toks, n)
            context.extend(toks)
    return LookupEstimate(tuple(totals[n] for n in sizes), replies, reply_tokens)


class _Tokenizer(Protocol):
    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]: ...


def model_tokenizer(model: _Tokenizer) -> Callable[[str], list[int]]:
    """A ``tokenize`` callable for :func:`estimate_lookup_hit_rate` from a loaded model
    (:class:`app.engine.llama.LlamaModel`, ``vocab_only=True`` is enough): no BOS, and
    control-token text in a message is treated as plain text."""

    def tokenize(text: str) -> list[int]:
        return model.tokenize(text, add_special=False, parse_special=False)

    return tokenize
