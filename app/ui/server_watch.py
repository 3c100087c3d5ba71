"""Whether the connected server still answers, asked while the window is idle.

A reply learns that a remote server went away when it fails; the model bar would say
"connected" until then. :class:`ServerWatch` asks the server for its model list every
:data:`CHECK_EVERY_MS` while one is connected and nothing runs, on its own thread with
its own connection (:meth:`~app.chat.conversation.ChatController.server_check_client`),
and the bar's server line says "not answering" (with the reason) until a check or a
reply gets through.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.chat.conversation import ChatController
from app.remote.client import RemoteClient
from app.remote.errors import RemoteError
from app.ui.model_bar import ModelBarWidget

#: how often the connected server is asked whether it still answers, ms
CHECK_EVERY_MS = 15_000


class ServerWatch(QObject):
    """Asks the connected server whether it answers (see the module docstring)."""

    checked = Signal(str, str)
    """A check ended (the server's address, why it did not answer: "" when it did); sent
    from the check's thread."""

    def __init__(self, controller: ChatController, bar: ModelBarWidget,
                 parent: QObject | None = None, *, every_ms: int = CHECK_EVERY_MS) -> None:
        super().__init__(parent)
        self._controller = controller
        self._bar = bar
        self._running = False
        self.checked.connect(self._on_checked)
        self._timer = QTimer(self)
        self._timer.setInterval(every_ms)
        self._timer.timeout.connect(self.check)
        self._timer.start()

    @property
    def running(self) -> bool:
        """A check is under way."""
        return self._running

    @Slot()
    def check(self) -> bool:
        """Ask now, unless a check runs, no server is connected or a job runs (a reply
        says soon enough). Returns whether a check started."""
        c = self._controller
        if self._running or c.remote is None or c.busy:
            return False
        client = c.server_check_client()
        if client is None:
            return False
        self._running = True
        threading.Thread(target=self._ask, args=(client,), name="server-watch",
                         daemon=True).start()
        return True

    def _ask(self, client: RemoteClient) -> None:
        why = ""
        try:
            client.models()
        except RemoteError as exc:
            why = str(exc)
        except Exception as exc:  # noqa: BLE001 (a check must not end the thread loudly)
            why = f"the check failed ({type(exc).__name__})"
        finally:
            client.close()
        try:
            self.checked.emit(client.base_url, why)
        except RuntimeError:  # the window closed meanwhile
            pass

    @Slot(str, str)
    def _on_checked(self, base_url: str, why: str) -> None:
        self._running = False
        remote = self._controller.remote
        if remote is None or remote.info.base_url != base_url:
            return  # another server, or none, by now
        self._bar.set_server_answering(why or None)
