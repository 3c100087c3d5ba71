"""The "Serve API" panel of the main window (layout only; the window starts and stops the
server, :mod:`app.api.server`, on its own chat service).

A switch with its port, the base URL with a Copy button, one status line, and the last
:data:`ROWS` API requests (time, endpoint, tokens, decode tok/s, acceptance rate α).
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.api import DEFAULT_PORT
from app.api.traffic import ApiReplyEnded
from app.formatting import MISSING, or_dash
from app.ui.copy_feedback import confirm_copied
from app.ui.labels import Label

#: rows of recent requests shown
ROWS = 20


def alpha_cell(row: ApiReplyEnded) -> str:
    """α as a percentage, ``off`` without speculation, a dash without drafts."""
    if row.stats is None:
        return MISSING
    if not row.stats.mode or row.stats.mode.value == "off":
        return "off"
    a = row.stats.acceptance_rate
    return MISSING if a is None else f"{a * 100:.0f}%"


#: what a request gets from the window (the API's defaults: app.ui.api.serving)
_REQUESTS = ("Requests wait in the same queue as this window's replies. What a request "
             "leaves unset comes from the Sampling tab, but the seed: a request without "
             "one gets a random seed.")


#: the tooltip of a request that did not run to its end
STOPPED_WHY = ("Stopped before its end: the client disconnected, or the server stopped "
               "(Serve API turned off, Tandem closing); the tokens are those sent.")


class ApiPanelWidget(QFrame):
    """Serve the loaded model as an OpenAI-compatible API (see the module docstring)."""

    serve_toggled = Signal(bool)
    """The switch was flipped by the user (True: serve)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("apiPanel")
        col = QVBoxLayout(self)
        col.setContentsMargins(12, 10, 12, 10)
        col.setSpacing(6)
        row = QHBoxLayout()
        self.switch = QCheckBox("Serve API")
        self.switch.setObjectName("gaugeMode")
        self.switch.setToolTip("Serve the loaded model as an OpenAI-compatible API on this "
                               "computer (127.0.0.1): editors and scripts get its speculation.")
        self.switch.toggled.connect(self._on_switch_toggled)
        row.addWidget(self.switch)
        row.addStretch(1)
        row.addWidget(Label("Port"))
        self.port = QSpinBox()
        self.port.setRange(1024, 65535)
        self.port.setValue(DEFAULT_PORT)
        row.addWidget(self.port)
        col.addLayout(row)
        url_row = QHBoxLayout()
        self.url = QLineEdit()
        self.url.setReadOnly(True)
        self.url.setPlaceholderText("off")
        url_row.addWidget(self.url, 1)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the base URL (for the openai client or an editor)")
        self.copy_button.setEnabled(False)
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        url_row.addWidget(self.copy_button)
        col.addLayout(url_row)
        self.status = Label(_REQUESTS)
        self.status.setObjectName("gaugeCaption")
        self.status.setWordWrap(True)
        col.addWidget(self.status)
        title = Label("Recent API requests")
        title.setObjectName("gaugeName")
        col.addWidget(title)
        self.table = QTableWidget(0, 5)
        self.table.setHorizontalHeaderLabels(["Time", "Endpoint", "Tokens", "tok/s", "α"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setStretchLastSection(False)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        col.addWidget(self.table, 1)

    # -- what the window tells it ------------------------------------------------------
    def set_serving(self, base_url: str | None, note: str = "") -> None:
        """Show the server as on (its base URL, and ``note``: why requests cannot be
        answered now) or off (None), without emitting."""
        self.switch.blockSignals(True)
        self.switch.setChecked(base_url is not None)
        self.switch.blockSignals(False)
        self.url.setText(base_url or "")
        self.copy_button.setEnabled(base_url is not None)
        self.port.setEnabled(base_url is None)
        self.status.setText(
            f"Serving at {base_url} (no API key: this computer only). {note}{_REQUESTS}"
            if base_url else _REQUESTS)

    def add_request(self, row: ApiReplyEnded) -> None:
        """Put a finished API request at the top of the list (at most :data:`ROWS`)."""
        self.table.insertRow(0)
        tps = row.stats.decode_tps if row.stats is not None else None
        stopped = row.finish_reason == "cancelled"
        tokens = (row.finish_reason if row.stats is None else
                  f"{row.tokens} stopped" if stopped else str(row.tokens))
        cells = [time.strftime("%H:%M:%S", time.localtime(row.ended)), row.endpoint,
                 tokens, or_dash(tps, ".1f"), alpha_cell(row)]
        why = row.error or (STOPPED_WHY if stopped else None)
        for i, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if i >= 2:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if why:
                item.setToolTip(why)
            self.table.setItem(0, i, item)
        while self.table.rowCount() > ROWS:
            self.table.removeRow(self.table.rowCount() - 1)

    # -- the user's actions ------------------------------------------------------------
    @Slot(bool)
    def _on_switch_toggled(self, on: bool) -> None:
        self.serve_toggled.emit(on)

    @Slot()
    def _on_copy_button_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self.url.text())
        confirm_copied(self.copy_button)
