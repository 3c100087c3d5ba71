"""One Tandem window per user and data folder: a second start (``tandem model.gguf`` from
a terminal or a file manager while Tandem runs) hands its file to the running window and
exits, instead of opening a second window on the same history database and settings (the
last one closed would write its settings over the other's).

The running window listens on a local socket (:class:`QLocalServer`: a Unix domain
socket, a named pipe on Windows) named after the data folder, so Tandems with another
``TANDEM_HOME`` stay apart. The message is one line of JSON, ``{"open": path | null}``,
answered by ``ok``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from app.store import paths

log = logging.getLogger(__name__)

#: how long a second start waits for the running window, milliseconds
CONNECT_MS = 1000
#: the longest message read, bytes (a path)
MAX_MESSAGE = 64 * 1024


def server_name() -> str:
    """The socket's name: this user's, for this data folder."""
    folder = str(paths.data_dir().resolve())
    return "tandem-" + hashlib.sha256(folder.encode("utf-8")).hexdigest()[:16]


def hand_over(open_path: Path | None) -> bool:
    """Give ``open_path`` (None: just show the window) to a Tandem already running for
    this data folder. True when one took it (this process should then exit)."""
    socket = QLocalSocket()
    socket.connectToServer(server_name())
    if not socket.waitForConnected(CONNECT_MS):
        return False
    message = {"open": str(open_path) if open_path is not None else None}
    socket.write((json.dumps(message) + "\n").encode("utf-8"))
    socket.flush()
    answered = socket.waitForReadyRead(CONNECT_MS) and bytes(socket.readAll().data()) == b"ok"
    socket.disconnectFromServer()
    return answered


class InstanceServer(QObject):
    """The running window's end: ``on_open(path | None)`` for each later start.

    Args:
        on_open: called on the GUI thread with the path a later start named (None: it
            named none; the window should just come to the front).
    """

    def __init__(self, on_open: Callable[[Path | None], None],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._on_open = on_open
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        name = server_name()
        if not self.server.listen(name):
            QLocalServer.removeServer(name)  # left by a Tandem that crashed
            if not self.server.listen(name):
                log.warning("no single-instance socket: %s", self.server.errorString())
        self.server.newConnection.connect(self._on_new_connection)

    def _on_new_connection(self) -> None:
        while (socket := self.server.nextPendingConnection()) is not None:
            socket.readyRead.connect(lambda s=socket: self._read(s))
            socket.disconnected.connect(socket.deleteLater)

    def _read(self, socket: QLocalSocket) -> None:
        if not socket.canReadLine():
            if socket.bytesAvailable() > MAX_MESSAGE:
                socket.abort()
            return
        line = bytes(socket.readLine(MAX_MESSAGE).data())
        try:
            message = json.loads(line)
            raw = message.get("open") if isinstance(message, dict) else None
        except ValueError:
            socket.abort()
            return
        socket.write(b"ok")
        socket.flush()
        self._on_open(Path(raw) if isinstance(raw, str) and raw else None)
