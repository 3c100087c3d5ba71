"""Chat history: conversations and their messages in one SQLite database (WAL journal).

The window stores a user message *before* generation starts, creates the assistant
message as ``streaming`` when the reply begins, overwrites its text while it streams
(:meth:`HistoryStore.save_partial`, at least once a second) and finalises it with the
finish reason and the statistics JSON (:meth:`HistoryStore.finish_reply`). Each of those
is its own committed transaction; with ``journal_mode=WAL`` and ``synchronous=NORMAL`` a
committed transaction survives the process being killed (only a power cut can lose the
last ones), so a kill loses at most the text streamed since the last partial save. On
the next start ``HistoryStore.open(recover=True)`` marks replies still ``streaming`` as
``interrupted`` — only those whose writer is gone. Several windows may share one data
folder: each store that begins a reply holds an exclusive lock on a file of its own
(``<history>.owners/<token>.lock``, :mod:`filelock`; the OS drops it when the process dies,
even by SIGKILL) and records its token with the reply (table ``reply_owners``, which an
older Tandem ignores). Recovery claims a streaming reply only when its owner's lock can be
taken, so a second window never cuts off the first one's reply.

Statistics written by earlier versions under older names (mode ``plain`` for ``off``,
``drafted``/``drafted_at`` for ``verified``/``verified_at``) are translated once, as
they are read (:func:`current_stats`), so nothing above the store knows the old names.

Editing a user message or regenerating a reply keeps the version it replaces, with the
messages that followed it: a conversation is a tree whose shown path is the
``messages`` rows; :meth:`HistoryStore.show_version` switches a message to another
version and the path after it with it (:mod:`app.store.tails`).

``draft_spans`` are ``(start, end)`` character offsets of reply text that came from
accepted draft tokens, kept so the chat view can tint them after a restart too.

Single-threaded by design: the window uses one store from the GUI thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import re
import secrets
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.formatting import loads_json, shortened, valid_text
from app.store import paths, tails

log = logging.getLogger(__name__)

Role = Literal["system", "user", "assistant"]
MessageStatus = Literal["streaming", "done"]
DEFAULT_TITLE = "New chat"
#: 2: earlier versions of a reply (table ``reply_versions``, :meth:`HistoryStore.versions`);
#: 3: versions of user messages too, each version with the messages that followed it
#: (``reply_versions.tail_json``, :mod:`app.store.tails`)
SCHEMA_VERSION = 3
_TITLE_CHARS = 60

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    title         TEXT    NOT NULL,
    system_prompt TEXT    NOT NULL DEFAULT '',
    created_at    REAL    NOT NULL,
    updated_at    REAL    NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role            TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content         TEXT    NOT NULL,
    status          TEXT    NOT NULL DEFAULT 'done' CHECK (status IN ('streaming', 'done')),
    finish_reason   TEXT,
    stats_json      TEXT,
    draft_spans     TEXT,
    note            TEXT,
    seed            INTEGER,
    model           TEXT,
    created_at      REAL    NOT NULL,
    updated_at      REAL    NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (conversation_id, id);
CREATE TABLE IF NOT EXISTS reply_owners (
    message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
    owner      TEXT    NOT NULL
);
"""

#: Schema 2: the versions of a message that are not shown (the table's name is from when
#: only replies had versions; since schema 3 an edited user message's earlier texts are
#: here too). The shown version stays in its ``messages`` row (so every reader of the
#: conversation sees the shown version and nothing else); showing another one swaps the
#: two rows' values and the messages after them (:mod:`app.store.tails`). Versions are
#: numbered by ``created_at`` (when each was written), whichever is shown.
_SCHEMA_2 = """
CREATE TABLE IF NOT EXISTS reply_versions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id    INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    content       TEXT    NOT NULL,
    finish_reason TEXT,
    stats_json    TEXT,
    draft_spans   TEXT,
    note          TEXT,
    seed          INTEGER,
    model         TEXT,
    created_at    REAL    NOT NULL,
    updated_at    REAL    NOT NULL
);
CREATE INDEX IF NOT EXISTS reply_versions_by_message ON reply_versions (message_id, created_at);
"""

#: Schema 3: the messages that followed a version that is not shown (JSON, or NULL)
_TAIL_COLUMN = "tail_json"

_VERSION_COLUMNS = tails.VERSION_COLUMNS

#: a message row with its version number and count (1 and 1 for a message never
#: regenerated or edited)
_MESSAGE_SELECT = (
    "SELECT m.*,"
    " (SELECT COUNT(*) FROM reply_versions v WHERE v.message_id = m.id) AS other_versions,"
    " (SELECT COUNT(*) FROM reply_versions v WHERE v.message_id = m.id"
    "  AND v.created_at < m.created_at)"
    " AS earlier_versions FROM messages m"
)


#: a version not shown (``v``) whose text, or a kept message's text, matches ``?1`` (a
#: LIKE pattern): a kept tail's JSON is read by SQLite's json_tree, its "content"
#: values only (a damaged one, json_valid false, as none)
_VERSION_MATCHES = (
    "(v.content LIKE ?1 ESCAPE '\\' OR EXISTS (SELECT 1 FROM json_tree(CASE WHEN"
    " json_valid(v.tail_json) THEN v.tail_json ELSE '[]' END) t"
    " WHERE t.key = 'content' AND t.value LIKE ?1 ESCAPE '\\'))"
)


class HistoryError(Exception):
    """The database is unusable (not SQLite, or from a newer Tandem). Message is for the user."""


class HistoryFromNewerVersionError(HistoryError):
    """The database was written by a newer Tandem (a higher schema version): readable by
    that version, so it is never set aside."""


