"""Speculative-decoding statistics and the speedup model.

Counters are kept by the decoding loop (:meth:`app.engine.session.Session.generate`) as it runs, so
every figure here is exact by construction; :class:`SpecStats` is an immutable snapshot.

Formulas (Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative
Decoding", ICML 2023, eq. 1 and Theorem 3.8), with α the per-token acceptance rate,
k the draft length and c the draft cost ratio:

* expected tokens per round   E(α, k) = (1 − α^(k+1)) / (1 − α)      (E = k + 1 at α = 1)
* predicted speedup           S(α, k, c) = E(α, k) / (1 + c·k)
"""

from __future__ import annotations

import math
import typing
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from app.options import DrafterNeeds, SpecMode


def expected_tokens_per_round(alpha: float, k: float) -> float:
    """E(α, k) = (1 − α^(k+1)) / (1 − α): expected tokens one round emits.

    Args:
        alpha: per-token acceptance rate in [0, 1].
        k: draft length (tokens proposed per round), k ≥ 0; a mean draft length may be
            fractional.

    Returns:
        Tokens per round, in [1, k + 1]. At α = 1 the limit k + 1 is returned (no 0/0).

    Raises:
        ValueError: α outside [0, 1] or k < 0.

    Source: Leviathan et al. 2023, eq. (1).
    """
    if not 0.0 <= alpha <= 1.0 or math.isnan(alpha):
        raise ValueError(f"acceptance rate must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"draft length must be >= 0, got {k}")
    if alpha >= 1.0 - 1e-12:
        return float(k + 1)
    return (1.0 - float(alpha ** (k + 1))) / (1.0 - alpha)


def round_rate(alpha: float, k: int, pass_time: float, draft_step_time: float) -> float:
    """E(α, k) / (t(k + 1) + k · t_draft): expected tokens per second of rounds that
    draft ``k`` tokens, from measured times (the cost side of
    :func:`predicted_speedup` with the target's real batched pass instead of one step).

    Args:
        alpha: per-token acceptance rate in [0, 1].
        k: draft length, ≥ 0.
        pass_time: seconds of the target's pass over k + 1 tokens (> 0).
        draft_step_time: seconds the drafter takes per draft token (≥ 0).

    Multiplied by a plain step's time t₁ it is the round's speedup over plain decoding.
    Source: Leviathan et al. 2023, eq. (1) over the measured cost of a round.
    """
    return expected_tokens_per_round(alpha, k) / (pass_time + k * draft_step_time)


def predicted_speedup(alpha: float, k: int, c: float) -> float:
    """S = E(α, k) / (1 + c·k): predicted decode speedup over plain decoding.

    Args:
        alpha: per-token acceptance rate in [0, 1].
        k: draft length.
        c: draft cost ratio, time of one draft step / time of one plain target step (≥ 0).

    Assumes the target verifies k + 1 tokens in the time of one plain step, which holds
    on GPUs for small k and less so on CPUs (a CPU batch costs more than one token); the measured speedup is the
    ground truth. Source: Leviathan et al. 2023, Theorem 3.8.
    """
    if c < 0:
        raise ValueError(f"draft cost ratio must be >= 0, got {c}")
    return expected_tokens_per_round(alpha, k) / (1.0 + c * k)


def round_mix_speedup(
    alpha: float, c: float, k_bar: float, draft_rounds: int, plain_rounds: int,
    plain_cost: float = 1.0,
) -> float:
    """Predicted speedup of a run whose rounds drafted k̄ tokens on average, some none.

    S = (n_d·E(α, k̄) + n_p) / (n_d·(1 + c·k̄) + n_p·p), with n_d drafting rounds and n_p
    plain ones (a plain round emits one token in one target step, plus what its drafter
    spent finding nothing: ``plain_cost`` p in target steps,
    :func:`plain_round_cost`). E at a fractional k̄
    approximates the mean of E over the actual draft lengths. With n_p = 0 and k̄ = k
    this is :func:`predicted_speedup`.
    """
    e = expected_tokens_per_round(alpha, k_bar)
    return (draft_rounds * e + plain_rounds) / (
        draft_rounds * (1.0 + c * k_bar) + plain_rounds * plain_cost)


#: Fewer verified draft tokens than this and an acceptance rate is too uncertain to
#: build on: windows show it with its count and its 95 % interval
#: (:func:`acceptance_interval`) and hold the figures derived from it (predicted
#: speedup, "use the measured α"). At 30 drafts all accepted, the interval still
#: reaches down to 0.89; at 1 of 1 it spans 0.21–1.
MIN_VERIFIED_FOR_ESTIMATE = 30

#: A measured speedup needs at least this many drafting rounds and verified draft tokens
#: in the reply (:attr:`SpecStats.measured_speedup`).
MIN_DRAFT_ROUNDS_FOR_SPEEDUP = 3
MIN_VERIFIED_FOR_SPEEDUP = 10


def acceptance_interval(accepted: int, verified: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson score interval of an acceptance rate: (low, high) in [0, 1].

    Args:
        accepted: accepted draft tokens.
        verified: verified draft tokens (0: no interval, None is returned).
        z: the normal quantile (1.96: 95 %).

    Treats the verifications as independent trials, which they are not quite (a round
    stops at its first rejection), so the interval is a guide to how much the figure can
    move, not an exact coverage. Source: E. B. Wilson, "Probable inference, the law of
    succession, and statistical inference", JASA 22 (1927).
    """
    if verified <= 0:
        return None
    if not 0 <= accepted <= verified:
        raise ValueError(f"accepted must be in [0, verified], got {accepted}/{verified}")
    p = accepted / verified
    z2 = z * z
    centre = (p + z2 / (2 * verified)) / (1 + z2 / verified)
    half = (z / (1 + z2 / verified)) * math.sqrt(p * (1 - p) / verified + z2 / (4 * verified * verified))
    return max(0.0, centre - half), min(1.0, centre + half)


def best_draft_length(alpha: float, c: float, k_max: int = 16) -> int:
    """The k in 1..k_max that maximises :func:`predicted_speedup` (ties: the smaller k)."""
    return max(range(1, k_max + 1), key=lambda k: (predicted_speedup(alpha, k, c), -k))


@dataclass(frozen=True, slots=True)
class SpeedupCalculation:
    """What α, k and c predict.

    ``expected_tokens``: E(α, k), tokens per round; ``speedup``: E / (1 + c·k);
    ``best_k``: the k in 1..k_max with the highest predicted speedup (ties: smaller k),
    and ``best_speedup`` its speedup.
    """

    alpha: float
    k: int
    c: float
    expected_tokens: float
    speedup: float
    best_k: int
    best_speedup: float


def calculate_speedup(alpha: float, k: int, c: float, k_max: int = 16) -> SpeedupCalculation:
    """The race view's calculator: E(α, k), predicted speedup, and the best k for α and c.

    Args:
        alpha: acceptance rate in [0, 1] (α = 1 is handled: E = k + 1).
        k: draft length ≥ 0.
        c: draft cost ratio ≥ 0 (draft step time / plain target step time).
        k_max: the largest k considered for ``best_k``.

    Raises:
        ValueError: α outside [0, 1], k < 0, c < 0 or k_max < 1.

    Source: Leviathan, Kalman & Matias 2023, eq. (1) and Theorem 3.8.
    """
    if k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max}")
    e = expected_tokens_per_round(alpha, k)
    s = predicted_speedup(alpha, k, c)
    best = best_draft_length(alpha, c, k_max)
    return SpeedupCalculation(alpha, k, c, e, s, best, predicted_speedup(alpha, best, c))


#: draft rounds a reply needs before the draft-length rule of thumb is given (one or two
#: rounds say nothing persistent)
MIN_DRAFT_ROUNDS_FOR_ADVICE = 8
#: τ at or above this share of its ceiling k + 1 counts as "close to k + 1"
NEAR_CEILING_SHARE = 0.85

DraftLengthAdvice = Literal["larger-k", "other-drafter-or-smaller-k"]
"""``larger-k``: τ is close to k + 1, drafts are nearly always accepted whole, so a longer
draft would pay; ``other-drafter-or-smaller-k``: τ stays below 2, fewer than one draft
token is accepted per round, so the drafter is a poor fit or k is too long."""


def _numbers(value: Any, kind: type) -> tuple[Any, ...]:
    """A stored list of numbers of ``kind`` (int: whole numbers) as a tuple.

    Raises:
        TypeError: not a list, or an item of another kind (a bool, a text, NaN, ∞).
    """
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{value!r} is not a list of numbers")
    ok = (int,) if kind is int else (int, float)
    for v in value:
        if isinstance(v, bool) or not isinstance(v, ok) or not math.isfinite(v):
            raise TypeError(f"{v!r} in a list of numbers ({kind.__name__} expected)")
    return tuple(value)


def draft_length_advice(tau: float | None, k: int | None,
                        draft_rounds: int) -> DraftLengthAdvice | None:
    """The usual rule of thumb for the draft length, for a local or a remote engine.

    Args:
        tau: mean acceptance length τ over drafting rounds (tokens per verification pass
            that carried a draft), None when unknown.
        k: the draft length (the maximum where it adapts), None when unknown.
        draft_rounds: drafting rounds τ rests on.

    Returns:
        ``larger-k`` when τ ≥ :data:`NEAR_CEILING_SHARE` · (k + 1) (k known), else
        ``other-drafter-or-smaller-k`` when τ < 2, else None; None also with fewer than
        :data:`MIN_DRAFT_ROUNDS_FOR_ADVICE` drafting rounds.

    Why: τ ranges over [1, k + 1] (E(α, k) above); τ near 1 means drafts are rarely
    accepted, so each round pays for drafting and gains little; τ at the ceiling means
    every draft is accepted whole and k caps the gain.
    """
    if tau is None or draft_rounds < MIN_DRAFT_ROUNDS_FOR_ADVICE:
        return None
    if k is not None and k > 0 and tau >= NEAR_CEILING_SHARE * (k + 1):
        return "larger-k"
    if tau < 2.0:
        return "other-drafter-or-smaller-k"
    return None


def looks_up(mode: SpecMode) -> bool:
    """Whether the drafter looks its drafts up instead of running a model (it needs
    nothing besides the target): its c is a lookup's time, and every round looks up,
    drafting or not."""
    return mode.needs is DrafterNeeds.NOTHING


def plain_round_cost(mode: SpecMode, c: float, k_bar: float) -> float:
    """What a round that verified no draft costs, in target steps (for
    :func:`round_mix_speedup`): one step, plus a lookup drafter's lookup (c·k̄: its c is
    a lookup's time per token of the mean draft); a draft model that drafts nothing
    was not run."""
    return 1.0 + c * k_bar if looks_up(mode) else 1.0


@dataclass(frozen=True, slots=True)
class SpecStats:
    """A snapshot of one reply's decoding statistics. Times are seconds, rates per second.

    Counting rules (all exact):

    * ``rounds``: target verification passes in the decode phase that emitted at least
      one token, one per round; a round is one draft phase plus one target pass over
      [last token + drafts]. The final pass whose first sample is the end-of-generation
      token emits nothing and is not counted (a drafting round neither), so τ ≥ 1.
    * ``proposed``: draft tokens the drafter proposed and the target evaluated
      (llama-server's ``draft_n``), that final pass's included.
    * ``verified``: proposed tokens that were compared with the target's sample at
      their position. Tokens after the first rejection in a round were computed by the
      target but never compared; they are counted in ``proposed`` only. The position
      where the target samples an end-of-generation token is not counted, whether the
      draft matched it or not: the reply ends there, nothing at or after it is emitted,
      so an accepted end-of-turn token would otherwise show as an accepted draft token
      that added nothing to the reply (α 1/1 next to τ 1.00).
    * ``accepted``: draft tokens equal to the target's sample (so ``accepted <=
      verified``; llama-server's ``draft_n_accepted``), under the same rule.
    * ``emitted``: tokens of the reply (the end-of-generation token is not part of it).
      The prefill evaluates all prompt tokens but the last; every round then evaluates
      [last token + drafts] and emits its accepted drafts plus the target's own sample,
      so ``emitted == accepted + rounds`` unless the last round was cut by an
      end-of-generation token, a stop string or a cancel.
    * ``acceptance_rate`` α = accepted / verified.
    * ``mean_acceptance_length`` τ = emitted / rounds (≥ 1 by the rule for rounds).
    * ``accepted_at[i]`` / ``verified_at[i]``: acceptances / verifications of draft
      position i + 1 (i = 0 … k − 1).
    * ``draft_cost_ratio`` c = (draft time / draft forward steps) / plain target step time
      (prompt lookup and suffix: a lookup's mean time, draft time / rounds, per token of
      the mean draft, k̄ = proposed / drafting rounds, over the target step time). The
      plain step time is this reply's baseline (``plain_step_time``) where one exists,
      else ``target_step_time``: the fastest of a few one-token passes timed when the
      model was loaded, then the median with the one-token rounds of plain decoding.
    * ``predicted_speedup`` = E(α, k) / (1 + c·k) from the measured α and c.
    * ``decode_tps`` = emitted / decode time, where decode time runs from the end of the
      prefill to the end of generation (as llama-speculative-simple reports it);
      ``end_to_end_tps`` = emitted / total time; ``ttft`` = time to the first token.
    """

    mode: SpecMode = SpecMode.OFF
    draft_max: int = 0
    adaptive: bool = False  # k is a maximum, each round verifies what pays (the policy)
    prompt_tokens: int = 0
    prefill_tokens: int = 0  # prompt tokens evaluated in the prefill (the rest were cached)
    emitted: int = 0
    rounds: int = 0
    draft_rounds: int = 0  # rounds whose target pass carried at least one draft token
    proposed: int = 0
    verified: int = 0
    accepted: int = 0
    accepted_at: tuple[int, ...] = ()
    verified_at: tuple[int, ...] = ()
    draft_steps: int = 0
    draft_time: float = 0.0
    #: seconds a draft model or MTP head spent catching up with tokens of rounds that
    #: drafted nothing: part of the decode time, not of the draft steps (nor of c)
    draft_catch_up_time: float = 0.0
    target_time: float = 0.0
    draft_passes: int = 0  # target passes that carried draft tokens (verification passes)
    draft_pass_time: float = 0.0  # their seconds
    #: drafts (one per round) the drafter proposed of which the cost-aware policy verified
    #: no token: a check would have cost more than it was expected to save here
    declined: int = 0
    target_step_time: float | None = None  # a plain one-token target pass, seconds
    ttft: float = 0.0
    prefill_time: float = 0.0
    decode_time: float = 0.0
    total_time: float = 0.0
    fallback_reason: str | None = None
    calibrated: bool = False  # whether target_step_time was measured in this session
    #: the plain decoding baseline under this reply's conditions: the mean (fastest and
    #: slowest tenth left out: :meth:`~app.engine.rounds.PlainSteps.baseline`) of one-token
    #: target passes timed during this reply ("reply"), or recently in this session at
    #: the same thread count and load ("recent"), seconds; None when neither exists
    plain_step_time: float | None = None
    #: the spread of those passes, seconds: their 10th and 90th percentiles (the fastest
    #: and slowest of fewer than 10)
    plain_step_range: tuple[float, float] | None = None
    plain_step_source: str | None = None
    #: CPU threads the target ran with at the end, and other processes' load then (cores)
    n_threads: int = 0
    other_cores: float | None = None
    #: the context window the reply ran in, tokens (0: not known, a remote server's)
    n_ctx: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.mode, SpecMode):  # a mode given by its name
            object.__setattr__(self, "mode", SpecMode(self.mode))

    @property
    def acceptance_rate(self) -> float | None:
        """α = accepted / verified, or None when nothing was verified."""
        return self.accepted / self.verified if self.verified else None

    @property
    def few_drafts(self) -> bool:
        """True when α rests on fewer than :data:`MIN_VERIFIED_FOR_ESTIMATE` verified
        draft tokens (including none)."""
        return self.verified < MIN_VERIFIED_FOR_ESTIMATE

    @property
    def acceptance_interval(self) -> tuple[float, float] | None:
        """The 95 % Wilson interval of α (:func:`acceptance_interval`), None without drafts."""
        return acceptance_interval(self.accepted, self.verified)

    @property
    def mean_acceptance_length(self) -> float | None:
        """τ = emitted / rounds, or None before the first round."""
        return self.emitted / self.rounds if self.rounds else None

    @property
    def draft_step_time(self) -> float | None:
        return self.draft_time / self.draft_steps if self.draft_steps else None

    @property
    def draft_cost_ratio(self) -> float | None:
        """c = draft step time / plain target step time t₁; for a lookup drafter, its
        lookup time per round over its mean draft length, in t₁ (below); None where
        neither was measured.

        t₁ is :attr:`plain_step_time` (the plain baseline under this reply's conditions:
        its depth in the context, its thread count, the load then) where one exists, else
        :attr:`target_step_time`, so that c, the measured speedup and the verification
        cost divide by the same step; a step timed at load on an empty cache is faster
        than one deep in a conversation."""
        t1 = self.plain_step_time or self.target_step_time
        if looks_up(self.mode):
            # No forward passes: every round looks up, drafting or not, so c·k̄ is one
            # lookup's mean time (draft time / rounds) in target steps, as the formula
            # needs: c = draft time / rounds / k̄ / t₁ with k̄ = proposed / drafting rounds.
            # (Per proposed token alone, the lookups of rounds that drafted nothing would
            # count against the few tokens proposed early in a reply.)
            if t1 and self.proposed and self.rounds:
                return self.draft_time * self.draft_rounds / (self.rounds * self.proposed * t1)
            return None
        step = self.draft_step_time
        if step is None or not t1:
            return None
        return step / t1

    @property
    def verification_cost(self) -> tuple[float, float] | None:
        """What a verification pass cost in this reply: (the mean tokens per pass that
        carried draft tokens, 1 + proposed / :attr:`draft_passes`; their mean time in plain
        one-token steps, :attr:`draft_pass_time` / :attr:`draft_passes` / t₁, with t₁ the
        plain step time, :attr:`plain_step_time` or else :attr:`target_step_time`). The
        textbook prediction (:attr:`predicted_speedup`) takes that time as one step.
        None with fewer than :data:`MIN_DRAFT_ROUNDS_FOR_SPEEDUP` such passes, without a
        step time, or when a pass took longer than decoding its tokens one at a time
        (a figure disturbed by other load, not a cost)."""
        t1 = self.plain_step_time or self.target_step_time
        if self.draft_passes < MIN_DRAFT_ROUNDS_FOR_SPEEDUP or not t1:
            return None
        size = 1.0 + self.proposed / self.draft_passes
        steps = self.draft_pass_time / self.draft_passes / t1
        return (size, steps) if 0.0 < steps <= size else None

    @property
    def mean_draft_length(self) -> float | None:
        """Draft tokens proposed per drafting round (≤ k; less with the adaptive policy)."""
        return self.proposed / self.draft_rounds if self.draft_rounds else None

    @property
    def predicted_speedup(self) -> float | None:
        """E(α, k̄) / (1 + c·k̄) from the measured α and c, or None until both exist.

        k̄ is the mean draft length actually used (:attr:`mean_draft_length`), not the
        configured maximum, and E is evaluated at that fractional k̄, an approximation of
        the mean of E over the actual lengths; rounds that drafted nothing count as plain
        steps (speedup 1):
        S = (n_d·E(α, k̄) + n_p) / (n_d·(1 + c·k̄) + n_p) with n_d drafting rounds and n_p
        plain ones. Without any round yet, the configured k is used.
        """
        a, c = self.acceptance_rate, self.draft_cost_ratio
        if a is None or c is None or self.draft_max <= 0:
            return None
        k_bar = self.mean_draft_length
        if k_bar is None or not self.rounds:
            return predicted_speedup(a, self.draft_max, c)
        return round_mix_speedup(a, c, k_bar, self.draft_rounds, self.rounds - self.draft_rounds,
                                 plain_round_cost(self.mode, c, k_bar))

    @property
    def measured_speedup(self) -> float | None:
        """This reply's decode rate over plain decoding's under the same conditions:
        decode tok/s × :attr:`plain_step_time` (a plain reply decodes one token per
        one-token pass; its loop overhead is left out, so this errs low by about 1 %).

        None without a baseline, for speculation off, and for a reply with fewer than
        :data:`MIN_DRAFT_ROUNDS_FOR_SPEEDUP` drafting rounds or
        :data:`MIN_VERIFIED_FOR_SPEEDUP` verified draft tokens: a figure from almost no
        drafts says nothing about speculation.
        """
        tps = self.decode_tps
        if (tps is None or self.plain_step_time is None or self.mode is SpecMode.OFF
                or self.draft_rounds < MIN_DRAFT_ROUNDS_FOR_SPEEDUP
                or self.verified < MIN_VERIFIED_FOR_SPEEDUP):
            return None
        return tps * self.plain_step_time

    @property
    def measured_speedup_range(self) -> tuple[float, float] | None:
        """:attr:`measured_speedup` at the ends of the baseline's spread (low, high), or
        None."""
        tps, r = self.decode_tps, self.plain_step_range
        if self.measured_speedup is None or tps is None or r is None:
            return None
        return tps * r[0], tps * r[1]

    @property
    def decode_tps(self) -> float | None:
        """Decode tokens per second, prefill excluded; None before a token was emitted
        (a reply stopped while it read its prompt has no decode rate)."""
        return self.emitted / self.decode_time if self.decode_time > 0 and self.emitted else None

    @property
    def end_to_end_tps(self) -> float | None:
        """Tokens per second over the whole reply, prefill included; None before a token
        was emitted."""
        return self.emitted / self.total_time if self.total_time > 0 and self.emitted else None

    @property
    def prefill_tps(self) -> float | None:
        return self.prefill_tokens / self.prefill_time if self.prefill_time > 0 else None

    def to_dict(self) -> dict[str, Any]:
        """Every counter and every derived figure, JSON-ready."""
        d = asdict(self)
        d["mode"] = self.mode.value
        d["accepted_at"] = list(self.accepted_at)
        d["verified_at"] = list(self.verified_at)
        for name in (
            "mean_draft_length",
            "acceptance_rate",
            "mean_acceptance_length",
            "draft_step_time",
            "draft_cost_ratio",
            "predicted_speedup",
            "measured_speedup",
            "measured_speedup_range",
            "decode_tps",
            "end_to_end_tps",
            "prefill_tps",
        ):
            d[name] = getattr(self, name)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpecStats:
        """Inverse of :meth:`to_dict` (derived figures are recomputed, not trusted).
        Statistics stored under older names are translated by the history store as it
        reads them (:func:`app.store.history.current_stats`).

        Raises:
            ValueError: an unknown mode. TypeError: a field of the wrong kind.
        """
        names = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in names}
        kw["mode"] = SpecMode(kw.get("mode", SpecMode.OFF.value))
        kw["accepted_at"] = _numbers(kw.get("accepted_at", ()), int)
        kw["verified_at"] = _numbers(kw.get("verified_at", ()), int)
        if kw.get("plain_step_range") is not None:
            kw["plain_step_range"] = _numbers(kw["plain_step_range"], float)
        for name, value in kw.items():
            kind = _FIELD_KINDS.get(name)
            if kind is not None and not (value is None and name in _OPTIONAL) and (
                    isinstance(value, bool) is not (kind is bool)
                    or not isinstance(value, (int, float) if kind is float else kind)):
                raise TypeError(f"statistics field {name}: {value!r} ({kind.__name__} expected)")
        if not isinstance(kw.get("extra", {}), dict):
            raise TypeError("statistics field extra is not an object")
        return cls(**kw)


def _field_kinds() -> tuple[dict[str, type], frozenset[str]]:
    """Each plain field of :class:`SpecStats` (int, float, str, bool, or one of them or
    None) and its kind, for :meth:`SpecStats.from_dict`'s checks; the optional ones."""
    kinds: dict[str, type] = {}
    optional: set[str] = set()
    for name, hint in typing.get_type_hints(SpecStats).items():
        args = typing.get_args(hint)
        if hint in (int, float, str, bool):
            kinds[name] = hint
        elif len(args) == 2 and type(None) in args and args[0] in (int, float, str, bool):
            kinds[name] = args[0]
            optional.add(name)
    return kinds, frozenset(optional)


_FIELD_KINDS, _OPTIONAL = _field_kinds()
