"""The token count under the input box, measured with the loaded target's tokenizer and
chat template by the rule a reply uses: the count, the room left, the drop a send would
make, and the refusal it would get; nothing without a local model."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from app.chat.preview import PromptPreview
from app.engine.chat import ChatMessage
from app.engine.context_fit import ContextFit
from app.options import ContextOverflow, SamplingParams
from app.ui.chat.token_preview import preview_words
from tests.ui.conftest import wait_reply


def test_the_line_in_words() -> None:
    assert preview_words(PromptPreview(12, 140, 512, 24)) == (
        "12 tokens · 140 of the 512-token context with the conversation", "")
    assert preview_words(PromptPreview(1, 500, 512, 24)) == (
        "1 token · 500 of the 512-token context with the conversation: the reply has room "
        "for 13 tokens", "warning")
    fit = ContextFit(ContextOverflow.TRUNCATE_MIDDLE, 512, 2, 44, 480, 24, kept_first=True)
    assert preview_words(PromptPreview(366, 480, 512, 24, fit)) == (
        "366 tokens · Sending drops 2 earlier messages (44 tokens) to fit the 512-token "
        "window (truncate middle: the first exchange is kept)", "warning")
    assert preview_words(PromptPreview(900, 0, 512, 24, refusal="The last message alone is "
                                       "905 tokens; …")) == (
        "Too long to send: The last message alone is 905 tokens; …", "error")


def test_the_count_follows_the_text_and_the_conversation(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    label = window.composer.token_count
    session = window.controller.service._session
    text = "What is the capital of France?"
    window.input.setPlainText(text)
    qtbot.waitUntil(lambda: label.text() != "", timeout=10_000)
    own = len(session.target.tokenize(text, add_special=False, parse_special=False))
    prompt = len(session.chat_prompt(window.controller.messages_with(text)))
    assert label.text() == (f"{own} tokens · {prompt} of the 512-token context with the "
                            "conversation")
    assert window.send_message()
    assert window.input.toPlainText() == "" and label.text() == ""  # nothing typed: no line
    wait_reply(qtbot, window)
    window.input.setPlainText(text)  # the same text now comes after one exchange
    qtbot.waitUntil(lambda: window.token_preview.shown is not None
                    and window.token_preview.shown.prompt_tokens > prompt, timeout=10_000)
    window.input.setPlainText("word " * 700)  # longer than the whole context
    qtbot.waitUntil(lambda: label.text().startswith("Too long to send:"), timeout=10_000)
    assert label.property("level") == "error"
    assert "the context window holds 512" in label.text()
    window.input.clear()
    qtbot.waitUntil(lambda: label.text() == "", timeout=10_000)
    QApplication.processEvents()


def test_an_edit_is_measured_without_what_follows_it(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    c = window.controller
    assert window.send_message("first question")
    wait_reply(qtbot, window)
    assert window.send_message("second question")
    wait_reply(qtbot, window)
    first = c.store.messages(c.current_conversation)[0]
    assert window.edit_message(first.id)
    assert [m.content for m in c.messages_with("first, asked again")] == ["first, asked again"]
    window.input.setPlainText("first, asked again")
    qtbot.waitUntil(lambda: window.token_preview.shown is not None, timeout=10_000)
    session = c.service._session
    assert window.token_preview.shown.prompt_tokens == len(
        session.chat_prompt(c.messages_with("first, asked again")))


def test_the_line_follows_the_sampling_settings(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    """Max tokens changed in the Sampling tab: the room a reply would have is measured
    again (about 400 of 512 tokens leave room for 24, not for 128)."""
    label = window.composer.token_count
    window.input.setPlainText("word " * 390)
    qtbot.waitUntil(lambda: window.token_preview.shown is not None, timeout=10_000)
    assert 380 < window.token_preview.shown.prompt_tokens < 420
    assert label.property("level") == ""
    window.sampling_panel.max_tokens.setValue(200)  # room: a quarter of the window, 128
    qtbot.waitUntil(lambda: label.property("level") == "warning", timeout=10_000)
    assert "the reply has room for" in label.text()


def test_closing_does_not_wait_for_a_count_under_way(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    """A count waits for the model (held here, as a long prompt's prefill holds it):
    stopping the counts returns at once, without the count."""
    import threading

    session = window.controller.service._session
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with session._lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        window.input.setPlainText("a question")
        qtbot.waitUntil(lambda: window.token_preview._future is not None
                        and window.token_preview._future.running(), timeout=10_000)
        window.token_preview.shutdown()
        assert holder.is_alive() and window.token_preview._future.running()  # not waited for
    finally:
        release.set()
        holder.join(30)
    qtbot.wait(200)
    assert window.token_preview.shown is None  # a count after shutdown is not shown


def test_no_line_without_a_local_model() -> None:
    from app.chat.service import ChatService
    from app.engine.chat import ChatMessage
    from app.options import SamplingParams

    service = ChatService(warm_up=None)
    try:
        assert service.preview([ChatMessage("user", "hi")], SamplingParams()) is None
    finally:
        service.shutdown()


def test_while_the_model_is_in_use_the_line_says_it_waits(qtbot) -> None:  # type: ignore[no-untyped-def]
    from app.ui.chat.token_preview import SETTLE_MS, WAITING, TokenPreview
    from app.ui.labels import Label

    label = Label()
    qtbot.addWidget(label)
    busy = [True]
    measured: list[int] = []

    def measure(messages, sampling):  # type: ignore[no-untyped-def]
        measured.append(len(messages))
        return PromptPreview(3, 10, 512, 24)

    preview = TokenPreview(label, measure, lambda text: [ChatMessage("user", text)],
                           SamplingParams, lambda: "hello", lambda: busy[0])
    preview.refresh()
    qtbot.waitUntil(lambda: label.text() == WAITING, timeout=5_000)
    assert measured == []  # the model is not taken between a reply's rounds
    busy[0] = False  # an API request ended, say: nothing else tells the line
    qtbot.waitUntil(lambda: label.text().startswith("3 tokens"), timeout=5_000)
    assert measured == [1]
    preview.shutdown()
    remote = TokenPreview(label, measure, lambda text: [ChatMessage("user", text)],
                          SamplingParams, lambda: "hello", lambda: True, lambda: False)
    remote.refresh()  # a remote server's reply runs: no tokenizer here, no "waiting"
    qtbot.wait(SETTLE_MS * 2)
    assert label.text() == "" and measured == [1]
    remote.shutdown()


def test_another_version_shown_is_measured_again(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    c = window.controller
    assert window.send_message("first")
    wait_reply(qtbot, window)
    first = c.store.messages(c.current_conversation)[0]
    assert window.edit_message(first.id)
    assert window.send_message("first, asked at much greater length than before, with many "
                               "more words in it to count")
    wait_reply(qtbot, window)
    window.input.setPlainText("hello")
    qtbot.waitUntil(lambda: window.token_preview.shown is not None, timeout=10_000)
    longer = window.token_preview.shown.prompt_tokens
    edited = c.store.messages(c.current_conversation)[0]
    assert c.show_version(edited.id, 1)  # the short question again
    qtbot.waitUntil(lambda: window.token_preview.shown is not None
                    and window.token_preview.shown.prompt_tokens < longer, timeout=10_000)


def test_a_refusal_that_dropping_would_avoid_names_the_setting() -> None:
    p = PromptPreview(40, 0, 256, 64, refusal="The conversation is 300 tokens long but the "
                      "context window holds 256. … let Tandem drop earlier messages.",
                      by_dropping=True)
    text, level = preview_words(p)
    assert level == "error" and text.endswith(
        "let Tandem drop earlier messages. Sampling → Too long for the context chooses how.")
