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
  occurrence count), with the drafter's prior for a key not yet measured. The chain form of
  E(d) is the tree cost of SpecInfer (Miao et al. 2024) and Medusa (Cai et al. 2024)
  for a single branch. A draft is verified only when its rate beats plain decoding's
  1 / t(1) by :attr:`~DraftLengthPolicy.margin`.
* **A draft model** pays a forward pass per draft token, so its length is chosen before
  drafting (:meth:`DraftLengthPolicy.choose`): the d that maximises
  E(α̂, d) / (t(d + 1) + d · t_draft), E(α, d) = (1 − α^(d+1)) / (1 − α) (Leviathan et al.
  2023), with α̂ the draft model's running acceptance rate.

Neither rule can lock itself out of drafting where drafting could pay: a trimmed-away
draft is still verified one token deep every :attr:`~DraftLengthPolicy.explore_every`
rounds (so the estimates keep meeting the target; the interval doubles, up to
:attr:`~DraftLengthPolicy.explore_most`, while the target keeps rejecting those tokens,
as at a high temperature where a rejected one-token verification costs most of a step,
and a draft with a key of a high prior, such as a long verbatim match, is verified on
its own estimate whatever the interval; and the tokens a trim cut away are scored
against the text the target then writes, :class:`UnverifiedTails`, so a distrusted key
learns when its drafts come right again); a draft model for which even a draft accepted
whole would be slower than plain decoding at its measured step time is not tried but has
a step timed alone as often instead (its step time is the median of recent ones); α̂
drifts back to its prior while nothing is drafted, and a pass size's cost is the median
of its recent passes (:class:`PassTimes`), so a size that looked dear under a burst of
load looks cheap again once it is timed in a quiet moment, and one not timed lately keeps
the cost it had.

Which tokens are verified never changes which tokens are emitted: the target samples
every position either way, so the policy affects the speed only, never the output.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Hashable, Sequence

from app.engine.stats import round_rate


class PassTimes:
    """Measured time of a target pass per batch size, seconds: the median of the latest
    :attr:`window` passes of a size that was timed :attr:`trusted_after` times or more;
    for other sizes, a line between the trusted ones.

    A median of recent passes follows what a pass costs now: when other work slows every
    size, the sizes timed recently slow together and their ratios, which are what the
    draft-length choice compares, stay right; a size timed long ago still looks as cheap
    as it was, so it is tried again and timed anew. One slow pass (the first of a new
    batch shape also builds its graph) moves no median; a size timed once or twice
    borrows its cost from the trusted sizes instead, or from the curve timed at load
    (:meth:`calibrate`). When the thread governor changes the thread count, each count
    has a table of its own (with the same calibrated curve).
    """

    #: passes per size whose median is the estimate
    window = 8
    #: passes of a size before its own median is its estimate
    trusted_after = 3

    def __init__(self) -> None:
        self._recent: dict[int, deque[float]] = {}
        self._n: dict[int, int] = {}
        self._trusted: dict[int, float] | None = {}  # the medians; None: to recompute
        self._calibrated: dict[int, float] = {}

    def calibrate(self, n_tokens: int, seconds: float) -> None:
        """A pass over ``n_tokens`` took ``seconds`` when the session timed the sizes at
        load (:meth:`app.engine.session.Session._calibrate_pass_sizes`): the shape of
        the cost curve for a size not yet trusted (see :meth:`__call__`)."""
        self._calibrated[n_tokens] = seconds

    @property
    def calibrated(self) -> dict[int, float]:
        """The calibrated pass times by size, seconds (:meth:`calibrate`)."""
        return dict(self._calibrated)

    def observe(self, n_tokens: int, seconds: float) -> None:
        """A target pass over ``n_tokens`` took ``seconds`` (sampling included)."""
        recent = self._recent.get(n_tokens)
        if recent is None:
            recent = self._recent[n_tokens] = deque(maxlen=self.window)
        recent.append(seconds)
        self._n[n_tokens] = self._n.get(n_tokens, 0) + 1
        self._trusted = None

    def count(self, n_tokens: int) -> int:
        """How many passes of this size were observed."""
        return self._n.get(n_tokens, 0)

    def __call__(self, n_tokens: int) -> float | None:
        """Measured (or interpolated) time of a pass over ``n_tokens``, seconds; None if
        no size is trusted yet.

        An untrusted size timed at load (:meth:`calibrate`) costs its calibrated time
        times the ratio now/then of the nearest trusted size timed at load too, so the
        cheap sizes of a stepped cost curve are known before any reply verified them; an
        untrusted size between two calibrated ones (the load times a few sizes only)
        costs the line between their calibrated times, scaled the same way; a size
        beyond every timed and calibrated one costs the largest calibrated size's.
        Without calibration an untrusted size is interpolated linearly between the nearest
        trusted ones, and beyond the trusted range costs what the nearest trusted size
        costs: optimistic on purpose (on a GPU it is right), so that a longer draft is
        tried, timed and then judged on its own time. Pass times are not monotonic in the
        batch size on every backend (on AVX2 CPUs llama.cpp's repacked kernels make some
        even sizes cheaper than the odd size below), which is why every size that is
        verified is also timed.
        """
        t = self._trusted
        if t is None:  # once per observation, not per call (the policy asks k times a round)
            t = self._trusted = {n: statistics.median(v) for n, v in self._recent.items()
                                 if self._n[n] >= self.trusted_after}
        if not t:
            return None
        if n_tokens in t:
            return t[n_tokens]
        cal = self._calibrated
        then = _calibrated_cost(cal, n_tokens, max(t))
        if then is not None:
            # the calibrated cost, scaled as the nearest trusted calibrated size moved since
            ref = min((s for s in t if s in cal), key=lambda s: (abs(s - n_tokens), s),
                      default=None)
            if ref is not None:
                return then * t[ref] / cal[ref]
        lower = [s for s in t if s < n_tokens]
        upper = [s for s in t if s > n_tokens]
        if lower and upper:
            a, b = max(lower), min(upper)
            return t[a] + (t[b] - t[a]) * (n_tokens - a) / (b - a)
        return t[max(lower)] if lower else t[min(upper)]