class HistoryBusyError(HistoryError):
    """Another program holds the database locked (a SQLite shell or browser, a backup
    tool, ``PRAGMA locking_mode=EXCLUSIVE``): the file is good, so it is never set aside."""


class HistoryDamagedError(HistoryError):
    """The file is not a SQLite database, is damaged (SQLite's "malformed"), or its
    tables are not Tandem's: the only errors for which the window sets it aside
    (:meth:`HistoryStore.open_or_set_aside`). A full disk, a read-only file or an I/O
    error say nothing about the file, which is then left as it is."""


#: SQLite's primary result codes (https://sqlite.org/rescode.html): a database another
#: connection holds (SQLITE_BUSY, SQLITE_LOCKED), and a damaged file or one that is not
#: a database (SQLITE_CORRUPT, SQLITE_NOTADB)
_BUSY_CODES = frozenset({5, 6})
_DAMAGE_CODES = frozenset({11, 26})


def _opening_failed(path: Path, exc: sqlite3.Error) -> HistoryError:
    """The :class:`HistoryError` for a SQLite error while opening ``path``: busy or
    locked (:class:`HistoryBusyError`), damaged (:class:`HistoryDamagedError`), else
    unusable for now (a full disk, a read-only file: nothing to set aside)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python ≥ 3.11
    text = str(exc).lower()
    primary = code & 0xFF if isinstance(code, int) else None
    if primary in _BUSY_CODES if primary is not None else ("locked" in text or "busy" in text):
        return HistoryBusyError(
            f"The history database {path} is in use by another program ({exc}): close "
            "that program, then restart Tandem. Nothing was changed.")
    if primary in _DAMAGE_CODES if primary is not None else (
            "malformed" in text or "not a database" in text):
        return HistoryDamagedError(f"The history database {path} is damaged: {exc}")
    return HistoryError(f"The history database {path} cannot be used now ({exc}); it was "
                        "left as it is.")


def _free_name(path: Path) -> Path:
    """``path``, or ``path`` with ``-1``, ``-2``… added where a file of that name exists."""
    candidate, n = path, 0
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation. Times are seconds since the epoch."""

    id: int
    title: str
    system_prompt: str
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message as stored.

    ``status`` is ``streaming`` while a reply is being written. ``finish_reason``:
    ``stop``/``length``/``cancelled`` from the engine, ``interrupted`` when the app died
    mid-reply, ``error`` when generation failed, None for user messages. ``stats``: the
    engine's ``SpecStats.to_dict()`` for finished replies. ``version`` of ``versions``:
    which version of a regenerated reply or an edited user message this is (1 of 1 for
    any other message); the others are :meth:`HistoryStore.versions`.
    """

    id: int
    conversation_id: int
    role: Role
    content: str
    status: MessageStatus
    finish_reason: str | None
    stats: dict[str, Any] | None
    draft_spans: tuple[tuple[int, int], ...]
    note: str | None
    seed: int | None
    model: str | None
    created_at: float
    updated_at: float
    version: int = 1
    versions: int = 1


@dataclass(frozen=True, slots=True)
class ReplyVersion:
    """One version of a reply or user message (:meth:`HistoryStore.versions`):
    ``number`` counts from 1 in the order they were written; ``shown``: the one the
    conversation continues from (its ``messages`` row). Fields as :class:`StoredMessage`."""

    number: int
    shown: bool
    content: str
    finish_reason: str | None
    stats: dict[str, Any] | None
    draft_spans: tuple[tuple[int, int], ...]
    note: str | None
    seed: int | None
    model: str | None
    created_at: float


#: stored statistics' old names and what they are called now
_OLD_STATS_KEYS = {"drafted": "verified", "drafted_at": "verified_at"}
#: stored drafter modes' old names and what they are called now
_OLD_MODES = {"plain": "off"}


def current_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """A reply's stored statistics in today's names: a copy of ``stats`` with the mode
    ``plain`` read as ``off`` and the counters ``drafted``/``drafted_at`` as
    ``verified``/``verified_at`` (a current name, when both are there, wins). Anything
    else is left as it is; unknown names are for the reader to refuse."""
    out = dict(stats)
    for old, new in _OLD_STATS_KEYS.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    mode = out.get("mode")
    if isinstance(mode, str) and mode in _OLD_MODES:
        out["mode"] = _OLD_MODES[mode]
    return out


def stats_from_json(raw: object) -> dict[str, Any] | None:
    """Stored statistics (``stats_json``: a row's, or a kept message's) in today's names
    (:func:`current_stats`); None when there are none or they cannot be read (not
    text, not JSON, nested too deep, not an object)."""
    if not raw or not isinstance(raw, (str, bytes)):
        return None
    try:
        stats = loads_json(raw)
    except (ValueError, TypeError):  # not JSON, or nested too deep (loads_json)
        return None
    return current_stats(stats) if isinstance(stats, dict) else None


def _read_stats(row: sqlite3.Row) -> dict[str, Any] | None:
    """A row's statistics, None when it has none or they cannot be read (logged: a
    damaged row shows its text without figures rather than stopping the window)."""
    stats = stats_from_json(row["stats_json"])
    if stats is None and row["stats_json"]:
        log.warning("message %s: unreadable statistics, left out", row["id"])
    return stats


def _read_spans(row: sqlite3.Row) -> tuple[tuple[int, int], ...]:
    """A row's draft spans ((start, end) character offsets), () when they cannot be
    read (logged)."""
    raw = row["draft_spans"]
    if not raw:
        return ()
    try:
        return tuple((int(a), int(b)) for a, b in loads_json(raw))
    except (ValueError, TypeError, OverflowError):
        log.warning("message %s: unreadable draft spans, left out", row["id"])
        return ()


def _read_time(row: sqlite3.Row, column: str) -> float:
    """A row's time stamp in seconds since the epoch, 0.0 when it is not a number."""
    try:
        return float(row[column])
    except (ValueError, TypeError):
        return 0.0


