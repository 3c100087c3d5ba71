"""PromptLookupDrafter: n-gram lookup over prompt + reply, longest n first, most recent match."""

from __future__ import annotations

import pytest

from app.engine.drafters import DraftModelDrafter, PromptLookupDrafter
from app.engine.prefix_cache import common_prefix_length
from app.errors import TandemError


def test_proposes_what_followed_the_most_recent_match() -> None:
    d = PromptLookupDrafter(ngram_min=2, ngram_max=3)
    ctx = [1, 2, 3, 10, 11, 1, 2, 3, 20, 21, 22, 9, 1, 2, 3]
    d.begin(ctx)
    # the suffix [1, 2, 3] occurred at 5 (most recent earlier) → continuation 20, 21, 22
    assert d.draft(ctx, 3) == [20, 21, 22]
    assert d.draft(ctx, 2) == [20, 21]


def test_longer_ngram_wins_over_shorter() -> None:
    d = PromptLookupDrafter(ngram_min=1, ngram_max=3)
    ctx = [7, 8, 9, 50, 5, 9, 60, 7, 8, 9]
    d.begin(ctx)
    # 1-gram [9] last seen at 5 → 60; 3-gram [7, 8, 9] seen at 0 → 50 (preferred)
    assert d.draft(ctx, 1) == [50]


def test_no_match_gives_no_draft_and_never_matches_itself() -> None:
    d = PromptLookupDrafter(ngram_min=2, ngram_max=4)
    ctx = [1, 2, 3, 4, 5]
    d.begin(ctx)
    assert d.draft(ctx, 4) == []


def test_incremental_growth_equals_fresh_index() -> None:
    seq = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9, 5]
    grown = PromptLookupDrafter(1, 3)
    grown.begin(seq[:5])
    for n in range(5, len(seq) + 1):
        fresh = PromptLookupDrafter(1, 3)
        fresh.begin(seq[:n])
        assert grown.draft(seq[:n], 4) == fresh.draft(seq[:n], 4), n


def test_context_that_is_not_an_extension_rebuilds_the_index() -> None:
    d = PromptLookupDrafter(1, 2)
    d.begin([1, 2, 3, 1, 2])
    assert d.draft([1, 2, 3, 1, 2], 1) == [3]
    # a different conversation: old n-grams must not leak into it
    assert d.draft([9, 8, 9], 2) == [8, 9]


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        PromptLookupDrafter(3, 2)
    with pytest.raises(ValueError):
        PromptLookupDrafter(0, 2)


def test_common_prefix_length() -> None:
    assert common_prefix_length([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_length([], [1]) == 0
    assert common_prefix_length([1, 2], [1, 2]) == 2


class _ScriptedContext:
    """A draft context whose next-token argmax follows a script (no model)."""

    n_ctx = 64

    def __init__(self, script: list[int], n_vocab: int = 8) -> None:
        self.script, self.n_vocab, self.decoded = script, n_vocab, 0
        self.passes: list[tuple[list[int], int, str]] = []
        self.removed: list[int] = []
        self.fail_next, self.cleared = False, 0

    def logits(self, _index: int):  # type: ignore[no-untyped-def]
        import numpy as np

        row = np.zeros(self.n_vocab, dtype=np.float32)
        row[self.script[min(self.decoded, len(self.script) - 1)]] = 1.0
        return row

    def decode(self, tokens, pos, logits="last") -> None:  # type: ignore[no-untyped-def]
        if self.fail_next:
            self.fail_next = False
            raise TandemError("llama_decode failed")
        self.decoded += 1 if len(tokens) == 1 else 0
        self.passes.append((list(tokens), pos, logits))

    def seq_rm(self, p0: int, _p1: int = -1) -> bool:
        self.removed.append(p0)
        return True

    def clear(self) -> None:
        self.cleared += 1

    def truncate(self, keep: int, _n: int) -> int:
        return keep


class _Vocab:
    is_recurrent = False

    def is_eog(self, token: int) -> bool:
        return token == 7


def test_the_draft_model_stops_drafting_at_the_end_of_the_reply() -> None:
    # nothing after an end-of-generation token can be emitted, so no forward pass of the
    # draft is spent on it (the session then cuts the draft before that token)
    ctx = _ScriptedContext([0, 3, 4, 7, 5, 6])  # after each decode: the next entry
    d = DraftModelDrafter(_Vocab(), ctx)  # type: ignore[arg-type]
    d._kv = [1, 2]  # the context is already in the draft's cache
    assert d.draft([1, 2], 8) == [3, 4, 7]
    assert d.forward_passes == 1 + 2  # re-evaluating the last context token, then 3 and 4


def test_a_catch_up_over_undrafted_rounds_is_no_draft_step() -> None:
    # after rounds that drafted nothing the draft evaluates what it missed in a pass of
    # its own: its time is the drafter's catch_up_time, not a draft step (counted as one,
    # a pass over many tokens would make a draft step look several steps long)
    ctx = _ScriptedContext([3, 4, 5, 6])
    d = DraftModelDrafter(_Vocab(), ctx)  # type: ignore[arg-type]
    d._kv = [1, 2]
    missed = list(range(10, 20))  # ten tokens the draft has not seen
    context = [1, 2, *missed]
    assert d.draft(context, 2) == [3, 4]
    # the catch-up over 10…17 (no logits), the draft step over 18, 19, then 3
    assert ctx.passes == [(missed[:8], 2, "none"), (missed[8:], 10, "last"), ([3], 12, "last")]
    assert d._kv == [*context, 3]
    assert d.forward_passes == 2 and d.catch_up_time > 0
    caught_up = d.catch_up_time
    # the next round: the whole draft accepted and the target's token: two new tokens
    assert len(d.draft([*context, 3, 4, 9], 1)) == 1
    assert ctx.passes[-1] == ([4, 9], 13, "last")  # one pass: a draft step
    assert d.forward_passes == 3 and d.catch_up_time == caught_up
    # a few tokens behind (after one declined round): one pass, still a draft step
    before = len(ctx.passes)
    d.draft([*context, 3, 4, 9, 21, 22, 23], 1)
    assert ctx.passes[before:] == [([21, 22, 23], 15, "last")]
    assert d.forward_passes == 4 and d.catch_up_time == caught_up


def test_a_failed_catch_up_forgets_the_draft_cache() -> None:
    # llama.cpp may keep part of a long batch that failed: the draft's record of its
    # cache would no longer match it, so it is forgotten and evaluated again next time
    ctx = _ScriptedContext([3, 4])
    d = DraftModelDrafter(_Vocab(), ctx)  # type: ignore[arg-type]
    d._kv = [1, 2]
    ctx.fail_next = True
    with pytest.raises(TandemError):
        d.draft([1, 2, *range(10, 20)], 2)
    assert d._kv == [] and ctx.cleared == 1


def test_a_draft_step_is_timed_alone_and_leaves_the_cache_as_it_was() -> None:
    ctx = _ScriptedContext([3])
    d = DraftModelDrafter(_Vocab(), ctx)  # type: ignore[arg-type]
    assert d.time_step() is None  # nothing in the cache to follow
    d._kv = [1, 2, 5]
    seconds = d.time_step()
    assert seconds is not None and seconds >= 0.0
    # twice (the first may build the graph again), each removed again
    assert ctx.passes == [([5], 3, "last")] * 2 and ctx.removed == [3, 3]
    assert d._kv == [1, 2, 5] and d.forward_passes == 0  # no draft step of a reply
