"""Replays of recorded replies under the session's draft-length rules
(:class:`~app.engine.policy.DraftLengthPolicy`), so that rules can be compared on the
same replies and pass times without timing noise: the policy's deterministic tests and
bench/experiments/policy_replay.py. With a fixed seed it applies when sampling too
(speculation draws the same random numbers as plain decoding); it replays plain
decoding's text, where a timed run may have written another after a batched pass
rounded a near-tie the other way (docs/proof.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

from app.engine.drafters import Drafter
from app.engine.measure.draft_replay import ReplayCounts, matching_prefix
from app.engine.policy import DraftLengthPolicy, UnverifiedTails


#: How a replay sets each round's draft length: the engine's rules (``trim``: the full
#: draft cut by :meth:`DraftLengthPolicy.trim`, the rule of a free drafter; ``choose``:
#: the length chosen before drafting by :meth:`DraftLengthPolicy.choose`, the rule of a
#: draft model), ``full`` (every proposed token verified) or ``oracle``
#: (:func:`oracle_replay`: the least target time any rule could take with these drafts).
ReplayRule = Literal["choose", "trim", "full", "oracle"]


@dataclass(frozen=True, slots=True)
class PolicyReplay:
    """A reply replayed under a draft-length rule: its rounds, the seconds its target
    passes would take at the given pass times (``target_s``) and the seconds its drafter
    and policy took in this process (``draft_s``, CPU time by default), against plain
    decoding's
    ``plain_s`` = t(1) per sampled position."""

    counts: ReplayCounts
    target_s: float
    draft_s: float
    plain_s: float

    def __add__(self, other: PolicyReplay) -> PolicyReplay:
        return PolicyReplay(self.counts + other.counts, self.target_s + other.target_s,
                            self.draft_s + other.draft_s, self.plain_s + other.plain_s)

    @property
    def speedup(self) -> float | None:
        """plain_s / (target_s + draft_s); None when nothing was replayed."""
        spent = self.target_s + self.draft_s
        return self.plain_s / spent if spent > 0 else None


def replay_policy(
    drafter: Drafter,
    policy: DraftLengthPolicy,
    prompt: Sequence[int],
    reply: Sequence[int],
    k: int,
    rule: ReplayRule,
    pass_time: Callable[[int], float],
    *,
    ends_with_eog: bool,
    max_tokens: int,
    draft_end: Callable[[int, Sequence[int]], int] | None = None,
    clock: Callable[[], float] = time.thread_time,
    observe_passes: bool = False,
) -> PolicyReplay:
    """Replay one reply as the engine's loop would run it under ``rule``.

    Each round: the draft length d ≤ min(k, max_tokens − emitted − 1) is set by the rule,
    the longest prefix of the draft equal to the reply is accepted, the target's own token
    follows, the pass costs ``pass_time(1 + d)`` seconds, and the policy observes what
    was verified (with the drafter's token keys under ``trim``), as in
    :meth:`app.engine.session.Session.generate`. With ``ends_with_eog`` the position
    after the reply is the end-of-generation token: sampled by a pass like any other,
    never accepted, never counted as verified, and a pass that samples only it is no
    round. The policy's pass times are not updated (every rule sees the same
    ``pass_time``) unless ``observe_passes``: then each pass is observed with its
    ``pass_time``, as the engine observes its timed passes, so a policy that starts with
    nothing timed explores batch sizes as in a fresh session. ``oracle`` is
    :func:`oracle_replay`.

    Args:
        drafter: a model-free drafter; ``begin`` is called with ``prompt``.
        policy: the drafter's policy, carried from reply to reply as a session does.
        k: the most draft tokens per round (≥ 0).
        max_tokens: the reply's token limit (drafts may run past an end-of-generation
            token the drafter cannot foresee, as in the engine).
        pass_time: seconds of a target pass over n tokens (sampling included).
        clock: what times the drafter and the policy (``draft_s``); by default this
            thread's CPU time, which other processes on a busy machine do not inflate
            as they inflate wall time.
        draft_end: (reply tokens emitted so far, draft) → how many leading draft tokens
            are worth verifying; the draft is cut there before the rule applies, as the
            engine cuts it (:func:`app.engine.text.draft_length_before_end`).

    Returns:
        The rounds, and the target, drafting and plain seconds.

    Raises:
        ValueError: k < 0 or an unknown rule.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if rule not in get_args(ReplayRule):
        raise ValueError(f"unknown rule {rule!r}")
    if rule == "oracle":
        return oracle_replay(drafter, prompt, reply, k, pass_time, ends_with_eog=ends_with_eog,
                             max_tokens=max_tokens, draft_end=draft_end)
    keyed = getattr(drafter, "token_keys", None) if rule == "trim" else None
    tails = UnverifiedTails(policy)
    context = list(prompt)
    drafter.begin(context)
    n = len(reply)
    end = n + 1 if ends_with_eog else n  # positions the target samples
    rounds = draft_rounds = proposed = verified = accepted = 0
    sizes: list[int] = []
    target_s = draft_s = 0.0
    i = 0
    while i < end:
        t0 = clock()
        d, keys = _round_draft(drafter, policy, context, i, min(k, max_tokens - i - 1), rule,
                               keyed, draft_end, tails)
        draft_s += clock() - t0
        acc = matching_prefix(d, reply, i)
        # draft positions compared: through the first mismatch; the EOG one is not counted
        n_verified = min(len(d), acc + 1, n - i)
        if n_verified:
            policy.observe_verification(n_verified, acc, keys)
        step = min(acc + 1, end - i)
        context.extend(reply[i : min(i + step, n)])
        if min(i + step, n) > i:  # it emitted something: a round (the engine's rule)
            rounds += 1
            draft_rounds += 1 if d else 0
        i += step
        target_s += pass_time(1 + len(d))
        if observe_passes:
            policy.pass_times.observe(1 + len(d), pass_time(1 + len(d)))
        proposed += len(d)
        verified += n_verified
        accepted += acc
        sizes.append(1 + len(d))
    counts = ReplayCounts(rounds, draft_rounds, proposed, verified, accepted, n, tuple(sizes))
    return PolicyReplay(counts, target_s, draft_s, end * pass_time(1))


