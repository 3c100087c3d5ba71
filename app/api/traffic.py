"""The API's replies as the window follows them, picked out of the chat service's events.

:class:`ApiTrafficFollower` turns the service's events of jobs submitted by the API into
small updates for the window (its gauge and its list of recent requests); the server's
own record of requests is :mod:`app.api.request_log`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.chat.events import JobDone, JobFailed, JobStarted, ReplyStats, ReplyStreamed
from app.engine.reply import ReplyRecord
from app.engine.stats import SpecStats


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
    """An API job ended (``ended``: wall-clock time, ``time.time()``). ``reply``: its
    record, with the request's own sampling and speculation; None when it failed
    (``error`` says why). ``began``: False for a request stopped while it waited in the
    queue (the gauge never followed it)."""

    job_id: int
    endpoint: str
    ended: float
    reply: ReplyRecord | None
    error: str | None = None
    began: bool = True

    @property
    def finish_reason(self) -> str:
        """The engine's finish reason, or ``error``."""
        return self.reply.reason if self.reply is not None else "error"

    @property
    def stats(self) -> SpecStats | None:
        """The reply's final statistics (None when it failed)."""
        return self.reply.stats if self.reply is not None else None

    @property
    def tokens(self) -> int:
        return self.reply.stats.emitted if self.reply is not None else 0


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
        if (isinstance(event, (JobDone, JobFailed)) and job_id not in self._jobs
                and event.origin == "api" and event.kind in ("reply", "completion")):
            # a request stopped while it waited in the queue ends without having started
            return self._ended(event, "chat" if event.kind == "reply" else "completion",
                               began=False)
        if job_id not in self._jobs:
            return None
        if isinstance(event, ReplyStreamed) and event.deltas:
            last = event.deltas[-1]
            return ApiReplyTokens(job_id, last.t, last.n_tokens)
        if isinstance(event, ReplyStats):
            return ApiReplyStatsChanged(job_id, event.stats)
        if isinstance(event, (JobDone, JobFailed)):
            return self._ended(event, self._jobs.pop(job_id))
        return None

    @staticmethod
    def _ended(event: JobDone | JobFailed, endpoint: str, *,
               began: bool = True) -> ApiReplyEnded:
        if isinstance(event, JobFailed):
            return ApiReplyEnded(event.job_id, endpoint, time.time(), None,
                                 event.error.message, began)
        if isinstance(event.value, ReplyRecord):
            return ApiReplyEnded(event.job_id, endpoint, time.time(), event.value, began=began)
        return ApiReplyEnded(event.job_id, endpoint, time.time(), None, "no result", began)
