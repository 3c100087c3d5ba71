"""What would a model-free drafter have bought on replies already written? A replay.

An "auto" drafter choice has to predict, before a reply, whether prompt lookup or the
suffix drafter can win. Their drafts depend only on tokens, so replaying a stored reply
through one of them gives, without running any model, the rounds speculative decoding
would have taken with greedy verification: each round the drafter proposes up to k
tokens after the context, the longest prefix that equals what the model actually wrote
is accepted, and one more token (the target's own) follows. That is exactly what the
engine does with temperature 0 when the target reproduces the reply, so the counts give
the acceptance rate α, the mean acceptance length τ and the share of rounds that drafted
anything; with measured pass times t(n) they predict the speedup
Σ_rounds t(1) / Σ_rounds t(1 + proposed) (:meth:`ReplayCounts.predicted_speedup`).

:func:`replay_policy` replays a reply the same way under the session's draft-length
rules (:class:`~app.engine.policy.DraftLengthPolicy`), so that rules can be compared on
the same replies and pass times without timing noise (bench/policy_replay.py). With a
fixed seed it applies when sampling too (speculation draws the same random numbers as
plain decoding); it replays plain decoding's text, where a timed run may have written
another after a batched pass rounded a near-tie the other way (docs/proof.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.engine.drafters import Drafter
from app.engine.policy import DraftLengthPolicy


@dataclass(frozen=True, slots=True)
class ReplayCounts:
    """Rounds of a replay (greedy, as the engine's loop counts them).

    ``rounds``: target passes; ``draft_rounds``: rounds that carried a draft;
    ``proposed``: draft tokens in the passes; ``verified``: draft tokens verified (up to
    and including the first rejected one, as :class:`app.engine.stats.SpecStats` counts);
    ``accepted``: of those, equal to the reply; ``emitted``: reply tokens (= accepted +
    rounds); ``pass_sizes``: the pass size (1 + proposed) of every round.
    """

    rounds: int = 0
    draft_rounds: int = 0
    proposed: int = 0
    verified: int = 0
    accepted: int = 0
    emitted: int = 0
    pass_sizes: tuple[int, ...] = ()

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.verified if self.verified else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return self.emitted / self.rounds if self.rounds else None

    @property
    def hit_rate(self) -> float | None:
        """draft_rounds / rounds: how often the drafter had anything to propose."""
        return self.draft_rounds / self.rounds if self.rounds else None

    def predicted_speedup(self, pass_time: Callable[[int], float | None]) -> float | None:
        """Plain time ÷ speculative time for these rounds, with t(n) = ``pass_time(n)``
        seconds for a target pass over n tokens (e.g. a
        :class:`app.engine.policy.PassTimes`); drafting itself is taken as free (true for
        model-free drafters to within a few percent). None when a time is unknown."""
        t1 = pass_time(1)
        if t1 is None or not self.rounds:
            return None
        spec = 0.0
        for n in self.pass_sizes:
            t = pass_time(n)
            if t is None:
                return None
            spec += t
        return (self.emitted * t1) / spec if spec > 0 else None

    def __add__(self, other: ReplayCounts) -> ReplayCounts:
        return ReplayCounts(
            self.rounds + other.rounds,
            self.draft_rounds + other.draft_rounds,
            self.proposed + other.proposed,
            self.verified + other.verified,
            self.accepted + other.accepted,
            self.emitted + other.emitted,
            self.pass_sizes + other.pass_sizes,
        )


def replay_reply(drafter: Drafter, prompt: Sequence[int], reply: Sequence[int], k: int) -> ReplayCounts:
    """Replay one reply through ``drafter`` with draft length k (see the module doc).

    Args:
        drafter: a model-free drafter (prompt lookup, suffix); its ``begin`` is called.
        prompt: the tokens the reply was written after.
        reply: the reply's tokens.
        k: most tokens drafted per round (≥ 0), also capped by the tokens left.

    Returns:
        The rounds' counts. ``emitted == len(reply)``.
    """
    context = list(prompt)
    drafter.begin(context)
    rounds = draft_rounds = proposed = verified = accepted = 0
    sizes: list[int] = []
    i = 0
    n = len(reply)
    while i < n:
        n_max = min(k, n - i - 1)
        d = drafter.draft(context, n_max)[:n_max] if n_max > 0 else []
        acc = 0
        while acc < len(d) and d[acc] == reply[i + acc]:
            acc += 1
        step = acc + 1  # the accepted drafts and the target's own token
        context.extend(reply[i : i + step])
        i += step
        rounds += 1
        draft_rounds += 1 if d else 0
        proposed += len(d)
        verified += min(len(d), acc + 1)
        accepted += acc
        sizes.append(1 + len(d))
    return ReplayCounts(rounds, draft_rounds, proposed, verified, accepted, n, tuple(sizes))


#: How a replay sets each round's draft length: the session's rules
#: (:data:`app.engine.session.FreeDraftRule`: ``choose`` before drafting by
#: :meth:`DraftLengthPolicy.choose`, ``trim`` the full draft cut by
#: :meth:`DraftLengthPolicy.trim`, ``both`` chosen then cut), ``full`` (every proposed
#: token verified) or ``oracle`` (the cut that maximises this round's tokens per second
#: knowing which tokens the target accepts: no rule can do better round by round).
ReplayRule = Literal["choose", "trim", "both", "full", "oracle"]


@dataclass(frozen=True, slots=True)
class PolicyReplay:
    """A reply replayed under a draft-length rule: its rounds, the seconds its target
    passes would take at the given pass times (``target_s``) and the seconds its drafter
    and policy took in this process (``draft_s``), against plain decoding's
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
    clock: Callable[[], float] = time.perf_counter,
    on_round: Callable[[int, int, int], None] | None = None,
    emittable: Callable[[int, Sequence[int]], int] | None = None,
) -> PolicyReplay:
    """Replay one greedy reply as the engine's loop would run it under ``rule``.

    Each round: the draft length d ≤ min(k, max_tokens − emitted − 1) is set by the rule, the
    longest prefix of the draft equal to the reply is accepted, the target's own token
    follows, the pass costs ``pass_time(1 + d)`` seconds, and the policy observes what
    was verified (with the drafter's token keys where it has them), as in
    :meth:`app.engine.session.Session.generate`. With ``ends_with_eog`` the position
    after the reply is the end-of-generation token: sampled by a pass like any other,
    never accepted and never counted as verified. The policy's pass times are not
    updated (every rule sees the same ``pass_time``).

    Args:
        drafter: a model-free drafter; ``begin`` is called with ``prompt``.
        policy: the drafter's policy, carried from reply to reply as a session does.
        k: the most draft tokens per round (≥ 0).
        max_tokens: the reply's token limit (drafts may run past an end-of-generation
            token the drafter cannot foresee, as in the engine).
        pass_time: seconds of a target pass over n tokens (sampling included).
        on_round: called each round with (tokens the drafter proposed, how many of them
            the target would accept, how many the rule verified).
        emittable: (reply tokens emitted so far, draft) → how many leading draft tokens
            could be emitted at all; the draft is cut there before the rule applies, as
            the engine does (:func:`app.engine.text.emittable_draft_length`).

    Returns:
        The rounds, and the target, drafting and plain seconds.

    Raises:
        ValueError: k < 0 or an unknown rule.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if rule not in ("choose", "trim", "full", "oracle", "both"):
        raise ValueError(f"unknown rule {rule!r}")
    keyed = getattr(drafter, "token_keys", None)
    context = list(prompt)
    drafter.begin(context)
    n = len(reply)
    end = n + 1 if ends_with_eog else n  # positions the target samples
    rounds = draft_rounds = proposed = verified = accepted = 0
    sizes: list[int] = []
    target_s = draft_s = 0.0
    t1 = pass_time(1)
    i = 0
    while i < end:
        t0 = clock()
        n_max = min(k, max_tokens - i - 1)
        keys: tuple[Any, ...] | None = None
        d: list[int] = []
        if n_max > 0:
            if rule in ("choose", "both"):
                n_max = policy.choose(n_max)
            if n_max > 0:
                d = drafter.draft(context, n_max)[:n_max]
                if emittable is not None and d:
                    del d[emittable(i, d):]
                if keyed is not None:
                    keys = tuple(keyed())[: len(d)]
        acc = 0
        while acc < len(d) and i + acc < n and d[acc] == reply[i + acc]:
            acc += 1
        n_proposed, n_acceptable = len(d), acc
        if d and rule in ("trim", "both") and keys is not None:
            del d[policy.trim(keys):]
        elif d and rule == "oracle":
            best = max(range(min(acc, len(d)) + 1),
                       key=lambda m: ((m + 1) / pass_time(m + 1), m))
            del d[best:]
        if not d:
            policy.observe_no_draft()
        draft_s += clock() - t0
        if on_round is not None:
            on_round(n_proposed, n_acceptable, len(d))
        acc = min(acc, len(d))
        # draft positions compared: through the first mismatch; the EOG one is not counted
        n_verified = min(len(d), acc + 1, n - i)
        if n_verified:
            policy.observe_verification(n_verified, acc, keys)
        step = min(acc + 1, end - i)
        context.extend(reply[i : min(i + step, n)])
        i += step
        target_s += pass_time(1 + len(d))
        rounds += 1
        draft_rounds += 1 if d else 0
        proposed += len(d)
        verified += n_verified
        accepted += acc
        sizes.append(1 + len(d))
    counts = ReplayCounts(rounds, draft_rounds, proposed, verified, accepted, n, tuple(sizes))
    return PolicyReplay(counts, target_s, draft_s, end * t1)
