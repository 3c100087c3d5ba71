"""A fake engine for the chat service, and a view that records what the controller says.

:class:`FakeSession` stands in for :class:`app.engine.session.Session` (simonw/llm's mock
model idea): it replays scripted replies as real engine events (text deltas with their
draft flags, statistics, one ReplyRecord), honours the cancel event once per "round" as the
engine does, and can hold a reply at a gate so a test stops it at a moment it chose —
no sleeps, no timing. :class:`Pump` delivers the service's events to a controller on the
test's thread, as the Qt bridge does on the GUI thread.
"""

from __future__ import annotations

import dataclasses
import itertools
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.catalog.pairing import PairResult
from app.chat.conversation import ChatController
from app.chat.events import ModelInfo
from app.chat.service import ChatService
from app.engine.chat import ChatMessage
from app.engine.context_fit import fit_conversation
from app.engine.events import ContextTrimmed, Event, StatsUpdate, TextDelta
from app.engine.reply import ReplyRecord, ReplyRequest, draft_spans
from app.engine.session import SessionConfig
from app.engine.stats import SpecStats
from app.engine.suffix import SuffixIndex
from app.errors import ModelLoadError, TandemError
from app.options import SamplingParams, SpecMode, SpeculationConfig


@dataclass
class Script:
    """What the fake engine does, shared by every session it opens.

    ``replies``: texts of the next replies, in order (then ``default``); each word is one
    "token", and with speculation on every second word counts as an accepted draft.
    ``gate``: when set, a reply stops after its first word until the gate opens (or the
    reply is cancelled). ``fail_after``: raise this error after the first word.
    ``load_error``: opening a session raises it; ``draft_error``: loading a draft model
    raises it; ``draft_warnings``: the pairing's warnings about a draft that loads.
    ``exact_possible``: False makes an
    exact-verification load fall back with a note, as real weights may. ``calls``: (messages or prompt,
    speculation) of every generation, in order. ``word_s``: seconds each word after the
    first takes, ``first_word_s`` the first (a slow engine; a cancel ends the wait at once).
    """

    replies: list[str] = field(default_factory=list)
    default: str = "a short reply"
    gate: threading.Event | None = None
    fail_after: Exception | None = None
    load_error: Exception | None = None
    draft_error: Exception | None = None
    draft_warnings: tuple[str, ...] = ()
    exact_possible: bool = True
    word_s: float = 0.0
    first_word_s: float = 0.0
    calls: list[tuple[object, SpeculationConfig]] = field(default_factory=list)
    #: the ``continuation`` of every chat generation, in order ("" for a new reply)
    continuations: list[str] = field(default_factory=list)
    at_gate: threading.Event = field(default_factory=threading.Event)

    def next_reply(self) -> str:
        return self.replies.pop(0) if self.replies else self.default


class FakeModel:
    bos = 1
    add_bos = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = path.stem
        self.n_layer = 2

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return [1] + [2 + len(w) for w in text.split()]


class FakeChatFormat:
    uses_fallback = False
    stop: tuple[str, ...] = ()


