"""A conversation exported with its versions (app/ui/chat/export.py): Markdown shows the
version the conversation continued from and the others in <details>, each with its
drafter and speed; JSON keeps every version's text and statistics, the shown one marked,
and the messages that followed each version not shown."""

from __future__ import annotations

import json
import re
from pathlib import Path

import markdown

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
                            "decode_tps": 31.5, "acceptance_rate": 0.95,
                            "verified": 60, "accepted": 57})
        md = conversation_markdown(store, cid)
        assert md.startswith("# Rename add to add_numbers.\n\n**System prompt:**\n\n```text\n"
                             "Be brief.\n```\n\n## You\n\n```text\nRename add to add_numbers.\n```")
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
        c.open_conversation(None)  # another conversation: a note about this one's export goes
        assert ("clear_errors", ("export",)) in view.calls
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


def _turn(store: HistoryStore, cid: int, question: str, answer: str,
          stats: dict[str, object] | None = None) -> tuple[int, int]:
    """A question and its finished reply; their ids."""
    q = store.add_user_message(cid, question).id
    r = store.begin_reply(cid).id
    store.finish_reply(r, answer, "stop", stats)
    return q, r


def test_the_json_export_is_the_whole_tree_and_the_markdown_says_what_it_leaves_out(
        tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path / "h.sqlite3") as store:
        cid = store.create_conversation().id
        q1, _ = _turn(store, cid, "first question", "first answer", {"mode": "off", "emitted": 2})
        _, r2 = _turn(store, cid, "follow-up", "follow-up answer", {"plain": 1, "mode": "plain"})
        store.begin_reply_version(r2)  # a nested version, kept with the first question
        store.finish_reply(r2, "follow-up answer 2", "stop")
        store.edit_message(q1, "better question")
        r3 = store.begin_reply(cid).id
        store.finish_reply(r3, "better answer", "stop")

        data = json.loads(export_conversation(store, cid, tmp_path / "c.json").read_text())
        first = data["messages"][0]
        assert (first["content"], first["version"]) == ("better question", 2)
        v1, v2 = first["versions"]
        assert (v1["number"], v1["shown"], v1["content"]) == (1, False, "first question")
        assert "followed_by" not in v2 and v2["shown"]
        kept = v1["followed_by"]
        assert [k["content"] for k in kept] == ["first answer", "follow-up",
                                                "follow-up answer 2"]
        assert kept[0]["stats"] == {"mode": "off", "emitted": 2}
        nested = kept[2]
        assert nested["version"] == 2 and [v["content"] for v in nested["versions"]] == [
            "follow-up answer", "follow-up answer 2"]
        assert nested["versions"][0]["stats"]["mode"] == "off"  # old names read as today's

        md = conversation_markdown(store, cid)
        assert "## You (version 2 of 2, the one the conversation continued from)" in md
        assert ("<details><summary>Version 1 of 2 · 3 messages followed it (in the JSON "
                "export)</summary>\n\n```text\nfirst question\n```") in md
        assert "follow-up" not in md  # not on the path shown


def test_markdown_in_a_message_does_not_break_the_exports_outline(tmp_path: Path) -> None:
    """A pasted document's headings stay inside its message (typed text is fenced, exactly
    as typed, even with backticks in it); a reply's headings move under its ``##``, not
    inside its code; what was dropped to fit the context is said under the reply."""
    pasted = "Summarise:\n# Known behaviour\n## Licence\n```sh\nls\n```"
    reply = "# Summary\n### Detail\n```python\n# a comment\n```\nNotes\n=====\n\n---\nend"
    with HistoryStore.open(tmp_path / "h.sqlite3") as store:
        cid = store.create_conversation("Doc").id
        store.add_user_message(cid, pasted)
        mid = store.begin_reply(cid).id
        store.finish_reply(mid, reply, "stop", {
            "mode": "off", "emitted": 9, "context": {
                "policy": "truncate-middle", "n_ctx": 4096, "prompt_tokens": 4000,
                "dropped_messages": 2, "dropped_tokens": 3031}})
        md = conversation_markdown(store, cid)
        outline = re.findall(r"<(h[1-6])>([^<]*)<", markdown.markdown(
            md, extensions=["fenced_code"]))
        assert outline == [("h1", "Doc"), ("h2", "You"), ("h2", "Assistant"),
                           ("h3", "Summary"), ("h5", "Detail"), ("h3", "Notes")]
        assert f"````text\n{pasted}\n````" in md
        assert ("### Summary\n##### Detail\n```python\n# a comment\n```\n### Notes\n\n---"
                in md)  # the rule after a blank line stays a rule
        assert "*Dropped 2 earlier messages" in md
        data = json.loads(export_conversation(store, cid, tmp_path / "c.json").read_text())
        assert [m["content"] for m in data["messages"]] == [pasted, reply]
    from app.ui.chat.export import _under_heading

    # a rule right after code, or under indented code, is no heading's underline
    for text in ("Code:\n```python\nx = 1\n```\n---\nafter", "    indented code\n---",
                 "- item\n---"):
        assert _under_heading(text) == text
    assert _under_heading("Two line\nparagraph\n---") == "#### Two line paragraph"
    assert _under_heading("The fox.\nThe dog.\n\nNext") == "The fox.  \nThe dog.\n\nNext"


