"""The "auto" drafter choice: which drafter and draft length k for the next reply of a
conversation, from what was measured, so that speculation never makes a reply slower
than decoding without it (a draft model as costly as the target would make every reply
slower).

Per reply, every drafter gets a score, an estimated speedup over plain decoding:

* **prompt lookup and suffix lookup** (no model): the conversation's earlier replies (for
  a new conversation, the caller passes the session's latest replies instead) are
  replayed through the drafter at each k (:mod:`app.engine.measure.draft_replay`), and
  the rounds priced with this machine's measured target pass times t(n):
  Σ t(1) / Σ t(pass size). The suffix drafter is replayed with an index of the
  conversation's own earlier replies only (the live index already holds the replayed
  replies themselves, which would predict perfect copying), so its prediction is a floor;
* **draft model**: E(α, k) · t(1) / (t(k + 1) + k · t_draft) with the measured draft
  step t_draft and the α it measured over this conversation; before it has drafted here
  α = 1, the most it could reach. A draft as costly as the target cannot beat plain
  decoding even then, so it is never tried;
* **a head the model carries, or a loaded MTP assistant (MTP)**: priced like a draft
  model, E(α, k) · t(1) / (t(k + 1) + k · c · t(1)), with α and c measured over its
  replies in this conversation when it has drafted here, else its prediction before
  any reply (:attr:`app.engine.drafter_kinds.DrafterKind.predict`: α as published for
  MTP heads, c as the load check measured it for the heads or for the assistant with
  its target). The published α is priced only at
  the drafter's default k, and no k beyond what chained heads can draft
  (:func:`head_estimates`). Offered only for a target that carries the heads or has an
  assistant loaded (:func:`app.options.drafter_unusable`);
* **measured**: once a drafter has produced at least :data:`MIN_MEASURED_TOKENS` reply
  tokens in this conversation, its measured speedup (plain decoding's time for its
  replies, from the one-token passes timed under each reply's own conditions, over
  their decode time: :func:`measured_speedups`) replaces the estimate, and a drafter
  measuring below :data:`FLOOR` × plain is dropped for the rest of the conversation.

The best score wins if it reaches :data:`MARGIN` (an estimate must promise more than
noise); otherwise the reply decodes without speculation. With nothing to score at all
(the session's first reply, or an API completion: no earlier reply to replay), the
model-free :data:`PRIOR` drafter runs at the largest k (reason ``prior``), unless a
head the model carries predicts a gain from its published prior (then it runs): drafting
costs it nothing and its cost-aware draft length
(:class:`app.engine.policy.DraftLengthPolicy`) stops verifying drafts that do not pay.
Its measured speedups are in docs/benchmarks.md (``bench --auto``). The price: no reply of
the session decodes plainly first; a reply without plain steps of its own is measured
over the session's last plain rate, else over 1 / t(1) (the fastest one-token pass,
which leaves out the loop's ~2 % overhead), and then reads a little low.

:func:`choose_drafter` is the pure decision (tested with made-up figures),
:func:`estimate_drafters` gathers the figures from a session, :func:`resolve_auto` does
both. The chat layer (:mod:`app.chat.service`) records the choice with each reply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, get_args

from app.engine.drafter_kinds import kinds
from app.engine.measure.draft_replay import ReplayCounts, replay_reply
from app.engine.session import Session
from app.engine.stats import round_rate
from app.engine.suffix import SuffixIndex
from app.options import (
    DrafterNeeds,
    SpecMode,
    SpeculationConfig,
    auto_candidates,
    drafter_unusable,
    mtp_draft_limit,
)

#: a drafter measured below this × plain over the conversation is not used again in it
FLOOR = 0.97
#: an estimated speedup must reach this to be chosen over plain decoding
MARGIN = 1.03
#: reply tokens a drafter must have produced in a conversation before its measured
#: speedup replaces the estimate (fewer: one short reply is mostly noise)
MIN_MEASURED_TOKENS = 32
#: draft lengths auto chooses among (capped by the configuration's draft_max)
AUTO_KS: tuple[int, ...] = (2, 4, 8, 16)
#: the longest of :data:`AUTO_KS` auto prices a draft model at
DRAFT_MODEL_AUTO_K_MAX = 8
#: the drafter used when nothing can be scored (no earlier reply to replay)
PRIOR: SpecMode = SpecMode.SUFFIX

Reason = Literal["estimate", "measured", "prior", "no-gain", "no-drafter"]


@dataclass(frozen=True, slots=True)
class ReplyObservation:
    """One finished reply of the conversation, as its statistics record it: the drafter
    that ran (``mode``), reply tokens, decode seconds, draft tokens verified/accepted."""

    mode: SpecMode
    emitted: int
    decode_time: float
    verified: int = 0
    accepted: int = 0
    #: the reply's measured draft cost ratio c (None: not measured, or no draft step)
    draft_cost_ratio: float | None = None
    #: plain decoding's seconds per token under this reply's conditions
    #: (:attr:`SpecStats.plain_step_time <app.engine.stats.SpecStats.plain_step_time>`;
    #: None: not measured)
    plain_step_time: float | None = None

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any]) -> ReplyObservation | None:
        """From a stored ``SpecStats.to_dict()``; None when it lacks the figures."""
        try:
            c = stats.get("draft_cost_ratio")
            p = stats.get("plain_step_time")
            return cls(SpecMode(stats.get("mode", "off")), int(stats.get("emitted", 0)),
                       float(stats.get("decode_time", 0.0)), int(stats.get("verified", 0)),
                       int(stats.get("accepted", 0)),
                       float(c) if isinstance(c, (int, float)) and c >= 0 else None,
                       float(p) if isinstance(p, (int, float)) and p > 0 else None)
        except (TypeError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class DrafterEstimate:
    """What is known of one drafter in this conversation.

    ``predicted``: k → estimated speedup over plain decoding (missing k: no estimate);
    ``optimistic``: the estimates assume α = 1 (a draft model that has not drafted here);
    ``measured_speedup``: over its ``measured_tokens`` reply tokens in this conversation.
    """

    mode: SpecMode
    predicted: Mapping[int, float] = field(default_factory=dict)
    optimistic: bool = False
    measured_speedup: float | None = None
    measured_tokens: int = 0
    #: what the figures rest on, to explain the choice (:class:`DrafterEvidence`)
    replayed: Mapping[int, ReplayCounts] = field(default_factory=dict)
    replayed_replies: int = 0
    measured_replies: int = 0
    measured_verified: int = 0
    measured_accepted: int = 0
    #: a head priced from figures (MTP): the α assumed before it drafted here (None: α
    #: measured here), and the cost ratio c used (measured here, or the load check's)
    prior_acceptance: float | None = None
    cost_ratio: float | None = None
    #: c is the mean measured over its replies here (False: the load check's)
    cost_from_replies: bool = False

    @property
    def measured(self) -> bool:
        return self.measured_speedup is not None and self.measured_tokens >= MIN_MEASURED_TOKENS

    def evidence(self, k: int) -> DrafterEvidence:
        """What this drafter's score at draft length ``k`` rests on."""
        if self.measured:
            return DrafterEvidence(self.mode, k, "measured", self.measured_replies,
                                   self.measured_verified, self.measured_accepted,
                                   speedup=self.measured_speedup)
        if self.cost_ratio is not None:  # a head priced from α and c
            source: Source = "prior" if self.prior_acceptance is not None else "priced"
            return DrafterEvidence(self.mode, k, source, self.measured_replies,
                                   self.measured_verified, self.measured_accepted,
                                   speedup=self.predicted.get(k),
                                   assumed_acceptance=self.prior_acceptance,
                                   cost_ratio=self.cost_ratio,
                                   cost_from_replies=self.cost_from_replies)
        counts = self.replayed.get(k)
        if self.optimistic:
            return DrafterEvidence(self.mode, k, "untried", 0, speedup=self.predicted.get(k))
        if counts is None:
            return DrafterEvidence(self.mode, k, "replay", self.replayed_replies)
        return DrafterEvidence(self.mode, k, "replay", self.replayed_replies, counts.verified,
                               counts.accepted, counts.draft_rounds, counts.rounds,
                               self.predicted.get(k))


