"""One generation job answered over HTTP: a JSON answer or a server-sent event stream.

A thread per request pumps the job's events (:meth:`Job.events
<app.chat.service.Job.events>`) into the event loop (:class:`JobFeed`), where
:func:`answer` makes them one JSON answer and :func:`stream` server-sent events
(sse-starlette's ``EventSourceResponse``, ending with ``data: [DONE]``).

A client that goes away cancels its job (:meth:`Job.cancel`; the engine stops within
one round). Starlette's receive channel reports ``http.disconnect`` when uvicorn learns
that the connection is lost, or when :mod:`app.api.connections` drops a client that
stopped reading: a stream learns it from sse-starlette's disconnect listener, a
non-streamed request (and a stream still waiting for its first token) from a watcher
task on the same channel.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.protocol import (
    ApiError,
    GenerationRequest,
    prompt_progress,
    tandem_figures,
    timings,
    usage,
)
from app.api.request_log import RequestLog
from app.chat.events import (
    JobDone,
    JobFailed,
    JobStarted,
    PrefillProgressed,
    ReplyStats,
    ReplyStreamed,
)
from app.chat.service import Job
from app.engine.reply import ReplyRecord
from app.errors import (
    ContextOverflowError,
    ModelNotLoadedError,
    TandemError,
    WouldFitByDroppingError,
)

log = logging.getLogger(__name__)

#: seconds sse-starlette lets one chunk wait before it gives up on the stream; the
#: connection's write timeout (:class:`app.api.connections.ConnectionLimits`) is the
#: shorter guard, this one is for an ASGI server without it
SEND_TIMEOUT_S = 60.0
#: seconds between keep-alive comments on a stream
PING_S = 15
#: seconds a stream is given to end by itself when the server is told to stop (its job
#: is cancelled then, so it ends within a round with a ``shutting_down`` error
#: and [DONE]);
#: sse-starlette cuts it after that. Within uvicorn's graceful shutdown
#: (:data:`app.api.server.GRACEFUL_S`).
SHUTDOWN_GRACE_S = 2.5

T = TypeVar("T")


def error_response(error: ApiError) -> JSONResponse:
    """OpenAI's error JSON for ``error``, with its status and headers."""
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


class JobFeed:
    """The events of one job, delivered on the event loop: a thread iterates
    :meth:`Job.events` and hands each event over with ``call_soon_threadsafe``. The
    thread ends with the job's terminal event; ``on_end`` is called there with it."""

    def __init__(self, job: Job, on_end: Callable[[object], None]) -> None:
        self.job = job
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._on_end = on_end
        threading.Thread(target=self._pump, name=f"tandem-api-job-{job.id}", daemon=True).start()

    def _pump(self) -> None:
        last: object = None
        for event in self.job.events():
            last = event
            try:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, event)
            except RuntimeError:  # the event loop has closed: nobody reads any more
                self.job.cancel()
        try:
            self._on_end(last)
        except Exception:
            log.exception("recording an API request failed")

    async def get(self) -> object:
        return await self._queue.get()

    def ready(self) -> list[object]:
        """Events already delivered (without waiting)."""
        out: list[object] = []
        while not self._queue.empty():
            out.append(self._queue.get_nowait())
        return out


