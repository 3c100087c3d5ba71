"""Quitting while work runs asks first: what would stop, in words; Cancel keeps the
window and the work, Quit closes, "Don't ask again" turns the question off. Over the fake
engine (no model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QMessageBox

from app.ui.quit_check import work_in_progress
from tests.ui.conftest import api_request_at_gate


def test_what_quitting_stops_in_words() -> None:
    assert work_in_progress((), 0) == []
    assert work_in_progress((("load", "window"),), 0) == []  # a load may just stop
    stops = work_in_progress((("reply", "window"), ("completion", "api"), ("reply", "api"),
                              ("sweep", "race"), ("lookup", "race")), 1)
    assert stops == [
        "the reply being written (kept as far as it got, marked interrupted; Continue "
        "goes on from it)",
        "2 requests to the local API (the client gets an error saying the server is "
        "shutting down)",
        "the race or k sweep running (its figures so far are not kept)",
        "the prompt-lookup estimate over past conversations",
        "1 download (paused; Tandem offers to resume at the next start)"]
    assert work_in_progress((("reply", "window"),), 0, reply_text=False) == [
        "the reply asked for, not begun (your message stays; Regenerate asks again)"]


def test_quit_asks_while_a_reply_and_an_api_request_run(  # type: ignore[no-untyped-def]
        qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[str] = []
    asked: list[str] = []

    def answer(box: QMessageBox) -> int:
        asked.append(box.text())
        choice = answers.pop(0)
        if choice == "never":
            box.checkBox().setChecked(True)
            choice = "Quit"
        if choice == "Quit":
            next(b for b in box.buttons() if b.text() == "Quit").click()
        return 0

    monkeypatch.setattr(QMessageBox, "exec", answer)
    with api_request_at_gate(qtbot, tmp_path) as (w, _script):
        assert w.send_message("hello")  # waits behind the API's reply
        answers.append("Cancel")
        w.window_actions.quit.trigger()
        assert asked[-1] == (
            "Quitting now stops:\n"
            "•  the reply asked for, not begun (your message stays; Regenerate asks again)\n"
            "•  1 request to the local API (the client gets an error saying the server "
            "is shutting down)")
        assert w.isVisible() and w.controller.reply is not None  # nothing stopped
        # the title bar's close button (a close event from the window system) asks too
        answers.append("Cancel")
        event = QCloseEvent()
        event.spontaneous = lambda: True  # type: ignore[method-assign]
        w.closeEvent(event)
        assert len(asked) == 2 and not event.isAccepted() and w.isVisible()
        answers.append("never")
        w.window_actions.quit.trigger()
        assert not w.isVisible() and w.settings.ui.confirm_quit is False
        assert len(asked) == 3


def test_the_question_follows_work_that_ends_while_it_is_open(  # type: ignore[no-untyped-def]
        qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The list is read again while the question is open: a reply and an API request
    that end meanwhile leave it, and it then says quitting stops nothing."""
    seen: list[str] = []

    with api_request_at_gate(qtbot, tmp_path) as (w, script):
        def answer(box: QMessageBox) -> int:
            seen.append(box.text())
            script.gate.set()  # the API's request and then the window's reply run to the end
            qtbot.waitUntil(lambda: "stops nothing" in box.text(), timeout=30_000)
            seen.append(box.text())
            return 0  # closed without Quit: Tandem stays

        monkeypatch.setattr(QMessageBox, "exec", answer)
        assert w.send_message("hello")
        w.window_actions.quit.trigger()
        assert seen[0].count("•") == 2
        assert seen[1] == "The work that was running has ended: quitting now stops nothing."
        assert w.isVisible() and w.controller.reply is None
        assert w.controller.store.messages(w.controller.current_conversation)[-1].content \
            == "alpha beta gamma delta"


def test_unsent_text_too_long_to_keep_is_named_before_quitting(  # type: ignore[no-untyped-def]
        qtbot, window, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unsent text over what the settings keep stays in the box, and quitting says it
    will not be there at the next start; text that fits is kept and asks nothing."""
    from app.store.settings import load_settings
    from app.ui.chat import input_box

    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "exec", lambda box: asked.append(box.text()) or 0)
    monkeypatch.setattr(input_box, "UNSENT_KEPT_CHARS", 30)
    window.input.setPlainText("x" * 31)
    assert window.composer.unkept == 31 and window.input.toPlainText() == "x" * 31
    window.window_actions.quit.trigger()  # answered with Cancel: Tandem stays
    assert asked == ["Quitting now stops:\n•  31 characters of unsent text (in this or "
                     "another conversation's box): over the 2,000,000 kept for the next "
                     "start, so lost; copy it elsewhere first"]
    assert window.isVisible()
    window.input.setPlainText("short enough")
    assert window.composer.unkept == 0
    qtbot.waitUntil(lambda: load_settings().settings.ui.unsent.get("new") == "short enough",
                    timeout=5000)
    window.window_actions.quit.trigger()
    assert len(asked) == 1 and not window.isVisible()  # nothing would be lost: no question
