"""Reply versions in the history: regenerating keeps the earlier reply, any version can be
shown (the conversation reads the shown one), a failed regeneration gives the earlier one
back, and a version-1 database is migrated forward without losing anything."""

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
    with pytest.raises(ValueError):
        store.begin_reply_version(store.messages(cid)[0].id)  # a user message
    lone = store.begin_reply(cid).id
    assert store.discard_reply_version(lone) is None  # no earlier version: gone
    with pytest.raises(KeyError):
        store.message(lone)


def test_deleting_from_a_reply_deletes_its_versions(store: HistoryStore) -> None:
    cid = store.create_conversation().id
    store.add_user_message(cid, "q")
    mid = _reply(store, cid, "a", "off")
    store.begin_reply_version(mid)
    store.finish_reply(mid, "b", "stop")
    store.delete_from(mid)
    assert store._conn.execute("SELECT COUNT(*) FROM reply_versions").fetchone()[0] == 0


def test_a_version_1_database_is_migrated_forward(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    with HistoryStore.open(path) as s:
        cid = s.create_conversation().id
        s.add_user_message(cid, "old question")
        mid = _reply(s, cid, "old answer", "off")
    conn = sqlite3.connect(path)  # what a version-1 Tandem left: no versions table
    conn.execute("DROP TABLE reply_versions")
    conn.execute("PRAGMA user_version=1")
    conn.commit()
    conn.close()
    with HistoryStore.open(path) as s:
        assert s._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
        assert [m.content for m in s.messages(cid)] == ["old question", "old answer"]
        s.begin_reply_version(mid)
        s.finish_reply(mid, "new answer", "stop")
        assert [v.content for v in s.versions(mid)] == ["old answer", "new answer"]
