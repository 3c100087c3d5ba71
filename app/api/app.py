"""The ASGI application of the local API: routes, security, and jobs on the chat service.

:func:`create_app` builds a Starlette application over a
:class:`~app.chat.service.ChatService` (the window's own, or the one ``python -m app
serve`` loaded); the routes are module-level handlers that find what they share in
``request.app.state.tandem`` (an :class:`ApiState`). Each generation request becomes one
job of that service (``service.reply`` / ``service.complete`` with ``origin="api"``), so
it waits in the same bounded queue as the window's replies and runs alone on the model;
:mod:`app.api.replies` answers it as JSON or server-sent events.

Answers and refusals:

* a full queue (:class:`~app.chat.service.QueueFullError`) → 429 with ``Retry-After``;
  no model loaded or the service shutting down → 503 with ``Retry-After``; the
  window's replies running on a remote server → 503 without it (this API serves
  models loaded in Tandem);
* bad input → OpenAI's error JSON (:mod:`app.api.protocol`) with 400, 401, 404, 413
  or 415; a prompt longer than the context → 400 ``context_length_exceeded``
  (the job's :class:`~app.errors.ContextOverflowError`); a bug → 500 with one sentence,
  its traceback in the log only;
* a client that disconnects cancels its job (:meth:`Job.cancel`): the engine stops
  within one round (:mod:`app.api.replies`).

Security: a request body limit (413, applied while the body is read), POST
bodies must be ``application/json`` (so a web page cannot send one without a CORS
preflight), CORS only for the origins given, an API key compared in constant time
when one is set, and on a loopback address a ``Host`` check against DNS rebinding
(:mod:`app.api.security`). Timeouts and the connection limit belong to the HTTP server
(:mod:`app.api.connections`). Requests name no files and load no models.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.api import DEFAULT_MAX_BODY_BYTES
from app.api.protocol import (
    ApiError,
    GenerationRequest,
    parse_chat_request,
    parse_completion_request,
)
from app.api.replies import Reply, answer, error_response, stream
from app.api.request_log import RequestLog
from app.api.security import ApiKeyMiddleware, JsonCORSMiddleware, LoopbackHostMiddleware
from app.chat.events import (
    Disconnected,
    DraftChanged,
    JobDone,
    JobFailed,
    ModelInfo,
    RemoteConnected,
    TargetKept,
    remote_target_name,
)
from app.chat.service import ChatService, Job, QueueFullError
from app.engine.reply import ReplyRecord
from app.errors import TandemError
from app.options import DrafterNeeds, SamplingParams, SpecMode, SpeculationConfig


Defaults = Callable[[], tuple[SamplingParams, SpeculationConfig]]


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
    date from the service's load and draft events), the request log, and where
    request defaults come from (``defaults``; None: the settings').

    ``model`` is None while no local model is loaded; ``remote`` names the remote server
    the window's replies run on instead (the API serves local models only)."""

    service: ChatService
    settings: ApiSettings
    model: ModelInfo | None
    defaults: Defaults | None = None
    log: RequestLog = field(default_factory=RequestLog)
    durations: list[float] = field(default_factory=list)
    loaded_at: int = field(default_factory=lambda: int(time.time()))
    remote: str | None = None
    _kept: int | None = None  # the load job that failed without unloading anything

    def __post_init__(self) -> None:
        model = self.model
        if model is not None and model.remote is not None:
            self.model, self.remote = None, model.target_name

    def on_event(self, event: object) -> None:
        """Follow loads, connects and draft changes made by anyone (the window's model
        bar included); a load that fails before unloading anything
        (:class:`TargetKept`) leaves the model as it was."""
        if isinstance(event, TargetKept):
            self._kept = event.job_id
        elif isinstance(event, JobDone):
            if event.kind == "load" and isinstance(event.value, ModelInfo):
                self.model, self.remote = event.value, None
                self.loaded_at = int(time.time())
            elif event.kind == "load" and isinstance(event.value, RemoteConnected):
                self.model = None
                self.remote = remote_target_name(event.value)
            elif event.kind == "load" and isinstance(event.value, Disconnected):
                self.model, self.remote = None, None
            elif event.kind == "draft" and isinstance(event.value, DraftChanged) and self.model:
                self.model = replace(self.model, draft_path=event.value.path,
                                     draft_name=event.value.name)
        elif isinstance(event, JobFailed) and event.kind == "load":
            if self._kept != event.job_id:  # the old model was unloaded before the failure
                self.model, self.remote = None, None
            self._kept = None

    def retry_after(self, ahead: int) -> int:
        """Seconds until the queue has likely moved on: ``ahead`` jobs (plus the running
        one) times the median duration of recent API jobs; 1 … 120, 5 without history."""
        if not self.durations:
            return 5
        est = (ahead + 1) * statistics.median(self.durations[-20:])
        return int(min(120, max(1, math.ceil(est))))

    def request_defaults(self) -> tuple[SamplingParams, SpeculationConfig]:
        """The sampling and speculation used where a request does not say."""
        if self.defaults is not None:
            return self.defaults()
        return self.settings.sampling, self.settings.speculation

    def current_model(self, requested: str | None = None) -> ModelInfo:
        """The loaded model, checked against the id a request named.

        Raises:
            ApiError: 503 when none is loaded, 404 when ``requested`` is another.
        """
        info = self.model
        if info is None and self.remote is not None:
            raise ApiError(503, f"Tandem's replies run on a remote server ({self.remote}); "
                           "this API serves models loaded in Tandem only: send requests "
                           "to that server, or load a model in Tandem.",
                           type="unavailable_error", code="model_not_loaded")
        if info is None:
            raise ApiError(503, "No model is loaded yet.", type="unavailable_error",
                           code="model_not_loaded", headers={"Retry-After": "5"})
        if requested is not None and requested not in (model_id(info), info.target_path.name):
            raise ApiError(404, f"The model {requested!r} does not exist: this server has "
                           f"{model_id(info)!r} loaded (GET /v1/models).", param="model",
                           type="not_found_error", code="model_not_found")
        return info

    def recorder(self, job: Job) -> Callable[[object], None]:
        """What records the end of ``job`` (its duration, outcome and figures); called on
        the job's feed thread with its terminal event."""
        started = time.monotonic()

        def record(last: object) -> None:
            self.durations.append(time.monotonic() - started)
            del self.durations[:-50]
            if isinstance(last, JobDone) and isinstance(last.value, ReplyRecord):
                record = last.value
                self.log.update(job.id, status="cancelled" if record.reason == "cancelled"
                                else "done", reply=record, ended=time.time())
            elif isinstance(last, JobFailed):
                self.log.update(job.id, status="failed", error=last.error.message,
                                ended=time.time())
        return record


