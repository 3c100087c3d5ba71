"""The ASGI application of the local API: routes, security, and jobs on the chat service.

:func:`create_app` builds a Starlette application over a
:class:`~app.chat.service.ChatService` (the window's own, or the one ``python -m app
serve`` loaded). Each generation request becomes one job of that service
(``service.reply`` / ``service.complete`` with ``origin="api"``), so it waits in the same
bounded queue as the window's replies and runs alone on the model. A thread per request
pumps the job's events (:meth:`Job.events <app.chat.service.Job.events>`) into the event
loop, where they become one JSON answer or server-sent events (sse-starlette's
``EventSourceResponse``, ending with ``data: [DONE]``).

Answers and refusals:

* a full queue (:class:`~app.chat.service.QueueFullError`) → 429 with ``Retry-After``;
  no model loaded or the service shutting down → 503 with ``Retry-After``;
* bad input → OpenAI's error JSON (:mod:`app.api.protocol`) with 400, 401, 404, 413
  or 415; a prompt longer than the context → 400 ``context_length_exceeded``
  (the job's :class:`~app.errors.ContextOverflowError`); a bug → 500 with one sentence,
  its traceback in the log only;
* a client that disconnects cancels its job (:meth:`Job.cancel`): the engine stops
  within one round. Starlette's receive channel reports ``http.disconnect`` (uvicorn sets
  it when the connection is lost); a stream learns it from sse-starlette's disconnect
  listener, a non-streamed request (and a stream still waiting for its first token)
  from a watcher task on the same channel.

Security: a request body limit (413, applied while the body is read), POST
bodies must be ``application/json`` (so a web page cannot send one without a CORS
preflight), CORS only for the origins given, an API key compared in constant time
(``hmac.compare_digest``) when one is set, and on a loopback address a ``Host`` check
against DNS rebinding. Requests name no files and load no models.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import statistics
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.protocol import (
    ApiError,
    GenerationRequest,
    openai_finish_reason,
    parse_chat_request,
    parse_completion_request,
    tandem_figures,
    timings,
    usage,
)
from app.api.traffic import RequestLog
from app.chat.events import (
    DraftChanged,
    JobDone,
    JobFailed,
    JobStarted,
    ModelInfo,
    ReplyResult,
    ReplyStats,
    ReplyStreamed,
)
from app.chat.service import ChatService, Job, QueueFullError
from app.errors import ContextOverflowError, ModelNotLoadedError, TandemError
from app.options import SamplingParams, SpecMode, SpeculationConfig

log = logging.getLogger(__name__)

#: the default request body limit, bytes (a 32k-token conversation is about 130 KB)
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
#: seconds a stalled client may take to accept one chunk before its stream is dropped
SEND_TIMEOUT_S = 60.0

_LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


class ApiSettings(BaseModel):
    """How the API serves: defaults for requests and the security settings.

    Fields:
        sampling, speculation: used where a request does not say (a request's
            ``speculation`` object is applied over this one).
        api_key: required as ``Authorization: Bearer KEY`` on every route but
            ``/health`` when set.
        cors_origins: origins allowed to call from a browser (none: CORS off).
        max_body_bytes: the request body limit (413 above it).
        loopback_only: the server listens on a loopback address: requests must name a
            loopback ``Host`` (against DNS rebinding).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    sampling: SamplingParams = SamplingParams()
    speculation: SpeculationConfig = SpeculationConfig()
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1024)
    loopback_only: bool = True


def model_id(info: ModelInfo) -> str:
    """The id of the loaded target in ``/v1/models``: its file name without ``.gguf``."""
    name = info.target_path.name
    return name[:-5] if name.lower().endswith(".gguf") else name


@dataclass
class ApiState:
    """What the routes share: the service, the settings, the loaded model (kept up to
    date from the service's load/draft/unload events), and the request log."""

    service: ChatService
    settings: ApiSettings
    model: ModelInfo | None
    log: RequestLog = field(default_factory=RequestLog)
    durations: list[float] = field(default_factory=list)
    loaded_at: int = field(default_factory=lambda: int(time.time()))

    def on_event(self, event: object) -> None:
        """Follow loads and unloads made by anyone (the window's model bar included)."""
        if isinstance(event, JobDone):
            if event.kind == "load" and isinstance(event.value, ModelInfo):
                self.model, self.loaded_at = event.value, int(time.time())
            elif event.kind == "unload":
                self.model = None
            elif event.kind == "draft" and isinstance(event.value, DraftChanged) and self.model:
                self.model = replace(self.model, draft_path=event.value.path,
                                     draft_name=event.value.name)
        elif isinstance(event, JobFailed) and event.kind == "load":
            self.model = None  # the old session was closed before loading the new one

    def retry_after(self, ahead: int) -> int:
        """Seconds until the queue has likely moved on: ``ahead`` jobs (plus the running
        one) times the median duration of recent API jobs; 1 … 120, 5 without history."""
        if not self.durations:
            return 5
        est = (ahead + 1) * statistics.median(self.durations[-20:])
        return int(min(120, max(1, math.ceil(est))))


