"""The race: the same prompt and seed decoded with speculation off, then on (Qt-free).

:func:`run_race` loads nothing: it uses the session's target once for both runs, one
after the other, records per-token timestamps and what the target's sampler drew from
(:class:`~app.engine.divergence.SamplingTrace`), and compares the token ids; where they
differ, the first difference is measured (:attr:`RaceResult.divergence`). The race view
then plays both lanes from t = 0 at their true pace with :meth:`RaceLane.tokens_at` and
:meth:`RaceLane.text_at`; its table and Markdown export are worded in
:mod:`app.ui.race.report` from the numbers of :class:`RaceResult`.

One pair of runs is one sample of a noisy machine: back to back, the same race gave
0.36× and then 1.46× on a desktop with other work. So the race runs several pairs, off
and on interleaved (off-on, on-off, …, so that a drift favours neither side), measures
other processes' load during each run (:mod:`app.engine.cpu`), leaves out the pairs with
a disturbed run, and reports the median speedup with its range; it gives a verdict only
when at least three pairs were kept and every one agrees (:attr:`RaceResult.verdict`).

Formulas: E(α, k) = (1 − α^(k+1)) / (1 − α) and S = E / (1 + c·k)
(:mod:`app.engine.stats`, Leviathan et al. 2023).
"""

from __future__ import annotations

import bisect
import codecs
import random
import statistics
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.engine.cpu import cpu_sample, other_cores
from app.engine.divergence import Divergence, SamplingTrace, first_difference
from app.engine.events import Event
from app.engine.llama import LlamaModel
from app.engine.measure.bench import generate_once, measure_divergence, median
from app.engine.measure.prompts import PreparedPrompt
from app.engine.reply import ReplyFields, ReplyRecord, ReplyRequest
from app.engine.session import Session
from app.engine.stats import SpecStats
from app.options import SamplingParams, SpecMode, SpeculationConfig

# -- race lanes ----------------------------------------------------------------------


