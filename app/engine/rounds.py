"""One speculative round: draft → verify → accept and roll back, and its counters.

:class:`Round` is what :meth:`app.engine.session.Session.generate` runs per round:

1. :meth:`Round.propose`: the drafter proposes up to k tokens, capped by ``max_tokens``
   and the room left in n_ctx; a free drafter's draft (prompt lookup, suffix lookup) is
   then cut by the draft-length policy, a draft model's length chosen before drafting
   (:mod:`app.engine.policy`);
2. :meth:`Round.verify`: the target evaluates [last token + drafts] in one batch with
   logits at every position; :class:`Verifier` samples each position with the target's
   own sampler chain, accepts a draft token while it equals the sample, and the first
   sample that differs (or the bonus sample after a fully accepted draft) is the round's
   own token;
3. the session (:meth:`app.engine.session.Session._round`) removes the rejected
   positions from the target's KV cache (the return value of ``llama_memory_seq_rm`` is
   checked); the draft model re-syncs its own cache by common prefix on its next call.

Plain decoding is the same round with an empty draft. :class:`ReplyCounters` holds what
the rounds counted; :class:`~app.engine.stats.SpecStats` is a snapshot of it.
:class:`PlainSteps` keeps the one-token passes that give the measured speedup its
baseline under the same conditions.

Tests and the proof benchmarks install a deliberately broken :class:`Verifier`
(``tests/faults.py``) as ``Session.verifier`` to show that the divergence check calls
such an engine suspect.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from app.engine.drafters import Drafter
from app.engine.llama import LlamaContext, LlamaModel
from app.engine.policy import DraftLengthPolicy, UnverifiedTails
from app.engine.text import TextStream, draft_length_before_end
from app.options import SpecMode

Sample = Callable[[LlamaContext, int], int]


@dataclass(slots=True)
class ReplyCounters:
    """What a reply's rounds counted (the rules: :class:`~app.engine.stats.SpecStats`)."""

    k: int
    rounds: int = 0
    draft_rounds: int = 0
    proposed: int = 0
    verified: int = 0
    accepted: int = 0
    accepted_at: list[int] = field(default_factory=list)
    verified_at: list[int] = field(default_factory=list)
    draft_time: float = 0.0
    draft_catch_up_time: float = 0.0  # not in draft_time (Drafter: catch_up_time)
    target_time: float = 0.0
    draft_passes: int = 0  # target passes that carried draft tokens
    draft_pass_time: float = 0.0  # their seconds
    declined: int = 0  # drafts of which the cost-aware policy verified no token

    def __post_init__(self) -> None:
        self.accepted_at = [0] * self.k
        self.verified_at = [0] * self.k


@dataclass(slots=True)
class Verified:
    """What one verification pass decided.

    ``tokens``: the emitted tokens with whether each was an accepted draft token;
    ``n_acc``: draft tokens that matched (their KV entries stay), the end-of-generation
    position included; ``n_verified`` / ``n_counted``: draft tokens compared / accepted
    under the counting rules; ``end``: "stop" when the target sampled an
    end-of-generation token.
    """

    tokens: list[tuple[int, bool]] = field(default_factory=list)
    n_acc: int = 0
    n_verified: int = 0
    n_counted: int = 0
    end: Literal["stop"] | None = None