# -- errors as JSON -------------------------------------------------------------------
def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


async def _http_exception(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    if status == 413:
        return error_response(ApiError(413, "The request body is larger than the server's "
                                       "limit.", code="request_too_large"))
    kind = {404: "not_found_error", 405: "invalid_request_error"}.get(status,
                                                                       "invalid_request_error")
    return error_response(ApiError(status, str(exc.detail), type=kind))


async def _server_error(_request: Request, exc: Exception) -> Response:
    log.error("the API failed", exc_info=exc)
    return error_response(ApiError(500, f"Internal error ({type(exc).__name__}); the details "
                                   "are in the server's log.", type="server_error"))


class ApiKeyMiddleware:
    """Every route but ``/health`` needs ``Authorization: Bearer KEY`` (401 otherwise).
    The key is compared with :func:`hmac.compare_digest`, in constant time."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health" \
                and scope.get("method") != "OPTIONS":
            given = b""
            for name, value in scope.get("headers", []):
                if name == b"authorization":
                    given = value
            scheme, _, token = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self._key):
                response = error_response(ApiError(
                    401, "Invalid or missing API key: send 'Authorization: Bearer KEY'.",
                    type="authentication_error", code="invalid_api_key"))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# -- the job's events on the event loop -----------------------------------------------
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


async def _with_disconnect(request: Request, job: Job, work: Any) -> Any:
    """Await ``work`` while watching for the client to go away; if it goes first, cancel
    the job and return None."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_until_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        job.cancel()
        raise
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    job.cancel()
    return None


def _failure(event: JobFailed) -> ApiError:
    cause = event.error.cause
    if cause is not None and issubclass(cause, ContextOverflowError):
        return ApiError(400, event.error.message, code="context_length_exceeded",
                        param="messages" if event.kind == "reply" else "prompt")
    if cause is not None and issubclass(cause, ModelNotLoadedError):
        return ApiError(503, event.error.message, type="unavailable_error",
                        code="model_not_loaded", headers={"Retry-After": "5"})
    if cause is not None and issubclass(cause, TandemError):
        return ApiError(400, event.error.message, code="generation_failed")
    return ApiError(500, f"{event.error.title}: {event.error.message}", type="server_error")


# -- the application ------------------------------------------------------------------
Defaults = Callable[[], tuple[SamplingParams, SpeculationConfig]]


def create_app(service: ChatService, settings: ApiSettings | None = None,
               model: ModelInfo | None = None,
               defaults: Defaults | None = None) -> tuple[Starlette, ApiState]:
    """The Starlette application serving ``service``, and its shared state.

    Args:
        service: the chat service whose loaded session answers (it is not shut down
            by the app).
        settings: defaults and security (default :class:`ApiSettings`).
        model: what is loaded now (later loads are followed from the service's events).
        defaults: called for each request, returns the sampling and speculation to use
            where the request does not say (the window's current settings); default
            ``settings.sampling`` and ``settings.speculation``.

    Returns:
        ``(app, state)``. The state follows the service's events from now on;
        :func:`close_app` stops that.
    """
    settings = settings or ApiSettings()
    state = ApiState(service, settings, model)
    unsubscribe = service.subscribe(state.on_event)

    def current_model(requested: str | None = None) -> ModelInfo:
        info = state.model
        if info is None:
            raise ApiError(503, "No model is loaded yet.", type="unavailable_error",
                           code="model_not_loaded", headers={"Retry-After": "5"})
        if requested is not None and requested not in (model_id(info), info.target_path.name):
            raise ApiError(404, f"The model {requested!r} does not exist: this server has "
                           f"{model_id(info)!r} loaded (GET /v1/models).", param="model",
                           type="not_found_error", code="model_not_found")
        return info

    async def read_json_body(request: Request) -> bytes:
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise ApiError(415, "Send the body as JSON with 'Content-Type: application/json'.",
                           code="unsupported_media_type")
        # Starlette's RequestBodyLimitMiddleware answers in plain text whenever the
        # declared length is too large, whatever the app sends, so the limit is applied
        # here, while reading: the declared length first, then the bytes that arrive.
        limit = settings.max_body_bytes
        too_large = ApiError(413, f"The request body is larger than the limit of {limit} "
                             "bytes.", code="request_too_large")
        try:
            declared = int(request.headers.get("content-length", "0"))
        except ValueError:
            declared = 0
        if declared > limit:
            raise too_large
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > limit:
                raise too_large
        return bytes(body)

    async def health(_request: Request) -> Response:
        info = state.model
        queue = {"running": service.running is not None, "waiting": service.waiting,
                 "limit": service.queue_limit}
        if info is None or service.closed:
            return JSONResponse({"status": "no model loaded", "queue": queue}, status_code=503,
                                headers={"Retry-After": "5"})
        return JSONResponse({"status": "ok", "model": model_id(info), "queue": queue})

    async def models(_request: Request) -> Response:
        info = state.model
        data = []
        if info is not None:
            data.append({"id": model_id(info), "object": "model", "created": state.loaded_at,
                         "owned_by": "tandem",
                         "meta": {"n_ctx": info.n_ctx, "draft_model": info.draft_name,
                                  "speculation": (defaults()[1] if defaults is not None
                                                  else settings.speculation
                                                  ).model_dump(mode="json")}})
        return JSONResponse({"object": "list", "data": data})

    async def requests_log(_request: Request) -> Response:
        return JSONResponse({"refused": state.log.refused,
                             "requests": [r.to_dict() for r in state.log.records()]})

    async def chat_completions(request: Request) -> Response:
        return await generate(request, "chat")

    async def completions(request: Request) -> Response:
        return await generate(request, "completion")

    async def generate(request: Request, endpoint: str) -> Response:
        try:
            body = await read_json_body(request)
            info = current_model()
            parse = parse_chat_request if endpoint == "chat" else parse_completion_request
            sampling, speculation = (defaults() if defaults is not None
                                     else (settings.sampling, settings.speculation))
            req = parse(body, sampling, speculation, max_tokens_default=info.n_ctx)
            current_model(req.model)
            if req.speculation.mode is SpecMode.DRAFT_MODEL and info.draft_path is None:
                raise ApiError(400, "'speculation.mode' is 'draft-model' but this server has "
                               "no draft model loaded.", param="speculation.mode",
                               code="invalid_value")
            job = submit(req, endpoint)
        except ApiError as exc:
            state.log.count_refused()
            return error_response(exc)
        return await (stream(request, job, req, info, endpoint) if req.stream
                      else answer(request, job, req, info, endpoint))

    def submit(req: GenerationRequest, endpoint: str) -> Job:
        try:
            if endpoint == "chat":
                job = service.reply(req.messages, req.sampling, req.speculation, origin="api",
                                    batch_s=0.0)
            else:
                assert req.prompt is not None
                job = service.complete(req.prompt, req.sampling, req.speculation,
                                       origin="api", batch_s=0.0)
        except QueueFullError as exc:
            raise ApiError(429, str(exc), type="rate_limit_error", code="queue_full",
                           headers={"Retry-After": str(state.retry_after(exc.waiting))}) from None
        except TandemError as exc:  # shutting down
            raise ApiError(503, str(exc), type="unavailable_error", code="shutting_down",
                           headers={"Retry-After": "5"}) from None
        state.log.add(job.id, endpoint, req.stream)
        return job

    def on_end(job: Job, started: float) -> Callable[[object], None]:
        def record(last: object) -> None:
            state.durations.append(time.monotonic() - started)
            del state.durations[:-50]
            if isinstance(last, JobDone) and isinstance(last.value, ReplyResult):
                fin = last.value.finished
                disconnected = (r := state.log.get(job.id)) is not None and r.disconnected
                state.log.update(job.id, status="cancelled" if fin.reason == "cancelled"
                                 else "done", finish_reason=fin.reason, stats=fin.stats,
                                 disconnected=disconnected)
            elif isinstance(last, JobFailed):
                state.log.update(job.id, status="failed", error=last.error.message)
        return record

    def figures(result: ReplyResult, req: GenerationRequest) -> dict[str, Any]:
        fin = result.finished
        return {"timings": timings(fin.stats),
                "tandem": tandem_figures(fin.stats, req.speculation, finish_reason=fin.reason,
                                         seed=fin.seed, note=fin.note)}

    async def answer(request: Request, job: Job, req: GenerationRequest, info: ModelInfo,
                     endpoint: str) -> Response:
        feed = JobFeed(job, on_end(job, time.monotonic()))

        async def terminal() -> object:
            while True:
                event = await feed.get()
                if isinstance(event, JobStarted):
                    state.log.update(job.id, status="running")
                if isinstance(event, (JobDone, JobFailed)):
                    return event

        event = await _with_disconnect(request, job, terminal())
        if event is None:
            state.log.update(job.id, disconnected=True)
            return Response(status_code=499)  # nobody reads it
        if isinstance(event, JobFailed):
            return error_response(_failure(event))
        assert isinstance(event, JobDone) and isinstance(event.value, ReplyResult)
        result = event.value
        fin = result.finished
        created = int(time.time())
        if endpoint == "chat":
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant",
                                                              "content": fin.text},
                                      "logprobs": None,
                                      "finish_reason": openai_finish_reason(fin.reason)}
            obj, prefix = "chat.completion", "chatcmpl-"
        else:
            choice = {"index": 0, "text": fin.text, "logprobs": None,
                      "finish_reason": openai_finish_reason(fin.reason)}
            obj, prefix = "text_completion", "cmpl-"
        return JSONResponse({"id": prefix + uuid.uuid4().hex, "object": obj, "created": created,
                             "model": model_id(info), "choices": [choice],
                             "usage": usage(fin.stats), **figures(result, req)})

    async def stream(request: Request, job: Job, req: GenerationRequest, info: ModelInfo,
                     endpoint: str) -> Response:
        feed = JobFeed(job, on_end(job, time.monotonic()))

        async def first() -> list[object]:
            """Events up to the first output (or the end): a failure found then (the
            prompt does not fit) still gets its HTTP status."""
            got: list[object] = []
            while True:
                event = await feed.get()
                got.append(event)
                if isinstance(event, JobStarted):
                    state.log.update(job.id, status="running")
                if isinstance(event, (ReplyStreamed, ReplyStats, JobDone, JobFailed)):
                    return got

        head = await _with_disconnect(request, job, first())
        if head is None:
            state.log.update(job.id, disconnected=True)
            return Response(status_code=499)
        if isinstance(head[-1], JobFailed):
            return error_response(_failure(head[-1]))

        cid = ("chatcmpl-" if endpoint == "chat" else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        obj = "chat.completion.chunk" if endpoint == "chat" else "text_completion"
        mid = model_id(info)

        def chunk(text: str | None, finish: str | None = None, first: bool = False,
                  **extra: Any) -> ServerSentEvent:
            if endpoint == "chat":
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
            return _json_event({"id": cid, "object": obj, "created": created, "model": mid,
                                "choices": [choice], **extra})

        async def events() -> AsyncIterator[ServerSentEvent]:
            pending = list(head)
            sent_first = False
            try:
                while True:
                    if not pending:
                        pending.append(await feed.get())
                    pending.extend(feed.ready())  # coalesce what is already there
                    text = "".join(d.text for ev in pending if isinstance(ev, ReplyStreamed)
                                   for d in ev.deltas)
                    end = next((ev for ev in pending if isinstance(ev, (JobDone, JobFailed))),
                               None)
                    pending = []
                    if text or (not sent_first and endpoint == "chat"):
                        yield chunk(text, first=not sent_first)
                        sent_first = True
                    if isinstance(end, JobFailed):
                        yield _json_event(_failure(end).body())
                        yield ServerSentEvent(data="[DONE]")
                        return
                    if isinstance(end, JobDone):
                        result = end.value
                        assert isinstance(result, ReplyResult)
                        fin = result.finished
                        figs = figures(result, req)
                        yield chunk(None, openai_finish_reason(fin.reason), **figs)
                        if req.include_usage:
                            yield _json_event({"id": cid, "object": obj, "created": created,
                                               "model": mid, "choices": [],
                                               "usage": usage(fin.stats), **figs})
                        yield ServerSentEvent(data="[DONE]")
                        return
            finally:
                if not job.done:  # the client went away (sse-starlette cancelled us)
                    state.log.update(job.id, disconnected=True)
                    job.cancel()

        async def on_close(_message: Any) -> None:
            if not job.done:
                state.log.update(job.id, disconnected=True)
                job.cancel()

        return EventSourceResponse(events(), sep="\n", ping=15, send_timeout=SEND_TIMEOUT_S,
                                   client_close_handler_callable=on_close)

    middleware = []
    if settings.loopback_only:
        middleware.append(Middleware(TrustedHostMiddleware,
                                     allowed_hosts=[*_LOOPBACK_HOSTS, "[::1]"],
                                     www_redirect=False))
    if settings.cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                                     allow_methods=["GET", "POST"],
                                     allow_headers=["authorization", "content-type"]))
    if settings.api_key:
        middleware.append(Middleware(ApiKeyMiddleware, api_key=settings.api_key))
    app = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/tandem/requests", requests_log, methods=["GET"]),
        ],
        middleware=middleware,
        exception_handlers={HTTPException: _http_exception, Exception: _server_error},
    )
    app.state.tandem = state
    app.state.unsubscribe = unsubscribe
    return app, state


def close_app(app: Starlette) -> None:
    """Stop following the service's events (the service itself goes on)."""
    app.state.unsubscribe()


def _json_event(data: dict[str, Any]) -> ServerSentEvent:
    import json

    return ServerSentEvent(data=json.dumps(data, ensure_ascii=False, separators=(",", ":")))