def text_offsets(model: LlamaModel, token_ids: Sequence[int], text: str) -> tuple[int, ...]:
    """Characters of ``text`` visible after each token, for replaying a reply at its pace.

    Token pieces are joined as bytes and decoded incrementally, so a character split over
    several tokens appears with its last byte (as the engine streams it). Offsets are
    clamped to ``len(text)``: the final text may end earlier (a stop string is cut off).
    """
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out: list[int] = []
    n = 0
    for t in token_ids:
        n += len(dec.decode(model.token_to_piece(t)))
        out.append(min(n, len(text)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class RaceLane(ReplyFields):
    """One side of the race: the reply's record with its lane label.

    ``reply``: the run's :class:`~app.engine.reply.ReplyRecord` (its token times are
    seconds since that run's request started: both lanes start at t = 0).
    ``text_offsets``: characters of ``text`` visible after each token (see
    :func:`text_offsets`).
    """

    label: str
    reply: ReplyRecord
    text_offsets: tuple[int, ...]

    @property
    def duration(self) -> float:
        """End-to-end time of the run, seconds (prefill included)."""
        return self.stats.total_time

    def tokens_at(self, t: float) -> int:
        """How many tokens had been produced ``t`` seconds after the start."""
        return bisect.bisect_right(self.token_times, t)

    def text_at(self, t: float) -> str:
        """The text visible ``t`` seconds after the start (the whole text once finished)."""
        if t >= self.duration:
            return self.text
        n = self.tokens_at(t)
        return self.text[: self.text_offsets[n - 1]] if n else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "mode": self.mode,
            "draft_max": self.draft_max,
            "text": self.text,
            "token_ids": list(self.token_ids),
            "token_times": list(self.token_times),
            "finish_reason": self.finish_reason,
            "stats": self.stats.to_dict(),
        }


def lane_from_reply(label: str, model: LlamaModel, reply: ReplyRecord) -> RaceLane:
    """A :class:`RaceLane` from a generation's record."""
    return RaceLane(label, reply, text_offsets(model, reply.token_ids, reply.text))


def cancelled_lane(label: str, sampling: SamplingParams, speculation: SpeculationConfig,
                   stats: SpecStats) -> RaceLane:
    """The lane of a side that did not run: no text, finish reason ``cancelled``."""
    record = ReplyRecord(ReplyRequest(sampling, speculation, 0), speculation, "cancelled",
                         "", (), (), stats, sampling.seed)
    return RaceLane(label, record, ())


#: a run is disturbed when other processes' load during it, in cores, differs by more
#: than this from the race's typical load (the median over its runs): a steady load (a
#: browser that always uses a core) is the condition the race measures under, a burst
#: during one run is not
DISTURBED_CORES = 0.3
#: a verdict needs every kept pair beyond this margin on the same side of 1×
VERDICT_MARGIN = 0.02
#: … and at least this many kept pairs: under noise wider than the margin and no real
#: difference, n pairs all land on one side by chance with probability up to 2·(½)ⁿ:
#: 50 % for 2, 25 % for 3, 6 % for the 5 a race times (RaceRequest.pairs)
VERDICT_MIN_PAIRS = 3


@dataclass(frozen=True, slots=True)
class RacePair:
    """One off run and one on run: their decode tok/s and other processes' load during
    each (cores; None where the OS does not tell)."""

    off_tps: float | None
    on_tps: float | None
    off_other: float | None = None
    on_other: float | None = None

    def disturbed_runs(self, typical: float | None = 0.0) -> int:
        """Runs whose load differs from ``typical`` by more than :data:`DISTURBED_CORES`
        (an unknown load, or no typical one, disturbs nothing)."""
        if typical is None:
            return 0
        return sum(o is not None and abs(o - typical) > DISTURBED_CORES
                   for o in (self.off_other, self.on_other))

    def disturbed(self, typical: float | None = 0.0) -> bool:
        """Whether either run was disturbed (:meth:`disturbed_runs`)."""
        return self.disturbed_runs(typical) > 0

    @property
    def speedup(self) -> float | None:
        """Decode tok/s on ÷ off."""
        return self.on_tps / self.off_tps if self.off_tps and self.on_tps else None

    def to_dict(self, typical: float | None = 0.0) -> dict[str, Any]:
        return {"off_tps": self.off_tps, "on_tps": self.on_tps, "off_other_cores": self.off_other,
                "on_other_cores": self.on_other, "disturbed": self.disturbed(typical),
                "speedup": self.speedup}


@dataclass(frozen=True, slots=True)
class RaceResult:
    """Both lanes of a race and the comparison.

    ``identical``: the token ids are equal; ``first_difference``: the first differing
    token index (None when identical). ``seed``: the seed both runs used.
    ``divergence``: the first difference measured from both runs' samplers (None when
    identical, cancelled or not recorded). ``pairs``: every off/on pair timed, the
    lanes' own first (:class:`RacePair`).
    """

    off: RaceLane
    on: RaceLane
    seed: int
    temperature: float
    identical: bool
    first_difference: int | None
    cancelled: bool = False
    divergence: Divergence | None = None
    pairs: tuple[RacePair, ...] = ()

    @property
    def typical_load(self) -> float | None:
        """Other processes' median load over every run of the race, cores (None: unknown)."""
        return median(o for p in self.pairs for o in (p.off_other, p.on_other) if o is not None)

    @property
    def kept_pairs(self) -> tuple[RacePair, ...]:
        """The pairs with no disturbed run and both rates measured: the pairs the
        speedup's median, its range and the verdict are taken over."""
        typical = self.typical_load
        return tuple(p for p in self.pairs
                     if not p.disturbed(typical) and p.speedup is not None)

    @property
    def kept_speedups(self) -> tuple[float, ...]:
        """Speedups of the pairs with no disturbed run."""
        return tuple(p.speedup for p in self.kept_pairs if p.speedup is not None)

    @property
    def median_decode_tps(self) -> tuple[float, float] | None:
        """(off, on) decode tok/s of the kept pair whose speedup is the median (prefill
        excluded), so the rates beside :attr:`measured_speedup` are one pair's and their
        ratio is it; for an even count, the mean rates of the two middle pairs, whose
        ratio lies between their speedups as the median does. None without a kept pair."""
        kept = sorted(self.kept_pairs, key=lambda p: p.speedup or 0.0)
        if not kept:
            return None
        middle = kept[(len(kept) - 1) // 2: len(kept) // 2 + 1]
        return (statistics.fmean(p.off_tps or 0.0 for p in middle),
                statistics.fmean(p.on_tps or 0.0 for p in middle))

    @property
    def disturbed_runs(self) -> int:
        """Runs whose load other work changed (:data:`DISTURBED_CORES`)."""
        typical = self.typical_load
        return sum(p.disturbed_runs(typical) for p in self.pairs)

    @property
    def speedup_range(self) -> tuple[float, float] | None:
        """(lowest, highest) kept speedup, or None without one."""
        kept = self.kept_speedups
        return (min(kept), max(kept)) if kept else None

    @property
    def kept_side(self) -> str | None:
        """"faster" or "slower" when every kept pair lies beyond :data:`VERDICT_MARGIN`
        on that side of 1× (however few were kept), else None."""
        kept = self.kept_speedups
        if kept and min(kept) > 1.0 + VERDICT_MARGIN:
            return "faster"
        if kept and max(kept) < 1.0 - VERDICT_MARGIN:
            return "slower"
        return None

    @property
    def verdict(self) -> str | None:
        """:attr:`kept_side` when at least :data:`VERDICT_MIN_PAIRS` pairs were kept;
        "unclear" when they do not agree (or fewer were kept); None when none was kept."""
        kept = self.kept_speedups
        if not kept:
            return None
        side = self.kept_side
        return side if side is not None and len(kept) >= VERDICT_MIN_PAIRS else "unclear"

    def difference_span(self, lane: RaceLane) -> tuple[int, int] | None:
        """Characters [start, end) of ``lane.text`` taken by the first differing token
        (the same start in both lanes: the texts agree before it); None when identical."""
        i = self.first_difference
        if i is None or i >= len(lane.text_offsets):
            return None
        start = lane.text_offsets[i - 1] if i > 0 else 0
        return start, max(start, lane.text_offsets[i])

    @property
    def measured_speedup(self) -> float | None:
        """Decode tok/s on ÷ off (prefill excluded): the median over the kept pairs when
        pairs were timed (None when every pair was disturbed), else the lanes' own."""
        if self.pairs:
            return median(self.kept_speedups)
        a, b = self.off.stats.decode_tps, self.on.stats.decode_tps
        return b / a if a and b else None

    @property
    def first_pair_disturbed(self) -> bool:
        """Whether other work disturbed the first pair: the lanes' own runs, which the
        race window replays (its verdict leaves such a pair out)."""
        return bool(self.pairs) and self.pairs[0].disturbed(self.typical_load)

    @property
    def end_to_end_speedup(self) -> float | None:
        """End-to-end time off ÷ on (prefill included); None unless both lanes wrote as
        many tokens (else it would compare unequal work)."""
        a, b = self.off.duration, self.on.duration
        same = self.off.stats.emitted == self.on.stats.emitted
        return a / b if same and a > 0 and b > 0 else None

    @property
    def predicted_speedup(self) -> float | None:
        """E(α, k) / (1 + c·k) from the "on" lane's measured α and c."""
        return self.on.stats.predicted_speedup

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "temperature": self.temperature,
            "identical": self.identical,
            "first_difference": self.first_difference,
            "measured_speedup": self.measured_speedup,
            "speedup_range": self.speedup_range,
            "median_decode_tps": self.median_decode_tps,
            "verdict": self.verdict,
            "disturbed_runs": self.disturbed_runs,
            "typical_load": self.typical_load,
            "pairs": [p.to_dict(self.typical_load) for p in self.pairs],
            "end_to_end_speedup": self.end_to_end_speedup,
            "predicted_speedup": self.predicted_speedup,
            "cancelled": self.cancelled,
            "divergence": self.divergence.to_dict() if self.divergence is not None else None,
            "off": self.off.to_dict(),
            "on": self.on.to_dict(),
        }


def run_race(
    session: Session,
    prompt: PreparedPrompt,
    sampling: SamplingParams,
    speculation: SpeculationConfig,
    cancel: threading.Event | None = None,
    *,
    on_event: Callable[[str, Event], None] | None = None,
    fresh_cache: bool = True,
    record: bool = True,
    pairs: int = 1,
    on_pair: Callable[[int, int, RacePair], None] | None = None,
) -> RaceResult:
    """Decode ``prompt`` with speculation off, then on, with one seed; compare the tokens;
    then time ``pairs − 1`` more off/on pairs for the speedup's median and spread.

    Args:
        prompt: from :func:`app.engine.measure.prompts.prepare_prompt` or
            :func:`~app.engine.measure.prompts.prepare_chat`.
        sampling: a seed of −1 is replaced by one random seed used by every run.
        speculation: the "on" side (mode draft-model or prompt-lookup, k…).
        cancel: checked once per round; a cancelled race returns what it has, with
            ``cancelled`` set (the "on" lane is then empty if it never started).
        on_event: called with ("off" | "on", event) for live progress of the first pair.
        fresh_cache: empty the KV cache before each run so both pay the same prefill
            (the next chat turn then re-evaluates its prompt once).
        record: record the first pair's samplers to measure a difference (a little
            slower per token; ``bench/proof_cost.py`` measures by how much).
        pairs: off/on pairs to time (≥ 1); every other one runs on first.
        on_pair: called with (pairs done, pairs, the pair) as each pair ends.

    Raises:
        ValueError: ``speculation.mode`` is "off", or pairs < 1.
        TandemError: the engine failed.
    """
    if not speculation.speculating:
        raise ValueError("the race needs speculation on one side")
    if pairs < 1:
        raise ValueError(f"a race needs at least one pair, got {pairs}")
    if sampling.seed < 0:
        sampling = sampling.model_copy(update={"seed": random.randrange(2**32 - 1)})
    runs = _RaceRuns(session, prompt, sampling, {"off": SpeculationConfig(), "on": speculation},
                     cancel, on_event, fresh_cache, record)
    for i in range(pairs):
        pair = runs.run_pair(i)
        if pair is None:
            break
        if on_pair is not None:
            on_pair(i + 1, pairs, pair)
    return runs.result(speculation)


@dataclass
class _RaceRuns:
    """The state of :func:`run_race`: its settings, the first pair's lanes and sampler
    recordings, every pair timed, and whether a run was cancelled."""

    session: Session
    prompt: PreparedPrompt
    sampling: SamplingParams
    specs: dict[str, SpeculationConfig]
    cancel: threading.Event | None
    on_event: Callable[[str, Event], None] | None
    fresh_cache: bool
    record: bool
    lanes: dict[str, RaceLane] = field(default_factory=dict)
    traces: dict[str, SamplingTrace | None] = field(default_factory=dict)
    timings: list[RacePair] = field(default_factory=list)
    cancelled: bool = False

    def timed(self, label: str, trace: SamplingTrace | None,
              first: bool) -> tuple[ReplyRecord, float | None]:
        """One run of side ``label`` and other processes' load during it (cores)."""
        forward = None
        if first and self.on_event is not None:
            cb = self.on_event

            def forward(ev: Event) -> None:
                cb(label, ev)

        start = cpu_sample()
        fin = generate_once(self.session, self.prompt, self.sampling, self.specs[label],
                            self.cancel, fresh_cache=self.fresh_cache, on_event=forward,
                            trace=trace)
        return fin, other_cores(start, cpu_sample())

    def run_pair(self, i: int) -> RacePair | None:
        """Pair ``i`` (0-based; odd pairs run on first), kept in ``timings``; the first
        pair also gives the lanes. None when a run was cancelled."""
        order = ("off", "on") if i % 2 == 0 else ("on", "off")
        got: dict[str, tuple[float | None, float | None]] = {}
        for label in order:
            if self.cancel is not None and self.cancel.is_set():
                self.cancelled = True
                return None
            trace = None
            if i == 0:
                trace = self.traces[label] = SamplingTrace() if self.record else None
            fin, other = self.timed(label, trace, i == 0)
            if i == 0:
                self.lanes[label] = lane_from_reply(label, self.session.target, fin)
            if fin.reason == "cancelled":
                self.cancelled = True
                return None
            got[label] = (fin.stats.decode_tps, other)
        pair = RacePair(got["off"][0], got["on"][0], got["off"][1], got["on"][1])
        self.timings.append(pair)
        return pair

    def result(self, speculation: SpeculationConfig) -> RaceResult:
        """The race's result from what ran (an empty, cancelled lane for a side that did
        not run), with the first pair's first difference measured."""
        empty = cancelled_lane("on", self.sampling, speculation,
                               SpecStats(mode=speculation.mode, draft_max=speculation.draft_max))
        off = self.lanes.get("off") or cancelled_lane(
            "off", self.sampling, SpeculationConfig(mode=SpecMode.OFF), SpecStats())
        on = self.lanes.get("on") or empty
        diff = first_difference(off.token_ids, on.token_ids)
        both = all(lane.finish_reason != "cancelled" for lane in (off, on))  # first pair ran
        divergence = None
        t_off, t_on = self.traces.get("off"), self.traces.get("on")
        if diff is not None and both and t_off is not None and t_on is not None:
            divergence = measure_divergence(self.session, t_off, t_on)
        return RaceResult(
            off=off,
            on=on,
            seed=self.sampling.seed,
            temperature=self.sampling.temperature,
            identical=diff is None and both,
            first_difference=diff,
            cancelled=self.cancelled,
            divergence=divergence,
            pairs=tuple(self.timings),
        )
