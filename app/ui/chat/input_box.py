"""The message input: Enter sends, Shift+Enter adds a line; grows with its text.

:class:`ComposerWidget` is the strip under the conversation: the "editing a message"
banner, the input box, and the Send/Stop and Regenerate buttons. It keeps each
conversation's unsent text while another conversation is open, and (through the
settings) from one run to the next.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.store.settings import UiSettings

from app.ui.labels import Label

_MIN_LINES, _MAX_LINES = 2, 8


class ChatInputWidget(QPlainTextEdit):
    """A plain-text box for the next message."""

    submitted = Signal()
    """Enter was pressed (without Shift) while the box had text."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatInput")
        self.setPlaceholderText("Message  (Enter sends, Shift+Enter adds a line)")
        self.setTabChangesFocus(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().contentsChanged.connect(self._on_document_contents_changed)
        self._on_document_contents_changed()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            mods = event.modifiers()
            if mods & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
                return
            if not mods & (Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier):
                if self.toPlainText().strip():
                    self.submitted.emit()
                return
        super().keyPressEvent(event)

    @Slot()
    def _on_document_contents_changed(self) -> None:
        lines = max(_MIN_LINES, min(_MAX_LINES, self.document().blockCount()))
        line_h = self.fontMetrics().lineSpacing()
        margins = self.contentsMargins()
        h = lines * line_h + 2 * int(self.document().documentMargin()) + margins.top() + margins.bottom() + 4
        self.setFixedHeight(h)


#: the longest unsent text written to the settings (a paste of a whole log stays in the
#: box, but is not rewritten into the settings file at every pause in typing)
UNSENT_KEPT_CHARS = 200_000


class ComposerWidget(QWidget):
    """Edit banner, input box, Send/Stop and Regenerate (see the module docstring)."""

    send_clicked = Signal()
    """Send was clicked, or Enter pressed in the box, while no reply streams."""
    stop_clicked = Signal()
    """Stop (the Send button while a reply streams) was clicked."""
    regenerate_clicked = Signal()
    """Regenerate was clicked."""
    cancel_edit_clicked = Signal()
    """"Cancel edit" was clicked in the banner."""
    edit_resumed = Signal(int, str)
    """A conversation left while one of its messages was edited is open again: take the
    edit up again (message id, the text as it was left)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(0)
        self.edit_banner = QWidget()
        self.edit_banner.setObjectName("editBanner")
        eb = QHBoxLayout(self.edit_banner)
        eb.setContentsMargins(12, 4, 12, 4)
        banner = Label(
            "Editing the marked message: Send makes the new text a new version of it. "
            "The current one stays, with the messages after it: switch back with ‹ ›.")
        banner.setWordWrap(True)  # a long line would widen the window's middle
        eb.addWidget(banner, 1)
        cancel_edit = QPushButton("Cancel edit")
        cancel_edit.clicked.connect(self.cancel_edit_clicked)
        eb.addWidget(cancel_edit)
        self.edit_banner.hide()
        col.addWidget(self.edit_banner)

        row = QWidget()
        row.setObjectName("inputRow")
        ir = QHBoxLayout(row)
        ir.setContentsMargins(12, 8, 12, 10)
        self.input = ChatInputWidget()
        ir.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("primaryButton")
        self.send_button.clicked.connect(self._on_send_button_clicked)
        self.regenerate_button = QPushButton("Regenerate")
        self.regenerate_button.setToolTip("Generate the last reply again (Ctrl+R)")
        self.regenerate_button.clicked.connect(self.regenerate_clicked)
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.regenerate_button)
        ir.addLayout(buttons)
        col.addWidget(row)
        self._streaming = False
        #: the open conversation (None: a new one) and the text typed in the others
        self._conversation: int | None = None
        self._unsent: dict[int | None, str] = {}
        self._before_edit: str | None = None  # the text an edit replaced in the box
        self._editing: int | None = None  # the message being edited
        #: edits left by opening another conversation: (message id, text), by conversation
        self._edits: dict[int | None, tuple[int, str]] = {}
        self._deleted = False  # the open conversation is being deleted
        #: where :meth:`keep_unsent` keeps the texts across restarts, and how it saves
        self._kept: tuple[UiSettings, Callable[[], None]] | None = None
        self.input.submitted.connect(self._on_input_submitted)

    def show_conversation(self, conversation_id: int | None) -> None:
        """Another conversation (None: a new one) is open: the text typed so far stays
        with the conversation it was typed in (a message being edited, which the switch
        cancels, is taken up again with its text when that conversation opens again:
        :attr:`edit_resumed`), and this one's comes back. The text of a conversation
        being deleted (:meth:`deleting`) comes along."""
        if conversation_id == self._conversation:
            return
        text = self.input.toPlainText() if self._before_edit is None else self._before_edit
        if self._editing is not None and not self._deleted:
            self._edits[self._conversation] = (self._editing, self.input.toPlainText())
        self._before_edit, self._editing = None, None
        if self._deleted:
            self._deleted = False
            waiting = self._unsent.get(conversation_id, "")
            self._unsent[conversation_id] = "\n".join(t for t in (text, waiting) if t.strip())
        elif text.strip():
            self._unsent[self._conversation] = text
        else:
            self._unsent.pop(self._conversation, None)
        self._conversation = conversation_id
        self.input.setPlainText(self._unsent.pop(conversation_id, ""))
        if (left := self._edits.pop(conversation_id, None)) is not None:
            self.edit_resumed.emit(*left)

    def unsent_texts(self) -> dict[str, str]:
        """The text typed and not sent, by conversation id (``"new"``: a chat not stored
        yet), the box's included (while a message is edited, the text the edit
        replaced): what :class:`~app.store.settings.UiSettings` keeps across restarts."""
        texts = dict(self._unsent)
        box = self.input.toPlainText() if self._before_edit is None else self._before_edit
        texts[self._conversation] = box
        return {("new" if k is None else str(k)): v for k, v in texts.items() if v.strip()}

    def keep_unsent(self, ui: UiSettings, save_soon: Callable[[], None],
                    exists: Callable[[int], bool]) -> None:
        """Keep the unsent texts in ``ui.unsent`` from now on (``save_soon`` after each
        change, so that a crash loses at most the last moments' typing), after taking
        back an earlier run's (before the first :meth:`show_conversation`): the new
        chat's, and those of conversations that still ``exist`` (keys that name none, a
        file edited by hand, are ignored). A text over :data:`UNSENT_KEPT_CHARS` stays
        in the box but is not written to the settings."""
        for key, text in ui.unsent.items():
            if key == "new":
                self._unsent[None] = text
            elif key.isascii() and key.isdigit() and len(key) < 19 and exists(int(key)):
                self._unsent[int(key)] = text
        if not self.input.toPlainText():
            self.input.setPlainText(self._unsent.pop(self._conversation, ""))
        self._kept = (ui, save_soon)
        self.input.textChanged.connect(self._on_input_text_changed)
        self._on_input_text_changed()

    @Slot()
    def _on_input_text_changed(self) -> None:
        if self._kept is None:
            return
        ui, save_soon = self._kept
        texts = {k: v for k, v in self.unsent_texts().items() if len(v) <= UNSENT_KEPT_CHARS}
        if texts != ui.unsent:
            ui.unsent = texts
            save_soon()

    def deleting(self, conversation_id: int) -> None:
        """``conversation_id`` is about to be deleted: its unsent text is dropped, and
        when it is the open one, the text in the box goes to the conversation opened
        next."""
        self._unsent.pop(conversation_id, None)
        self._edits.pop(conversation_id, None)
        self._deleted = conversation_id == self._conversation
        self._on_input_text_changed()

    def begin_edit(self, text: str, message_id: int) -> None:
        """Message ``message_id`` is edited: ``text`` replaces the box's, which
        :meth:`edit_ended` brings back."""
        if self._before_edit is None:
            self._before_edit = self.input.toPlainText()
        self._editing = message_id
        self.input.setPlainText(text)

    def edit_ended(self) -> None:
        """A message was sent or an edit cancelled: the box shows what an edit replaced,
        else nothing."""
        before, self._before_edit, self._editing = self._before_edit, None, None
        self.input.setPlainText(before or "")

    def stored_as(self, conversation_id: int | None) -> None:
        """The new conversation that is open was stored under ``conversation_id`` (its
        first message or system prompt); no-op for any other."""
        if self._conversation is None:
            self._conversation = conversation_id

    def set_state(self, *, streaming: bool, can_send: bool, can_regenerate: bool,
                  editing: bool, model_loaded: bool) -> None:
        """Buttons, banner and placeholder for the window's state (``streaming``: a
        reply streams in the open conversation)."""
        self._streaming = streaming
        self.send_button.setText("Stop" if streaming else "Send")
        self.send_button.setEnabled(streaming or can_send)
        self.send_button.setToolTip("Stop the reply (Esc or Ctrl+.)" if streaming else
                                    "Send (Enter)" if can_send else "Load a model first")
        self.regenerate_button.setEnabled(can_send and not streaming and can_regenerate)
        self.edit_banner.setVisible(editing)
        self.input.setPlaceholderText("Message  (Enter sends, Shift+Enter adds a line)"
                                      if model_loaded else "Load a model to start chatting")
        self.input.viewport().update()  # the placeholder is painted by the viewport

    @Slot()
    def _on_send_button_clicked(self) -> None:
        (self.stop_clicked if self._streaming else self.send_clicked).emit()

    @Slot()
    def _on_input_submitted(self) -> None:
        # while a reply streams too: the window says why nothing is sent yet (Enter is
        # never Stop: a message typed during a reply must not stop it)
        self.send_clicked.emit()
