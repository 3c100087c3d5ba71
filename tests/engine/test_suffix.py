"""The suffix drafter on token lists: exact drafts, against a plain re-implementation of
SuffixDecoding's rules, and the reply index's memory bound."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest

from app.engine.suffix import (
    SuffixCandidate,
    SuffixDrafter,
    SuffixIndex,
    reversed_suffix_order,
)

# -- a slow, obviously correct reference --------------------------------------------


def _ref_walk(
    texts: Sequence[Sequence[int]], ends: list[tuple[int, int]], cap: int, min_prob: float
) -> tuple[list[int], list[float]]:
    """Suffix-tree path from the occurrences (text index, end position) — lists only."""
    out: list[int] = []
    probs: list[float] = []
    alive = [(t, p + 1) for t, p in ends]
    prob = 1.0
    while len(out) < cap and alive:
        counts: dict[int, int] = {}
        latest: dict[int, tuple[int, int]] = {}
        for t, p in alive:
            if p < len(texts[t]):
                tok = texts[t][p]
                counts[tok] = counts.get(tok, 0) + 1
                latest[tok] = max(latest.get(tok, (-1, -1)), (t, p))
        if not counts:
            break
        best = max(counts, key=lambda x: (counts[x], latest[x]))
        p_new = prob * counts[best] / len(alive)
        if p_new < min_prob:
            break
        prob = p_new
        out.append(best)
        probs.append(prob)
        alive = [(t, p + 1) for t, p in alive if p < len(texts[t]) and texts[t][p] == best]
    return out, probs


def _ref_best(
    texts: Sequence[Sequence[int]],
    context: Sequence[int],
    n_max: int,
    *,
    exclude_last: bool,
    max_match: int = 32,
    factor: float = 1.0,
    offset: float = 0.0,
    min_prob: float = 0.1,
) -> tuple[tuple[int, ...], float, int]:
    """ArcticInference's rule: every match length, longest wins ties."""
    best: tuple[tuple[int, ...], float, int] = ((), 0.0, 0)
    for m in range(1, min(max_match, len(context)) + 1):
        pat = list(context[-m:])
        ends = []
        for ti, text in enumerate(texts):
            stop = len(text) - 1 if exclude_last else len(text)
            for p in range(m - 1, stop):
                if list(text[p - m + 1 : p + 1]) == pat:
                    ends.append((ti, p))
        if not ends:
            break
        cap = min(n_max, int(m * factor + offset + 1e-6))
        toks, probs = _ref_walk(texts, ends, cap, min_prob)
        score = sum(probs)
        if toks and score >= best[1]:
            best = (tuple(toks), score, m)
    return best


def _random_replies_and_context(rng: random.Random) -> tuple[list[list[int]], list[int]]:
    """Up to 5 earlier replies and a context over a small vocabulary (3, 5 or 12 ids), so
    that matches, ties and branches are common."""
    vocab = rng.choice([3, 5, 12])
    replies = [[rng.randrange(vocab) for _ in range(rng.randrange(1, 30))]
               for _ in range(rng.randrange(0, 6))]
    ctx = [rng.randrange(vocab) for _ in range(rng.randrange(1, 40))]
    return replies, ctx


# -- exact behaviour ------------------------------------------------------------------


def test_context_match_copies_the_continuation_and_caps_it_by_match_length() -> None:
    d = SuffixDrafter()
    ctx = [1, 5, 6, 7, 8, 9, 2, 5, 6, 7]
    d.begin(ctx)
    assert d.draft(ctx, 8) == [8, 9, 2]  # match "5 6 7" (3 tokens) allows 3
    assert d.last.match_len == 3 and d.last.source == "context"
    assert d.last.probs == (1.0, 1.0, 1.0)
    assert d.token_keys() == (("context", 1, 3, 0),) * 3  # one earlier "5 6 7": a copy
    assert d.draft(ctx, 2) == [8, 9]  # n_max caps it
    wide = SuffixDrafter(spec_factor=2.0)
    wide.begin(ctx)
    assert wide.draft(ctx, 8) == [8, 9, 2, 5, 6, 7]  # up to 6 = 2 × 3, ends at the context


