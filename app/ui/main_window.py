"""The main window: layout and wiring around the chat controller.

Everything the window decides lives in :class:`~app.chat.conversation.ChatController`
(Qt-free, tested without a window); the window lays out the widgets, passes the user's
actions to the controller, shows what the controller tells it (it is the controller's
:class:`~app.chat.conversation.ChatView`), and delivers the chat service's events, which
arrive on the GUI thread through :class:`~app.ui.service_bridge.ServiceBridge`. Streamed
text comes in the service's 30 ms batches and goes to the chat view as it arrives (the
view skips renders only while the last one was costly). Closing stops and joins the
service, finalises a streaming reply, saves the settings and closes the store. The API
tab's "Serve API" switch runs :class:`app.api.server.ApiServer` on the same service; the
gauge follows API replies (labelled "API traffic") through
:class:`app.api.traffic.ApiTrafficFollower`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QByteArray, QCoreApplication, Qt, QTimer, Slot
from PySide6.QtGui import QCloseEvent, QGuiApplication, QIcon
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QLineEdit,
    QMainWindow,
    QMenu,
    QMessageBox,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.chat.conversation import NOT_SENT, ActiveReply, ChatController, open_history
from app.chat.demo import GEMMA3, demo_available
from app.chat.events import ModelInfo, UserError
from app.chat.service import ChatService
from app.engine.reply import ReplyRecord, can_continue
from app.engine.stats import SpecStats
from app.formatting import shortened
from app.options import SamplingParams, SpeculationConfig
from app.store import paths
from app.store.history import Conversation, StoredMessage
from app.store.logs import pop_previous_crash
from app.store.settings import LoadedSettings, Settings, UiSettings, load_settings
from app.ui.api import ApiPanelWidget
from app.ui.api.serving import ApiServing
from app.ui.chat.chat_view import ChatViewWidget, message_view
from app.ui.chat.conversation_list import ConversationListWidget
from app.ui.chat.export_dialog import export_open_conversation, export_with_dialog
from app.ui.chat.footer import reply_footer
from app.ui.chat.input_box import ComposerWidget
from app.ui.chat.markdown_render import warm_up as warm_up_markdown
from app.ui.chat.reply_status import reply_status_words
from app.ui.chat.starter_prompts import load_starter_prompts
from app.ui.chat.token_preview import TokenPreview
from app.store.credentials import ApiKeyStore
from app.ui.explain import auto_explanation, context_fit_words, stored_auto_explanation
from app.ui.gauge.gauge_panel import SpeculationGaugeWidget
from app.ui.model_bar import ModelBarWidget
from app.ui.panels import MessageBarWidget, SystemPromptWidget, WelcomeWidget, status_text
from app.ui.picker import DownloadQueue
from app.ui.qt_compat import apply_qt_workarounds
from app.ui.sampling_panel import SamplingSettingsWidget
from app.ui.quit_check import ask_to_quit, work_in_progress
from app.ui.scrolled import ScrolledTabWidget, scrolled
from app.ui.service_bridge import ServiceBridge
from app.ui.side_windows import SideWindows
from app.ui.server_watch import ServerWatch
from app.ui.window_actions import WindowActions, install_window_actions
from app.ui.elided import ElidedLabelWidget
from app.ui.labels import Label


#: the narrowest the conversation list gets, and the chat (pixels: a message's header,
#: its model's name, ‹ n/m ›, Copy, Continue and Regenerate, whole)
SIDEBAR_MIN_PX, CHAT_MIN_PX = 180, 380
#: what a window frame takes (pixels) before the window manager has framed the window
_FRAME_GUESS = (0, 40)


def _side_panel(settings: Settings, controller: ChatController) -> tuple[
        ScrolledTabWidget, SpeculationGaugeWidget, SamplingSettingsWidget, ApiPanelWidget]:
    """The side panel's scrolling tabs: Speculation (the gauge), Sampling, API."""
    tabs = ScrolledTabWidget()
    tabs.setObjectName("sideTabs")
    gauge = SpeculationGaugeWidget()
    gauge.written_by = controller.written_by
    gauge.set_tint(settings.ui.tint_drafts)
    sampling = SamplingSettingsWidget()
    sampling.set_values(settings.sampling, settings.model, settings.speculation)
    api = ApiPanelWidget()
    for page, title in ((gauge, "Speculation"), (sampling, "Sampling"), (api, "API")):
        tabs.add_page(page, title)
    return tabs, gauge, sampling, api


def _show_last_reply(gauge: SpeculationGaugeWidget, last: StoredMessage | None,
                     last_stats: SpecStats | None, waiting: bool) -> None:
    """The gauge shows a conversation's last finished reply (``last``, its figures
    ``last_stats``); a reply that streams keeps the gauge (``waiting``: one does)."""
    if last_stats is None:  # no figures (not another conversation's)
        gauge.show_no_reply("No reply yet" if last is None else "Waiting for the reply"
                            if waiting else "No figures for the last reply")
    else:
        gauge.show_stored(last_stats, last.model if last else None, last.note if last else None)
    if not gauge.live:  # a reply that streams keeps its own explanation
        gauge.set_explanation(stored_auto_explanation(last.stats if last else None))


