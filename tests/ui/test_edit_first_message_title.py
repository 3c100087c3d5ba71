"""A conversation named after its first message is renamed when that message is edited
and sent again; one renamed by hand keeps its name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.options import SamplingParams, SpecMode, SpeculationConfig
from app.store.settings import Settings
from tests.ui.conftest import loaded_window, wait_reply


@pytest.fixture
def window(qtbot, tiny_target: Path) -> Iterator[object]:  # type: ignore[no-untyped-def]
    s = Settings()
    s.model.target_path = tiny_target
    s.model.n_ctx = 2048
    s.sampling = SamplingParams(temperature=0.0, max_tokens=8)
    s.speculation = SpeculationConfig(mode=SpecMode.OFF)
    w = loaded_window(qtbot, s)
    yield w
    w.close()


def _edit_first(qtbot, w, text: str) -> None:  # type: ignore[no-untyped-def]
    first = w.controller.store.messages(w.controller.current_conversation)[0]
    w.edit_message(first.id)
    w.input.setPlainText(text)
    assert w.send_message()
    wait_reply(qtbot, w)


def test_the_title_follows_the_edited_first_message(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    w = window
    assert w.send_message("What do foxes eat?")
    wait_reply(qtbot, w)
    assert w.conversations.titles() == ["What do foxes eat?"]
    _edit_first(qtbot, w, "What do owls eat?")
    assert w.conversations.titles() == ["What do owls eat?"]

    cid = w.controller.current_conversation
    w.controller.rename_conversation(cid, "Birds")
    _edit_first(qtbot, w, "What do crows eat?")
    assert w.conversations.titles() == ["Birds"]