def test_past_the_cap_the_chosen_draft_continues_along_the_same_occurrences() -> None:
    """With ``past_cap`` (the adaptive policy's drafter) the match is chosen as before
    and its draft goes on to n_max, still stopped by the end of the text and by
    ``min_token_prob``; the probabilities and keys of the longer draft follow it."""
    idx = SuffixIndex()
    idx.add_reply([5, 6, 30, 31, 40])
    idx.add_reply([20, 5, 6, 30, 31, 32, 33, 34, 35])  # the latest wins the 40/32 tie
    ctx = [1, 2, 5, 6]
    capped, past = SuffixDrafter(idx), SuffixDrafter(idx, past_cap=True)
    for d in (capped, past):
        d.begin(ctx)
    assert capped.draft(ctx, 8) == [30, 31]  # a 2-token match allows 2
    assert past.draft(ctx, 8) == [30, 31, 32, 33, 34, 35]  # then to the reply's end
    assert past.last.probs == (1.0, 1.0, 0.5, 0.5, 0.5, 0.5)  # 32 in 1 of 2 occurrences
    assert past.last.score == sum(past.last.probs) and past.last.match_len == 2
    assert len(past.token_keys()) == 6
    assert past.draft(ctx, 3) == [30, 31, 32]  # n_max still caps it
    picky = SuffixDrafter(idx, past_cap=True, min_token_prob=0.6)
    picky.begin(ctx)
    assert picky.draft(ctx, 8) == [30, 31]  # 0.5 < 0.6: stops where the estimate falls


def test_past_the_cap_the_match_is_still_chosen_by_its_capped_draft() -> None:
    """In the context alone the chosen copy runs on to the end of the text; and a shorter
    match whose longer continuation would outscore it uncapped does not replace the
    longer match: past the cap only the chosen draft grows."""
    ctx = [1, 5, 6, 7, 8, 9, 2, 5, 6, 7]
    own = SuffixDrafter(None, past_cap=True)
    own.begin(ctx)
    assert own.draft(ctx, 8) == [8, 9, 2, 5, 6, 7] and own.last.source == "context"
    idx = SuffixIndex()
    idx.add_reply([70, 71, 72, 80, 81])  # "70 71 72" then two tokens
    idx.add_reply([60, 71, 72, 90, 91, 92, 93, 94, 95])  # only "71 72", then six
    ctx = [1, 70, 71, 72]
    past = SuffixDrafter(idx, past_cap=True)
    past.begin(ctx)
    assert past.draft(ctx, 8) == [80, 81] and past.last.match_len == 3


def test_no_match_no_draft_and_no_self_match() -> None:
    d = SuffixDrafter()
    d.begin([1, 2, 3, 4])
    assert d.draft([1, 2, 3, 4], 4) == []
    assert d.last == SuffixCandidate()
    assert d.draft([1, 2, 3, 4], 0) == []


def test_frequencies_choose_the_continuation_and_set_its_probability() -> None:
    idx = SuffixIndex()
    idx.add_reply([10, 11, 12, 13, 14, 15])
    idx.add_reply([10, 11, 12, 99])
    idx.add_reply([10, 11, 12, 13, 14, 16])
    d = SuffixDrafter(idx)
    ctx = [1, 3, 10, 11, 12]
    d.begin(ctx)
    assert d.draft(ctx, 8) == [13, 14, 16]  # 13 twice of 3; 15/16 tie → the latest
    assert d.last.source == "history"
    assert d.last.probs == pytest.approx((2 / 3, 2 / 3, 1 / 3))
    assert d.last.score == pytest.approx(5 / 3)
    # keys: (source, match class of 3 tokens, step-probability class, 3 occurrences)
    assert d.token_keys() == (("history", 1, 1, 1), ("history", 1, 3, 1), ("history", 1, 1, 1))
    strict = SuffixDrafter(idx, min_token_prob=0.5)
    strict.begin(ctx)
    assert strict.draft(ctx, 8) == [13, 14]  # 1/3 < 0.5 stops the draft