#: under a conversation opened with a question last: no reply to it is stored or coming
NO_REPLY_STORED = ("No reply to the last message: Tandem closed before it was written, or "
                   "it was stopped or failed. Regenerate asks for one.")


def _show_messages(chat: ChatViewWidget, messages: Sequence[StoredMessage]) -> None:
    """Show an opened conversation; one whose last message is the user's (a reply in
    progress or waiting has its own message) says that no reply came."""
    chat.set_messages([message_view(m) for m in messages])
    if messages and messages[-1].role == "user":
        chat.note_no_reply(NO_REPLY_STORED)


def _show_path_figures(gauge: SpeculationGaugeWidget, controller: ChatController,
                       path: Sequence[StoredMessage]) -> None:
    """Another version was shown: the gauge shows the figures of the last reply of
    ``path`` (the version and the messages after it), unless a reply streams. An
    interrupted or failed version has none: not another version's figures."""
    reply = next((m for m in reversed(path) if m.role == "assistant"), None)
    if gauge.live or (reply is not None and reply.status != "done"):
        return  # a reply streams, or the version being written
    if reply is None:  # none after the version: the conversation's last (not another path's)
        _show_last_reply(gauge, *controller.last_reply(), waiting=False)
        return
    gauge.show_stored_figures(reply.stats, reply.model, "No figures for this version",
                              reply.note)
    gauge.set_explanation(stored_auto_explanation(reply.stats))


def _back_to_open_conversation(gauge: SpeculationGaugeWidget, controller: ChatController,
                               reply: ActiveReply) -> None:
    """A reply written in another conversation ended: the gauge shows the open one's
    last reply again."""
    if reply.conversation_id != controller.current_conversation:
        _show_last_reply(gauge, *controller.last_reply(), waiting=False)


def _end_stream(chat: ChatViewWidget, reply: ActiveReply, fin: ReplyRecord,
                stored: StoredMessage | None) -> bool:
    """A reply ended: its text and footer; False for one stopped before any text,
    which the history takes back (a new one: the message alone, saying so; a new
    version: the earlier one comes back)."""
    if reply.taken_back:
        if reply.regenerated:
            chat.end_stream(reply.message_id, "", (), "")  # the earlier version follows
        else:
            chat.remove_from(reply.message_id, "stopped before any text.")
        return False
    if stored is not None:  # as the history has it (message_view: footer, Continue)
        view = message_view(stored)
        footer, continuable = view.footer, view.continuable
    else:  # kept in memory only
        footer = reply_footer(fin.stats.to_dict(), fin.reason, fin.note)
        continuable = can_continue(fin.reason, reply.text, fin.note)
    chat.end_stream(reply.message_id, reply.text, reply.spans, footer, fin.context,
                    continuable)
    return True


def _gauge_after_reply(window: MainWindow, reply: ActiveReply, fin: ReplyRecord,
                       stored: StoredMessage | None, shown: bool) -> None:
    """The gauge after the reply it followed ended: its final figures (saved in the open
    conversation: its last reply now; another's is shown, not kept), or the last reply's
    when there was none after all."""
    c = window.controller
    here = stored is not None and reply.conversation_id == c.current_conversation
    window.gauge.end_reply(fin.stats, stored.note if stored else fin.note, stored=here,
                           model=stored.model if stored is not None else None)
    if not shown:
        _show_last_reply(window.gauge, *c.last_reply(), waiting=False)
    _back_to_open_conversation(window.gauge, c, reply)


def _reply_failed_around(window: MainWindow, reply: ActiveReply, error: UserError) -> None:
    """Beside the chat, a failed reply: the gauge says why (and shows the open
    conversation's last reply again when it was another's, or when the message went back
    to the box: nothing was sent), the model bar whether a remote server stopped
    answering."""
    if window._gauge_reply is not reply:
        pass  # the gauge follows what runs ahead of it (an API request)
    elif reply.given_back:
        window.gauge.withdraw_reply()
        _show_last_reply(window.gauge, *window.controller.last_reply(), waiting=False)
    else:
        window.gauge.fail_reply(f"The reply failed: {error.message}")
        _back_to_open_conversation(window.gauge, window.controller, reply)
    window.model_bar.reply_failed(error)


def _give_back_to_box(window: MainWindow, conversation_id: int | None, message_id: int,
                      text: str, edited: bool) -> None:
    """A message sent was refused (:meth:`~app.chat.conversation.ChatView.message_given_back`):
    its text goes back to its conversation's box, as an edit again when it was one."""
    if edited:
        _resume_edit(window, conversation_id, message_id, text)
        return
    if conversation_id == window.controller.current_conversation:
        window.chat.remove_from(message_id)
    window.composer.given_back(conversation_id, text)


