"""Frozen dataclasses carried by the worker's signals and requests.

Everything that crosses between the GUI thread and the generation worker's thread is one
of these (or an engine event, which is frozen too), so neither side can mutate what the
other holds. ``request_id`` ties stream events to the reply that asked for them: events
from a reply the window no longer waits for are dropped.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from app.engine.chat import ChatMessage
from app.engine.events import Finished, TextDelta
from app.engine.session import SessionConfig
from app.engine.stats import SpecStats
from app.options import SamplingParams, SpeculationConfig


@dataclass(frozen=True, slots=True)
class UserError:
    """A problem to show the user: a title, a sentence, and for bugs where the details went.

    ``level``: ``error`` (red) or ``warning`` (amber). ``detail``: traceback text, written
    to the log only, never shown in the window.
    """

    title: str
    message: str
    level: str = "error"
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """Load a target (and optional draft). ``cancel``: set it to cancel the load."""

    config: SessionConfig
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)


@dataclass(frozen=True, slots=True)
class LoadProgress:
    """Loading progress, 0..1, and what is being loaded."""

    fraction: float
    what: str


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What is loaded and where its layers run.

    ``n_gpu_layers`` of ``n_layer`` run on the GPU; 0 means CPU only, and ``cpu_reason``
    says why. ``uses_fallback_template``: the GGUF has no chat template (a base model), so
    a plain "User:/Assistant:" transcript is used; ``notes`` are sentences for the user
about the load (a template that could not be used, a context length that was lowered). ``load_seconds``: wall time of the load.
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


@dataclass(frozen=True, slots=True)
class DraftRequest:
    """Load (path) or unload (None) the draft model without reloading the target."""

    path: Path | None


@dataclass(frozen=True, slots=True)
class DraftChanged:
    """The draft model now loaded (None: none)."""

    path: Path | None
    name: str | None


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    """One reply: the conversation so far, sampling and speculation for this reply."""

    request_id: int
    messages: tuple[ChatMessage, ...]
    sampling: SamplingParams
    speculation: SpeculationConfig
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)


@dataclass(frozen=True, slots=True)
class TextStreamed:
    """Reply text released by the engine (one or more deltas of one round)."""

    request_id: int
    deltas: tuple[TextDelta, ...]


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    """A statistics snapshot of the reply in progress."""

    request_id: int
    stats: SpecStats


@dataclass(frozen=True, slots=True)
class ReplyFinished:
    """The reply ended (stop, length or cancelled) with its final statistics.

    ``plain_decode_tps``: decode tok/s of the latest plain reply of this target in this
    run of the app (None until there is one): the basis of "measured speedup".
    """

    request_id: int
    finished: Finished
    plain_decode_tps: float | None


@dataclass(frozen=True, slots=True)
class ReplyFailed:
    """Generation failed before finishing; ``error`` says why."""

    request_id: int
    error: UserError


@dataclass(frozen=True, slots=True)
class DemoPrepared:
    """The bundled demo model was written to ``path``."""

    path: Path
