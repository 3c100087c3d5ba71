"""The recent requests of the local API: what ``GET /tandem/requests`` shows.

:class:`RequestLog` keeps the last :data:`KEEP` requests the server accepted (newest
first), each an :class:`ApiRequestRecord` updated as its job runs and finished with its
outcome; it is thread-safe (the server records from its job threads and its event loop).
Refused requests (bad input, a full queue) never reach the model and are counted, not
listed. The window follows the API's replies from the service's events instead
(:mod:`app.api.traffic`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from app.engine.reply import ReplyRecord
from app.engine.stats import SpecStats

#: requests kept in the log
KEEP = 50


@dataclass(frozen=True, slots=True)
class ApiRequestRecord:
    """One request that reached the model.

    ``job_id``: the service job that ran it; ``endpoint``: ``chat`` or ``completion``;
    ``received``: wall-clock time it arrived (``time.time()``); ``status``: ``queued``,
    ``running``, ``done``, ``failed`` or ``cancelled`` (the client disconnected or the
    server stopped); ``disconnected``: the client went away before the answer was complete;
    ``disconnected_at``: wall-clock time the server learned it (and cancelled the job);
    ``ended``: wall-clock time the job ended (None until then).
    """

    job_id: int
    endpoint: str
    stream: bool
    received: float
    status: str = "queued"
    reply: ReplyRecord | None = None
    error: str | None = None
    disconnected: bool = False
    disconnected_at: float | None = None
    ended: float | None = None

    @property
    def finish_reason(self) -> str | None:
        """The engine's (``stop``, ``length``, ``cancelled``), None until done."""
        return self.reply.reason if self.reply is not None else None

    @property
    def stats(self) -> SpecStats | None:
        """The reply's final statistics, None until done."""
        return self.reply.stats if self.reply is not None else None

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
            "disconnected_at": self.disconnected_at,
            "ended": self.ended,
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

    def disconnect(self, job_id: int) -> None:
        """Record that the client of ``job_id`` went away, and when (first time only)."""
        with self._lock:
            for i, r in enumerate(self._records):
                if r.job_id == job_id and not r.disconnected:
                    self._records[i] = replace(r, disconnected=True, disconnected_at=time.time())
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