def test_history_wins_only_with_a_higher_score() -> None:
    idx = SuffixIndex()
    idx.add_reply([7, 8, 9, 40, 41, 42])
    d = SuffixDrafter(idx)
    ctx = [1, 7, 8, 9, 50, 2, 7, 8, 9]  # the context says 50, history says 40 41 42
    d.begin(ctx)
    assert d.draft(ctx, 8) == [50, 2, 7]
    assert d.last.source == "context"  # equal scores (3.0): the context is kept


def test_token_keys_tell_frequent_continuations_from_copies() -> None:
    # (a copy, class 0, and 3 occurrences, class 1: the two tests above)
    many = SuffixDrafter()
    ctx = [9, 1, 2, 3, 8, 1, 2, 3, 7, 1, 2, 3, 6, 1, 2, 3, 5, 1, 2]  # "1 2" 4 times before
    many.begin(ctx)
    assert many.draft(ctx, 8) == [3, 5]
    assert many.last.occurrences == 4 and many.token_keys()[0] == ("context", 0, 3, 2)
    two = SuffixDrafter()
    ctx = [9, 1, 2, 3, 8, 1, 2, 3, 5, 1, 2]  # "1 2" twice before: the lower edge of class 1
    two.begin(ctx)
    assert two.draft(ctx, 8) == [3, 5]
    assert two.last.occurrences == 2 and two.token_keys()[0] == ("context", 0, 3, 1)


def test_drafts_equal_the_reference_on_random_token_lists() -> None:
    rng = random.Random(7)
    for trial in range(60):
        replies, ctx = _random_replies_and_context(rng)
        n_max = rng.choice([1, 3, 8, 16])
        factor = rng.choice([0.5, 1.0, 2.0])
        min_prob = rng.choice([0.0, 0.1, 0.4])
        max_match = rng.choice([4, 32])
        idx = SuffixIndex(max_match=max_match)
        if replies and rng.random() < 0.5:
            idx.load_replies(replies)  # sorted
        else:
            for r in replies:
                idx.add_reply(r)  # tail
        d = SuffixDrafter(idx, spec_factor=factor, min_token_prob=min_prob)
        d.begin(ctx)
        got = d.draft(ctx, n_max)
        local = _ref_best([ctx], ctx, n_max, exclude_last=True, max_match=max_match,
                          factor=factor, min_prob=min_prob)
        hist = _ref_best(replies, ctx, n_max, exclude_last=False, max_match=max_match,
                         factor=factor, min_prob=min_prob)
        want = hist if hist[1] > local[1] else local
        assert tuple(got) == want[0], (trial, replies, ctx, n_max, factor, min_prob)
        if got:
            assert d.last.score == pytest.approx(want[1])
            assert d.last.match_len == want[2]


def test_sorted_and_unsorted_replies_give_the_same_drafts() -> None:
    rng = random.Random(3)
    replies = [[rng.randrange(6) for _ in range(rng.randrange(5, 40))] for _ in range(40)]
    a = SuffixIndex()
    a.load_replies(replies)
    b = SuffixIndex()
    for r in replies:
        b.add_reply(r)
    assert a.stats().tail_tokens == 0 and b.stats().tail_tokens > 0
    for _ in range(100):
        ctx = [rng.randrange(6) for _ in range(rng.randrange(1, 12))]
        assert a.candidate(ctx, 8) == b.candidate(ctx, 8)


def test_reversed_suffix_order_matches_a_naive_sort() -> None:
    rng = np.random.default_rng(0)
    tok = rng.integers(0, 4, 300).astype(np.int32)
    tok[0] = -1
    tok[rng.integers(1, 300, 20)] = -1
    for depth in (1, 3, 8):
        got = reversed_suffix_order(tok, depth).tolist()
        full = 1 << (depth - 1).bit_length()  # sorted this deep, ties by position

        def key(p: int, d: int) -> list[int]:
            return [int(tok[p - j]) if p - j >= 0 else -2 for j in range(d)]

        want = sorted((p for p in range(len(tok)) if tok[p] >= 0), key=lambda p: (key(p, full), p))
        assert got == want
        assert [key(p, depth) for p in got] == sorted(key(p, depth) for p in got)


