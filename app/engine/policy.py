"""How many draft tokens to verify this round: a cost-aware choice of the draft length.

The textbook speedup E(α, k)/(1 + c·k) assumes the target verifies k + 1 tokens in the
time of one. That holds on GPUs for small k, but on CPUs a pass of k + 1 tokens costs
more (ENV.md: a 5-token pass of Gemma 3 270M ≈ 1.7 one-token passes), so an unlucky
drafter makes decoding *slower*. :class:`DraftLengthPolicy` measures what this machine
actually pays and picks, before each round, the draft length d ≤ k that maximises the
expected token rate

    rate(d) = E(α̂, d) / (t(d + 1) + d · t_draft)        (rate(0) = 1 / t(1))

where t(n) is the measured time of a target pass over n tokens, t_draft the measured
time of one draft step (0 for prompt lookup) and α̂ a running estimate of the drafter's
acceptance rate. While a drafter is not drafting, α̂ drifts back to its prior so it is
tried again. On a GPU, where t(n) is flat, this always picks d = k.

Which tokens are verified never changes which tokens are emitted: the target samples
every position either way, so the policy cannot affect the output, only the speed.
"""

from __future__ import annotations

from app.engine.stats import expected_tokens_per_round


class PassTimes:
    """Measured time of a target pass per batch size: an exponential moving average each.

    Args:
        smoothing: weight of a new observation (0..1).
    """

    def __init__(self, smoothing: float = 0.15) -> None:
        self.smoothing = smoothing
        self._t: dict[int, float] = {}

    def observe(self, n_tokens: int, seconds: float) -> None:
        """A target pass over ``n_tokens`` took ``seconds`` (sampling included)."""
        old = self._t.get(n_tokens)
        self._t[n_tokens] = seconds if old is None else old + self.smoothing * (seconds - old)

    def __call__(self, n_tokens: int) -> float | None:
        """Measured (or interpolated) time of a pass over ``n_tokens``, seconds; None if nothing is known.

        Unmeasured sizes are interpolated linearly between the nearest measured ones;
        beyond the measured range the slope of the two nearest sizes is extended; with a
        single measurement the cost is taken as flat (the optimistic GPU assumption), so
        larger drafts get tried, and thereby measured.
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

    # -- observations ---------------------------------------------------------------
    def observe_draft_steps(self, steps: int, seconds: float) -> None:
        """The drafter ran ``steps`` forward passes in ``seconds`` (none for lookup)."""
        if steps > 0:
            per = seconds / steps
            old = self.draft_step_time
            self.draft_step_time = per if old == 0.0 else old + self.smoothing * (per - old)

    def observe_verification(self, verified: int, accepted: int) -> None:
        """``verified`` draft tokens were compared with the target, ``accepted`` matched."""
        for i in range(verified):
            hit = 1.0 if i < accepted else 0.0
            self.alpha += self.smoothing * (hit - self.alpha)

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

    def choose(self, k: int) -> int:
        """The draft length in 0..k with the highest expected rate (k until t(1) is known)."""
        if k <= 0:
            return 0
        base = self.expected_rate(0)
        if base is None:
            return k
        best_d, best_rate = 0, base
        for d in range(1, k + 1):
            r = self.expected_rate(d)
            if r is not None and r > best_rate * (1.0 + 1e-9):
                best_d, best_rate = d, r
        return best_d
