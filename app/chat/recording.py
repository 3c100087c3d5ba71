"""What the race records beyond the engine's :class:`~app.engine.measure.race.RaceResult`, and
the lanes' state at any moment of the replay. No Qt here, so it is tested directly.

The engine gives each lane its text, token ids and per-token timestamps. For a faithful
replay the race worker also keeps, per lane, the text deltas as the engine released them
(which stretches came from accepted drafts, to tint them as the chat view does) and the
statistics snapshots (α as it evolved, for the live α counter). :func:`counters_at`
turns a recording and a replay time t into the counters a pane shows.

Replay clock: t = 0 is the moment each run's request started, so both lanes start
together and each reveals its tokens at the time it really produced them.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.context_fit import ContextFit
from app.engine.events import StatsUpdate, TextDelta
from app.engine.measure.race import RaceLane, RaceResult


@dataclass(frozen=True, slots=True)
class TextSegment:
    """Characters ``start``..``end`` of the lane's text, released at ``t`` seconds;
    ``from_draft``: they came from accepted draft tokens."""

    start: int
    end: int
    from_draft: bool
    t: float


@dataclass(frozen=True, slots=True)
class AlphaPoint:
    """Draft tokens accepted and verified up to ``t`` seconds into the run."""

    t: float
    accepted: int
    verified: int


@dataclass(frozen=True, slots=True)
class LaneRecording:
    """One lane: the engine's :class:`RaceLane` plus the deltas and α history."""

    lane: RaceLane
    segments: tuple[TextSegment, ...] = ()
    alpha_points: tuple[AlphaPoint, ...] = ()

    @property
    def duration(self) -> float:
        return self.lane.duration


@dataclass(frozen=True, slots=True)
class RaceRecording:
    """A finished (or cancelled) race as the race view replays and exports it.

    ``model_name``: the target's file name; ``drafter``: the "on" side in words
    ("prompt lookup", "draft model gemma-…"); ``prompt_text``: what was raced, for the
    export; ``cpu_backend``: the target ran on the CPU (0 GPU layers), which decides the
    wording of the difference explanation; ``adaptive``: the "on" run let the engine's
    cost-aware policy draft fewer than k tokens per round; ``exact_verification``: the
    target was loaded for exact verification (:mod:`app.engine.exact`); ``context``: what
    was dropped from a conversation to fit the context window (None: nothing).
    """

    result: RaceResult
    off: LaneRecording
    on: LaneRecording
    model_name: str
    drafter: str
    prompt_text: str
    max_tokens: int
    cpu_backend: bool = True
    adaptive: bool = False
    exact_verification: bool = False
    context: ContextFit | None = None

    @property
    def duration(self) -> float:
        """Replay length: the slower lane's end-to-end time, seconds."""
        return max(self.off.duration, self.on.duration)


class LaneRecorder:
    """Collects one lane's events as the engine yields them (on the worker thread)."""

    def __init__(self) -> None:
        self._segments: list[TextSegment] = []
        self._alpha: list[AlphaPoint] = []
        self._chars = 0
        self.tokens = 0

    def add(self, event: object) -> None:
        """Record a :class:`TextDelta` or :class:`StatsUpdate` (other events are ignored)."""
        if isinstance(event, TextDelta):
            end = self._chars + len(event.text)
            self._segments.append(TextSegment(self._chars, end, event.from_draft, event.t))
            self._chars = end
            self.tokens = event.n_tokens
        elif isinstance(event, StatsUpdate):
            s = event.stats
            if s.verified:
                self._alpha.append(AlphaPoint(s.total_time, s.accepted, s.verified))

    def finish(self, lane: RaceLane) -> LaneRecording:
        """The recording, closed with the lane's final statistics."""
        alpha = list(self._alpha)
        s = lane.stats
        if s.verified:
            alpha.append(AlphaPoint(lane.duration, s.accepted, s.verified))
        segments = tuple(seg for seg in self._segments if seg.end <= len(lane.text))
        return LaneRecording(lane, segments, tuple(alpha))


@dataclass(frozen=True, slots=True)
class LaneCounters:
    """A pane's live counters at replay time t.

    ``tokens``: produced by t; ``elapsed``: min(t, end-to-end time), seconds; ``tps``:
    decode tok/s so far, tokens / (t − prefill time) (at the end this equals the lane's
    decode tok/s, prefill excluded as everywhere in Tandem); ``alpha``: acceptance rate
    so far (None before the first verified draft, and for plain decoding);
    ``finished``: the lane's reply is complete at t.
    """

    tokens: int
    elapsed: float
    tps: float | None
    alpha: float | None
    finished: bool


def counters_at(rec: LaneRecording, t: float) -> LaneCounters:
    """The counters of ``rec`` at replay time ``t`` seconds (see :class:`LaneCounters`)."""
    lane = rec.lane
    finished = t >= lane.duration
    if finished:
        s = lane.stats
        return LaneCounters(len(lane.token_ids), lane.duration, s.decode_tps,
                            s.acceptance_rate, True)
    n = lane.tokens_at(t)
    decode_elapsed = t - lane.stats.prefill_time
    tps = n / decode_elapsed if n and decode_elapsed > 0 else None
    alpha: float | None = None
    pts = rec.alpha_points
    if pts:
        i = bisect.bisect_right([p.t for p in pts], t)
        if i:
            p = pts[i - 1]
            alpha = p.accepted / p.verified if p.verified else None
    return LaneCounters(n, t, tps, alpha, False)


def visible_chars(rec: LaneRecording, t: float) -> int:
    """How many characters of the lane's text are visible at replay time ``t``."""
    return len(rec.lane.text_at(t))


def draft_spans(segments: Sequence[TextSegment], start: int, end: int) -> list[tuple[int, int, bool]]:
    """Split characters ``start``..``end`` into (from, to, from_draft) runs by the
    segments they belong to (characters outside every segment count as not drafted)."""
    out: list[tuple[int, int, bool]] = []
    pos = start
    i = bisect.bisect_right([s.end for s in segments], start)
    while pos < end:
        if i < len(segments) and segments[i].start <= pos:
            seg = segments[i]
            stop = min(end, seg.end)
            draft = seg.from_draft
            i += 1
        else:
            stop = min(end, segments[i].start) if i < len(segments) else end
            draft = False
        if stop > pos:
            if out and out[-1][2] == draft and out[-1][1] == pos:
                out[-1] = (out[-1][0], stop, draft)
            else:
                out.append((pos, stop, draft))
        pos = max(pos, stop)
    return out
