"""The main window's behaviour, each with the real window on the tiny synthetic model: Stop by
Ctrl+. as by Esc, a window that fits 1024 px and does not widen itself, a loading label on
one line, no partial stop string saved by Stop, and a measured speedup that belongs to the
reply it measures."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.engine import session as session_module
from app.engine.events import TextDelta
from app.engine.session import Session
from app.engine.stats import SpecStats
from app.engine.text import TextStream
from app.options import SamplingParams, SpecMode, SpeculationConfig
from app.store.history import StoredMessage
from app.store.settings import Settings
from app.ui.gauge.gauge_panel import measured_speedup_text
from tests.ui.conftest import LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, loaded_window, wait_reply


def _settings(target: Path, *, max_tokens: int = 24) -> Settings:
    s = Settings()
    s.model.target_path = target
    s.model.n_ctx = 2048
    s.sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    s.speculation = SpeculationConfig(mode=SpecMode.OFF)
    return s


@pytest.fixture
def tiny_window(qtbot, tiny_target: Path):  # type: ignore[no-untyped-def]
    """A shown main window with the tiny synthetic target loaded."""
    w = loaded_window(qtbot, _settings(tiny_target))
    yield w
    w.close()


def _load(qtbot, c, path: Path) -> None:  # type: ignore[no-untyped-def]
    """Load ``path`` with controller ``c`` and wait until it is the loaded target."""
    c.load_model(path)
    qtbot.waitUntil(lambda: not c.loading and c.model_info is not None
                    and c.model_info.target_path == path, timeout=LOAD_TIMEOUT_MS)


def _last_reply(w) -> StoredMessage:  # type: ignore[no-untyped-def]
    return w.controller.store.messages(w.controller.current_conversation)[-1]


def _hold_after_first_text(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Session.chat pauses after its first text until the reply is cancelled, so a key
    pressed 'during the reply' is pressed during it on any machine. Returns an event set
    once the reply is paused."""
    paused = threading.Event()
    original = Session.chat

    def chat(self, messages, sampling, speculation, cancel=None, **kw):  # type: ignore[no-untyped-def]
        for ev in original(self, messages, sampling, speculation, cancel, **kw):
            yield ev
            if isinstance(ev, TextDelta) and cancel is not None and not paused.is_set():
                paused.set()
                cancel.wait(60)

    monkeypatch.setattr(Session, "chat", chat)
    return paused


@pytest.mark.parametrize("key, modifier", [
    (Qt.Key.Key_Period, Qt.KeyboardModifier.ControlModifier),
    (Qt.Key.Key_Escape, Qt.KeyboardModifier.NoModifier),
], ids=["ctrl+.", "esc"])
def test_ctrl_period_stops_a_reply_as_esc_does(qtbot, tiny_window, monkeypatch, key,  # type: ignore[no-untyped-def]
                                               modifier) -> None:
    w = tiny_window
    w.controller.set_sampling(w.settings.sampling.with_changes(max_tokens=1000))
    paused = _hold_after_first_text(monkeypatch)
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=5000)
    assert w.send_message("hello")
    qtbot.waitUntil(paused.is_set, timeout=60_000)
    qtbot.keyClick(w.input, key, modifier)
    wait_reply(qtbot, w)
    reply = _last_reply(w)
    assert reply.finish_reason == "cancelled"
    assert reply.stats is not None and reply.stats["emitted"] < 1000


