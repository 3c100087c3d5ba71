"""Saved KV states of earlier sequences, so that a conversation re-reads only what is new.

The target's context holds one sequence. When a prompt that shares little with it comes
(another conversation, a request through the local API), the session first saves the
state it is about to overwrite here (:meth:`LlamaContext.state_bytes
<app.engine.llama.LlamaContext.state_bytes>`, a copy in memory), and when a later prompt
shares a longer prefix with a saved state than with the live cache, that state is put
back (:meth:`~app.engine.llama.LlamaContext.load_state`) and only the rest of the prompt
is evaluated. This is the prefix cache of llama-server's slots (``--cache-reuse``, its
``prompt cache``) for one slot: measured against several sequences in one context in
``bench/prefix_cache.py`` (docs/prefix-cache.md).

:func:`reuse_prefix` is that decision, for the target's context and a draft model's.
Entries are kept least recently used first, within a bound in bytes; an entry larger
than the bound is not kept. Nothing here calls llama.cpp itself: the context passed to
:func:`reuse_prefix` copies states in and out.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app.errors import TandemError
from app.options import PROMPT_CACHE_MIB

log = logging.getLogger(__name__)

#: default bound on the saved states' bytes (:data:`app.options.PROMPT_CACHE_MIB`)
DEFAULT_PREFIX_CACHE_BYTES = PROMPT_CACHE_MIB * 2**20
#: the fewest tokens worth saving a state for: less is re-read faster than copied
MIN_SAVED_TOKENS = 64


@dataclass(frozen=True, slots=True)
class SavedState:
    """One saved sequence: its tokens (positions 0..n-1) and llama.cpp's state bytes."""

    tokens: tuple[int, ...]
    data: bytes | bytearray


class PrefixStateCache:
    """Saved sequence states, least recently used first, at most ``max_bytes`` of them.

    Args:
        max_bytes: bound on the sum of the states' sizes, bytes (0: nothing is kept).

    Raises:
        ValueError: ``max_bytes`` is negative.
    """

    def __init__(self, max_bytes: int = DEFAULT_PREFIX_CACHE_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, ...], SavedState] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def held_bytes(self) -> int:
        """Bytes held now."""
        return self._bytes

    def put(self, tokens: Sequence[int], data: bytes | bytearray) -> bool:
        """Keep ``data`` as the state of ``tokens``; a saved state whose tokens are a
        prefix of these (or equal) is dropped, being worth less. Evicts the least
        recently used until it fits. Returns False when it alone exceeds the bound."""
        key = tuple(tokens)
        if len(data) > self.max_bytes:
            return False
        for old in [k for k in self._entries if len(k) <= len(key) and key[:len(k)] == k]:
            self._drop(old)
        while self._entries and self._bytes + len(data) > self.max_bytes:
            self._drop(next(iter(self._entries)))
        self._entries[key] = SavedState(key, data)
        self._bytes += len(data)
        return True

    def best(self, tokens: Sequence[int]) -> tuple[SavedState | None, int]:
        """The saved state sharing the longest prefix with ``tokens``, and that length
        (None, 0 when nothing shares a token). Marks it recently used."""
        found: SavedState | None = None
        n_best = 0
        for entry in self._entries.values():
            n = common_prefix_length(entry.tokens, tokens)
            if n > n_best:
                found, n_best = entry, n
        if found is not None:
            self._entries.move_to_end(found.tokens)
        return found, n_best

    def take(self, entry: SavedState) -> None:
        """Forget ``entry`` (it went back into the context: the live cache holds it)."""
        if entry.tokens in self._entries:
            self._drop(entry.tokens)

    def clear(self) -> None:
        """Forget every saved state."""
        self._entries.clear()
        self._bytes = 0

    def _drop(self, key: tuple[int, ...]) -> None:
        self._bytes -= len(self._entries.pop(key).data)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):  # the usual case (a turn extends the last), at C speed
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class StatefulContext(Protocol):
    """What :func:`reuse_prefix` needs of a context (:class:`app.engine.llama.LlamaContext`)."""

    def state_size(self) -> int: ...

    def state_bytes(self, size: int | None = None) -> bytearray: ...

    def load_state(self, data: bytes | bytearray) -> bool: ...

    def truncate(self, keep: int, held: int) -> int: ...


def reuse_prefix(ctx: StatefulContext, held: list[int], tokens: Sequence[int],
                 saved: PrefixStateCache, *, recurrent: bool = False) -> int:
    """Before ``tokens`` are evaluated in ``ctx``: keep what its cache (``held``, the
    tokens at positions 0..) shares with them, or put back a saved state that shares at
    least :data:`MIN_SAVED_TOKENS` more; the live state is saved first when that many of
    its tokens would be lost. ``held`` is updated to what the cache holds afterwards.

    Args:
        recurrent: the memory cannot be cut back (recurrent or hybrid), so only a saved
            state that is a whole prefix of ``tokens`` is put back.

    Returns:
        How many leading tokens of ``tokens`` the cache holds now (``len(held)``).
    """
    keep = common_prefix_length(held, tokens)
    entry, shared = saved.best(tokens) if saved.max_bytes else (None, 0)
    if entry is not None and recurrent and shared < len(entry.tokens):
        entry = None
    if entry is not None and shared - keep < MIN_SAVED_TOKENS:
        entry = None
    if saved.max_bytes and len(held) - keep >= MIN_SAVED_TOKENS:
        try:  # a state larger than the whole cache is not copied only to be refused
            if (size := ctx.state_size()) <= saved.max_bytes:
                saved.put(held, ctx.state_bytes(size))
        except TandemError as exc:  # the state is only lost, as without a cache
            log.warning("could not save the KV cache's state: %s", exc)
    if entry is not None:
        saved.take(entry)
        if ctx.load_state(entry.data):
            held[:] = entry.tokens
            keep = shared
        else:
            log.warning("llama.cpp refused a saved KV state; re-evaluating")
            held.clear()
            keep = 0
    keep = ctx.truncate(keep, len(held))
    del held[keep:]
    return keep
