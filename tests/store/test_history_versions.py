"""Versions in the history: regenerating keeps the earlier reply and editing the earlier
text, each with the messages that followed it; any version can be shown with what
followed it (the conversation reads the shown path), a failed regeneration gives the
earlier one back, and version-1 and version-2 databases are migrated forward without
losing anything."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.store.history import SCHEMA_VERSION, HistoryStore


@pytest.fixture
def store() -> HistoryStore:
    s = HistoryStore.open()
    yield s
    s.close()


def _reply(store: HistoryStore, cid: int, text: str, mode: str) -> int:
    mid = store.begin_reply(cid, model="m.gguf").id
    store.finish_reply(mid, text, "stop", {"mode": mode, "decode_tps": 10.0},
                       draft_spans=[(0, 2)])
    return mid


def test_regenerate_keeps_the_earlier_reply_and_the_conversation_reads_the_shown_one(
        store: HistoryStore) -> None:
    cid = store.create_conversation().id
    store.add_user_message(cid, "hello")
    mid = _reply(store, cid, "first answer", "off")
    assert (store.message(mid).version, store.message(mid).versions) == (1, 1)

    fresh = store.begin_reply_version(mid, model="m2.gguf")
    assert (fresh.id, fresh.status, fresh.content, fresh.version, fresh.versions) == (
        mid, "streaming", "", 2, 2)
    store.finish_reply(mid, "second answer", "stop", {"mode": "suffix", "decode_tps": 20.0})
    versions = store.versions(mid)
    assert [(v.number, v.shown, v.content, v.stats["mode"]) for v in versions] == [  # type: ignore[index]
        (1, False, "first answer", "off"), (2, True, "second answer", "suffix")]
    assert versions[0].draft_spans == ((0, 2),) and versions[0].model == "m.gguf"
    assert [m.content for m in store.messages(cid)] == ["hello", "second answer"]

    shown = store.show_version(mid, 1)
    assert (shown.id, shown.content, shown.version, shown.versions) == (mid, "first answer", 1, 2)
    assert shown.stats == {"mode": "off", "decode_tps": 10.0}
    assert [m.content for m in store.messages(cid)] == ["hello", "first answer"]
    assert store.recent_replies(5) == ["first answer"]  # the suffix index reads the shown one
    assert [(v.number, v.shown, v.content) for v in store.versions(mid)] == [
        (1, True, "first answer"), (2, False, "second answer")]
    assert store.show_version(mid, 2).content == "second answer"
    with pytest.raises(ValueError, match="no version 3"):
        store.show_version(mid, 3)


def test_a_third_version_from_an_earlier_shown_one_is_numbered_last(store: HistoryStore) -> None:
    cid = store.create_conversation().id
    store.add_user_message(cid, "q")
    mid = _reply(store, cid, "one", "off")
    store.begin_reply_version(mid)
    store.finish_reply(mid, "two", "stop")
    store.show_version(mid, 1)
    store.begin_reply_version(mid)
    store.finish_reply(mid, "three", "stop")
    assert [(v.number, v.content, v.shown) for v in store.versions(mid)] == [
        (1, "one", False), (2, "two", False), (3, "three", True)]
    assert store.show_version(mid, 2).content == "two"
    assert [v.content for v in store.versions(mid)] == ["one", "two", "three"]


def test_a_failed_regeneration_shows_the_earlier_version_again(store: HistoryStore) -> None:
    cid = store.create_conversation().id
    store.add_user_message(cid, "q")
    mid = _reply(store, cid, "kept", "off")
    store.begin_reply_version(mid)
    back = store.discard_reply_version(mid)
    assert back is not None and (back.content, back.status, back.versions) == ("kept", "done", 1)
    # from an older version: that one comes back, not the newest
    store.begin_reply_version(mid)
    store.finish_reply(mid, "newer", "stop")
    assert store.show_version(mid, 1).content == "kept"
    store.begin_reply_version(mid)
    back = store.discard_reply_version(mid)
    assert back is not None and (back.content, back.version, back.versions) == ("kept", 1, 2)
    with pytest.raises(ValueError):
        store.begin_reply_version(store.messages(cid)[0].id)  # a user message
    lone = store.begin_reply(cid).id
    assert store.discard_reply_version(lone) is None  # no earlier version: gone
    with pytest.raises(KeyError):
        store.message(lone)


def test_deleting_a_reply_deletes_its_versions(store: HistoryStore) -> None:
    cid = store.create_conversation().id
    store.add_user_message(cid, "q")
    mid = _reply(store, cid, "a", "off")
    store.begin_reply_version(mid)
    store.finish_reply(mid, "b", "stop")
    store.delete_reply(mid)
    assert store._conn.execute("SELECT COUNT(*) FROM reply_versions").fetchone()[0] == 0


def _texts(store: HistoryStore, cid: int) -> list[str]:
    return [m.content for m in store.messages(cid)]


def _chat(store: HistoryStore, cid: int, *turns: str) -> list[int]:
    """Each turn a question and its reply ``re: <question>``; the ids in order."""
    ids = []
    for q in turns:
        ids.append(store.add_user_message(cid, q).id)
        ids.append(_reply(store, cid, f"re: {q}", "off"))
    return ids


def test_an_edit_keeps_the_earlier_text_with_the_messages_that_followed_it(
        store: HistoryStore) -> None:
    cid = store.create_conversation().id
    q1, _, q2, _, _, _ = _chat(store, cid, "one", "two", "three")
    edited = store.edit_message(q2, "TWO")
    assert (edited.id, edited.content, edited.version, edited.versions) == (q2, "TWO", 2, 2)
    assert _texts(store, cid) == ["one", "re: one", "TWO"]
    _reply(store, cid, "re: TWO", "off")
    back = store.show_version(q2, 1)
    assert (back.content, back.version, back.versions) == ("two", 1, 2)
    assert _texts(store, cid) == ["one", "re: one", "two", "re: two", "three", "re: three"]
    assert [v.content for v in store.versions(q2)] == ["two", "TWO"]
    store.show_version(q2, 2)
    assert _texts(store, cid) == ["one", "re: one", "TWO", "re: TWO"]
    assert [m.id for m in store.messages(cid)][:2] == [q1, q1 + 1]  # before it: untouched
    with pytest.raises(ValueError, match="not a user message"):
        store.edit_message(q1 + 1, "a reply")


def test_regenerating_an_earlier_reply_keeps_the_later_messages_with_its_old_version(
        store: HistoryStore) -> None:
    cid = store.create_conversation().id
    _, r1, _, _ = _chat(store, cid, "one", "two")
    store.begin_reply_version(r1)
    assert _texts(store, cid) == ["one", ""]
    store.finish_reply(r1, "re: one, again", "stop")
    store.add_user_message(cid, "after the new one")
    store.show_version(r1, 1)
    assert _texts(store, cid) == ["one", "re: one", "two", "re: two"]
    store.show_version(r1, 2)
    assert _texts(store, cid) == ["one", "re: one, again", "after the new one"]


def test_versions_nested_in_kept_messages_survive_every_switch(store: HistoryStore) -> None:
    cid = store.create_conversation().id
    q1, _, q2, r2 = _chat(store, cid, "one", "two")
    store.begin_reply_version(r2)  # "two" gets a second reply, and that one a follow-up
    store.finish_reply(r2, "re: two (2)", "stop", {"mode": "suffix"}, draft_spans=[(0, 3)],
                       seed=7)
    _chat(store, cid, "deep")
    store.edit_message(q1, "ONE")  # all of it leaves with "one"
    assert _texts(store, cid) == ["ONE"]
    for _ in range(2):  # back and forth: nothing is lost or duplicated
        store.show_version(q1, 1)
        assert _texts(store, cid) == ["one", "re: one", "two", "re: two (2)", "deep", "re: deep"]
        store.show_version(q1, 2)
        assert _texts(store, cid) == ["ONE"]
    store.show_version(q1, 1)
    r2_now = store.messages(cid)[3]
    assert (r2_now.version, r2_now.versions, r2_now.stats, r2_now.draft_spans, r2_now.seed) == (
        2, 2, {"mode": "suffix"}, ((0, 3),), 7)
    store.show_version(r2_now.id, 1)  # the nested version, with its own (empty) tail
    assert _texts(store, cid) == ["one", "re: one", "two", "re: two"]
    store.show_version(r2_now.id, 2)
    assert _texts(store, cid)[-2:] == ["deep", "re: deep"]
    rows = store._conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    assert rows == 6  # the shown path only: the rest lives with its versions


def test_a_failed_regeneration_of_an_earlier_reply_gives_its_later_messages_back(
        store: HistoryStore) -> None:
    cid = store.create_conversation().id
    _, r1, _, _ = _chat(store, cid, "one", "two")
    store.begin_reply_version(r1)
    back = store.discard_reply_version(r1)
    assert back is not None and back.versions == 1
    assert _texts(store, cid) == ["one", "re: one", "two", "re: two"]


def test_a_switch_that_cannot_be_made_changes_nothing(store: HistoryStore) -> None:
    cid = store.create_conversation().id
    q1, _, _, r2 = _chat(store, cid, "one", "two")
    store.edit_message(q1, "ONE")
    _reply(store, cid, "re: ONE", "off")
    # a reply after the shown version still streams (another window writes it)
    streaming = store.begin_reply(cid)
    with pytest.raises(ValueError, match="still being written"):
        store.show_version(q1, 1)
    with pytest.raises(ValueError, match="still being written"):
        store.edit_message(q1, "uno")
    store.finish_reply(streaming.id, "late", "stop")
    before = _texts(store, cid)
    # the kept messages were damaged by hand: the switch is refused, nothing changes
    store._conn.execute("UPDATE reply_versions SET tail_json = '[{\"role\": 5}]'")
    with pytest.raises(ValueError, match="damaged"):
        store.show_version(q1, 1)
    store._conn.execute("UPDATE reply_versions SET tail_json = "
                        "'[{\"role\": \"user\", \"content\": \"x\"}]'")
    with pytest.raises(ValueError, match="damaged"):  # no created_at: refused at the insert
        store.show_version(q1, 1)
    assert _texts(store, cid) == before and store.message(q1).content == "ONE"
    assert store.versions(q1)[0].content == "one"
    assert store._conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == len(before)


def test_versions_written_within_one_clock_tick_are_numbered_as_written(
        store: HistoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import app.store.history as history

    stuck = types.SimpleNamespace(time=lambda: 1_000.0)  # a coarse or stuck clock
    monkeypatch.setattr(history, "time", stuck)  # the store's clock only
    cid = store.create_conversation().id
    q = store.add_user_message(cid, "one").id
    assert store.edit_message(q, "two").version == 2
    assert store.edit_message(q, "three").version == 3
    assert [(v.number, v.content, v.shown) for v in store.versions(q)] == [
        (1, "one", False), (2, "two", False), (3, "three", True)]
    for number, text in ((1, "one"), (2, "two"), (3, "three"), (2, "two")):
        shown = store.show_version(q, number)
        assert (shown.content, shown.version) == (text, number)
        assert [v.content for v in store.versions(q) if v.shown] == [text]


def test_a_failed_regeneration_moves_nothing_when_another_window_went_on_from_it(
        store: HistoryStore) -> None:
    cid = store.create_conversation().id
    _, r1, _, _ = _chat(store, cid, "one", "two")
    store.begin_reply_version(r1)  # this window regenerates "re: one" ...
    store.add_user_message(cid, "from another window")  # ... while another one sends
    back = store.discard_reply_version(r1)
    assert back is not None and (back.status, back.finish_reason, back.content) == (
        "done", "error", "")
    assert _texts(store, cid) == ["one", "", "from another window"]
    store.show_version(r1, 1)  # the earlier version and its turns are all still there
    assert _texts(store, cid) == ["one", "re: one", "two", "re: two"]


def _rewind(path: Path, version: int, statement: str) -> None:
    """Make the database at ``path`` what a Tandem of schema ``version`` left."""
    conn = sqlite3.connect(path)
    conn.execute(statement)
    conn.execute(f"PRAGMA user_version={version}")
    conn.commit()
    conn.close()


def test_a_version_1_database_is_migrated_forward(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    with HistoryStore.open(path) as s:
        cid = s.create_conversation().id
        s.add_user_message(cid, "old question")
        mid = _reply(s, cid, "old answer", "off")
    _rewind(path, 1, "DROP TABLE reply_versions")  # a version-1 Tandem had no versions
    with HistoryStore.open(path) as s:
        assert s._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        assert [m.content for m in s.messages(cid)] == ["old question", "old answer"]
        s.begin_reply_version(mid)
        s.finish_reply(mid, "new answer", "stop")
        assert [v.content for v in s.versions(mid)] == ["old answer", "new answer"]


def test_a_version_2_database_gains_kept_messages_and_keeps_its_versions(
        tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    with HistoryStore.open(path) as s:
        cid = s.create_conversation().id
        q = s.add_user_message(cid, "old question").id
        mid = _reply(s, cid, "old answer", "off")
        s.begin_reply_version(mid)
        s.finish_reply(mid, "newer answer", "stop")
    _rewind(path, 2, "ALTER TABLE reply_versions DROP COLUMN tail_json")  # no kept tails
    with HistoryStore.open(path) as s:
        assert s._conn.execute("PRAGMA user_version").fetchone()[0] == 3
        assert [v.content for v in s.versions(mid)] == ["old answer", "newer answer"]
        assert s.show_version(mid, 1).content == "old answer"
        s.edit_message(q, "new question")
        assert s.show_version(q, 1).content == "old question"
        assert [m.content for m in s.messages(cid)] == ["old question", "old answer"]


def test_kept_messages_nested_too_deep_are_refused_not_a_traceback(store: HistoryStore) -> None:
    cid = store.create_conversation().id
    q1, _ = _chat(store, cid, "one")
    store.edit_message(q1, "ONE")
    deep = "[" * 100_000 + "]" * 100_000  # what a hand-edited file could hold
    store._conn.execute("UPDATE reply_versions SET tail_json = ?", (deep,))
    with pytest.raises(ValueError, match="damaged"):
        store.show_version(q1, 1)
    assert _texts(store, cid) == ["ONE"]


def test_a_user_message_taken_back_gives_its_title_and_earlier_text_back(
        store: HistoryStore) -> None:
    """A message refused before its reply: a new one is deleted and the title it gave
    the conversation goes with it; an edit's new text gives the earlier text, its title
    and the messages after it back; when a message follows (another window), nothing
    moves and the user message gets no finish reason."""
    from app.store.history import DEFAULT_TITLE

    cid = store.create_conversation().id
    first = store.add_user_message(cid, "How do rivers form?")
    assert store.conversation(cid).title != DEFAULT_TITLE
    assert store.discard_reply_version(first.id) is None
    assert store.messages(cid) == [] and store.conversation(cid).title == DEFAULT_TITLE

    q = store.add_user_message(cid, "How do rivers form?")
    _reply(store, cid, "Rain.", "off")
    named = store.conversation(cid).title
    store.edit_message(q.id, "Why is the sea salty?")
    assert store.conversation(cid).title != named
    back = store.discard_reply_version(q.id)
    assert back is not None and back.content == "How do rivers form?"
    assert [m.content for m in store.messages(cid)] == ["How do rivers form?", "Rain."]
    assert store.conversation(cid).title == named

    store.edit_message(q.id, "Why is the sea salty?")
    store.begin_reply(cid)  # another window went on from the edit
    kept = store.discard_reply_version(q.id)
    assert kept is not None and kept.content == "Why is the sea salty?"
    assert kept.finish_reason is None
