"""Helpers for engine tests: run a generation to completion, a drafter that replays."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from app.engine.events import PrefillProgress, StatsUpdate, TextDelta
from app.engine.reply import ReplyRecord, ReplyRequest, clip_spans, draft_spans
from app.engine.session import Session
from app.engine.stats import SpecStats
from app.options import SamplingParams, SpeculationConfig


@dataclass
class Run:
    finished: ReplyRecord
    deltas: list[TextDelta] = field(default_factory=list)
    updates: list[StatsUpdate] = field(default_factory=list)
    prefill: list[PrefillProgress] = field(default_factory=list)

    @property
    def ids(self) -> tuple[int, ...]:
        return self.finished.token_ids

    @property
    def stats(self) -> SpecStats:
        return self.finished.stats

    @property
    def streamed(self) -> str:
        return "".join(d.text for d in self.deltas)


def run(
    session: Session,
    prompt: Sequence[int],
    sampling: SamplingParams,
    spec: SpeculationConfig | None = None,
    **kw: object,
) -> Run:
    deltas: list[TextDelta] = []
    updates: list[StatsUpdate] = []
    prefill: list[PrefillProgress] = []
    finished = None
    for ev in session.generate(prompt, sampling, spec, **kw):  # type: ignore[arg-type]
        if isinstance(ev, TextDelta):
            deltas.append(ev)
        elif isinstance(ev, StatsUpdate):
            updates.append(ev)
        elif isinstance(ev, PrefillProgress):
            prefill.append(ev)
        else:
            assert finished is None, "more than one record"
            finished = ev
    assert finished is not None, "no record"
    # the record's draft spans are those of the streamed deltas
    pieces = draft_spans((d.text, d.from_draft) for d in deltas)
    assert finished.spans == tuple(clip_spans(pieces, len(finished.text)))
    return Run(finished, deltas, updates, prefill)


class ReplayDrafter:
    """Proposes a known continuation of the prompt (what plain decoding produced)."""

    kind = "draft-model"
    draft_limit = None

    def __init__(self, prompt: Sequence[int], continuation: Sequence[int]) -> None:
        self.prompt = list(prompt)
        self.continuation = list(continuation)
        self.forward_passes = 0
        self.calls: list[int] = []

    def begin(self, prompt: Sequence[int], should_stop: object = None) -> None:
        assert list(prompt) == self.prompt

    def draft(self, context: Sequence[int], n_max: int) -> list[int]:
        done = len(context) - len(self.prompt)
        self.calls.append(n_max)
        self.forward_passes += 1
        return self.continuation[done : done + n_max]

    def close(self) -> None:
        pass


def install_drafter(session: Session, drafter: object) -> None:
    """Make ``session`` use ``drafter`` whenever speculation mode is draft-model."""

    def make(spec: SpeculationConfig) -> tuple[object, str | None]:
        if spec.mode == "off":
            return None, None
        return drafter, None

    session._make_drafter = make  # type: ignore[method-assign]


def check_invariants(r: Run, max_tokens: int) -> None:
    """The statistics invariants (DESIGN.md's definitions of α, τ, rounds), for any
    finished generation."""
    s = r.stats
    assert s.accepted <= s.verified <= s.proposed
    assert s.emitted == len(r.ids) <= max_tokens
    assert sum(s.accepted_at) == s.accepted
    assert sum(s.verified_at) == s.verified
    for i in range(len(s.verified_at)):
        assert s.accepted_at[i] <= s.verified_at[i]
        if i + 1 < len(s.verified_at):
            # position i+2 is verified only after position i+1 was accepted
            assert s.verified_at[i + 1] <= s.accepted_at[i]
    if s.rounds:
        assert s.emitted >= s.rounds  # every counted round emitted a token: τ ≥ 1
    # the passes that carried drafts: each drafting round's, and one that sampled only
    # the end-of-generation token after a draft
    assert s.draft_rounds <= s.draft_passes <= s.draft_rounds + 1
    assert (s.draft_passes > 0) == (s.proposed > 0) and s.proposed >= s.draft_passes
    assert 0.0 <= s.draft_pass_time <= s.target_time
    cut = r.finished.reason in ("stop", "cancelled")
    if not cut:
        assert s.emitted == s.accepted + s.rounds
    else:
        # Only the last round can be cut. It loses its own token (an EOG, which is never
        # counted as accepted, or a stop string inside an accepted draft).
        assert s.accepted + s.rounds - 2 <= s.emitted <= s.accepted + s.rounds
    assert r.streamed == r.finished.text
    assert len(r.finished.token_times) == len(r.ids)
    assert list(r.finished.token_times) == sorted(r.finished.token_times)


def record(stats: SpecStats, text: str = "", ids: tuple[int, ...] = (),
           times: tuple[float, ...] = (), reason: str = "length") -> ReplyRecord:
    """A reply record with these statistics and tokens (for summaries and views)."""
    spec = SpeculationConfig(mode=stats.mode, draft_max=max(1, stats.draft_max))
    return ReplyRecord(ReplyRequest(SamplingParams(), spec, 1), spec, reason,  # type: ignore[arg-type]
                       text, ids, times, stats, 0)
