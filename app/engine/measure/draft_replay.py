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

The same replay under the session's draft-length rules, to compare rules on recorded
replies without timing noise, is in ``tests/policy_replay.py`` (used by the policy's
tests and bench/experiments/policy_replay.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.engine.drafters import Drafter

@dataclass(frozen=True, slots=True)
class ReplayCounts:
    """Rounds of a replay (greedy, as the engine's loop counts them).

    ``rounds``: target passes that emitted a token; ``draft_rounds``: those that
    carried a draft; ``proposed``: draft tokens in the passes; ``verified``: draft tokens
    verified (up to and including the first rejected one, as
    :class:`app.engine.stats.SpecStats` counts); ``accepted``: of those, equal to the
    reply; ``emitted``: reply tokens (= accepted + rounds, less one where the last
    round's own sample was the end-of-generation token); ``pass_sizes``: the size
    (1 + proposed) of every target pass, including one that only sampled the
    end-of-generation token.
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
    """Replay one reply through ``drafter`` with draft length k, every proposed token
    verified (see the module doc).

    Args:
        drafter: a model-free drafter (prompt lookup, suffix); its ``begin`` is called.
        prompt: the tokens the reply was written after.
        reply: the reply's tokens.
        k: most tokens drafted per round (≥ 0), also capped by the tokens left.

    Returns:
        The rounds' counts. ``emitted == len(reply)``.

    Raises:
        ValueError: k < 0.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    context = list(prompt)
    drafter.begin(context)
    n = len(reply)
    rounds = draft_rounds = proposed = verified = accepted = 0
    sizes: list[int] = []
    i = 0
    while i < n:
        n_max = min(k, n - i - 1)  # the round's own token is the last one left
        d = drafter.draft(context, n_max)[:n_max] if n_max > 0 else []
        acc = matching_prefix(d, reply, i)
        step = acc + 1
        context.extend(reply[i : i + step])
        rounds += 1
        draft_rounds += 1 if d else 0
        proposed += len(d)
        verified += min(len(d), acc + 1)  # through the first mismatch
        accepted += acc
        sizes.append(1 + len(d))
        i += step
    return ReplayCounts(rounds, draft_rounds, proposed, verified, accepted, n, tuple(sizes))


def matching_prefix(draft: Sequence[int], reply: Sequence[int], i: int) -> int:
    """How many leading draft tokens equal the reply from position i on (none past its end)."""
    m = 0
    while m < len(draft) and i + m < len(reply) and draft[m] == reply[i + m]:
        m += 1
    return m
