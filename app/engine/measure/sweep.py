"""The k sweep: one prompt at several draft lengths k, measured against the prediction.

The race window's "k sweep" tab runs :func:`run_k_sweep`: the prompt with speculation
off and at k = 1, 2, 3, 4, 5, 6, 8 (each drafting up to exactly k), measured tok/s per k
next to the predicted curve E(α, k) / (1 + c·k) from the sweep's own α and c, and a
recommended k: the fastest one, when it beat speculation off (Leviathan et al. 2023;
formulas in :mod:`app.engine.stats`). No Qt.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.context_fit import ContextFit
from app.engine.measure.bench import (
    ConfigSummary,
    ProgressFn,
    RunRecord,
    median,
    run_bench,
    summarize,
)
from app.engine.measure.prompts import PreparedPrompt
from app.engine.session import Session
from app.engine.stats import best_draft_length, predicted_speedup
from app.options import SamplingParams, SpeculationConfig

#: Draft lengths of the race view's k sweep.
DEFAULT_SWEEP_KS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8)


@dataclass(frozen=True, slots=True)
class KSweepPoint:
    """Measured figures at one draft length k (medians over repeats; α pooled).
    ``disturbed``: runs during which other work used more than
    :data:`~app.engine.measure.bench.DISTURBED_CORES`: left out of the rates when the k
    has undisturbed runs; a k whose every run was disturbed keeps their rate and is not
    recommended while another k has a clean one; ``undisturbed``: the other runs."""

    k: int
    decode_tps: float | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    draft_cost_ratio: float | None
    predicted_speedup: float | None
    measured_speedup: float | None
    identical: bool
    disturbed: int = 0
    undisturbed: int = 0

    @property
    def all_disturbed(self) -> bool:
        """Other work disturbed every run of this k."""
        return self.disturbed > 0 and self.undisturbed == 0


@dataclass(frozen=True, slots=True)
class KSweepResult:
    """A k sweep: plain decode speed, one point per k, and the predicted curve.

    ``acceptance_rate`` α is pooled over every k (Σ accepted / Σ verified) and
    ``draft_cost_ratio`` c is the median over every k; ``predicted_curve`` holds
    (k, E(α, k) / (1 + c·k)) for k = 1 … max k, and ``predicted_tps`` the same times the
    plain decode speed, for drawing on the measured tok/s axis. ``fastest_k`` is the
    fastest measured k (ties: the smaller; a k whose every run other work disturbed only
    when no k has a clean run); :attr:`recommended_k` is that k only when it decoded
    faster than speculation off; ``predicted_best_k`` the model's choice.
    ``context``: what was dropped from a conversation longer than the context window
    before it was swept, as a chat reply would drop it (None: nothing).
    """

    plain_decode_tps: float | None
    points: tuple[KSweepPoint, ...]
    acceptance_rate: float | None
    draft_cost_ratio: float | None
    predicted_curve: tuple[tuple[int, float], ...]
    fastest_k: int | None
    predicted_best_k: int | None
    cancelled: bool = False
    context: ContextFit | None = None

    def point(self, k: int | None) -> KSweepPoint | None:
        """The point measured at draft length ``k`` (None: no such point)."""
        return next((p for p in self.points if p.k == k), None)

    @property
    def recommended_k(self) -> int | None:
        """The draft length to use: :attr:`fastest_k` when its decode speed beat
        speculation off's in this sweep (measured speedup > 1×), or when off was not
        measured (nothing to compare with); None when no k beat off (:attr:`no_k_beat_off`),
        when other work disturbed every run of every k (:attr:`all_busy`), or no k
        finished."""
        if self.no_k_beat_off or self.all_busy:
            return None
        return self.fastest_k

    @property
    def all_busy(self) -> bool:
        """Other work disturbed every run of the fastest k (and so of every k: a k with a
        clean run would have been preferred): its figures are not a recommendation."""
        best = self.point(self.fastest_k)
        return best is not None and best.all_disturbed

    @property
    def no_k_beat_off(self) -> bool:
        """Speculation off was measured and even the fastest k decoded no faster than it
        (measured speedup ≤ 1×): there is no k to recommend over turning speculation off."""
        best = self.point(self.fastest_k)
        return (best is not None and best.measured_speedup is not None
                and best.measured_speedup <= 1.0)

    @property
    def predicted_tps(self) -> tuple[tuple[int, float], ...]:
        if self.plain_decode_tps is None:
            return ()
        return tuple((k, s * self.plain_decode_tps) for k, s in self.predicted_curve)

    def to_dict(self) -> dict[str, Any]:
        return {
            "plain_decode_tps": self.plain_decode_tps,
            "points": [
                {
                    "k": p.k,
                    "decode_tps": p.decode_tps,
                    "acceptance_rate": p.acceptance_rate,
                    "mean_acceptance_length": p.mean_acceptance_length,
                    "draft_cost_ratio": p.draft_cost_ratio,
                    "predicted_speedup": p.predicted_speedup,
                    "measured_speedup": p.measured_speedup,
                    "identical": p.identical,
                }
                for p in self.points
            ],
            "acceptance_rate": self.acceptance_rate,
            "draft_cost_ratio": self.draft_cost_ratio,
            "predicted_curve": [list(x) for x in self.predicted_curve],
            "predicted_tps": [list(x) for x in self.predicted_tps],
            "fastest_k": self.fastest_k,
            "recommended_k": self.recommended_k,
            "predicted_best_k": self.predicted_best_k,
            "cancelled": self.cancelled,
            "context": self.context.to_dict() if self.context is not None else None,
        }


def k_sweep_from_records(records: Sequence[RunRecord], cancelled: bool = False) -> KSweepResult:
    """Build a :class:`KSweepResult` from the runs of a sweep (exact pooled α)."""
    summaries = summarize(records, drop_disturbed=True)
    off = next((s for s in summaries if s.label == "off"), None)
    on = sorted((s for s in summaries if s.label != "off"), key=lambda s: s.draft_max)
    verified = sum(r.stats.verified for r in records if r.label != "off")
    accepted = sum(r.stats.accepted for r in records if r.label != "off")
    alpha = accepted / verified if verified else None
    return _sweep_result(off, on, alpha, cancelled)


def _sweep_result(
    off: ConfigSummary | None,
    on: Sequence[ConfigSummary],
    alpha: float | None,
    cancelled: bool,
) -> KSweepResult:
    c = median(s.draft_cost_ratio for s in on if s.draft_cost_ratio is not None)
    points = tuple(
        KSweepPoint(
            k=s.draft_max,
            decode_tps=s.decode_tps_median,
            acceptance_rate=s.acceptance_rate,
            mean_acceptance_length=s.mean_acceptance_length,
            draft_cost_ratio=s.draft_cost_ratio,
            predicted_speedup=s.predicted_speedup,
            measured_speedup=s.measured_speedup,
            identical=s.compared > 0 and s.identical == s.compared,
            disturbed=s.disturbed,
            undisturbed=s.undisturbed,
        )
        for s in on
    )
    k_max = max((p.k for p in points), default=0)
    curve: tuple[tuple[int, float], ...] = ()
    best_pred: int | None = None
    if alpha is not None and c is not None and k_max > 0:
        curve = tuple((k, predicted_speedup(alpha, k, c)) for k in range(1, k_max + 1))
        best_pred = best_draft_length(alpha, c, k_max)
    measured = [p for p in points if p.decode_tps is not None and not p.all_disturbed] or [
        p for p in points if p.decode_tps is not None]
    fastest = max(measured, key=lambda p: (p.decode_tps or 0.0, -p.k)).k if measured else None
    return KSweepResult(
        plain_decode_tps=off.decode_tps_median if off is not None else None,
        points=points,
        acceptance_rate=alpha,
        draft_cost_ratio=c,
        predicted_curve=curve,
        fastest_k=fastest,
        predicted_best_k=best_pred,
        cancelled=cancelled,
    )


def run_k_sweep(
    session: Session,
    prompt: PreparedPrompt,
    sampling: SamplingParams,
    speculation: SpeculationConfig,
    ks: Sequence[int] = DEFAULT_SWEEP_KS,
    *,
    repeat: int = 1,
    warmup: bool = True,
    cancel: threading.Event | None = None,
    progress: ProgressFn | None = None,
) -> KSweepResult:
    """Run one prompt with speculation off and at every k in ``ks`` (the race view's sweep).

    Args:
        speculation: the drafter settings (mode draft-model or prompt-lookup, draft_min,
            draft_p_min, n-gram sizes); its ``draft_max`` is replaced by each k and the
            cost-aware policy is switched off, so every point drafts up to exactly k.
        ks: distinct draft lengths ≥ 1 (default 1, 2, 3, 4, 5, 6, 8).
        repeat: runs per k (medians are taken).

    Returns:
        One :class:`KSweepPoint` per k, the predicted curve from the measured α and c,
        and the recommended k.

    Raises:
        ValueError: speculation mode "off", or an empty or invalid ``ks``.
        TandemError: the engine failed.
    """
    if not speculation.speculating:
        raise ValueError("a k sweep needs a drafter (draft-model or prompt-lookup)")
    ks = sorted(set(ks))
    if not ks or ks[0] < 1:
        raise ValueError(f"draft lengths must be >= 1, got {ks}")
    # Each point must measure exactly k: the cost-aware policy would shorten drafts.
    specs = [speculation.model_copy(update={"draft_max": k, "adaptive": False}) for k in ks]
    # The sweep compares speeds and only says whether each output is identical; it does
    # not measure differences, so its runs are not recorded (recording costs time per
    # token, bench/proof_cost.py).
    report = run_bench(
        session, [prompt], specs, sampling,
        repeat=repeat, warmup=warmup, cancel=cancel, progress=progress, record=False,
    )
    return k_sweep_from_records(report.records, cancelled=report.cancelled)
