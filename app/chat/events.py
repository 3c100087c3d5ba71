"""What the chat service reports: frozen event values, one stream for every consumer.

Every job of :class:`app.chat.service.ChatService` (loading a model, a reply, a race…)
reports through these dataclasses: zero or more progress events, then exactly one
terminal event, :class:`JobDone` (carrying the job's value) or :class:`JobFailed`
(carrying a :class:`UserError`). Each event names its job (``job_id``), so a consumer
keeps the events of the jobs it asked for and ignores the rest. Events are immutable, so
they cross threads as they are: the window receives them through a Qt signal
(:mod:`app.ui.service_bridge`), a server iterates :meth:`Job.events
<app.chat.service.Job.events>` on its own thread. Nothing here imports Qt.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.engine.auto import AutoChoice
from app.engine.context_fit import ContextFit
from app.engine.events import TextDelta
from app.engine.stats import SpecStats
from app.remote.client import ServerInfo

JobKind = Literal[
    "load", "draft", "demo", "reply", "completion", "race", "sweep", "lookup", "task"
]
"""What a job does: load a target (and draft) or connect a remote server, load or unload
the draft, write the demo model, a chat reply (``reply``) or a plain completion (``completion``), a race, a
k sweep, a lookup estimate, or any other work run on the session (``task``)."""


@dataclass(frozen=True, slots=True)
class UserError:
    """A problem to show the user: a title, a sentence, and for bugs where the details went.

    ``level``: ``error`` (red), ``warning`` (amber) or ``info`` (green: something done,
    such as where an export went). ``detail``: traceback text, written
    to the log only, never shown in the window. ``origin``: the kind of work that failed
    (a :data:`JobKind`, or ``history``/``settings``/``download``…), so a consumer can
    treat errors by kind (clear a load error once a load succeeds) instead of by wording.
    ``cause``: the class of the exception behind it (None when none was raised), so a
    consumer can dispatch on the type (the local API answers a
    :class:`~app.errors.ContextOverflowError` with 400, a bug with 500).
    """

    title: str
    message: str
    level: str = "error"
    detail: str | None = None
    origin: str = ""
    cause: type[BaseException] | None = None


@dataclass(frozen=True, slots=True)
class JobStarted:
    """Job ``job_id`` left the queue and runs now. ``origin``: who asked (``window``,
    ``race``, ``api``…), as given when it was submitted."""

    job_id: int
    kind: JobKind
    origin: str


@dataclass(frozen=True, slots=True)
class JobDone:
    """Job ``job_id`` ended and returned ``value``: a :class:`ModelInfo` (load) or a
    :class:`RemoteConnected` (load: a connect), a :class:`Disconnected` (load: a
    disconnect), a :class:`DraftChanged` (draft), a
    :class:`DemoPrepared` (demo), a :class:`~app.engine.reply.ReplyRecord` (reply,
    completion; also when cancelled), a race recording, a k sweep result, a lookup
    estimate, or whatever a ``task`` returned."""

    job_id: int
    kind: JobKind
    origin: str
    value: Any


@dataclass(frozen=True, slots=True)
class JobFailed:
    """Job ``job_id`` raised before it could finish; ``error`` says why in the user's words
    (a cancelled load is a failure with level ``warning``)."""

    job_id: int
    kind: JobKind
    origin: str
    error: UserError


@dataclass(frozen=True, slots=True)
class JobWaiting:
    """Job ``job_id`` waits in the queue: ``ahead`` are the jobs that run before it, the
    running one first, each as (kind, origin). Sent by the worker whenever the queue
    moves while the job waits (a consumer that submitted a job reads its first place
    with :meth:`ChatService.ahead_of <app.chat.service.ChatService.ahead_of>`)."""

    job_id: int
    kind: JobKind
    origin: str
    ahead: tuple[tuple[JobKind, str], ...]


@dataclass(frozen=True, slots=True)
class PrefillProgressed:
    """A reply's prompt processing advanced (before the first chunk and after each):
    ``done`` of ``total`` new prompt tokens read, ``cached`` more taken from the KV cache
    or a saved state, ``elapsed`` seconds so far, ``seconds_left`` the time the rest will
    take (None: not known yet) (:class:`app.engine.events.PrefillProgress`)."""

    job_id: int
    done: int
    total: int
    cached: int
    elapsed: float
    seconds_left: float | None = None


@dataclass(frozen=True, slots=True)
class LoadProgressed:
    """Loading advanced to ``fraction`` (0..1) of ``what``; at most every 50 ms."""

    job_id: int
    fraction: float
    what: str


@dataclass(frozen=True, slots=True)
class ReplyStreamed:
    """Reply text released by the engine since the previous batch: one batch about every
    30 ms (the service's one cadence), each delta with its draft flag and token count."""

    job_id: int
    deltas: tuple[TextDelta, ...]


@dataclass(frozen=True, slots=True)
class ReplyStats:
    """A statistics snapshot of the reply in progress (at most every 0.1 s)."""

    job_id: int
    stats: SpecStats


@dataclass(frozen=True, slots=True)
class ReplyTrimmed:
    """Earlier messages were dropped so that the conversation fits the context window
    (the reply's ``context_overflow`` policy); sent before the reply's first text."""

    job_id: int
    fit: ContextFit


@dataclass(frozen=True, slots=True)
class AutoChosen:
    """Auto chose the drafter and k for this reply (and says why, as figures in
    ``choice.evidence``); sent before the reply's first text."""

    job_id: int
    choice: AutoChoice


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What is loaded and where its layers run.

    ``n_gpu_layers`` of ``n_layer`` run on the GPU; 0 means CPU only, and ``cpu_reason``
    says why. ``uses_fallback_template``: the GGUF has no chat template (a base model), so
    a plain "User:/Assistant:" transcript is used; ``notes`` are sentences for the user
    about the load (a template that could not be used, a context length that was
    lowered). ``load_seconds``: wall time of the load. ``remote``: set when replies run
    on a remote server (then ``target_path`` is the server's model id, not a file, and
    the layer and GPU fields are 0). ``exact_verification``: the target
    was loaded so that verification is exact (asked for and possible with its weights);
    ``exact_notes``: those of ``notes`` that say why it is not, when it was asked for.
    ``nextn_layers``: the multi-token-prediction (nextn) layers the target carries;
    ``draft_is_assistant``: the drafter model is an MTP assistant (the drafter menu and
    the race offer MTP by either: :func:`app.options.drafter_unusable`).
    """

    target_path: Path
    target_name: str
    draft_path: Path | None
    draft_name: str | None
    n_ctx: int
    n_layer: int
    n_gpu_layers: int
    gpu_supported: bool
    cpu_reason: str | None
    uses_fallback_template: bool
    load_seconds: float
    system_info: str = ""
    notes: tuple[str, ...] = ()
    exact_verification: bool = False
    exact_notes: tuple[str, ...] = ()
    remote: RemoteConnected | None = None
    nextn_layers: int = 0
    #: the drafter model is an MTP assistant (Gemma 4's), which drafts as MTP
    draft_is_assistant: bool = False
    #: CPU threads at load (0: unknown, remote), and whether the thread governor picks
    #: them (the setting is Auto) or the user fixed them
    n_threads: int = 0
    threads_auto: bool = True


@dataclass(frozen=True, slots=True)
class RemoteConnected:
    """A remote server replaced the local model: what it is (``info``: engine, version,
    models, speculation method and k where it says) and the ``model`` replies use."""

    info: ServerInfo
    model: str


@dataclass(frozen=True, slots=True)
class Disconnected:
    """The remote server at ``base_url`` (its password hidden) is no longer used; no
    model is loaded."""

    base_url: str


def remote_model_label(model: str) -> str:
    """A remote model id as people read it: a GGUF path's file name (llama-server names
    its model by the path it was started with), any other id as it is (``org/name``)."""
    return model.rsplit("/", 1)[-1] if model.lower().endswith(".gguf") else model


def remote_target_name(connected: RemoteConnected) -> str:
    """The remote model's name as the window shows it: ``model.gguf @ host:port``."""
    host = connected.info.display_url.split("://", 1)[-1]
    return f"{remote_model_label(connected.model)} @ {host}"


