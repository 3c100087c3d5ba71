"""How many draft tokens to verify this round: a cost-aware choice of the draft length.

The textbook speedup E(α, k)/(1 + c·k) assumes the target verifies k + 1 tokens in the
time of one. That holds on GPUs for small k, but on a CPU a pass over k + 1 tokens costs
more than one over a single token, so verifying drafts the target will reject makes
decoding *slower*. :class:`DraftLengthPolicy` measures what this machine pays per pass
size (:class:`PassTimes`) and verifies a draft only as far as it pays.

Two rules, one per kind of drafter:

* **A drafter without a model** (prompt lookup, suffix lookup) drafts for free, so it
  always drafts, at the length its own rule gives (for the suffix drafter SuffixDecoding's:
  a longer, more frequent match earns a longer draft). :meth:`DraftLengthPolicy.trim`
  then verifies the prefix d of that draft with the highest expected rate

      rate(d) = E(d) / t(d + 1),   E(d) = 1 + Σ_{i=1..d} Π_{j≤i} c_j

  where t(n) is the measured time of a pass over n tokens and c_j the measured rate at
  which the target accepted draft tokens with the same key as token j (the drafter's
  ``token_keys``: for the suffix drafter its source, match length, step probability and
  occurrence count), with a fixed prior. The chain form of
  E(d) is the tree cost of SpecInfer (Miao et al. 2024) and Medusa (Cai et al. 2024)
  for a single branch. A draft is verified only when its rate beats plain decoding's
  1 / t(1) by :attr:`~DraftLengthPolicy.margin`.
* **A draft model** pays a forward pass per draft token, so its length is chosen before
  drafting (:meth:`DraftLengthPolicy.choose`): the d that maximises
  E(α̂, d) / (t(d + 1) + d · t_draft), E(α, d) = (1 − α^(d+1)) / (1 − α) (Leviathan et al.
  2023), with α̂ the draft model's running acceptance rate.

Neither rule can lock itself out of drafting: a trimmed-away draft is still verified one
token deep every :attr:`~DraftLengthPolicy.explore_every` rounds (so estimates keep
meeting the target), α̂ drifts back to its prior while nothing is drafted, and pass
times are the fastest of a short window of recent passes (timing noise on a desktop is
one-sided: other work only ever makes a pass slower), so a burst of load does not keep a
size looking expensive once it is gone.

Which tokens are verified never changes which tokens are emitted: the target samples
every position either way, so the policy affects the speed only, never the output.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence

from app.engine.stats import expected_tokens_per_round


class PassTimes:
    """Measured time of a target pass per batch size: the fastest of the latest
    :attr:`window` passes of that size, seconds.

    The fastest of a window drops at once to a faster observation (the first pass of a
    new batch shape also builds its graph; other work only slows passes down) and rises
    only once a slower time has lasted a whole window, so a burst of load does not make a
    size look expensive, and a lasting change of cost (a longer context) is taken after
    :attr:`window` passes. When the machine gets busy the thread governor changes the
    thread count, and each thread count has a table of its own.
    """

    #: passes per size whose fastest is the estimate
    window = 64

    def __init__(self) -> None:
        self._recent: dict[int, deque[float]] = {}
        self._n: dict[int, int] = {}

    def observe(self, n_tokens: int, seconds: float) -> None:
        """A target pass over ``n_tokens`` took ``seconds`` (sampling included)."""
        recent = self._recent.get(n_tokens)
        if recent is None:
            recent = self._recent[n_tokens] = deque(maxlen=self.window)
        recent.append(seconds)
        self._n[n_tokens] = self._n.get(n_tokens, 0) + 1

    def count(self, n_tokens: int) -> int:
        """How many passes of this size were observed."""
        return self._n.get(n_tokens, 0)

    def __call__(self, n_tokens: int) -> float | None:
        """Measured (or interpolated) time of a pass over ``n_tokens``, seconds; None if
        nothing is known.

        Unmeasured sizes are interpolated linearly between the nearest measured ones;
        beyond the measured range the slope of the two nearest sizes is extended; with a
        single measured size the cost is taken as flat (the optimistic GPU assumption, so
        that a longer draft is tried and then timed). Pass times are not monotonic in the
        batch size on every backend (on AVX2 CPUs llama.cpp's repacked kernels make some
        even sizes cheaper than the odd size below), which is why every size that is
        verified is also timed.
        """
        t = {n: min(v) for n, v in self._recent.items()}
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
    """One drafter's acceptance estimates and the choice of how many draft tokens to verify.

    Args:
        pass_times: the target's measured pass times (shared by all drafters).
        prior_alpha: α̂ before any verification, and what it drifts back to.
        smoothing: weight of a new observation in α̂ and the draft step time.
        revert: fraction of the distance to the prior that α̂ recovers per round in
            which nothing was verified.
    """

    #: a draft is verified only when its expected rate beats plain decoding's by this
    #: fraction: the estimates are noisy, and the best of noisy estimates is biased upward
    margin = 0.10
    #: when :meth:`trim` would verify nothing of a draft, every this many such rounds it
    #: verifies its first token anyway, so that the estimates keep meeting the target:
    #: a rejected one-token verification costs t(2) − t(1), one eighth of the time
    explore_every = 8
    #: weight of α̂ in a key's acceptance estimate, in verified tokens
    prior_weight = 3.0
    #: per verification, the counts of a key are multiplied by this (a window of ~200)
    forget = 0.995

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
        self._declined = 0  # trim decisions that verified nothing, for explore_every
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

        ``keys``: the drafter's key of each verified token (:meth:`trim`); each key's
        counts are updated with them.
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

    # -- estimates ------------------------------------------------------------------
    @property
    def keys_measured(self) -> int:
        """How many distinct draft-token keys have acceptance counts (:meth:`trim`)."""
        return len(self._cells)

    def acceptance(self, key: Hashable | None) -> float:
        """Estimated probability that the target accepts a draft token with this key,
        given that the tokens before it were accepted: (accepted + w·p₀) / (verified + w),
        w = :attr:`prior_weight`, p₀ = ``prior_alpha``; α̂ for a token without a key.

        The prior is fixed, not α̂: a kind of token never seen before (a long verbatim
        match after a stretch of rejected guesses) is tried on its own merits instead of
        inheriting the rate of other kinds.
        """
        if key is None:
            return min(max(self.alpha, 0.0), 1.0)
        h, n = self._cells.get(key, (0.0, 0.0))
        return (h + self.prior_weight * self.prior_alpha) / (n + self.prior_weight)

    def expected_rate(self, d: int) -> float | None:
        """Expected tokens per second of a draft model's round of ``d`` draft tokens
        (E(α̂, d) / (t(d + 1) + d · t_draft)), or None before any pass was timed."""
        t = self.pass_times(d + 1)
        if t is None:
            return None
        return expected_tokens_per_round(min(max(self.alpha, 0.0), 1.0), d) / (
            t + d * self.draft_step_time
        )

    # -- the choices ----------------------------------------------------------------
    def choose(self, k: int, draft_min: int = 0) -> int:
        """A draft model's draft length: the d in {0} ∪ [max(1, draft_min), k] with the
        highest :meth:`expected_rate` (k itself before anything was timed; 0 when no
        length is allowed, k < draft_min).

        Args:
            k: the most draft tokens this round may verify.
            draft_min: drafts shorter than this are discarded (llama.cpp's
                ``--draft-min``), so shorter lengths are never chosen.
        """
        lo = max(1, draft_min)
        if k < lo:
            return 0
        base = self.expected_rate(0)
        if base is None:
            return k
        best_d, best_rate = 0, base
        for d in range(lo, k + 1):
            r = self.expected_rate(d)
            if r is not None and r > best_rate * (1.0 + 1e-9):
                best_d, best_rate = d, r
        return best_d

    def trim(self, keys: Sequence[Hashable | None], draft_min: int = 0) -> int:
        """How many tokens of a free drafter's draft to verify.

        Args:
            keys: one key per draft token (its length is the draft's); a key without
                counts (None, for one) is estimated by α̂ alone (:meth:`acceptance`).
            draft_min: as in :meth:`choose`.

        Returns the d in {0} ∪ [max(1, draft_min), len(keys)] with the highest
        E(d) / t(d + 1) (module doc), provided it beats plain decoding's 1 / t(1) by
        :attr:`margin`; every :attr:`explore_every`-th time that would be 0, the
        shortest allowed length instead. The whole draft before anything was timed.
        """
        k = len(keys)
        lo = max(1, draft_min)
        if k < lo:
            return 0
        t1 = self.pass_times(1)
        if t1 is None:
            return k
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
            self._declined += 1
            if self._declined % self.explore_every == 0:
                return lo
        return best_d