class Verifier:
    """Samples the verified positions and decides what the KV cache keeps."""

    def verify(self, model: LlamaModel, ctx: LlamaContext, sample: Sample, draw: Sample,
               batch: Sequence[int], drafts: Sequence[int],
               accept: Callable[[int, bool], bool]) -> Verified:
        """Sample each position of an evaluated ``batch`` ([last token, *drafts]).

        ``sample`` is the reply's sampler (traced when a comparison records it),
        ``draw`` the same sampler untraced.

        ``accept(token, from_draft)`` emits a token and returns False when the reply must
        end after it (a stop string, max_tokens). The end-of-generation position is no
        reply token: counted neither as verified nor as accepted, whether the draft
        matched it or not (:class:`~app.engine.stats.SpecStats`: "counting rules").
        """
        out = Verified()
        for i in range(len(batch)):
            tok = sample(ctx, i)
            is_draft = i < len(drafts)
            match = is_draft and tok == drafts[i]
            if match:
                out.n_acc += 1
            if model.is_eog(tok):
                out.end = "stop"
                break
            if is_draft:
                out.n_verified += 1
                out.n_counted += match
            out.tokens.append((tok, match))
            if not accept(tok, match):
                break
            if not match:
                if is_draft:
                    self.after_rejection(ctx, draw, i, len(batch))
                break
        return out

    def after_rejection(self, ctx: LlamaContext, draw: Sample, i: int, n_batch: int) -> None:
        """Called after the sample at batch position ``i`` rejected its draft token."""

    def kept(self, n_acc: int, n_batch: int) -> int:
        """How many batch positions stay in the KV cache: the last token and the
        accepted drafts."""
        return 1 + n_acc


@dataclass(frozen=True, slots=True)
class PlainStep:
    """A one-token target pass: ``seconds``, at ``at`` (monotonic), with ``n_threads``
    threads while other processes kept ``other_cores`` cores busy (None: unknown)."""

    seconds: float
    at: float
    n_threads: int
    other_cores: float | None


#: a one-token pass over this many times the median of its sample is a pause of the
#: process (a garbage collection, a page fault storm), left out of a short sample's mean
STALL = 5.0


class PlainSteps:
    """Recent one-token target passes of a session: the plain-decoding baseline of the
    measured speedup, taken under the same conditions as the reply it is compared with.

    A reply's own one-token passes (rounds that drafted nothing, right after another
    one-token pass) are the baseline when it has :attr:`min_own` of them; else the
    session's passes from the last :attr:`fresh` seconds at the same thread count whose
    load differs from now by at most :attr:`same_load` cores. :meth:`comparable` tells
    the session when to time a few such passes at a reply's end.
    """

    min_own = 3
    fresh = 10.0
    same_load = 0.3

    def __init__(self, keep: int = 64) -> None:
        self._steps: deque[PlainStep] = deque(maxlen=keep)

    def add(self, step: PlainStep) -> None:
        self._steps.append(step)

    def _comparable(self, now: float, n_threads: int, other: float | None) -> list[PlainStep]:
        return [s for s in self._steps
                if now - s.at <= self.fresh and s.n_threads == n_threads
                and (other is None or s.other_cores is None
                     or abs(s.other_cores - other) <= self.same_load)]

    def comparable(self, now: float, n_threads: int, other: float | None) -> int:
        """How many passes are comparable with now (fresh, same threads and load)."""
        return len(self._comparable(now, n_threads, other))

    def baseline(self, own: Sequence[float], now: float, n_threads: int,
                 other: float | None) -> tuple[float, tuple[float, float], str] | None:
        """(seconds, (low, high), "reply" or "recent"), or None.

        seconds: the passes' mean, with the fastest and slowest tenth left out of ten or
        more, and passes over :data:`STALL` times the median left out of fewer (a
        one-off pause of the process, not the machine's load). A plain reply decodes at
        tokens over the sum of its steps, so its step is the mean: on a machine where
        other work preempts every few steps the median is the unhindered step, against
        which a speculative reply that ran under the same preemptions measures slower
        than it was (``bench/gauge_truth.py``: docs/benchmarks.md).
        (low, high): the 10th and 90th percentiles of the passes, the fastest and slowest
        of fewer than 10 (quartiles of a few passes missed the plain reply's own speed in
        5 of 8 ``builtin:code`` replies of SmolLM2 on a Zen 4).

        ``own``: this reply's one-token pass times at the current thread count.
        """
        source = "reply"
        times = list(own)
        if len(times) < self.min_own:
            source = "recent"
            times = [s.seconds for s in self._comparable(now, n_threads, other)]
        if not times:
            return None
        if len(times) == 1:
            return times[0], (times[0], times[0]), source
        times.sort()
        if len(times) >= 10:
            cut = len(times) // 10
            step = statistics.fmean(times[cut:len(times) - cut])
        else:
            usual = STALL * statistics.median(times)
            step = statistics.fmean([t for t in times if t <= usual])
        if len(times) < 10:
            return step, (times[0], times[-1]), source
        deciles = statistics.quantiles(times, n=10, method="inclusive")
        return step, (deciles[0], deciles[-1]), source