def test_bad_input_is_refused() -> None:
    idx = SuffixIndex()
    with pytest.raises(ValueError):
        idx.add_reply([1, -3])
    assert len(idx) == 0  # nothing half-added
    with pytest.raises(ValueError):
        SuffixIndex(max_tokens=0)
    with pytest.raises(ValueError):
        SuffixDrafter(spec_factor=0)
    with pytest.raises(ValueError):
        SuffixDrafter(min_token_prob=1.5)
    idx.add_reply([])
    assert len(idx) == 0


# -- the memory bound -------------------------------------------------------------------


def test_token_cap_evicts_oldest_replies_and_bounds_memory() -> None:
    cap = 5_000
    idx = SuffixIndex(max_tokens=cap)
    rng = np.random.default_rng(1)
    first = [900, 901, 902, 903, 904, 905, 906, 907]
    idx.add_reply(first)
    peak_tokens = peak_bytes = 0
    for _ in range(400):
        idx.add_reply(rng.integers(0, 500, int(rng.integers(20, 120))).tolist())
        s = idx.stats()
        peak_tokens = max(peak_tokens, s.tokens)
        peak_bytes = max(peak_bytes, s.memory_bytes)
    s = idx.stats()
    assert peak_tokens <= cap
    assert s.evicted_replies > 0
    # 4 bytes of text (buffer at most 2.5× the text and separators) + 4 of suffix array
    # per token, 16 per reply
    assert peak_bytes <= 4 * 2.5 * 2 * cap + 4 * 2 * cap + 16 * s.replies + 1024
    # the oldest reply went first: its continuation is no longer proposed
    assert idx.candidate([900, 901, 902, 903], 4).tokens == ()


def test_reply_cap_and_oversized_reply() -> None:
    idx = SuffixIndex(max_tokens=100, max_replies=10)
    for i in range(30):
        idx.add_reply([i, i + 1])
    assert len(idx) <= 10
    idx.add_reply(list(range(1000, 1300)))  # longer than the cap: its last 90 kept
    s = idx.stats()
    assert s.tokens <= 100
    assert idx.candidate([1250, 1251], 2).tokens == (1252, 1253)
    idx.clear()
    assert len(idx) == 0 and idx.candidate([1250, 1251], 2).tokens == ()


# -- replay: the estimate an auto chooser uses ------------------------------------------


def test_replay_counts_rounds_as_the_engine_does() -> None:
    from app.engine.measure.draft_replay import replay_reply

    prompt = [1, 5, 6, 7, 8, 9, 2]
    reply = [5, 6, 7, 8, 9, 2, 5, 6, 4]
    c = replay_reply(SuffixDrafter(spec_factor=4.0), prompt, reply, k=8)
    assert c.emitted == len(reply) == c.accepted + c.rounds
    assert c.verified <= c.proposed and c.accepted <= c.verified
    assert c.pass_sizes and sum(c.pass_sizes) == c.rounds + c.proposed
    # first round: "2" matches at the prompt's end, the drafter proposes "5" (1 token,
    # match length 1 × 4 = up to 4 tokens: 5 6 7 8), all right; and so on
    assert c.acceptance_rate is not None and c.acceptance_rate > 0.5
    assert c.predicted_speedup(lambda n: 1.0) == pytest.approx(c.emitted / c.rounds)
    assert c.predicted_speedup(lambda n: None) is None
    nothing = replay_reply(SuffixDrafter(), [1, 2, 3], [4, 5, 6], k=4)
    assert nothing.draft_rounds == 0 and nothing.rounds == 3 and nothing.hit_rate == 0.0
    both = c + nothing
    assert both.rounds == c.rounds + 3 and both.emitted == c.emitted + 3


