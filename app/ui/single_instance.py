"""One Tandem window per user and data folder: a second start (``tandem model.gguf`` from
a terminal or a file manager while Tandem runs) hands its file to the running window and
exits, instead of opening a second window on the same history database and settings (the
last one closed would write its settings over the other's).

Who runs is decided by a lock file in the data folder (:class:`QLockFile`: it names its
owner's process, so a lock left by a crash is taken over). The owner listens on a local
connection (:mod:`multiprocessing.connection`: a Unix domain socket, a named pipe on
Windows) whose peers must know a random key kept in the data folder, readable by this
user only. A later start sends ``{"open": path | None}`` and waits for ``"ok"``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, Signal

from app.store import paths

log = logging.getLogger(__name__)

#: how long a later start waits for the running window to answer, seconds (it may still
#: be starting: the lock is taken before the window is built)
ANSWER_S = 10.0


def _digest() -> str:
    folder = str(paths.data_dir().resolve())
    return hashlib.sha256(folder.encode("utf-8")).hexdigest()[:16]


def address() -> str:
    """The connection's address: this data folder's, for this user."""
    if sys.platform == "win32":
        return rf"\\.\pipe\tandem-{_digest()}"
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return str(Path(tempfile.gettempdir()) / f"tandem-{uid}-{_digest()}.sock")


def _key_path() -> Path:
    return paths.data_dir() / "instance.key"


def _read_key() -> bytes | None:
    try:
        key = _key_path().read_bytes()
    except OSError:
        return None
    return key if len(key) == 32 else None


def _new_key() -> bytes:
    key = secrets.token_bytes(32)
    path = _key_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def take_lock() -> QLockFile | None:
    """The lock that makes this process the running Tandem of its data folder, or None
    when another live process holds it. Keep the object until the process exits."""
    paths.data_dir().mkdir(parents=True, exist_ok=True)
    lock = QLockFile(str(paths.data_dir() / "instance.lock"))
    lock.setStaleLockTime(0)  # stale only when its process is gone, however old
    return lock if lock.tryLock(0) else None


def hand_over(open_path: Path | None, wait_s: float = ANSWER_S) -> bool:
    """Give ``open_path`` (None: just show the window) to the running Tandem of this data
    folder, retrying while it starts, for up to ``wait_s`` seconds. True when it took it."""
    deadline = time.monotonic() + wait_s
    while True:
        key = _read_key()
        if key is not None:
            try:
                with Client(address(), authkey=key) as conn:
                    conn.send({"open": str(open_path) if open_path is not None else None})
                    if conn.poll(max(0.1, deadline - time.monotonic())) and conn.recv() == "ok":
                        return True
            except (OSError, EOFError, ValueError) as exc:  # not listening yet; a stale key
                log.debug("the running Tandem did not answer yet: %s", exc)
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


class InstanceServer(QObject):
    """The running Tandem's end: :attr:`open_requested` (a path, or None to just come to
    the front) for each later start, on the GUI thread. Listens from construction on a
    thread of its own; the process's exit ends it."""

    open_requested = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        key = _new_key()
        where = address()
        if sys.platform != "win32":
            Path(where).unlink(missing_ok=True)  # left by a Tandem that crashed: the lock is ours
        try:
            self._listener: Listener | None = Listener(where, authkey=key)
        except OSError as exc:
            log.warning("no single-instance connection at %s: %s", where, exc)
            self._listener = None
            return
        threading.Thread(target=self._serve, name="single-instance", daemon=True).start()

    def _serve(self) -> None:
        assert self._listener is not None
        while True:
            try:
                conn = self._listener.accept()
            except OSError:
                return  # closed
            except Exception:  # a peer without the key (AuthenticationError) and the like
                log.debug("refused a connection", exc_info=True)
                continue
            self._answer(conn)

    def _answer(self, conn: Connection) -> None:
        with conn:
            try:
                if not conn.poll(5.0):
                    return
                message = conn.recv()
                raw = message.get("open") if isinstance(message, dict) else None
                conn.send("ok")
            except (OSError, EOFError, ValueError):
                return
        self.open_requested.emit(Path(raw) if isinstance(raw, str) and raw else None)

    def close(self) -> None:
        """Stop listening (the address is removed)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