#: a plain baseline: (step seconds, (low, high), "reply" or "recent")
Baseline = tuple[float, tuple[float, float], str]


def combined_baseline(segments: Sequence[tuple[float, Baseline | None]]) -> Baseline | None:
    """The plain baseline of a reply whose thread count changed while it ran: one
    ``(decode seconds, baseline)`` per stretch at one count. Plain decoding over the same
    stretches would have made Σ dᵢ / bᵢ tokens, so the reply's plain step is
    Σ dᵢ / Σ (dᵢ / bᵢ) (the low and high ends alike); None when a stretch that took time
    has no baseline (a measured speedup against one count alone would compare another
    moment). "reply" only when every stretch's baseline is."""
    timed = [(d, b) for d, b in segments if d > 0]
    if not timed or any(b is None for _, b in timed):
        return None
    total = sum(d for d, _ in timed)

    def step(pick: Callable[[Baseline], float]) -> float:
        return total / sum(d / pick(b) for d, b in timed if b is not None)

    source = "reply" if all(b is not None and b[2] == "reply" for _, b in timed) else "recent"
    return (step(lambda b: b[0]), (step(lambda b: b[1][0]), step(lambda b: b[1][1])), source)


class Round:
    """Drafting and verification for one reply, one :meth:`run` per round.

    Args:
        model, ctx: the target and its context.
        drafter, policy: the drafter and its draft-length policy (None: plain decoding).
        k, draft_min, adaptive: the reply's :class:`~app.options.SpeculationConfig`.
        sample: the target's sampler for batch position i; draw: the same untraced.
        stream: the reply's text stream (stop strings, UTF-8 hold-back).
        verifier: :class:`Verifier` (a broken one in fault-injection tests).
        clock: seconds (``time.perf_counter`` in the engine).
    """

    def __init__(self, model: LlamaModel, ctx: LlamaContext, drafter: Drafter | None,
                 policy: DraftLengthPolicy | None, k: int, draft_min: int, adaptive: bool,
                 sample: Sample, draw: Sample, stream: TextStream, verifier: Verifier,
                 clock: Callable[[], float]) -> None:
        self.model, self.ctx = model, ctx
        self.drafter, self.policy = drafter, policy
        self.k, self.draft_min, self.adaptive = k, draft_min, adaptive
        self.sample, self.draw, self.stream = sample, draw, stream
        self.verifier, self.clock = verifier, clock
        self.token_keys: Callable[[], tuple[Hashable, ...]] | None = getattr(
            drafter, "token_keys", None)
        self.counters = ReplyCounters(k)
        #: the draft tokens the policy cut away, scored against the reply as it is written
        self.tails = UnverifiedTails(policy) if policy is not None and adaptive else None
        #: the reply's drafter mode, kept when a failed rollback turns drafting off
        self.mode = drafter.kind if drafter is not None else SpecMode.OFF

    def propose(self, history: Sequence[int], n_max: int) -> tuple[list[int], tuple[Hashable, ...] | None]:
        """The draft to verify after ``history`` (at most ``n_max`` tokens) and the
        drafter's key per draft token (None for a drafter without keys)."""
        drafter, policy = self.drafter, self.policy
        if drafter is None or policy is None:
            return [], None
        limit = drafter.draft_limit  # chained MTP heads
        if limit is not None:
            n_max = min(n_max, limit)
        if n_max < self.draft_min:
            n_max = 0  # the draft would be discarded: do not pay for it
        if self.adaptive and n_max > 0 and self.token_keys is None:
            n_max = policy.choose(n_max, self.draft_min)  # a draft model pays per token
            if policy.take_step_timing():
                self._time_draft_step(drafter, policy)
        drafts: list[int] = []
        keys: tuple[Hashable, ...] | None = None
        if n_max > 0:
            steps0, t0 = drafter.forward_passes, self.clock()
            caught_up0 = getattr(drafter, "catch_up_time", 0.0)
            drafts = drafter.draft(history, n_max)[:n_max]
            keys = self.token_keys() if self.token_keys is not None else None
            catch_up = getattr(drafter, "catch_up_time", 0.0) - caught_up0
            # (the drafter times its catch-up with its own clock: never below 0 here)
            dt = max(0.0, self.clock() - t0 - catch_up)
            self.counters.draft_time += dt
            self.counters.draft_catch_up_time += catch_up
            policy.observe_draft_steps(drafter.forward_passes - steps0, dt)
            n_vocab = self.model.n_vocab
            # vocabularies may differ by up to 128 ids (pairing rule)
            n = next((i for i, t in enumerate(drafts) if not 0 <= t < n_vocab), len(drafts))
            # a token that would end the reply is the pass's own last sample anyway
            n = min(n, draft_length_before_end(drafts[:n], self.stream,
                                               self.model.token_to_piece, self.model.is_eog))
            del drafts[n:]
            if keys is not None:
                keys = keys[:n]
                if self.tails is not None and drafts:
                    self.tails.score(history)
                    n = policy.trim(keys, self.draft_min)
                    self.tails.hold(len(history), drafts, keys, n)
                    if n == 0:
                        self.counters.declined += 1
                    del drafts[n:]
            if len(drafts) < self.draft_min:
                drafts = []
        if not drafts:
            policy.observe_no_draft()
        return drafts, keys

    def _time_draft_step(self, drafter: Drafter, policy: DraftLengthPolicy) -> None:
        """Time a step of a draft model that is not drafting (its ``time_step``) for the
        policy. No draft step of the reply (nothing was drafted: c stays unmeasured);
        its time is in the reply's decode time."""
        time_step = getattr(drafter, "time_step", None)
        seconds = time_step() if time_step is not None else None
        if seconds is not None:
            policy.observe_draft_steps(1, seconds)

    def run(self, history: list[int], n_past: int, drafts: list[int],
            keys: tuple[Hashable, ...] | None,
            accept: Callable[[int, bool], bool]) -> tuple[Verified, int, float]:
        """Verify ``drafts`` after ``history`` (whose last token is not yet in the KV
        cache at ``n_past``); the caller removes the rejected positions from the KV cache.

        Returns:
            (the verification, positions kept in the KV cache, seconds of the target pass
            and its sampling).

        Raises:
            TandemError: llama.cpp failed to decode.
        """
        c = self.counters
        batch = [history[-1], *drafts]
        t0 = self.clock()
        self.ctx.decode(batch, n_past, logits="all")
        v = self.verifier.verify(self.model, self.ctx, self.sample, self.draw, batch, drafts,
                                 accept)
        dt = self.clock() - t0
        c.target_time += dt
        if drafts:
            c.draft_passes += 1
            c.draft_pass_time += dt
        c.proposed += len(drafts)
        c.verified += v.n_verified
        c.accepted += v.n_counted
        for i in range(v.n_verified):
            c.verified_at[i] += 1
            if i < v.n_counted:
                c.accepted_at[i] += 1
        if v.tokens:
            # a pass that only sampled the end-of-generation token emitted nothing: it is
            # no round (τ = emitted / rounds stays ≥ 1)
            c.rounds += 1
            c.draft_rounds += 1 if drafts else 0
        if self.policy is not None and v.n_verified:
            self.policy.observe_verification(v.n_verified, v.n_counted, keys)
        return v, self.verifier.kept(v.n_acc, len(batch)), dt
