"""The conversation list: search, new, rename (double-click or menu), delete (menu).

The widget only shows conversations and reports what the user did; the window applies it
to the history store and calls :meth:`ConversationListWidget.set_conversations` again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from PySide6.QtCore import (
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QSize,
    Qt,
    QTimer,
    Signal,
    SignalInstance,
    Slot,
)
from PySide6.QtGui import (
    QColor,
    QFocusEvent,
    QFont,
    QIcon,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QPainter,
    QShortcut,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from app.store.history import Conversation

_ID_ROLE = Qt.ItemDataRole.UserRole
#: a row's line of the message where the search found its text (None: no such line)
_SNIPPET_ROLE = Qt.ItemDataRole.UserRole + 1
#: a row's title as the history had it when the list was filled
_TITLE_ROLE = Qt.ItemDataRole.UserRole + 2
_SNIPPET_COLOR = QColor("#5a6b7f")


#: the keys that open the next and the previous conversation of the list
STEP_KEYS = ("Ctrl+PgDown", "Ctrl+PgUp")


def _item_id(item: QListWidgetItem) -> int | None:
    """The conversation id of a row; None for the "no conversation matches" line."""
    value = item.data(_ID_ROLE)
    return int(value) if value is not None else None


class _List(QListWidget):
    """A list whose right-click only opens the menu: it does not also select (and so
    open) the conversation under the pointer, which Export… or Delete… act on by id."""

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt's name)
        if event.button() == Qt.MouseButton.RightButton:
            event.accept()
            return
        super().mousePressEvent(event)

    def focusInEvent(self, event: QFocusEvent) -> None:  # noqa: N802 (Qt's name)
        """Qt makes the first row current when a list without a current row gains focus
        (a dialog closing, Tab): that would open a conversation nobody chose — after
        deleting the open one, the top one instead of the new chat. The list keeps no
        current row then; the arrow keys still pick one."""
        if self.currentItem() is not None:
            super().focusInEvent(event)
            return
        blocked = self.blockSignals(True)
        try:
            super().focusInEvent(event)
            self.selectionModel().clearCurrentIndex()
        finally:
            self.blockSignals(blocked)


class _SnippetDelegate(QStyledItemDelegate):
    """A row as Qt draws it (the title, elided), and under the title, when the search
    found its text in a message, that line of the message: smaller, grey, elided."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        snippet = index.data(_SNIPPET_ROLE)
        if not snippet:
            super().paint(painter, option, index)
            return
        line = option.fontMetrics.height()
        rect = option.rect
        top = QStyleOptionViewItem(option)
        top.displayAlignment = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop
        super().paint(painter, top, index)
        painter.save()
        font = QFont(painter.font())
        if font.pointSizeF() > 0:
            font.setPointSizeF(font.pointSizeF() * 0.9)
        elif font.pixelSize() > 0:  # a font sized in pixels has no point size
            font.setPixelSize(max(8, round(font.pixelSize() * 0.9)))
        painter.setFont(font)
        painter.setPen(_SNIPPET_COLOR)
        below = rect.adjusted(12, line + 6, -8, 0)
        painter.drawText(below, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop,
                         painter.fontMetrics().elidedText(str(snippet),
                                                          Qt.TextElideMode.ElideRight,
                                                          below.width()))
        painter.restore()

    def updateEditorGeometry(self, editor: QWidget, option: QStyleOptionViewItem,  # noqa: N802
                             index: QModelIndex | QPersistentModelIndex) -> None:
        """Renaming edits the title's line; the found line stays in sight below."""
        super().updateEditorGeometry(editor, option, index)
        if index.data(_SNIPPET_ROLE):
            rect = editor.geometry()
            rect.setHeight(max(rect.height() - option.fontMetrics.height(),
                               editor.sizeHint().height()))
            editor.setGeometry(rect)

    def sizeHint(self, option: QStyleOptionViewItem,  # noqa: N802 (Qt's name)
                 index: QModelIndex | QPersistentModelIndex) -> QSize:
        size = super().sizeHint(option, index)
        if index.data(_SNIPPET_ROLE):
            size.setHeight(size.height() + option.fontMetrics.height())
        return size


