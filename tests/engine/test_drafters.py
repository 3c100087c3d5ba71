"""PromptLookupDrafter: n-gram lookup over prompt + reply, longest n first, most recent match."""

from __future__ import annotations

import pytest

from app.engine.drafters import PromptLookupDrafter, common_prefix_length


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