class FakeSession:
    """Enough of :class:`~app.engine.session.Session` for the service and controller."""

    def __init__(self, config: SessionConfig, script: Script) -> None:
        self.config = config
        self.script = script
        self.target = FakeModel(config.target_path)
        self.draft_model: FakeModel | None = None
        self.assistant_model: FakeModel | None = None  # an MTP assistant: never here
        self.chat_format = FakeChatFormat()
        self.n_ctx = config.n_ctx
        self.n_gpu_layers = 0
        self.exact_verification = config.exact_verification and script.exact_possible
        self.notes: list[str] = []
        self.exact_notes: tuple[str, ...] = ()
        if config.exact_verification and not script.exact_possible:
            self.exact_notes = ("Exact verification needs other weights (a fake engine).",)
            self.notes.extend(self.exact_notes)
        self.closed = False
        self.last_plain_decode_tps: float | None = None
        self.suffix_index = SuffixIndex()

    def set_draft_model(self, path: Path | None, progress: Any = None) -> PairResult | None:
        if path is not None and not Path(path).is_file():
            raise ModelLoadError(f"Model file not found: {path}")
        if path is not None and self.script.draft_error is not None:
            raise self.script.draft_error
        self.draft_model = FakeModel(path) if path is not None else None
        return PairResult(True, (), self.script.draft_warnings) if path is not None else None

    def chat_prompt(self, messages: Sequence[ChatMessage]) -> list[int]:
        """One token per word and one per message (the fake's chat template)."""
        return [t for m in messages for t in self.target.tokenize(m.content)]

    def chat(self, messages: Sequence[ChatMessage], sampling: SamplingParams,
             speculation: SpeculationConfig, cancel: threading.Event | None = None, *,
             continuation: str = "") -> Iterator[Event]:
        """As the engine: the context overflow policy first (the real one, over the fake
        template), then the reply, its record saying what was dropped; ``calls`` records
        the messages kept, ``continuations`` the continuation (the reply is the script's
        next one either way)."""
        self.script.continuations.append(continuation)
        prompt, fit = fit_conversation(messages, self.chat_prompt, self.n_ctx,
                                       sampling.max_tokens, sampling.context_overflow)
        kept = tuple(messages) if fit is None else self._kept(messages, prompt)
        self.script.calls.append((kept, speculation))
        reply = self._reply(sampling, speculation, cancel, tuple(messages))
        if fit is None:
            return reply
        return itertools.chain((ContextTrimmed(fit),), (
            dataclasses.replace(ev, context=fit) if isinstance(ev, ReplyRecord) else ev
            for ev in reply))

    def _kept(self, messages: Sequence[ChatMessage], prompt: list[int]) -> tuple[ChatMessage, ...]:
        """The messages (in order, whole) whose fake prompt is ``prompt``: the system
        messages and the last one kept, one run of messages between them dropped."""
        system = [m for m in messages if m.role == "system"]
        for n in range(len(messages)):
            for i in range(len(messages) - n + 1):
                kept = (*messages[:i], *messages[i + n:])
                if (self.chat_prompt(kept) == prompt and kept[-1:] == tuple(messages[-1:])
                        and all(m in kept for m in system)):
                    return kept
        return tuple(messages)

    def generate(self, prompt: Sequence[int], sampling: SamplingParams,
                 speculation: SpeculationConfig | None = None,
                 cancel: threading.Event | None = None) -> Iterator[Event]:
        spec = speculation or SpeculationConfig()
        self.script.calls.append((tuple(prompt), spec))
        return self._reply(sampling, spec, cancel)

    def _reply(self, sampling: SamplingParams, spec: SpeculationConfig,
               cancel: threading.Event | None,
               messages: tuple[ChatMessage, ...] = ()) -> Iterator[Event]:
        if self.closed:
            raise TandemError("The model has been unloaded.")
        words = self.script.next_reply().split(" ")
        text, ids, times = "", [], []
        pieces: list[tuple[str, bool]] = []
        accepted = verified = 0
        reason = "stop"
        speculating = spec.mode is not SpecMode.OFF
        for i, word in enumerate(words):
            wait = self.script.word_s if i else self.script.first_word_s
            if wait and cancel is not None:
                cancel.wait(wait)
            if cancel is not None and cancel.is_set():
                reason = "cancelled"
                break
            if len(ids) >= sampling.max_tokens:
                reason = "length"
                break
            piece = word if i == 0 else " " + word
            drafted = speculating and i % 2 == 1
            if speculating and i:
                verified += 1
                accepted += drafted
            text += piece
            pieces.append((piece, drafted))
            ids.append(i)
            times.append(0.01 * (i + 1))
            yield TextDelta(piece, drafted, times[-1], len(ids))
            if i == 0:
                yield StatsUpdate(self._stats(spec, ids, accepted, verified))
                if self.script.fail_after is not None:
                    raise self.script.fail_after
                gate = self.script.gate
                if gate is not None:
                    self.script.at_gate.set()
                    while not gate.wait(0.01):
                        if cancel is not None and cancel.is_set():
                            break
        stats = self._stats(spec, ids, accepted, verified)
        if not speculating and reason != "cancelled":
            self.last_plain_decode_tps = stats.decode_tps
        yield ReplyRecord(ReplyRequest(sampling, spec, 1, messages), spec,
                          reason, text, tuple(ids), tuple(times), stats, seed=7,  # type: ignore[arg-type]
                          spans=draft_spans(pieces))

    @staticmethod
    def _stats(spec: SpeculationConfig, ids: list[int], accepted: int, verified: int) -> SpecStats:
        speculating = spec.mode is not SpecMode.OFF
        return SpecStats(mode=spec.mode, draft_max=spec.draft_max if speculating else 0,
                         emitted=len(ids), rounds=len(ids) - accepted, proposed=verified,
                         verified=verified, accepted=accepted, decode_time=0.01 * len(ids),
                         total_time=0.01 * len(ids) + 0.005)

    def close(self) -> None:
        self.closed = True


def fake_opener(script: Script) -> Callable[..., FakeSession]:
    def opener(config: SessionConfig, progress: Callable[[float], bool] | None = None) -> FakeSession:
        for p in (0.0, 0.5, 1.0):
            if progress is not None and not progress(p):
                from app.errors import LoadCancelledError

                raise LoadCancelledError("Loading was cancelled.")
        if script.load_error is not None:
            raise script.load_error
        return FakeSession(config, script)

    return opener


def fake_describe(session: Any, seconds: float) -> ModelInfo:
    draft = session.draft_model
    return ModelInfo(
        target_path=session.config.target_path, target_name=session.target.name,
        draft_path=draft.path if draft else None, draft_name=draft.name if draft else None,
        n_ctx=session.n_ctx, n_layer=2, n_gpu_layers=0, gpu_supported=False,
        cpu_reason="a fake engine", uses_fallback_template=False, load_seconds=seconds,
        notes=tuple(session.notes), exact_verification=session.exact_verification,
        exact_notes=session.exact_notes,
    )


def fake_service(script: Script, **kwargs: Any) -> ChatService:
    return ChatService(opener=fake_opener(script), describe=fake_describe, warm_up=None, **kwargs)


class Pump:
    """The service's events, delivered on the test's thread (as the Qt bridge does)."""

    def __init__(self, service: ChatService) -> None:
        self.events: queue.Queue[object] = queue.Queue()
        self.seen: list[object] = []
        service.subscribe(self.events.put)

    def until(self, controller: ChatController, done: Callable[[], bool],
              timeout: float = 30.0) -> None:
        """Hand events to ``controller`` until ``done()`` (each wait bounded by
        ``timeout`` seconds, so a bug fails the test instead of hanging it)."""
        while not done():
            event = self.events.get(timeout=timeout)
            self.seen.append(event)
            controller.handle(event)

    def drain(self, controller: ChatController) -> None:
        """Deliver what has arrived so far."""
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            self.seen.append(event)
            controller.handle(event)


class RecordingView:
    """A :class:`~app.chat.conversation.ChatView` that records every call by name."""

    def __init__(self, draft_choice: Path | None = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.draft_choice = draft_choice
        self.errors: list[Any] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)

        def record(*args: Any) -> Any:
            self.calls.append((name, args))
            if name == "show_error":
                self.errors.append(args[0])
            if name == "choose_draft_file":
                return self.draft_choice
            return None

        return record