def _read_text(value: object) -> str | None:
    return None if value is None else str(value)


def _read_seed(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _spans_json(spans: Sequence[tuple[int, int]]) -> str | None:
    return json.dumps([[int(a), int(b)] for a, b in spans]) if spans else None


def automatic_title(content: str) -> str:
    """The title a conversation gets from its first user message: the text on one line,
    cut to 60 characters with "…" ("" for blank text)."""
    return shortened(" ".join(content.split()), _TITLE_CHARS)


def _name_from_first(c: sqlite3.Connection, conversation_id: int, message_id: int,
                     old: str, new: str) -> None:
    """Title the conversation ``new`` when ``message_id`` is its first message and its
    title is still ``old`` (a title the user gave is never replaced)."""
    c.execute("UPDATE conversations SET title = ? WHERE id = ? AND title = ? AND NOT EXISTS"
              " (SELECT 1 FROM messages WHERE conversation_id = ? AND id < ?)",
              (new, conversation_id, old, conversation_id, message_id))


def _snippet(text: str, needle: str, width: int) -> str:
    """About ``width`` characters of ``text`` around the first place it has ``needle``
    (case-insensitive), on one line (see :meth:`HistoryStore.search_snippets`)."""
    found = re.search(re.escape(needle), text, re.IGNORECASE)
    at = found.start() if found is not None else 0
    start = max(0, at - width // 6)  # little before it: a narrow list shows the match
    end = min(len(text), start + width + len(needle))
    if start > 0 and (space := re.search(r"\s", text[start:at])) is not None:
        start += space.end()  # at a word's start
    if end < len(text) and (cut := text.rfind(" ", at + len(needle), end)) > 0:
        end = cut  # after a word's end
    line = " ".join(text[start:end].split())
    return ("…" if start > 0 else "") + line + ("…" if end < len(text) else "")


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    """Bring a database of schema ``version`` (0: new) up to :data:`SCHEMA_VERSION`.
    Every step only adds tables (``IF NOT EXISTS``) or a column where it is missing, so
    nothing stored is rewritten and a step cut short by a crash is simply done again at
    the next open; the version is written last."""
    if version >= SCHEMA_VERSION:
        return
    conn.executescript(_SCHEMA_2)  # version 1 → 2 (a new database: 0 → 2)
    if _TAIL_COLUMN not in _columns(conn)["reply_versions"]:  # 2 → 3
        conn.execute(f"ALTER TABLE reply_versions ADD COLUMN {_TAIL_COLUMN} TEXT")
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _columns(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """The columns of each table of ``conn``'s main database, by table name."""
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    return {t: {r[1] for r in conn.execute("SELECT * FROM pragma_table_info(?)", (t,))}
            for t in tables}


@functools.cache
def _expected_columns() -> dict[str, set[str]]:
    """The tables and columns every schema since 2 has, read from the schema itself
    (a column a later step adds, :data:`_TAIL_COLUMN`, is added when missing)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as mem:
        mem.executescript(_SCHEMA + _SCHEMA_2)
        return _columns(mem)


def _check_tables(conn: sqlite3.Connection, path: Path) -> None:
    """Raise :class:`HistoryError` when a table of the schema lacks a column (a database
    edited by hand, or another program's file of the same name), instead of failing at
    the first read of that column."""
    found = _columns(conn)
    for table, columns in _expected_columns().items():
        missing = sorted(columns - found.get(table, columns))
        if missing:
            raise HistoryDamagedError(f"The history database {path} is not Tandem's: its "
                                      f"table {table} has no column {', '.join(missing)}.")


class HistoryStore:
    """The history database. Use :meth:`open`; call :meth:`close` when done.

    Raises:
        HistoryError: from :meth:`open`, when the file is not a usable database.
        KeyError: from methods given an id that does not exist.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        self._owner: tuple[str, Any] | None = None  # (token, held FileLock)

    @property
    def owners_dir(self) -> Path:
        """Where writers keep their liveness locks (next to the database)."""
        return self.path.with_name(self.path.name + ".owners")

    def _owner_token(self) -> str | None:
        """This store's writer token, its lock taken on first use (None: no lock could
        be made, e.g. a read-only folder; then its replies are recovered as before)."""
        if self._owner is not None:
            return self._owner[0]
        from filelock import FileLock, Timeout

        token = f"{os.getpid()}-{secrets.token_hex(6)}"
        try:
            self.owners_dir.mkdir(exist_ok=True)
            lock = FileLock(str(self.owners_dir / f"{token}.lock"), timeout=0)
            lock.acquire()
        except (OSError, Timeout) as exc:
            log.warning("no liveness lock for the history (%s); another window's start-up may"
                        " mark this window's streaming reply interrupted", exc)
            return None
        self._owner = (token, lock)
        return token

    def _owner_alive(self, token: str) -> bool:
        """Whether the store that wrote ``token`` still holds its lock (is running)."""
        from filelock import FileLock, Timeout

        if self._owner is not None and self._owner[0] == token:
            return True
        path = self.owners_dir / f"{token}.lock"
        if not path.exists():
            return False
        probe = FileLock(str(path), timeout=0)
        try:
            probe.acquire()
        except Timeout:
            return True
        except OSError:
            return False  # cannot even open it: no live process can be holding it here
        try:
            path.unlink(missing_ok=True)
        finally:
            probe.release()
        return False

    @classmethod
    def open_or_set_aside(cls, path: Path | None = None) -> tuple[HistoryStore, str | None]:
        """Open the database for the window; a damaged one (:class:`HistoryDamagedError`)
        is set aside and a new one made.

        Returns:
            The store, and a sentence for the user when the old file was set aside.

        Raises:
            HistoryError: the folder is unusable, or the database cannot be used now (a
                full disk, a read-only file, an I/O error).
            HistoryFromNewerVersionError, HistoryBusyError: the database is from a newer
                Tandem, or another program holds it locked.
            (None of these is set aside: that would lose a good history.)
        """
        path = path or paths.history_path()
        try:
            return cls.open(path, recover=True), None
        except HistoryError as exc:
            if not isinstance(exc, HistoryDamagedError) or not path.is_file():
                raise  # a newer Tandem's, a locked one, a full disk: the file is kept
            aside = _free_name(path.with_name(f"{path.name}.corrupt-{int(time.time())}"))
            try:
                path.replace(aside)
                for suffix in ("-wal", "-shm"):
                    side = path.with_name(path.name + suffix)
                    if side.exists():
                        side.replace(aside.with_name(aside.name + suffix))
            except OSError:
                raise exc from None
            store = cls.open(path, recover=True)
            return store, (
                f"The chat history could not be read ({exc.__cause__ or exc}); it was moved to "
                f"{aside.name} and a new, empty history was started."
            )

    @classmethod
    def open(cls, path: Path | None = None, *, recover: bool = False) -> HistoryStore:
        """Open (creating if needed) the database at ``path`` (default: the data folder).

        Args:
            recover: mark replies left ``streaming`` by a previous run as ``interrupted``
                (the window does this once at start-up; a reader must not, or it would
                cut off a reply another connection is still streaming).
        """
        path = path or paths.history_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # A short busy timeout: the window's thread must not freeze for long when
            # another process (a second Tandem) holds a write lock.
            conn = sqlite3.connect(os.fsdecode(path), timeout=1.0, isolation_level=None)
        except OSError as exc:
            raise HistoryError(f"The history database {path} cannot be opened: {exc}") from exc
        except sqlite3.Error as exc:
            raise _opening_failed(path, exc) from exc
        store: HistoryStore | None = None
        try:
            conn.row_factory = sqlite3.Row
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise HistoryError(f"The history database {path} cannot use a WAL journal.")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise HistoryFromNewerVersionError(
                    f"The history database {path} was written by a newer Tandem "
                    f"(schema {version}); update Tandem to open it."
                )
            _check_tables(conn, path)  # before anything is written into another's file
            conn.executescript(_SCHEMA)
            _migrate(conn, version)
            store = cls(conn, path)
            if recover:  # reads every unfinished reply: where a damaged page shows first
                store.recover_interrupted()
        except BaseException as exc:
            if store is not None:
                store.close()  # its liveness lock too
            else:
                conn.close()
            if isinstance(exc, sqlite3.DatabaseError):
                raise _opening_failed(path, exc) from exc
            raise
        return store

    def close(self) -> None:
        """Close the connection (checkpoints the WAL into the main file) and give up this
        store's liveness lock."""
        self._conn.close()
        if self._owner is not None:
            token, lock = self._owner
            self._owner = None
            try:
                (self.owners_dir / f"{token}.lock").unlink(missing_ok=True)
            except OSError:
                pass
            lock.release()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def journal_mode(self) -> str:
        """The journal mode in effect (``wal``)."""
        return str(self._conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()

    # -- conversations ----------------------------------------------------------------
    def create_conversation(self, title: str = DEFAULT_TITLE, system_prompt: str = "") -> Conversation:
        """A new, empty conversation."""
        now = time.time()
        with self._tx() as c:
            cur = c.execute(
                "INSERT INTO conversations (title, system_prompt, created_at, updated_at) "
                "VALUES (?, ?, ?, ?)",
                (title, system_prompt, now, now),
            )
            cid = int(cur.lastrowid or 0)
        return Conversation(cid, title, system_prompt, now, now)

    def conversation(self, conversation_id: int) -> Conversation:
        """One conversation. Raises KeyError when it does not exist."""
        row = self._conn.execute(
            "SELECT * FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None:
            raise KeyError(conversation_id)
        return self._conversation(row)

    def has_conversation(self, conversation_id: int) -> bool:
        return (
            self._conn.execute(
                "SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            is not None
        )

    def list_conversations(self, search: str = "") -> list[Conversation]:
        """Conversations, most recently active first.

        Args:
            search: when not blank, only conversations whose title or any message
                (any version of a message, and the messages kept with a version not
                shown) contains it (case-insensitive for ASCII letters; ``%`` and ``_``
                match literally).
        """
        needle = search.strip()
        if not needle:
            rows = self._conn.execute(
                "SELECT * FROM conversations ORDER BY updated_at DESC, id DESC"
            ).fetchall()
        else:
            pattern = f"%{_escape_like(needle)}%"
            # versions not shown and the texts of the messages kept with them count too
            # (the user saw them)
            rows = self._conn.execute(
                "SELECT * FROM conversations c WHERE c.title LIKE ?1 ESCAPE '\\' OR EXISTS ("
                " SELECT 1 FROM messages m WHERE m.conversation_id = c.id"
                " AND m.content LIKE ?1 ESCAPE '\\') OR EXISTS ("
                " SELECT 1 FROM reply_versions v JOIN messages m ON m.id = v.message_id"
                f" WHERE m.conversation_id = c.id AND {_VERSION_MATCHES})"
                " ORDER BY updated_at DESC, id DESC",
                (pattern,),
            ).fetchall()
        return [self._conversation(r) for r in rows]

    def search_snippets(self, search: str, width: int = 80) -> dict[int, str]:
        """Where the conversations :meth:`list_conversations` finds have ``search`` in a
        message shown: by conversation id, about ``width`` characters around the first
        such place in the first such message (spaces and line breaks as one space, "…"
        where it is cut); found only in a version not shown, the same of that version's
        text after "another version: ". Conversations found by their title only (or in
        the messages kept with a version) have none; so does a blank ``search``."""
        needle = search.strip()
        if not needle:
            return {}
        # per conversation the first message that has it ("m"), else (only then) the
        # first version that has it ("v"), each search stopping at its first find (in
        # the order of the indexes by conversation and message)
        rows = self._conn.execute(
            "SELECT c.id, COALESCE((SELECT 'm' || m.content FROM messages m WHERE"
            " m.conversation_id = c.id AND m.content LIKE ?1 ESCAPE '\\' ORDER BY m.id"
            " LIMIT 1), (SELECT 'v' || v.content FROM messages m JOIN reply_versions v ON"
            " v.message_id = m.id WHERE m.conversation_id = c.id AND v.content LIKE ?1"
            " ESCAPE '\\' ORDER BY m.id, v.created_at LIMIT 1)) FROM conversations c",
            (f"%{_escape_like(needle)}%",)).fetchall()
        return {int(cid): _snippet(str(found)[1:], needle, width) if found[0] == "m"
                else "another version: " + _snippet(str(found)[1:], needle, width - 17)
                for cid, found in rows if found is not None}

    def found_elsewhere(self, conversation_id: int, search: str) -> StoredMessage | None:
        """Where :meth:`list_conversations` found ``search`` in a conversation when it is
        not on the path shown: the first shown message one of whose other versions, or
        the messages kept with one, contains it. None when the title or a shown message
        contains it, or nothing does (same matching as the search)."""
        pattern = f"%{_escape_like(search.strip())}%"
        shown = self._conn.execute(
            "SELECT 1 FROM conversations c WHERE c.id = ?2 AND (c.title LIKE ?1 ESCAPE '\\'"
            " OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id"
            " AND m.content LIKE ?1 ESCAPE '\\'))", (pattern, conversation_id)).fetchone()
        if not search.strip() or shown is not None:
            return None
        row = self._conn.execute(
            f"{_MESSAGE_SELECT} WHERE m.conversation_id = ?2 AND EXISTS (SELECT 1 FROM"
            f" reply_versions v WHERE v.message_id = m.id AND {_VERSION_MATCHES})"
            " ORDER BY m.id LIMIT 1", (pattern, conversation_id)).fetchone()
        return None if row is None else self._message(row)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        """Set the title (blank titles become "New chat")."""
        self._update_conversation(conversation_id, title=title.strip() or DEFAULT_TITLE)

    def set_system_prompt(self, conversation_id: int, system_prompt: str) -> None:
        """Set the conversation's system prompt ("" for none)."""
        self._update_conversation(conversation_id, system_prompt=system_prompt)

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete a conversation and its messages."""
        with self._tx() as c:
            cur = c.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            if cur.rowcount == 0:
                raise KeyError(conversation_id)

    def _update_conversation(self, conversation_id: int, **values: str) -> None:
        cols = ", ".join(f"{k} = ?" for k in values)
        with self._tx() as c:
            cur = c.execute(
                f"UPDATE conversations SET {cols} WHERE id = ?",
                (*values.values(), conversation_id),
            )
            if cur.rowcount == 0:
                raise KeyError(conversation_id)

    def _touch(self, c: sqlite3.Connection, conversation_id: int, now: float) -> None:
        cur = c.execute(
            "UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id)
        )
        if cur.rowcount == 0:
            raise KeyError(conversation_id)

    # -- messages ---------------------------------------------------------------------
    def messages(self, conversation_id: int) -> list[StoredMessage]:
        """A conversation's messages in order."""
        rows = self._conn.execute(
            f"{_MESSAGE_SELECT} WHERE m.conversation_id = ? ORDER BY m.id", (conversation_id,)
        ).fetchall()
        return [self._message(r) for r in rows]

    def recent_replies(self, limit: int) -> list[str]:
        """The texts of the newest ``limit`` finished assistant replies of every
        conversation, oldest first (empty and still-streaming replies and failed ones are
        left out). The suffix drafter's index is built from these at start."""
        if limit <= 0:
            return []
        rows = self._conn.execute(
            "SELECT content FROM messages WHERE role = 'assistant' AND status = 'done' "
            "AND content != '' AND (finish_reason IS NULL OR finish_reason != 'error') "
            "ORDER BY created_at DESC, id DESC LIMIT ?", (limit,)
        ).fetchall()
        return [r[0] for r in reversed(rows)]

    def message(self, message_id: int) -> StoredMessage:
        """One message. Raises KeyError when it does not exist."""
        row = self._conn.execute(f"{_MESSAGE_SELECT} WHERE m.id = ?", (message_id,)).fetchone()
        if row is None:
            raise KeyError(message_id)
        return self._message(row)

    def add_user_message(self, conversation_id: int, content: str) -> StoredMessage:
        """Store a user message (committed before this returns).

        The first user message of a conversation still called "New chat" also names it.
        """
        now = time.time()
        with self._tx() as c:
            self._touch(c, conversation_id, now)
            cur = c.execute(
                "INSERT INTO messages (conversation_id, role, content, status, created_at,"
                " updated_at) VALUES (?, 'user', ?, 'done', ?, ?)",
                (conversation_id, content, now, now),
            )
            mid = int(cur.lastrowid or 0)
            if title := automatic_title(content):
                _name_from_first(c, conversation_id, mid, DEFAULT_TITLE, title)
        return self.message(mid)

    def begin_reply(self, conversation_id: int, model: str | None = None) -> StoredMessage:
        """Create an empty assistant message in ``streaming`` state; returns it."""
        now = time.time()
        if model is not None:
            model = valid_text(model)
        owner = self._owner_token()
        with self._tx() as c:
            self._touch(c, conversation_id, now)
            cur = c.execute(
                "INSERT INTO messages (conversation_id, role, content, status, model,"
                " created_at, updated_at) VALUES (?, 'assistant', '', 'streaming', ?, ?, ?)",
                (conversation_id, model, now, now),
            )
            mid = int(cur.lastrowid or 0)
            if owner is not None:
                c.execute("INSERT OR REPLACE INTO reply_owners (message_id, owner) VALUES (?, ?)",
                          (mid, owner))
        return self.message(mid)

    def save_partial(
        self, message_id: int, content: str, draft_spans: Sequence[tuple[int, int]] = ()
    ) -> None:
        """Overwrite a streaming reply's text so far (one committed transaction).

        A reply that a recovery marked ``interrupted`` while its writer still ran (a
        Tandem without owner records, or a lock that could not be made) is streaming
        again: the text is saved, never dropped.

        Raises:
            KeyError: the reply no longer exists (deleted) or was finished.
        """
        with self._tx() as c:
            cur = c.execute(
                "UPDATE messages SET content = ?, draft_spans = ?, updated_at = ?,"
                " status = 'streaming', finish_reason = NULL"
                " WHERE id = ? AND (status = 'streaming' OR finish_reason = 'interrupted')",
                (content, _spans_json(draft_spans), time.time(), message_id),
            )
            if cur.rowcount == 0:
                raise KeyError(message_id)

    def finish_reply(
        self,
        message_id: int,
        content: str,
        finish_reason: str,
        stats: dict[str, Any] | None = None,
        *,
        draft_spans: Sequence[tuple[int, int]] = (),
        note: str | None = None,
        seed: int | None = None,
    ) -> StoredMessage:
        """Finalise a reply: its full text, why it ended, and its statistics.

        Args:
            finish_reason: ``stop``, ``length``, ``cancelled``, ``error``, or
                ``interrupted`` (the window closed while it was written).
            stats: JSON-ready statistics (``SpecStats.to_dict()``).
        """
        now = time.time()
        with self._tx() as c:
            cur = c.execute(
                "UPDATE messages SET content = ?, status = 'done', finish_reason = ?,"
                " stats_json = ?, draft_spans = ?, note = ?, seed = ?, updated_at = ?"
                " WHERE id = ?",
                (
                    content,
                    finish_reason,
                    json.dumps(stats) if stats is not None else None,
                    _spans_json(draft_spans),
                    note,
                    seed,
                    now,
                    message_id,
                ),
            )
            if cur.rowcount == 0:
                raise KeyError(message_id)
        return self.message(message_id)

    # -- versions -----------------------------------------------------------------------
    def begin_reply_version(self, message_id: int, model: str | None = None) -> StoredMessage:
        """Regenerate a finished reply in place: its current version is kept among its
        versions with the messages after it (they leave the conversation with it), its
        row becomes a new, empty ``streaming`` version (the newest).

        Raises:
            KeyError: no such message.
            ValueError: it is not a finished reply, or a reply after it is streaming.
        """
        if model is not None:
            model = valid_text(model)
        owner = self._owner_token()
        with self._tx() as c:
            msg = self.message(message_id)
            if msg.role != "assistant" or msg.status != "done":
                raise ValueError(f"message {message_id} is not a finished reply")
            now = self._keep_shown_version(c, msg)
            c.execute("UPDATE messages SET content = '', status = 'streaming', finish_reason ="
                      " NULL, stats_json = NULL, draft_spans = NULL, note = NULL, seed = NULL,"
                      " model = ?, created_at = ?, updated_at = ? WHERE id = ?",
                      (model, now, now, message_id))
            self._touch(c, msg.conversation_id, now)
            if owner is not None:
                c.execute("INSERT OR REPLACE INTO reply_owners (message_id, owner) VALUES (?, ?)",
                          (message_id, owner))
        return self.message(message_id)

    def edit_message(self, message_id: int, content: str) -> StoredMessage:
        """Give a user message new text: its current text is kept as a version with the
        messages after it (they leave the conversation with it; :meth:`show_version`
        brings them back). The first message's title follows, unless it was renamed.

        Raises:
            KeyError: no such message.
            ValueError: it is not a user message, or a reply after it is streaming.
        """
        with self._tx() as c:
            msg = self.message(message_id)
            if msg.role != "user":
                raise ValueError(f"message {message_id} is not a user message")
            now = self._keep_shown_version(c, msg)
            c.execute("UPDATE messages SET content = ?, created_at = ?, updated_at = ?"
                      " WHERE id = ?", (content, now, now, message_id))
            self._retitle(c, msg, content)
            self._touch(c, msg.conversation_id, now)
        return self.message(message_id)

    def _keep_shown_version(self, c: sqlite3.Connection, msg: StoredMessage) -> float:
        """Copy ``msg``'s shown version into ``reply_versions`` with the messages after
        it, which leave the conversation. Returns the time to give the next version:
        now, or just after the newest version when the clock reads earlier (a coarse
        or stepped clock), since versions are numbered by when they were written."""
        tail = tails.read_tail(c, msg.conversation_id, msg.id)
        cols = ", ".join(_VERSION_COLUMNS)
        c.execute(f"INSERT INTO reply_versions (message_id, {cols}, {_TAIL_COLUMN})"
                  f" SELECT id, {cols}, ? FROM messages WHERE id = ?",
                  (tails.dumps(tail), msg.id))
        tails.drop_tail(c, msg.conversation_id, msg.id)
        newest = c.execute("SELECT MAX(created_at) FROM reply_versions WHERE message_id = ?",
                           (msg.id,)).fetchone()[0]
        now = time.time()
        try:
            return max(now, float(newest) + 1e-6)
        except (TypeError, ValueError):  # a time stamp damaged by hand
            return now

    def _retitle(self, c: sqlite3.Connection, msg: StoredMessage, content: str) -> None:
        """The first message's text changed to ``content``: a title it gave the
        conversation follows (one the user gave stays; the store does not record who gave
        a title, so a title equal to :func:`automatic_title` of the old text counts as
        the automatic one)."""
        old, new = automatic_title(msg.content), automatic_title(content) or DEFAULT_TITLE
        if msg.role == "user" and old and old != new:
            _name_from_first(c, msg.conversation_id, msg.id, old, new)

    def versions(self, message_id: int) -> list[ReplyVersion]:
        """Every version of a message in the order they were written (one, the shown
        one, for a message never regenerated or edited). Raises KeyError: no such
        message."""
        shown = self.message(message_id)
        rows = self._conn.execute(
            "SELECT * FROM reply_versions WHERE message_id = ?", (message_id,)).fetchall()
        out = [self._version(r, False) for r in rows]
        out.append(ReplyVersion(0, True, shown.content, shown.finish_reason, shown.stats,
                                shown.draft_spans, shown.note, shown.seed, shown.model,
                                shown.created_at))
        out.sort(key=lambda v: v.created_at)
        return [dataclasses.replace(v, number=i + 1) for i, v in enumerate(out)]

    def kept_messages(self, message_id: int) -> dict[int, list[dict[str, Any]]]:
        """The messages kept with each version of a message that is not shown, by
        version number (as :meth:`versions` numbers them; a version with none is left
        out), each message a dict of :func:`app.store.tails.read_tail`'s shape (nested
        versions carry their own ``tail``). Kept messages that cannot be read (a
        database edited by hand) are left out, logged. Raises KeyError: no such message."""
        numbers = [v.number for v in self.versions(message_id) if not v.shown]
        rows = self._conn.execute(f"SELECT {_TAIL_COLUMN} FROM reply_versions WHERE"
                                  " message_id = ? ORDER BY created_at, id",
                                  (message_id,)).fetchall()
        out = {}
        for number, row in zip(numbers, rows, strict=False):
            try:
                tail = tails.loads(row[0])
            except ValueError:
                log.warning("message %s version %s: kept messages unreadable", message_id, number)
                continue
            if tail:
                out[number] = tail
        return out

    def show_version(self, message_id: int, number: int) -> StoredMessage:
        """Make version ``number`` (1 = the first written) of a message the shown one,
        with the messages that followed it (those after the version shown until now are
        kept with that version). Returns the message as now shown; the messages after it
        are :meth:`messages` with a larger id.

        Raises:
            KeyError: no such message.
            ValueError: no such version, the message or a reply after it is streaming,
                or the messages kept with that version are damaged (nothing changes).
        """
        assign = ", ".join(f"{c} = ?" for c in _VERSION_COLUMNS)
        cols = ", ".join(_VERSION_COLUMNS)
        with self._tx() as c:
            msg = self.message(message_id)
            if msg.status != "done":
                raise ValueError(f"reply {message_id} is still being written")
            if not 1 <= number <= msg.versions:
                raise ValueError(
                    f"message {message_id} has no version {number} (1 … {msg.versions})")
            if number == msg.version:
                return msg
            others = [int(r[0]) for r in c.execute(
                "SELECT id FROM reply_versions WHERE message_id = ? ORDER BY created_at, id",
                (message_id,))]
            # the versions in order are others[:v-1] + [shown] + others[v-1:]
            vid = others[number - 1] if number < msg.version else others[number - 2]
            mine = c.execute(f"SELECT {cols} FROM messages WHERE id = ?", (message_id,)).fetchone()
            theirs = c.execute(f"SELECT {cols}, {_TAIL_COLUMN} FROM reply_versions WHERE id = ?",
                               (vid,)).fetchone()
            their_tail = tails.loads(theirs[_TAIL_COLUMN])
            my_tail = tails.read_tail(c, msg.conversation_id, message_id)
            c.execute(f"UPDATE messages SET {assign} WHERE id = ?",
                      (*theirs[:len(_VERSION_COLUMNS)], message_id))
            c.execute(f"UPDATE reply_versions SET {assign}, {_TAIL_COLUMN} = ? WHERE id = ?",
                      (*mine, tails.dumps(my_tail), vid))
            tails.drop_tail(c, msg.conversation_id, message_id)
            tails.write_tail(c, msg.conversation_id, their_tail)
            self._retitle(c, msg, str(theirs["content"]))
        return self.message(message_id)

    def discard_reply_version(self, message_id: int,
                              finish_reason: str = "error") -> StoredMessage | None:
        """A regeneration produced nothing (it failed or was stopped before any text), or
        a user message was refused before its reply began: show the version shown before
        it again (the one :meth:`begin_reply_version` or :meth:`edit_message` kept last),
        with the messages that followed it. A message without earlier versions is deleted
        (None); a user message's automatic title follows. When messages follow the
        version all the same (another window sent one meanwhile), nothing is moved: it
        stays, finished with ``finish_reason`` (``error``, or ``cancelled`` when stopped).

        Raises:
            KeyError: no such message.
            ValueError: the messages kept with the earlier version are damaged (it stays
                kept; the empty version stays shown).
        """
        assign = ", ".join(f"{c} = ?" for c in _VERSION_COLUMNS)
        cols = ", ".join(_VERSION_COLUMNS)
        with self._tx() as c:
            msg = self.message(message_id)
            # kept last: its row is the newest (show_version swaps rows in place)
            row = c.execute(f"SELECT id, {cols}, {_TAIL_COLUMN} FROM reply_versions WHERE"
                            " message_id = ? ORDER BY id DESC LIMIT 1",
                            (message_id,)).fetchone()
            later = c.execute("SELECT 1 FROM messages WHERE conversation_id = ? AND id > ?"
                              " LIMIT 1", (msg.conversation_id, message_id)).fetchone()
            if later is not None:  # another window went on from it: nothing is moved
                if msg.role == "assistant":  # (a user message has no finish reason)
                    c.execute("UPDATE messages SET status = 'done', finish_reason = ?"
                              " WHERE id = ?", (finish_reason, message_id))
            elif row is None:
                self._retitle(c, msg, "")
                c.execute("DELETE FROM messages WHERE id = ?", (message_id,))
                self._touch(c, msg.conversation_id, time.time())
                return None
            else:
                self._retitle(c, msg, row["content"])
                their_tail = tails.loads(row[_TAIL_COLUMN])
                c.execute(f"UPDATE messages SET {assign}, status = 'done' WHERE id = ?",
                          (*tuple(row)[1:1 + len(_VERSION_COLUMNS)], message_id))
                c.execute("DELETE FROM reply_versions WHERE id = ?", (int(row["id"]),))
                tails.write_tail(c, msg.conversation_id, their_tail)
            self._touch(c, msg.conversation_id, time.time())
        return self.message(message_id)

    def delete_reply(self, message_id: int) -> None:
        """Delete a reply (with its versions): one that could not start, or that failed
        before any text came. Messages after it (there are none then) stay.

        Raises:
            KeyError: no such message.
            ValueError: it is not a reply.
        """
        msg = self.message(message_id)
        if msg.role != "assistant":
            raise ValueError(f"message {message_id} is not a reply")
        with self._tx() as c:
            c.execute("DELETE FROM messages WHERE id = ?", (message_id,))
            self._touch(c, msg.conversation_id, time.time())

    def recover_interrupted(self) -> int:
        """Mark replies left ``streaming`` by a process that is gone as ``interrupted``.

        A reply whose owner (the store that began it) still holds its lock is being
        streamed by another window right now and is left alone. Replies without an owner
        record (written by an older Tandem) are claimed, as before.

        Returns:
            How many were marked.
        """
        rows = self._conn.execute(
            "SELECT m.id, o.owner FROM messages m LEFT JOIN reply_owners o ON o.message_id = m.id"
            " WHERE m.status = 'streaming'"
        ).fetchall()
        alive: dict[str, bool] = {}
        try:  # sweep the locks of writers that ended without close(); their replies follow
            for lock_file in self.owners_dir.glob("*.lock"):
                alive[lock_file.stem] = self._owner_alive(lock_file.stem)
        except OSError:
            pass
        gone = []
        for row in rows:
            owner = row[1]
            if owner is not None:
                if owner not in alive:
                    alive[owner] = self._owner_alive(str(owner))
                if alive[owner]:
                    continue
            gone.append(int(row[0]))
        if not gone:
            return 0
        with self._tx() as c:
            marked = 0
            for mid in gone:
                cur = c.execute(
                    "UPDATE messages SET status = 'done', finish_reason = 'interrupted'"
                    " WHERE id = ? AND status = 'streaming'",
                    (mid,),
                )
                marked += int(cur.rowcount)
            return marked

    # -- rows -------------------------------------------------------------------------
    @staticmethod
    def _conversation(row: sqlite3.Row) -> Conversation:
        return Conversation(
            id=int(row["id"]),
            title=str(row["title"]),
            system_prompt=str(row["system_prompt"]),
            created_at=_read_time(row, "created_at"),
            updated_at=_read_time(row, "updated_at"),
        )

    @staticmethod
    def _version(row: sqlite3.Row, shown: bool) -> ReplyVersion:
        return ReplyVersion(
            number=0, shown=shown, content=str(row["content"]),
            finish_reason=_read_text(row["finish_reason"]), stats=_read_stats(row),
            draft_spans=_read_spans(row), note=_read_text(row["note"]),
            seed=_read_seed(row["seed"]), model=_read_text(row["model"]),
            created_at=_read_time(row, "created_at"))

    @staticmethod
    def _message(row: sqlite3.Row) -> StoredMessage:
        """A message as stored; damaged fields (statistics, spans, times, written by
        hand or by a broken disk) read as missing rather than failing the conversation."""
        return StoredMessage(
            id=int(row["id"]),
            conversation_id=int(row["conversation_id"]),
            role=row["role"],
            content=str(row["content"]),
            status=row["status"],
            finish_reason=_read_text(row["finish_reason"]),
            stats=_read_stats(row),
            draft_spans=_read_spans(row),
            note=_read_text(row["note"]),
            seed=_read_seed(row["seed"]),
            model=_read_text(row["model"]),
            created_at=_read_time(row, "created_at"),
            updated_at=_read_time(row, "updated_at"),
            version=int(row["earlier_versions"]) + 1,
            versions=int(row["other_versions"]) + 1,
        )