def remote_model_info(connected: RemoteConnected, seconds: float) -> ModelInfo:
    """The :class:`ModelInfo` of a remote server's model (``seconds``: connect time)."""
    info = connected.info
    engine = info.engine.value + (f" {info.version}" if info.version else "")
    return ModelInfo(
        target_path=Path(connected.model),
        target_name=remote_target_name(connected),
        draft_path=None, draft_name=None, n_ctx=0, n_layer=0, n_gpu_layers=0,
        gpu_supported=False, cpu_reason=None, uses_fallback_template=False,
        load_seconds=seconds, system_info=engine, remote=connected)


@dataclass(frozen=True, slots=True)
class DraftChanged:
    """The draft model now loaded (None: none); ``assistant``: it is an MTP assistant,
    which drafts as MTP; ``warnings``: the pairing's warnings about the pair (a draft
    nearly as large as the target, which cannot speed it up)."""

    path: Path | None
    name: str | None
    assistant: bool = False
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DraftKept:
    """Sent by a draft change that failed, just before its :class:`JobFailed`: the draft
    model still loaded (``path`` None: none). A file that cannot be read (a broken or
    truncated GGUF) is refused before the loaded draft is touched."""

    job_id: int
    path: Path | None
    name: str | None
    assistant: bool = False


@dataclass(frozen=True, slots=True)
class TargetKept:
    """Sent by a load or a connect that failed before unloading anything, just before
    its :class:`JobFailed`: the model loaded before stays loaded (the new file cannot
    be read or is an MTP assistant, which is no model to chat with; the server could not
    be used)."""

    job_id: int


@dataclass(frozen=True, slots=True)
class DemoPrepared:
    """The bundled demo model was written to ``path``."""

    path: Path

