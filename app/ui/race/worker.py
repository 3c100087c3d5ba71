"""The race window's worker: races, k sweeps and lookup estimates off the GUI thread.

:class:`RaceWorker` lives on one QThread owned by :class:`RaceWorkerHost` for as long as
the race window is open. It uses the :class:`~app.engine.session.Session` the main window
already loaded (the target is never loaded twice), never touches a widget, and reports
through signals with frozen payloads (:mod:`app.chat.requests`). The engine blocks
inside its loop, so stopping goes through each request's ``threading.Event``, which the
engine checks once per round; :meth:`RaceWorkerHost.shutdown` sets them, quits the
thread's event loop and joins it.

The session is shared with the main window's worker. The engine refuses a second
generation while one runs ("A reply is still being generated."): that arrives here as an
error value for the user, not as a crash.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.engine.measure.bench import RunRecord, generate_once
from app.engine.measure.prompts import BenchPrompt, PreparedPrompt, prepare_chat, prepare_prompt
from app.engine.measure.sweep import run_k_sweep
from app.engine.events import Event
from app.engine.measure.lookup import estimate_lookup_hit_rate, model_tokenizer
from app.engine.measure.race import run_race
from app.engine.session import Session
from app.errors import TandemError
from app.options import SpeculationConfig
from app.chat.events import UserError
from app.chat.requests import (
    LookupDone,
    LookupRequest,
    PromptSpec,
    RaceDone,
    RaceProgressed,
    RaceRequest,
    SweepDone,
    SweepProgressed,
    SweepRequest,
)
from app.chat.recording import LaneRecorder, RaceRecording
from app.ui.worker import user_error

log = logging.getLogger(__name__)

#: progress signals at most this often (seconds); the engine reports every token
PROGRESS_INTERVAL = 0.1


def prepare(session: Session, spec: PromptSpec) -> PreparedPrompt:
    """Tokenize ``spec`` for the session's target (see :class:`PromptSpec`)."""
    if spec.messages:
        return prepare_chat(session, spec.messages, name=spec.name)
    if not spec.text.strip():
        raise TandemError("The prompt is empty.")
    return prepare_prompt(session, BenchPrompt(spec.name or "prompt", spec.text, spec.text,
                                               spec.stop))


def drafter_words(session: Session, speculation: SpeculationConfig) -> str:
    """The "on" side in words: "prompt lookup" or "draft model <file>"."""
    if speculation.mode == "draft-model":
        model = session.draft_model
        return f"draft model {model.path.name}" if model is not None else "draft model"
    return "prompt lookup"


