"""The words beside a streaming reply: its place in the queue and its prompt processing
(the real window on the tiny synthetic model for the long paste; the queue with the API
is in test_api_panel.py)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.chat.events import PrefillProgressed
from app.engine.events import PrefillProgress
from app.engine.session import Session
from app.options import SamplingParams, SpecMode, SpeculationConfig
from app.store.settings import Settings
from app.ui.chat.reply_status import ahead_words, prefill_words, reply_status_words, waiting_words
from tests.ui.conftest import loaded_window, wait_reply


def test_the_words_name_what_is_ahead_and_the_place() -> None:
    api = ("completion", "api")
    assert waiting_words([api]) == "● waiting for 1 API request · next in the queue"
    assert waiting_words([api, ("reply", "api"), ("race", "race")]) == (
        "● waiting for 2 API requests and 1 race · place 3 in the queue")
    assert ahead_words([("load", "window"), api, ("sweep", "race")]) == (
        "1 model load, 1 API request and 1 race")
    p = PrefillProgressed(1, 1024, 4096, 300, 2.0, 6.2)
    assert prefill_words(p) == "● reading the prompt: 1,024 / 4,096 tokens · 300 cached · 6 s left"
    assert reply_status_words([api], False, None, False).startswith("● waiting")
    assert reply_status_words([], True, p, False) == prefill_words(p)
    assert reply_status_words([], True, p, True) == "● writing…"  # text came: it writes
    done = PrefillProgressed(1, 4096, 4096, 0, 8.0)
    assert reply_status_words([], True, done, False) == "● writing…"


@pytest.fixture
def window(qtbot, tiny_target: Path):  # type: ignore[no-untyped-def]
    s = Settings()
    s.model.target_path = tiny_target
    s.model.n_ctx = 2048
    s.sampling = SamplingParams(temperature=0.0, max_tokens=8)
    s.speculation = SpeculationConfig(mode=SpecMode.OFF)
    w = loaded_window(qtbot, s)
    yield w
    w.close()


def test_a_long_paste_shows_prefill_progress_and_stop_ends_it(qtbot, window,  # type: ignore[no-untyped-def]
                                                              monkeypatch) -> None:
    """The engine pauses after its first prompt chunk (until Stop), so the header is read
    while the prompt is half read on any machine."""
    paused = threading.Event()
    original = Session.chat

    def chat(self, messages, sampling, speculation, cancel=None, **kw):  # type: ignore[no-untyped-def]
        for ev in original(self, messages, sampling, speculation, cancel, **kw):
            yield ev
            if (isinstance(ev, PrefillProgress) and 0 < ev.done < ev.total
                    and cancel is not None and not paused.is_set()):
                paused.set()
                cancel.wait(60)

    monkeypatch.setattr(Session, "chat", chat)
    assert window.send_message("lorem ipsum dolor sit amet " * 50)
    reply_widget = window.chat.messages[-1]
    qtbot.waitUntil(lambda: "reading the prompt: 512 /" in reply_widget.stream_status,
                    timeout=60_000)
    status = reply_widget.stream_status
    assert re.fullmatch(r"● reading the prompt: 512 / [\d,]+ tokens( · [\d,]+ cached)? · "
                        r"\d+ (s|min \d+ s) left", status), status
    prefill = window.controller.reply.prefill
    assert prefill is not None and prefill.total > 512
    qtbot.keyClick(window.input, Qt.Key.Key_Escape)  # Stop during the prefill
    wait_reply(qtbot, window)
    stored = window.controller.store.messages(window.controller.current_conversation)
    # stopped before any text: no empty "stopped" reply, the question stands alone
    assert [m.role for m in stored] == ["user"]
    assert reply_widget not in window.chat.messages
    assert window.chat.failure.text() == ("No reply: stopped before any text. Regenerate asks "
                                          "again.")
