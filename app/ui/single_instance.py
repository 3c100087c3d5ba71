"""One Tandem window per user and data folder: a second start (``tandem model.gguf`` from
a terminal or a file manager while Tandem runs) hands its file to the running window and
exits, instead of opening a second window on the same history database and settings (the
last one closed would write its settings over the other's).

Who runs is decided by a lock file in the data folder (:class:`QLockFile`: it names its
owner's process, so a lock left by a crash is taken over). The owner listens on a local
connection (:mod:`multiprocessing.connection`: a Unix domain socket, a named pipe on
Windows) whose peers must know a random key kept in the data folder, readable by this
user only. A later start sends ``{"open": path | None}`` and waits for ``"ok"``.

Each connection is checked (the key's challenge, both ways) and answered on a thread of
its own (at most :data:`CONCURRENT` at once), under a deadline on both ends: a peer that
connects and closes, resets, says nothing or trickles costs its own thread at most about
:data:`HANDSHAKE_S` seconds and never stops the window from answering the next start,
and a start gives up after its ``wait_s``. (On Windows, whose named pipes take no
deadline, a silent peer keeps its thread.)
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import (
    Client,
    Connection,
    Listener,
    answer_challenge,
    deliver_challenge,
)
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, Signal

from app.store import paths

log = logging.getLogger(__name__)

#: how long a later start waits for the running window to answer, seconds (it may still
#: be starting: the lock is taken before the window is built)
ANSWER_S = 10.0
#: how long the running window gives a peer to prove the key and send its request
HANDSHAKE_S = 5.0
#: connections checked at once; more are closed unanswered (a start retries)
CONCURRENT = 4


def _deadline(conn: Connection, seconds: float) -> Callable[[], None]:
    """End every blocking read and write on ``conn`` after ``seconds`` in all: each one
    fails (OSError) after that long (``SO_RCVTIMEO``/``SO_SNDTIMEO``), and once the time
    is up the socket is shut down, so a peer that trickles a byte at a time is cut too.
    The key's challenge (:func:`multiprocessing.connection.deliver_challenge` and
    :func:`~multiprocessing.connection.answer_challenge`, which :class:`Listener` and
    :func:`Client` run without a timeout) then ends. Returns what cancels the shutdown
    (call it when done). No-op on Windows (named pipes)."""
    if sys.platform == "win32":
        return lambda: None
    whole = max(0.001, seconds)
    tv = struct.pack("ll", int(whole), int((whole % 1) * 1_000_000))
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)

    def cut() -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes a read in progress: EOF
        except OSError:
            pass  # closed by its peer already

    timer = threading.Timer(whole, cut)
    timer.daemon = True
    timer.start()

    def done() -> None:
        timer.cancel()
        sock.close()  # the duplicate only: the socket lives on in ``conn``

    return done


def _authenticate(conn: Connection, key: bytes, *, server: bool) -> None:
    """The key's challenge both ways, in the order :class:`Listener` (``server``) and
    :func:`Client` run it. Raises AuthenticationError, OSError or EOFError."""
    if server:
        deliver_challenge(conn, key)
        answer_challenge(conn, key)
    else:
        answer_challenge(conn, key)
        deliver_challenge(conn, key)


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
                with Client(address()) as conn:
                    done = _deadline(conn, max(0.1, deadline - time.monotonic()))
                    try:
                        _authenticate(conn, key, server=False)
                        conn.send({"open": str(open_path) if open_path is not None else None})
                        if conn.poll(max(0.1, deadline - time.monotonic())) \
                                and conn.recv() == "ok":
                            return True
                    finally:
                        done()
            except (OSError, EOFError, ValueError, AuthenticationError) as exc:
                # not listening yet, a stale key, or no answer before the deadline
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
        self._key = _new_key()
        self._slots = threading.BoundedSemaphore(CONCURRENT)
        where = address()
        if sys.platform != "win32":
            Path(where).unlink(missing_ok=True)  # left by a Tandem that crashed: the lock is ours
        try:
            # no authkey here: Listener.accept would run the key's challenge itself,
            # without a deadline, on the one thread that accepts
            self._listener: Listener | None = Listener(where)
        except OSError as exc:
            log.warning("no single-instance connection at %s: %s", where, exc)
            self._listener = None
            return
        threading.Thread(target=self._serve, name="single-instance", daemon=True).start()

    def _serve(self) -> None:
        while True:
            listener = self._listener
            if listener is None:
                return  # closed
            try:
                conn = listener.accept()
            except OSError:
                if self._listener is None:
                    return
                log.debug("accepting a connection failed", exc_info=True)
                time.sleep(0.05)  # (out of descriptors, say): no busy loop meanwhile
                continue
            if not self._slots.acquire(blocking=False):
                conn.close()  # CONCURRENT peers are being checked already
                continue
            try:
                threading.Thread(target=self._answer, args=(conn,),
                                 name="single-instance peer", daemon=True).start()
            except RuntimeError:  # no thread to be had: this peer goes unanswered
                self._slots.release()
                conn.close()

    def _answer(self, conn: Connection) -> None:
        try:
            with conn:
                done = _deadline(conn, HANDSHAKE_S)
                try:
                    _authenticate(conn, self._key, server=True)
                    if not conn.poll(HANDSHAKE_S):
                        return
                    message = conn.recv()
                    raw = message.get("open") if isinstance(message, dict) else None
                    conn.send("ok")
                finally:
                    done()
        except (OSError, EOFError, ValueError, AuthenticationError):
            log.debug("refused a connection", exc_info=True)
            return
        except Exception:  # what a peer with the key sent could not be read back
            log.debug("refused a request", exc_info=True)
            return
        finally:
            self._slots.release()
        self.open_requested.emit(Path(raw) if isinstance(raw, str) and raw else None)

    def close(self) -> None:
        """Stop listening (the address is removed)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