async def _until_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _with_disconnect(request: Request, job: Job, work: Awaitable[T]) -> T | None:
    """Await ``work`` while watching for the client to go away; if it goes first, cancel
    the job and return None."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_until_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        job.cancel()
        raise
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    job.cancel()
    return None


def failure(event: JobFailed) -> ApiError:
    """The HTTP error for a job that failed: a prompt over the context is 400
    ``context_length_exceeded``, no model 503, another user-facing error 400, a bug 500."""
    cause = event.error.cause
    if cause is not None and issubclass(cause, ContextOverflowError):
        how = (' To let Tandem drop them, send "context_overflow": "truncate-middle" or '
               '"rolling-window".' if issubclass(cause, WouldFitByDroppingError) else "")
        return ApiError(400, event.error.message + how, code="context_length_exceeded",
                        param="messages" if event.kind == "reply" else "prompt")
    if cause is not None and issubclass(cause, ModelNotLoadedError):
        return ApiError(503, event.error.message, type="unavailable_error",
                        code="model_not_loaded", headers={"Retry-After": "5"})
    if cause is not None and issubclass(cause, TandemError):
        return ApiError(400, event.error.message, code="generation_failed")
    return ApiError(500, f"{event.error.title}: {event.error.message}", type="server_error")


def stopped(record: ReplyRecord) -> ApiError | None:
    """The error for a reply the server itself stopped (a reply whose client went away
    is not answered at all): 503 ``shutting_down``, as a request refused while the
    server stops, since "cancelled" is no finish reason of OpenAI's and a client must
    not take the text for a whole reply. None for a reply that ended by itself
    (``stop``, ``length``)."""
    if record.reason != "cancelled":
        return None
    n = record.stats.emitted
    when = ("this request before it began" if not record.began else
            f"this reply after {n} token{'s' if n != 1 else ''}")
    return ApiError(503, f"Tandem stopped {when}: the server is shutting down. Send the "
                    "request again once it is back.",
                    type="unavailable_error", code="shutting_down",
                    headers={"Retry-After": "5"})


def _figures(record: ReplyRecord) -> dict[str, Any]:
    return {"timings": timings(record.stats), "tandem": tandem_figures(record)}


@dataclass(frozen=True, slots=True)
class Reply:
    """One accepted request on its way to an answer: the job, the parsed request, the
    endpoint (``chat`` or ``completion``), the model id answered, the request log and
    the function that records the job's end there."""

    job: Job
    req: GenerationRequest
    endpoint: str
    model: str
    log: RequestLog
    on_end: Callable[[object], None]

    def client_gone(self) -> None:
        """The client went away before the answer was complete: cancel the job."""
        if not self.job.done:
            self.log.disconnect(self.job.id)
            self.job.cancel()


async def _events_until(feed: JobFeed, reply: Reply,
                        last: tuple[type, ...]) -> list[object]:
    """The job's events up to the first one of a type in ``last`` (included); marks the
    request as running when the job starts."""
    got: list[object] = []
    while True:
        event = await feed.get()
        got.append(event)
        if isinstance(event, JobStarted):
            reply.log.update(reply.job.id, status="running")
        if isinstance(event, last):
            return got


async def answer(request: Request, reply: Reply) -> Response:
    """The whole reply as one JSON answer (``chat.completion`` or ``text_completion``)."""
    feed = JobFeed(reply.job, reply.on_end)
    events = await _with_disconnect(request, reply.job,
                                    _events_until(feed, reply, (JobDone, JobFailed)))
    if events is None:
        reply.client_gone()
        return Response(status_code=499)  # nobody reads it
    event = events[-1]
    if isinstance(event, JobFailed):
        return error_response(failure(event))
    assert isinstance(event, JobDone) and isinstance(event.value, ReplyRecord)
    fin = event.value
    refused = stopped(fin)
    if refused is not None:
        return error_response(refused)
    finish = fin.reason
    if reply.endpoint == "chat":
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant",
                                                          "content": fin.text},
                                  "logprobs": None, "finish_reason": finish}
        obj, prefix = "chat.completion", "chatcmpl-"
    else:
        choice = {"index": 0, "text": fin.text, "logprobs": None, "finish_reason": finish}
        obj, prefix = "text_completion", "cmpl-"
    return JSONResponse({"id": prefix + uuid.uuid4().hex, "object": obj,
                         "created": int(time.time()), "model": reply.model,
                         "choices": [choice], "usage": usage(fin.stats),
                         **_figures(fin)})


@dataclass(frozen=True, slots=True)
class _ChunkFraming:
    """The SSE chunks of one stream in OpenAI's shape (``chat.completion.chunk`` with a
    ``delta``, or ``text_completion`` with ``text``)."""

    endpoint: str
    model: str
    id: str
    created: int

    @property
    def object(self) -> str:
        return "chat.completion.chunk" if self.endpoint == "chat" else "text_completion"

    def text(self, text: str | None, finish: str | None = None, first: bool = False,
             **extra: Any) -> ServerSentEvent:
        if self.endpoint == "chat":
            delta: dict[str, Any] = {}
            if first:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None,
                                      "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None,
                      "finish_reason": finish}
        return self.data({"choices": [choice], **extra})

    def data(self, fields: dict[str, Any]) -> ServerSentEvent:
        return json_event({"id": self.id, "object": self.object, "created": self.created,
                           "model": self.model, **fields})


