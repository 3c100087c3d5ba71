"""The suffix drafter: drafts from the current conversation and the user's earlier replies.

SuffixDecoding (Oliaro et al., "SuffixDecoding: Extreme Speculative Decoding for
Emerging AI Applications", NeurIPS 2025; vLLM ``"method": "suffix"`` through Snowflake's
ArcticInference) keeps two suffix trees, one over the current request (prompt and reply so
far) and one over the replies of earlier requests. Each round it matches the longest
recent stretch of the context against both, follows the continuation that occurred most
often, with an estimated probability ``count(child) / count(node)`` multiplied along the
path, stops when that probability falls below ``min_token_prob``, and caps the draft at
``max_spec_factor · match_length + max_spec_offset`` tokens: a longer match earns a
longer, more confident draft. Of all match lengths the draft with the highest score (the
sum of its probabilities, i.e. the expected number of accepted tokens) wins.

This module gives the same drafts with structures that suit Python and bounded memory
(and, for a caller that cuts each draft itself, can continue the chosen draft past the
cap: ``SuffixDrafter(past_cap=True)``):

* :class:`SuffixIndex`, the earlier replies, is a flat ``int32`` token buffer (replies
  separated by −1) with a suffix array of its *reversed* text, sorted to
  ``max_match`` tokens. The occurrences of the last m context tokens form one range of
  that array, and extending the match by one token narrows the range by two binary
  searches, so a lookup costs O(max_match · log n). Its memory is 8 bytes per stored token
  plus the buffer's spare capacity; a cap on tokens and replies evicts the oldest replies
  first. Replies added since the last sort sit in a short tail that is scanned with NumPy
  until the next re-sort (amortised: the array is rebuilt when the tail reaches an eighth
  of the indexed text).
* The current context (prompt + reply so far, at most n_ctx tokens) is scanned with NumPy
  each round: one vectorised comparison over the context and a few over the shrinking
  candidate set.

Both sides then walk forward from the matched occurrences, which is exactly the path a
suffix tree would follow (a node's children are the distinct next tokens of its
occurrences, counted). Ties between equally frequent continuations go to the most recent
occurrence, as prompt lookup does. Token ids are those of one target vocabulary: an index
belongs to the :class:`~app.engine.session.Session` of one loaded model.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from app.options import SpecMode

IntArray = npt.NDArray[np.int64]

#: Longest context match considered, tokens (the suffix array is sorted this deep).
DEFAULT_MAX_MATCH = 32
#: Draft at most ``factor · match length + offset`` tokens (vLLM's defaults: 1.0, 0.0).
DEFAULT_SPEC_FACTOR = 1.0
DEFAULT_SPEC_OFFSET = 0.0
#: Stop a draft when its estimated probability falls below this (vLLM's default).
DEFAULT_MIN_TOKEN_PROB = 0.1
#: Cap of the reply index: tokens (8 bytes each, ~8 MiB at the cap) and replies.
DEFAULT_MAX_TOKENS = 1_000_000
DEFAULT_MAX_REPLIES = 10_000
#: A match with more occurrences than this is walked on an evenly spaced sample of them
#: (the frequencies are estimated from the sample); keeps a round's cost bounded.
MAX_WALK_OCCURRENCES = 2048

_SEP = -1  # separates replies in the buffer; never equal to a token id


@dataclass(frozen=True, slots=True)
class SuffixCandidate:
    """A proposed continuation.

    ``tokens``: the draft; ``probs``: each token's estimated probability (non-increasing,
    from occurrence counts); ``score``: their sum, the expected number of accepted
    tokens under the estimate; ``match_len``: how many trailing context tokens matched;
    ``source``: ``"context"`` (the current prompt and reply) or ``"history"`` (the
    index of earlier replies); ``occurrences``: how often the matched stretch occurred.
    """

    tokens: tuple[int, ...] = ()
    probs: tuple[float, ...] = ()
    score: float = 0.0
    match_len: int = 0
    source: Literal["context", "history", "none"] = "none"
    occurrences: int = 0


NO_CANDIDATE = SuffixCandidate()


@dataclass(frozen=True, slots=True)
class SuffixIndexStats:
    """Size of a :class:`SuffixIndex`: replies and tokens held, tokens in the unsorted
    tail, bytes of its arrays (``memory_bytes``), replies evicted so far, re-sorts."""

    replies: int
    tokens: int
    tail_tokens: int
    memory_bytes: int
    evicted_replies: int
    rebuilds: int


# -- the matching core ----------------------------------------------------------------


def reversed_suffix_order(tok: npt.NDArray[np.int32], depth: int) -> npt.NDArray[np.int32]:
    """Positions p with ``tok[p] >= 0``, sorted by (tok[p], tok[p−1], …, tok[p−d+1]).

    That is a suffix array of the reversed text, sorted to d tokens, d the smallest power
    of two ≥ ``depth`` (fewer when all keys differ sooner); ties in position order.
    Built by prefix doubling (Manber & Myers 1993) with NumPy: ⌈log₂ depth⌉ + 2 sorts of
    n keys, O(n log n · log depth) time, about 30 bytes per token of temporary memory.

    Args:
        tok: the text; ``tok[0]`` must be the separator −1 (so every match stops there).
        depth: sort depth ≥ 1.
    """
    n = len(tok)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    order = np.argsort(tok, kind="stable")
    rank = np.empty(n, dtype=np.int32)
    rank[order] = _dense_ranks(tok[order])
    h = 1
    while h < depth:
        # key of p = (rank of its h tokens, rank of the h before them + 1, or 0 at the
        # start); int64 only for this one array, to keep the peak near 30 bytes a token
        key = rank.astype(np.int64)
        key *= n + 1
        key[h:] += rank[:-h]
        key[h:] += 1
        order = np.argsort(key)  # ties are equal keys: their order does not matter
        sorted_ranks = _dense_ranks(key[order])
        del key
        distinct = int(sorted_ranks[-1]) + 1
        rank[order] = sorted_ranks
        del sorted_ranks, order
        h *= 2
        if distinct == n:
            break
    order = np.argsort(rank, kind="stable")
    return order[tok[order] >= 0].astype(np.int32)


def _dense_ranks(sorted_keys: npt.NDArray[np.int64] | npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """0, 0, 1, 2, 2, …: the rank of each of the sorted keys among the distinct ones."""
    flags = np.empty(len(sorted_keys), dtype=np.int32)
    flags[0] = 0
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=flags[1:])
    return np.cumsum(flags, dtype=np.int32)


def _narrow(sa: memoryview, tok: memoryview, lo: int, hi: int, m: int, t: int) -> tuple[int, int]:
    """Within ``sa[lo:hi]`` (all sharing their first m reversed tokens, hence sorted by
    the token at offset m), the sub-range whose token at offset m equals ``t``."""
    a, b = lo, hi
    while a < b:  # first index with key >= t
        mid = (a + b) >> 1
        if tok[sa[mid] - m] < t:
            a = mid + 1
        else:
            b = mid
    first = a
    b = hi
    while a < b:  # first index with key > t
        mid = (a + b) >> 1
        if tok[sa[mid] - m] <= t:
            a = mid + 1
        else:
            b = mid
    return first, a


def _scan_levels(
    tok: npt.NDArray[np.int32], start: int, stop: int, pattern: Sequence[int], max_match: int
) -> list[IntArray]:
    """Occurrences, by brute force, of the last 1, 2, … tokens of ``pattern`` ending at a
    position in [start, stop): element m−1 holds the end positions of the last m tokens.

    Positions whose match would reach before ``start`` are dropped (``tok[start−1]`` is
    the separator in the callers' layouts, so no real match crosses it anyway).
    """
    levels: list[IntArray] = []
    if stop <= start or not pattern:
        return levels
    cand = np.flatnonzero(tok[start:stop] == pattern[-1]).astype(np.int64) + start
    m = 1
    limit = min(max_match, len(pattern))
    while len(cand):
        levels.append(cand)
        if m >= limit:
            break
        cand = cand[cand - m >= start]
        cand = cand[tok[cand - m] == pattern[-1 - m]]
        m += 1
    return levels


def _walk(
    tok: npt.NDArray[np.int32],
    tokv: memoryview,
    ends: IntArray,
    max_tokens: int,
    min_prob: float,
) -> tuple[list[int], list[float]]:
    """Follow the most frequent continuation of the occurrences ending at ``ends``.

    The probability of a step is (occurrences continuing with the chosen token) /
    (occurrences alive before it, including those whose text ended there): a suffix
    tree's child count over node count. A token is appended only while the running
    product is ≥ ``min_prob``.
    """
    out: list[int] = []
    probs: list[float] = []
    if max_tokens <= 0 or len(ends) == 0:
        return out, probs
    if len(ends) > MAX_WALK_OCCURRENCES:
        step = -(-len(ends) // MAX_WALK_OCCURRENCES)
        ends = ends[::step]
    pos = ends + 1
    prob = 1.0
    while len(out) < max_tokens:
        n_alive = len(pos)
        if n_alive == 1:
            # One occurrence left: copy its continuation up to the separator.
            p = int(pos[0])
            while len(out) < max_tokens:
                t = tokv[p]
                if t < 0:
                    break
                out.append(t)
                probs.append(prob)
                p += 1
            break
        if n_alive <= 16:
            counts: dict[int, int] = {}
            latest: dict[int, int] = {}
            for p in pos.tolist():
                t = tokv[p]
                if t >= 0:
                    counts[t] = counts.get(t, 0) + 1
                    latest[t] = max(latest.get(t, -1), p)  # occurrences come in any order
            if not counts:
                break
            best = max(counts, key=lambda x: (counts[x], latest[x]))
            best_count = counts[best]
        else:
            nxt = tok[pos]
            valid = nxt[nxt >= 0]
            if len(valid) == 0:
                break
            vals, cnts = np.unique(valid, return_counts=True)
            top = cnts.max()
            tied = vals[cnts == top]
            if len(tied) == 1:
                best = int(tied[0])
            else:  # the most recent occurrence among the tied tokens
                idx = np.flatnonzero(np.isin(nxt, tied))
                best = int(nxt[idx[np.argmax(pos[idx])]])
            best_count = int(top)
        new_prob = prob * best_count / n_alive
        if new_prob < min_prob:
            break
        prob = new_prob
        out.append(best)
        probs.append(prob)
        pos = pos[tok[pos] == best] + 1
    return out, probs


def _const(value: IntArray) -> Callable[[], IntArray]:
    return lambda: value


def _best_of_levels(
    tok: npt.NDArray[np.int32],
    levels: Sequence[tuple[int, int, Callable[[], IntArray]]],
    n_max: int,
    factor: float,
    offset: float,
    min_prob: float,
    source: Literal["context", "history"],
) -> tuple[SuffixCandidate, IntArray | None, int]:
    """The highest-scoring draft over the distinct occurrence sets of ``levels``, with
    the end positions of its occurrence set and its length cap (None, 0 without a draft).

    ``levels``: (match length, number of occurrences, a function returning their end
    positions), longest match first; the positions are gathered only for sets that are
    walked. Sets are nested, so a set equal in size to the one before (longer match) is
    the same set and is skipped.
    A draft from match length m has at most ``min(n_max, ⌊factor·m + offset⌋)`` tokens,
    so once the best score reaches that bound no shorter match can beat it. Ties keep the
    longer match (ArcticInference's rule).
    """
    best = NO_CANDIDATE
    best_ends: IntArray | None = None
    best_cap = 0
    tokv = tok.data
    last_size = -1
    for m, size, get_ends in levels:
        if size == last_size:
            continue
        last_size = size
        cap = min(n_max, int(m * factor + offset + 1e-6))
        if cap <= 0 or best.score >= cap:
            break  # caps only shrink from here on: no shorter match can do better
        ends = get_ends()
        toks, probs = _walk(tok, tokv, ends, cap, min_prob)
        score = float(sum(probs))
        if toks and score > best.score:
            best = SuffixCandidate(tuple(toks), tuple(probs), score, m, source, size)
            best_ends, best_cap = ends, cap
    return best, best_ends, best_cap


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """An immutable view that readers use without a lock.

    ``tok[:n]`` is the text (``tok[0]`` and ``tok[n−1]`` are separators); ``sa`` sorts the
    positions before ``n_indexed``; positions in [n_indexed, n) are the tail.
    """

    tok: npt.NDArray[np.int32]
    n: int
    sa: npt.NDArray[np.int32]
    n_indexed: int


_EMPTY_TOK = np.full(1, _SEP, dtype=np.int32)


class SuffixIndex:
    """The replies of earlier conversations, for :class:`SuffixDrafter`.

    The chat layer fills it: :meth:`load_replies` once at start (from stored history),
    :meth:`add_reply` whenever a reply finishes. Thread-safe: one writer at a time;
    readers (the decoding loop) never wait for a re-sort, they use the previous snapshot.

    Args:
        max_match: longest context match used, tokens (the sort depth).
        max_tokens: most reply tokens held; beyond it the oldest replies are evicted
            (down to 90% of the cap, so evictions and re-sorts are not per reply).
        max_replies: most replies held, evicted the same way.

    Memory: 4 bytes per token for the text (its buffer grows by doubling, so up to twice
    that), 4 per token for the suffix array, 16 per reply for the reply list; a re-sort
    needs about 30 bytes per token for a moment. :meth:`stats` reports the bytes held.

    Raises:
        ValueError: a cap or depth < 1.
    """

    def __init__(
        self,
        max_match: int = DEFAULT_MAX_MATCH,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_replies: int = DEFAULT_MAX_REPLIES,
    ) -> None:
        if max_match < 1 or max_tokens < 1 or max_replies < 1:
            raise ValueError(
                f"need max_match, max_tokens, max_replies >= 1, got {max_match}, "
                f"{max_tokens}, {max_replies}"
            )
        self.max_match = max_match
        self.max_tokens = max_tokens
        self.max_replies = max_replies
        # evict down to 90% of the cap, so that evictions (each a re-sort) are not per reply
        self._keep_tokens = max(1, int(max_tokens * 0.9))
        self._write = threading.Lock()
        self._snap = _Snapshot(_EMPTY_TOK, 1, np.zeros(0, dtype=np.int32), 1)
        self._replies: deque[tuple[int, int]] = deque()  # (start, length) in the buffer
        self._n_tokens = 0
        self._evicted = 0
        self._rebuilds = 0

    # -- writing ----------------------------------------------------------------------
    def add_reply(self, tokens: Sequence[int]) -> None:
        """Add one finished reply (its token ids, no end-of-generation token).

        Empty replies are ignored; a reply longer than 90% of the token cap keeps its
        last tokens up to that. Negative ids raise ValueError.
        """
        self.load_replies([tokens])

    def load_replies(self, replies: Iterable[Sequence[int]]) -> None:
        """Add many replies, oldest first, with at most one re-sort (start-up rebuild).

        Raises:
            ValueError: a token id is negative.
        """
        with self._write:
            new = [np.asarray(r, dtype=np.int64) for r in replies]
            new = [r for r in new if len(r)]
            if not new:
                return
            for r in new:
                if r.min() < 0 or r.max() > np.iinfo(np.int32).max:
                    raise ValueError("token ids must be in 0 … 2**31 − 1")
            new = [r[-self._keep_tokens:] for r in new]
            snap = self._snap
            tok = snap.tok
            n = snap.n
            extra = sum(len(r) + 1 for r in new)
            if n + extra > len(tok):
                grown = np.empty(max(2 * len(tok), n + extra), dtype=np.int32)
                grown[:n] = tok[:n]
                tok = grown
            for r in new:
                tok[n : n + len(r)] = r
                self._replies.append((n, len(r)))
                self._n_tokens += len(r)
                n += len(r)
                tok[n] = _SEP
                n += 1
            over = self._n_tokens > self.max_tokens or len(self._replies) > self.max_replies
            tail = n - snap.n_indexed
            if over:
                self._evict_and_rebuild(tok, n)
            elif tail > max(4096, snap.n_indexed // 8) or len(new) > 1:
                self._rebuild(tok, n)
            else:
                self._snap = _Snapshot(tok, n, snap.sa, snap.n_indexed)

    def clear(self) -> None:
        """Forget every reply (e.g. the user deleted their history)."""
        with self._write:
            self._snap = _Snapshot(_EMPTY_TOK, 1, np.zeros(0, dtype=np.int32), 1)
            self._replies.clear()
            self._n_tokens = 0

    def _evict_and_rebuild(self, tok: npt.NDArray[np.int32], n: int) -> None:
        keep_replies = max(1, int(self.max_replies * 0.9))
        while len(self._replies) > 1 and (
            self._n_tokens > self._keep_tokens or len(self._replies) > keep_replies
        ):
            _, length = self._replies.popleft()
            self._n_tokens -= length
            self._evicted += 1
        if not self._replies:
            self._snap = _Snapshot(_EMPTY_TOK, 1, np.zeros(0, dtype=np.int32), 1)
            return
        total = 1 + sum(length + 1 for _, length in self._replies)
        fresh = np.empty(total + total // 4, dtype=np.int32)
        fresh[0] = _SEP
        j = 1
        moved: deque[tuple[int, int]] = deque()
        for start, length in self._replies:
            fresh[j : j + length] = tok[start : start + length]
            moved.append((j, length))
            j += length
            fresh[j] = _SEP
            j += 1
        self._replies = moved
        self._rebuild(fresh, j)

    def _rebuild(self, tok: npt.NDArray[np.int32], n: int) -> None:
        sa = reversed_suffix_order(tok[:n], self.max_match)
        self._rebuilds += 1
        self._snap = _Snapshot(tok, n, sa, n)

    # -- reading ----------------------------------------------------------------------
    def stats(self) -> SuffixIndexStats:
        snap = self._snap
        mem = snap.tok.nbytes + snap.sa.nbytes + 16 * len(self._replies)
        return SuffixIndexStats(
            replies=len(self._replies),
            tokens=self._n_tokens,
            tail_tokens=snap.n - snap.n_indexed,
            memory_bytes=int(mem),
            evicted_replies=self._evicted,
            rebuilds=self._rebuilds,
        )

    def __len__(self) -> int:
        return len(self._replies)

    def candidate(
        self,
        context: Sequence[int],
        n_max: int,
        factor: float = DEFAULT_SPEC_FACTOR,
        offset: float = DEFAULT_SPEC_OFFSET,
        min_prob: float = DEFAULT_MIN_TOKEN_PROB,
    ) -> SuffixCandidate:
        """The best draft for ``context`` from the stored replies (see the module doc)."""
        return self._match(context, n_max, factor, offset, min_prob)[0]

    def _match(
        self,
        context: Sequence[int],
        n_max: int,
        factor: float,
        offset: float,
        min_prob: float,
    ) -> tuple[SuffixCandidate, npt.NDArray[np.int32], IntArray | None, int]:
        """:meth:`candidate`, with the text it was found in, the end positions of its
        occurrence set and its length cap."""
        snap = self._snap
        if snap.n <= 1 or not context or n_max <= 0:
            return NO_CANDIDATE, snap.tok, None, 0
        pattern = list(context[-self.max_match:])
        if pattern[-1] < 0:
            return NO_CANDIDATE, snap.tok, None, 0
        tok = snap.tok
        tokv = tok.data
        # Sorted part: narrow the suffix-array range one token at a time.
        ranges: list[tuple[int, int]] = []
        if len(snap.sa):
            sav = snap.sa.data
            lo, hi = 0, len(snap.sa)
            for m in range(len(pattern)):
                lo, hi = _narrow(sav, tokv, lo, hi, m, pattern[-1 - m])
                if lo >= hi:
                    break
                ranges.append((lo, hi))
        # Tail: replies added since the last sort, scanned.
        tail = _scan_levels(tok, snap.n_indexed, snap.n, pattern, self.max_match)
        depth = max(len(ranges), len(tail))
        sa = snap.sa

        def level(m: int) -> tuple[int, int, Callable[[], IntArray]]:
            lo, hi = ranges[m - 1] if m <= len(ranges) else (0, 0)
            extra = tail[m - 1] if m <= len(tail) else None

            def ends() -> IntArray:
                part = sa[lo:hi].astype(np.int64)
                return part if extra is None else np.concatenate([part, extra])

            return m, (hi - lo) + (len(extra) if extra is not None else 0), ends

        levels = [level(m) for m in range(depth, 0, -1)]
        cand, ends, cap = _best_of_levels(tok, levels, n_max, factor, offset, min_prob, "history")
        return cand, tok, ends, cap


# -- the drafter ---------------------------------------------------------------------


class SuffixDrafter:
    """Draft by suffix match over the context and an index of earlier replies (no model).

    Args:
        index: earlier replies (None: the current context only).
        max_match: longest context match, tokens (default: the index's, else 32).
        spec_factor, spec_offset: draft at most ``factor · match length + offset`` tokens
            (with ``past_cap``: score the matches with drafts so capped).
        min_token_prob: stop where the estimated probability falls below this.
        past_cap: the draft that wins under that cap continues along the same
            occurrences up to ``n_max`` tokens (still stopped by ``min_token_prob`` and
            the end of a reply): for a caller that cuts every draft where its tokens
            stop paying (:meth:`app.engine.policy.DraftLengthPolicy.trim`), so a copy
            that has just begun is not limited to as many tokens as it has matched.

    Implements :class:`app.engine.drafters.Drafter`.

    Raises:
        ValueError: max_match < 1, spec_factor ≤ 0 or min_token_prob outside [0, 1].
    """

    kind = SpecMode.SUFFIX
    draft_limit: int | None = None

    def __init__(
        self,
        index: SuffixIndex | None = None,
        *,
        max_match: int | None = None,
        spec_factor: float = DEFAULT_SPEC_FACTOR,
        spec_offset: float = DEFAULT_SPEC_OFFSET,
        min_token_prob: float = DEFAULT_MIN_TOKEN_PROB,
        past_cap: bool = False,
    ) -> None:
        depth = max_match if max_match is not None else (
            index.max_match if index is not None else DEFAULT_MAX_MATCH
        )
        if depth < 1:
            raise ValueError(f"max_match must be >= 1, got {depth}")
        if spec_factor <= 0:
            raise ValueError(f"spec_factor must be > 0, got {spec_factor}")
        if not 0.0 <= min_token_prob <= 1.0:
            raise ValueError(f"min_token_prob must be in [0, 1], got {min_token_prob}")
        self.index = index
        self.max_match = depth
        self.spec_factor = spec_factor
        self.spec_offset = spec_offset
        self.min_token_prob = min_token_prob
        self.past_cap = past_cap
        self.forward_passes = 0
        #: the latest proposal (tokens, probabilities, score, match length, source)
        self.last = NO_CANDIDATE
        self._buf = np.full(256, _SEP, dtype=np.int32)
        self._n = 0

    # -- the Drafter protocol ----------------------------------------------------------
    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool] | None = None) -> None:
        self._n = 0
        self._sync(prompt)

    def draft(self, context: Sequence[int], n_max: int) -> list[int]:
        self._sync(context)
        cand = self._candidate(n_max)
        self.last = cand
        return list(cand.tokens)

    def close(self) -> None:
        self._buf = np.full(1, _SEP, dtype=np.int32)
        self._n = 0

    def token_keys(self) -> tuple[tuple[str, int, int, int], ...]:
        """Per token of the latest draft, a key for the draft-length policy
        (:meth:`app.engine.policy.DraftLengthPolicy.trim`): (source, match-length class,
        probability class, occurrence class). The match-length class is 0 for 1–2
        matched tokens, 1 for 3–5, 2 for 6–11, 3 for 12 or more; the probability class is
        that of the token's own step probability p_i / p_(i−1): 3 for 1, 2 for ≥ 0.8, 1
        for ≥ 0.5, 0 below; the occurrence class tells a copy of one earlier stretch (0)
        from a continuation seen 2–3 times (1) or 4 times or more (2).

        Each class split was kept because it sped up replayed replies (docs/benchmarks.md).
        """
        c = self.last
        m = c.match_len
        mc = 0 if m <= 2 else 1 if m <= 5 else 2 if m <= 11 else 3
        o = c.occurrences
        oc = 0 if o <= 1 else 1 if o <= 3 else 2
        keys = []
        prev = 1.0
        for p in c.probs:
            q = p / prev if prev > 0 else 0.0
            prev = p
            qc = 3 if q >= 1.0 - 1e-9 else 2 if q >= 0.8 else 1 if q >= 0.5 else 0
            keys.append((c.source, mc, qc, oc))
        return tuple(keys)

    #: acceptance before any is measured, per (match-length class, step probability
    #: class 3); a step probability below 1 gets :data:`_UNSURE_PRIOR` whatever the match
    _MATCH_PRIOR = (0.5, 0.8, 0.9, 0.95)
    _UNSURE_PRIOR = 0.3

    @staticmethod
    def key_prior(key: Hashable) -> float:
        """The acceptance rate the draft-length policy assumes for a :meth:`token_keys`
        key before it has measured any (:class:`app.engine.policy.DraftLengthPolicy`).

        From the rates measured per class on recorded Gemma 3 270M replies of the
        built-in agent, code and chat sets (tests/engine/data): a whole step probability
        0.29–0.80 after 1–2 matched tokens, 0.70–0.96 after 3–5, 0.88–0.97 after 6–11,
        0.89–0.99 after 12 or more; below 1, 0–0.4. A long verbatim match is then
        verified from the first reply of a session on, where a flat prior would have to
        be proved wrong first on a CPU whose verification passes are dear.
        """
        if not isinstance(key, tuple) or len(key) != 4:
            return 0.6
        _, mc, qc, _ = key
        return SuffixDrafter._MATCH_PRIOR[mc] if qc == 3 else SuffixDrafter._UNSURE_PRIOR

    # -- internals ---------------------------------------------------------------------
    def _sync(self, context: Sequence[int]) -> None:
        """Make the buffer hold ``context`` followed by a separator."""
        n_old = self._n
        n = len(context)
        same_prefix = n >= n_old and (
            n_old == 0 or (context[n_old - 1] == self._buf[n_old - 1] and context[0] == self._buf[0])
        )
        if not same_prefix:
            n_old = 0
        if n + 1 > len(self._buf):
            grown = np.full(max(2 * len(self._buf), n + 1), _SEP, dtype=np.int32)
            grown[:n_old] = self._buf[:n_old]
            self._buf = grown
        if n > n_old:
            self._buf[n_old:n] = np.asarray(context[n_old:n], dtype=np.int32)
        self._buf[n] = _SEP
        self._n = n

    def _candidate(self, n_max: int) -> SuffixCandidate:
        cand, text, ends, cap = self._match(n_max)
        if not self.past_cap or ends is None or cap >= n_max or len(cand.tokens) < cap:
            return cand  # nothing past the cap, or the walk ended before it
        toks, probs = _walk(text, text.data, ends, n_max, self.min_token_prob)
        return SuffixCandidate(tuple(toks), tuple(probs), float(sum(probs)), cand.match_len,
                               cand.source, cand.occurrences)

    def _match(
        self, n_max: int
    ) -> tuple[SuffixCandidate, npt.NDArray[np.int32], IntArray | None, int]:
        """The best candidate over the context and the index, with the text it was found
        in, the end positions of its occurrence set and its length cap."""
        n = self._n
        if n_max <= 0 or n == 0:
            return NO_CANDIDATE, self._buf, None, 0
        buf = self._buf
        # The last token's own position is the pattern, not an occurrence: scan [0, n−1).
        pattern = buf[max(0, n - self.max_match) : n].tolist()
        levels = _scan_levels(buf, 0, n - 1, pattern, self.max_match)
        local, ends, cap = _best_of_levels(
            buf,
            [(m, len(levels[m - 1]), _const(levels[m - 1])) for m in range(len(levels), 0, -1)],
            n_max,
            self.spec_factor,
            self.spec_offset,
            self.min_token_prob,
            "context",
        )
        if self.index is None or len(self.index) == 0:
            return local, buf, ends, cap
        # the index's half of the same search (one module's two halves; not part of
        # SuffixIndex's public API)
        hist = self.index._match(
            pattern, n_max, self.spec_factor, self.spec_offset, self.min_token_prob
        )
        return hist if hist[0].score > local.score else (local, buf, ends, cap)
