"""Acceptance figures a remote engine reports, from a response or from its ``/metrics``.

Three sources, merged by :func:`combine`:

* llama-server's ``timings`` in a response: ``draft_n`` (draft tokens) and
  ``draft_n_accepted`` (accepted), for that request only; absent when no draft was made
  (llama.cpp ``tools/server/server-common.cpp``, ``result_timings::to_json``). Tandem's
  own server writes the same names;
* vLLM's ``metrics.speculative_decoding`` in a response (with
  ``--per-request-spec-decode-metrics summary``): counts and the mean acceptance length
  for that request;
* the change of the server's ``/metrics`` counters between just before and just after
  the request (:class:`~app.remote.prometheus.SpecCounters`): drafts, draft tokens,
  accepted tokens and per-position acceptance, but for *every* request the server ran in
  that window. The change is called this request's own only when it equals the
  response's own counts; otherwise it is labelled server-wide.

Definitions (DESIGN.md's words): acceptance rate α = accepted / draft tokens; mean
acceptance length τ = 1 + accepted / drafts (tokens per verification pass that carried a
draft); the acceptance rate at draft position i = accepted at i / drafts (vLLM's
definition of its per-position rate).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.remote.prometheus import MAX_POSITIONS, SpecCounters

FigureScope = Literal["request", "server-wide"]
"""``request``: the figures count this request only. ``server-wide``: they come from the
server's counters and may include other clients' requests that ran at the same time."""

FigureSource = Literal["response", "metrics", "response+metrics"]

@dataclass(frozen=True, slots=True)
class SpeculationFigures:
    """What a server reported about speculation for one request.

    Attributes:
        source: where the counts came from (the response, the ``/metrics`` change, or
            both: the response's counts with the change's drafts and positions).
        scope: whether the counts are this request's own (see :data:`FigureScope`).
        draft_tokens: draft tokens proposed.
        accepted: draft tokens accepted.
        drafts: draft rounds, None when the source does not say.
        accepted_per_pos: accepted tokens at each draft position (0-based); empty when
            unknown.
        reported_mean_acceptance_length: τ as the server computed it (vLLM), else None.
    """

    source: FigureSource
    scope: FigureScope
    draft_tokens: int
    accepted: int
    drafts: int | None = None
    accepted_per_pos: tuple[int, ...] = ()
    reported_mean_acceptance_length: float | None = None

    @property
    def acceptance_rate(self) -> float | None:
        """α = accepted / draft tokens, in [0, 1]; None when no draft token was made."""
        return self.accepted / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """τ, tokens per drafted verification pass: the server's own figure where it
        gives one, else 1 + accepted / drafts; None when the draft rounds are unknown."""
        if self.reported_mean_acceptance_length is not None:
            return self.reported_mean_acceptance_length
        if self.drafts:
            return 1.0 + self.accepted / self.drafts
        return None

    @property
    def mean_draft_length(self) -> float | None:
        """Draft tokens per draft round; None when the rounds are unknown."""
        return self.draft_tokens / self.drafts if self.drafts else None

    @property
    def per_position_rate(self) -> tuple[float, ...]:
        """Acceptance rate at each draft position: accepted at i / drafts (empty when
        the per-position counts or the rounds are unknown)."""
        if not self.drafts or not self.accepted_per_pos:
            return ()
        return tuple(a / self.drafts for a in self.accepted_per_pos)

    def to_dict(self) -> dict[str, Any]:
        """Counts and derived figures, JSON-ready (None where unknown)."""
        return {
            "source": self.source,
            "scope": self.scope,
            "draft_tokens": self.draft_tokens,
            "accepted": self.accepted,
            "drafts": self.drafts,
            "accepted_per_pos": list(self.accepted_per_pos),
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "mean_draft_length": self.mean_draft_length,
            "per_position_rate": list(self.per_position_rate),
        }


#: the largest token or draft count believed for one request or one position (a
#: billion: far past any context window); a larger one is not reported
MAX_COUNT = 10**9


def count(value: Any, *, integer: bool = False) -> int | None:
    """A count a server reported (tokens, drafts), or None where it is not one: not a
    number (a bool, a string, null, NaN, ±Infinity), negative, or larger than
    :data:`MAX_COUNT`. A float is truncated unless ``integer`` (then only a JSON
    integer is taken)."""
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return None
    if not (0 <= value <= MAX_COUNT):  # False for NaN too
        return None
    return int(value)


def from_timings(timings: Mapping[str, Any]) -> SpeculationFigures | None:
    """Figures from llama-server's ``timings`` object (None when it has no ``draft_n``,
    which llama-server omits for a request that drafted nothing)."""
    draft_n = count(timings.get("draft_n"))
    accepted = count(timings.get("draft_n_accepted"))
    if draft_n is None or accepted is None:
        return None
    return SpeculationFigures(source="response", scope="request", draft_tokens=draft_n,
                              accepted=min(accepted, draft_n))


def _first(obj: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if name in obj:
            return obj[name]
    return None


def from_vllm_metrics(metrics: Mapping[str, Any]) -> SpeculationFigures | None:
    """Figures from vLLM's per-request ``metrics.speculative_decoding`` object.

    vLLM 0.32 (``--per-request-spec-decode-metrics summary``; recorded in
    ``tests/remote/data/vllm-0.32.0``) sends ``num_draft_tokens``,
    ``num_accepted_draft_tokens``, ``num_spec_steps`` (verification passes that carried a
    draft), ``num_spec_tokens`` (k), ``mean_acceptance_length``, ``draft_acceptance_rate``
    and ``acceptance_histogram`` (entry j: steps in which exactly j draft tokens were
    accepted). The accepted count at draft position i is the number of steps that
    accepted more than i tokens, ``sum(h[i+1:])``, which is how its ``/metrics``
    per-position counter counts. The names of the ``/metrics`` counters without the
    ``spec_decode_`` prefix (``num_drafts``, ``num_accepted_tokens``,
    ``num_accepted_tokens_per_pos``) are read too. None when the draft and accepted
    counts are missing.
    """
    spec = metrics.get("speculative_decoding")
    if not isinstance(spec, Mapping):
        return None
    draft_tokens = count(_first(spec, "num_draft_tokens", "draft_tokens"))
    accepted = count(_first(spec, "num_accepted_draft_tokens", "num_accepted_tokens",
                            "accepted_tokens"))
    if draft_tokens is None or accepted is None:
        return None
    per_pos_raw = _first(spec, "num_accepted_tokens_per_pos", "accepted_tokens_per_pos")
    per_pos: tuple[int, ...] = ()
    if (isinstance(per_pos_raw, list) and len(per_pos_raw) <= MAX_POSITIONS
            and all(count(v) is not None for v in per_pos_raw)):
        per_pos = tuple(int(v) for v in per_pos_raw)
    else:
        per_pos = _per_pos_from_histogram(spec.get("acceptance_histogram"))
    tau = _first(spec, "mean_acceptance_length")
    return SpeculationFigures(
        source="response", scope="request", draft_tokens=draft_tokens,
        accepted=min(accepted, draft_tokens),
        drafts=count(_first(spec, "num_spec_steps", "num_drafts", "drafts")),
        accepted_per_pos=per_pos,
        reported_mean_acceptance_length=float(tau) if isinstance(tau, (int, float))
        and not isinstance(tau, bool) and 1.0 <= tau <= MAX_POSITIONS + 1 else None,
    )


def _per_pos_from_histogram(histogram: Any) -> tuple[int, ...]:
    """Accepted tokens at each draft position from vLLM's ``acceptance_histogram``
    (``h[j]`` steps accepted exactly j tokens): position i counts ``sum(h[i+1:])``.
    Empty when the histogram is missing, longer than :data:`MAX_POSITIONS` + 1 or not a
    list of counts."""
    if (not isinstance(histogram, list) or len(histogram) > MAX_POSITIONS + 1
            or not all(count(v) is not None for v in histogram)):
        return ()
    counts = [int(v) for v in histogram]
    out: list[int] = []
    tail = sum(counts[1:])
    for c in counts[1:]:
        out.append(tail)
        tail -= c
    return tuple(out)


def from_response(body: Mapping[str, Any]) -> SpeculationFigures | None:
    """Figures from one response object or final stream chunk: llama-server's
    ``timings`` or vLLM's ``metrics`` (None when it carries neither)."""
    timings = body.get("timings")
    if isinstance(timings, Mapping):
        found = from_timings(timings)
        if found is not None:
            return found
    metrics = body.get("metrics")
    if isinstance(metrics, Mapping):
        return from_vllm_metrics(metrics)
    return None


