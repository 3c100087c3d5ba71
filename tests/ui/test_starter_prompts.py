"""Starter prompts in the empty chat: chosen by whether the model has a chat template,
shown only while the chat is empty, and one click sends the prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.ui.chat.chat_view import ChatViewWidget, MessageView
from app.ui.chat.starter_prompts import load_starter_prompts, starters_path


def test_starters_file_offers_3_to_4_prompts_for_each_kind_of_model() -> None:
    chat = load_starter_prompts(True)
    base = load_starter_prompts(False)
    assert 3 <= len(chat) <= 4 and 3 <= len(base) <= 4
    assert {p.prompt for p in chat}.isdisjoint(p.prompt for p in base)
    # the instruct set has a code edit (the reply repeats the code: prompt lookup drafts it)
    assert any("```python" in p.prompt for p in chat)
    assert all(p.title and p.prompt.strip() for p in (*chat, *base))


def test_a_broken_starters_file_offers_none(tmp_path: Path) -> None:
    bad = tmp_path / "starters.json"
    bad.write_text(json.dumps({"chat": [], "base": []}), encoding="utf-8")
    assert load_starter_prompts(True, bad) == ()
    assert load_starter_prompts(True, tmp_path / "missing.json") == ()
    assert starters_path().is_file()


@pytest.mark.parametrize("chat_template", [True, False])
def test_empty_chat_shows_starters_and_a_click_emits_the_prompt(qtbot, chat_template: bool) -> None:
    view = ChatViewWidget()
    qtbot.addWidget(view)
    view.show()
    prompts = load_starter_prompts(chat_template)
    view.set_starter_prompts(prompts, base_model=not chat_template)
    assert view.starters.isVisible()
    assert [b.text() for b in view.starters.buttons] == [p.title for p in prompts]
    with qtbot.waitSignal(view.starter_prompt_clicked) as sig:
        view.starters.buttons[0].click()
    assert sig.args == [prompts[0].prompt]
    view.add_message(MessageView(1, "user", prompts[0].prompt))
    assert not view.starters.isVisible()  # only while the chat is empty
    view.clear()
    assert view.starters.isVisible()
    view.set_starter_prompts(())
    assert not view.starters.isVisible()