def _round_draft(
    drafter: Drafter,
    policy: DraftLengthPolicy,
    context: Sequence[int],
    emitted: int,
    n_max: int,
    rule: ReplayRule,
    keyed: Callable[[], Any] | None,
    draft_end: Callable[[int, Sequence[int]], int] | None,
    tails: UnverifiedTails,
) -> tuple[list[int], tuple[Any, ...] | None]:
    """One round's draft of :func:`replay_policy` and its token keys (None unless
    ``keyed``): at most ``n_max`` tokens (fewer under ``choose``), cut by ``draft_end``
    and then by the policy's trim where there are keys, the cut-away tokens held in
    ``tails`` for scoring; the policy observes a round without a draft."""
    keys: tuple[Any, ...] | None = None
    d: list[int] = []
    if n_max > 0 and rule == "choose":
        n_max = policy.choose(n_max)
    if n_max > 0:
        d = drafter.draft(context, n_max)[:n_max]
        if draft_end is not None and d:
            del d[draft_end(emitted, d):]
        if keyed is not None:
            keys = tuple(keyed())[: len(d)]
    if d and keys is not None:
        tails.score(context)
        n = policy.trim(keys)
        tails.hold(len(context), d, keys, n)
        del d[n:]
    if not d:
        policy.observe_no_draft()
    return d, keys


def oracle_replay(
    drafter: Drafter,
    prompt: Sequence[int],
    reply: Sequence[int],
    k: int,
    pass_time: Callable[[int], float],
    *,
    ends_with_eog: bool,
    max_tokens: int,
    draft_end: Callable[[int, Sequence[int]], int] | None = None,
) -> PolicyReplay:
    """The least target time in which the reply can be verified from this drafter's
    drafts: a lower bound for every draft-length rule that verifies, each round, a prefix
    of the draft the drafter proposes at that position with length min(k, tokens left).

    At each reply position i the drafter proposes once (after prompt + reply[:i]) a draft
    of length L_i; let a_i be how many of its leading tokens equal the reply. A round at
    i verifying m ≤ L_i of them emits min(m, a_i) + 1 tokens and costs t(1 + m) (m may
    exceed a_i: pass times are not monotonic on every backend, so a longer pass can be
    the cheaper one), so the least time from i on is
    T(i) = min over m of t(1 + m) + T(i + min(m, a_i) + 1), with T = 0 once every
    position (and the end-of-generation one, with ``ends_with_eog``) is sampled: a
    dynamic programme over positions, O(n · k). Arguments as :func:`replay_policy`;
    ``draft_s`` is 0 (the bound is on target time).
    """
    context = list(prompt)
    drafter.begin(context)
    n = len(reply)
    end = n + 1 if ends_with_eog else n
    usable = [0] * end  # a_i
    lengths = [0] * end  # L_i
    for i in range(end):
        n_max = min(k, max_tokens - i - 1)
        if i < n and n_max > 0:
            d = drafter.draft(context, n_max)[:n_max]
            if draft_end is not None and d:
                del d[draft_end(i, d):]
            usable[i] = matching_prefix(d, reply, i)
            lengths[i] = len(d)
        if i < n:
            context.append(reply[i])
    total, path = least_time([
        [(pass_time(1 + m), min(m, usable[i]) + 1, m) for m in range(lengths[i] + 1)]
        for i in range(end)])
    rounds = draft_rounds = proposed = verified = accepted = 0
    sizes: list[int] = []
    for i, m in path:
        acc = min(m, usable[i])
        if i < n:
            rounds += 1
            draft_rounds += 1 if m else 0
        proposed += m
        verified += min(m, acc + 1, n - i)
        accepted += acc
        sizes.append(1 + m)
    counts = ReplayCounts(rounds, draft_rounds, proposed, verified, accepted, n, tuple(sizes))
    return PolicyReplay(counts, total, 0.0, end * pass_time(1))


_Tag = TypeVar("_Tag")


def least_time(options: Sequence[Sequence[tuple[float, int, _Tag]]]
               ) -> tuple[float, list[tuple[int, _Tag]]]:
    """The cheapest way through positions 0 … len(options): at position i each option
    (seconds, advance ≥ 1, tag) costs its seconds and moves to i + advance (the end at
    most). A dynamic programme from the end; of equally cheap options the first listed
    wins. Returns the least total seconds and the path taken, as (position, tag) per step
    (:func:`oracle_replay`'s bound)."""
    end = len(options)
    best = [0.0] * (end + 1)
    pick: list[tuple[int, _Tag] | None] = [None] * end
    for i in range(end - 1, -1, -1):
        best[i], _, adv, tag = min(
            (cost + best[min(i + adv, end)], j, adv, tag)
            for j, (cost, adv, tag) in enumerate(options[i]))
        pick[i] = (adv, tag)
    path: list[tuple[int, _Tag]] = []
    i = 0
    while i < end:
        step = pick[i]
        assert step is not None
        path.append((i, step[1]))
        i += step[0]
    return best[0], path