def test_replay_with_the_history_index_predicts_a_copy() -> None:
    from app.engine.measure.draft_replay import replay_reply

    reply = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49]
    idx = SuffixIndex()
    idx.add_reply(reply)
    c = replay_reply(SuffixDrafter(idx, spec_factor=8.0), [1, 2], reply, k=8)
    # the first token cannot be drafted (nothing matches "2"); then the copy is exact
    assert c.accepted == len(reply) - c.rounds and c.acceptance_rate == 1.0
    assert c.rounds <= 3


class _Scripted:
    """A model-free drafter that proposes a fixed draft per context length."""

    kind = "scripted"
    forward_passes = 0
    draft_limit = None

    def __init__(self, script: dict[int, list[int]]) -> None:
        self.script = script

    def begin(self, prompt: Sequence[int], should_stop: object = None) -> None:
        pass

    def draft(self, context: Sequence[int], n_max: int) -> list[int]:
        return list(self.script.get(len(context), []))[:n_max]

    def token_keys(self) -> tuple[str, ...]:
        return ("k",) * 8

    def close(self) -> None:
        pass


def test_policy_replay_counts_as_the_engine_does() -> None:
    from tests.policy_replay import replay_policy
    from app.engine.policy import DraftLengthPolicy, PassTimes

    prompt, reply = [0], [1, 2, 3, 4, 5, 6]
    # at position 0: "1 2 9" (2 accepted, then 3 is the target's); at 3: "4" (then 5);
    # at 5: nothing; at 6, the end-of-generation position: "7 7", past the reply
    script = {1: [1, 2, 9], 4: [4], 7: [7, 7]}
    t = {1: 1.0, 2: 1.5, 3: 2.0, 4: 2.5}

    def run(rule: str, cost: dict[int, float] = t, **kw: object):
        pt = PassTimes()
        for size, sec in cost.items():
            for _ in range(3):
                pt.observe(size, sec)
        return replay_policy(_Scripted(script), DraftLengthPolicy(pt), prompt, reply, 8, rule,  # type: ignore[arg-type]
                             cost.__getitem__, ends_with_eog=True, max_tokens=64, **kw)  # type: ignore[arg-type]

    full = run("full")
    c = full.counts
    # the pass that only samples the end-of-generation token is no round, and its
    # drafts are proposed, never verified
    assert (c.rounds, c.draft_rounds, c.proposed, c.verified, c.accepted, c.emitted) == (3, 2, 6, 4, 3, 6)
    assert c.pass_sizes == (4, 2, 1, 3)
    assert full.target_s == 2.5 + 1.5 + 1.0 + 2.0 and full.plain_s == 7.0
    # the engine's cut before the end of the reply drops that last draft
    cut = run("full", draft_end=lambda i, d: min(len(d), len(reply) - i))
    assert cut.counts.pass_sizes == (4, 2, 1, 1) and cut.target_s == full.target_s - 1.0
    with pytest.raises(ValueError):
        run("nonsense")


def test_a_cold_replay_times_each_batch_size_it_verifies() -> None:
    from tests.policy_replay import replay_policy
    from app.engine.policy import DraftLengthPolicy, PassTimes

    prompt, reply = [0], [1, 2, 3, 4, 5, 6]
    script = {1: [1, 2, 9], 4: [4], 7: [7, 7]}
    cost = {1: 1.0, 2: 1.5, 3: 2.0, 4: 2.5}
    warm, cold = PassTimes(), PassTimes()
    for size, sec in cost.items():
        for _ in range(3):
            warm.observe(size, sec)
    for _ in range(PassTimes.trusted_after):
        cold.observe(1, 1.0)  # a fresh session has timed one-token passes only
    for pt, observe in ((warm, False), (cold, True)):
        before = {n: pt.count(n) for n in cost}
        r = replay_policy(_Scripted(script), DraftLengthPolicy(pt), prompt, reply, 8, "full",  # type: ignore[arg-type]
                          cost.__getitem__, ends_with_eog=True, max_tokens=64,
                          observe_passes=observe)
        assert r.counts.pass_sizes == (4, 2, 1, 3)
        grown = {n: pt.count(n) - before[n] for n in cost}
        assert grown == ({1: 1, 2: 1, 3: 1, 4: 1} if observe else {1: 0, 2: 0, 3: 0, 4: 0})
    # each size was timed once: not trusted yet, it costs what the trusted size costs
    assert cold.count(4) == 1 and cold(4) == cold(2) == 1.0
    for _ in range(PassTimes.trusted_after - 1):
        cold.observe(4, 2.5)
    assert cold(4) == 2.5 and cold(2) == 1.0 + 1.5 * (2 - 1) / 3