def combine(response: SpeculationFigures | None,
            delta: SpecCounters | None) -> SpeculationFigures | None:
    """The best figures for one request from its response and the ``/metrics`` change.

    * both, and the change counts exactly the response's draft and accepted tokens: the
      change is this request's own, so its drafts and positions join the response's
      counts (scope ``request``);
    * both, but they differ (other clients ran at the same time): the response's counts
      for α, the change's drafts and positions are left out (they are not this
      request's); scope ``request``;
    * only the change: its figures, scope ``server-wide`` (``request`` when the change
      is zero: then nothing, this request included, drafted);
    * only the response: as it is;
    * neither: None (the server reports nothing about speculation).
    """
    if response is not None and delta is not None:
        if (delta.draft_tokens == response.draft_tokens
                and delta.accepted == response.accepted):
            return SpeculationFigures(
                source="response+metrics", scope="request",
                draft_tokens=response.draft_tokens, accepted=response.accepted,
                drafts=response.drafts if response.drafts is not None else delta.drafts,
                accepted_per_pos=response.accepted_per_pos or delta.accepted_per_pos,
                reported_mean_acceptance_length=response.reported_mean_acceptance_length,
            )
        return response
    if response is not None:
        return response
    if delta is not None:
        scope: FigureScope = "request" if delta.draft_tokens == 0 else "server-wide"
        return SpeculationFigures(
            source="metrics", scope=scope, draft_tokens=delta.draft_tokens,
            accepted=delta.accepted, drafts=delta.drafts,
            accepted_per_pos=delta.accepted_per_pos,
        )
    return None


def tokens_per_pass(n_tokens: int, remote: dict[str, Any]) -> float | None:
    """τ of a remote reply over every round, as Tandem defines it for its own replies:
    tokens per target pass. Each pass writes its own token and the draft tokens it
    accepted, so the passes are the reply's tokens less the accepted ones
    (llama-server's ``n_decode_total`` agrees). None without the request's own
    counts (``scope`` "request"), a counted token total (``usage`` or ``timings``) or
    anything drafted.

    Args:
        n_tokens: the reply's tokens.
        remote: the reply's ``stats.extra["remote"]``
            (:func:`app.remote.session.remote_extra`).
    """
    figures = remote.get("figures")
    if not isinstance(figures, dict) or not figures.get("draft_tokens"):
        return None
    accepted = figures.get("accepted")
    if (figures.get("scope") != "request" or not isinstance(accepted, int)
            or remote.get("token_count_source") not in ("usage", "timings")
            or n_tokens <= accepted):
        return None
    return n_tokens / (n_tokens - accepted)

