"""Everyday things of the chat window, each with the real window (no model needed): Copy
confirms, switching conversations never shows two at once, a new chat shows no other
conversation's gauge, Quit, the Help menu, and Enter on a focused button."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QEventLoop, Qt, QTimer, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QApplication, QDialog, QLabel, QMessageBox, QPushButton, QToolButton

from app.engine.stats import SpecStats
from app.options import SpecMode
from app.store import paths
from app.store.history import HistoryStore
from app.store.settings import LoadedSettings, Settings
from app.ui.chat.chat_view import ChatViewWidget, MessageView
from app.ui.copy_feedback import COPIED_TEXT


@pytest.fixture
def window(qtbot) -> Iterator[object]:  # type: ignore[no-untyped-def]
    from app.ui.main_window import MainWindow

    w = MainWindow(LoadedSettings(Settings()), autoload=False)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.close()


def _conversation(title: str, replies: int, stats: SpecStats | None) -> int:
    store = HistoryStore.open()
    try:
        conv = store.create_conversation(title)
        for i in range(replies):
            store.add_user_message(conv.id, f"{title} question {i}")
            reply = store.begin_reply(conv.id, "model")
            store.finish_reply(reply.id, f"{title} answer {i}", "stop",
                               stats.to_dict() if stats is not None else None)
        return conv.id
    finally:
        store.close()


def test_copy_says_copied_then_copy_again(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    """The message's Copy puts the text on the clipboard and says so on the button."""
    cid = _conversation("copying", 1, None)
    window.open_conversation(cid)
    reply = window.chat.messages[-1]
    assert reply.copy_button_text == "Copy"
    reply._copy.click()
    assert QGuiApplication.clipboard().text() == "copying answer 0"
    assert reply.copy_button_text == COPIED_TEXT
    qtbot.waitUntil(lambda: reply.copy_button_text == "Copy", timeout=5000)