def test_the_oracle_is_the_least_time_any_cut_takes() -> None:
    from tests.policy_replay import replay_policy
    from app.engine.policy import DraftLengthPolicy, PassTimes

    def run(rule: str, script: dict[int, list[int]], reply: list[int], cost: dict[int, float]):
        return replay_policy(_Scripted(script), DraftLengthPolicy(PassTimes()), [0], reply, 8,
                             rule, cost.__getitem__, ends_with_eog=False,  # type: ignore[arg-type]
                             max_tokens=len(reply))

    # a round that looks worse on its own can be the faster whole: verifying both draft
    # tokens (1.7 s for 3 tokens) beats 1 token a round (1.1 + 1.0 s)
    cost = {1: 1.0, 2: 1.1, 3: 1.7}
    assert run("oracle", {1: [1, 2]}, [1, 2, 3], cost).target_s == 1.7
    # flat costs: every accepted token verified, no rejected one; costs above a token's
    # time per token: nothing verified
    script = {1: [1, 2, 9], 4: [4, 8]}
    flat = run("oracle", script, [1, 2, 3, 4, 5, 6], {n: 1.0 for n in range(1, 5)})
    assert flat.counts.verified == flat.counts.accepted == 3 and flat.target_s == 3.0
    dear = run("oracle", script, [1, 2, 3, 4, 5, 6], {1: 1.0, 2: 2.5, 3: 3.5, 4: 4.5})
    assert dear.counts.verified == 0 and dear.target_s == dear.plain_s == 6.0
    # no rule takes less target time than the oracle
    cost = {1: 1.0, 2: 1.1, 3: 1.7, 4: 2.4}
    best = run("oracle", script, [1, 2, 3, 4, 5, 6], cost).target_s
    assert best == pytest.approx(1.7 + 1.1 + 1.0)  # 3 tokens, then 2, then the last one
    for rule in ("full", "choose", "trim"):
        assert run(rule, script, [1, 2, 3, 4, 5, 6], cost).target_s >= best
    # pass times that are not monotonic (4 tokens cheaper than 3): verifying the rejected
    # third token too is the cheaper way to emit 3 tokens, and the bound knows it
    odd = run("oracle", {1: [1, 2, 9]}, [1, 2, 3, 4, 5], {1: 1.0, 2: 1.5, 3: 2.0, 4: 1.8})
    assert odd.target_s == pytest.approx(1.8 + 1.0 + 1.0)
    c = odd.counts
    assert (c.proposed, c.verified, c.accepted, c.pass_sizes) == (3, 3, 2, (4, 1, 1))


def test_the_replay_policy_rules_feed_the_policy() -> None:
    from tests.policy_replay import replay_policy
    from app.engine.policy import DraftLengthPolicy, PassTimes

    pt = PassTimes()
    for size in range(1, 10):
        for _ in range(3):
            pt.observe(size, 1.0)  # flat: drafting always pays
    prompt, reply = [0], list(range(1, 30))
    script = {i: list(range(i, i + 8)) for i in range(1, 30)}  # always right
    for rule in ("choose", "trim"):
        pol = DraftLengthPolicy(pt)
        r = replay_policy(_Scripted(script), pol, prompt, reply, 8, rule, pt,  # type: ignore[arg-type]
                          ends_with_eog=False, max_tokens=len(reply))
        assert r.counts.accepted > 0 and pol.alpha > pol.prior_alpha
        assert pol.keys_measured == (0 if rule == "choose" else 1)  # keys only when cutting
