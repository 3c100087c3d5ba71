"""Where two runs that should agree part, and whether floating-point noise explains it.

Speculation must not change the output, but on a CPU a verification batch is computed
with another order of floating-point operations than a one-token pass, so at a near-tie
the target may pick the other token (docs/proof.md). This module tells such a near-tie
from a bug using numbers recorded *during* the two runs (nothing is re-run):

* :class:`SamplingTrace` is handed to :meth:`~app.engine.session.Session.generate`; the
  target's sampler appends one :class:`TokenRecord` per sampled position (every emitted
  token, then the end-of-generation token if one was sampled): the chosen token's raw
  logit and its probability in the distribution the sampler actually drew from (after
  penalties, top-k/top-p/min-p and temperature; for greedy decoding the softmax of the
  logits), the best :data:`TOP_N` tokens by raw logit with their raw logits and final
  probabilities, bounds for every other token, and for sampled runs the interval of the
  dist sampler's cumulative distribution that the random draw fell in;
* :func:`compare_traces` finds the first differing token of a plain (speculation off)
  and a speculative run and returns a :class:`Divergence` with both runs' probabilities
  of both tokens and a verdict by the rule below.

The rule (justified by measurements in docs/proof.md): a difference is a ``near-tie``
when (1) both tokens are among the recorded best of both runs, (2) the change between
the runs of the two tokens' raw logit difference,
``|(ℓ_off(a) − ℓ_off(b)) − (ℓ_on(a) − ℓ_on(b))|``, is at most
:data:`NEAR_TIE_LOGIT_SHIFT`, and (3) for seeded sampled runs, both runs' choices are
consistent with the one uniform number that both drew at that position (replayed from
the seed, :func:`dist_uniforms`), and every earlier choice of the speculative run is too.
Anything else is ``suspect``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

#: Tokens recorded per position, the best by raw logit (enough that a token the other
#: run chose is listed whenever the two runs are close; see docs/proof.md).
TOP_N = 32

#: The largest change between the runs of the two parting tokens' raw logit difference
#: (logit units, before temperature) that still counts as floating-point noise between
#: batch sizes. docs/proof.md gives the measurements behind it.
NEAR_TIE_LOGIT_SHIFT = 1.5

#: Slack for comparing a replayed uniform with a recorded cumulative probability: the
#: recorded probabilities are float32 and re-summed here in another order (≈ 1e-7).
DRAW_TOLERANCE = 1e-5

Verdict = Literal["identical", "near-tie", "suspect"]

#: Why a verdict was given, for the wording layer (ui, cli) to put in words.
Reason = Literal[
    "identical",  # the token ids are the same
    "within-threshold",  # near-tie: the logit shift is within NEAR_TIE_LOGIT_SHIFT
    "logit-shift",  # suspect: the two tokens' logit difference moved more than that
    "unlisted-token",  # suspect: a token is outside a run's recorded best TOP_N
    "draw-out-of-step",  # suspect: a choice does not match the shared random draw
]


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """What the target's sampler saw and chose at one position.

    Attributes:
        token: the chosen token id.
        logit: its raw logit (the model's output, before penalties and temperature).
        prob: its probability in the final distribution the sampler drew from.
        top_ids: the :data:`TOP_N` tokens with the highest raw logits, best first.
        top_logits: their raw logits.
        top_probs: their final probabilities (0.0 where top-k/top-p/min-p cut them).
        logit_rest: the highest raw logit of any token not in ``top_ids`` (−inf if none):
            an upper bound for every unlisted token.
        prob_rest: the highest final probability of any token not in ``top_ids``.
        n_candidates: tokens left with a probability > 0 in the final distribution
            (the whole vocabulary for greedy decoding).
        draw_low, draw_high: sampled runs only: the chosen token's interval
            (draw_low, draw_high] of the cumulative distribution, in the order llama.cpp's
            dist sampler walks the candidates; the uniform draw fell inside it
            (llama-sampler.cpp, ``llama_sampler_dist_apply``). None for greedy decoding.
    """

    token: int
    logit: float
    prob: float
    top_ids: tuple[int, ...]
    top_logits: tuple[float, ...]
    top_probs: tuple[float, ...]
    logit_rest: float
    prob_rest: float
    n_candidates: int
    draw_low: float | None = None
    draw_high: float | None = None

    def logit_of(self, token: int) -> tuple[float, bool]:
        """(raw logit, exact): exact for the chosen and listed tokens, else an upper bound."""
        if token == self.token:
            return self.logit, True
        try:
            return self.top_logits[self.top_ids.index(token)], True
        except ValueError:
            return self.logit_rest, False

    def prob_of(self, token: int) -> tuple[float, bool]:
        """(final probability, exact): exact for the chosen and listed tokens, else an
        upper bound (0.0 exactly when every candidate with p > 0 is listed)."""
        if token == self.token:
            return self.prob, True
        try:
            return self.top_probs[self.top_ids.index(token)], True
        except ValueError:
            return self.prob_rest, self.prob_rest == 0.0

    def draw_selects(self, u: float, tol: float = DRAW_TOLERANCE) -> bool:
        """Whether a uniform draw ``u`` in [0, 1) picks this record's token."""
        if self.draw_low is None or self.draw_high is None:
            return False
        return self.draw_low - tol < u <= self.draw_high + tol


@dataclass(slots=True)
class SamplingTrace:
    """Collects one run's :class:`TokenRecord`; pass it as ``trace=`` to
    :meth:`~app.engine.session.Session.generate` (recording costs time, so the chat
    path never does).

    ``records[j]`` belongs to reply token j; one more record at the end is the
    end-of-generation token when the run stopped on one. ``seed`` is the dist sampler's
    seed (None for greedy decoding); ``temperature`` the sampling temperature.
    """

    records: list[TokenRecord] = field(default_factory=list)
    seed: int | None = None
    temperature: float = 0.0

    def begin(self, seed: int | None, temperature: float) -> None:
        """Start a new run (called by the session)."""
        self.records.clear()
        self.seed = seed
        self.temperature = temperature

    @property
    def sampled(self) -> bool:
        return self.seed is not None

    @property
    def tokens(self) -> list[int]:
        return [r.token for r in self.records]


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first token where a speculative run parts from plain decoding, measured.

    ``index``: reply token index; ``off_token``/``on_token``: the two runs' tokens there,
    ``off_text``/``on_text`` their text; ``off_probs`` = (p_off(off_token),
    p_off(on_token)) and ``on_probs`` = (p_on(off_token), p_on(on_token)), each run's
    final sampling distribution; ``verdict`` and ``reason`` by the module's rule. All of
    these are None for ``identical`` runs.

    Evidence: ``logit_shift``: |Δ(ℓ(off_token) − ℓ(on_token))| between the runs, logit
    units (a lower bound where ``probs_exact`` is False); ``off_margin``/``on_margin``:
    ℓ(own token) − ℓ(other token) in each run; ``probs_exact``: False when a probability
    is only an upper bound (the token was outside a run's recorded best); ``draw``: the
    uniform number both runs drew at ``index`` (seeded sampled runs); ``draw_consistent``:
    whether each run's choices match the draws (None when the draws could not be
    replayed on this platform); ``draw_boundary``: the distance from the draw to the
    nearest edge of the off token's interval in the plain run.
    """

    verdict: Verdict
    reason: Reason
    index: int | None = None
    off_token: int | None = None
    on_token: int | None = None
    off_text: str | None = None
    on_text: str | None = None
    off_probs: tuple[float, float] | None = None
    on_probs: tuple[float, float] | None = None
    sampled: bool = False
    logit_shift: float | None = None
    off_margin: float | None = None
    on_margin: float | None = None
    probs_exact: bool = True
    draw: float | None = None
    draw_consistent: bool | None = None
    draw_boundary: float | None = None
    threshold: float = NEAR_TIE_LOGIT_SHIFT

    def to_dict(self) -> dict[str, Any]:
        """The keys of ``bench --json``'s ``"divergence"`` object, exactly."""
        return {
            "index": self.index,
            "off_token": self.off_token,
            "on_token": self.on_token,
            "off_text": self.off_text,
            "on_text": self.on_text,
            "off_probs": list(self.off_probs) if self.off_probs is not None else None,
            "on_probs": list(self.on_probs) if self.on_probs is not None else None,
            "verdict": self.verdict,
        }

    def evidence(self) -> dict[str, Any]:
        """The measurements behind the verdict, JSON-ready."""
        return {
            "reason": self.reason,
            "sampled": self.sampled,
            "logit_shift": self.logit_shift,
            "off_margin": self.off_margin,
            "on_margin": self.on_margin,
            "probs_exact": self.probs_exact,
            "draw": self.draw,
            "draw_consistent": self.draw_consistent,
            "draw_boundary": self.draw_boundary,
            "threshold": self.threshold,
        }


# -- the random draws ------------------------------------------------------------------


def dist_uniforms(seed: int, n: int) -> list[float]:
    """The first ``n`` uniform numbers llama.cpp's dist sampler draws with ``seed``.

    ``llama_sampler_dist_apply`` draws one ``std::uniform_real_distribution<double>(0, 1)``
    from a ``std::mt19937(seed)`` per sampled token (also when one candidate is left), so
    both runs of a seeded comparison draw the same number at the same reply position.
    ``generate_canonical<double, 53>`` takes two 32-bit outputs x₁, x₂ and returns
    (x₁ + x₂·2³²) / 2⁶⁴ (libstdc++ and libc++ alike; results ≥ 1 become the largest
    double below 1). NumPy's legacy ``RandomState(seed)`` is the same MT19937 seeded the
    same way (``init_genrand``), so it replays the stream.
    """
    if n <= 0:
        return []
    raw = np.random.RandomState(seed).randint(0, 2**32, size=2 * n, dtype=np.uint64)
    out = []
    below_one = math.nextafter(1.0, 0.0)
    for i in range(n):
        s = float(raw[2 * i]) + float(raw[2 * i + 1]) * 4294967296.0
        out.append(min(s / 18446744073709551616.0, below_one))
    return out


# -- the comparison --------------------------------------------------------------------


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing element; None when equal; the shorter length when
    one is a strict prefix of the other."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else n


def _draws_match(trace: SamplingTrace, upto: int, uniforms: Sequence[float]) -> bool:
    return all(trace.records[j].draw_selects(uniforms[j]) for j in range(upto + 1))


def compare_traces(
    off: SamplingTrace,
    on: SamplingTrace,
    token_text: Callable[[int], str] = str,
    *,
    threshold: float = NEAR_TIE_LOGIT_SHIFT,
) -> Divergence:
    """Locate and measure the first difference between a plain and a speculative run.

    Args:
        off: the trace of the run with speculation off (the reference).
        on: the trace of the run with speculation on, same prompt and sampling settings.
        token_text: a token's text for people (e.g. its piece decoded with
            ``backslashreplace``).
        threshold: :data:`NEAR_TIE_LOGIT_SHIFT` unless measuring.

    Returns:
        ``identical`` when the token sequences are equal, else the measured divergence.

    Raises:
        ValueError: the traces were recorded with different sampling (greedy vs sampled,
            another seed or temperature), or one ends before they differ (a cancelled run,
            another ``max_tokens``): there is nothing at that position to measure.
    """
    if off.seed != on.seed or off.temperature != on.temperature:
        raise ValueError("the two runs were sampled differently (seed or temperature)")
    i = first_difference(off.tokens, on.tokens)
    if i is None:
        return Divergence(verdict="identical", reason="identical", sampled=off.sampled)
    if i >= len(off.records) or i >= len(on.records):
        raise ValueError(f"a trace ends at token {i}, before the runs differ")
    ro, rn = off.records[i], on.records[i]
    a, b = ro.token, rn.token
    p_off_b, ex1 = ro.prob_of(b)
    p_on_a, ex2 = rn.prob_of(a)
    l_off_b, ex3 = ro.logit_of(b)
    l_on_a, ex4 = rn.logit_of(a)
    listed = ex3 and ex4
    probs_exact = ex1 and ex2 and listed
    off_margin = ro.logit - l_off_b  # a lower bound when b is unlisted in the off run
    on_margin = rn.logit - l_on_a
    shift = abs(off_margin + on_margin)
    if not listed:
        # An unlisted token's logit is only bounded from above, so each margin is a lower
        # bound; a shift below the threshold would not be a measurement.
        shift = max(0.0, off_margin) + max(0.0, on_margin)

    draw: float | None = None
    consistent: bool | None = None
    boundary: float | None = None
    if off.sampled:
        assert off.seed is not None
        uniforms = dist_uniforms(off.seed, i + 1)
        draw = uniforms[i]
        if ro.draw_low is not None and ro.draw_high is not None:
            boundary = min(draw - ro.draw_low, ro.draw_high - draw)
        if _draws_match(off, i, uniforms):
            consistent = _draws_match(on, i, uniforms)
        else:
            # Plain decoding itself does not match the replayed draws: this platform's
            # standard library draws differently. Both runs still drew one shared number,
            # so their intervals must overlap.
            consistent = None
            lo = max(ro.draw_low or 0.0, rn.draw_low or 0.0)
            hi = min(ro.draw_high or 0.0, rn.draw_high or 0.0)
            if hi + DRAW_TOLERANCE <= lo:
                consistent = False

    if consistent is False:
        verdict: Verdict = "suspect"
        reason: Reason = "draw-out-of-step"
    elif not listed:
        verdict, reason = "suspect", "unlisted-token"
    elif shift > threshold:
        verdict, reason = "suspect", "logit-shift"
    else:
        verdict, reason = "near-tie", "within-threshold"
    return Divergence(
        verdict=verdict,
        reason=reason,
        index=i,
        off_token=a,
        on_token=b,
        off_text=token_text(a),
        on_text=token_text(b),
        off_probs=(ro.prob, p_off_b),
        on_probs=(p_on_a, rn.prob),
        sampled=off.sampled,
        logit_shift=shift,
        off_margin=off_margin,
        on_margin=on_margin,
        probs_exact=probs_exact,
        draw=draw,
        draw_consistent=consistent,
        draw_boundary=boundary,
        threshold=threshold,
    )