class ConversationListWidget(QWidget):
    """Conversations, most recent first, with a search box on top."""

    conversation_activated = Signal(int)
    """The user selected a conversation (id)."""
    new_conversation_clicked = Signal()
    """The "New chat" button was clicked."""
    conversation_renamed = Signal(int, str)
    """The user renamed a conversation (id, new title)."""
    conversation_delete_clicked = Signal(int)
    """The user chose Delete on a conversation (id)."""
    conversation_export_clicked = Signal(int)
    """The user chose Export… on a conversation (id)."""
    search_changed = Signal(str)
    """The search text changed (debounced by 200 ms)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("conversationList")
        self._writing: int | None = None  # the conversation whose reply is being written
        self._writing_icon = self.style().standardIcon(QStyle.StandardPixmap.SP_BrowserReload)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 4, 8)
        self.new_button = QPushButton("+  New chat")
        self.new_button.setObjectName("newChatButton")
        self.new_button.clicked.connect(self.new_conversation_clicked)
        layout.addWidget(self.new_button)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search conversations")
        self.search.setClearButtonEnabled(True)
        layout.addWidget(self.search)
        self.list = _List()
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setItemDelegate(_SnippetDelegate(self.list))
        self.list.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked | QAbstractItemView.EditTrigger.EditKeyPressed
        )
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._on_list_custom_context_menu_requested)
        self.list.currentItemChanged.connect(self._on_list_current_item_changed)
        self.list.itemChanged.connect(self._on_list_item_changed)
        layout.addWidget(self.list, 1)
        # Delete on the list deletes the current conversation (the window asks first)
        delete_key = QShortcut(QKeySequence(QKeySequence.StandardKey.Delete), self.list,
                               context=Qt.ShortcutContext.WidgetShortcut)
        delete_key.activated.connect(self._on_delete_key_activated)
        # anywhere in the window, as a browser's keys for its tabs (the list shown)
        for key, delta in ((STEP_KEYS[0], 1), (STEP_KEYS[1], -1)):
            step = QShortcut(QKeySequence(key), self,
                             context=Qt.ShortcutContext.WindowShortcut)
            step.activated.connect(lambda delta=delta: self.step(delta))
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(200)
        self._search_timer.timeout.connect(self._on_search_timer_timeout)
        self.search.textChanged.connect(self._on_search_text_changed)
        # from the search box, Down and Enter go to what it found
        self.search.installEventFilter(self)
        self.search.returnPressed.connect(self._on_search_down_activated)
        self._filling = False

    def set_conversations(self, conversations: Sequence[Conversation], current: int | None,
                          snippets: Mapping[int, str] | None = None) -> None:
        """Show ``conversations`` and select ``current`` (without emitting activation);
        ``snippets``: by id, a line of the message where the search found its text,
        shown under the title.

        When a search finds nothing, one greyed, unselectable line says so."""
        self._filling = True
        try:
            self.list.clear()
            for c in conversations:
                item = QListWidgetItem(c.title)
                item.setData(_ID_ROLE, c.id)
                item.setData(_TITLE_ROLE, c.title)  # as stored: an edit of it is a rename
                item.setToolTip(c.title)
                if snippets and (found := snippets.get(c.id)):
                    item.setData(_SNIPPET_ROLE, found)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
                self.list.addItem(item)
                if c.id == current:
                    self.list.setCurrentItem(item)
            self._mark_writing()
            needle = " ".join(self.search.text().split())
            if not conversations and needle:
                # on two lines, so that a narrow sidebar shows the words whole (the list
                # elides a line instead of wrapping it)
                line = QListWidgetItem(f"No conversation matches\n\u201c{needle}\u201d")
                line.setFlags(Qt.ItemFlag.NoItemFlags)  # greyed, not selectable
                line.setToolTip(line.text())
                self.list.addItem(line)
        finally:
            self._filling = False

    def set_writing(self, conversation_id: int | None) -> None:
        """Mark the conversation whose reply is being written (None: none), so that a
        reply left streaming in another conversation shows in the list."""
        if conversation_id != self._writing:
            self._writing = conversation_id
            self._mark_writing()

    def _mark_writing(self) -> None:
        for i in range(self.list.count()):
            item = self.list.item(i)
            cid = _item_id(item)
            if cid is None:
                continue
            writing = cid == self._writing
            font = item.font()
            font.setItalic(writing)
            item.setFont(font)
            item.setIcon(self._writing_icon if writing else QIcon())
            title = item.text()
            item.setToolTip(f"{title}\n(a reply is being written here)" if writing else title)

    def ids(self) -> list[int]:
        """The listed conversations' ids, top to bottom."""
        return [cid for i in range(self.list.count())
                if (cid := _item_id(self.list.item(i))) is not None]

    def titles(self) -> list[str]:
        """The listed conversations' titles, top to bottom."""
        return [self.list.item(i).text() for i in range(self.list.count())
                if _item_id(self.list.item(i)) is not None]

    def title_of(self, conversation_id: int) -> str | None:
        """That conversation's title as listed; None when it is not listed."""
        item = self._item_for(conversation_id)
        return item.text() if item is not None else None

    def placeholder(self) -> str | None:
        """The line shown instead of conversations (a search found none), else None."""
        if self.list.count() == 1 and _item_id(self.list.item(0)) is None:
            return self.list.item(0).text()
        return None

    def step(self, delta: int) -> None:
        """Open the conversation ``delta`` rows below the current one in the list
        (negative: above; none current: from the top or the bottom); past either end
        nothing changes."""
        rows = [i for i in range(self.list.count()) if _item_id(self.list.item(i)) is not None]
        current = self.list.currentRow()
        here = rows.index(current) if current in rows else (-1 if delta > 0 else len(rows))
        if 0 <= here + delta < len(rows):
            self.list.setCurrentRow(rows[here + delta])

    def _item_for(self, conversation_id: int) -> QListWidgetItem | None:
        for i in range(self.list.count()):
            if _item_id(self.list.item(i)) == conversation_id:
                return self.list.item(i)
        return None

    @Slot(QListWidgetItem, QListWidgetItem)
    def _on_list_current_item_changed(
        self, current: QListWidgetItem | None, _previous: QListWidgetItem | None
    ) -> None:
        cid = _item_id(current) if current is not None else None
        if self._filling or cid is None:
            return
        self.conversation_activated.emit(cid)

    @Slot(QListWidgetItem)
    def _on_list_item_changed(self, item: QListWidgetItem) -> None:
        cid = _item_id(item)
        if self._filling or cid is None or item.text() == item.data(_TITLE_ROLE):
            return  # (a change of its look, or an edit that left the title as it was)
        self.conversation_renamed.emit(cid, item.text())

    @Slot(QPoint)
    def _on_list_custom_context_menu_requested(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        cid = _item_id(item) if item is not None else None
        if item is None or cid is None:
            return
        # The menu runs an event loop: a reply finishing meanwhile refills the list and
        # deletes ``item``. Only the id is kept across it.
        menu = QMenu(self)
        rename = menu.addAction("Rename")
        export = menu.addAction("Export…")
        delete = menu.addAction("Delete")
        # the row the menu is for shows selected while it is open (selecting does not
        # open it: the current row does), then the open conversation's row again
        item.setSelected(True)
        chosen = menu.exec(self.list.viewport().mapToGlobal(pos))
        menu.deleteLater()
        current = self.list.currentItem()
        if current is not None:
            current.setSelected(True)
        if chosen is rename:
            self.rename_conversation(cid)
        elif chosen is export:
            self.export_conversation(cid)
        elif chosen is delete:
            self.delete_conversation(cid)

    def rename_conversation(self, conversation_id: int) -> bool:
        """Start editing that conversation's title in the list (the menu's Rename).
        Returns False, doing nothing, when it is no longer listed."""
        item = self._item_for(conversation_id)
        if item is None:
            return False
        self.list.editItem(item)
        return True

    def export_conversation(self, conversation_id: int) -> bool:
        """Emit :attr:`conversation_export_clicked` (the menu's Export…) if that
        conversation is still listed; returns whether it was."""
        return self._emit_if_listed(self.conversation_export_clicked, conversation_id)

    def delete_conversation(self, conversation_id: int) -> bool:
        """Emit :attr:`conversation_delete_clicked` (the menu's Delete) if that
        conversation is still listed; returns whether it was."""
        return self._emit_if_listed(self.conversation_delete_clicked, conversation_id)

    def _emit_if_listed(self, signal: SignalInstance, conversation_id: int) -> bool:
        if self._item_for(conversation_id) is None:
            return False
        signal.emit(conversation_id)
        return True

    @Slot()
    def _on_delete_key_activated(self) -> None:
        item = self.list.currentItem()
        cid = _item_id(item) if item is not None else None
        if cid is not None and self.list.state() != QAbstractItemView.State.EditingState:
            self.conversation_delete_clicked.emit(cid)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """Down in the search box: into the list (:meth:`_on_search_down_activated`);
        Ctrl+E there is the window's Export (a line edit takes it as "end of line" on
        Linux: the box's End key does that)."""
        if (watched is self.search and event.type() == QEvent.Type.ShortcutOverride
                and isinstance(event, QKeyEvent) and event.key() == Qt.Key.Key_E
                and event.modifiers() == Qt.KeyboardModifier.ControlModifier):
            return True  # not taken by the box: the shortcut goes to the window
        if (watched is self.search and event.type() == QEvent.Type.KeyPress
                and isinstance(event, QKeyEvent) and event.key() == Qt.Key.Key_Down
                and not event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier):
            self._on_search_down_activated()
            return True
        return super().eventFilter(watched, event)

    @Slot()
    def _on_search_down_activated(self) -> None:
        """Into the list: the first conversation listed is opened unless the open one is
        listed (a search typed a moment ago is applied first)."""
        if self._search_timer.isActive():
            self._search_timer.stop()
            self._on_search_timer_timeout()
        if not self.ids():
            return
        if self.list.currentItem() is None or _item_id(self.list.currentItem()) is None:
            self.list.setCurrentRow(0)
        self.list.setFocus(Qt.FocusReason.ShortcutFocusReason)

    @Slot(str)
    def _on_search_text_changed(self, _text: str) -> None:
        self._search_timer.start()

    @Slot()
    def _on_search_timer_timeout(self) -> None:
        self.search_changed.emit(self.search.text())
