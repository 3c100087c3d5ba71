"""The window's local API: the "Serve API" switch, the server it runs, and the gauge
following API traffic.

:class:`ApiServing` runs :class:`app.api.server.ApiServer` on the window's
:class:`~app.chat.service.ChatService` (the same queue as the window's own replies) when
the API panel's switch is turned on, shows the base URL in the panel and the status bar,
and passes the service's events through :class:`app.api.traffic.ApiTrafficFollower` so
that the gauge follows an API reply, labelled "API traffic", unless the window's own
reply runs (a window reply queued behind an API request leaves the gauge to it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QTimer, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel

from app.api.traffic import (
    ApiReplyBegan,
    ApiReplyEnded,
    ApiReplyStatsChanged,
    ApiReplyTokens,
    ApiTrafficFollower,
)
from app.chat.conversation import ChatController
from app.chat.events import JobDone, JobFailed, UserError
from app.chat.service import ChatService
from app.errors import TandemError
from app.store.settings import Settings
from app.ui.api.api_panel import ApiPanelWidget
from app.ui.gauge.gauge_panel import SpeculationGaugeWidget
from app.ui.quit_check import ask_to_stop, work_in_progress


class ApiServing(QObject):
    """Starts and stops the API for one window and routes API traffic to its gauge.

    Args:
        panel: the API tab (its switch and port drive :meth:`start` and :meth:`stop`).
        status_label: a status-bar label, shown with the base URL while serving.
        gauge: the window's gauge.
        service: the window's chat service; the API's requests go through its queue.
        controller: the window's controller (the loaded model, the window's own reply).
        settings: the window's settings (the API's default sampling and speculation).
        show_error: where a failure to start is reported (and logged: the controller's
            report).
        clear_errors: clears the window's errors of an origin (a failure to start is
            cleared once serving starts).
    """

    def __init__(self, panel: ApiPanelWidget, status_label: QLabel,
                 gauge: SpeculationGaugeWidget, service: ChatService,
                 controller: ChatController, settings: Settings,
                 show_error: Callable[[UserError], None],
                 clear_errors: Callable[[str], None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.panel = panel
        self.status_label = status_label
        self.gauge = gauge
        self.service = service
        self.controller = controller
        self.settings = settings
        self._show_error = show_error
        self._clear_errors = clear_errors
        self.server: Any = None  # an app.api.server.ApiServer while serving
        self.traffic = ApiTrafficFollower()
        status_label.hide()
        #: the Server menu's twin of the panel's switch
        self.action = QAction("Serve the API on this computer", self)
        self.action.setCheckable(True)
        self.action.setToolTip("The API tab's \u201cServe API\u201d: an OpenAI-compatible "
                               "API on 127.0.0.1 for editors and scripts")
        self.action.toggled.connect(self._on_panel_serve_toggled)
        panel.port.setValue(settings.ui.api_port)
        panel.port.valueChanged.connect(self._on_panel_port_changed)
        panel.serve_toggled.connect(self._on_panel_serve_toggled)
        if settings.ui.api_serving:  # left on when the window last closed (a start that
            self.start(settings.ui.api_port)  # fails says why; the next start tries again)

    @Slot(int)
    def _on_panel_port_changed(self, port: int) -> None:
        self.settings.ui.api_port = port  # saved with the window's settings

    @Slot(bool)
    def _on_panel_serve_toggled(self, on: bool) -> None:
        if not on and self._requests_running() and not ask_to_stop(
                self.panel.window(), ("Turn the API off?", "Turning the API off", "Turn off"),
                self._requests_running):
            self._show_serving()  # the switch and the menu's check back on
            return
        # the user's choice, kept for the next start (saved with the window's settings)
        self.settings.ui.api_serving = on and self.start(self.panel.port.value())
        if not on:
            self.stop()

    def _requests_running(self) -> list[str]:
        """The API's running and waiting requests, in the quit question's words (none
        while not serving)."""
        if self.server is None:
            return []
        return work_in_progress([job for job in self.service.jobs() if job[1] == "api"], 0)

    def start(self, port: int) -> bool:
        """Serve the loaded session as an OpenAI-compatible API on 127.0.0.1:``port``
        (0: any free port), with the window's sampling (but its seed) and speculation as
        defaults.

        Returns:
            whether it serves; a failure (a port in use) is shown as a
            :class:`~app.chat.events.UserError` with origin ``"api"``.
        """
        from app.api.server import ApiServer

        self.stop()
        try:
            # the seed is the window's conversation's: a request without its own draws a
            # random one, as OpenAI's API does, rather than every client drawing alike
            server = ApiServer(self.service, port=port, model=self.controller.model_info,
                               defaults=lambda: (self.settings.sampling.with_changes(seed=-1),
                                                 self.settings.speculation))
            server.start()
        except TandemError as exc:
            self._show_error(UserError("Could not serve the API", str(exc), origin="api"))
            self._show_off()
            return False
        self.server = server
        self._clear_errors("api")  # an earlier failure to start (a port in use) is over
        self._show_serving()
        self.status_label.show()
        return True

    def stop(self) -> None:
        """Stop serving (the API's running and waiting requests are cancelled)."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        self._show_off()
        self.status_label.hide()

    def _show_off(self) -> None:
        self.panel.set_serving(None)
        self._check_action(False)

    def _check_action(self, on: bool) -> None:
        self.action.blockSignals(True)
        self.action.setChecked(on)
        self.action.blockSignals(False)

    @Slot()
    def _show_serving(self) -> None:
        """The panel's serving line, saying when no model of Tandem's own is loaded (the
        API then answers every request 503)."""
        if self.server is None:
            return
        info = self.controller.model_info
        note = ("" if info is not None and info.remote is None else
                "The window is connected to a server, and the API serves a model loaded in "
                "Tandem only: requests are answered 503 until one is. " if info is not None
                else "No model is loaded: requests are answered 503 until one is. ")
        self.panel.set_serving(self.server.base_url, note)
        self._check_action(True)
        # the status bar says it too: the API answers nothing until a model is loaded
        self.status_label.setText(f"API on {self.server.base_url}" + (
            " (503 until a model is loaded in Tandem)" if note else ""))

    def handle(self, event: object) -> None:
        """Follow one service event (any kind; those of API replies move the gauge)."""
        if isinstance(event, (JobDone, JobFailed)) and event.kind == "load":
            QTimer.singleShot(0, self._show_serving)  # once the controller has it too
        update = self.traffic.handle(event)
        if update is None:
            return
        if isinstance(update, ApiReplyEnded):
            self.panel.add_request(update)
            if not update.began:
                return  # stopped in the queue: the gauge follows what runs
        reply = self.controller.reply
        if reply is not None and reply.started:
            # the window's own reply runs (an API request waits behind it): the gauge is
            # its; a window reply still queued behind the API's leaves the gauge to the
            # API until it starts
            return
        if isinstance(update, ApiReplyBegan):
            # the request's own drafter and k arrive with its first statistics
            self.gauge.begin_reply(None, 0, source=f"API traffic · {update.endpoint} request")
        elif isinstance(update, ApiReplyTokens):
            self.gauge.add_tokens(update.t, update.n_tokens)
        elif isinstance(update, ApiReplyStatsChanged):
            self.gauge.set_stats(update.stats)
        elif isinstance(update, ApiReplyEnded):
            if update.reply is not None:
                # the request's own drafter, k and statistics, whatever the window's are
                self.gauge.end_reply(update.reply.stats)
            else:  # a failed request must not leave the gauge "live"
                self.gauge.fail_reply(f"The API request failed: {update.error or 'no reason given'}")
