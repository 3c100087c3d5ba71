"""Chat history: conversations, messages, streaming replies, WAL, and surviving a kill."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from app.store import paths
from app.engine.stats import SpecStats
from app.options import SpecMode
from app.store.history import (
    HistoryBusyError,
    HistoryDamagedError,
    DEFAULT_TITLE,
    HistoryError,
    HistoryFromNewerVersionError,
    HistoryStore,
    current_stats,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store() -> HistoryStore:
    s = HistoryStore.open()
    yield s
    s.close()


def test_database_lives_in_data_dir_and_uses_wal(store: HistoryStore) -> None:
    assert store.path == paths.history_path()
    assert store.journal_mode() == "wal"
    store.create_conversation()
    assert Path(str(store.path) + "-wal").exists()
    # A second connection reads committed data while a write transaction is open.
    other = sqlite3.connect(str(store.path))
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('x', 0, 0)")
    assert len(store.list_conversations()) == 1  # not blocked, sees the committed state
    other.execute("ROLLBACK")
    other.close()


def test_conversations_new_rename_delete_search(store: HistoryStore) -> None:
    a = store.create_conversation()
    assert a.title == DEFAULT_TITLE
    store.add_user_message(a.id, "How do I reverse a list in Python?")
    b = store.create_conversation(system_prompt="You are terse.")
    store.add_user_message(b.id, "Tell me about 100% pure_rust")
    assert store.conversation(a.id).title == "How do I reverse a list in Python?"
    assert store.conversation(b.id).system_prompt == "You are terse."
    assert [c.id for c in store.list_conversations()] == [b.id, a.id]  # most recent first

    store.rename_conversation(a.id, "  Lists  ")
    assert store.conversation(a.id).title == "Lists"
    store.rename_conversation(a.id, "   ")
    assert store.conversation(a.id).title == DEFAULT_TITLE

    assert [c.id for c in store.list_conversations("REVERSE")] == [a.id]  # message text
    assert [c.id for c in store.list_conversations("new chat")] == [a.id]  # title
    assert [c.id for c in store.list_conversations("100%")] == [b.id]
    assert store.list_conversations("100_") == []  # _ is literal, not a wildcard
    assert [c.id for c in store.list_conversations("pure_rust")] == [b.id]

    store.set_system_prompt(a.id, "Be kind.")
    assert store.conversation(a.id).system_prompt == "Be kind."
    store.delete_conversation(a.id)
    assert not store.has_conversation(a.id)
    assert store.messages(a.id) == []
    with pytest.raises(KeyError):
        store.conversation(a.id)
    with pytest.raises(KeyError):
        store.rename_conversation(a.id, "gone")


def test_long_first_message_makes_a_short_title(store: HistoryStore) -> None:
    c = store.create_conversation()
    store.add_user_message(c.id, "word " * 40)
    title = store.conversation(c.id).title
    assert len(title) <= 60 and title.endswith("…")
    store.add_user_message(c.id, "second message does not rename")
    assert store.conversation(c.id).title == title


def test_streaming_reply_lifecycle(store: HistoryStore) -> None:
    c = store.create_conversation()
    user = store.add_user_message(c.id, "hi")
    assert store.message(user.id).role == "user"
    reply = store.begin_reply(c.id, model="gemma.gguf")
    assert reply.status == "streaming" and reply.content == ""
    store.save_partial(reply.id, "Hel", [(0, 2)])
    assert store.message(reply.id).content == "Hel"
    assert store.message(reply.id).draft_spans == ((0, 2),)
    stats = {"mode": "prompt-lookup", "acceptance_rate": 0.5, "accepted_at": [2, 1]}
    done = store.finish_reply(reply.id, "Hello!", "stop", stats, draft_spans=[(0, 4)],
                              note=None, seed=7)
    assert done.status == "done" and done.finish_reason == "stop"
    assert done.stats == stats and done.seed == 7 and done.model == "gemma.gguf"
    with pytest.raises(KeyError):  # a finished reply is no longer streaming
        store.save_partial(reply.id, "late")
    assert [m.role for m in store.messages(c.id)] == ["user", "assistant"]


def test_statistics_stored_under_old_names_read_back_in_todays(tandem_home: Path) -> None:
    # replies finished by an earlier version: mode "plain", counters "drafted"/"drafted_at"
    store = HistoryStore.open()
    c = store.create_conversation()
    old_rows = [{"mode": "plain", "emitted": 5, "drafted": 0, "drafted_at": []},
                {"mode": "prompt-lookup", "drafted": 8, "accepted": 6, "proposed": 10,
                 "drafted_at": [4, 4]}]
    ids = []
    for old in old_rows:
        store.add_user_message(c.id, "hi")
        reply = store.begin_reply(c.id)
        ids.append(reply.id)
    store.close()
    conn = sqlite3.connect(paths.history_path())  # the rows as that version wrote them
    try:
        with conn:
            for message_id, old in zip(ids, old_rows, strict=True):
                conn.execute("UPDATE messages SET stats_json = ?, status = 'done' WHERE id = ?",
                             (json.dumps(old), message_id))
    finally:
        conn.close()
    store = HistoryStore.open()
    try:
        plain, lookup = (store.message(i).stats for i in ids)
    finally:
        store.close()
    assert plain is not None and lookup is not None
    assert "drafted" not in lookup and "drafted_at" not in lookup
    assert SpecStats.from_dict(plain).mode is SpecMode.OFF
    s = SpecStats.from_dict(lookup)
    assert (s.verified, s.verified_at, s.acceptance_rate) == (8, (4, 4), 0.75)
    # today's names pass unchanged, and a current name wins over an old one
    assert current_stats(s.to_dict()) == s.to_dict()
    assert current_stats({"verified": 3, "drafted": 9})["verified"] == 3


def test_delete_reply_deletes_that_reply_only(store: HistoryStore) -> None:
    c = store.create_conversation()
    other = store.create_conversation()
    q = store.add_user_message(c.id, "q")
    r = store.begin_reply(c.id)
    kept = store.add_user_message(other.id, "elsewhere")
    store.delete_reply(r.id)
    assert [m.content for m in store.messages(c.id)] == ["q"]
    assert store.message(kept.id).content == "elsewhere"
    with pytest.raises(ValueError, match="not a reply"):
        store.delete_reply(q.id)
    with pytest.raises(KeyError):
        store.delete_reply(r.id)


def test_reopen_keeps_everything_and_marks_interrupted(tandem_home: Path) -> None:
    s = HistoryStore.open()
    c = s.create_conversation()
    s.add_user_message(c.id, "hello")
    r = s.begin_reply(c.id)
    s.save_partial(r.id, "partial")
    s.close()
    reader = HistoryStore.open()  # a plain reader leaves the streaming reply alone
    assert reader.messages(c.id)[1].status == "streaming"
    reader.close()
    s2 = HistoryStore.open(recover=True)
    msgs = s2.messages(c.id)
    assert [m.content for m in msgs] == ["hello", "partial"]
    assert msgs[1].status == "done" and msgs[1].finish_reason == "interrupted"
    s2.close()


def test_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "history.sqlite3"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(HistoryDamagedError, match="is damaged: file is not a database"):
        HistoryStore.open(bad)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=99")
    conn.close()
    with pytest.raises(HistoryError, match="newer Tandem") as err:
        HistoryStore.open(path)
    assert isinstance(err.value, HistoryFromNewerVersionError)
    # the window's opening never sets such a file aside: the error is raised, the file kept
    with pytest.raises(HistoryFromNewerVersionError):
        HistoryStore.open_or_set_aside(path)
    assert path.is_file() and list(tmp_path.glob("*.corrupt-*")) == []


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_partial_reply_survives_sigkill(tandem_home: Path) -> None:
    """A writer saving a streaming reply is killed -9; the saved text is still there."""
    script = textwrap.dedent(
        """
        import sys, time
        from app.store.history import HistoryStore
        s = HistoryStore.open()
        c = s.create_conversation()
        s.add_user_message(c.id, "tell me a story")
        r = s.begin_reply(c.id)
        text = ""
        for i in range(1000):
            text += f"word{i} "
            s.save_partial(r.id, text)
            if i == 20:
                print("saved", flush=True)
            time.sleep(0.01)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "saved"
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert proc.returncode == -signal.SIGKILL

    s = HistoryStore.open(recover=True)
    [conv] = s.list_conversations()
    user, reply = s.messages(conv.id)
    assert user.content == "tell me a story"
    assert reply.content.startswith("word0 word1 ") and "word20 " in reply.content
    assert reply.finish_reason == "interrupted"
    s.close()


