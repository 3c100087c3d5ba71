"""The recent requests of the local API: what ``GET /tandem/requests`` and the window show.

:class:`RequestLog` keeps the last :data:`KEEP` requests the server accepted (newest
first), each an :class:`ApiRequestRecord` updated as its job runs and finished with its
outcome; it is thread-safe (the server records from its job threads, the window reads on
the GUI thread). Refused requests (bad input, a full queue) never reach the model and
are counted, not listed. :class:`ApiTrafficFollower` picks the API's replies out of the
service's event stream for the window (its gauge and its list of recent requests).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from app.chat.events import (
    JobDone,
    JobFailed,
    JobStarted,
    ReplyResult,
    ReplyStats,
    ReplyStreamed,
)
from app.engine.stats import SpecStats

#: requests kept in the log
KEEP = 50


@dataclass(frozen=True, slots=True)
class ApiRequestRecord:
    """One request that reached the model.

    ``job_id``: the service job that ran it; ``endpoint``: ``chat`` or ``completion``;
    ``received``: wall-clock time it arrived (``time.time()``); ``status``: ``queued``,
    ``running``, ``done``, ``failed`` or ``cancelled`` (the client disconnected or the
    server stopped); ``finish_reason``: the engine's (``stop``, ``length``,
    ``cancelled``), None until done; ``stats``: the final (or latest) statistics;
    ``disconnected``: the client went away before the answer was complete.
    """

    job_id: int
    endpoint: str
    stream: bool
    received: float
    status: str = "queued"
    finish_reason: str | None = None
    stats: SpecStats | None = None
    error: str | None = None
    disconnected: bool = False

    @property
    def tokens(self) -> int:
        return self.stats.emitted if self.stats is not None else 0

    @property
    def decode_tps(self) -> float | None:
        return self.stats.decode_tps if self.stats is not None else None

    @property
    def acceptance_rate(self) -> float | None:
        return self.stats.acceptance_rate if self.stats is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "endpoint": self.endpoint,
            "stream": self.stream,
            "received": self.received,
            "status": self.status,
            "finish_reason": self.finish_reason,
            "completion_tokens": self.tokens,
            "predicted_per_second": self.decode_tps,
            "acceptance_rate": self.acceptance_rate,
            "mode": self.stats.mode.value if self.stats is not None else None,
            "error": self.error,
            "disconnected": self.disconnected,
        }


class RequestLog:
    """Thread-safe log of recent API requests, with counters of refusals."""

    def __init__(self, keep: int = KEEP) -> None:
        self._lock = threading.Lock()
        self._records: deque[ApiRequestRecord] = deque(maxlen=keep)
        self.refused = 0
        self.finished = threading.Condition(self._lock)

    def add(self, job_id: int, endpoint: str, stream: bool) -> None:
        with self._lock:
            self._records.appendleft(ApiRequestRecord(job_id, endpoint, stream, time.time()))

    def update(self, job_id: int, **changes: Any) -> None:
        """Change fields of the record of ``job_id`` (ignored once it left the log)."""
        with self._lock:
            for i, r in enumerate(self._records):
                if r.job_id == job_id:
                    self._records[i] = replace(r, **changes)
                    if changes.get("status") in ("done", "failed", "cancelled"):
                        self.finished.notify_all()
                    return

    def count_refused(self) -> None:
        with self._lock:
            self.refused += 1

    def get(self, job_id: int) -> ApiRequestRecord | None:
        with self._lock:
            return next((r for r in self._records if r.job_id == job_id), None)

    def records(self) -> list[ApiRequestRecord]:
        """Newest first."""
        with self._lock:
            return list(self._records)


# -- following the API's replies in the service's event stream (for the window) --------
@dataclass(frozen=True, slots=True)
class ApiReplyBegan:
    """An API job left the queue and runs: ``endpoint`` is ``chat`` or ``completion``."""

    job_id: int
    endpoint: str


@dataclass(frozen=True, slots=True)
class ApiReplyTokens:
    """``n_tokens`` reply tokens existed at ``t`` (seconds since the request started)."""

    job_id: int
    t: float
    n_tokens: int


@dataclass(frozen=True, slots=True)
class ApiReplyStatsChanged:
    """The latest statistics of the running API reply."""

    job_id: int
    stats: SpecStats


@dataclass(frozen=True, slots=True)
class ApiReplyEnded:
    """An API job ended. ``stats`` is None when it failed (``error`` says why)."""

    job_id: int
    endpoint: str
    ended: float
    finish_reason: str
    stats: SpecStats | None
    plain_decode_tps: float | None = None
    error: str | None = None

    @property
    def tokens(self) -> int:
        return self.stats.emitted if self.stats is not None else 0


ApiTrafficUpdate = ApiReplyBegan | ApiReplyTokens | ApiReplyStatsChanged | ApiReplyEnded


class ApiTrafficFollower:
    """Picks the API's replies out of the chat service's events, for a window that shows
    them (its own controller ignores jobs it did not submit). Feed it every event;
    :meth:`handle` returns what changed for API traffic, or None."""

    def __init__(self) -> None:
        self._jobs: dict[int, str] = {}

    @property
    def active(self) -> bool:
        """Whether an API reply is running now."""
        return bool(self._jobs)

    def handle(self, event: object) -> ApiTrafficUpdate | None:
        if isinstance(event, JobStarted):
            if event.origin == "api" and event.kind in ("reply", "completion"):
                endpoint = "chat" if event.kind == "reply" else "completion"
                self._jobs[event.job_id] = endpoint
                return ApiReplyBegan(event.job_id, endpoint)
            return None
        job_id = getattr(event, "job_id", None)
        if job_id not in self._jobs:
            return None
        if isinstance(event, ReplyStreamed) and event.deltas:
            last = event.deltas[-1]
            return ApiReplyTokens(job_id, last.t, last.n_tokens)
        if isinstance(event, ReplyStats):
            return ApiReplyStatsChanged(job_id, event.stats)
        if isinstance(event, JobDone):
            endpoint = self._jobs.pop(job_id)
            if isinstance(event.value, ReplyResult):
                fin = event.value.finished
                return ApiReplyEnded(job_id, endpoint, time.time(), fin.reason, fin.stats,
                                     event.value.plain_decode_tps)
            return ApiReplyEnded(job_id, endpoint, time.time(), "error", None, None,
                                 "no result")
        if isinstance(event, JobFailed):
            endpoint = self._jobs.pop(job_id)
            return ApiReplyEnded(job_id, endpoint, time.time(), "error", None, None,
                                 event.error.message)
        return None