async def _sse_events(feed: JobFeed, reply: Reply, head: list[object],
                      framing: _ChunkFraming) -> AsyncIterator[ServerSentEvent]:
    """The stream's events: text chunks (what arrived together is sent together), then
    the finish chunk with the figures, the usage chunk when asked, and ``[DONE]``."""
    pending = list(head)
    sent_first = complete = False
    chat = reply.endpoint == "chat"
    try:
        while True:
            if not pending:
                pending.append(await feed.get())
            pending.extend(feed.ready())  # coalesce what is already there
            text = "".join(d.text for ev in pending if isinstance(ev, ReplyStreamed)
                           for d in ev.deltas)
            end = next((ev for ev in pending if isinstance(ev, (JobDone, JobFailed))), None)
            progress = [ev for ev in pending if isinstance(ev, PrefillProgressed)]
            pending = []
            if progress and not text and end is None:
                fields = prompt_progress(progress[-1].done, progress[-1].total,
                                         progress[-1].cached, progress[-1].elapsed)
                yield progress_comment(fields)
                if reply.req.return_progress:
                    yield framing.text(None, first=not sent_first, prompt_progress=fields)
                    sent_first = True
                continue
            if text or (not sent_first and chat):
                yield framing.text(text, first=not sent_first)
                sent_first = True
            if isinstance(end, JobFailed):
                complete = True
                yield json_event(failure(end).body())
                yield ServerSentEvent(data="[DONE]")
                return
            if isinstance(end, JobDone):
                complete = True
                record = end.value
                assert isinstance(record, ReplyRecord)
                refused = stopped(record)
                if refused is not None:
                    yield json_event(refused.body())
                    yield ServerSentEvent(data="[DONE]")
                    return
                figures = _figures(record)
                yield framing.text(None, record.reason, **figures)
                if reply.req.include_usage:
                    yield framing.data({"choices": [], "usage": usage(record.stats),
                                        **figures})
                yield ServerSentEvent(data="[DONE]")
                return
    finally:
        if not complete:  # the stream was cut (sse-starlette cancelled us)
            reply.client_gone()


async def stream(request: Request, reply: Reply) -> Response:
    """The reply as server-sent events. Events up to the first prompt progress, output
    (or the end) are awaited first, so that a failure found then (the prompt does not
    fit) still gets its HTTP status. While the prompt is read, each chunk's progress
    goes out as a comment line (:func:`progress_comment`), and with ``return_progress``
    also as a chunk with llama-server's ``prompt_progress`` object."""
    feed = JobFeed(reply.job, reply.on_end)
    head = await _with_disconnect(request, reply.job, _events_until(
        feed, reply, (PrefillProgressed, ReplyStreamed, ReplyStats, JobDone, JobFailed)))
    if head is None:
        reply.client_gone()
        return Response(status_code=499)
    if isinstance(head[-1], JobFailed):
        return error_response(failure(head[-1]))
    prefix = "chatcmpl-" if reply.endpoint == "chat" else "cmpl-"
    framing = _ChunkFraming(reply.endpoint, reply.model, prefix + uuid.uuid4().hex,
                            int(time.time()))

    async def on_close(_message: Any) -> None:
        reply.client_gone()

    return EventSourceResponse(_sse_events(feed, reply, head, framing), sep="\n",
                               ping=PING_S, send_timeout=SEND_TIMEOUT_S,
                               client_close_handler_callable=on_close,
                               shutdown_grace_period=SHUTDOWN_GRACE_S)


def progress_comment(fields: dict[str, int]) -> ServerSentEvent:
    """An SSE comment line ``: prompt_progress {"total":…,"cache":…,"processed":…,
    "time_ms":…}``: sent on every stream while the prompt is read (clients, the
    ``openai`` one included, skip comment lines, as the SSE standard says)."""
    return ServerSentEvent(comment="prompt_progress " + json.dumps(fields, separators=(",", ":")))


def json_event(data: dict[str, Any]) -> ServerSentEvent:
    """One SSE ``data:`` line holding ``data`` as compact JSON."""
    return ServerSentEvent(data=json.dumps(data, ensure_ascii=False, separators=(",", ":")))