class RaceWorker(QObject):
    """Runs the engine for the race window. Slots are invoked through queued signals."""

    race_progressed = Signal(object)
    """RaceProgressed: a run of the race advanced (at most every 0.1 s)."""
    race_finished = Signal(object)
    """RaceDone: the race ended (finished, cancelled or failed)."""
    sweep_progressed = Signal(object)
    """SweepProgressed: one timed run of the k sweep finished."""
    sweep_finished = Signal(object)
    """SweepDone: the k sweep ended (finished, cancelled or failed)."""
    lookup_estimated = Signal(object)
    """LookupDone: the prompt-lookup hit-rate estimate is ready (or failed)."""

    def __init__(self, session: Session) -> None:
        super().__init__()
        self._session = session
        self._warm = False

    def _check_session(self) -> Session:
        session = self._session
        if session.closed:
            raise TandemError("The model was unloaded; open the race again after loading one.")
        # Checked here for a clear message before any work (the engine refuses too).
        if session.busy:
            raise TandemError("A chat reply is being generated; race when it has finished.")
        return session

    @Slot(object)
    def run_race(self, request: RaceRequest) -> None:
        """Race off vs on; always ends with one ``race_finished``."""
        rid = request.request_id
        try:
            session = self._check_session()
            prompt = prepare(session, request.prompt)
            if request.warm_up and not self._warm:
                self._warm_up(session, prompt, request)
            recorders = {"off": LaneRecorder(), "on": LaneRecorder()}
            last_emit = 0.0
            max_tokens = request.sampling.max_tokens

            def on_event(lane: str, ev: Event) -> None:
                nonlocal last_emit
                rec = recorders[lane]
                rec.add(ev)
                now = time.monotonic()
                if now - last_emit >= PROGRESS_INTERVAL:
                    last_emit = now
                    self.race_progressed.emit(RaceProgressed(rid, lane, rec.tokens, max_tokens))

            result = run_race(session, prompt, request.sampling, request.speculation,
                              request.cancel, on_event=on_event)
            recording = RaceRecording(
                result=result,
                off=recorders["off"].finish(result.off),
                on=recorders["on"].finish(result.on),
                model_name=session.config.target_path.name,
                drafter=drafter_words(session, request.speculation),
                prompt_text=_prompt_words(request.prompt),
                max_tokens=max_tokens,
                cpu_backend=session.n_gpu_layers == 0,
                adaptive=request.speculation.adaptive,
            )
        except Exception as exc:
            self.race_finished.emit(RaceDone(rid, None, self._error(exc, "The race failed")))
            return
        self.race_finished.emit(RaceDone(rid, recording))

    def _warm_up(self, session: Session, prompt: PreparedPrompt, request: RaceRequest) -> None:
        warm = request.sampling.model_copy(update={"max_tokens": 2})
        for spec in (SpeculationConfig(mode="off"), request.speculation):
            if request.cancel.is_set():
                return
            self.race_progressed.emit(RaceProgressed(request.request_id, "warm-up", 0, 2))
            generate_once(session, prompt, warm, spec, request.cancel)
        self._warm = not request.cancel.is_set()

    @Slot(object)
    def run_sweep(self, request: SweepRequest) -> None:
        """Run the k sweep; always ends with one ``sweep_finished``."""
        rid = request.request_id
        try:
            session = self._check_session()
            prompt = prepare(session, request.prompt)

            def progress(done: int, total: int, rec: RunRecord) -> None:
                self.sweep_progressed.emit(
                    SweepProgressed(rid, done, total, rec.label, rec.stats.decode_tps))

            result = run_k_sweep(session, prompt, request.sampling, request.speculation,
                                 request.ks, repeat=request.repeat, warmup=request.warm_up,
                                 cancel=request.cancel, progress=progress)
        except Exception as exc:
            self.sweep_finished.emit(SweepDone(rid, None, self._error(exc, "The k sweep failed")))
            return
        self._warm = True
        self.sweep_finished.emit(SweepDone(rid, result))

    @Slot(object)
    def estimate_lookup(self, request: LookupRequest) -> None:
        """Estimate the n-gram hit rate; always ends with one ``lookup_estimated``."""
        rid = request.request_id
        try:
            session = self._check_session()
            tokenize: Callable[[str], list[int]] = model_tokenizer(session.target)
            cancel = request.cancel
            # a generator, so that a window closing mid-estimate stops it between
            # conversations instead of waiting for all of them
            conversations = (c.messages for c in request.conversations if not cancel.is_set())
            estimate = estimate_lookup_hit_rate(conversations, tokenize, request.ngram_sizes)
        except Exception as exc:
            self.lookup_estimated.emit(
                LookupDone(rid, None, self._error(exc, "The estimate failed")))
            return
        self.lookup_estimated.emit(LookupDone(rid, estimate))

    @staticmethod
    def _error(exc: BaseException, title: str) -> UserError:
        err = user_error(exc, title)
        if err.detail:
            log.error("%s\n%s", title, err.detail)
        return err


def _prompt_words(spec: PromptSpec) -> str:
    if spec.messages:
        return "\n\n".join(f"{m.role}: {m.content}" for m in spec.messages)
    return spec.text


class RaceWorkerHost(QObject):
    """Owns the race thread; GUI-thread API for :class:`RaceWorker`."""

    _race_requested = Signal(object)
    _sweep_requested = Signal(object)
    _lookup_requested = Signal(object)

    def __init__(self, session: Session, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.worker_thread = QThread()
        self.worker_thread.setObjectName("tandem-race")
        self.worker = RaceWorker(session)
        self.worker.moveToThread(self.worker_thread)
        self._race_requested.connect(self.worker.run_race)
        self._sweep_requested.connect(self.worker.run_sweep)
        self._lookup_requested.connect(self.worker.estimate_lookup)
        self._cancels: list[threading.Event] = []
        self._lookup_cancels: list[threading.Event] = []
        self._stopped = False
        self.worker_thread.start()

    def race(self, request: RaceRequest) -> None:
        """Queue a race."""
        self._cancels.append(request.cancel)
        self._race_requested.emit(request)

    def sweep(self, request: SweepRequest) -> None:
        """Queue a k sweep."""
        self._cancels.append(request.cancel)
        self._sweep_requested.emit(request)

    def estimate(self, request: LookupRequest) -> None:
        """Queue a lookup estimate (stopped only by :meth:`shutdown`)."""
        self._lookup_cancels.append(request.cancel)
        self._lookup_requested.emit(request)

    def stop(self) -> None:
        """Ask every race and sweep to stop; the engine honours it within one round."""
        for ev in self._cancels:
            ev.set()
        self._cancels.clear()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def shutdown(self) -> None:
        """Stop what runs, end the thread's event loop and wait for the thread.
        Idempotent. Blocks for at most one engine round (or one prefill chunk)."""
        if self._stopped:
            return
        self._stopped = True
        self.stop()
        for ev in self._lookup_cancels:
            ev.set()
        self.worker_thread.quit()
        self.worker_thread.wait()