Source = Literal["replay", "measured", "untried", "prior", "priced"]
_SOURCES = get_args(Source)


@dataclass(frozen=True, slots=True)
class DrafterEvidence:
    """What one drafter's score rests on, as figures (a front end words it).

    ``source``: ``replay`` (the conversation's earlier replies replayed through it),
    ``measured`` (its own replies in this conversation), ``untried`` (a draft model that
    has not drafted here: α = 1 assumed), ``prior`` (a head the model carries, not run
    here yet: ``assumed_acceptance`` as published, ``cost_ratio`` from the load check (of the
    heads, or of an MTP assistant with its target), or over its replies here when
    ``cost_from_replies``), ``priced`` (such a head priced with the α and c of its replies
    here, too few tokens yet for a measured speedup). ``replies``: replies the figures come from;
    ``verified``/``accepted``: draft tokens; ``draft_rounds``/``rounds`` (replay only):
    target passes that carried a draft / all passes (no draft round: the drafter found
    nothing to propose); ``speedup``: the score, over plain decoding (None: none).
    """

    mode: SpecMode
    k: int
    source: Source
    replies: int = 0
    verified: int = 0
    accepted: int = 0
    draft_rounds: int = 0
    rounds: int = 0
    speedup: float | None = None
    assumed_acceptance: float | None = None
    cost_ratio: float | None = None
    cost_from_replies: bool = False

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.verified if self.verified else None

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "k": self.k, "source": self.source,
                "replies": self.replies, "verified": self.verified, "accepted": self.accepted,
                "draft_rounds": self.draft_rounds, "rounds": self.rounds,
                "speedup": self.speedup, "assumed_acceptance": self.assumed_acceptance,
                "cost_ratio": self.cost_ratio, "cost_from_replies": self.cost_from_replies}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DrafterEvidence:
        """From :meth:`to_dict`. Raises ValueError/TypeError/KeyError when unreadable."""
        source = str(data["source"])
        if source not in _SOURCES:
            raise ValueError(f"unknown evidence source {source!r}")
        speedup, alpha, c = (data.get(n) for n in ("speedup", "assumed_acceptance",
                                                   "cost_ratio"))
        return cls(SpecMode(data["mode"]), int(data["k"]), source,  # type: ignore[arg-type]
                   int(data.get("replies", 0)), int(data.get("verified", 0)),
                   int(data.get("accepted", 0)), int(data.get("draft_rounds", 0)),
                   int(data.get("rounds", 0)), None if speedup is None else float(speedup),
                   None if alpha is None else float(alpha), None if c is None else float(c),
                   bool(data.get("cost_from_replies", False)))


