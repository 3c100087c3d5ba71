"""The message input: Enter sends, Shift+Enter adds a line; grows with its text.

:class:`ComposerWidget` is the strip under the conversation: the "editing a message"
banner, the input box, and the Send/Stop and Regenerate buttons. It keeps each
conversation's unsent text while another conversation is open, and (through the
settings) from one run to the next.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QMimeData, Qt, Signal, Slot
from PySide6.QtGui import QKeyEvent, QTextCursor, QTextOption
from PySide6.QtWidgets import (
    QHBoxLayout,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.chat.conversation import same_edit
from app.store.settings import UiSettings
from app.ui.labels import Label
from app.ui.text_wrap import set_plain_text, wrap_mode

_MIN_LINES, _MAX_LINES = 2, 8


class ChatInputWidget(QPlainTextEdit):
    """A plain-text box for the next message."""

    submitted = Signal()
    """Enter was pressed (without Shift) while the box had text."""
    edit_last_requested = Signal()
    """Up was pressed in the empty box: edit the last message sent (as chat apps do)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatInput")
        self.setPlaceholderText("Message  (Enter sends, Shift+Enter adds a line)")
        self.setTabChangesFocus(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().contentsChanged.connect(self._on_document_contents_changed)
        self._on_document_contents_changed()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        # macOS sets the keypad modifier on every arrow key
        if (event.key() == Qt.Key.Key_Up and not self.toPlainText()
                and not event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier):
            self.edit_last_requested.emit()
            return
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

    def insertFromMimeData(self, source: QMimeData) -> None:
        """A paste: a text with a very long unbroken run wraps anywhere before it is laid
        out (:func:`app.ui.text_wrap.wrap_mode`), and keeps doing so until the box gets a
        text of its own (:meth:`set_text`: sent, another conversation): an undo may bring
        the run back at any time."""
        if source.hasText() and wrap_mode(source.text()) == QTextOption.WrapMode.WrapAnywhere:
            self.setWordWrapMode(QTextOption.WrapMode.WrapAnywhere)
        super().insertFromMimeData(source)

    def set_text(self, text: str) -> None:
        """Replace the text (:func:`app.ui.text_wrap.set_plain_text`), the cursor at its
        end: typing goes on from a draft brought back, not in front of it."""
        set_plain_text(self, text)
        self.moveCursor(QTextCursor.MoveOperation.End)

    @Slot()
    def _on_document_contents_changed(self) -> None:
        lines = max(_MIN_LINES, min(_MAX_LINES, self.document().blockCount()))
        line_h = self.fontMetrics().lineSpacing()
        margins = self.contentsMargins()
        h = lines * line_h + 2 * int(self.document().documentMargin()) + margins.top() + margins.bottom() + 4
        self.setFixedHeight(h)


#: the most unsent text written to the settings, all texts together: about the most a
#: message for the largest context window holds (1,048,576 tokens at 2 characters or
#: more each); more stays in the box, and quitting then says it is not kept
UNSENT_KEPT_CHARS = 2_000_000


#: the banner over the box while a message is edited
EDIT_BANNER = ("Editing the marked message: Send makes the new text a new version of it. "
               "The current one stays, with the messages after it: switch back with ‹ ›.")
#: the banner when Enter is pressed on an edit that changed nothing
EDIT_UNCHANGED = ("Nothing changed yet: change the message to send it as a new version, "
                  "or Cancel edit.")


def _id(text: str) -> int | None:
    """A conversation or message id written as text; None for anything else (a
    settings file edited by hand)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 19 else None


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
    given_back_replaced = Signal()
    """The text a refused message gave back to the box was replaced or cleared: what
    was said about it ("Not sent: …") is about a text no longer there."""
    edit_resumed = Signal(object, object, str)
    """A conversation left while one of its messages was edited is open again: take the
    edit up again (conversation id, message id, the text as it was left); one that
    cannot be taken up goes back through :meth:`edit_not_resumed`."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(0)
        self.edit_banner = QWidget()
        self.edit_banner.setObjectName("editBanner")
        eb = QHBoxLayout(self.edit_banner)
        eb.setContentsMargins(12, 4, 12, 4)
        self.edit_banner_label = banner = Label(EDIT_BANNER)
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
        typed = QVBoxLayout()
        typed.setSpacing(2)
        typed.addWidget(self.input, 1)
        #: the token count of the text (:class:`~app.ui.chat.token_preview.TokenPreview`)
        self.token_count = Label()
        self.token_count.setObjectName("tokenCount")
        self.token_count.setWordWrap(True)  # a refusal's words are long
        typed.addWidget(self.token_count)
        ir.addLayout(typed, 1)
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
        self._edit_original = ""  # its text as stored: Send waits for a change
        self._resend = False  # … unless it went unanswered: then it may go as it is
        self._can_send = False
        #: edits left by opening another conversation: (message id, text), by conversation
        self._edits: dict[int | None, tuple[int, str]] = {}
        self._deleted: int | None = None  # the open conversation, while it is deleted
        #: where :meth:`keep_unsent` keeps the texts across restarts, and how it saves
        #: them (soon, now)
        self._kept: tuple[UiSettings, Callable[[], object], Callable[[], object]] | None = None
        #: characters of unsent text left out of the settings at the last save (over
        #: :data:`UNSENT_KEPT_CHARS`): lost at a quit
        self.unkept = 0
        self.input.submitted.connect(self._on_input_submitted)
        self.input.textChanged.connect(self._update_send_button)
        self._given_back: str | None = None  # the start of a text given back, while there
        self.input.textChanged.connect(self._on_input_text_changed)

    def show_conversation(self, conversation_id: int | None) -> None:
        """Another conversation (None: a new one) is open: the text typed so far stays
        with the conversation it was typed in (a message being edited, which the switch
        cancels, is taken up again with its text when that conversation opens again:
        :attr:`edit_resumed`), and this one's comes back. The text of a conversation
        being deleted (:meth:`deleting`) comes along, an edit's rewritten text too."""
        self._given_back = None  # what was said of a text given back is over
        if conversation_id == self._conversation:
            return
        text = self.input.toPlainText() if self._before_edit is None else self._before_edit
        rewrite = "" if self._editing is None or self.edit_unchanged else self.input.toPlainText()
        if self._editing is not None and self._deleted is None:
            self._edits[self._conversation] = (self._editing, self.input.toPlainText())
        self._before_edit, self._editing = None, None
        if self._deleted is not None:
            self._deleted = None
            waiting = self._unsent.get(conversation_id, "")
            self._unsent[conversation_id] = "\n".join(
                t for t in (text, rewrite, waiting) if t.strip())
        elif text.strip():
            self._unsent[self._conversation] = text
        else:
            self._unsent.pop(self._conversation, None)
        self._conversation = conversation_id
        self.input.set_text(self._unsent.pop(conversation_id, ""))
        if (left := self._edits.pop(conversation_id, None)) is not None:
            self.edit_resumed.emit(conversation_id, *left)

    def edit_not_resumed(self, conversation_id: int, message_id: int, text: str) -> None:
        """:attr:`edit_resumed` could not take the edit up (a reply streams, the message
        is gone, another conversation is open by now): its text is not lost. Another
        conversation open: it waits for the next opening of its own; else it joins the
        box's text."""
        if conversation_id != self._conversation:
            self._edits[conversation_id] = (message_id, text)
        else:
            box = self.input.toPlainText()
            self.input.set_text(f"{box}\n\n{text}" if box.strip() else text)
        self.save_unsent()

    def unsent_texts(self) -> dict[str, str]:
        """The text typed and not sent, as :class:`~app.store.settings.UiSettings` keeps
        it across restarts: by conversation id (``"new"``: a chat not stored yet), the
        box's included, and an edit's text (left for another conversation, or under way)
        as ``"<conversation>:edit:<message>"``."""
        texts = dict(self._unsent)
        box = self.input.toPlainText() if self._before_edit is None else self._before_edit
        texts[self._conversation] = box
        out = {("new" if k is None else str(k)): v for k, v in texts.items() if v.strip()}
        edits = dict(self._edits)
        if self._editing is not None:
            edits[self._conversation] = (self._editing, self.input.toPlainText())
        out.update({f"{k}:edit:{mid}": v for k, (mid, v) in edits.items()
                    if k is not None and v.strip()})
        return out

    def keep_unsent(self, ui: UiSettings, save: tuple[Callable[[], object], Callable[[], object]],
                    exists: Callable[[int], bool]) -> None:
        """Keep the unsent texts in ``ui.unsent`` from now on, saved (``save``: soon,
        now) after each change, at once when text went away (sent: a crash must not
        bring it back), so that a crash loses at most the last moments' typing; after
        taking back an earlier run's (before the first :meth:`show_conversation`): the
        new chat's, and those of conversations that may still ``exist`` (keys that name
        none, a file edited by hand, are ignored). Texts over :data:`UNSENT_KEPT_CHARS`
        (each, and all together) stay in the box but are not written to the settings
        (:attr:`unkept` counts them)."""
        for key, text in ui.unsent.items():
            conv, _, mid = key.partition(":edit:")
            if conv == "new" and not mid:
                self._unsent[None] = text
            elif _id(conv) is not None and exists(int(conv)) and not mid:
                self._unsent[int(conv)] = text
            elif _id(conv) is not None and _id(mid) is not None and exists(int(conv)):
                self._edits[int(conv)] = (int(mid), text)
        if not self.input.toPlainText():
            self.input.set_text(self._unsent.pop(self._conversation, ""))
        self._kept = (ui, *save)
        self.input.textChanged.connect(self.save_unsent)
        self.save_unsent()

    @Slot()
    def save_unsent(self) -> None:
        """Write the unsent texts into the settings given to :meth:`keep_unsent`."""
        if self._kept is None:
            return
        ui, save_soon, save_now = self._kept
        texts, total, self.unkept = {}, 0, 0
        here = "new" if self._conversation is None else str(self._conversation)
        # the open conversation's first (what is being typed), then the shortest
        for key, text in sorted(self.unsent_texts().items(), key=lambda kv: (
                kv[0].partition(":")[0] != here, len(kv[1]))):
            if total + len(text) <= UNSENT_KEPT_CHARS:
                texts[key] = text
                total += len(text)
            else:
                self.unkept += len(text)
        if texts != ui.unsent:
            went = any(k not in texts for k in ui.unsent)  # sent, or cleared
            ui.unsent = texts
            (save_now if went else save_soon)()

    def deleting(self, conversation_id: int, delete: Callable[[int], bool]) -> None:
        """Delete ``conversation_id`` (``delete`` says whether it was): its unsent text
        and edit go with it, and when it was the open one, the text in the box goes to
        the conversation opened next (a deletion that failed keeps everything)."""
        self._deleted = conversation_id if conversation_id == self._conversation else None
        deleted = delete(conversation_id)
        self._deleted = None
        if deleted:
            self._unsent.pop(conversation_id, None)
            self._edits.pop(conversation_id, None)
            self.save_unsent()

    def begin_edit(self, original: str, message_id: int, text: str | None = None, *,
                   resend: bool = False) -> None:
        """Message ``message_id`` (whose text is ``original``) is edited: ``text``
        (default ``original``) replaces the box's, which :meth:`edit_ended` brings back.
        Send waits until the text differs from ``original``, unless ``resend`` (a
        question left unanswered, asked again as it is)."""
        self._given_back = None  # what was said of a text given back is over
        if self._before_edit is None:
            self._before_edit = self.input.toPlainText()
        self._editing, self._edit_original = message_id, original
        self._resend = resend
        self.input.set_text(original if text is None else text)

    def sent(self, text: str) -> None:
        """A user message ``text`` was stored: the box empties (:meth:`edit_ended`) when
        it held that text or an edit; a starter prompt sent leaves what was typed."""
        self._given_back = None  # what was said of a text given back is over
        if self._before_edit is not None or self.input.toPlainText() == text:
            self.edit_ended()

    def given_back(self, conversation_id: int | None, text: str) -> None:
        """A message sent in ``conversation_id`` came back (it was refused): ``text``
        goes in its box, before whatever was typed there since, so nothing is lost (the
        box on screen when that conversation is open, else its unsent text)."""
        here = conversation_id == self._conversation
        typed = self.input.toPlainText() if here else self._unsent.get(conversation_id, "")
        joined = f"{text}\n\n{typed}" if typed.strip() else text
        if here:
            self.input.set_text(joined)
            self._update_send_button()
            self._given_back = text[:40].strip() or None
        else:
            self._unsent[conversation_id] = joined
        self.save_unsent()

    @Slot()
    def _on_input_text_changed(self) -> None:
        if self._given_back is not None and self._given_back not in self.input.toPlainText():
            self._given_back = None
            self.given_back_replaced.emit()

    def edit_ended(self) -> None:
        """A message was sent or an edit cancelled: the box shows what an edit replaced,
        else nothing."""
        before, self._before_edit, self._editing = self._before_edit, None, None
        self.input.set_text(before or "")
        self._update_send_button()

    def stored_as(self, conversation_id: int | None) -> None:
        """The new conversation that is open was stored under ``conversation_id`` (its
        first message or system prompt); no-op for any other."""
        if self._conversation is None and conversation_id is not None:
            self._conversation = conversation_id
            self.save_unsent()  # its text is kept under its id from now on

    def set_state(self, *, streaming: bool, can_send: bool, can_regenerate: bool,
                  editing: bool, model_loaded: bool) -> None:
        """Buttons, banner and placeholder for the window's state (``streaming``: a
        reply streams in the open conversation)."""
        self._streaming, self._can_send = streaming, can_send
        self._update_send_button()
        self.regenerate_button.setEnabled(can_send and not streaming and can_regenerate)
        self.edit_banner.setVisible(editing)
        self.input.setPlaceholderText("Message  (Enter sends, Shift+Enter adds a line)"
                                      if model_loaded else "Load a model to start chatting")
        self.input.viewport().update()  # the placeholder is painted by the viewport

    @property
    def edit_unchanged(self) -> bool:
        """A message is edited and the box still holds its text as stored (spaces and
        line breaks after it aside)."""
        return self._editing is not None and same_edit(self.input.toPlainText(),
                                                        self._edit_original)

    @Slot()
    def _update_send_button(self) -> None:
        same = self.edit_unchanged and not self._resend  # read once: on every keystroke
        if not same:
            self.edit_banner_label.setText(EDIT_BANNER)
        unchanged = not self._streaming and same
        self.send_button.setText("Stop" if self._streaming else "Send")
        self.send_button.setEnabled(self._streaming or (self._can_send and not unchanged))
        self.send_button.setToolTip(
            "Stop the reply (Esc or Ctrl+.)" if self._streaming else
            "Change the message to send it as a new version" if unchanged and self._can_send
            else "Send (Enter)" if self._can_send else "Load a model first")

    @Slot()
    def _on_send_button_clicked(self) -> None:
        (self.stop_clicked if self._streaming else self.send_clicked).emit()

    @Slot()
    def _on_input_submitted(self) -> None:
        # while a reply streams too: the window says why nothing is sent yet (Enter is
        # never Stop: a message typed during a reply must not stop it). An edit that
        # changed nothing is said in the edit's own banner, where the eyes are.
        if self.edit_unchanged and not self._resend and not self._streaming:
            self.edit_banner_label.setText(EDIT_UNCHANGED)
            return
        self.send_clicked.emit()