def _choose_gguf(window: MainWindow, title: str) -> Path | None:
    target = window.settings.model.target_path
    start = str(target.parent) if target else str(paths.models_dir())
    name, _ = QFileDialog.getOpenFileName(window, title, start,
                                          "GGUF models (*.gguf);;All files (*)")
    return Path(name) if name else None


def draft_menu(window: MainWindow) -> QMenu:
    """"Choose draft…": the Models window, which ranks the library's models as drafts for
    the loaded target and greys the incompatible ones with the reason, or any GGUF file
    (checked against the target when it loads). Deleted when it closes."""
    menu = QMenu(window)
    menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    info = window.controller.model_info
    ranked = menu.addAction("Compatible drafts in the Models window…")
    ranked.triggered.connect(
        lambda: window.windows.open_drafts_for(info.target_path if info is not None else None))
    other = menu.addAction("Open a GGUF file…")
    other.triggered.connect(lambda: _open_draft_file(window))
    return menu


def _open_draft_file(window: MainWindow) -> None:
    if (path := window.choose_draft_file()) is not None:
        window.controller.set_draft_model(path)


def _edit(window: MainWindow, message_id: int, text: str | None) -> bool:
    """:meth:`MainWindow.edit_message`: the message's text in the box; a question left
    unanswered may be sent again as it is."""
    c = window.controller
    if (original := c.begin_edit(message_id)) is not None:
        window.composer.begin_edit(original, message_id, text,
                                   resend=c.is_unanswered(message_id))
        window.input.setFocus()
        window.state_changed()
    return original is not None


def _not_sent_over(bar: MessageBarWidget) -> None:
    """The text a refused message gave back was replaced: its "Not sent" goes (other
    messages stay)."""
    if bar.current is not None and bar.current.title == NOT_SENT:
        bar.clear()


def _edit_last(window: MainWindow) -> None:
    """Up in the empty box: edit the open conversation's last message of the user's
    (nothing while a reply is written, a message is edited already, or there is none)."""
    if window.controller.editing_message_id is not None:
        return
    last = next((m for m in reversed(window.chat.messages) if m.role == "user"), None)
    if last is not None:
        _edit(window, last.message_id, None)


def _connect_server(window: MainWindow) -> None:
    """Connect to server…: the dialog (its server and model as last used), then connect."""
    from app.ui.connect_dialog import ConnectDialog

    remote = window.settings.remote
    dialog = ConnectDialog(window.api_keys, remote.base_url, remote.model, window)
    if remote.base_url:
        dialog.list_models()
    if dialog.exec() == ConnectDialog.DialogCode.Accepted:
        client, model = dialog.connection()
        window.controller.connect_server(client, model)


def _token_preview(window: MainWindow) -> TokenPreview:
    """The token count under the input box, measured as the text or the state changes."""
    c = window.controller
    preview = TokenPreview(window.composer.token_count, c.service.preview, c.messages_with,
                           lambda: window.settings.sampling, window.input.toPlainText,
                           lambda: c.service.running is not None or c.loading,
                           lambda: c.model_info is not None and c.remote is None)
    window.input.textChanged.connect(preview.refresh)
    # after the controller's own slots: the measurement reads what they stored
    window.sampling_panel.sampling_changed.connect(lambda _sampling: preview.refresh())
    window.system_prompt.system_prompt_edited.connect(lambda _text: preview.refresh())
    return preview


def _menus_follow(actions: WindowActions, controller: ChatController) -> None:
    """The menu actions that change the model are off while it is busy (a load, a
    reply); Disconnect is on only while a server is used and idle."""
    for action in actions.swaps:
        action.setEnabled(not controller.busy)
    if actions.disconnect is not None:
        actions.disconnect.setEnabled(controller.remote is not None and not controller.busy)


def _may_quit(window: MainWindow) -> bool:
    """Whether to quit now: asks first while work would stop (:mod:`app.ui.quit_check`)."""
    c = window.controller
    return ask_to_quit(window, window.settings.ui, lambda: work_in_progress(
        c.service.jobs(), window.downloads.active_count(),
        reply_text=c.reply is not None and bool(c.reply.text), unkept=window.composer.unkept))


def _ask_to_delete(window: QWidget, title: str | None) -> bool:
    """Whether the user confirms deleting the conversation ``title`` (None: not listed;
    a long one is shortened to 60 characters). Enter keeps it: deleting takes a
    deliberate Yes."""
    which = f"“{shortened(title, 60)}”" if title else "this conversation"
    box = QMessageBox(QMessageBox.Icon.Question, "Delete conversation",
                      f"Delete {which} and all its messages? This cannot be undone.",
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, window)
    box.setTextFormat(Qt.TextFormat.PlainText)  # a title is any text, "<div>" included
    box.setDefaultButton(QMessageBox.StandardButton.No)
    return box.exec() == QMessageBox.StandardButton.Yes


