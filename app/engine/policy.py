"""How many draft tokens to verify this round: a cost-aware choice of the draft length.

The textbook speedup E(α, k)/(1 + c·k) assumes the target verifies k + 1 tokens in the
time of one. That holds on GPUs for small k, but on CPUs a pass of k + 1 tokens costs
more (measured on a 2-core x86 CPU: a 5-token pass of Gemma 3 270M ≈ 1.7 one-token passes), so an unlucky
drafter makes decoding *slower*. :class:`DraftLengthPolicy` measures what this machine
actually pays and picks, before each round, the draft length d ≤ k that maximises the
expected token rate

    rate(d) = E(α̂, d) / (t(d + 1) + d · t_draft)        (rate(0) = 1 / t(1))

where t(n) is the measured time of a target pass over n tokens, t_draft the measured
time of one draft step (0 for prompt lookup) and α̂ a running estimate of the drafter's
acceptance rate. While a drafter is not drafting, α̂ drifts back to its prior so it is
tried again. On a GPU, where t(n) is flat, this always picks d = k.

For a drafter without a model (prompt lookup, suffix lookup) drafting costs nothing, so
the draft is proposed at the longest allowed length (when greedy, the length
:meth:`DraftLengthPolicy.choose` allows: :func:`app.engine.session.free_draft_rule`) and
:meth:`DraftLengthPolicy.trim` then cuts it where the expected rate peaks, using what is
known about *this* draft: each
token carries a key from its drafter (for the suffix drafter: its estimated probability,
match length, source and how often the matched stretch occurred,
:meth:`app.engine.suffix.SuffixDrafter.token_keys`), and the
policy keeps, per key, the measured rate at which the target accepted such tokens
(exponentially forgotten counts, with α̂ as the prior). With c_i the acceptance estimate
of draft token i, the expected tokens of a round that verifies d of them are

    E(d) = 1 + Σ_{i=1..d} Π_{j≤i} c_j          (SpecInfer / Medusa-style tree cost, for a chain)

and rate(d) = E(d) / t(d + 1). A draft model's tokens cost a forward pass each, so its
length is still chosen before drafting (:meth:`DraftLengthPolicy.choose`).

Which tokens are verified never changes which tokens are emitted: the target samples
every position either way, so the policy cannot affect the output, only the speed.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from app.engine.stats import expected_tokens_per_round


class PassTimes:
    """Measured time of a target pass per batch size.

    Timing noise on a desktop is one-sided (other work only ever makes a pass slower, and
    the first pass of a new batch shape also builds its graph), so an estimate drops fast
    toward a faster observation and rises slowly toward a slower one.

    Args:
        down: weight of an observation faster than the estimate.
        up: weight of an observation slower than the estimate.
    """

    def __init__(self, down: float = 0.5, up: float = 0.1) -> None:
        self.down = down
        self.up = up
        self._t: dict[int, float] = {}
        self._best: dict[int, float] = {}
        self._restart: set[int] = set()
        self._n: dict[int, int] = {}
        self._seen: dict[int, int] = {}
        self._tick = 0

    #: the first observations of a size keep their minimum (the first pass of a new
    #: batch shape also builds its graph); after that the asymmetric average applies
    warmup = 3

    def observe(self, n_tokens: int, seconds: float) -> None:
        """A target pass over ``n_tokens`` took ``seconds`` (sampling included)."""
        old = self._t.get(n_tokens)
        count = self._n.get(n_tokens, 0)
        if old is None:
            self._t[n_tokens] = seconds
        elif count < self.warmup:
            self._t[n_tokens] = min(old, seconds)
        else:
            w = self.down if seconds < old else self.up
            self._t[n_tokens] = old + w * (seconds - old)
        if n_tokens in self._restart:
            self._restart.discard(n_tokens)
            self._t[n_tokens] = self._best[n_tokens] = seconds
        self._best[n_tokens] = min(seconds, self._best.get(n_tokens, seconds))
        self._n[n_tokens] = count + 1
        self._tick += 1
        self._seen[n_tokens] = self._tick

    def last_seen(self, n_tokens: int) -> int:
        """When this size was last observed (observation counter; 0: never)."""
        return self._seen.get(n_tokens, 0)

    @property
    def ticks(self) -> int:
        """Passes observed so far, of any size (the clock of :meth:`last_seen`)."""
        return self._tick

    def restart(self, n_tokens: int) -> None:
        """The next observation of this size replaces its estimate and its fastest pass
        (a re-timing: what was timed before no longer counts)."""
        self._restart.add(n_tokens)

    def slowdown(self, n_tokens: int) -> float:
        """This size's estimate ÷ its fastest observation since it was first timed or
        last :meth:`restart`-ed (1.0 when never observed)."""
        best = self._best.get(n_tokens)
        return self._t[n_tokens] / best if best else 1.0

    def count(self, n_tokens: int) -> int:
        """How many passes of this size were observed."""
        return self._n.get(n_tokens, 0)

    def __call__(self, n_tokens: int) -> float | None:
        """Measured (or interpolated) time of a pass over ``n_tokens``, seconds; None if nothing is known.

        Unmeasured sizes are interpolated linearly between the nearest measured ones;
        beyond the measured range the slope of the two nearest sizes is extended; with a
        single measured size the cost is taken as flat (the optimistic GPU assumption).
        Pass times are not monotonic in the batch size on every backend (on AVX2 CPUs
        llama.cpp's repacked kernels make 4 and 8 tokens cheaper than 3 and 7), which is
        why :class:`DraftLengthPolicy` measures every size it may choose.
        """
        t = self._t
        if not t:
            return None
        if n_tokens in t:
            return t[n_tokens]
        sizes = sorted(t)
        lower = [s for s in sizes if s < n_tokens]
        upper = [s for s in sizes if s > n_tokens]
        if lower and upper:
            a, b = lower[-1], upper[0]
            return t[a] + (t[b] - t[a]) * (n_tokens - a) / (b - a)
        if len(sizes) == 1:
            return t[sizes[0]]
        a, b = (sizes[-2], sizes[-1]) if lower else (sizes[0], sizes[1])
        slope = max(0.0, (t[b] - t[a]) / (b - a))
        edge = b if lower else a
        return max(1e-9, t[edge] + slope * (n_tokens - edge))


class DraftLengthPolicy:
    """A drafter's running acceptance estimate and the choice of d.

    Args:
        pass_times: the target's measured pass times (shared by all drafters).
        prior_alpha: α̂ before any verification, and what it drifts back to.
        smoothing: weight of a new observation in the moving averages.
        revert: fraction of the distance to the prior that α̂ recovers per round in
            which nothing was drafted.
    """

    def __init__(
        self,
        pass_times: PassTimes,
        prior_alpha: float = 0.6,
        smoothing: float = 0.15,
        revert: float = 0.05,
    ) -> None:
        self.pass_times = pass_times
        self.prior_alpha = prior_alpha
        self.alpha = prior_alpha
        self.smoothing = smoothing
        self.revert = revert
        self.draft_step_time = 0.0
        self._decisions = 0
        #: the length the latest choose() returned to time a batch size (None: it chose)
        self._timing: int | None = None
        #: per batch size, when (PassTimes.ticks) it was last asked for to be re-timed
        self._retimed: dict[int, int] = {}
        #: per token key: (accepted, verified), exponentially forgotten
        self._cells: dict[Hashable, tuple[float, float]] = {}

    # -- observations ---------------------------------------------------------------
    def observe_draft_steps(self, steps: int, seconds: float) -> None:
        """The drafter ran ``steps`` forward passes in ``seconds`` (none for lookup)."""
        if steps > 0:
            per = seconds / steps
            old = self.draft_step_time
            self.draft_step_time = per if old == 0.0 else old + self.smoothing * (per - old)

    def observe_verification(
        self, verified: int, accepted: int, keys: Sequence[Hashable] | None = None
    ) -> None:
        """``verified`` draft tokens were compared with the target, ``accepted`` matched.

        ``keys``: the drafter's key of each verified token (:meth:`trim`); the counts of
        each key's acceptance are updated with them.
        """
        for i in range(verified):
            hit = 1.0 if i < accepted else 0.0
            self.alpha += self.smoothing * (hit - self.alpha)
            if keys is not None and i < len(keys):
                h, n = self._cells.get(keys[i], (0.0, 0.0))
                self._cells[keys[i]] = (h * self.forget + hit, n * self.forget + 1.0)

    def observe_no_draft(self) -> None:
        """A round verified nothing: let α̂ recover toward the prior (so we retry)."""
        self.alpha += self.revert * (self.prior_alpha - self.alpha)

    # -- the choice -----------------------------------------------------------------
    def expected_rate(self, d: int) -> float | None:
        """Expected tokens per second when verifying ``d`` draft tokens, or None if unknown."""
        t = self.pass_times(d + 1)
        if t is None:
            return None
        return expected_tokens_per_round(min(max(self.alpha, 0.0), 1.0), d) / (
            t + d * self.draft_step_time
        )

    #: :meth:`trim` verifies a draft only when its expected rate beats plain decoding's
    #: by this fraction: the estimates are noisy, and the best of noisy estimates is
    #: biased upward (measured: bench/trim_ab.py, see docs/closing-note-round4.md)
    margin = 0.10

    #: fraction of the distance to the prior that a key's measured rate recovers per
    #: round in which :meth:`trim` verified nothing after it (the first key of the
    #: draft). 0.01 against α̂'s 0.05, replayed on recorded replies at temperature 0.8
    #: (bench/policy_replay.py --temp 0.8 --key-revert 0.05,0.01 --repeat 5): on
    #: builtin:chat 1.031× against 1.027× plain over all tokens with seed 11 (replies
    #: below 0.97×: 0 against 14 of 40) and 1.100× against 1.080× with seed 3 (9 against
    #: 18); builtin:code 1.472× against 1.465×, builtin:agent 1.629× against 1.623×.
    #: Timed: bench/trim_ab.py --prompts builtin:chat --temp 0.8 --rules trim
    #: --key-revert 0.05,0.01 --repeat 5 (docs/closing-note-round6.md)
    key_revert = 0.01

    #: weight of α̂ in a key's acceptance estimate, in verified tokens
    prior_weight = 3.0
    #: per verification, the counts of a key are multiplied by this (a window of ~200)
    forget = 0.995

    @property
    def keys_measured(self) -> int:
        """How many distinct draft-token keys have acceptance counts (:meth:`trim`)."""
        return len(self._cells)

    def acceptance(self, key: Hashable) -> float:
        """Estimated probability that the target accepts a draft token with this key,
        given that the tokens before it were accepted: (accepted + w·α̂) / (verified + w)."""
        a = min(max(self.alpha, 0.0), 1.0)
        h, n = self._cells.get(key, (0.0, 0.0))
        return (h + self.prior_weight * a) / (n + self.prior_weight)

    #: passes of a batch size observed before its time is trusted (the first one of a
    #: new shape includes building its graph)
    min_observations = 2
    #: every this many decisions, re-time the size observed longest ago (costs drift
    #: with the machine's load and the context length). A re-timing verifies a draft the
    #: policy would not have verified, so it costs (t(n) − t(1)) less what is accepted.
    #: Against every 50 decisions, 400 gave 0.7–2.7 % more set throughput on chat at
    #: temperature 0.8 (three runs), +2.5 % on code and −1.1 % on agent (greedy), each
    #: one run and within this CPU's noise (docs/closing-note-round5.md; reproduce with
    #: bench/trim_ab.py --refresh 50,400)
    refresh_every = 400
    #: a size whose estimate, relative to its fastest pass, has risen this much more than
    #: the one-token pass's has is timed again (:meth:`_exploration`): passes timed while
    #: other work ran stay slow in the estimate while the policy, believing them slow,
    #: stops verifying drafts, so nothing would bring them down again. Seen in a timed
    #: run (docs/closing-note-round7.md): after a minute of other work, suffix lookup
    #: verified no draft for 15 replies in a row, on a prompt set it runs 1.7× on.
    #: A load that slows every size alike (t(1) included) changes no ratio and triggers
    #: nothing.
    retime_above = 1.25
    #: ... at most once per this many passes per size (counted from its last pass, or
    #: from when it was last asked for: a drafter may propose less than was asked)
    retime_after = 32

    def choose(self, k: int, draft_min: int = 0) -> int:
        """The draft length in {0} ∪ [max(1, draft_min), k] with the highest expected rate.

        Args:
            k: the most draft tokens this round may verify.
            draft_min: drafts shorter than this are discarded (llama.cpp's
                ``--draft-min``), so lengths below it are never explored nor chosen:
                their passes would never be timed.

        Until every batch size d + 1 for the allowed d has been timed
        :attr:`min_observations` times, the smallest untimed one is chosen instead
        (exploration; the times are shared by all replies of a session). A drafter that
        proposes less than asked (a free drafter) times a size only when a draft reaches
        it, so until then this returns that length as a ceiling, and :meth:`trim` cuts
        the shorter drafts as usual. Before the one-token pass is timed, k is returned;
        0 when no allowed length exists (k < draft_min).
        """
        lo = max(1, draft_min)
        forced = self._exploration(k, lo)
        self._timing = forced
        if forced is not None:
            return forced
        base = self.expected_rate(0)
        assert base is not None  # _exploration returns k while nothing is timed
        best_d, best_rate = 0, base
        for d in range(lo, k + 1):
            r = self.expected_rate(d)
            if r is not None and r > best_rate * (1.0 + 1e-9):
                best_d, best_rate = d, r
        return best_d

    def trim(self, keys: Sequence[Hashable | None], draft_min: int = 0, *,
             after_choose: bool = False) -> int:
        """How many tokens of an already proposed draft to verify.

        Args:
            keys: one key per draft token (its length is the draft's); a key without
                counts (None, for one) is estimated by α̂ alone (:meth:`acceptance`).
            draft_min: as in :meth:`choose`.
            after_choose: :meth:`choose` already set this round's length: its decision
                is the round's one (:attr:`refresh_every` counts rounds), and a draft as
                long as the length it chose to time a batch size is kept whole (a
                shorter one cannot time that size and is cut as any other).

        Returns the d in {0} ∪ [max(1, draft_min), len(keys)] with the highest
        E(d) / t(d + 1) (module doc), provided it beats plain decoding's 1 / t(1) by
        :attr:`margin`; or, while pass sizes up to the draft's length + 1 are not timed
        yet, the length to time (the exploration of :meth:`choose`, over the draft's
        length instead of k). When 0 is chosen, the first token's measured rate, if below
        the prior, moves toward it by :attr:`key_revert`, so that keys which were unlucky
        are tried again; a well-measured key is not dragged down.
        """
        k = len(keys)
        lo = max(1, draft_min)
        if after_choose and self._timing is not None and k == self._timing and k >= lo:
            return k
        forced = self._exploration(k, lo, count=not after_choose)
        if forced is not None:
            return forced
        t1 = self.pass_times(1)
        assert t1 is not None
        best_d, best_rate = 0, 1.0 / t1
        expected, reach = 1.0, 1.0
        for d in range(1, k + 1):
            reach *= self.acceptance(keys[d - 1])
            expected += reach
            if d < lo:
                continue
            t = self.pass_times(d + 1)
            if (t is not None and expected / t > best_rate * (1.0 + 1e-9)
                    and expected / t * t1 > 1.0 + self.margin):
                best_d, best_rate = d, expected / t
        if best_d == 0:
            h, n = self._cells.get(keys[0], (0.0, 0.0))
            if n > 0 and h < self.prior_alpha * n:
                # the measured rate moves toward the prior, its weight stays
                self._cells[keys[0]] = (h + self.key_revert * (self.prior_alpha * n - h), n)
        return best_d

    def _exploration(self, k: int, lo: int, count: bool = True) -> int | None:
        """The draft length to return now instead of choosing one, or None: 0 when no
        length is allowed (k < lo), else the length to time (see :meth:`choose`; also
        every :attr:`refresh_every` decisions the size seen longest ago, and a size that
        :attr:`retime_above` calls slowed down).
        ``count``: this is the round's decision (the refresh counts decisions)."""
        if k < lo:
            return 0
        if self.pass_times(1) is None:
            return k
        for n in range(lo + 1, k + 2):
            if self.pass_times.count(n) < self.min_observations:
                return n - 1
        if not count:
            return None
        self._decisions += 1
        pt = self.pass_times
        sizes = range(lo + 1, k + 2)
        if self._decisions % self.refresh_every == 0:
            return min(sizes, key=pt.last_seen) - 1
        limit = self.retime_above * pt.slowdown(1)
        slow = [n for n in sizes
                if pt.ticks - max(pt.last_seen(n), self._retimed.get(n, 0)) >= self.retime_after
                and pt.slowdown(n) > limit]
        if slow:
            n = min(slow, key=pt.last_seen)
            self._retimed[n] = pt.ticks
            pt.restart(n)  # a lasting change of this size's cost is then taken as it is
            return n - 1
        return None