def test_a_corrupt_database_is_set_aside_and_a_new_one_started(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    store, problem = HistoryStore.open_or_set_aside(path)
    try:
        assert problem is not None and "moved to" in problem
        conv = store.create_conversation("works")
        assert store.conversation(conv.id).title == "works"
    finally:
        store.close()
    kept = list(tmp_path.glob("history.sqlite3.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"this is not")


def _history_with_unfinished_reply(path: Path) -> None:
    s = HistoryStore.open(path)
    for i in range(50):
        c = s.create_conversation()
        s.add_user_message(c.id, f"precious data {i} " + "x" * 3000)
    s.save_partial(s.begin_reply(c.id).id, "half a reply")  # the start-up recovery reads it
    s.close()


def test_a_database_damaged_inside_is_set_aside_not_a_crash(tmp_path: Path) -> None:
    """A header intact and pages damaged further in: the start-up recovery is the first
    to read them, and its error sets the file aside like any other damage."""
    path = tmp_path / "history.sqlite3"
    _history_with_unfinished_reply(path)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(4096)  # every page after the first (the schema's)
        f.write(b"\xa5" * (size - 4096))
    store, problem = HistoryStore.open_or_set_aside(path)
    try:
        assert problem is not None and "moved to" in problem
        assert store.list_conversations() == []
    finally:
        store.close()
    assert len(list(tmp_path.glob("history.sqlite3.corrupt-*"))) == 1


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX subprocess protocol")
def test_a_database_another_program_holds_locked_is_left_alone(tmp_path: Path) -> None:
    """A SQLite shell or backup tool holding the file (an exclusive lock) is no damage:
    the window is told, and the history is neither set aside nor replaced."""
    path = tmp_path / "history.sqlite3"
    _history_with_unfinished_reply(path)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sqlite3, sys
        c = sqlite3.connect({str(path)!r}, isolation_level=None)
        c.execute("PRAGMA locking_mode=EXCLUSIVE")
        c.execute("BEGIN EXCLUSIVE"); c.execute("COMMIT")  # the lock stays taken
        print("held", flush=True)
        sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(HistoryBusyError, match="in use by another program"):
            HistoryStore.open_or_set_aside(path)
        assert not list(tmp_path.glob("*.corrupt-*"))
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(10)
    with HistoryStore.open(path) as store:  # all there once the other program is gone
        assert len(store.list_conversations()) == 50


def test_a_table_without_its_columns_is_not_tandems_and_is_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    _history_with_unfinished_reply(path)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE messages RENAME COLUMN content TO body")
    conn.close()
    with pytest.raises(HistoryError, match="its table messages has no column content"):
        HistoryStore.open(path)
    store, problem = HistoryStore.open_or_set_aside(path)
    store.close()
    assert problem is not None and "moved to" in problem


def test_two_damaged_databases_set_aside_in_the_same_second_are_both_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.0)
    path = tmp_path / "history.sqlite3"
    for n in range(2):
        path.write_bytes(f"damaged {n}".encode() * 100)
        store, problem = HistoryStore.open_or_set_aside(path)
        store.close()
        assert problem is not None
    kept = sorted(p.name for p in tmp_path.glob("history.sqlite3.corrupt-*")
                  if not p.name.endswith(("-wal", "-shm")))
    assert kept == ["history.sqlite3.corrupt-1800000000", "history.sqlite3.corrupt-1800000000-1"]


def test_an_unopenable_path_is_a_history_error(tmp_path: Path) -> None:
    (tmp_path / "history.sqlite3").mkdir()
    with pytest.raises(HistoryError):
        HistoryStore.open(tmp_path / "history.sqlite3")


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX subprocess protocol")
def test_a_second_instance_never_claims_a_reply_still_streaming(tandem_home: Path) -> None:
    """Two windows on one data folder: the second one's start-up recovery leaves the
    first one's streaming reply alone, and the first one's later saves land. Replies whose writer is gone, or that an older Tandem wrote, are claimed."""
    script = textwrap.dedent(
        """
        import sys
        from app.store.history import HistoryStore
        s = HistoryStore.open(recover=True)
        c = s.create_conversation()
        s.add_user_message(c.id, "question")
        r = s.begin_reply(c.id)
        s.save_partial(r.id, "first half")
        print(c.id, r.id, flush=True)
        sys.stdin.readline()  # the other window starts now
        s.save_partial(r.id, "first half, second half")
        s.finish_reply(r.id, "first half, second half.", "stop")
        print("finished", flush=True)
        sys.stdin.readline()
        """
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    first = subprocess.Popen([sys.executable, "-c", script], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert first.stdin is not None and first.stdout is not None
    cid, rid = (int(x) for x in first.stdout.readline().split())

    second = HistoryStore.open(recover=True)
    assert second.recover_interrupted() == 0
    assert second.message(rid).status == "streaming"
    first.stdin.write("go\n")
    first.stdin.flush()
    assert first.stdout.readline().strip() == "finished"
    reply = second.message(rid)
    assert (reply.content, reply.status, reply.finish_reason) == ("first half, second half.", "done", "stop")

    orphan = second.begin_reply(cid)  # this store's own reply: alive while it is open
    assert second.recover_interrupted() == 0
    with sqlite3.connect(second.path) as conn:  # a reply written by a Tandem without owners
        conn.execute("DELETE FROM reply_owners WHERE message_id = ?", (orphan.id,))
    assert second.recover_interrupted() == 1
    assert second.message(orphan.id).finish_reason == "interrupted"
    second.save_partial(orphan.id, "still streaming after all")  # its writer's saves are kept
    assert second.message(orphan.id).status == "streaming"
    first.stdin.write("bye\n")
    first.stdin.flush()
    first.wait(30)
    second.close()
    third = HistoryStore.open(recover=True)
    assert not any(third.owners_dir.glob("*.lock"))  # the locks of both writers are gone
    third.close()


def test_a_model_named_after_an_undecodable_file_name_is_stored(store: HistoryStore) -> None:
    c = store.create_conversation()
    r = store.begin_reply(c.id, model="mod\udcffel")  # what os.fsdecode gives for b"mod\xffel"
    assert store.message(r.id).model == "mod\\xffel"


def test_valid_text_writes_undecodable_bytes_and_lone_surrogates_as_escapes() -> None:
    from app.cli.json_output import json_safe
    from app.formatting import valid_text

    assert valid_text("mod\udcffel") == "mod\\xffel"  # PEP 383: the byte it stands for
    assert valid_text("mod\ud800el") == "mod\\ud800el"  # an unpaired one (a Windows name)
    assert valid_text("模型 ok") == "模型 ok"  # valid text stays as it is
    # before one helper the JSON writer raised UnicodeEncodeError on the second kind
    assert json_safe({"path": "a\ud800.gguf"}) == {"path": "a\\ud800.gguf",
                                                   "path_undecodable": True}


def test_a_full_disk_at_start_leaves_the_history_where_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only damage sets a file aside: a write that fails at start (the recovery of an
    unfinished reply on a full disk) says so and keeps the file and its conversations."""
    path = tmp_path / "history.sqlite3"
    _history_with_unfinished_reply(path)

    def full(self: HistoryStore) -> int:
        raise sqlite3.OperationalError("database or disk is full")

    with monkeypatch.context() as patch:
        patch.setattr(HistoryStore, "recover_interrupted", full)
        with pytest.raises(HistoryError, match="cannot be used now .database or disk is full"):
            HistoryStore.open_or_set_aside(path)
    assert not list(tmp_path.glob("*.corrupt-*"))
    with HistoryStore.open(path) as store:
        assert len(store.list_conversations()) == 50
