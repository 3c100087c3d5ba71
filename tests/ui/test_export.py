"""A conversation exported with its reply versions (app/ui/chat/export.py): Markdown shows
the version the conversation continued from and the others in <details>, each with its
drafter and speed; JSON keeps every version's text and statistics, the shown one marked."""

from __future__ import annotations

import json
from pathlib import Path

from app.store.history import HistoryStore
from app.ui.chat.export import conversation_markdown, export_conversation


def test_markdown_and_json_carry_every_version(tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path / "h.sqlite3") as store:
        cid = store.create_conversation(system_prompt="Be brief.").id
        store.add_user_message(cid, "Rename add to add_numbers.")
        mid = store.begin_reply(cid, model="smol.gguf").id
        store.finish_reply(mid, "plain text", "stop",
                           {"mode": "off", "emitted": 40, "decode_tps": 22.1})
        store.begin_reply_version(mid, model="smol.gguf")
        store.finish_reply(mid, "drafted text", "stop",
                           {"mode": "prompt-lookup", "draft_max": 16, "emitted": 41,
                            "decode_tps": 31.5, "acceptance_rate": 0.95})
        md = conversation_markdown(store, cid)
        assert md.startswith("# Rename add to add_numbers.\n\n**System prompt:**\n\nBe brief.")
        assert ("## Assistant · smol.gguf (version 2 of 2, the one the conversation "
                "continued from)\n\ndrafted text\n\n*41 tokens · 31.5 tok/s · prompt lookup "
                "k=16 · α 95%*") in md
        assert ("<details><summary>Version 1 of 2 · 40 tokens · 22.1 tok/s · no speculation"
                "</summary>\n\nplain text\n\n</details>") in md

        data = json.loads(export_conversation(store, cid, tmp_path / "c.json").read_text())
        reply = data["messages"][1]
        assert (reply["content"], reply["version"]) == ("drafted text", 2)
        assert [(v["number"], v["shown"], v["content"], v["stats"]["mode"])
                for v in reply["versions"]] == [(1, False, "plain text", "off"),
                                                (2, True, "drafted text", "prompt-lookup")]
        assert "versions" not in data["messages"][0] and data["schema_version"] == 1
        assert export_conversation(store, cid, tmp_path / "c.md").read_text() == md


def test_a_failed_export_is_reported_and_a_good_one_written(tmp_path: Path) -> None:
    from app.chat.conversation import ChatController
    from app.store.settings import Settings
    from app.ui.chat.export_dialog import export_to
    from tests.chat.fakes import RecordingView, Script, fake_service

    store = HistoryStore.open(tmp_path / "h.sqlite3")
    cid = store.create_conversation(title="T").id
    view = RecordingView()
    c = ChatController(Settings(), store, fake_service(Script()), view)
    try:
        blocker = tmp_path / "a-file"
        blocker.write_text("not a folder")
        assert not export_to(c, cid, blocker / "x.md")
        assert view.errors[-1].title == "Export failed" and "x.md" in view.errors[-1].message
        assert export_to(c, cid, tmp_path / "t.md")
        assert (tmp_path / "t.md").read_text() == "# T\n"
    finally:
        c.close()


def test_the_suggested_file_name_drops_a_cut_word_and_punctuation() -> None:
    """A title cut short ("… balcony. Wh…") suggests "Hi Im planning … garden", with no
    underscores for punctuation and no half word."""
    from app.ui.chat.export_dialog import export_stem

    assert export_stem("Hi, I'm planning a small balcony garden. Wh\u2026") == (
        "Hi Im planning a small balcony garden")
    assert export_stem("C++ / Rust?") == "C Rust"
    assert export_stem("?!") == "" and export_stem("word " * 30).count("word") == 12
