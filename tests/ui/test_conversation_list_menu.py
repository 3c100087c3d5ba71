"""The conversation list's right-click menu survives the list being refilled while it is
open (a reply finishing refreshes it) and does not open the conversation it acts on, and a
search that finds nothing says so."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QAbstractItemView, QApplication, QLineEdit, QMenu

from app.store.history import Conversation
from app.ui.chat.conversation_list import ConversationListWidget

FOXES = Conversation(1, "About foxes", "", 0.0, 1.0)
OWLS = Conversation(2, "About owls", "", 0.0, 2.0)


@pytest.fixture
def widget(qtbot) -> ConversationListWidget:  # type: ignore[no-untyped-def]
    w = ConversationListWidget()
    qtbot.addWidget(w)
    w.resize(300, 400)
    w.show()
    w.set_conversations([OWLS, FOXES], current=2)
    return w


def _choose_while_open(qtbot, w: ConversationListWidget, row: int, action: str,  # type: ignore[no-untyped-def]
                       meanwhile: Callable[[], None],
                       open_menu: Callable[[QPoint], None] | None = None) -> None:
    """Right-click ``row``; while the menu is open run ``meanwhile``, then choose
    ``action`` with the keyboard. ``open_menu(pos)`` opens it (default: the list's
    context-menu signal, as Qt emits it on a right-click)."""
    seen: list[str] = []
    tries = [250]  # 5 s: a menu that never opened must not be answered in a later test

    def in_menu() -> None:
        menu = QApplication.activePopupWidget()
        if not isinstance(menu, QMenu):
            tries[0] -= 1
            if tries[0] > 0:
                QTimer.singleShot(20, in_menu)  # not shown yet
            return
        meanwhile()
        chosen = next(a for a in menu.actions() if a.text() == action)
        menu.setActiveAction(chosen)
        seen.append(action)
        QTest.keyClick(menu, Qt.Key.Key_Return)

    QTimer.singleShot(0, in_menu)
    pos = w.list.visualItemRect(w.list.item(row)).center()
    # returns once the menu has closed
    (open_menu or w.list.customContextMenuRequested.emit)(pos)
    assert seen == [action]


def test_delete_from_the_menu_after_the_list_was_refilled(qtbot, widget) -> None:  # type: ignore[no-untyped-def]
    w = widget
    with qtbot.waitSignal(w.conversation_delete_clicked) as deleted:
        _choose_while_open(qtbot, w, 1, "Delete",
                           lambda: w.set_conversations([FOXES, OWLS], current=2))
    assert deleted.args == [FOXES.id]


def test_export_from_the_menu_after_the_list_was_refilled(qtbot, widget) -> None:  # type: ignore[no-untyped-def]
    w = widget
    with qtbot.waitSignal(w.conversation_export_clicked) as exported:
        _choose_while_open(qtbot, w, 0, "Export…",
                           lambda: w.set_conversations([FOXES, OWLS], current=2))
    assert exported.args == [OWLS.id]


def test_a_right_click_opens_the_menu_not_the_conversation(qtbot, widget) -> None:  # type: ignore[no-untyped-def]
    w = widget
    activated: list[int] = []
    w.conversation_activated.connect(activated.append)
    requested: list[QPoint] = []
    w.list.customContextMenuRequested.connect(requested.append)
    window = w.list.window().windowHandle()

    def right_click(pos: QPoint) -> None:  # through the window, as a mouse does it
        QTest.mouseClick(window, Qt.MouseButton.RightButton,
                         pos=w.list.viewport().mapTo(w.list.window(), pos))

    shown: list[list[str]] = []  # the rows selected while the menu is open

    def while_open() -> None:
        shown.append([i.text() for i in w.list.selectedItems()])

    with qtbot.waitSignal(w.conversation_export_clicked) as exported:
        _choose_while_open(qtbot, w, 1, "Export…", while_open, open_menu=right_click)
    assert requested and exported.args == [FOXES.id]
    assert shown == [[FOXES.title]]  # the menu's row shows which conversation it is for
    assert [i.text() for i in w.list.selectedItems()] == [OWLS.title]  # then owls again
    assert activated == [] and w.list.currentRow() == 0  # owls stays open
    foxes = w.list.visualItemRect(w.list.item(1)).center()
    qtbot.mouseClick(w.list.viewport(), Qt.MouseButton.LeftButton, pos=foxes)
    assert activated == [FOXES.id] and w.list.currentRow() == 1


def test_rename_from_the_menu_edits_the_row_where_it_is_now(qtbot, widget) -> None:  # type: ignore[no-untyped-def]
    w = widget
    _choose_while_open(qtbot, w, 1, "Rename",  # foxes moves from row 1 to row 0
                       lambda: w.set_conversations([FOXES, OWLS], current=2))
    assert w.list.state() == QAbstractItemView.State.EditingState
    editors = [e for e in w.list.viewport().findChildren(QLineEdit) if e.isVisible()]
    assert [e.text() for e in editors] == [FOXES.title]


def test_a_conversation_gone_meanwhile_is_left_alone(qtbot, widget) -> None:  # type: ignore[no-untyped-def]
    w = widget
    emitted: list[int] = []
    w.conversation_delete_clicked.connect(emitted.append)
    _choose_while_open(qtbot, w, 1, "Delete", lambda: w.set_conversations([OWLS], current=2))
    _choose_while_open(qtbot, w, 0, "Rename", lambda: w.set_conversations([FOXES], current=None))
    assert emitted == [] and w.list.state() != QAbstractItemView.State.EditingState


def test_a_search_without_matches_says_so_in_a_line_that_cannot_be_chosen(
        qtbot, widget) -> None:  # type: ignore[no-untyped-def]
    w = widget
    activated: list[int] = []
    w.conversation_activated.connect(activated.append)
    w.search.setText("  zebra ")
    w.set_conversations([], current=None)
    assert w.placeholder() == "No conversation matches\n\u201czebra\u201d"
    assert w.ids() == [] and w.titles() == []
    line = w.list.item(0)
    assert line.flags() == Qt.ItemFlag.NoItemFlags
    qtbot.mouseClick(w.list.viewport(), Qt.MouseButton.LeftButton,
                     pos=w.list.visualItemRect(line).center())
    w.list.customContextMenuRequested.emit(w.list.visualItemRect(line).center())  # no menu
    assert activated == [] and not line.isSelected()
    # no search: an empty list stays empty (the window shows its welcome instead)
    w.search.clear()
    w.set_conversations([], current=None)
    assert w.list.count() == 0 and w.placeholder() is None
    w.set_conversations([FOXES], current=None)
    assert w.placeholder() is None and w.titles() == [FOXES.title]


def test_focus_without_an_open_conversation_opens_none(qtbot, widget) -> None:  # type: ignore[no-untyped-def]
    """A new chat is open (no current row), as after deleting the open conversation:
    the list gaining focus (the confirmation dialog closing, Tab) opens nothing; the
    arrow keys and a click still do."""
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QFocusEvent

    w = widget
    w.set_conversations([OWLS, FOXES], current=None)
    activated: list[int] = []
    w.conversation_activated.connect(activated.append)
    for reason in (Qt.FocusReason.ActiveWindowFocusReason, Qt.FocusReason.TabFocusReason):
        QApplication.sendEvent(w.list, QFocusEvent(QEvent.Type.FocusIn, reason))
    assert activated == [] and w.list.currentItem() is None
    QTest.keyClick(w.list, Qt.Key.Key_Down)
    assert activated == [OWLS.id]
