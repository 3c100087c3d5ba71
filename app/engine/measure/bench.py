"""Speculation off vs on, measured: the benchmark runner and its summaries (no Qt).

:func:`run_bench` runs prepared prompts (:mod:`app.engine.measure.prompts`) with
speculation off and at one or more configurations, *interleaved in one process*, and
:func:`summarize` reduces the runs per configuration: median decode tok/s, per-token
latency p50/p95, median TTFT, α, τ, c, predicted speedup, measured speedup against
"off" from the same run (ratio of medians, median of per-turn ratios, and the set's
throughput per repeat), and how many outputs were identical to "off"
and, of those that differ, how many were measured as a near-tie or are suspect (each
run's sampler is recorded, :mod:`app.engine.divergence`, and the first difference from
its off run measured).
The k sweep (:mod:`app.engine.measure.sweep`) and the race
(:mod:`app.engine.measure.race`) are built on :func:`generate_once`; ``python -m app
bench`` (:mod:`app.cli.bench`) and the ``bench/`` scripts print what this returns.

Results are numbers, never display strings: :mod:`app.cli.report` words them. Timings
come from the engine's events (``time.perf_counter``); nothing here asserts on speed.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.engine.cpu import cpu_sample, other_cores
from app.engine.divergence import Divergence, SamplingTrace, compare_traces, first_difference
from app.engine.events import Event
from app.engine.measure.prompts import PreparedPrompt
from app.engine.reply import ReplyFields, ReplyRecord
from app.engine.session import Session
from app.engine.stats import plain_round_cost, predicted_speedup, round_mix_speedup
from app.errors import TandemError
from app.options import SamplingParams, SpecMode, SpeculationConfig

#: other processes' load during a run, in cores, above which the run is disturbed
DISTURBED_CORES = 0.3

# -- statistics ----------------------------------------------------------------------


def median(values: Iterable[float]) -> float | None:
    """The median, or None for no values."""
    v = list(values)
    return statistics.median(v) if v else None


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0 ≤ q ≤ 100) by linear interpolation between closest ranks.

    The same definition as NumPy's default (``method="linear"``) and Excel's
    PERCENTILE.INC: position (n − 1)·q/100 in the sorted values. None for no values.

    Raises:
        ValueError: q outside [0, 100].
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    v = sorted(values)
    if not v:
        return None
    pos = (len(v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    frac = pos - lo
    return v[lo] + (v[hi] - v[lo]) * frac


def token_latencies(token_times: Sequence[float]) -> list[float]:
    """Seconds between consecutive tokens (the first token's wait is TTFT, not a gap).

    Tokens accepted from one draft are sampled in one pass, so speculation gives many
    near-zero gaps and one longer gap per round: p50 falls, p95 shows the round time.
    """
    return [b - a for a, b in zip(token_times, token_times[1:])]


# -- runs and their summary ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunRecord(ReplyFields):
    """One timed generation of a benchmark: the reply's record with the run's context.

    ``label``: the configuration (``off``, ``k=4``…). ``reply``: the generation's
    :class:`~app.engine.reply.ReplyRecord` (its token times are seconds since the
    request started, one per reply token). ``identical_to_off``: the token ids equal
    those of the ``off`` run of the same prompt and repeat (None for ``off`` itself or
    when no such run exists); ``first_difference``: the first differing token index;
    ``divergence``: that difference measured from both runs' recorded samplers
    (:func:`app.engine.divergence.compare_traces`), None when identical or not recorded.
    """

    label: str
    prompt_name: str
    prompt_index: int
    repeat: int
    reply: ReplyRecord
    identical_to_off: bool | None = None
    first_difference: int | None = None
    divergence: Divergence | None = None
    #: other processes' load during the run, cores (None: not measured or unknown)
    other_cores: float | None = None

    @property
    def disturbed(self) -> bool:
        """Whether other work used more than :data:`DISTURBED_CORES` during the run."""
        return self.other_cores is not None and self.other_cores > DISTURBED_CORES

    @property
    def decode_tps(self) -> float | None:
        return self.stats.decode_tps

    def to_dict(self, include_tokens: bool = False) -> dict[str, Any]:
        """JSON-ready; token ids and times only with ``include_tokens``."""
        d: dict[str, Any] = {
            "label": self.label,
            "prompt": self.prompt_name,
            "prompt_index": self.prompt_index,
            "repeat": self.repeat,
            "mode": self.mode,
            "draft_max": self.draft_max,
            "finish_reason": self.finish_reason,
            "emitted": len(self.token_ids),
            "decode_tps": self.stats.decode_tps,
            "ttft_s": self.stats.ttft,
            "identical_to_off": self.identical_to_off,
            "first_difference": self.first_difference,
            "other_cores": self.other_cores,
            "disturbed": self.disturbed,
            "stats": self.stats.to_dict(),
        }
        if self.divergence is not None:
            d["divergence"] = self.divergence.to_dict()
            d["divergence_evidence"] = self.divergence.evidence()
        if include_tokens:
            d["token_ids"] = list(self.token_ids)
            d["token_times"] = list(self.token_times)
        return d


@dataclass(frozen=True, slots=True)
class ConfigSummary:
    """Aggregates of every run of one configuration.

    Definitions (times in seconds, rates per second):

    * ``decode_tps_median``: median over runs of emitted / decode time (prefill excluded);
    * ``token_latency_p50``/``p95``: percentiles of the gaps between consecutive tokens,
      pooled over all runs (:func:`token_latencies`, :func:`percentile`);
    * ``ttft_median``: median time to first token;
    * ``acceptance_rate`` α and ``mean_acceptance_length`` τ: pooled over runs
      (Σ accepted / Σ verified, Σ emitted / Σ rounds), so long runs weigh more, exactly as
      if all runs were one;
    * ``draft_cost_ratio`` c: median of the runs' c;
    * ``predicted_speedup``: from the pooled α, the median c and the pooled mean draft
      length and share of plain rounds (:func:`app.engine.stats.round_mix_speedup`);
    * ``measured_speedup``: ``decode_tps_median`` / that of ``off`` from the same
      benchmark (ratio of medians);
    * ``paired_speedup``: the median over (prompt, repeat) of this run's decode tok/s over
      the ``off`` run's of the same prompt and repeat (pairs cancel slow and fast prompts);
    * ``set_speedup``: per repeat, the decode throughput (Σ emitted / Σ decode time) of
      the runs that have an ``off`` run of their turn, over that of those ``off`` runs;
      the median over repeats. The same prompts, every token weighted alike, so short
      replies (a few noisy passes) cannot outvote long ones; when sampling, a prompt's on
      and off replies soon differ in length. None where no turn has an ``off`` run;
    * ``identical``/``compared``: runs whose token ids equal the ``off`` run of the same
      prompt and repeat / runs that had one to compare with;
    * ``near_tie``/``suspect``: runs that differ, by the verdict on their first
      difference (:mod:`app.engine.divergence`); ``unmeasured``: runs that differ but
      were not recorded (``record=False``).
    """

    label: str
    mode: str
    draft_max: int
    runs: int
    emitted: int
    decode_tps_median: float | None
    end_to_end_tps_median: float | None
    token_latency_p50: float | None
    token_latency_p95: float | None
    ttft_median: float | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    draft_cost_ratio: float | None
    predicted_speedup: float | None
    measured_speedup: float | None
    identical: int
    compared: int
    acceptance_at: tuple[float | None, ...] = ()
    near_tie: int = 0
    suspect: int = 0
    unmeasured: int = 0
    paired_speedup: float | None = None
    set_speedup: float | None = None
    #: runs during which other work used more than DISTURBED_CORES (left out of the
    #: rates when the summary was asked to drop them and others were not), and runs not
    disturbed: int = 0
    undisturbed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "mode": self.mode,
            "draft_max": self.draft_max,
            "runs": self.runs,
            "emitted": self.emitted,
            "decode_tps_median": self.decode_tps_median,
            "end_to_end_tps_median": self.end_to_end_tps_median,
            "token_latency_p50_s": self.token_latency_p50,
            "token_latency_p95_s": self.token_latency_p95,
            "ttft_median_s": self.ttft_median,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "draft_cost_ratio": self.draft_cost_ratio,
            "predicted_speedup": self.predicted_speedup,
            "measured_speedup": self.measured_speedup,
            "paired_speedup": self.paired_speedup,
            "set_speedup": self.set_speedup,
            "identical_to_off": self.identical,
            "compared_to_off": self.compared,
            "near_tie": self.near_tie,
            "suspect": self.suspect,
            "unmeasured": self.unmeasured,
            "acceptance_at": list(self.acceptance_at),
            "disturbed_runs": self.disturbed,
        }


#: (a run, the off run of its turn, the ratio of their decode rates)
_TurnPair = tuple[RunRecord, RunRecord, float]


def _median_decode_tps(rs: Sequence[RunRecord], drop_disturbed: bool) -> float | None:
    """Median decode tok/s of the runs; with ``drop_disturbed``, of the undisturbed ones
    when there are any (a configuration whose every run was disturbed keeps its rate)."""
    quiet = [r for r in rs if not r.disturbed]
    use = quiet if drop_disturbed and quiet else rs
    return median(t for r in use if (t := r.stats.decode_tps) is not None)


def _by_label(records: Sequence[RunRecord],
              labels: Sequence[str] | None) -> dict[str, list[RunRecord]]:
    """The runs of each label, in ``labels`` order, then other labels by first appearance."""
    order: list[str] = list(labels) if labels is not None else []
    for r in records:
        if r.label not in order:
            order.append(r.label)
    by_label: dict[str, list[RunRecord]] = {lab: [] for lab in order}
    for r in records:
        by_label[r.label].append(r)
    return by_label


def _turn_pairs(rs: Sequence[RunRecord],
                off_by_turn: dict[tuple[int, int], RunRecord]) -> list[_TurnPair]:
    """Each run that has an off run of its (prompt, repeat) with both decode rates known."""
    return [(r, off, t / o) for r in rs if (t := r.stats.decode_tps) is not None
            and (off := off_by_turn.get((r.prompt_index, r.repeat))) is not None
            and (o := off.stats.decode_tps)]


def _set_ratios(pairs: Sequence[_TurnPair]) -> list[float]:
    """Per repeat: Σ emitted / Σ decode time of the runs over that of their off runs."""
    sums: dict[int, list[float]] = {}
    for r, off, _ in pairs:
        acc = sums.setdefault(r.repeat, [0.0, 0.0, 0.0, 0.0])
        acc[0] += r.stats.emitted
        acc[1] += r.stats.decode_time
        acc[2] += off.stats.emitted
        acc[3] += off.stats.decode_time
    return [(on_n / on_t) / (off_n / off_t) for on_n, on_t, off_n, off_t in sums.values()]


def _acceptance_at(rs: Sequence[RunRecord]) -> tuple[float | None, ...]:
    """Pooled acceptance rate at each draft position (None where nothing was verified)."""
    width = max((len(r.stats.verified_at) for r in rs), default=0)
    at: list[float | None] = []
    for i in range(width):
        d_i = sum(r.stats.verified_at[i] for r in rs if i < len(r.stats.verified_at))
        a_i = sum(r.stats.accepted_at[i] for r in rs if i < len(r.stats.accepted_at))
        at.append(a_i / d_i if d_i else None)
    return tuple(at)


def _pooled_predicted_speedup(rs: Sequence[RunRecord], alpha: float | None, c: float | None,
                              k: int) -> float | None:
    """The predicted speedup from the pooled α, the median c and the runs' round mix."""
    if alpha is None or c is None or k <= 0:
        return None
    rounds = sum(r.stats.rounds for r in rs)
    draft_rounds = sum(r.stats.draft_rounds for r in rs)
    proposed = sum(r.stats.proposed for r in rs)
    # k̄ and the share of plain rounds as the runs actually had them (the adaptive
    # policy drafts less than k, sometimes nothing), as SpecStats does per run, a lookup
    # drafter's plain rounds charged their lookup as there
    if not draft_rounds:
        return predicted_speedup(alpha, k, c)
    k_bar = proposed / draft_rounds
    return round_mix_speedup(alpha, c, k_bar, draft_rounds, rounds - draft_rounds,
                             plain_round_cost(rs[0].stats.mode, c, k_bar))


def _summarize_config(label: str, rs: Sequence[RunRecord], off_tps: float | None,
                      off_by_turn: dict[tuple[int, int], RunRecord], disturbed: int,
                      drop_disturbed: bool) -> ConfigSummary:
    """The :class:`ConfigSummary` of one label's runs (``rs`` not empty)."""
    k = rs[0].draft_max
    verified = sum(r.stats.verified for r in rs)
    accepted = sum(r.stats.accepted for r in rs)
    rounds = sum(r.stats.rounds for r in rs)
    emitted = sum(r.stats.emitted for r in rs)
    alpha = accepted / verified if verified else None
    c = median(cr for r in rs if (cr := r.stats.draft_cost_ratio) is not None)
    tps = _median_decode_tps(rs, drop_disturbed)
    gaps = [g for r in rs for g in token_latencies(r.token_times)]
    compared = [r for r in rs if r.identical_to_off is not None]
    pairs = _turn_pairs(rs, off_by_turn)
    return ConfigSummary(
        label=label,
        mode=rs[0].mode,
        draft_max=k,
        disturbed=disturbed,
        undisturbed=sum(not r.disturbed for r in rs),
        runs=len(rs),
        emitted=emitted,
        decode_tps_median=tps,
        end_to_end_tps_median=median(
            t for r in rs if (t := r.stats.end_to_end_tps) is not None
        ),
        token_latency_p50=percentile(gaps, 50),
        token_latency_p95=percentile(gaps, 95),
        ttft_median=median(r.stats.ttft for r in rs if r.token_ids),
        acceptance_rate=alpha,
        mean_acceptance_length=emitted / rounds if rounds else None,
        draft_cost_ratio=c,
        predicted_speedup=_pooled_predicted_speedup(rs, alpha, c, k),
        measured_speedup=(tps / off_tps) if tps is not None and off_tps else None,
        identical=sum(1 for r in compared if r.identical_to_off),
        compared=len(compared),
        acceptance_at=_acceptance_at(rs),
        near_tie=sum(1 for r in compared
                     if r.divergence is not None and r.divergence.verdict == "near-tie"),
        suspect=sum(1 for r in compared
                    if r.divergence is not None and r.divergence.verdict == "suspect"),
        unmeasured=sum(1 for r in compared
                       if not r.identical_to_off and r.divergence is None),
        paired_speedup=median(ratio for _, _, ratio in pairs),
        set_speedup=median(_set_ratios(pairs)),
    )


def summarize(records: Sequence[RunRecord], labels: Sequence[str] | None = None, *,
              drop_disturbed: bool = False) -> list[ConfigSummary]:
    """One :class:`ConfigSummary` per configuration label, in ``labels`` order (default:
    order of first appearance). The ``off`` label is the speedup baseline.
    ``drop_disturbed``: a configuration's rates come from its runs that other work did
    not disturb, when it has any (``disturbed`` counts the others either way)."""
    disturbed = {lab: 0 for lab in labels or ()}
    for r in records:
        disturbed[r.label] = disturbed.get(r.label, 0) + r.disturbed
    if drop_disturbed:
        quiet_labels = {r.label for r in records if not r.disturbed}
        records = [r for r in records if not r.disturbed or r.label not in quiet_labels]
    by_label = _by_label(records, labels)
    off_runs = by_label.get("off", [])
    off_tps = _median_decode_tps(off_runs, drop_disturbed)
    off_by_turn = {(r.prompt_index, r.repeat): r for r in off_runs}
    return [_summarize_config(lab, rs, off_tps, off_by_turn, disturbed.get(lab, 0), drop_disturbed)
            for lab, rs in by_label.items() if rs]


def config_label(spec: SpeculationConfig) -> str:
    """``off`` for plain decoding, ``auto`` for the auto choice, else ``k=<draft_max>``."""
    if spec.mode is SpecMode.OFF:
        return "off"
    return "auto" if spec.mode is SpecMode.AUTO else f"k={spec.draft_max}"


@dataclass
class BenchReport:
    """Everything one benchmark measured, with the settings it ran under.

    ``records``: grouped by (repeat, prompt), ``off`` first in each group;
    ``summaries`` come from :func:`summarize`.
    ``settings`` is free-form (model paths, threads, prompt set…) and is printed as is.
    ``notes``: the engine's fallback reasons (a drafter that could not run), as it gave
    them.
    """

    settings: dict[str, Any]
    records: list[RunRecord]
    summaries: list[ConfigSummary]
    cancelled: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def counts(self) -> tuple[int, int, int, int]:
        """(identical, near-tie, suspect, compared) over every configuration."""
        return (sum(s.identical for s in self.summaries), sum(s.near_tie for s in self.summaries),
                sum(s.suspect for s in self.summaries), sum(s.compared for s in self.summaries))

    def to_dict(self, include_tokens: bool = False) -> dict[str, Any]:
        """JSON-ready: ``settings``, ``configs`` (one summary each), ``runs``, ``notes``."""
        return {
            "settings": self.settings,
            "configs": [s.to_dict() for s in self.summaries],
            "runs": [r.to_dict(include_tokens) for r in self.records],
            "cancelled": self.cancelled,
            "notes": list(self.notes),
        }


# -- running -------------------------------------------------------------------------


def generate_once(
    session: Session,
    prompt: PreparedPrompt,
    sampling: SamplingParams,
    speculation: SpeculationConfig,
    cancel: threading.Event | None = None,
    *,
    fresh_cache: bool = True,
    on_event: Callable[[Event], None] | None = None,
    trace: SamplingTrace | None = None,
) -> ReplyRecord:
    """Run one generation to completion and return its record.

    Args:
        prompt: tokens and stop strings; the stop strings are added to ``sampling``'s.
        fresh_cache: empty the target's KV cache first, so that every run pays the same
            prefill and TTFT compares like with like (otherwise a repeated prompt is
            served from the cache).
        on_event: called with every event (text deltas, stats updates, the finish).
        trace: when given, what the target's sampler drew from at every position is
            recorded in it (for :func:`app.engine.divergence.compare_traces`).

    Raises:
        TandemError: the engine failed (see :meth:`Session.generate`).
    """
    if prompt.stop:
        sampling = sampling.model_copy(update={"stop": tuple(sampling.stop) + prompt.stop})
    if fresh_cache:
        session.reset_cache()
    gc.collect()
    finished: ReplyRecord | None = None
    interval = 0.1 if on_event is not None else math.inf
    for ev in session.generate(list(prompt.tokens), sampling, speculation, cancel,
                               stats_interval=interval, trace=trace):
        if on_event is not None:
            on_event(ev)
        if isinstance(ev, ReplyRecord):
            finished = ev
    if finished is None:  # the engine guarantees one; stay explicit for type checkers
        raise TandemError("The generation ended without a result.")
    return finished


def measure_divergence(session: Session, off: SamplingTrace, on: SamplingTrace) -> Divergence | None:
    """The first difference of two recorded runs on ``session``'s target, measured; None
    when one run ended before they differ (cancelled), so there is nothing to measure."""
    try:
        return compare_traces(off, on, lambda t: session.target.token_to_piece(t).decode(
            "utf-8", "backslashreplace"))
    except ValueError:
        return None


ProgressFn = Callable[[int, int, RunRecord], None]
"""Called after each timed run with (runs done, runs total, the run's record)."""


def bench_plan(speculations: Sequence[SpeculationConfig], sampling: SamplingParams,
               repeat: int) -> tuple[list[SpeculationConfig], SamplingParams]:
    """The configurations a bench runs (``off`` first, then each speculating one) and the
    sampling every run uses (one seed for all, so off and on draw the same random numbers).

    Raises:
        ValueError: repeat < 1, or two configurations with the same label.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    configs = [SpeculationConfig()] + [s for s in speculations if s.speculating]
    labels = [config_label(s) for s in configs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"configurations must have distinct draft lengths: {labels}")
    if sampling.seed < 0:
        sampling = sampling.model_copy(update={"seed": 0})
    return configs, sampling


def run_bench(
    session: Session,
    prompts: Sequence[PreparedPrompt],
    speculations: Sequence[SpeculationConfig],
    sampling: SamplingParams,
    *,
    repeat: int = 3,
    warmup: bool = True,
    fresh_cache: bool = True,
    cancel: threading.Event | None = None,
    progress: ProgressFn | None = None,
    settings: dict[str, Any] | None = None,
    record: bool = True,
) -> BenchReport:
    """Run every prompt with speculation off and with each configuration, interleaved.

    For each repeat and each prompt, ``off`` and every configuration run back to back,
    in an order rotated by one each time, so that slow drifts of the machine (thermal,
    other processes) spread over all configurations instead of favouring one.

    Args:
        prompts: prepared prompts (:func:`prepare_prompt`).
        speculations: the "on" configurations (an ``off`` one is always added first;
            give each a distinct draft length).
        sampling: sampling settings; with a fixed seed (≥ 0) every run draws the same
            random numbers, so "identical to off" is meaningful at any temperature.
        repeat: runs per prompt and configuration (≥ 1).
        warmup: first run each configuration once on the first prompt (16 tokens,
            not recorded), which maps the weights in and builds the compute graphs.
        cancel: stops after the current run; the report is marked ``cancelled``.
        record: record every run's sampler (:class:`SamplingTrace`) and measure each
            run's first difference from its off run (``RunRecord.divergence``). False
            skips the recording, for measuring its cost (``bench/proof_cost.py``).

    Returns:
        The report. Its records are grouped by (repeat, prompt) and listed in
        configuration order, ``off`` first, whatever order they ran in.

    Raises:
        ValueError: no prompts, repeat < 1, or two configurations with the same label.
        TandemError: the engine failed.
    """
    if not prompts:
        raise ValueError("no prompts")
    configs, sampling = bench_plan(speculations, sampling, repeat)
    labels = [config_label(s) for s in configs]
    if warmup:
        warm = sampling.model_copy(update={"max_tokens": min(16, sampling.max_tokens)})
        for spec in configs:
            if cancel is not None and cancel.is_set():
                break
            generate_once(session, prompts[0], warm, spec, cancel, fresh_cache=fresh_cache)
    runs = _BenchRuns(session, sampling, cancel, fresh_cache, record, progress,
                      total=repeat * len(prompts) * len(configs))
    for rep in range(repeat):
        for pi, prompt in enumerate(prompts):
            rot = (rep * len(prompts) + pi) % len(configs)
            runs.run_turn(prompt, pi, rep, configs[rot:] + configs[:rot], labels)
            if runs.cancelled:
                break
        if runs.cancelled:
            break
    return BenchReport(
        settings=dict(settings or {}),
        records=runs.records,
        summaries=summarize(runs.records, labels),
        cancelled=runs.cancelled,
        notes=fallback_notes(runs.records),
    )


def compared_to_off(session: Session, group: dict[str, RunRecord], labels: Sequence[str],
                    traces: dict[str, SamplingTrace] | None = None) -> list[RunRecord]:
    """The runs of one turn in ``labels`` order, each "on" run compared with the turn's
    ``off`` run (``identical_to_off``, ``first_difference``, and the difference measured
    when both runs' samplers are in ``traces``). Labels that did not run are skipped."""
    traces = traces or {}
    off = group.get("off")
    out: list[RunRecord] = []
    for lab in labels:
        rec = group.get(lab)
        if rec is None:
            continue
        if lab != "off" and off is not None:
            diff = first_difference(off.token_ids, rec.token_ids)
            div = None
            if diff is not None and lab in traces and "off" in traces:
                div = measure_divergence(session, traces["off"], traces[lab])
            rec = dataclasses.replace(rec, identical_to_off=diff is None,
                                      first_difference=diff, divergence=div)
        out.append(rec)
    return out


def fallback_notes(records: Iterable[RunRecord]) -> list[str]:
    """The engine's distinct fallback reasons over the runs, sorted."""
    return sorted({r.stats.fallback_reason for r in records if r.stats.fallback_reason})


@dataclass
class _BenchRuns:
    """What :func:`run_bench` has run so far: the records in report order, the timed runs
    counted for ``progress``, and whether a run was cancelled."""

    session: Session
    sampling: SamplingParams
    cancel: threading.Event | None
    fresh_cache: bool
    record: bool
    progress: ProgressFn | None
    total: int
    step: int = 0
    cancelled: bool = False
    records: list[RunRecord] = field(default_factory=list)

    def run_turn(self, prompt: PreparedPrompt, pi: int, rep: int,
                 order: Sequence[SpeculationConfig], labels: Sequence[str]) -> None:
        """Run one prompt of one repeat in every configuration of ``order``, then add its
        records, compared with its off run, in ``labels`` order."""
        group: dict[str, RunRecord] = {}
        traces: dict[str, SamplingTrace] = {}
        for spec in order:
            if self.cancel is not None and self.cancel.is_set():
                self.cancelled = True
                break
            trace = SamplingTrace() if self.record else None
            start = cpu_sample()
            fin = generate_once(self.session, prompt, self.sampling, spec, self.cancel,
                                fresh_cache=self.fresh_cache, trace=trace)
            other = other_cores(start, cpu_sample())
            if trace is not None:
                traces[config_label(spec)] = trace
            if fin.reason == "cancelled":
                self.cancelled = True
                break
            rec = RunRecord(config_label(spec), prompt.name or f"prompt-{pi + 1}", pi, rep,
                            fin, other_cores=other)
            group[rec.label] = rec
            self.step += 1
            if self.progress is not None:
                self.progress(self.step, self.total, rec)
        self.records += compared_to_off(self.session, group, labels, traces)