def _escape(window: MainWindow) -> None:
    """Esc: in the conversation search box with text, empty it; else stop the reply of
    the open conversation (the one its Stop button stops: a reply written in another
    conversation goes on), or leave editing a message (asking first when its text was
    changed)."""
    search: QLineEdit = window.conversations.search
    c = window.controller
    if search.hasFocus() and search.text():
        search.clear()
    elif c.reply is not None and c.reply.conversation_id == c.current_conversation:
        c.stop_reply()
    elif window.controller.editing_message_id is not None and (
            window.composer.edit_unchanged or _ask_to_discard_rewrite(window)):
        window._on_composer_cancel_edit_clicked()


def _ask_to_discard_rewrite(window: QWidget) -> bool:
    """Whether the user confirms leaving an edit whose text was changed (Esc); Enter
    keeps editing: throwing the rewrite away takes a deliberate Discard."""
    box = QMessageBox(QMessageBox.Icon.Question, "Leave editing",
                      "Discard your changes to this message?",
                      QMessageBox.StandardButton.Discard | QMessageBox.StandardButton.Cancel,
                      window)
    box.button(QMessageBox.StandardButton.Cancel).setText("Keep editing")
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    return box.exec() == QMessageBox.StandardButton.Discard


def _resume_edit(window: MainWindow, conversation_id: int | None, message_id: int,
                 text: str) -> None:
    """Take up an edit left for another conversation, now open again (connected queued:
    the controller is still opening it when the composer asks); one that cannot be
    (another conversation open by now, a reply streams, the message is gone) keeps its
    text (:meth:`ComposerWidget.edit_not_resumed`)."""
    if conversation_id is None or conversation_id != window.controller.current_conversation \
            or not window.edit_message(message_id, text):
        if conversation_id is not None:
            window.composer.edit_not_resumed(conversation_id, message_id, text)


def _fit_to_screen(window: QWidget, *, again: bool = True) -> None:
    """Shrink and move the window into its screen's free area (large fonts or a smaller
    screen than the one its size was saved on), no smaller than it can be laid out;
    ``again``: once more a moment later (shown, with its frame), unless the window was
    resized meanwhile."""
    screen = window.screen() or QGuiApplication.primaryScreen()
    if screen is None:
        return
    free, frame = screen.availableGeometry(), window.frameGeometry()
    extra_w, extra_h = frame.width() - window.width(), frame.height() - window.height()
    if (extra_w, extra_h) == (0, 0) and not window.isVisible():
        extra_w, extra_h = _FRAME_GUESS
    least = window.minimumSizeHint()
    width = max(least.width(), min(window.width(), free.width() - extra_w))
    height = max(least.height(), min(window.height(), free.height() - extra_h))
    if (width, height) != (window.width(), window.height()):
        window.resize(width, height)
    x = min(max(window.x(), free.left()), max(free.left(), free.right() + 1 - width - extra_w))
    y = min(max(window.y(), free.top()), max(free.top(), free.bottom() + 1 - height - extra_h))
    if (x, y) != (window.x(), window.y()):
        window.move(x, y)
    if again:  # the window manager frames the window some time after it is shown
        fitted = window.size()

        def once_more() -> None:
            if window.size() == fitted:  # not resized meanwhile
                _fit_to_screen(window, again=False)

        QTimer.singleShot(300, window, once_more)


def _restore_geometry(window: QMainWindow, splitter: QSplitter, ui: UiSettings) -> None:
    """The window's size and place, and its panes' widths, as saved (1320 × 820 the first
    time), within the screen (:func:`_fit_to_screen`)."""
    if not (ui.window_geometry and window.restoreGeometry(
            QByteArray.fromBase64(ui.window_geometry.encode()))):
        window.resize(1320, 820)
    _fit_to_screen(window)
    if ui.splitter_state:
        splitter.restoreState(QByteArray.fromBase64(ui.splitter_state.encode()))


def _single_shot_timer(parent: QWidget, ms: int, slot: Callable[[], object]) -> QTimer:
    timer = QTimer(parent)
    timer.setSingleShot(True)
    timer.setInterval(ms)
    timer.timeout.connect(slot)
    return timer