def _calibrated_cost(cal: dict[int, float], n: int, largest_trusted: int) -> float | None:
    """What the load's calibration says a pass over ``n`` tokens cost then, seconds: its
    own time, the line between the nearest calibrated sizes around it, or beyond every
    calibrated size (and every trusted one, ``largest_trusted``) the largest's; None
    without calibration or below/beyond it otherwise."""
    if not cal:
        return None
    if n in cal:
        return cal[n]
    top = max(cal)
    if n > top:
        return cal[top] if largest_trusted < n else None
    lower = [s for s in cal if s < n]
    if not lower:
        return None
    a, b = max(lower), min(s for s in cal if s > n)
    return cal[a] + (cal[b] - cal[a]) * (n - a) / (b - a)


class DraftLengthPolicy:
    """One drafter's acceptance estimates and the choice of how many draft tokens to verify.

    Args:
        pass_times: the target's measured pass times (shared by all drafters).
        prior_alpha: α̂ before any verification, and what it drifts back to.
        smoothing: weight of a new observation in α̂.
        revert: fraction of the distance to the prior that α̂ recovers per round in
            which nothing was verified.
        key_prior: a token key's acceptance before any is measured (the drafter's
            ``key_prior``, e.g. :meth:`app.engine.suffix.SuffixDrafter.key_prior`);
            default ``prior_alpha`` for every key.
    """

    #: a free drafter's draft (:meth:`trim`) is verified only when its expected rate
    #: beats plain decoding's by this fraction: the estimates are noisy, and the best of
    #: noisy estimates is biased upward (a draft model's :meth:`choose` applies none)
    margin = 0.05
    #: when :meth:`trim` would verify nothing of a draft, every this many such rounds it
    #: verifies its first token anyway, so that the estimates keep meeting the target;
    #: each such token the target rejects doubles the interval (up to
    #: :attr:`explore_most`), one it accepts resets it
    explore_every = 64
    explore_most = 1024
    # Both replayed on recorded replies with two CPUs' pass costs (tests/engine/
    # test_policy.py) and timed (docs/benchmarks.md): with 5 % and 64, chat at
    # temperature 0.8 stayed near plain decoding's speed where a rejected one-token
    # verification costs 0.78 of a step (16 lost about 1 % more there), and every greedy
    # set reached at least the best fixed k's speed.
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
        key_prior: Callable[[Hashable], float] | None = None,
    ) -> None:
        self.pass_times = pass_times
        self.key_prior = key_prior
        self.prior_alpha = prior_alpha
        self.alpha = prior_alpha
        self.smoothing = smoothing
        self.revert = revert
        self.draft_step_time = 0.0
        self._draft_steps: deque[float] = deque(maxlen=self.draft_step_window)
        #: set every :attr:`explore_every` declined rounds of a draft model that cannot
        #: pay (:meth:`choose`): time one draft step alone (:meth:`take_step_timing`)
        self._time_a_step = False
        self._declined = 0  # trim decisions that verified nothing since the last exploration
        self._explore_interval = self.explore_every
        self._exploring = False  # the last trim verified a declined draft's first token
        #: per token key: (accepted, verified), exponentially forgotten
        self._cells: dict[Hashable, tuple[float, float]] = {}
        self._measured = False  # whether any draft token was verified yet

    # -- observations ---------------------------------------------------------------
    #: the draft step time is the median of this many recent observations (one per
    #: drafting round or timed step), so one slow moment does not set it
    draft_step_window = 9

    def observe_draft_steps(self, steps: int, seconds: float) -> None:
        """The drafter ran ``steps`` forward passes in ``seconds`` (none for lookup)."""
        if steps > 0:
            self._draft_steps.append(seconds / steps)
            self.draft_step_time = statistics.median(self._draft_steps)

    def take_step_timing(self) -> bool:
        """Whether the drafter should time one draft step now (without drafting): set by
        :meth:`choose` now and then while a draft model cannot pay, so that a step
        timed slow once (a busy moment, another thread count) is timed again; cleared
        by asking."""
        wanted, self._time_a_step = self._time_a_step, False
        return wanted

    def observe_verification(
        self, verified: int, accepted: int, keys: Sequence[Hashable] | None = None
    ) -> None:
        """``verified`` draft tokens were compared with the target, ``accepted`` matched.

        ``keys``: the drafter's key of each verified token (:meth:`trim`); each key's
        counts are updated with them.
        """
        if verified:
            self._measured = True
        if self._exploring and verified:
            self._exploring = False
            self._explore_interval = (self.explore_every if accepted else
                                      min(2 * self._explore_interval, self.explore_most))
        for i in range(verified):
            hit = 1.0 if i < accepted else 0.0
            self.alpha += self.smoothing * (hit - self.alpha)
            if keys is not None and i < len(keys):
                h, n = self._cells.get(keys[i], (0.0, 0.0))
                self._cells[keys[i]] = (h * self.forget + hit, n * self.forget + 1.0)

    def observe_followed(self, keys: Sequence[Hashable], accepted: int) -> None:
        """Draft tokens the policy cut away were scored against the text the target then
        wrote (:class:`UnverifiedTails`): the first ``accepted`` matched it, the next one
        (when ``keys`` has it) did not. Updates those keys' counts as a verification
        would (the target samples every position either way, so a cut-away token that
        equals the written one is one verification would have accepted); α̂ and the
        explorations are left alone."""
        for i, key in enumerate(keys[: accepted + 1]):
            hit = 1.0 if i < accepted else 0.0
            h, n = self._cells.get(key, (0.0, 0.0))
            self._cells[key] = (h * self.forget + hit, n * self.forget + 1.0)

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
        w = :attr:`prior_weight`, p₀ the key's prior (``key_prior``, else
        ``prior_alpha``); α̂ for a token without a key.

        The prior belongs to the key, not to α̂: a kind of token never seen before (a
        long verbatim match after a stretch of rejected guesses) is tried on its own
        merits instead of inheriting the rate of other kinds.
        """
        if key is None:
            return min(max(self.alpha, 0.0), 1.0)
        p0 = self.key_prior(key) if self.key_prior is not None else self.prior_alpha
        h, n = self._cells.get(key, (0.0, 0.0))
        return (h + self.prior_weight * p0) / (n + self.prior_weight)

    def expected_rate(self, d: int) -> float | None:
        """Expected tokens per second of a draft model's round of ``d`` draft tokens
        (E(α̂, d) / (t(d + 1) + d · t_draft)), or None before any pass was timed."""
        t = self.pass_times(d + 1)
        if t is None:
            return None
        return round_rate(min(max(self.alpha, 0.0), 1.0), d, t, self.draft_step_time)

    # -- the choices ----------------------------------------------------------------
    def choose(self, k: int, draft_min: int = 0) -> int:
        """A draft model's draft length: the d in {0} ∪ [max(1, draft_min), k] with the
        highest :meth:`expected_rate` (0 when no length is allowed, k < draft_min).

        k itself before any draft token was verified: the pass costs are known from load,
        the draft's acceptance is not, and the prior alone would keep a good draft from
        ever being tried where a pass over several tokens costs much more than one (a
        CPU). When the choice is 0, every :attr:`explore_every`-th time the shortest
        allowed length instead, as :meth:`trim` does; but where even a draft accepted
        whole would be slower than plain decoding at the measured step time, never, and
        then every :attr:`explore_every`-th time :meth:`take_step_timing` asks for one
        draft step to be timed alone.

        Args:
            k: the most draft tokens this round may verify.
            draft_min: drafts shorter than this are discarded (llama.cpp's
                ``--draft-min``), so shorter lengths are never chosen.
        """
        lo = max(1, draft_min)
        if k < lo:
            return 0
        base = self.expected_rate(0)
        if base is None or not self._measured:
            return k
        best_d, best_rate = 0, base
        for d in range(lo, k + 1):
            r = self.expected_rate(d)
            if r is not None and r > best_rate * (1.0 + 1e-9):
                best_d, best_rate = d, r
        if best_d == 0 and not self._could_pay(lo, k, base):
            # a draft step costs so much that even a draft the target accepted whole
            # would be slower than plain decoding: trying one only learns α, and a draft
            # model behind by the rounds it skipped first catches up (a pass over them);
            # its step alone is timed again now and then instead
            self._exploring = False
            self._declined += 1
            if self._declined >= self.explore_every:
                self._declined, self._time_a_step = 0, True
            return 0
        return self._explore_if_declined(best_d, lo)

    def _could_pay(self, lo: int, k: int, base: float) -> bool:
        """Whether some draft length in [lo, k] would beat plain decoding's ``base`` rate
        if the target accepted every draft token (α = 1: E = d + 1)."""
        for d in range(lo, k + 1):
            t = self.pass_times(d + 1)
            if t is not None and (d + 1) / (t + d * self.draft_step_time) > base:
                return True
        return False

    def trim(self, keys: Sequence[Hashable | None], draft_min: int = 0) -> int:
        """How many tokens of a free drafter's draft to verify.

        Args:
            keys: one key per draft token (its length is the draft's); a key without
                counts (None, for one) is estimated by α̂ alone (:meth:`acceptance`).
            draft_min: as in :meth:`choose`.

        Returns the d in {0} ∪ [max(1, draft_min), len(keys)] with the highest
        E(d) / t(d + 1) (module doc), provided it beats plain decoding's 1 / t(1) by
        :attr:`margin`; every :attr:`explore_every`-th time that would be 0, the
        shortest allowed length instead (an interval that doubles while the target rejects
        those tokens). The whole draft before anything was timed.
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
        return self._explore_if_declined(best_d, lo)

    def _explore_if_declined(self, best_d: int, lo: int) -> int:
        """``best_d``, or ``lo`` when it is 0 for the :attr:`explore_every`-th time (an
        interval that doubles while the target rejects those tokens)."""
        self._exploring = False
        if best_d == 0:
            self._declined += 1
            if self._declined >= self._explore_interval:
                self._declined = 0
                self._exploring = True
                return lo
        return best_d


class UnverifiedTails:
    """The draft tokens :meth:`DraftLengthPolicy.trim` cut away, scored once the reply's
    text shows whether the target would have accepted them.

    A key whose counts say "rejected" keeps its drafts cut, so a verification alone
    would never learn that the same kind of draft is now right (a reply that copies its
    prompt, after turns in which such matches failed): without this, a whole turn whose
    drafts the target would all have accepted can go undrafted. The text the target
    writes anyway answers for every cut-away token: it equals what the target samples at
    that position, so :meth:`score` updates the keys' counts
    (:meth:`DraftLengthPolicy.observe_followed`) with the tokens up to the first one the
    text does not follow. One per reply; at most :attr:`most` drafts wait for their text.
    """

    most = 32

    def __init__(self, policy: DraftLengthPolicy) -> None:
        self.policy = policy
        self._held: deque[tuple[int, tuple[int, ...], tuple[Hashable, ...], int]] = deque(
            maxlen=self.most)

    def hold(self, start: int, tokens: Sequence[int], keys: Sequence[Hashable],
             verified: int) -> None:
        """A draft for the positions from ``start`` on (its tokens and keys, as long as
        each other) of which the first ``verified`` are verified now."""
        if verified < len(tokens):
            self._held.append((start, tuple(tokens), tuple(keys), verified))

    def score(self, text: Sequence[int]) -> None:
        """Score the held drafts that ``text`` (the prompt and reply so far) decides."""
        waiting = []
        for start, tokens, keys, verified in self._held:
            written = len(text) - start
            m = 0
            while m < len(tokens) and m < written and text[start + m] == tokens[m]:
                m += 1
            if m >= written and m < len(tokens):  # the text has not got that far yet
                waiting.append((start, tokens, keys, verified))
            elif m >= verified:  # the verified part was accepted: the tail was reached
                self.policy.observe_followed(keys[verified:], m - verified)
        self._held = deque(waiting, maxlen=self.most)