def test_copy_of_the_api_url_says_copied(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    panel = window.api_panel
    panel.set_serving("http://127.0.0.1:8080/v1")  # as the window shows a running server
    panel.copy_button.click()
    assert QGuiApplication.clipboard().text() == "http://127.0.0.1:8080/v1"
    assert panel.copy_button.text() == COPIED_TEXT
    qtbot.waitUntil(lambda: panel.copy_button.text() == "Copy", timeout=5000)


def test_switching_conversations_never_shows_two_at_once(qtbot) -> None:  # type: ignore[no-untyped-def]
    """Replaced messages disappear at once, not when the event loop next deletes them: a
    right-click on a conversation switches to it and then opens a context menu, whose
    nested event loop shows the new messages but deletes nothing that the outer loop
    asked to delete, so both conversations were painted over each other meanwhile. The
    test replays that: the switch inside an event loop, then a nested loop."""
    view = ChatViewWidget()
    qtbot.addWidget(view)
    view.show()
    view.set_messages([MessageView(i, "user", f"first {i}") for i in range(3)])
    qtbot.waitUntil(lambda: all(w.isVisible() for w in view.messages), timeout=5000)
    seen: list[list[int]] = []

    def visible_ids() -> list[int]:
        ids = []
        for w in view.widget().children():
            try:
                if hasattr(w, "message_id") and w.isVisible():
                    ids.append(w.message_id)
            except RuntimeError:  # deleted
                pass
        return sorted(ids)

    def switch_then_menu(outer: QEventLoop, change: Callable[[], None]) -> None:
        change()
        nested = QEventLoop()  # what QMenu.exec runs
        poll = QTimer()
        poll.setInterval(10)

        def check() -> None:
            if all(w.isVisible() for w in view.messages):
                seen.append(visible_ids())
                nested.quit()
        poll.timeout.connect(check)
        poll.start()
        nested.exec()
        poll.stop()
        outer.quit()

    for change in (lambda: view.set_messages([MessageView(10 + i, "user", f"second {i}") for i in range(2)]),
                   lambda: view.remove_from(11)):
        outer = QEventLoop()
        QTimer.singleShot(0, lambda o=outer, c=change: switch_then_menu(o, c))
        outer.exec()
    assert seen == [[10, 11], [10]]


def test_a_new_chat_shows_no_other_conversations_gauge(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    stats = SpecStats(mode=SpecMode.PROMPT_LOOKUP, draft_max=4, emitted=24, rounds=8, draft_rounds=8,
                      proposed=32, verified=32, accepted=16, accepted_at=(8, 4, 2, 2),
                      verified_at=(8, 8, 8, 8), decode_time=0.5, total_time=0.6, ttft=0.1)
    cid = _conversation("measured", 1, stats)
    window.open_conversation(cid)
    window.gauge.refresh()
    assert window.gauge.value_text("reply_tps") != "—"
    assert "Prompt lookup" in window.gauge.mode_label.text()
    window.new_conversation()
    window.gauge.refresh()
    assert window.gauge.mode_label.text() == "No reply yet"
    assert all(window.gauge.value_text(k) == "—" for k in ("reply_tps", "alpha", "ttft", "measured"))
    # a conversation without measured replies: no figures either
    window.open_conversation(cid)
    window.open_conversation(_conversation("unmeasured", 1, None))
    window.gauge.refresh()
    assert window.gauge.value_text("reply_tps") == "—"


def test_another_conversation_during_a_reply(qtbot, ui_settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """While a reply is written in one conversation and another is open: the gauge says
    whose reply it shows, Send there says why it waits, the text typed stays with its
    conversation, and once the reply ends the gauge shows the open conversation again."""
    from app.options import SamplingParams
    from tests.ui.conftest import loaded_window, wait_reply

    ui_settings.sampling = SamplingParams(temperature=0.0, max_tokens=400)
    window = loaded_window(qtbot, ui_settings)
    try:
        _another_conversation_during_a_reply(qtbot, window, wait_reply)
    finally:
        window.close()


def _another_conversation_during_a_reply(qtbot, window, wait_reply) -> None:  # type: ignore[no-untyped-def]
    c = window.controller
    assert window.send_message("Count slowly from one to one hundred: one, two, three,")
    first = c.current_conversation
    title = c.store.conversation(first).title
    qtbot.waitUntil(lambda: c.reply is not None and window._gauge_reply is c.reply
                    and bool(c.reply.text), timeout=60_000)
    # File → Open GGUF…, Open recent and Connect are off while the reply streams, as the
    # model bar's Open button is (a load then could only refuse)
    swaps = (*window.window_actions.swaps, window.model_bar.recent_menu.menuAction())
    assert [a.text() for a in swaps] == ["Open GGUF…", "Connect to a server…",
                                         "Connect to a server…", "Open recent"]  # File, Server
    assert not any(a.isEnabled() for a in swaps)
    window.input.setPlainText("typed in the first one")
    window.new_conversation()
    assert window.input.toPlainText() == ""
    assert window.gauge.source_label.text() == f"The reply being written in \u201c{title}\u201d"
    assert window.send_button.text() == "Send"  # Stop belongs to the other conversation
    rows = window.conversations.list  # the list marks the conversation being written in
    marked = [rows.item(i) for i in range(rows.count()) if rows.item(i).font().italic()]
    assert [i.text() for i in marked] == [title] and "being written" in marked[0].toolTip()
    window.input.setPlainText("Now add a docstring too.")
    window.send_button.click()
    warning = window.message_bar.current
    assert warning is not None and title in warning.message and "one reply at a time" in warning.message
    assert window.input.toPlainText() == "Now add a docstring too."  # nothing lost
    window.open_conversation(first)
    assert not window.chat.failure.isVisibleTo(window)  # its reply is being written
    assert window.input.toPlainText() == "typed in the first one"
    assert not window.gauge.source_label.isVisibleTo(window) and window.send_button.text() == "Stop"
    window.new_conversation()
    assert window.input.toPlainText() == "Now add a docstring too."
    c.stop_reply()
    wait_reply(qtbot, window)
    assert all(a.isEnabled() for a in swaps)
    assert window.gauge.mode_label.text() == "No reply yet"  # the open (new) conversation's
    assert not any(rows.item(i).font().italic() for i in range(rows.count()))


def test_text_typed_and_not_sent_is_there_after_a_restart(qtbot, tandem_home) -> None:  # type: ignore[no-untyped-def]
    from app.store.settings import load_settings
    from app.ui.main_window import MainWindow

    cid = _conversation("kept", 1, None)
    w = MainWindow(LoadedSettings(Settings()), autoload=False)
    qtbot.addWidget(w)
    w.input.setPlainText("half a question for the new chat")
    w.open_conversation(cid)
    w.input.setPlainText("a long prompt\nI was still writing")
    # kept as it is typed (saved within a moment), not only at a normal quit
    qtbot.waitUntil(lambda: load_settings().settings.ui.unsent.get(str(cid)) ==
                    "a long prompt\nI was still writing", timeout=5000)
    w.close()
    saved = load_settings().settings
    assert saved.ui.unsent == {"new": "half a question for the new chat",
                               str(cid): "a long prompt\nI was still writing"}
    # a conversation deleted since and keys edited by hand are left out
    saved.ui.unsent.update({"99999": "gone", "²": "x", "9" * 5000: "y", "-1": "z"})
    again = MainWindow(LoadedSettings(saved), autoload=False)
    qtbot.addWidget(again)
    assert again.controller.current_conversation == cid  # reopened, with its text
    assert again.input.toPlainText() == "a long prompt\nI was still writing"
    # typing goes on after the text brought back, not in front of it
    qtbot.keyClicks(again.input, " and more")
    assert again.input.toPlainText() == "a long prompt\nI was still writing and more"
    again.new_conversation()
    assert again.input.toPlainText() == "half a question for the new chat"
    assert again.input.textCursor().atEnd()
    again.input.clear()  # sent or deleted: nothing is kept for it
    again.close()
    assert load_settings().settings.ui.unsent == {
        str(cid): "a long prompt\nI was still writing and more"}


def test_an_edit_left_for_another_conversation_is_taken_up_again(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    store = window.controller.store
    cid = _conversation("edited", 1, None)
    other = _conversation("other", 1, None)
    window.open_conversation(cid)
    window.input.setPlainText("typed before the edit")
    first = window.chat.messages[0]
    window.edit_message(first.message_id)
    window.input.setPlainText("the question, rewritten")
    window.open_conversation(other)  # the edit is left, not lost
    assert window.controller.editing_message_id is None
    assert window.input.toPlainText() == ""
    window.open_conversation(cid)
    qtbot.waitUntil(lambda: window.controller.editing_message_id == first.message_id)
    assert window.input.toPlainText() == "the question, rewritten"
    assert window.composer.edit_banner.isVisibleTo(window)
    assert window.chat.messages[0].property("editing")
    window._on_composer_cancel_edit_clicked()  # what the edit replaced comes back
    assert window.input.toPlainText() == "typed before the edit"
    assert store is not None and store.message(first.message_id).versions == 1

    window.edit_message(first.message_id)  # left again, and the window closed meanwhile
    window.input.setPlainText("rewritten once more")
    window.open_conversation(other)
    window.close()
    from app.store.settings import load_settings

    saved = load_settings().settings.ui.unsent
    assert saved[f"{cid}:edit:{first.message_id}"] == "rewritten once more"
    assert saved[str(cid)] == "typed before the edit"


def test_quit_has_the_platform_shortcut_and_closes_the_window(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    quit_action = window.window_actions.quit
    keys = [k.toString() for k in quit_action.shortcuts()]
    assert keys and keys[0] == "Ctrl+Q"  # Linux's standard Quit (Cmd+Q on macOS)
    assert quit_action in window.menuBar().actions()[0].menu().actions()
    qtbot.keyClick(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=5000)


def test_help_has_shortcuts_docs_log_folder_and_report(  # type: ignore[no-untyped-def]
        qtbot, window, monkeypatch: pytest.MonkeyPatch) -> None:
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    assert [a.text() for a in help_menu.actions() if not a.isSeparator()] == [
        "Keyboard shortcuts", "Documentation", "Open log folder", "Report a problem…", "About Tandem"]
    opened: list[QUrl] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) or True)

    window.window_actions.shortcuts.trigger()
    [dialog] = [d for d in window.findChildren(QDialog) if d.objectName() == "shortcutsDialog"]
    texts = [label.text() for label in dialog.findChildren(QLabel)]
    assert "Quit" in texts and "<b>Ctrl+Q</b>" in texts and "<b>Esc or Ctrl+.</b>" in texts
    # the conversation list's own keys are listed too
    assert "Rename the selected conversation" in texts and "<b>F2</b>" in texts
    assert "Delete the selected conversation" in texts and "<b>Del</b>" in texts
    dialog.close()

    window.window_actions.documentation.trigger()
    assert Path(opened[-1].toLocalFile()).name == "README.md" and Path(opened[-1].toLocalFile()).is_file()
    readme = opened[-1].toLocalFile()
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) and False)
    window.window_actions.documentation.trigger()  # no program opens it: its path is said
    qtbot.waitUntil(lambda: any(readme in b.text() for b in window.findChildren(QMessageBox)
                                if b.isVisible()), timeout=5000)
    for b in window.findChildren(QMessageBox):
        b.close()
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    window.window_actions.log_folder.trigger()
    assert Path(opened[-1].toLocalFile()) == paths.log_dir()

    window.window_actions.report_problem.trigger()
    assert Path(opened[-1].toLocalFile()) == paths.log_dir()
    [box] = [b for b in window.findChildren(QMessageBox) if b.objectName() == "reportProblemBox"]
    assert box.isVisible() and str(paths.log_dir()) in box.text()
    assert str(paths.log_dir()) in QGuiApplication.clipboard().text()
    box.close()


def test_file_menu_and_keys_reach_models_search_and_export(  # type: ignore[no-untyped-def]
        qtbot, window, monkeypatch: pytest.MonkeyPatch) -> None:
    """Open GGUF (Ctrl+O), Connect, Models, Export (Ctrl+E) are in the File menu; Ctrl+F
    goes to the search box; all are in the shortcuts list; deleting a conversation asks
    with No as the default, so Enter keeps it."""
    file_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&File")
    assert [a.text() for a in file_menu.actions() if not a.isSeparator()] == [
        "New chat", "Open GGUF…", "Open recent", "Connect to a server…", "Models…",
        "Export conversation…", "Ask before quitting while work runs", "Quit"]
    ask = next(a for a in file_menu.actions() if a.text().startswith("Ask before"))
    assert ask.isCheckable() and ask.isChecked() and window.settings.ui.confirm_quit
    ask.trigger()
    assert window.settings.ui.confirm_quit is False
    ask.trigger()
    by_text = {a.text(): a for a in window.actions()}
    assert by_text["Open GGUF…"].shortcut().toString() == "Ctrl+O"
    assert by_text["Search conversations"].shortcut().toString() == "Ctrl+F"
    by_text["Search conversations"].trigger()
    qtbot.waitUntil(lambda: window.conversations.search.hasFocus(), timeout=5000)
    by_text["Export conversation…"].trigger()  # a new chat: nothing to export, said
    assert window.message_bar.current is not None
    assert window.message_bar.current.title == "Nothing to export"

    window.window_actions.shortcuts.trigger()
    [dialog] = [d for d in window.findChildren(QDialog) if d.objectName() == "shortcutsDialog"]
    texts = [label.text() for label in dialog.findChildren(QLabel)]
    assert {"Open GGUF", "Search conversations", "Export conversation"} <= set(texts)
    dialog.close()

    asked: list[object] = []
    monkeypatch.setattr(QMessageBox, "exec", lambda box: asked.append(
        (box.text(), box.textFormat(), box.defaultButton() is box.button(
            QMessageBox.StandardButton.No))) or QMessageBox.StandardButton.No)
    cid = _conversation("kept <div>", 1, None)
    long_cid = _conversation("a" * 100, 1, None)
    window.conversations_changed()  # listed, as a click on it needs
    window._on_conversations_conversation_delete_clicked(cid)
    window._on_conversations_conversation_delete_clicked(long_cid)
    window._on_conversations_conversation_delete_clicked(10**9)  # no longer listed
    (text, fmt, no_is_default), (long_text, _, _), (unlisted, _, _) = asked
    assert no_is_default and fmt == Qt.TextFormat.PlainText  # the tag shows as typed
    assert text.startswith("Delete “kept <div>” and all its messages?")  # it names which
    assert f"“{'a' * 59}…”" in long_text
    assert unlisted.startswith("Delete this conversation and all its messages?")
    assert any(conv.id == cid for conv in window.controller.conversations())


def test_enter_presses_the_focused_button(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    """Enter (and the keypad's Enter) on a focused push or tool button clicks it; Space
    still does, and a dialog's default buttons are left to Qt (clicked once)."""
    before = window.controller.current_conversation
    cid = _conversation("entered", 1, None)
    window.open_conversation(cid)
    assert window.controller.current_conversation == cid != before
    new_button: QPushButton = window.conversations.new_button
    new_button.setFocus()
    qtbot.waitUntil(new_button.hasFocus, timeout=5000)
    with qtbot.waitSignal(new_button.clicked, timeout=5000):
        qtbot.keyClick(new_button, Qt.Key.Key_Return)
    assert window.controller.current_conversation is None  # a new chat

    window.open_conversation(cid)
    copy: QToolButton = window.chat.messages[-1]._copy
    copy.setFocus()
    with qtbot.waitSignal(copy.clicked, timeout=5000):
        qtbot.keyClick(copy, Qt.Key.Key_Enter, Qt.KeyboardModifier.KeypadModifier)
    assert QGuiApplication.clipboard().text() == "entered answer 0"

    box = QMessageBox(QMessageBox.Icon.Question, "t", "t",
                      QMessageBox.StandardButton.Ok | QMessageBox.StandardButton.Cancel, window)
    qtbot.addWidget(box)
    clicks: list[object] = []
    box.buttonClicked.connect(clicks.append)
    box.open()
    ok = box.button(QMessageBox.StandardButton.Ok)
    ok.setFocus()
    qtbot.keyClick(ok, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not box.isVisible(), timeout=5000)
    QApplication.processEvents()
    assert len(clicks) == 1


def test_showing_another_version_keeps_its_arrows_under_the_pointer(qtbot) -> None:  # type: ignore[no-untyped-def]
    """‹ › sit in the reply's header: a version of another length must not scroll the
    view (it followed the bottom, so a second click on ‹ hit something else)."""
    view = ChatViewWidget()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.show()
    long = "\n\n".join(f"paragraph {i} of a long reply" for i in range(12))
    view.set_messages([MessageView(1, "user", "first"), MessageView(2, "assistant", long),
                       MessageView(3, "user", "again"),
                       MessageView(4, "assistant", long + "\n\nand more", versions=2, version=2)])
    reply = view.messages[-1]
    qtbot.waitUntil(lambda: view.verticalScrollBar().maximum() > 0, timeout=5000)
    view.scroll_to_bottom()
    qtbot.wait(50)

    def header_y() -> int:
        return reply._older.mapTo(view.viewport(), reply._older.rect().topLeft()).y()

    before = header_y()
    view.update_message(MessageView(4, "assistant", long + "\n\n" + "much more text\n\n" * 6,
                                    versions=2, version=1))
    qtbot.wait(100)  # the layout settles
    assert reply.version == (1, 2)
    assert header_y() == before


@pytest.mark.parametrize("column, value", [
    ("stats_json", "not json"), ("stats_json", "[" * 100_000), ("stats_json", "[1, 2]"),
    ("stats_json", '{"decode_tps": "fast", "emitted": [], "auto": 5, "context": "x"}'),
    ("stats_json", '{"mode": 7, "auto": {"mode": 3, "evidence": "x"}}'),
    ("stats_json", '{"mode": "prompt-lookup", "emitted": 3, "rounds": "x"}'),
    ("stats_json", '{"mode": "prompt-lookup", "emitted": 3, "rounds": 3, "extra": [1]}'),
    ("stats_json", '{"mode": "prompt-lookup", "accepted_at": [1, "a"], "verified_at": 5}'),
    ("draft_spans", "[[0, Infinity]]"),
    ("draft_spans", "[[1]]"), ("draft_spans", "5"), ("created_at", "abc"), ("seed", "x"),
])
def test_a_damaged_reply_in_the_history_never_stops_the_window(  # type: ignore[no-untyped-def]
        qtbot, column: str, value: str) -> None:
    """A value damaged by hand or by a disk: the window starts on that conversation and
    shows its text; only the damaged figures are missing."""
    import sqlite3

    from app.ui.main_window import MainWindow

    cid = _conversation("damaged", 1, SpecStats(mode=SpecMode.PROMPT_LOOKUP, emitted=3, rounds=3))
    db = sqlite3.connect(paths.history_path())
    db.execute(f"UPDATE messages SET {column} = ? WHERE role = 'assistant'", (value,))
    db.commit()
    db.close()
    settings = Settings()
    settings.ui.last_conversation_id = cid
    w = MainWindow(LoadedSettings(settings), autoload=False)
    qtbot.addWidget(w)
    try:
        assert w.controller.current_conversation == cid
        assert [m.text for m in w.chat.messages] == ["damaged question 0", "damaged answer 0"]
        w.open_conversation(None)
        w.open_conversation(cid)
        assert w.controller.current_conversation == cid and len(w.chat.messages) == 2
    finally:
        w.close()


def test_a_question_left_without_a_reply_says_so_when_opened(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    """A conversation whose last message is a question with no reply stored (Tandem
    closed while it waited) says so under it, and Regenerate is offered; one that ends
    with a reply says nothing."""
    from app.ui.main_window import NO_REPLY_STORED

    answered = _conversation("answered", 1, None)
    store = HistoryStore.open()
    try:
        left = store.create_conversation("left")
        store.add_user_message(left.id, "a question Tandem closed on")
    finally:
        store.close()
    window.open_conversation(left.id)
    assert window.chat.failure.isVisibleTo(window)
    assert window.chat.failure.text() == NO_REPLY_STORED
    assert window.regenerate_button.isVisibleTo(window)
    window.open_conversation(answered)
    assert not window.chat.failure.isVisibleTo(window)


def test_the_keyboard_reaches_messages_edits_the_last_and_steps_conversations(  # type: ignore[no-untyped-def]
        qtbot, window) -> None:
    """Tab goes from the chat through each message's buttons, top to bottom, to the
    input box (not by way of the side panel); Up in the empty box edits the last message
    sent; Ctrl+PgDown and Ctrl+PgUp open the next and the previous conversation; the
    shortcuts list says so."""
    older = _conversation("older", 1, None)
    newer = _conversation("newer", 2, None)
    window.conversations_changed()
    window.open_conversation(newer)
    chain, w = [], window.chat.nextInFocusChain()
    while w is not window.input and len(chain) < 50:
        if w.focusPolicy() & Qt.FocusPolicy.TabFocus and w.isVisibleTo(window):
            chain.append(w)
        w = w.nextInFocusChain()
    buttons = [b.text() for b in chain if isinstance(b, QToolButton)]
    assert w is window.input and buttons == ["Copy", "Edit", "Copy", "Regenerate",
                                             "Copy", "Edit", "Copy", "Regenerate"]
    assert all(window.chat.isAncestorOf(b) for b in chain)
    last = window.chat.messages[-1]._continue  # shown later (a reply cut short): in order
    last.show()
    w = window.chat.nextInFocusChain()
    while w is not window.input and w is not last:
        w = w.nextInFocusChain()
    assert w is last
    last.hide()
    window.input.setFocus()
    # the keypad's Up, as macOS sends every arrow key
    qtbot.keyClick(window.input, Qt.Key.Key_Up, Qt.KeyboardModifier.KeypadModifier)
    assert window.controller.editing_message_id == window.chat.messages[2].message_id
    assert window.input.toPlainText() == "newer question 1"
    window.input.clear()  # while editing, Up in the emptied box leaves the edit as it is
    qtbot.keyClick(window.input, Qt.Key.Key_Up)
    assert window.controller.editing_message_id == window.chat.messages[2].message_id
    window._on_composer_cancel_edit_clicked()
    rows = [window.conversations.list.item(i).text()
            for i in range(window.conversations.list.count())]
    assert rows.index("newer") < rows.index("older")  # the newest first
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    window.input.setFocus()
    qtbot.keyClick(window.input, Qt.Key.Key_PageDown, Qt.KeyboardModifier.ControlModifier)
    assert window.controller.current_conversation == older
    window.conversations.step(1)  # past the end: it stays
    assert window.controller.current_conversation == older
    qtbot.keyClick(window.input, Qt.Key.Key_PageUp, Qt.KeyboardModifier.ControlModifier)
    assert window.controller.current_conversation == newer
    window.window_actions.shortcuts.trigger()
    [dialog] = [d for d in window.findChildren(QDialog) if d.objectName() == "shortcutsDialog"]
    texts = {label.text() for label in dialog.findChildren(QLabel)}
    assert {"Edit your last message", "Next or previous conversation"} <= texts
    dialog.close()


def test_a_search_hint_goes_when_the_search_changes(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    from app.chat.events import UserError

    window.conversations.search.setText("okapi")
    window.controller.report(UserError("Found in another version", "“okapi” is not in the "
                                       "messages shown", level="warning", origin="search"))
    assert window.message_bar.current is not None
    window.conversations.search.clear()
    qtbot.waitUntil(lambda: window.message_bar.current is None, timeout=5000)


def test_ctrl_e_exports_also_from_the_search_box(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    """A line edit takes Ctrl+E as "end of line" on Linux desktops: the search box
    leaves it to the window's Export (offscreen Qt binds no Ctrl+E for line edits, so
    the box's filter is asked directly; the key press shows the shortcut is reached)."""
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QKeyEvent

    search = window.conversations.search
    override = QKeyEvent(QEvent.Type.ShortcutOverride, Qt.Key.Key_E,
                         Qt.KeyboardModifier.ControlModifier)
    assert window.conversations.eventFilter(search, override) is True
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    search.setFocus()
    qtbot.waitUntil(search.hasFocus, timeout=5000)
    qtbot.keyClick(search, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
    assert window.message_bar.current is not None  # a new chat: nothing to export, said
    assert window.message_bar.current.title == "Nothing to export"