def _state(request: Request) -> ApiState:
    state = request.app.state.tandem
    assert isinstance(state, ApiState)
    return state


# -- errors as JSON -------------------------------------------------------------------
async def _http_exception(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    if status == 413:
        return error_response(ApiError(413, "The request body is larger than the server's "
                                       "limit.", code="request_too_large"))
    kind = "not_found_error" if status == 404 else "invalid_request_error"
    return error_response(ApiError(status, str(exc.detail), type=kind))


async def _server_error(_request: Request, exc: Exception) -> Response:
    # uvicorn logs the traceback (Starlette re-raises after this answer): one per failure
    return error_response(ApiError(500, f"Internal error ({type(exc).__name__}); the details "
                                   "are in the server's log.", type="server_error"))


# -- routes ---------------------------------------------------------------------------
async def health(request: Request) -> Response:
    """``GET /health``: 200 with the model and the queue, 503 while none is loaded."""
    state = _state(request)
    service, info = state.service, state.model
    queue = {"running": service.running is not None, "waiting": service.waiting,
             "limit": service.queue_limit}
    if info is None and state.remote is not None and not service.closed:
        return JSONResponse({"status": f"replies run on a remote server ({state.remote})",
                             "queue": queue}, status_code=503)
    if info is None or service.closed:
        return JSONResponse({"status": "no model loaded", "queue": queue}, status_code=503,
                            headers={"Retry-After": "5"})
    return JSONResponse({"status": "ok", "model": model_id(info), "queue": queue})


async def models(request: Request) -> Response:
    """``GET /v1/models``: the loaded target (none while nothing is loaded), with
    ``meta``: its context window (``n_ctx``, tokens), the draft loaded beside it
    (``draft_loaded``: a request may ask for its drafter), the draft a request drafts
    with by default (``draft_model``) and the default speculation."""
    state = _state(request)
    info = state.model
    data = []
    if info is not None:
        speculation = state.request_defaults()[1]
        # the loaded draft where a request drafts with it by default: the draft model's
        # drafter, an MTP assistant's MTP, and Auto (which may pick it)
        needs = speculation.mode.needs
        drafts = speculation.mode is SpecMode.AUTO or needs is DrafterNeeds.DRAFT_MODEL or (
            needs is DrafterNeeds.MTP_HEAD and info.draft_is_assistant)
        data.append({"id": model_id(info), "object": "model", "created": state.loaded_at,
                     "owned_by": "tandem",
                     "meta": {"n_ctx": info.n_ctx, "draft_loaded": info.draft_name,
                              "draft_model": info.draft_name if drafts else None,
                              "speculation": speculation.model_dump(mode="json")}})
    return JSONResponse({"object": "list", "data": data})


async def requests_log(request: Request) -> Response:
    """``GET /tandem/requests``: the recent requests and the count of refusals."""
    log = _state(request).log
    return JSONResponse({"refused": log.refused,
                         "requests": [r.to_dict() for r in log.records()]})


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions``."""
    return await _generate(request, "chat")


async def completions(request: Request) -> Response:
    """``POST /v1/completions``."""
    return await _generate(request, "completion")


async def read_json_body(request: Request, limit: int) -> bytes:
    """The request body, which must be ``application/json`` of at most ``limit`` bytes.

    Raises:
        ApiError: 415 for another media type, 413 over the limit (the declared length
            first, then the bytes as they arrive).
        ClientDisconnect: the client went away (or its body timed out) while sending.
    """
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise ApiError(415, "Send the body as JSON with 'Content-Type: application/json'.",
                       code="unsupported_media_type")
    # Starlette's RequestBodyLimitMiddleware answers in plain text whenever the
    # declared length is too large, whatever the app sends, so the limit is applied
    # here, while reading: the declared length first, then the bytes that arrive.
    too_large = ApiError(413, f"The request body is larger than the limit of {limit} "
                         "bytes.", code="request_too_large", headers={"Connection": "close"})
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


def _parse(state: ApiState, body: bytes, endpoint: str) -> tuple[GenerationRequest, ModelInfo]:
    info = state.current_model()
    parse = parse_chat_request if endpoint == "chat" else parse_completion_request
    sampling, speculation = state.request_defaults()
    # A request that names no max_tokens stops at the server's Max tokens setting, not at
    # the end of the context: a client that never reads its stream cannot be told from one
    # that reads (its kernel keeps accepting: docs/architecture.md), so what it can hold
    # the only generation slot for is bounded by what the user chose.
    req = parse(body, sampling, speculation, max_tokens_default=min(sampling.max_tokens,
                                                                    info.n_ctx))
    state.current_model(req.model)
    needs = req.speculation.mode.info.needs if req.speculation.mode.info else None
    if needs is DrafterNeeds.DRAFT_MODEL and info.draft_path is None:
        raise ApiError(400, f"'speculation.mode' is '{req.speculation.mode.value}' but this "
                       "server has no draft model loaded.", param="speculation.mode",
                       code="invalid_value")
    return req, info


def _submit(state: ApiState, req: GenerationRequest, endpoint: str) -> Job:
    service = state.service
    try:
        if endpoint == "chat":
            job = service.reply(req.messages, req.sampling, req.speculation, origin="api",
                                batch_s=0.0, continuation=req.continuation)
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


async def _generate(request: Request, endpoint: str) -> Response:
    state = _state(request)
    try:
        body = await read_json_body(request, state.settings.max_body_bytes)
        req, info = _parse(state, body, endpoint)
        job = _submit(state, req, endpoint)
    except ApiError as exc:
        state.log.count_refused()
        return error_response(exc)
    except ClientDisconnect:
        return Response(status_code=499)  # nobody to answer
    reply = Reply(job, req, endpoint, model_id(info), state.log, state.recorder(job))
    return await (stream(request, reply) if req.stream else answer(request, reply))


# -- the application ------------------------------------------------------------------
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
    state = ApiState(service, settings, model, defaults)
    middleware = []
    if settings.loopback_only:
        middleware.append(Middleware(LoopbackHostMiddleware))
    if settings.cors_origins:  # outside the key check, so a browser can read a 401
        middleware.append(Middleware(JsonCORSMiddleware, allow_origins=list(settings.cors_origins),
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
    app.state.unsubscribe = service.subscribe(state.on_event)
    return app, state


def close_app(app: Starlette) -> None:
    """Stop following the service's events (the service itself goes on)."""
    app.state.unsubscribe()