def test_stop_never_saves_a_held_back_start_of_a_stop_string(qtbot, tiny_window,  # type: ignore[no-untyped-def]
                                                             monkeypatch) -> None:
    w = tiny_window
    assert w.send_message("hello")
    wait_reply(qtbot, w)
    full = _last_reply(w).content  # the greedy reply, as regenerating gives it again
    assert len(full) > 4
    mark = full[len(full) // 2]
    # A stop string that starts with a character of the reply: when the reply reaches it,
    # the text is held back (it may be the stop string), as Gemma's "\nUser" of "\nUser:".
    w.controller.set_sampling(w.settings.sampling.with_changes(stop=(mark + "\x01\x02",)))

    seen: dict[str, str] = {}
    held = threading.Event()
    cancels: list[threading.Event] = []
    original_chat = Session.chat

    def chat(self, messages, sampling, speculation, cancel=None, **kw):  # type: ignore[no-untyped-def]
        cancels.append(cancel)
        yield from original_chat(self, messages, sampling, speculation, cancel, **kw)

    class HoldingStream(TextStream):
        def push(self, piece: bytes, from_draft: bool):  # type: ignore[no-untyped-def]
            out = super().push(piece, from_draft)
            if self._pending and not held.is_set():
                seen["released"] = self.text  # (includes what this push released)
                seen["held"] = self._pending
                held.set()
                cancels[-1].wait(60)  # the reply stands here until Stop is pressed
            return out

    monkeypatch.setattr(Session, "chat", chat)
    monkeypatch.setattr(session_module, "TextStream", HoldingStream)
    assert w.regenerate()
    qtbot.waitUntil(held.is_set, timeout=60_000)
    assert w.send_button.text() == "Stop"
    qtbot.mouseClick(w.send_button, Qt.MouseButton.LeftButton)
    wait_reply(qtbot, w)
    reply = _last_reply(w)
    assert reply.finish_reason == "cancelled"
    assert seen["held"] and full.startswith(seen["released"] + seen["held"])
    # what was released before Stop, and not the held-back start of a stop string
    assert reply.content == seen["released"]
    assert w.chat.messages[-1].text == reply.content


def test_continue_on_a_reply_cut_at_its_token_limit(qtbot, tiny_window) -> None:  # type: ignore[no-untyped-def]
    """A reply that hit its token limit offers Continue (its last reply only); Continue
    streams the rest into the same message, from its text, as a new version."""
    from PySide6.QtWidgets import QToolButton

    w = tiny_window
    assert w.send_message("hello")
    wait_reply(qtbot, w)
    cut = _last_reply(w)
    assert cut.finish_reason == "length"  # 24 tokens of the tiny model, which never stops
    button = w.chat.messages[-1].findChild(QToolButton, "continueButton")
    assert button.isVisibleTo(w.chat.messages[-1]) and button.isEnabled()
    assert not w.chat.messages[0].findChild(QToolButton, "continueButton").isVisibleTo(
        w.chat.messages[0])  # the user's message has none
    button.click()
    wait_reply(qtbot, w)
    longer = _last_reply(w)
    assert longer.id == cut.id and (longer.version, longer.versions) == (2, 2)
    assert longer.content.startswith(cut.content) and len(longer.content) > len(cut.content)
    assert w.chat.messages[-1].text == longer.content


def test_view_hides_and_shows_the_panes_beside_the_chat(qtbot, tiny_window) -> None:  # type: ignore[no-untyped-def]
    """View → Side panel (Ctrl+Shift+B) gives its width to the chat and brings it back
    at the width it had; the conversation list likewise (Ctrl+B); a pane dragged shut
    unchecks its entry."""
    w = tiny_window
    lists, side = w.window_actions.panes
    assert lists.isChecked() and side.isChecked()
    assert (lists.shortcut().toString(), side.shortcut().toString()) == ("Ctrl+B",
                                                                        "Ctrl+Shift+B")
    before = w.splitter.sizes()
    side.trigger()
    after = w.splitter.sizes()
    assert after[2] == 0 and after[1] == before[1] + before[2] and not side.isChecked()
    side.trigger()
    assert w.splitter.sizes() == before and side.isChecked()
    lists.trigger()
    assert w.splitter.sizes()[0] == 0 and not lists.isChecked()
    lists.trigger()
    w.splitter.moveSplitter(w.width(), 2)  # dragged to the window's edge
    qtbot.waitUntil(lambda: not side.isChecked(), timeout=2000)
    assert w.splitter.sizes()[2] == 0
    lists.trigger()  # hidden, then Ctrl+F: the list comes back with its search box
    [find] = [a for a in w.actions() if a.text() == "Search conversations"]
    find.trigger()
    assert lists.isChecked() and w.splitter.sizes()[0] > 0


def test_the_window_opens_inside_its_screen(qtbot, tiny_window) -> None:  # type: ignore[no-untyped-def]
    """Its first size (1320 × 820, or the one saved) shrinks to the screen's free area
    (large fonts make the screen fewer pixels wide), no smaller than it can be laid out;
    a window moved off the screen comes back."""
    from app.ui.main_window import _FRAME_GUESS, _fit_to_screen

    w = tiny_window
    free = w.screen().availableGeometry()
    least = w.minimumSizeHint()
    frame = w.frameGeometry()
    assert frame.width() <= free.width() or w.width() == least.width()
    assert frame.height() <= free.height() or w.height() == least.height()
    guess = max(frame.height() - w.height(), _FRAME_GUESS[1])  # the frame, or its guess
    assert w.height() >= min(820, free.height()) - guess  # no smaller than it must be
    w.move(free.right() + 500, free.bottom() + 500)
    _fit_to_screen(w)
    assert free.left() <= w.x() <= max(free.left(), free.right() - w.width() + 1)
    assert free.top() <= w.y() <= max(free.top(), free.bottom() - w.height() + 1)


def test_the_window_fits_1024_px_and_a_draft_does_not_widen_it(qtbot, tiny_window,  # type: ignore[no-untyped-def]
                                                               tiny_target: Path,
                                                               tmp_path: Path) -> None:
    from app.ui.main_window import SIDEBAR_MIN_PX

    w = tiny_window
    assert w.minimumSizeHint().width() <= 1024
    w.resize(1024, 720)
    qtbot.waitUntil(lambda: w.width() == 1024, timeout=5000)
    assert w.conversations.width() >= SIDEBAR_MIN_PX  # the sidebar is not squeezed
    assert w.side_tabs.width() >= w.side_tabs.minimumSizeHint().width()

    c = w.controller
    # a target with a long file name: the bar and each reply's header elide it
    long_target = tmp_path / ("a-target-model-with-a-very-long-file-name-" * 3 + "f32.gguf")
    long_target.write_bytes(tiny_target.read_bytes())
    _load(qtbot, c, long_target)
    assert w.send_message("hello")
    wait_reply(qtbot, w)
    qtbot.wait(50)
    assert w.width() == 1024
    viewport = w.chat.viewport().width()
    assert w.chat.messages and all(m.width() <= viewport for m in w.chat.messages)
    assert long_target.name in w.model_bar.target_label.toolTip()

    # a draft with a long file name, loaded next to the target
    long_name = tmp_path / ("a-draft-model-with-a-very-long-file-name-" * 3 + "q8_0.gguf")
    long_name.write_bytes(tiny_target.read_bytes())
    w.settings.model.draft_path = long_name
    c.set_speculation(w.settings.speculation.with_changes(mode=SpecMode.DRAFT_MODEL, draft_max=3))
    qtbot.waitUntil(lambda: not c.loading and c.model_info is not None
                    and c.model_info.draft_path is not None, timeout=LOAD_TIMEOUT_MS)
    qtbot.wait(50)  # let the layout settle (resizes are posted events)
    assert w.model_bar.draft_button.isVisibleTo(w)
    assert long_name.name in w.model_bar.draft_button.toolTip()
    assert w.width() == 1024 and w.minimumSizeHint().width() <= 1024


def test_the_loading_label_stays_on_one_line(qtbot, tiny_window) -> None:  # type: ignore[no-untyped-def]
    w = tiny_window
    w.resize(1024, 720)
    what = "Loading " + "a-model-with-a-rather-long-file-name-" * 4 + "q4_k_m.gguf"
    w.loading_changed(True, 0.4, what)
    qtbot.waitUntil(lambda: w.model_bar.loading_row.isVisible(), timeout=5000)
    label = w.model_bar.progress_label
    assert not label.wordWrap() and "\n" not in label.text()
    assert label.full_text() == what and label.toolTip() == what
    # one line: the label is no taller than a line of its font, and its text fits its width
    assert label.height() < 2 * label.fontMetrics().lineSpacing()
    assert label.fontMetrics().horizontalAdvance(label.text()) <= label.contentsRect().width()
    assert w.width() == 1024 and w.minimumSizeHint().width() <= 1024
    w.loading_changed(False, None, "")
    assert not w.model_bar.loading_row.isVisibleTo(w)


def test_measured_speedup_is_the_replys_own_and_survives_a_regenerate(  # type: ignore[no-untyped-def]
    qtbot, tiny_window
) -> None:
    """The figure comes with the speculative reply's own statistics (plain one-token
    passes timed under its conditions), not from another moment's plain reply: it shows
    after the reply, again after a regenerate, and when the conversation is reopened."""
    w = tiny_window
    c = w.controller
    c.set_speculation(w.settings.speculation.with_changes(mode=SpecMode.PROMPT_LOOKUP,
                                                          draft_max=4, adaptive=False))
    assert w.send_message("hello hello hello hello hello hello")
    wait_reply(qtbot, w)
    first = _last_reply(w)
    assert first.stats is not None
    stats = SpecStats.from_dict(first.stats)
    assert stats.mode is SpecMode.PROMPT_LOOKUP
    if stats.draft_rounds >= 3 and stats.verified >= 10:  # enough drafts for a figure
        assert stats.plain_step_time is not None
        assert stats.plain_step_source == "reply"  # timed in (or at the end of) this reply
    shown = w.gauge.value_text("measured")
    assert shown == measured_speedup_text(stats, streaming=False)
    if stats.measured_speedup is not None:
        expected = stats.decode_tps * stats.plain_step_time  # type: ignore[operator]
        assert shown.startswith(f"{expected:.2f}×")

    w.regenerate()
    wait_reply(qtbot, w)
    again = _last_reply(w)
    # a new version of the same reply (the first kept as version 1)
    assert (again.id, again.version, again.versions) == (first.id, 2, 2)
    assert again.stats is not None
    regenerated = SpecStats.from_dict(again.stats)
    assert w.gauge.value_text("measured") == measured_speedup_text(regenerated, streaming=False)

    conversation = c.current_conversation
    w.new_conversation()
    w.open_conversation(conversation)
    assert w.gauge.value_text("measured") == measured_speedup_text(regenerated, streaming=False)


def test_the_gauge_names_the_model_of_a_stored_reply_another_model_wrote(
        qtbot, tiny_window, tiny_target: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """After a model switch the gauge still shows the conversation's last reply, and it
    says which model wrote it; loading that model again takes the line away, as does a
    reply of the model now loaded."""
    w = tiny_window
    c = w.controller
    assert w.send_message("hello")
    wait_reply(qtbot, w)
    qtbot.waitUntil(lambda: not w.gauge.live and w.gauge.value_text("reply_tps") != "—",
                    timeout=5000)
    assert w.gauge.source_label.isHidden()  # written by the model loaded now

    other = tmp_path / "another-target.gguf"
    other.write_bytes(tiny_target.read_bytes())
    _load(qtbot, c, other)
    assert not w.gauge.source_label.isHidden()
    assert w.gauge.source_label.text() == (
        f"Written by {tiny_target.name}, not the model loaded now")
    stored = _last_reply(w)
    assert stored.model == tiny_target.name and w.gauge.value_text("reply_tps") != "—"

    # reopening the conversation keeps the line; a reply of the new model clears it
    c.open_conversation(None)
    assert w.gauge.source_label.isHidden()  # a new chat: no figures, no line
    c.open_conversation(stored.conversation_id)
    assert not w.gauge.source_label.isHidden()
    assert w.gauge.source_label.text().startswith(f"Written by {tiny_target.name}")
    assert w.send_message("again")
    wait_reply(qtbot, w)
    qtbot.waitUntil(lambda: not w.gauge.live and _last_reply(w).model == other.name,
                    timeout=5000)
    c.open_conversation(stored.conversation_id)  # its last reply is the loaded model's
    assert w.gauge.source_label.isHidden() and w.gauge.value_text("reply_tps") != "—"

    _load(qtbot, c, tiny_target)  # the reply shown is the other model's now
    assert not w.gauge.source_label.isHidden()
    assert w.gauge.source_label.text() == (
        f"Written by {other.name}, not the model loaded now")


@pytest.mark.skipif(sys.platform in ("win32", "darwin"),
                    reason="a file name that is not UTF-8 is a POSIX (Linux) one")
def test_a_model_file_name_that_is_not_utf8_is_the_same_model_for_the_gauge(
        qtbot, tiny_window, tiny_target: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The stored name of such a model is escaped (``tiny-\\xff.gguf``): it must not read
    as another model's when that model is the one loaded."""
    w = tiny_window
    c = w.controller
    odd = tmp_path / os.fsdecode(b"tiny-\xff.gguf")
    odd.write_bytes(tiny_target.read_bytes())
    _load(qtbot, c, odd)
    assert w.send_message("hello")
    wait_reply(qtbot, w)
    conversation = c.current_conversation
    c.open_conversation(None)
    c.open_conversation(conversation)
    assert _last_reply(w).model == "tiny-\\xff.gguf"
    assert w.gauge.value_text("reply_tps") != "—" and w.gauge.source_label.isHidden()
    _load(qtbot, c, tiny_target)
    assert w.gauge.source_label.text() == "Written by tiny-\\xff.gguf, not the model loaded now"


def test_a_reply_of_another_conversation_does_not_become_the_open_ones(
        qtbot, tiny_window, tiny_target: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Conversation A opened while B's reply streams: when B's reply ends the gauge shows
    it, but not as A's stored reply, so a later model switch puts no "Written by" line
    with B's model over it."""
    w = tiny_window
    c = w.controller
    assert w.send_message("hello")
    wait_reply(qtbot, w)
    first = c.current_conversation
    other = tmp_path / "another-target.gguf"
    other.write_bytes(tiny_target.read_bytes())
    _load(qtbot, c, other)
    c.set_sampling(w.settings.sampling.with_changes(max_tokens=1000))
    paused = _hold_after_first_text(monkeypatch)
    w.new_conversation()
    assert w.send_message("a reply in B")
    qtbot.waitUntil(paused.is_set, timeout=REPLY_TIMEOUT_MS)
    c.open_conversation(first)  # A, while B's reply streams
    c.stop_reply()
    wait_reply(qtbot, w)
    _load(qtbot, c, tiny_target)
    assert w.gauge.source_label.isHidden(), w.gauge.source_label.text()


def test_html_in_a_file_name_or_an_error_is_shown_as_text(qtbot, tiny_window,  # type: ignore[no-untyped-def]
                                                          tiny_target: Path,
                                                          tmp_path: Path) -> None:
    """A model's file name, a template's error or a server's message is untrusted: Qt's
    labels would draw "<h1>" and "<img src=…>" in it as a heading and a local image (a
    window grown past the screen). Every label in the window shows plain text, or
    Tandem's own markup with the rest escaped."""
    from PySide6.QtWidgets import QLabel

    from app.chat.events import UserError

    w = tiny_window
    w.resize(1024, 720)
    qtbot.waitUntil(lambda: w.width() == 1024, timeout=5000)
    hostile = tmp_path / "<h1><font color=red>BIG<br><br><br>TEXT.gguf"
    hostile.write_bytes(tiny_target.read_bytes())
    _load(qtbot, w.controller, hostile)
    assert hostile.name in w.status_label.full_text()
    qtbot.wait(50)
    height = w.height()
    img = "<img src='/etc/x.png' width=900 height=900><a href='file:///etc/passwd'>x</a>"
    w.show_error(UserError("<h1>Template error</h1>", img, "error", origin="load"))
    qtbot.wait(50)
    bar = w.message_bar
    assert bar.title.text() == "<h1>Template error</h1>:" and bar.text.text() == img
    for label in (w.status_label, bar.title, bar.text):
        assert label.textFormat() == Qt.TextFormat.PlainText
        assert label.sizeHint().height() < 200  # drawn as HTML, the image is 900 px high
    assert w.height() < height + 100 and w.width() == 1024  # the bar's line or two
    # every label but a form's row titles (Tandem's own words, the form's buddy labels)
    auto = [lb.objectName() or lb.text()[:40] for lb in w.findChildren(QLabel)
            if lb.textFormat() == Qt.TextFormat.AutoText and lb.buddy() is None]
    assert not auto, auto


def test_after_a_starter_prompt_the_message_box_has_the_focus(qtbot, tiny_window) -> None:  # type: ignore[no-untyped-def]
    """A starter button goes away with the first message: typing the follow-up must not
    need a click into the message box first."""
    from PySide6.QtWidgets import QApplication

    w = tiny_window
    w.activateWindow()
    buttons = w.chat.starters.buttons
    assert buttons and buttons[0].isVisible()
    buttons[0].setFocus()
    buttons[0].click()
    wait_reply(qtbot, w)
    assert QApplication.focusWidget() is w.input


def test_esc_leaves_editing_when_no_reply_runs(qtbot, tiny_window) -> None:  # type: ignore[no-untyped-def]
    """Esc stops a reply; with none running it leaves editing a message (the input box
    empties and Send sends a new message again)."""
    from PySide6.QtCore import Qt

    from app.ui.window_actions import quit_keys

    w = tiny_window
    assert w.send_message("hello")
    wait_reply(qtbot, w)
    first = w.controller.store.messages(w.controller.current_conversation)[0]
    w.edit_message(first.id)
    assert w.controller.editing_message_id == first.id and w.input.toPlainText() == "hello"
    w.activateWindow()
    qtbot.keyClick(w.input, Qt.Key.Key_Escape)
    assert w.controller.editing_message_id is None and w.input.toPlainText() == ""
    assert all("+" in k.toString() for k in quit_keys())  # no bare "Exit" key listed


def test_esc_in_the_search_box_clears_the_search_first(qtbot, tiny_window) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt

    w = tiny_window
    w.activateWindow()
    search = w.conversations.search
    search.setFocus()
    qtbot.keyClicks(search, "palindrome")
    qtbot.keyClick(search, Qt.Key.Key_Escape)
    assert search.text() == ""


def test_a_conversation_opened_from_a_search_shows_where_it_has_the_text(  # type: ignore[no-untyped-def]
        qtbot, tiny_window) -> None:
    """Opened from the search, a conversation marks the text searched for and shows it;
    a search typed with a conversation open marks it there; an empty search clears."""
    w = tiny_window
    store = w.controller.store
    conv = store.create_conversation("Old chat")
    for text in ("a question", "the word Zebra is here", "a later one"):
        store.add_user_message(conv.id, text)
    w.conversations.search.setText("zebra")
    qtbot.waitUntil(lambda: w.conversations.ids() == [conv.id])
    w.open_conversation(conv.id)
    marked = [m.message_id for m in w.chat.messages if m.first_mark_y() is not None]
    assert marked == [store.messages(conv.id)[1].id]
    w.conversations.search.setText("later")
    qtbot.waitUntil(lambda: w.chat.messages[-1].first_mark_y() is not None)
    assert w.chat.messages[1].first_mark_y() is None
    w.conversations.search.clear()
    qtbot.waitUntil(lambda: all(m.first_mark_y() is None for m in w.chat.messages))


def test_esc_asks_before_throwing_a_rewrite_away(qtbot, tiny_window,  # type: ignore[no-untyped-def]
                                                 monkeypatch) -> None:
    """Esc while an edit's text was changed asks first: "Keep editing" (the default)
    keeps the rewrite in the box, "Discard" leaves editing."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QMessageBox

    w = tiny_window
    assert w.send_message("hello")
    wait_reply(qtbot, w)
    first = w.controller.store.messages(w.controller.current_conversation)[0]
    w.edit_message(first.id)
    w.input.setPlainText("hello there, a longer question")
    asked: list[str] = []
    answer = [QMessageBox.StandardButton.Cancel]
    monkeypatch.setattr(QMessageBox, "exec", lambda box: (asked.append(box.text()), answer[0])[1])
    w.activateWindow()
    qtbot.keyClick(w.input, Qt.Key.Key_Escape)
    assert asked == ["Discard your changes to this message?"]
    assert w.controller.editing_message_id == first.id
    assert w.input.toPlainText() == "hello there, a longer question"
    answer[0] = QMessageBox.StandardButton.Discard
    qtbot.keyClick(w.input, Qt.Key.Key_Escape)
    assert len(asked) == 2 and w.controller.editing_message_id is None
    assert w.input.toPlainText() == ""


def test_choose_draft_offers_the_ranked_drafts_or_any_file(qtbot, tiny_window,  # type: ignore[no-untyped-def]
                                                           monkeypatch, tmp_path: Path) -> None:
    """"Choose draft…" opens a menu: the Models window with the loaded target selected
    (its drafts list ranks the library's models for it and greys the incompatible ones),
    or a file dialog for any GGUF."""
    from PySide6.QtWidgets import QApplication, QMenu

    from app.ui.picker.library_tab import NO_DRAFT_MODEL_LABEL

    w = tiny_window
    target = w.controller.model_info.target_path
    qtbot.mouseClick(w.model_bar.draft_button, Qt.MouseButton.LeftButton)
    menu = QApplication.activePopupWidget()
    assert isinstance(menu, QMenu)
    ranked, other = [a for a in menu.actions() if not a.isSeparator()]
    assert ranked.text() == "Compatible drafts in the Models window…"
    assert other.text() == "Open a GGUF file…"
    picked: list[Path | None] = []
    monkeypatch.setattr(w, "choose_draft_file", lambda: None)  # the dialog, cancelled
    monkeypatch.setattr(w.controller, "set_draft_model", picked.append)
    other.trigger()
    assert picked == [] and w.windows.picker is None  # nothing chosen, nothing changed
    monkeypatch.setattr(w, "choose_draft_file", lambda: tmp_path / "draft.gguf")
    other.trigger()
    assert picked == [tmp_path / "draft.gguf"]
    ranked.trigger()
    menu.close()
    picker = w.windows.picker
    assert picker is not None and picker.isVisible()
    assert picker.tabs.tabText(picker.tabs.currentIndex()).startswith("Library")
    qtbot.waitUntil(lambda: not picker.library_tab.scanning, timeout=LOAD_TIMEOUT_MS)
    tab = picker.library_tab
    assert tab.target is not None and tab.target.is_file(target)
    qtbot.waitUntil(lambda: not tab.ranking, timeout=LOAD_TIMEOUT_MS)
    # the library holds no other model: the drafts list says so, greyed, and where to look
    label, status, greyed = tab.draft_rows()[0]
    assert label == NO_DRAFT_MODEL_LABEL and greyed and "Catalog" in status
    picker.close()


def test_enter_during_a_reply_says_why_nothing_is_sent_and_keeps_the_text(  # type: ignore[no-untyped-def]
        qtbot, tiny_window, monkeypatch) -> None:
    w = tiny_window
    w.controller.set_sampling(w.settings.sampling.with_changes(max_tokens=1000))
    paused = _hold_after_first_text(monkeypatch)
    assert w.send_message("hello")
    qtbot.waitUntil(paused.is_set, timeout=60_000)
    w.input.setPlainText("and another thing")
    qtbot.keyClick(w.input, Qt.Key.Key_Return)
    err = w.message_bar.current
    assert err is not None and err.title == "Not sent yet"
    assert err.message.startswith("Tandem writes one reply at a time")
    assert w.input.toPlainText() == "and another thing"
    assert w.controller.reply is not None  # Enter never stops the reply
    w.controller.stop_reply()
    wait_reply(qtbot, w)


def test_open_recent_lists_the_targets_loaded_and_loads_one(  # type: ignore[no-untyped-def]
        qtbot, window, smollm_path: Path, tmp_path: Path) -> None:
    """File → Open recent (the same submenu as the model bar's "Open GGUF… ▾"): the
    targets loaded, most recent first, the loaded one ticked; a file gone is listed,
    disabled; two of one name show their folders; a click loads; the list can be
    cleared."""
    gemma = window.controller.model_info.target_path
    gone = tmp_path / "gone.gguf"
    twin = tmp_path / "copies" / gemma.name
    twin.parent.mkdir()
    twin.write_bytes(b"GGUF")
    window.settings.model.recent_targets = [gemma, gone, twin]
    menu = window.model_bar.recent_menu
    file_menu = window.menuBar().actions()[0].menu()
    assert menu.menuAction() in file_menu.actions()
    menu.aboutToShow.emit()
    entries = [(a.text(), a.isEnabled(), a.isChecked(), a.toolTip())
               for a in menu.actions() if not a.isSeparator()]
    assert entries == [
        (f"{gemma.name} \u2014 {gemma.parent.name}", True, True, str(gemma)),
        ("gone.gguf (not found)", False, False, str(gone)),
        (f"{gemma.name} \u2014 copies", True, False, str(twin)),
        ("Clear the list", True, False, "Clear the list")]
    window.settings.model.recent_targets = [smollm_path, gemma]
    menu.aboutToShow.emit()
    window.model_bar.set_busy(True)  # a reply or a load runs: no model swap
    assert not menu.menuAction().isEnabled()
    window.model_bar.set_busy(False)
    menu.actions()[0].trigger()  # SmolLM2
    qtbot.waitUntil(lambda: not window.controller.loading
                    and window.controller.model_info.target_path == smollm_path,
                    timeout=LOAD_TIMEOUT_MS)
    assert window.settings.model.recent_targets[:2] == [smollm_path, gemma]
    menu.aboutToShow.emit()
    assert [a.isChecked() for a in menu.actions()[:2]] == [True, False]
    menu.actions()[-1].trigger()  # Clear the list
    assert window.settings.model.recent_targets == []
    menu.aboutToShow.emit()
    assert [(a.text(), a.isEnabled()) for a in menu.actions()] == [("No model opened yet", False)]


def test_recent_targets_keep_the_latest_once() -> None:
    from app.store.settings import RECENT_TARGETS, ModelSettings

    m = ModelSettings(recent_targets=[Path(f"/m/{i}.gguf") for i in range(RECENT_TARGETS + 3)])
    assert len(m.recent_targets) == RECENT_TARGETS
    m.opened(Path("/m/3.gguf"))
    assert m.recent_targets[:2] == [Path("/m/3.gguf"), Path("/m/0.gguf")]
    assert m.recent_targets.count(Path("/m/3.gguf")) == 1


#: a platform's dark palette (macOS in dark mode, GNOME's dark style) applied before
#: Tandem sets its look, then what Tandem's labels and fields are drawn with
_DARK_THEN_TANDEM = """
import sys
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QLabel
qapp = QApplication(sys.argv[:1])
dark = QPalette(QColor("#3a3a3a"))
for role, colour in ((QPalette.ColorRole.Window, "#1e1e1e"), (QPalette.ColorRole.Base, "#2b2b2b"),
                     (QPalette.ColorRole.Text, "#ffffff"), (QPalette.ColorRole.WindowText, "#ffffff"),
                     (QPalette.ColorRole.ButtonText, "#ffffff")):
    dark.setColor(role, QColor(colour))
qapp.setPalette(dark)
from app.ui.launch import create_application
create_application(sys.argv[:1])
label = QLabel("a message")
p = label.palette()
print(p.color(QPalette.ColorRole.WindowText).name(), p.color(QPalette.ColorRole.Text).name(),
      p.color(QPalette.ColorRole.Base).name(), p.color(QPalette.ColorRole.ButtonText).name())
"""


def test_a_dark_system_theme_leaves_tandem_light_and_readable() -> None:
    """The style sheet's backgrounds are light: under a dark system palette the text
    would be light on light (the user's own messages, the status bar, the Copy and Edit
    buttons vanished); Tandem sets its light palette over whatever the platform gives."""
    import subprocess

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", _DARK_THEN_TANDEM], capture_output=True,
                         text=True, timeout=120, env=env, check=True).stdout.split()
    from PySide6.QtGui import QColor

    black, white = QColor("black").name(), QColor("white").name()
    assert out == [black, black, white, black]