def test_a_name_typed_without_an_extension_gets_the_chosen_types() -> None:
    from app.ui.chat.export_dialog import export_path

    assert export_path("/tmp/summary", "JSON (*.json)") == Path("/tmp/summary.json")
    assert export_path("/tmp/summary", "Markdown (*.md)") == Path("/tmp/summary.md")
    assert export_path("/tmp/summary.md", "JSON (*.json)") == Path("/tmp/summary.md")
    assert export_path("/tmp/v1.2 summary.txt", "JSON (*.json)") == Path("/tmp/v1.2 summary.txt")
    assert export_path("/tmp/report 1.5", "JSON (*.json)") == Path("/tmp/report 1.5.json")
    assert export_path("/tmp/Dr. Who", "Markdown (*.md)") == Path("/tmp/Dr. Who.md")
    assert export_path("/tmp/summary.", "JSON (*.json)") == Path("/tmp/summary.json")
    assert export_path("/tmp/...", "JSON (*.json)") == Path("/tmp/conversation.json")


def test_kept_messages_edited_by_hand_export_as_missing_values_not_a_crash(
        tmp_path: Path) -> None:
    with HistoryStore.open(tmp_path / "h.sqlite3") as store:
        cid = store.create_conversation().id
        q, _ = _turn(store, cid, "question", "answer")
        store.edit_message(q, "another question")
        odd = [{"role": "assistant", "content": "kept", "created_at": "yesterday",
                "versions": [{"content": "v", "created_at": "x", "tail": [5, "abc"]},
                             {"content": "w", "created_at": None, "tail_json": "[broken"}]},
               {"role": "user", "content": "kept too", "versions": 5}]
        store._conn.execute("UPDATE reply_versions SET tail_json = ?", (json.dumps(odd),))
        data = json.loads(export_conversation(store, cid, tmp_path / "c.json").read_text())
        kept = data["messages"][0]["versions"][0]["followed_by"]
        assert [k["content"] for k in kept] == ["kept", "kept too"]
        versions = kept[0]["versions"]
        assert {v["content"] for v in versions} == {"kept", "v", "w"}
        assert next(v for v in versions if v["content"] == "w")["followed_by_raw"] == "[broken"
        assert next(v for v in versions if v["content"] == "v")["followed_by"] == [
            {"role": None, "content": None, "finish_reason": None, "stats": None,
             "model": None, "note": None, "seed": None, "created_at": None}] * 2
        assert "versions" not in kept[1]
        assert "kept" not in conversation_markdown(store, cid)


def test_the_dialog_writes_the_chosen_type_and_opens_where_the_last_export_went(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtWidgets import QFileDialog

    from app.chat.conversation import ChatController
    from app.store.settings import Settings
    from app.ui.chat.export_dialog import export_with_dialog
    from tests.chat.fakes import RecordingView, Script, fake_service

    store = HistoryStore.open(tmp_path / "h.sqlite3")
    cid = store.create_conversation(title="Fox diet").id
    store.add_user_message(cid, "What do foxes eat?")
    c = ChatController(Settings(), store, fake_service(Script()), RecordingView())
    asked: list[str] = []

    def dialog(_parent, _title, start, _filters):  # type: ignore[no-untyped-def]
        asked.append(start)
        return str(tmp_path / "out" / "summary"), "JSON (*.json)"  # typed without extension

    monkeypatch.setattr(QFileDialog, "getSaveFileName", dialog)
    try:
        (tmp_path / "out").mkdir()
        assert export_with_dialog(None, c, cid)  # type: ignore[arg-type]
        data = json.loads((tmp_path / "out" / "summary.json").read_text())
        assert data["messages"][0]["content"] == "What do foxes eat?"
        assert asked[0] == str(Path.home() / "Fox diet.md")
        done = c.view.errors[-1]  # type: ignore[attr-defined]
        assert (done.title, done.level) == ("Exported", "info")
        assert done.message == f"The conversation was saved to {tmp_path / 'out' / 'summary.json'}."
        assert export_with_dialog(None, c, cid)  # type: ignore[arg-type]
        assert asked[1] == str(tmp_path / "out" / "Fox diet.md")
    finally:
        c.close()


def test_a_version_that_filled_the_context_is_not_said_to_hit_the_token_limit(
        tmp_path: Path) -> None:
    from app.engine.reply import context_full_note

    with HistoryStore.open(tmp_path / "h.sqlite3") as store:
        cid = store.create_conversation().id
        store.add_user_message(cid, "q")
        mid = store.begin_reply(cid).id
        store.finish_reply(mid, "filled it", "length", {"mode": "off", "emitted": 28},
                           note=context_full_note(512))
        store.begin_reply_version(mid)
        store.finish_reply(mid, "cut", "length", {"mode": "off", "emitted": 9})
        md = conversation_markdown(store, cid)
        summary = next(line for line in md.splitlines() if line.startswith("<details>"))
        assert "28 tokens" in summary and "token limit" not in summary
        assert "*9 tokens · no speculation · hit the token limit*" in md


def test_a_continued_version_says_its_figures_are_the_added_texts(tmp_path: Path) -> None:
    """A version made by Continue holds the whole text, and its figures those of the text
    added: the summary of such a version in <details> says so, as the window does."""
    from app.chat.conversation import CONTINUED_NOTE

    with HistoryStore.open(tmp_path / "h.sqlite3") as store:
        cid = store.create_conversation().id
        store.add_user_message(cid, "q")
        mid = store.begin_reply(cid).id
        store.finish_reply(mid, "the start and the rest", "length",
                           {"mode": "off", "emitted": 512}, note=CONTINUED_NOTE)
        store.begin_reply_version(mid)
        store.finish_reply(mid, "another", "stop", {"mode": "off", "emitted": 3})
        md = conversation_markdown(store, cid)
        summary = next(line for line in md.splitlines() if line.startswith("<details>"))
        assert "512 tokens" in summary
        assert summary.endswith("· continued, the figures are those of the text added</summary>")
