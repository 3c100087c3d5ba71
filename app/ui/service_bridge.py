"""The chat service's events as a Qt signal: the one place the window meets the service.

:class:`ServiceBridge` subscribes to :class:`~app.chat.service.ChatService` and re-emits
every event on :attr:`ServiceBridge.event_received`. The service calls its listeners on
its worker thread (a waiting job cancelled ends on the thread that cancelled it); every
event is queued to the GUI thread, where the window hands it to its
:class:`~app.chat.conversation.ChatController` and the race window to its own slot, never
inside the call that caused it. Events are frozen values, so nothing is shared between
the threads. The service's one thread runs every job (the only other worker is the token
count's, :mod:`app.ui.chat.token_preview`, which reads the model between rounds).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal

from app.chat.service import ChatService


class ServiceBridge(QObject):
    """Owns the :class:`ChatService` of a window and relays its events to the GUI thread.

    Args:
        service: default a new :class:`ChatService` (its thread starts now).
    """

    event_received = Signal(object)
    """An event of the service (:mod:`app.chat.events`, :mod:`app.chat.requests`),
    delivered on the GUI thread."""

    _queued = Signal(object)

    def __init__(self, service: ChatService | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.service = service if service is not None else ChatService()
        # queued even when emitted on the GUI thread: a job cancelled there ends after
        # the call that cancelled it, not inside it
        self._queued.connect(self.event_received, Qt.ConnectionType.QueuedConnection)
        self._unsubscribe = self.service.subscribe(self._relay)

    def _relay(self, event: object) -> None:
        try:
            self._queued.emit(event)
        except RuntimeError:  # the bridge's C++ object is gone: nobody listens any more
            pass

    def detach(self) -> None:
        """Stop relaying (the service goes on, for another owner)."""
        self._unsubscribe()

    def shutdown(self) -> None:
        """Stop every job, join the service's thread and free the models (idempotent).
        Events already queued for the GUI thread are still delivered by its event loop
        (or by ``QCoreApplication.sendPostedEvents``)."""
        self.service.shutdown()
        self.detach()
