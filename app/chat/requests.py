"""Frozen dataclasses carried between the race window and its worker thread.

Requests go from the GUI thread to :class:`~app.ui.race.worker.RaceWorker`; results come
back on its signals. ``request_id`` ties a result to the request that asked for it, so a
result the window no longer waits for (stopped, superseded) is dropped. Failures arrive
as a :class:`~app.chat.events.UserError` value on the ``…_finished`` signal, never as an
exception crossing threads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from app.engine.measure.sweep import KSweepResult
from app.engine.chat import ChatMessage
from app.engine.measure.lookup import LookupEstimate
from app.options import SamplingParams, SpeculationConfig
from app.chat.events import UserError
from app.chat.history_source import PastConversation
from app.chat.recording import RaceRecording


@dataclass(frozen=True, slots=True)
class PromptSpec:
    """What to race. With ``messages`` the conversation goes through the model's chat
    template; otherwise ``text`` is a plain completion prompt for base models and a user
    message for models with a chat template (``stop``: stop strings for the plain form).
    ``name``: a label for the prompt ("rename-variable", "this conversation")."""

    text: str
    messages: tuple[ChatMessage, ...] = ()
    stop: tuple[str, ...] = ()
    name: str = ""


@dataclass(frozen=True, slots=True)
class RaceRequest:
    """Race ``prompt`` off vs on. ``warm_up``: first run both modes for two untimed
    tokens (the first generation of a session maps weights in and builds graphs, which
    would slow down whichever lane runs first)."""

    request_id: int
    prompt: PromptSpec
    sampling: SamplingParams
    speculation: SpeculationConfig
    warm_up: bool = True
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)


@dataclass(frozen=True, slots=True)
class RaceProgressed:
    """A run of the race advanced: ``lane`` ("warm-up", "off" or "on") has produced
    ``tokens`` of at most ``max_tokens``. Emitted at most every 0.1 s."""

    request_id: int
    lane: str
    tokens: int
    max_tokens: int


@dataclass(frozen=True, slots=True)
class RaceDone:
    """The race ended: ``recording`` (also when cancelled; None when it failed before any
    run) or ``error``."""

    request_id: int
    recording: RaceRecording | None
    error: UserError | None = None


@dataclass(frozen=True, slots=True)
class SweepRequest:
    """Run ``prompt`` with speculation off and at every k of ``ks`` (``repeat`` runs each,
    after one untimed warm-up run per configuration when ``warm_up``)."""

    request_id: int
    prompt: PromptSpec
    sampling: SamplingParams
    speculation: SpeculationConfig
    ks: tuple[int, ...]
    repeat: int = 1
    warm_up: bool = True
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)


@dataclass(frozen=True, slots=True)
class SweepProgressed:
    """``done`` of ``total`` timed runs finished; the latest was ``label`` at ``decode_tps``."""

    request_id: int
    done: int
    total: int
    label: str
    decode_tps: float | None


@dataclass(frozen=True, slots=True)
class SweepDone:
    """The sweep ended with ``result`` (partial when cancelled) or ``error``."""

    request_id: int
    result: KSweepResult | None
    error: UserError | None = None


@dataclass(frozen=True, slots=True)
class LookupRequest:
    """Estimate prompt lookup's n-gram hit rate over ``conversations`` (``cancel`` is
    checked between conversations)."""

    request_id: int
    conversations: tuple[PastConversation, ...]
    ngram_sizes: tuple[int, ...] = (2, 3, 4, 5)
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)


@dataclass(frozen=True, slots=True)
class LookupDone:
    """The estimate (or ``error``)."""

    request_id: int
    estimate: LookupEstimate | None
    error: UserError | None = None