@dataclass(frozen=True, slots=True)
class AutoChoice:
    """The drafter and k auto chose, why, and every score it compared.

    ``reason``: ``estimate`` / ``measured`` (how the winner was scored), ``prior``
    (nothing could be scored: :data:`PRIOR` at the largest k), ``no-gain`` (nothing
    reached :data:`MARGIN`: off), ``no-drafter`` (no candidate at all: off).
    ``scores``: (mode, k, score) of every candidate; ``dropped``: drafters measured
    below :data:`FLOOR` in this conversation.
    """

    mode: SpecMode
    draft_max: int
    reason: Reason
    score: float | None = None
    scores: tuple[tuple[SpecMode, int, float], ...] = ()
    dropped: tuple[SpecMode, ...] = ()
    #: what each scored (or dropped) drafter's figures rest on, the winner first
    evidence: tuple[DrafterEvidence, ...] = ()
    #: whose replies were replayed: this conversation's, or (a new conversation) the
    #: session's latest ones
    replayed_from: Literal["conversation", "session"] = "conversation"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (stored with the reply's statistics)."""
        return {
            "mode": self.mode.value, "draft_max": self.draft_max, "reason": self.reason,
            "score": self.score,
            "scores": [[m.value, k, s] for m, k, s in self.scores],
            "dropped": [m.value for m in self.dropped],
            "evidence": [e.to_dict() for e in self.evidence],
            "replayed_from": self.replayed_from,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AutoChoice | None:
        """From :meth:`to_dict` (a stored reply's ``stats["auto"]``); None when it cannot
        be read (a drafter this Tandem lacks, a damaged record). Choices stored before
        the evidence was recorded read back without it."""
        try:
            reason = str(data["reason"])
            if reason not in get_args(Reason):
                return None
            score = data.get("score")
            return cls(
                SpecMode(data["mode"]), int(data["draft_max"]), reason,  # type: ignore[arg-type]
                None if score is None else float(score),
                tuple((SpecMode(m), int(k), float(v)) for m, k, v in data.get("scores", ())),
                tuple(SpecMode(m) for m in data.get("dropped", ())),
                tuple(DrafterEvidence.from_dict(e) for e in data.get("evidence", ())),
                "session" if data.get("replayed_from") == "session" else "conversation")
        except (KeyError, TypeError, ValueError):
            return None


class _Scored(NamedTuple):
    """A drafter's score in :func:`choose_drafter`: its speedup at draft length ``k``,
    why (``reason``), its place in Auto's preference (``rank``, lower first at equal
    scores), and whether it rests on an optimistic estimate (α = 1, never drafted)."""

    score: float
    rank: int
    mode: SpecMode
    k: int
    reason: Reason
    optimistic: bool


def _nothing_known(estimates: Sequence[DrafterEstimate]) -> bool:
    """Whether no drafter was measured or replayed (only priors and optimistic guesses)."""
    return not any(e.measured_speedup is not None
                   or (e.predicted and not e.optimistic and e.prior_acceptance is None)
                   for e in estimates)


def _scored(est: DrafterEstimate, rank: int) -> _Scored | None:
    """A drafter's measured speedup at the k of its best estimate (the largest k
    without estimates), else its best estimate; None without either."""
    if est.predicted:
        k, predicted = max(est.predicted.items(), key=lambda kv: (kv[1], -kv[0]))
    elif est.measured:
        k, predicted = max(AUTO_KS), 0.0
    else:
        return None
    if est.measured and est.measured_speedup is not None:
        return _Scored(est.measured_speedup, rank, est.mode, k, "measured", False)
    return _Scored(predicted, rank, est.mode, k, "estimate", est.optimistic and not est.measured)


def choose_drafter(estimates: Iterable[DrafterEstimate], *, floor: float = FLOOR,
                   margin: float = MARGIN, prior_k: int = max(AUTO_KS)) -> AutoChoice:
    """The decision (see the module docstring), from figures alone.

    A measured drafter below ``floor`` is dropped; a measured one scores its measured
    speedup at the k with its best estimate (the largest k without estimates); an
    unmeasured one scores its best estimate; an optimistic estimate (α = 1) is tried only
    when nothing realistic reaches ``margin``. Ties go to the drafter Auto prefers
    (:func:`app.options.auto_candidates`, from the registry's declarations). When the
    :data:`PRIOR` drafter is among the estimates but no drafter has any figure (nothing
    replayed, nothing measured), it is chosen at ``prior_k`` (reason ``prior``), unless a
    head priced from its published prior (``prior_acceptance``) reaches ``margin``:
    then the best such head is chosen (reason ``estimate``).
    """
    estimates = list(estimates)
    if any(e.mode is PRIOR for e in estimates) and _nothing_known(estimates):
        # a head the model carries when its published prior predicts a gain, else the
        # free prior drafter
        estimates = [e for e in estimates if e.prior_acceptance is not None
                     and e.predicted and max(e.predicted.values()) >= margin]
        if not estimates:
            return AutoChoice(PRIOR, prior_k, "prior")
    scored: list[_Scored] = []
    dropped: list[SpecMode] = []
    evidence: list[DrafterEvidence] = []
    candidates = auto_candidates()
    for est in estimates:
        if est.measured and est.measured_speedup is not None and est.measured_speedup < floor:
            dropped.append(est.mode)
            evidence.append(est.evidence(max(AUTO_KS)))
        elif (s := _scored(est, candidates.index(est.mode) if est.mode in candidates
                           else len(candidates))) is not None:
            scored.append(s)
            evidence.append(est.evidence(s.k))

    def top(optimistic: bool) -> _Scored | None:  # the first of the best at equal scores
        return max((s for s in scored if s.optimistic is optimistic),
                   key=lambda s: (s.score, -s.rank), default=None)

    best, hopeful = top(False), top(True)
    # an untried draft model (α = 1 assumed) only when nothing realistic pays
    if (best is None or best.score < margin) and hopeful is not None and hopeful.score >= margin:
        best = hopeful
    scores = tuple((s.mode, s.k, s.score) for s in scored)
    if best is None:
        return AutoChoice(SpecMode.OFF, 0, "no-drafter", None, scores, tuple(dropped),
                          tuple(evidence))
    winner = best.mode
    # the winner's (or, off, the best one's) evidence first: it is the one explained
    evidence.sort(key=lambda e: e.mode is not winner)
    if best.score < margin:
        return AutoChoice(SpecMode.OFF, 0, "no-gain", best.score, scores, tuple(dropped),
                          tuple(evidence))
    return AutoChoice(best.mode, best.k, best.reason, best.score, scores, tuple(dropped),
                      tuple(evidence))


# -- the figures, from a session ------------------------------------------------------


def _replay_speedup(counts: ReplayCounts, pass_time: Callable[[int], float | None]) -> float | None:
    return counts.predicted_speedup(pass_time) if counts.rounds else None


def measured_speedups(observations: Sequence[ReplyObservation], plain_tps: float | None
                      ) -> dict[SpecMode, tuple[float, int]]:
    """Per drafter: (plain decoding's time for its replies ÷ their decode seconds, its
    reply tokens) over ``observations``.

    A reply's plain time is its tokens × the plain step time measured for it
    (:attr:`ReplyObservation.plain_step_time`: one-token passes timed during the reply,
    or in the seconds before it at the same thread count and load), else × 1 /
    ``plain_tps``; a reply with neither is left out. A rate from another moment (a plain
    reply with a longer prompt, on fewer threads) would compare unlike with unlike.
    """
    plain_s: dict[SpecMode, float] = {}
    seconds: dict[SpecMode, float] = {}
    tokens: dict[SpecMode, int] = {}
    for o in observations:
        if o.mode is SpecMode.OFF or o.emitted <= 0 or o.decode_time <= 0:
            continue
        step = o.plain_step_time or (1.0 / plain_tps if plain_tps else None)
        if step is None:
            continue
        plain_s[o.mode] = plain_s.get(o.mode, 0.0) + o.emitted * step
        seconds[o.mode] = seconds.get(o.mode, 0.0) + o.decode_time
        tokens[o.mode] = tokens.get(o.mode, 0) + o.emitted
    return {mode: (plain_s[mode] / seconds[mode], n) for mode, n in tokens.items()}


def auto_ks(speculation: SpeculationConfig) -> tuple[int, ...]:
    """The draft lengths auto may choose: :data:`AUTO_KS` within [draft_min, draft_max]
    of the configuration, else draft_max alone."""
    return tuple(k for k in AUTO_KS
                 if speculation.draft_min <= k <= speculation.draft_max) or (speculation.draft_max,)


def estimate_drafters(
    session: Session,
    turns: Sequence[tuple[Sequence[int], Sequence[int]]],
    observations: Sequence[ReplyObservation],
    speculation: SpeculationConfig,
) -> list[DrafterEstimate]:
    """Every candidate drafter's figures for this conversation.

    Args:
        turns: (prompt tokens, reply tokens) of the conversation's earlier replies.
        observations: the statistics of those replies (any drafter).
        speculation: the auto configuration (its draft_max caps k; n-gram sizes, suffix
            settings and draft_p_min are used as given).

    Times the target passes the estimates need once per session
    (:meth:`Session.measure_pass_times`) and the draft step when a draft is loaded.
    """
    ks = auto_ks(speculation)
    session.measure_pass_times([1] + [k + 1 for k in ks])
    t1 = session.pass_time(1)
    plain_tps = session.last_plain_decode_tps or (1.0 / t1 if t1 else None)
    measured = measured_speedups(observations, plain_tps)

    def with_measured(mode: SpecMode, predicted: dict[int, float], optimistic: bool = False
                      ) -> DrafterEstimate:
        m = measured.get(mode)
        own = [o for o in observations if o.mode is mode and o.emitted > 0]
        return DrafterEstimate(mode, predicted, optimistic,
                               m[0] if m else None, m[1] if m else 0,
                               measured_replies=len(own),
                               measured_verified=sum(o.verified for o in own),
                               measured_accepted=sum(o.accepted for o in own))

    out: list[DrafterEstimate] = []
    candidates = auto_candidates()
    for kind in kinds():  # the model-free drafters Auto may pick, replayed
        if kind.replay is None or kind.mode not in candidates:
            continue
        predicted: dict[int, float] = {}
        replayed: dict[int, ReplayCounts] = {}
        # replay_reply verifies every draft token, as a fixed k does, so it replays a
        # fixed k's drafter (suffix lookup's adaptive drafts run past its match-length
        # cap for a policy to cut; verified whole they would be priced far too low)
        whole = speculation.with_changes(adaptive=False)
        for k in ks:
            total = ReplayCounts()
            index = SuffixIndex()
            for prompt, reply in turns:
                drafter = kind.replay(whole, index)
                total = total + replay_reply(drafter, prompt, reply, k)
                index.add_reply(reply)
            speedup = _replay_speedup(total, session.pass_time)
            if speedup is not None:
                predicted[k] = speedup
                replayed[k] = total
        out.append(dataclasses.replace(with_measured(kind.mode, predicted), replayed=replayed,
                                       replayed_replies=len(turns)))

    t_draft = session.draft_step_time() if session.draft_model is not None else None
    # a draft model pays a forward pass per draft token, so its long drafts rarely pay:
    # it is priced at k ≤ DRAFT_MODEL_AUTO_K_MAX only (the model-free drafters go to 16)
    draft_ks = tuple(k for k in ks if k <= DRAFT_MODEL_AUTO_K_MAX) or ks[:1]
    if t_draft is not None and t1:
        verified = sum(o.verified for o in observations if o.mode is SpecMode.DRAFT_MODEL)
        accepted = sum(o.accepted for o in observations if o.mode is SpecMode.DRAFT_MODEL)
        alpha = accepted / verified if verified else 1.0
        predicted = {}
        for k in draft_ks:
            tk = session.pass_time(k + 1)
            if tk:
                predicted[k] = round_rate(alpha, k, tk, t_draft) * t1
        out.append(with_measured(SpecMode.DRAFT_MODEL, predicted, optimistic=not verified))
    if t1:
        out.extend(dataclasses.replace(with_measured(e.mode, dict(e.predicted)),
                                       prior_acceptance=e.prior_acceptance,
                                       cost_ratio=e.cost_ratio,
                                       cost_from_replies=e.cost_from_replies)
                   for e in head_estimates(session, observations, draft_ks, t1))
    return out


def head_estimates(session: Session, observations: Sequence[ReplyObservation],
                   ks: Sequence[int], t1: float) -> list[DrafterEstimate]:
    """The drafters that run on heads the target carries or on a loaded MTP assistant
    (MTP), priced E(α, k) · t1 / (t(k + 1) + k · c · t1), t in seconds from the
    session's measured pass times.

    α and c are those measured over the drafter's replies in ``observations`` (α:
    accepted / verified; c: the mean of its replies' measured ratios). While α is
    unmeasured, it is the drafter's prediction before a load
    (:attr:`app.engine.drafter_kinds.DrafterKind.predict`, for the target's own heads
    or the loaded assistant's pair, as the load check timed them) or else its declared
    prior (:attr:`app.options.DrafterInfo.prior_acceptance`), and c is its replies' or
    else the prediction's; such a prior is priced only at the drafter's
    default k (:attr:`~app.options.DrafterInfo.default_k`, or the prediction's k: at
    most one per chained head), the draft length it was published for. Measured, it is
    priced at each k in ``ks`` capped at the drafter's longest draft
    (:func:`app.options.mtp_draft_limit`). A drafter Auto may not pick, that the target
    cannot use (:func:`drafter_unusable`) or that lacks α or c is left out."""
    out: list[DrafterEstimate] = []
    assistant = session.assistant_model is not None
    limit = mtp_draft_limit(session.target.n_layer_nextn, assistant=assistant)
    for kind in kinds():
        if (kind.info.needs is not DrafterNeeds.MTP_HEAD or kind.mode not in auto_candidates()
                or drafter_unusable(kind.info, session.target, assistant=assistant) is not None):
            continue
        own = [o for o in observations if o.mode is kind.mode and o.emitted > 0]
        verified = sum(o.verified for o in own)
        costs = [o.draft_cost_ratio for o in own if o.draft_cost_ratio is not None]
        # the target's own heads, or the loaded assistant's pair (as the load check ran)
        prior = (kind.predict(session.target.path, session.target.n_gpu_layers_requested,
                              assistant=session.assistant_model.path
                              if session.assistant_model is not None else None)
                 if kind.predict is not None else None)
        c = sum(costs) / len(costs) if costs else (prior.cost_ratio if prior else None)
        alpha = (sum(o.accepted for o in own) / verified if verified
                 else (prior.acceptance_rate if prior else kind.info.prior_acceptance))
        if c is None or alpha is None or not ks:
            continue
        if verified:
            priced = sorted({min(k, limit) if limit is not None else k for k in ks})
        else:
            default = prior.k if prior else kind.info.default_k
            priced = [min(default, limit or default, max(ks))]
        predicted = {}
        for k in priced:
            tk = session.pass_time(k + 1)
            if tk:
                predicted[k] = round_rate(alpha, k, tk, c * t1) * t1
        out.append(DrafterEstimate(kind.mode, predicted,
                                   prior_acceptance=None if verified else alpha,
                                   cost_ratio=c, cost_from_replies=bool(costs)))
    return out


def resolve_auto(
    session: Session,
    turns: Sequence[tuple[Sequence[int], Sequence[int]]],
    observations: Sequence[ReplyObservation],
    speculation: SpeculationConfig,
) -> tuple[SpeculationConfig, AutoChoice]:
    """The concrete configuration for the next reply and the choice behind it (the
    configuration's other fields are kept; ``adaptive`` stays as given)."""
    choice = choose_drafter(estimate_drafters(session, turns, observations, speculation),
                            prior_k=max(auto_ks(speculation)))
    if choice.mode is SpecMode.OFF:
        return speculation.with_changes(mode=SpecMode.OFF), choice
    return speculation.with_changes(mode=choice.mode, draft_max=choice.draft_max), choice
