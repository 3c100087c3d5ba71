"""The conversation as a column of message widgets in a scroll area.

Each :class:`MessageWidget` shows one message: a header (who, and buttons: Edit for user
messages; Copy and Regenerate for replies), the body in an auto-sizing read-only text
browser, and for replies a footer with the reply's statistics. A user message is shown
as plain text, exactly as typed; a reply is rendered from Markdown by
:mod:`app.ui.chat.markdown_render`, and the text that came from accepted drafts is tinted
afterwards on the rendered document (:mod:`app.ui.chat.draft_tint`), so the tint never
changes the text shown. Only the message that streams is
re-rendered while a reply streams; the view stays scrolled to the bottom unless the user
scrolled up.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QPoint, Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QGuiApplication,
    QResizeEvent,
    QTextCharFormat,
    QWheelEvent,
    QTextCursor,
)
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTextBrowser,
    QTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.engine.chat import unanswered
from app.engine.context_fit import ContextFit, dropped_indices
from app.engine.reply import can_continue
from app.store.history import StoredMessage
from app.ui.chat.code_wrap import hang_code_lines
from app.ui.chat.draft_tint import apply_tint, tinted_ranges
from app.ui.chat.footer import reply_footer
from app.ui.chat.markdown_render import TINT_COLOR, render_markdown
from app.ui.chat.reply_status import WRITING
from app.ui.chat.starter_prompts import StarterPrompt, StarterPromptsWidget
from app.ui.copy_feedback import confirm_copied
from app.ui.elided import ElidedLabelWidget
from app.ui.labels import Label
from app.ui.text_wrap import set_plain_text

log = logging.getLogger(__name__)

_DOCUMENT_CSS = """
p { margin-top: 0px; margin-bottom: 6px; }
pre { font-family: 'DejaVu Sans Mono', 'Menlo', 'Consolas', monospace; }
code { font-family: 'DejaVu Sans Mono', 'Menlo', 'Consolas', monospace;
       background-color: #eef1f4; }
h1, h2, h3, h4 { margin-top: 6px; margin-bottom: 4px; }
table { border-collapse: collapse; }
th { background-color: #eef1f4; }
a { color: #0969da; }
"""

_TINT = QColor(TINT_COLOR)
#: where the conversation search found its text (not the drafts' tint, nor a selection)
FOUND_COLOR = "#9fcbff"


@dataclass(frozen=True, slots=True)
class MessageView:
    """What a message widget shows (built from a stored message)."""

    message_id: int
    role: str
    content: str
    draft_spans: tuple[tuple[int, int], ...] = ()
    footer: str = ""
    model: str | None = None
    version: int = 1
    versions: int = 1
    #: a finished reply's: what was dropped from its request to fit the context window
    context: ContextFit | None = None
    #: a finished reply cut short, which Continue can write further (can_continue)
    continuable: bool = False


def message_view(m: StoredMessage) -> MessageView:
    """What a stored message shows: its text, draft spans, and for a finished reply the
    statistics footer."""
    footer = ""
    if m.role == "assistant" and m.status == "done":
        try:
            footer = reply_footer(m.stats, m.finish_reason, m.note)
        except (TypeError, ValueError, AttributeError):  # figures of the wrong kinds
            log.warning("message %s: statistics not shown (unreadable)", m.id)
            footer = reply_footer(None, m.finish_reason, m.note)
    raw = (m.stats or {}).get("context") if m.role == "assistant" else None
    fit = ContextFit.from_dict(raw) if isinstance(raw, dict) else None
    return MessageView(m.id, m.role, m.content, m.draft_spans, footer, m.model,
                       m.version, m.versions, fit,
                       m.status == "done" and can_continue(m.finish_reason, m.content, m.note))


#: why a message is marked "not in the model's context" (its tooltip)
DROPPED_WHY = ("The last reply was written without this message: it was dropped so that "
               "the conversation fits the context window (Sampling → Model → Context "
               "length; Sampling → Too long for the context)")
UNANSWERED_WHY = ("This message has no reply (stopped before any text, or failed) and the "
                  "conversation went on: the model does not see it. Edit it, then Send, to "
                  "ask it again.")


def out_of_context(views: Sequence[MessageView]) -> dict[int, str]:
    """The messages (ids) the model does not see, with why: user messages left
    unanswered (:func:`~app.engine.chat.unanswered`, left out of every request), and
    those the last finished reply was written without, dropped from its request to fit
    the context window (:func:`~app.engine.context_fit.dropped_indices`; its request was
    the messages before it, after the system prompt where there was one)."""
    shown = [v for v in views if v.content]  # a request leaves empty ones out
    skipped = unanswered([v.role for v in shown])
    out = {shown[i].message_id: UNANSWERED_WHY for i in skipped}
    last = next((i for i in range(len(views) - 1, -1, -1)
                 if views[i].role == "assistant" and views[i].footer), None)
    fit = views[last].context if last is not None else None
    if last is None or fit is None or fit.dropped_messages <= 0:
        return out
    head = ["system"] if fit.kept_system else []
    before = [v for v in views[:last] if v.content and v.message_id not in out]
    gone = dropped_indices([*head, *(v.role for v in before)], fit)
    out.update({before[i - len(head)].message_id: DROPPED_WHY for i in gone if i >= len(head)})
    return out


class MarkdownBrowserWidget(QTextBrowser):
    """A read-only rich-text view whose height follows its content (no scroll bars).

    Links: ``copy:<n>`` emits :attr:`copy_clicked`; http(s) links open in the browser.
    Nothing is ever loaded from a URL (images, style sheets): model output is untrusted.
    """

    copy_clicked = Signal(int)
    """A code block's Copy link was clicked (its index)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.viewport().setAutoFillBackground(False)
        self.document().setDefaultStyleSheet(_DOCUMENT_CSS)
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(
            self._on_document_size_changed
        )
        self.anchorClicked.connect(self._on_self_anchor_clicked)
        self._max_lines: int | None = None  # set_max_lines
        self.verticalScrollBar().valueChanged.connect(self._on_scrolled)
        self.setFixedHeight(24)

    def loadResource(self, type: int, name: QUrl | str) -> Any:
        return None

    @Slot(QUrl)
    def _on_self_anchor_clicked(self, url: QUrl) -> None:
        if url.scheme() == "copy":
            try:
                self.copy_clicked.emit(int(url.path()))
            except ValueError:
                pass
        elif url.scheme() in ("http", "https"):
            QDesktopServices.openUrl(url)

    def _on_document_size_changed(self, *_: object) -> None:
        self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def set_max_lines(self, lines: int | None) -> None:
        """Show at most the first ``lines`` lines as laid out (wrapped lines count), the
        rest cut off below (None: all of it). The text cut off never scrolls into view:
        the wheel scrolls the chat, a selection dragged down stays at the top."""
        self._max_lines = lines
        self.verticalScrollBar().setValue(0)
        self._fit()

    @Slot(int)
    def _on_scrolled(self, value: int) -> None:
        if value and self._max_lines is not None:
            self.verticalScrollBar().setValue(0)

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 (Qt's name)
        if self._max_lines is not None:
            event.ignore()  # to the chat around it
            return
        super().wheelEvent(event)

    def _lines_height(self, lines: int) -> int | None:
        """Pixels down to the end of the ``lines``-th laid-out line (None: fewer)."""
        seen, block = 0, self.document().begin()
        while block.isValid():
            layout = block.layout()
            if seen + layout.lineCount() >= lines:
                line = layout.lineAt(lines - seen - 1)
                return math.ceil(layout.position().y() + line.y() + line.height())
            seen += layout.lineCount()
            block = block.next()
        return None

    def full_height(self) -> int:
        """Pixels the whole text takes."""
        return math.ceil(self.document().size().height()) + 2 * self.frameWidth()

    def _fit(self) -> None:
        height = self.full_height()
        cut = self._lines_height(self._max_lines) if self._max_lines is not None else None
        if cut is not None:
            height = min(height, cut + 2 * self.frameWidth())
        if height != self.height():
            self.setFixedHeight(max(height, 16))


def _who(view: MessageView) -> str:
    """The header's "who": ``You``, or ``Assistant · <model>`` (the shown version's)."""
    if view.role == "user":
        return "You"
    return f"Assistant · {view.model}" if view.model else "Assistant"


class MessageWidget(QFrame):
    """One message. Re-render with :meth:`set_content` (cheap enough for every 30 ms)."""

    edit_clicked = Signal(int)
    """Edit on a user message was clicked (message id)."""
    regenerate_clicked = Signal(int)
    """Regenerate on a reply was clicked (message id)."""
    continue_clicked = Signal(int)
    """Continue on a reply cut short was clicked (message id)."""
    version_requested = Signal(int, int)
    """‹ or › of a message with versions was clicked (message id, version number wanted)."""

    def __init__(self, view: MessageView, tint: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message_id = view.message_id
        self.role = view.role
        self._model = view.model
        self._text = view.content
        self._spans: tuple[tuple[int, int], ...] = view.draft_spans
        self._context = view.context
        self._continuable = view.continuable
        self._tint = tint
        self._code_blocks: tuple[str, ...] = ()
        self._needle = ""  # the text marked where it occurs (the conversation search's)
        self.setObjectName("userMessage" if view.role == "user" else "assistantMessage")
        self.setFrameShape(QFrame.Shape.StyledPanel)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(2)
        header = QHBoxLayout()
        # elided: a long model name must not make the message (and the chat) wider
        self._who = ElidedLabelWidget(_who(view), min_px=40)
        self._who.setObjectName("messageRole")
        header.addWidget(self._who)
        self._streaming = Label(WRITING)
        self._streaming.setObjectName("streamingLabel")
        self._streaming.hide()
        header.addWidget(self._streaming)
        self._dropped = Label("not in the model's context")
        self._dropped.setObjectName("outOfContextLabel")
        self._dropped.hide()
        header.addWidget(self._dropped)
        header.addStretch(1)
        what = "message" if view.role == "user" else "reply"
        self._older = self._tool_button(
            "‹", f"Show the previous version of this {what} and what followed it")
        self._older.clicked.connect(self._on_older_clicked)
        self.version_label = Label()
        self.version_label.setObjectName("versionLabel")
        self.version_label.setToolTip(
            f"Versions of this {what} ({'Edit' if view.role == 'user' else 'Regenerate'} "
            "adds one); each keeps the messages that followed it, and the conversation "
            "continues from the one shown")
        self._newer = self._tool_button(
            "›", f"Show the next version of this {what} and what followed it")
        self._newer.clicked.connect(self._on_newer_clicked)
        for w in (self._older, self.version_label, self._newer):
            header.addWidget(w)
        self._version, self._versions = view.version, view.versions
        self._copy = self._tool_button("Copy", "Copy the whole message")
        self._copy.clicked.connect(self._on_copy_clicked)
        self._edit = self._tool_button("Edit", "Edit this message and send it again")
        self._edit.clicked.connect(self._on_edit_clicked)
        # made in the order shown: Tab follows the order they were made in
        self._continue = self._tool_button(
            "Continue", "Write more of this reply, from where it was cut short (a new "
            "version of it: ‹ › shows this one)")
        self._continue.setObjectName("continueButton")
        self._continue.clicked.connect(self._on_continue_clicked)
        self._continue.setVisible(False)
        self._regen = self._tool_button("Regenerate", "Generate this reply again")
        self._regen.clicked.connect(self._on_regenerate_clicked)
        for b in (self._copy, self._edit, self._continue, self._regen):
            header.addWidget(b)
        self._edit.setVisible(view.role == "user")
        self._regen.setVisible(False)
        layout.addLayout(header)

        self.body = MarkdownBrowserWidget(self)
        self.body.copy_clicked.connect(self._on_body_copy_clicked)
        layout.addWidget(self.body)
        # a long message typed or pasted shows its first lines, and a button for the rest
        self.collapsed = False
        self.more_button = QPushButton()
        self.more_button.setObjectName("moreButton")
        self.more_button.setFlat(True)
        self.more_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.more_button.clicked.connect(lambda: self.set_collapsed(not self.collapsed))
        self.more_button.hide()
        layout.addWidget(self.more_button, 0, Qt.AlignmentFlag.AlignLeft)
        self._footer = Label()
        self._footer.setObjectName("messageFooter")
        self._footer.setWordWrap(True)
        self._footer.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self._footer)
        self.set_footer(view.footer)
        self._update_versions()
        self._render()
        self.set_collapsed(self.role == "user" and _long(view.content))

    def _tool_button(self, text: str, tip: str) -> QToolButton:
        b = QToolButton(self)
        b.setText(text)
        b.setToolTip(tip)
        b.setAutoRaise(True)
        b.setCursor(Qt.CursorShape.PointingHandCursor)
        return b

    @property
    def text(self) -> str:
        return self._text

    @property
    def code_blocks(self) -> tuple[str, ...]:
        return self._code_blocks

    def set_content(self, text: str, draft_spans: Sequence[tuple[int, int]] = ()) -> None:
        """Replace the text (and draft ranges) and re-render."""
        self._text = text
        self._spans = tuple(draft_spans)
        self._render()
        if self.role == "user":
            self.set_collapsed(_long(text))

    def set_tint(self, tint: bool) -> None:
        """Tint (or not) the text that came from accepted drafts."""
        if tint != self._tint:
            self._tint = tint
            self._render()

    def set_footer(self, text: str) -> None:
        self._footer.setText(text)
        self._footer.setVisible(bool(text))

    @property
    def footer_text(self) -> str:
        return self._footer.text()

    @property
    def version(self) -> tuple[int, int]:
        """(shown version, versions) of a message; (1, 1) when never regenerated or
        edited."""
        return self._version, self._versions

    def view(self) -> MessageView:
        """What the widget shows now, as the view it could be built from again."""
        return MessageView(self.message_id, self.role, self._text, self._spans,
                           self.footer_text, self._model, self._version, self._versions,
                           self._context, self._continuable)

    def set_context(self, context: ContextFit | None) -> None:
        """What was dropped from this reply's request to fit the context window."""
        self._context = context

    def set_continuable(self, continuable: bool) -> None:
        """Whether the reply shown was cut short so that Continue can write more."""
        self._continuable = continuable

    def set_out_of_context(self, why: str | None) -> None:
        """Mark a message the model does not see, ``why`` saying so in its tooltip, or
        (None) unmark it (the style sheet's ``[outOfContext="true"]``)."""
        out = why is not None
        self._dropped.setVisible(out)
        self._dropped.setToolTip(why or "")
        if bool(self.property("outOfContext")) != out:
            self.setProperty("outOfContext", out)
            self.style().unpolish(self)
            self.style().polish(self)

    def set_author(self, view: MessageView) -> None:
        """The header names the model of the version shown (a regenerated reply's
        versions may come from different models)."""
        self._model = view.model
        self._context = view.context
        self._continuable = view.continuable
        self._who.set_full_text(_who(view))

    def set_version(self, version: int, versions: int) -> None:
        """Show ``‹ version/versions ›`` (hidden for a single version)."""
        self._version, self._versions = version, versions
        self._update_versions()

    def _update_versions(self) -> None:
        many = self._versions > 1
        for w in (self._older, self.version_label, self._newer):
            w.setVisible(many)
        self.version_label.setText(f"{self._version}/{self._versions}")
        self._older.setEnabled(self._version > 1 and self._copy.isEnabled())
        self._newer.setEnabled(self._version < self._versions and self._copy.isEnabled())

    def set_editing(self, editing: bool) -> None:
        """Mark the message as the one being edited (the style sheet's
        ``[editing="true"]``)."""
        if bool(self.property("editing")) != editing:
            self.setProperty("editing", editing)
            self.style().unpolish(self)
            self.style().polish(self)

    def set_streaming(self, streaming: bool) -> None:
        self._streaming.setVisible(streaming)
        self._copy.setEnabled(not streaming)
        if not streaming:
            self._streaming.setText(WRITING)
        self._update_versions()

    def set_stream_status(self, text: str) -> None:
        """What the streaming reply is doing: waiting, reading its prompt, writing."""
        self._streaming.setText(text)

    @property
    def stream_status(self) -> str:
        """The words beside a streaming reply (empty when it is not streaming)."""
        return self._streaming.text() if self._streaming.isVisibleTo(self) else ""

    def set_regenerate_visible(self, visible: bool, *, last: bool = True,
                               can_continue: bool = True) -> None:
        """Show Regenerate on a reply; ``last``: the conversation's last message (an
        earlier reply's tooltip says what becomes of the messages after it), which
        offers Continue when it was cut short and ``can_continue``."""
        self._regen.setVisible(visible and self.role == "assistant")
        self._regen.setToolTip("Generate this reply again" if last else
                               "Generate this reply again; the messages after it stay with "
                               "the current version (‹ › brings them back)")
        self._continue.setVisible(visible and last and can_continue
                                  and self.role == "assistant" and self._continuable)

    def set_edit_enabled(self, enabled: bool, regenerate: bool | None = None) -> None:
        """Edit, and Regenerate and ‹ › (``regenerate``, default ``enabled``: while a
        message is edited, the messages it would replace stay where they are)."""
        switch = enabled if regenerate is None else regenerate
        self._edit.setEnabled(enabled)
        self._regen.setEnabled(switch)
        self._continue.setEnabled(switch)
        self._older.setEnabled(switch and self._version > 1)
        self._newer.setEnabled(switch and self._version < self._versions)

    def _render(self) -> None:
        if self.role == "user":
            # What the user typed, exactly: spaces, indentation and Markdown characters.
            self._code_blocks = ()
            set_plain_text(self.body, self._text)
        else:
            rendered = render_markdown(self._text)
            self._code_blocks = rendered.code_blocks
            self.body.setHtml(rendered.html)
            hang_code_lines(self.body.document())
            if self._tint and self._spans:
                doc = self.body.document()
                apply_tint(doc, tinted_ranges(doc, rendered, self._text, self._spans), _TINT)
        if self._needle:
            self.mark(self._needle)

    def set_collapsed(self, collapsed: bool) -> None:
        """Show only the first :data:`COLLAPSED_LINES` lines of a long message (the
        button under it shows the rest), or all of it."""
        foldable = self.role == "user" and _long(self._text)  # a reply is never folded
        self.collapsed = collapsed and foldable
        lines = self._text.count("\n") + 1
        self.more_button.setVisible(foldable)
        self.more_button.setText("Show less" if not self.collapsed else
                                 f"Show all {lines:,} lines" if lines > COLLAPSED_LINES
                                 else f"Show all {len(self._text):,} characters")
        self.body.set_max_lines(COLLAPSED_LINES if self.collapsed else None)

    def mark(self, needle: str) -> int:
        """Mark every place the text shown contains ``needle`` (case-insensitive, within
        a paragraph; "" clears the marks); the marks stay when the text is shown again.
        Returns how many places."""
        self._needle = needle
        doc = self.body.document()
        found = QTextCharFormat()
        found.setBackground(QColor(FOUND_COLOR))
        marks: list[QTextEdit.ExtraSelection] = []
        cursor = doc.find(needle) if needle else QTextCursor()
        while not cursor.isNull():
            mark = QTextEdit.ExtraSelection()
            mark.cursor, mark.format = cursor, found
            marks.append(mark)
            cursor = doc.find(needle, cursor)
        self.body.setExtraSelections(marks)
        selection = self.body.textCursor()
        if marks and selection.hasSelection():  # a selection would hide the marks
            selection.clearSelection()
            self.body.setTextCursor(selection)
        return len(marks)

    def first_mark_y(self) -> int | None:
        """Where the first mark is, in pixels from this widget's top (None: no mark)."""
        marks = self.body.extraSelections()
        if not marks:
            return None
        rect = self.body.cursorRect(marks[0].cursor)
        return self.body.viewport().mapTo(self, QPoint(0, rect.top())).y()

    @property
    def shown_text(self) -> str:
        """The text the body shows (the rendered document's plain text)."""
        return self.body.document().toPlainText()

    @Slot()
    def _on_copy_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self._text)
        confirm_copied(self._copy)

    @Slot(int)
    def _on_body_copy_clicked(self, index: int) -> None:
        if 0 <= index < len(self._code_blocks):
            QGuiApplication.clipboard().setText(self._code_blocks[index])
            confirm_copied(self._copy, "Code copied ✓")

    @property
    def copy_button_text(self) -> str:
        """What the message's Copy button says ("Copy", or a confirmation after a copy)."""
        return self._copy.text()

    @Slot()
    def _on_edit_clicked(self) -> None:
        self.edit_clicked.emit(self.message_id)

    @Slot()
    def _on_regenerate_clicked(self) -> None:
        self.regenerate_clicked.emit(self.message_id)

    @Slot()
    def _on_continue_clicked(self) -> None:
        self.continue_clicked.emit(self.message_id)

    @Slot()
    def _on_older_clicked(self) -> None:
        self.version_requested.emit(self.message_id, self._version - 1)

    @Slot()
    def _on_newer_clicked(self) -> None:
        self.version_requested.emit(self.message_id, self._version + 1)


#: lines a long message typed or pasted shows until "Show all" is clicked, and the
#: length from which a message counts as long (lines, or characters on few lines)
COLLAPSED_LINES = 12
LONG_LINES, LONG_CHARS = 30, 3000


def _long(text: str) -> bool:
    return text.count("\n") + 1 > LONG_LINES or len(text) > LONG_CHARS


#: batches of earlier messages a search shows by itself to reach its text, and how long
#: its match then holds the view while the page settles (ms)
SEARCH_BATCHES, FOUND_HOLD_MS = 2, 1500

#: messages a conversation opens with, and more each time "Show earlier messages" is
#: clicked: every message is a rendered text browser, so a conversation of thousands
#: would take minutes and gigabytes to show at once
SHOWN_AT_ONCE = 50


class ChatViewWidget(QScrollArea):
    """The messages of the current conversation, newest at the bottom.

    A conversation opens on its last :data:`SHOWN_AT_ONCE` messages; a button above them
    shows as many earlier ones at a time (:meth:`show_earlier`), the view staying where
    it was. A streaming reply (:meth:`stream`) is re-rendered as its text grows, except
    that after a costly render (its Markdown grows with the reply) the next one waits, so
    rendering takes at most a quarter of the GUI thread's time; the latest text is then
    shown when the wait is over.
    """

    edit_clicked = Signal(int)
    """A user message's Edit was clicked (message id)."""
    regenerate_clicked = Signal(int)
    """A reply's Regenerate was clicked (message id)."""
    continue_clicked = Signal(int)
    """A reply's Continue was clicked (message id: the last reply, cut short)."""
    version_requested = Signal(int, int)
    """A message's ‹ or › was clicked (message id, version number wanted)."""
    starter_prompt_clicked = Signal(str)
    """A starter prompt of the empty chat was clicked (its text, to send)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatView")
        # Tab and clicks focus it; a wheel scroll leaves the focus where it was (the box)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # always there, so that a path of another length after ‹ › does not move the
        # buttons sideways under the pointer
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        self._container = QWidget()
        self._container.setObjectName("chatContainer")
        self._layout = QVBoxLayout(self._container)
        self._layout.setContentsMargins(12, 12, 12, 12)
        self._layout.setSpacing(10)
        self.starters = StarterPromptsWidget(self._container)
        self.starters.starter_prompt_clicked.connect(self.starter_prompt_clicked)
        self.starters.hide()
        self._layout.addWidget(self.starters)
        self.earlier_button = QPushButton()
        self.earlier_button.setObjectName("earlierButton")
        self.earlier_button.clicked.connect(self.show_earlier)
        self.earlier_button.hide()
        self._layout.addWidget(self.earlier_button, 0, Qt.AlignmentFlag.AlignHCenter)
        #: why the last message got no reply (until the next message is shown)
        self.failure = Label()
        self.failure.setObjectName("gaugeNote")
        self.failure.setWordWrap(True)
        self.failure.hide()
        self._layout.addWidget(self.failure)
        self._layout.addStretch(1)
        self.setWidget(self._container)
        self._messages: list[MessageWidget] = []
        self._earlier: list[MessageView] = []  # not shown yet, oldest first
        #: a message kept at its place on the screen (its y minus the scroll value) while
        #: the page grows above it (earlier messages shown), until the user scrolls
        self._anchor: tuple[MessageWidget, int] | None = None
        self._needle = ""  # the conversation search's text, marked where it occurs
        #: the messages the model does not see, with why (:func:`out_of_context`)
        self._out: dict[int, str] = {}
        self._batching = 0  # inside _batch(): _messages_changed waits for its end
        self._continue_allowed = True  # replies run here (a server cannot be asked to)
        #: the message whose first mark the view keeps in sight, until the user scrolls
        self._found: MessageWidget | None = None
        self._restoring = False  # the view itself is scrolling (not the user)
        self._busy = (False, False)
        self._editing: int | None = None  # the message being edited
        self._tint = True
        self._stick = True
        self._next_render = 0.0  # time.monotonic() before which no re-render is due
        self._pending: tuple[int, str, Sequence[tuple[int, int]]] | None = None
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.timeout.connect(self._on_render_timer_timeout)
        self._found_timer = QTimer(self)  # how long the search's match holds the view
        self._found_timer.setSingleShot(True)
        self._found_timer.setInterval(FOUND_HOLD_MS)
        self._found_timer.timeout.connect(self._on_found_timer_timeout)
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._on_scrollbar_range_changed)
        bar.valueChanged.connect(self._on_scrollbar_value_changed)

    @property
    def messages(self) -> list[MessageWidget]:
        return list(self._messages)

    def message(self, message_id: int) -> MessageWidget | None:
        for w in self._messages:
            if w.message_id == message_id:
                return w
        return None

    def clear(self) -> None:
        for w in self._messages:
            self._layout.removeWidget(w)
            # hidden now: deleteLater waits for the event loop, and a nested one (a context
            # menu's) would paint the old conversation under the new one meanwhile
            w.hide()
            w.deleteLater()
        self._messages = []
        self._earlier = []
        self._anchor = self._found = None
        self._update_earlier()
        self._stick = True
        self._update_starters()
        self.failure.hide()

    def set_starter_prompts(self, prompts: Sequence[StarterPrompt], *,
                            base_model: bool = False) -> None:
        """Offer these starters while the chat is empty (none: no starters)."""
        self.starters.set_prompts(prompts, base_model=base_model)
        self._update_starters()

    def _update_starters(self) -> None:
        self.starters.setVisible(bool(self.starters.prompts) and not self._messages)

    def set_messages(self, views: Sequence[MessageView]) -> None:
        """Show a conversation: its last :data:`SHOWN_AT_ONCE` messages, the button for
        the others."""
        with self._batch():
            self.clear()
            split = max(0, len(views) - SHOWN_AT_ONCE)
            self._earlier = list(views[:split])
            for v in views[split:]:
                self.add_message(v)
            self._update_earlier()

    @contextlib.contextmanager
    def _batch(self) -> Iterator[None]:
        """Changes to the shown messages inside are followed by one
        :meth:`_messages_changed`, at the end of the outermost batch."""
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
        self._messages_changed()

    def _messages_changed(self) -> None:
        """The messages shown changed: Regenerate and Continue, the starter prompts and
        the marks of messages the last reply was written without follow (once per
        batch)."""
        if self._batching:
            return
        self._update_regenerate()
        self._update_starters()
        self._mark_out_of_context()
        self._order_tab_stops()

    def _order_tab_stops(self) -> None:
        """Tab goes from the chat view through the shown messages (their buttons and
        text), top to bottom, on to what follows the view (the input box): a message made
        later would otherwise join the window's tab chain at its end, after the side
        panel. Hidden ones are ordered too (Continue shows later): Tab skips them."""
        previous: QWidget = self
        for message in self._messages:
            for w in message.findChildren(QWidget):
                if w.focusPolicy() & Qt.FocusPolicy.TabFocus:
                    QWidget.setTabOrder(previous, w)
                    previous = w

    @property
    def earlier_count(self) -> int:
        """Messages of the conversation above the first one shown."""
        return len(self._earlier)

    @Slot()
    def show_earlier(self) -> None:
        """Show up to :data:`SHOWN_AT_ONCE` more of the earlier messages above the others,
        the view keeping its place (the message that was at the top stays in view)."""
        if not self._earlier:
            return
        batch = self._earlier[-SHOWN_AT_ONCE:]
        del self._earlier[-SHOWN_AT_ONCE:]
        bar = self.verticalScrollBar()
        if self._messages:  # the message at the top stays where it is on the screen
            top = self._messages[0]
            self._anchor = (top, top.y() - bar.value())
        self._stick = False
        first = self._layout.indexOf(self.earlier_button) + 1
        made = [self._message_widget(v) for v in batch]
        for i, w in enumerate(made):
            self._layout.insertWidget(first + i, w)
        self._messages[:0] = made
        self._update_earlier()
        self._messages_changed()

    def _update_earlier(self, *, found_above: bool = False) -> None:
        """The "Show earlier" button's words (``found_above``: the search found its text
        in a message further up than it showed by itself)."""
        n = len(self._earlier)
        self.earlier_button.setVisible(n > 0)
        if n:
            shown = min(n, SHOWN_AT_ONCE)
            self.earlier_button.setText(
                f"Show {shown} earlier message{'' if shown == 1 else 's'} ({n} not shown"
                + ("; the search found it further up)" if found_above else ")")
                if shown < n else f"Show {shown} earlier message{'' if shown == 1 else 's'}")

    def _message_widget(self, view: MessageView) -> MessageWidget:
        """A message's widget, wired, in the view's state (busy, the message edited)."""
        w = MessageWidget(view, self._tint, self._container)
        w.edit_clicked.connect(self.edit_clicked)
        w.regenerate_clicked.connect(self.regenerate_clicked)
        w.continue_clicked.connect(self.continue_clicked)
        w.version_requested.connect(self.version_requested)
        w.set_edit_enabled(not self._busy[0], regenerate=not any(self._busy))
        w.set_editing(w.message_id == self._editing)
        if self._needle:
            w.mark(self._needle)
        w.set_out_of_context(self._out.get(w.message_id))
        return w

    def _mark_out_of_context(self) -> None:
        """Mark the messages the last finished reply was written without
        (:func:`out_of_context`)."""
        self._out = out_of_context([*self._earlier, *(w.view() for w in self._messages)])
        for w in self._messages:
            w.set_out_of_context(self._out.get(w.message_id))

    def add_message(self, view: MessageView) -> MessageWidget:
        w = self._message_widget(view)
        self.failure.hide()
        self._layout.insertWidget(self._layout.indexOf(self.failure), w)
        self._messages.append(w)
        self._stick, self._found = True, None
        self._messages_changed()
        return w

    def find_text(self, needle: str) -> bool:
        """Mark where the conversation's messages contain ``needle`` (stripped; "" clears
        the marks) and scroll to the last message that does, the match a third of the way
        down the view; earlier messages not shown yet are shown until one contains it.
        Returns whether one does. The view keeps the match in sight while the page
        settles (:data:`FOUND_HOLD_MS`), unless the user scrolls or a reply starts. At
        most :data:`SEARCH_BATCHES` batches of earlier messages are shown for it (each
        is rendered at once); beyond them the "Show earlier" button says the search
        found the text further up."""
        self._needle = needle = needle.strip()
        found = [w for w in self._messages if w.mark(needle)]
        for w in found:  # a long message shows all of itself where it has the text
            w.set_collapsed(False)
        folded = needle.casefold()
        # the nearest earlier message whose text has it (the rendered text may not: "**")
        wanted = next((i + 1 for i, v in enumerate(reversed(self._earlier))
                       if folded in v.content.casefold()), 0) if needle and not found else 0
        capped = wanted > SEARCH_BATCHES * SHOWN_AT_ONCE
        if capped:
            wanted = 0
        self._update_earlier(found_above=capped)
        while not found and wanted > 0 and self._earlier:
            before = len(self._earlier)
            self.show_earlier()  # marks the new ones (_message_widget)
            wanted -= before - len(self._earlier)
            found = [w for w in self._messages[:before - len(self._earlier)]
                     if w.first_mark_y() is not None]
            for w in found:
                w.set_collapsed(False)
        self._found = found[-1] if found else None
        if self._found is not None:
            self._anchor, self._stick = None, False
            self._scroll_to_found()
            self._found_timer.start()
        return self._found is not None

    @Slot()
    def _on_found_timer_timeout(self) -> None:
        self._found = None  # settled: later changes (‹ ›, Show all) keep the user's place

    def _scroll_to_found(self) -> None:
        assert self._found is not None
        y = self._found.first_mark_y()
        if y is None:
            self._found = None
            return
        self._restoring = True
        try:
            self.verticalScrollBar().setValue(
                self._found.y() + y - self.viewport().height() // 3)
        finally:
            self._restoring = False

    def update_message(self, view: MessageView) -> None:
        """Show another version of a message in place: the model that wrote it, text,
        footer, ‹ n/m ›. The view keeps its scroll position (it does not follow the bottom
        as the text's height changes), so the ‹ › under the pointer stays there."""
        if (w := self.message(view.message_id)) is not None:
            self._stick = False
            w.set_author(view)
            w.set_content(view.content, view.draft_spans)
            w.set_footer(view.footer)
            w.set_version(view.version, view.versions)
            self._messages_changed()  # a version cut short offers Continue

    def replace_after(self, view: MessageView, after: Sequence[MessageView]) -> None:
        """Another version of a message is shown: it changes in place and the messages
        after it are ``after``. The view keeps its scroll position, as
        :meth:`update_message`, unless more than :data:`SHOWN_AT_ONCE` messages follow:
        those are shown as a conversation opens (its last messages at the bottom, the
        others behind the button), so that a long path costs what opening it costs."""
        with self._batch():
            ids = [v.message_id for v in self._earlier] + [w.message_id for w in self._messages]
            if view.message_id in ids[:-1]:
                self.remove_from(ids[ids.index(view.message_id) + 1])
            self.update_message(view)
            if len(after) > SHOWN_AT_ONCE:
                self.set_messages([*self._earlier, *(w.view() for w in self._messages),
                                   *after])
                return
            made = [self._message_widget(v) for v in after]
            self.failure.hide()
            for w in made:
                self._layout.insertWidget(self._layout.indexOf(self.failure), w)
            self._messages += made

    def set_footer(self, message_id: int, text: str) -> None:
        """Set a message's footer (a streaming reply says what was dropped to fit)."""
        if (w := self.message(message_id)) is not None:
            w.set_footer(text)

    def remove_from(self, message_id: int, failure: str | None = None) -> None:
        """Remove a message and every message after it (one not shown yet too);
        ``failure``: why it was a reply that never came, said under the last message
        until another is shown (only where that message was: not under another
        conversation's)."""
        hidden = next((i for i, v in enumerate(self._earlier) if v.message_id == message_id),
                      None)
        here = hidden is not None
        if hidden is not None:
            del self._earlier[hidden:]
            self._update_earlier()
            if self._messages:
                message_id = self._messages[0].message_id  # every shown one goes
        for i, w in enumerate(self._messages):
            if w.message_id == message_id:
                here = True
                for gone in self._messages[i:]:
                    if self._anchor is not None and self._anchor[0] is gone:
                        self._anchor = None
                    if self._found is gone:
                        self._found = None
                    self._layout.removeWidget(gone)
                    gone.hide()
                    gone.deleteLater()
                del self._messages[i:]
                break
        if not self._messages and self._earlier:  # all shown ones went: the earlier come
            self.show_earlier()
            self._stick = True  # nothing on screen to keep in place: follow the bottom
        self._messages_changed()
        if failure is not None and self._messages and here:
            self.note_no_reply(f"No reply: {failure} Regenerate asks again.")

    def note_no_reply(self, text: str) -> None:
        """Say ``text`` under the last message (why it has no reply) until another
        message is shown."""
        self.failure.setText(text)
        self.failure.show()

    def set_tint(self, tint: bool) -> None:
        self._tint = tint
        for w in self._messages:
            w.set_tint(tint)

    # -- a streaming reply --------------------------------------------------------------
    def begin_stream(self, message_id: int, text: str = "",
                     spans: Sequence[tuple[int, int]] = ()) -> None:
        """Mark a reply as streaming (and show its text so far)."""
        if (w := self.message(message_id)) is not None:
            w.set_streaming(True)
            w.set_content(text, spans)
        self._next_render = 0.0
        self.scroll_to_bottom()

    def set_stream_status(self, message_id: int, text: str) -> None:
        """The words beside the streaming reply (:mod:`app.ui.chat.reply_status`)."""
        if (w := self.message(message_id)) is not None:
            w.set_stream_status(text)

    def stream(self, message_id: int, text: str, spans: Sequence[tuple[int, int]]) -> None:
        """The reply's text so far (see the class docstring for when it is rendered)."""
        self._pending = (message_id, text, spans)
        now = time.monotonic()
        if now < self._next_render:
            if not self._render_timer.isActive():
                self._render_timer.start(max(1, int((self._next_render - now) * 1000)))
            return
        self._render_pending()

    def end_stream(self, message_id: int, text: str, spans: Sequence[tuple[int, int]],
                   footer: str, context: ContextFit | None = None,
                   continuable: bool = False) -> None:
        """The reply ended: its final text and footer, what was dropped from its request
        to fit the context window (the messages it was written without are marked), and
        whether it was cut short so that Continue can write more (:func:`can_continue
        <app.engine.reply.can_continue>`)."""
        self._render_timer.stop()
        self._pending = None
        if (w := self.message(message_id)) is not None:
            w.set_content(text, spans)
            w.set_streaming(False)
            w.set_footer(footer)
            w.set_context(context)
            w.set_continuable(continuable)
        self._messages_changed()

    @Slot()
    def _on_render_timer_timeout(self) -> None:
        self._render_pending()

    def _render_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None or (w := self.message(pending[0])) is None:
            return
        t0 = time.monotonic()
        w.set_content(pending[1], pending[2])
        self._next_render = t0 + 4 * (time.monotonic() - t0)

    def set_busy(self, busy: bool, editing: int | None = None) -> None:
        """While a reply streams, Edit, Regenerate and ‹ › are disabled; while message
        ``editing`` is edited (it is marked), Regenerate and ‹ › (the messages Send
        will move aside stay put)."""
        self._busy = (busy, editing is not None)
        self._editing = editing
        for w in self._messages:
            w.set_edit_enabled(not busy, regenerate=not busy and editing is None)
            w.set_editing(w.message_id == editing)

    def set_continue_allowed(self, allowed: bool) -> None:
        """Whether Continue is offered at all (not while replies run on a server that
        cannot continue one)."""
        self._continue_allowed = allowed
        self._update_regenerate()

    def _update_regenerate(self) -> None:
        # every reply can be written again; an earlier one keeps what followed it with
        # the version it replaces (‹ › brings it back); the last, cut short, continued
        last = self._messages[-1] if self._messages else None
        for w in self._messages:
            w.set_regenerate_visible(True, last=w is last,
                                     can_continue=self._continue_allowed)

    def scroll_to_bottom(self) -> None:
        self._stick, self._found = True, None
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    @Slot(int, int)
    def _on_scrollbar_range_changed(self, _min: int, maximum: int) -> None:
        if self._found is not None:  # the page settles around the search's match
            self._scroll_to_found()
        elif self._stick:
            self.verticalScrollBar().setValue(maximum)
        elif self._anchor is not None:  # earlier messages grew the page above
            widget, offset = self._anchor
            self._restoring = True
            try:
                self.verticalScrollBar().setValue(widget.y() - offset)
            finally:
                self._restoring = False

    @Slot(int)
    def _on_scrollbar_value_changed(self, value: int) -> None:
        self._stick = value >= self.verticalScrollBar().maximum() - 8
        if not self._restoring:  # the user scrolled: the place to keep is theirs now
            self._anchor = self._found = None
