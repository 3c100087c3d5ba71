"""The window with the tiny synthetic model: a conversation too long for the context
window (the message goes back to the input box, the error does not outlive a later
success, the gauge does not stay "live", the overflow policy drops earlier messages and says so),
reply and message versions (‹ 1/2 ›, the conversation continues from the shown one,
an edit keeps the turns after it) and Auto's explanation in the gauge and the reply footer."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.formatting import MISSING
from app.options import ContextOverflow, SamplingParams, SpecMode, SpeculationConfig
from app.store.history import automatic_title
from app.store.settings import Settings
from tests.ui.conftest import loaded_window, wait_reply

#: the tiny model spells most text one byte a token: 60 + 110 characters and the
#: template's words do not fit a 256-token window, the 110 alone do
FIRST = "Tell me about the tiny model that these tests run on, please."
LONG = "Summarise: " + "the quick brown fox jumps over the lazy dog, " * 2 + "and so on."


def _settings(target: Path, policy: ContextOverflow, mode: SpecMode = SpecMode.OFF) -> Settings:
    s = Settings()
    s.model.target_path = target
    s.model.n_ctx = 256
    s.sampling = SamplingParams(temperature=0.0, max_tokens=8, context_overflow=policy)
    s.speculation = SpeculationConfig(mode=mode)
    return s


@pytest.fixture
def stop_window(qtbot, tiny_target: Path):  # type: ignore[no-untyped-def]
    w = loaded_window(qtbot, _settings(tiny_target, ContextOverflow.STOP))
    yield w
    w.close()


def _send(qtbot, w, text: str) -> None:  # type: ignore[no-untyped-def]
    assert w.send_message(text)
    wait_reply(qtbot, w)


def test_a_message_that_does_not_fit_goes_back_to_the_box_and_the_next_success_clears_it(  # type: ignore[no-untyped-def]
        qtbot, stop_window) -> None:
    w = stop_window
    _send(qtbot, w, FIRST)
    assert w.message_bar.current is None
    _send(qtbot, w, LONG)  # "stop": the conversation no longer fits

    error = w.message_bar.current
    assert error is not None and w.message_bar.isVisible() and error.title == "Not sent"
    assert "context window holds 256" in error.message and error.origin == "reply"
    assert error.message.endswith("Sampling → Too long for the context chooses how. Your "
                                  "message is back in the box.")
    assert "API" not in error.message  # the window's way, not the API's
    # the message left the conversation and waits in the box, nothing lost
    assert [m.role for m in w.chat.messages] == ["user", "assistant"]
    assert [m.role for m in w.controller.store.messages(w.controller.current_conversation)
            ] == ["user", "assistant"]
    assert w.input.toPlainText() == LONG and w.send_button.isEnabled()
    assert not w.chat.failure.isVisibleTo(w.chat)  # no "Regenerate asks again" under it
    # nothing was sent: the gauge shows the last reply again
    assert not w.gauge.live and "last\u00a0reply" in w.gauge.mode_label.text()
    assert "failed" not in w.gauge.mode_label.text()
    # shortened, the text is still the one the banner speaks of; replaced, it is not
    w.input.setPlainText(LONG[: len(LONG) // 2])
    assert w.message_bar.current is not None and w.message_bar.current.title == "Not sent"
    w.input.setPlainText("Hello there")
    assert w.message_bar.current is None
    w.input.setPlainText(LONG)

    # the way on: let Tandem drop earlier messages, then Send again
    w.sampling_panel.context_overflow.setCurrentIndex(
        w.sampling_panel.context_overflow.findData(ContextOverflow.ROLLING_WINDOW))
    assert w.settings.sampling.context_overflow is ContextOverflow.ROLLING_WINDOW
    w.send_button.click()
    assert w.message_bar.current is None  # sent now: "Not sent" goes while it streams
    wait_reply(qtbot, w)
    assert w.input.toPlainText() == ""

    assert w.message_bar.current is None and not w.message_bar.isVisible()  # no stale banner
    assert not w.chat.failure.isVisibleTo(w.chat)
    assert not w.gauge.live and "last\u00a0reply" in w.gauge.mode_label.text()
    reply = w.chat.messages[-1]
    assert reply.role == "assistant" and reply.text
    assert "Dropped 2 earlier messages" in reply.footer_text
    # no system prompt here: none is said to be kept
    assert "to fit the 256-token window (rolling window)" in reply.footer_text
    stored = w.controller.store.messages(w.controller.current_conversation)[-1]
    assert stored.stats["context"]["dropped_messages"] == 2  # type: ignore[index]
    assert stored.stats["context"]["policy"] == "rolling-window"  # type: ignore[index]

    # an edit that alone does not fit comes back as the edit, the message as it was
    first = w.chat.messages[0]
    assert w.edit_message(first.message_id)
    _send(qtbot, w, LONG * 3)
    assert w.message_bar.current is not None and w.message_bar.current.title == "Not sent"
    assert w.controller.editing_message_id == first.message_id
    assert w.input.toPlainText() == LONG * 3
    assert w.chat.messages[0].text == FIRST and len(w.chat.messages) == 4
    store, cid = w.controller.store, w.controller.current_conversation
    # the refused edit's title went too (the list's marking of the conversation being
    # written is no rename that would put it back)
    assert store.conversation(cid).title == automatic_title(FIRST)


def test_regenerate_keeps_versions_and_the_conversation_follows_the_shown_one(  # type: ignore[no-untyped-def]
        qtbot, tiny_target: Path) -> None:
    w = loaded_window(qtbot, _settings(tiny_target, ContextOverflow.TRUNCATE_MIDDLE))
    try:
        _send(qtbot, w, FIRST)
        first = w.chat.messages[-1]
        first_text = first.text
        assert first.version == (1, 1) and not first.version_label.isVisible()

        w.controller.set_speculation(SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP))
        w.regenerate_button.click()
        wait_reply(qtbot, w)
        reply = w.chat.messages[-1]
        assert reply is first  # the same message, a new version
        assert reply.version == (2, 2) and reply.version_label.text() == "2/2"
        assert reply.version_label.isVisible() and reply._older.isEnabled()
        assert "prompt lookup" in reply.footer_text
        versions = w.controller.store.versions(reply.message_id)
        assert [v.stats["mode"] for v in versions] == ["off", "prompt-lookup"]  # type: ignore[index]
        assert all(v.stats["decode_tps"] for v in versions)  # type: ignore[index]

        reply._older.click()  # ‹
        assert reply.version == (1, 2) and reply.text == first_text
        assert "no speculation" in reply.footer_text and "prompt lookup" not in reply.footer_text
        assert not reply._older.isEnabled() and reply._newer.isEnabled()
        prompt = w.controller.prompt_messages()
        assert prompt[-1].content == first_text  # the conversation continues from it

        _send(qtbot, w, "And then?")  # the next reply reads version 1 of the first
        sent = [m.content for m in w.controller.prompt_messages()]
        assert sent[1] == first_text and len(sent) == 4

        w.open_conversation(None)  # versions survive reopening the conversation
        w.open_conversation(w.controller.settings.ui.last_conversation_id or
                            w.controller.conversations()[0].id)
        reopened = w.chat.messages[1]
        assert reopened.version == (1, 2) and not reopened.version_label.isHidden()
    finally:
        w.close()


def test_an_edit_keeps_the_later_turns_and_the_messages_arrows_bring_them_back(  # type: ignore[no-untyped-def]
        qtbot, tiny_target: Path) -> None:
    w = loaded_window(qtbot, _settings(tiny_target, ContextOverflow.TRUNCATE_MIDDLE))
    try:
        _send(qtbot, w, "First question")
        _send(qtbot, w, "Second question")
        before = [m.text for m in w.chat.messages]
        first = w.chat.messages[0]
        w.edit_message(first.message_id)
        older = w.chat.messages[1]._older
        assert not first._older.isVisible() and not older.isEnabled()  # nothing to switch
        w.input.setPlainText("Another first question")
        assert w.send_message()
        wait_reply(qtbot, w)
        shown = w.chat.messages
        assert [m.text for m in shown][0] == "Another first question" and len(shown) == 2
        assert shown[0] is first and first.version == (2, 2) and first.version_label.isVisible()
        assert "version of this message" in first._older.toolTip()
        assert w.input.toPlainText() == "" and not w.composer.edit_banner.isVisibleTo(w)

        first._older.click()  # ‹ on the user message: the first text and all that followed
        assert [m.text for m in w.chat.messages] == before
        assert first.version == (1, 2) and first._newer.isEnabled()
        assert [m.content for m in w.controller.prompt_messages()][-1] == before[-1]
        first._newer.click()
        assert [m.text for m in w.chat.messages][0] == "Another first question"
        assert len(w.chat.messages) == 2
        assert len(w.controller.conversations()) == 1  # one conversation, not a copy
    finally:
        w.close()


def test_auto_explains_its_choice_in_the_gauge_and_the_footer(  # type: ignore[no-untyped-def]
        qtbot, tiny_target: Path) -> None:
    w = loaded_window(qtbot, _settings(tiny_target, ContextOverflow.TRUNCATE_MIDDLE,
                                       SpecMode.AUTO))
    try:
        _send(qtbot, w, FIRST)
        reason = w.gauge.explanation
        assert reason.startswith("Auto: suffix lookup, k ≤ 16: nothing to learn from yet")
        assert w.gauge.reason_label.isVisible()
        footer = w.chat.messages[-1].footer_text
        assert "Auto: suffix lookup k=16" in footer and "\nNothing to learn from yet; it costs" in footer

        _send(qtbot, w, FIRST)  # now there is a reply to replay: an estimate or off, worded
        second = w.controller.store.messages(w.controller.current_conversation)[-1]
        auto = second.stats["auto"]  # type: ignore[index]
        assert auto["reason"] in ("estimate", "no-gain") and auto["evidence"]
        assert w.gauge.explanation.startswith("Auto: ")
        # the footer names the choice on its first line and gives the reason below it
        why = w.gauge.explanation[len("Auto: "):].split(": ", 1)[1]
        assert "\n" + why[:1].upper() + why[1:] in w.chat.messages[-1].footer_text
        assert "replay" in {e["source"] for e in auto["evidence"]}
    finally:
        w.close()


def test_a_version_shows_its_own_model_and_figures_or_none(  # type: ignore[no-untyped-def]
        qtbot, tiny_target: Path) -> None:
    w = loaded_window(qtbot, _settings(tiny_target, ContextOverflow.TRUNCATE_MIDDLE))
    try:
        _send(qtbot, w, FIRST)
        store, cid = w.controller.store, w.controller.current_conversation
        reply_id = w.chat.messages[-1].message_id
        # a second version that failed part-way (as one interrupted by a crash), by another
        # model: no figures
        store.begin_reply_version(reply_id, model="other.gguf")
        store.finish_reply(reply_id, "half a rep", "error", None, note="the model crashed")
        w.open_conversation(None)
        w.open_conversation(cid)
        reply = w.chat.messages[-1]
        assert reply.version == (2, 2) and reply.text == "half a rep"
        assert reply._who.full_text() == "Assistant · other.gguf"
        assert w.gauge.mode_label.text() == "No figures for the last reply"
        assert w.gauge.tps_label.text() == MISSING

        reply._older.click()  # ‹ version 1 has figures: the gauge shows them
        assert reply.version == (1, 2)
        assert reply._who.full_text() == f"Assistant · {tiny_target.name}"  # who wrote it
        assert "last\u00a0reply" in w.gauge.mode_label.text()
        assert w.gauge.tps_label.text() != MISSING

        reply._newer.click()  # › back to the failed version: version 1's figures leave
        assert reply.version == (2, 2) and reply._who.full_text() == "Assistant · other.gguf"
        assert w.gauge.mode_label.text() == "No figures for this version"
        assert w.gauge.tps_label.text() == MISSING
        assert all(row.text() == MISSING for row in w.gauge._rows.values())

        # the gauge shows the open conversation's replies only: a version shown again in
        # another one (a regeneration there that failed) leaves it alone
        reply._older.click()
        other = store.create_conversation("other")
        store.add_user_message(other.id, "hello")
        w.open_conversation(other.id)
        assert w.gauge.mode_label.text() == "No reply yet"
        w.version_shown(store.message(reply_id), [])  # version 1 of the first conversation
        assert w.gauge.mode_label.text() == "No reply yet"
        assert w.gauge.tps_label.text() == MISSING
    finally:
        w.close()


def test_both_regenerate_buttons_wait_while_a_message_is_edited(  # type: ignore[no-untyped-def]
        qtbot, stop_window) -> None:
    w = stop_window
    _send(qtbot, w, "Hello there")
    user, reply = w.chat.messages[-2], w.chat.messages[-1]
    assert w.regenerate_button.isEnabled() and reply._regen.isEnabled()
    w.edit_message(user.message_id)
    assert w.composer.edit_banner.isVisibleTo(w)
    assert not w.regenerate_button.isEnabled() and not reply._regen.isEnabled()
    w._on_composer_cancel_edit_clicked()
    assert w.regenerate_button.isEnabled() and reply._regen.isEnabled()


def test_a_first_message_refused_leaves_the_gauge_without_a_reply(  # type: ignore[no-untyped-def]
        qtbot, stop_window) -> None:
    """The first message of a new chat is too long by itself: nothing was sent, so the
    gauge says "No reply yet", not the "reading the prompt…" of the reply that never was."""
    w = stop_window
    assert w.send_message("word " * 400)  # longer than the 256-token window alone
    w.gauge.refresh()  # as its timer does while the prompt is read
    assert w.gauge.tps_caption.text() == "reading the prompt…"
    wait_reply(qtbot, w)
    assert w.message_bar.current is not None and w.message_bar.current.title == "Not sent"
    assert w.gauge.mode_label.text() == "No reply yet"
    assert w.gauge.tps_caption.text() == "decode tok/s"


def test_a_question_left_unanswered_is_marked_and_can_be_asked_again_as_it_is(  # type: ignore[no-untyped-def]
        qtbot, stop_window) -> None:
    w = stop_window
    session = w.controller.service._session
    with session._lock:  # the reply cannot begin before it is stopped
        assert w.send_message("Name three colours.")
        w.controller.stop_reply()
    wait_reply(qtbot, w)
    assert [m.role for m in w.chat.messages] == ["user"]  # stopped before any text
    _send(qtbot, w, "Name three animals.")
    first = w.chat.messages[0]
    assert first.property("outOfContext")  # the model does not see it
    assert w.edit_message(first.message_id)
    assert w.input.toPlainText() == "Name three colours." and w.send_button.isEnabled()
    assert w.composer.edit_unchanged  # Esc would leave it without asking to discard
    w.send_button.click()  # asked again, unchanged: a new version of it, answered
    wait_reply(qtbot, w)
    assert [m.role for m in w.chat.messages] == ["user", "assistant"]
    assert w.chat.messages[0].text == "Name three colours." and w.chat.messages[1].text