class MainWindow(QMainWindow):
    """Tandem's window. See the module docstring.

    Args:
        loaded: settings as loaded (default: read them from the config folder). A
            ``problem`` in them is shown in the message bar.
        autoload: load the target model named in the settings right away.
        service: the chat service to use (default: a new one, owned by this window).
    """

    def __init__(self, loaded: LoadedSettings | None = None, *, autoload: bool = True,
                 service: ChatService | None = None) -> None:
        apply_qt_workarounds()
        super().__init__()
        self.setWindowTitle("Tandem")
        if (icon := paths.icon_path("png")).is_file():
            self.setWindowIcon(QIcon(str(icon)))
        loaded = loaded or load_settings()
        self.settings = loaded.settings
        store, problems = open_history()
        if loaded.problem:
            problems.insert(0, UserError("Settings reset", loaded.problem, level="warning",
                                         origin="settings"))
        if (crash := pop_previous_crash()) is not None:
            problems.insert(0, UserError("Tandem stopped unexpectedly", crash,
                                         level="warning", origin="crash"))
        self.downloads = DownloadQueue(self)
        self.api_keys = ApiKeyStore()  # remote servers' keys: the OS keyring or this session
        self.bridge = ServiceBridge(service, self)
        #: the window's reply the gauge shows (None: it follows whatever else runs)
        self._gauge_reply: ActiveReply | None = None
        self.controller = c = ChatController(self.settings, store, self.bridge.service, self)
        self.windows = SideWindows(self, self.controller, self.bridge, self.settings,
                                   self.downloads)
        self._closed = False
        self._build()
        self.token_preview = _token_preview(self)
        self.server_watch = ServerWatch(c, self.model_bar, self)  # a remote server answers?
        self._settings_timer = _single_shot_timer(self, 400, self.controller.save_settings)
        self.bridge.event_received.connect(self._on_bridge_event_received)
        warm_up_markdown()
        _restore_geometry(self, self.splitter, self.settings.ui)
        self.composer.keep_unsent(self.settings.ui, (self.save_settings_soon, c.save_settings),
                                  c.has_conversation)
        self.conversations_changed()
        self.controller.start(autoload=autoload, problems=problems)

    # -- layout -----------------------------------------------------------------------
    def _build(self) -> None:
        central = QWidget()
        central.setObjectName("central")
        col = QVBoxLayout(central)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(0)
        self.model_bar = ModelBarWidget()
        self.model_bar.set_speculation(self.settings.speculation)
        col.addWidget(self.model_bar)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.conversations = ConversationListWidget()
        # a sidebar that stays usable (titles readable, buttons whole) at 1024 px wide
        self.conversations.setMinimumWidth(SIDEBAR_MIN_PX)
        self.splitter.addWidget(self.conversations)

        chat_col = QWidget()
        chat_col.setObjectName("chatColumn")
        chat_col.setMinimumWidth(CHAT_MIN_PX)  # a message's header is never cut off
        cl = QVBoxLayout(chat_col)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        self.system_prompt = SystemPromptWidget()
        cl.addWidget(self.system_prompt)
        self.stack = QStackedWidget()
        self.welcome = WelcomeWidget(demo_available(models_dir=paths.models_dir()),
                                     demo_available(GEMMA3, paths.models_dir()))
        self.chat = ChatViewWidget()
        self.chat.set_tint(self.settings.ui.tint_drafts)
        self.welcome_page = scrolled(self.welcome)
        self.stack.addWidget(self.welcome_page)
        self.stack.addWidget(self.chat)
        cl.addWidget(self.stack, 1)
        # above the message box: showing it moves neither the list nor the model bar
        self.message_bar = MessageBarWidget()
        cl.addWidget(self.message_bar)
        self.composer = ComposerWidget()
        self.input, self.send_button, self.regenerate_button = (
            self.composer.input, self.composer.send_button, self.composer.regenerate_button)
        cl.addWidget(self.composer)
        self.splitter.addWidget(chat_col)

        self.side_tabs, self.gauge, self.sampling_panel, self.api_panel = _side_panel(
            self.settings, self.controller)
        self.splitter.addWidget(self.side_tabs)
        for i, stretch in enumerate((0, 1, 0)):
            self.splitter.setStretchFactor(i, stretch)
            self.splitter.setCollapsible(i, False)
        self.splitter.setSizes([220, 760, 320])
        col.addWidget(self.splitter, 1)
        self.setCentralWidget(central)
        self.status_label = ElidedLabelWidget(min_px=120, sentence=True)  # API address whole
        self.statusBar().addWidget(self.status_label, 1)
        self.api_status_label = Label()
        self.statusBar().addPermanentWidget(self.api_status_label)
        self.api = ApiServing(self.api_panel, self.api_status_label, self.gauge,
                              self.bridge.service, self.controller, self.settings,
                              self.controller.report, self.clear_errors, self)

        c = self.controller
        mb = self.model_bar
        mb.open_target_clicked.connect(self._on_model_bar_open_target_clicked)
        mb.recent_menu.settings = self.settings.model
        mb.recent_menu.chosen.connect(c.load_model)
        mb.open_draft_clicked.connect(self._on_model_bar_open_draft_clicked)
        mb.connect_server_clicked.connect(self._on_model_bar_connect_server_clicked)
        mb.speculation_changed.connect(c.set_speculation)
        mb.load_cancel_clicked.connect(self._on_model_bar_load_cancel_clicked)
        mb.models_clicked.connect(self.windows.open_model_picker)
        mb.race_clicked.connect(self.windows.open_race)
        self.welcome.demo_clicked.connect(c.prepare_demo)
        self.welcome.open_clicked.connect(self._on_model_bar_open_target_clicked)
        self.welcome.connect_clicked.connect(self._on_model_bar_connect_server_clicked)
        cv = self.conversations
        cv.conversation_activated.connect(self._on_conversations_conversation_activated)
        cv.new_conversation_clicked.connect(self.new_conversation)
        cv.conversation_renamed.connect(self._on_conversations_conversation_renamed)
        cv.conversation_delete_clicked.connect(self._on_conversations_conversation_delete_clicked)
        cv.conversation_export_clicked.connect(lambda cid: export_with_dialog(self, c, cid))
        cv.search_changed.connect(self.conversations_changed)
        cv.search_changed.connect(self.chat.find_text)  # marked in the open conversation
        cv.search_changed.connect(lambda _text: self.clear_errors("search"))  # its hint goes
        self.system_prompt.system_prompt_edited.connect(c.set_system_prompt)
        self.chat.edit_clicked.connect(self.edit_message)
        self.input.edit_last_requested.connect(lambda: _edit_last(self))
        self.composer.given_back_replaced.connect(lambda: _not_sent_over(self.message_bar))
        self.chat.regenerate_clicked.connect(self.regenerate)
        self.chat.continue_clicked.connect(c.continue_reply)
        self.chat.version_requested.connect(c.show_version)
        self.chat.starter_prompt_clicked.connect(self._on_chat_starter_prompt_clicked)
        self.composer.send_clicked.connect(self.send_message)
        self.composer.stop_clicked.connect(c.stop_reply)
        self.composer.regenerate_clicked.connect(lambda: self.regenerate())
        self.composer.cancel_edit_clicked.connect(self._on_composer_cancel_edit_clicked)
        self.composer.edit_resumed.connect(lambda *left: _resume_edit(self, *left),
                                           Qt.ConnectionType.QueuedConnection)
        self.gauge.tint_toggled.connect(self._on_gauge_tint_toggled)
        sp = self.sampling_panel
        sp.sampling_changed.connect(c.set_sampling)
        sp.speculation_changed.connect(c.set_speculation)
        sp.model_options_changed.connect(c.set_model_options)
        sp.reload_clicked.connect(c.reload_model)
        self.window_actions = install_window_actions(
            self, new_chat=self.new_conversation, regenerate=self.regenerate,
            stop=self._stop_or_leave_edit, models=self.windows.open_model_picker,
            open_model=self._on_model_bar_open_target_clicked, search=cv.search.setFocus,
            connect=self._on_model_bar_connect_server_clicked, recent=mb.recent_menu,
            export=lambda: export_open_conversation(self, c), splitter=self.splitter,
            server=(self.show_server_command, c.disconnect_server, self.api.action),
            may_quit=lambda: _may_quit(self), ui=(self.settings.ui, self.save_settings_soon))

    # -- the controller's view --------------------------------------------------------
    def show_error(self, error: UserError) -> None:
        self.message_bar.show_error(error)

    def clear_errors(self, origin: str) -> None:
        self.message_bar.clear_origin(origin)

    def state_changed(self) -> None:
        c = self.controller
        self.token_preview.refresh()
        here = c.reply is not None and c.reply.conversation_id == c.current_conversation
        self.composer.set_state(streaming=here, can_send=c.can_send, can_regenerate=c
                                .can_regenerate, editing=c.editing_message_id is not None,
                                model_loaded=c.model_info is not None)
        self.conversations.set_writing(c.reply.conversation_id if c.reply is not None else None)
        self.model_bar.set_busy(c.busy)
        self.welcome.set_busy(c.loading)
        self.chat.set_busy(c.reply is not None, editing=c.editing_message_id)
        show_welcome = c.model_info is None and not c.loading and not c.has_messages
        self.stack.setCurrentWidget(self.welcome_page if show_welcome else self.chat)
        self.sampling_panel.set_pending_reload(c.pending_reload)
        self.status_label.set_full_text(status_text(c.model_info, loading=c.loading,
                                                    generating=c.reply is not None))
        _menus_follow(self.window_actions, c)

    def loading_changed(self, loading: bool, fraction: float | None, what: str) -> None:
        self.model_bar.progress.setRange(0, 0 if fraction is None else 1000)
        self.model_bar.set_loading(loading, fraction or 0.0, what)
        if not loading:
            self.windows.load_ended()

    def model_changed(self, info: ModelInfo | None) -> None:
        self.model_bar.set_model(info)
        self.chat.set_continue_allowed(info is None or info.remote is None
                                       or info.remote.info.can_continue)
        self.sampling_panel.show_exact_verification(self.settings.model.exact_verification)
        if info is None:
            self.chat.set_starter_prompts(())
        else:
            self.gauge.set_cpu_only(info.n_gpu_layers == 0)
            self.gauge.threads_auto = info.threads_auto
            self.sampling_panel.set_gpu_supported(info.gpu_supported or info.remote is not None)
            self.gauge.set_assistant(info.draft_path.name if info.draft_is_assistant
                                     and info.draft_path is not None else None)
            base = info.uses_fallback_template
            self.chat.set_starter_prompts(load_starter_prompts(not base), base_model=base)
            self.input.setFocus()
        self.gauge.update_stored_source()

    def model_will_change(self) -> None:
        self.windows.close_race()

    def speculation_changed(self, speculation: SpeculationConfig) -> None:
        self.model_bar.set_speculation(speculation)
        self.sampling_panel.set_speculation(speculation)

    def sampling_changed(self, sampling: SamplingParams) -> None:
        self.sampling_panel.set_values(sampling, self.settings.model, self.settings.speculation)
        self.token_preview.refresh()

    def conversations_changed(self) -> None:
        c, search = self.controller, self.conversations.search.text()
        self.composer.stored_as(c.current_conversation)
        self.token_preview.refresh()  # another version shown, say: another conversation
        self.conversations.set_conversations(c.conversations(search), c.current_conversation,
                                             c.search_snippets(search))

    def conversation_opened(self, conversation: Conversation | None,
                            messages: Sequence[StoredMessage],
                            last_stats: SpecStats | None) -> None:
        self.system_prompt.set_text(conversation.system_prompt if conversation else "")
        _show_messages(self.chat, messages)
        self.composer.show_conversation(conversation.id if conversation else None)
        last = next((m for m in reversed(messages)
                     if m.role == "assistant" and m.status == "done"), None)
        reply = self.controller.reply
        _show_last_reply(self.gauge, last, last_stats, waiting=reply is not None)
        if reply is not None and self._gauge_reply is reply:  # the live figures are whose?
            self.gauge.set_source(self.controller.where_reply_runs(elsewhere_only=True))
        if reply is not None and conversation is not None and reply.conversation_id == conversation.id:
            self.chat.begin_stream(reply.message_id, reply.text, reply.spans)
            self.chat.set_stream_status(reply.message_id, reply_status_words(
                reply.ahead, reply.started, reply.prefill, bool(reply.new_text)))

    def message_added(self, message: StoredMessage) -> None:
        self.chat.add_message(message_view(message))
        if message.role == "user":
            self.composer.sent(message.content)  # the box empties (or shows what an edit hid)

    def message_edited(self, message: StoredMessage) -> None:
        self.chat.replace_after(message_view(message), [])
        self.composer.edit_ended()

    def version_shown(self, message: StoredMessage, after: Sequence[StoredMessage]) -> None:
        self.chat.replace_after(message_view(message), [message_view(m) for m in after])
        if message.conversation_id == self.controller.current_conversation:
            _show_path_figures(self.gauge, self.controller, [message, *after])

    def reply_started(self, reply: ActiveReply) -> None:
        self.chat.begin_stream(reply.message_id, reply.text, reply.spans)  # continued: its text
        self.reply_waiting(reply)
        if not reply.ahead:
            self._gauge_follows(reply)

    def reply_waiting(self, reply: ActiveReply) -> None:
        self.chat.set_stream_status(reply.message_id, reply_status_words(
            reply.ahead, reply.started, reply.prefill, bool(reply.new_text)))
        if reply.started and self._gauge_reply is not reply:
            self._gauge_follows(reply)

    def _gauge_follows(self, reply: ActiveReply) -> None:
        """The gauge shows this reply from now on (until then it followed what ran
        before it in the queue, an API request)."""
        self._gauge_reply = reply
        spec = reply.speculation
        remote = self.controller.remote
        if remote is not None:
            info = remote.info
            self.gauge.begin_reply(None, 0, remote={
                "engine": info.engine.value, "version": info.version,
                "method": info.speculation_method, "draft_max": info.draft_max})
        else:
            self.gauge.begin_reply(spec.mode, spec.draft_max, spec.adaptive)

    def reply_progressed(self, reply: ActiveReply) -> None:
        if (last := reply.buffer.last) is not None:
            self.gauge.add_tokens(last.t, last.n_tokens)
        if reply.conversation_id == self.controller.current_conversation:
            self.chat.stream(reply.message_id, reply.text, reply.spans)

    def reply_stats(self, reply: ActiveReply) -> None:
        if reply.stats is not None:
            self.gauge.set_stats(reply.stats)

    def reply_explained(self, reply: ActiveReply) -> None:
        if reply.auto is not None:
            self.gauge.set_explanation(auto_explanation(reply.auto))

    def reply_trimmed(self, reply: ActiveReply) -> None:
        if reply.context is not None:
            self.chat.set_footer(reply.message_id, context_fit_words(reply.context))

    def reply_finished(self, reply: ActiveReply, fin: ReplyRecord,
                       stored: StoredMessage | None) -> None:
        shown = _end_stream(self.chat, reply, fin, stored)
        if self._gauge_reply is reply:  # else it follows what runs ahead (an API request)
            _gauge_after_reply(self, reply, fin, stored, shown)
        remote = fin.stats.extra.get("remote")
        if isinstance(remote, dict):  # llama-server names its drafter after a request
            self.model_bar.set_remote_drafter(remote.get("engine"), remote.get("method"))

    def reply_failed(self, reply: ActiveReply, error: UserError) -> None:
        _reply_failed_around(self, reply, error)
        if not reply.text and not reply.regenerated:
            self.chat.remove_from(reply.message_id, None if reply.given_back else error.message)
        elif not reply.new_text:  # nothing new (a continuation too): the earlier follows
            self.chat.end_stream(reply.message_id, "", (), "")
        else:
            self.chat.end_stream(reply.message_id, reply.text, reply.spans,
                                 reply_footer(None, "error", error.message))

    def message_given_back(self, conversation_id: int | None, message_id: int, text: str,
                           edited: bool) -> None:
        _give_back_to_box(self, conversation_id, message_id, text, edited)

    def show_server_command(self) -> QDialog | None:
        """Server → Run this on a bigger machine… (:func:`open_server_command`)."""
        from app.ui.server_command_dialog import open_server_command

        return open_server_command(self.controller.model_info, self.model_bar.speculation(), self)

    def choose_draft_file(self) -> Path | None:
        return _choose_gguf(self, "Choose a draft model (same tokenizer as the target)")

    def save_settings_soon(self) -> None:
        self._settings_timer.start()

    # -- the user's actions -----------------------------------------------------------
    def send_message(self, text: str | None = None) -> bool:
        """Send ``text`` (default: the input box) and start the reply; see
        :meth:`ChatController.send_message`."""
        self.system_prompt.flush()
        return self.controller.send_message(self.input.toPlainText() if text is None else text)

    @Slot(str)
    def _on_chat_starter_prompt_clicked(self, text: str) -> None:
        # the starter buttons go away with the first message: the next one is typed
        self.send_message(text)
        self.input.setFocus()

    def regenerate(self, message_id: int | None = None) -> bool:
        return self.controller.regenerate(message_id)

    def edit_message(self, message_id: int, text: str | None = None) -> bool:
        """Edit a user message (``text``: an edit taken up again). False: not now (a
        reply streams, or it is no message of the open conversation)."""
        return _edit(self, message_id, text)

    def open_conversation(self, conversation_id: int | None) -> None:
        self.system_prompt.flush()
        self.controller.open_conversation(conversation_id, self.conversations.search.text())
        self.chat.find_text(self.conversations.search.text())

    @Slot()
    def new_conversation(self) -> None:
        self.open_conversation(None)
        self.input.setFocus()

    @Slot()
    def _on_model_bar_open_target_clicked(self) -> None:
        if (path := _choose_gguf(self, "Open a GGUF model")) is not None:
            self.controller.load_model(path)

    @Slot()
    def _on_model_bar_connect_server_clicked(self) -> None:
        _connect_server(self)

    @Slot()
    def _on_model_bar_open_draft_clicked(self) -> None:
        button = self.model_bar.draft_button
        draft_menu(self).popup(button.mapToGlobal(button.rect().bottomLeft()))

    @Slot()
    def _on_model_bar_load_cancel_clicked(self) -> None:
        self.controller.cancel_load()
        self.model_bar.cancel_button.setEnabled(False)

    @Slot(int)
    def _on_conversations_conversation_activated(self, conversation_id: int) -> None:
        if conversation_id != self.controller.current_conversation:
            self.open_conversation(conversation_id)

    @Slot(int, str)
    def _on_conversations_conversation_renamed(self, conversation_id: int, title: str) -> None:
        # after the list's own edit has finished: renaming refreshes the list
        QTimer.singleShot(0, lambda: self.controller.rename_conversation(conversation_id, title))

    @Slot(int)
    def _on_conversations_conversation_delete_clicked(self, conversation_id: int) -> None:
        if _ask_to_delete(self, self.conversations.title_of(conversation_id)):
            self.composer.deleting(conversation_id, self.controller.delete_conversation)

    def _stop_or_leave_edit(self) -> None:  # Esc
        _escape(self)

    @Slot()
    def _on_composer_cancel_edit_clicked(self) -> None:
        self.controller.cancel_edit()
        self.composer.edit_ended()
        self.state_changed()

    @Slot(bool)
    def _on_gauge_tint_toggled(self, tint: bool) -> None:
        self.settings.ui.tint_drafts = tint
        self.chat.set_tint(tint)
        self.save_settings_soon()

    @Slot(object)
    def _on_bridge_event_received(self, event: object) -> None:
        self.controller.handle(event)
        self.api.handle(event)

    # -- closing ----------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        """Stop and join the service, finalise a streaming reply, save, then close; a
        close the user asked for (the title bar's button) asks first while work runs."""
        if not self._closed and event.spontaneous() and not _may_quit(self):
            event.ignore()
            return
        if not self._closed:
            self._closed = True
            self.system_prompt.flush()
            self.composer.save_unsent()  # written by the controller's close below
            ui = self.settings.ui
            ui.window_geometry = bytes(self.saveGeometry().toBase64().data()).decode()
            ui.splitter_state = bytes(self.splitter.saveState().toBase64().data()).decode()
            self._settings_timer.stop()
            self.windows.shutdown()
            self.api.stop()
            self.downloads.shutdown()  # pauses downloads; they are offered again next start
            # The service's last events (the cancelled reply's end) are queued for this
            # thread: the controller delivers them after joining, then finalises.
            self.controller.close(flush=QCoreApplication.sendPostedEvents)
            self.token_preview.shutdown()  # the session is closed: a count ends at once
            self.bridge.shutdown()
        super().closeEvent(event)
