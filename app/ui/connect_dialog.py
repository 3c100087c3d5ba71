""""Connect to a server…": the address and API key of a remote OpenAI-compatible server
(llama-server, vLLM, SGLang, another Tandem, Ollama, LM Studio), and its model.

The dialog lists the server's models (``/v1/models``) on a pool thread
(:class:`~app.ui.picker.workers.TaskWorker`), and says why when it cannot (down, wrong
key, not an OpenAI-compatible server). TLS certificates are verified. The key is shown
as dots, never logged, and kept by :class:`~app.store.credentials.ApiKeyStore` (the OS
keyring, or this session only where there is none: the dialog says which). On OK the
window hands :meth:`connection` to the controller, which identifies the server on the
chat service's worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from PySide6.QtCore import QThreadPool, Slot
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.remote.client import RemoteClient, RemoteModel
from app.store.credentials import ApiKeyStore
from app.ui.picker.payloads import TaskOutcome
from app.ui.picker.workers import TaskSignals, TaskWorker
from app.ui.labels import Label


class ConnectDialog(QDialog):
    """Address, optional API key, model. See the module docstring.

    Args:
        keys: where keys are kept.
        base_url, model: what to show first (the last server used).
    """

    def __init__(self, keys: ApiKeyStore, base_url: str | None = None,
                 model: str | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Connect to a server")
        self.setMinimumWidth(520)
        self._keys = keys
        self._wanted_model = model
        self._generation = 0
        self._listing = threading.Event()  # set: the model list being fetched stops
        self._pool = QThreadPool(self)
        self._signals = TaskSignals(self)
        self._signals.finished.connect(self._on_models_finished)

        layout = QVBoxLayout(self)
        intro = Label("An OpenAI-compatible server: llama-server, vLLM, SGLang, another "
                       "Tandem, Ollama or LM Studio. Replies run there; the gauge shows the "
                       "server's own speculation figures.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        self.url_edit = QLineEdit(base_url or "")
        self.url_edit.setPlaceholderText("http://127.0.0.1:8080")
        form.addRow("Address", self.url_edit)
        self.key_edit = QLineEdit(keys.load(base_url) or "" if base_url else "")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText("none")
        form.addRow("API key", self.key_edit)
        self.remember_box = QCheckBox("Remember the key" if keys.persistent
                                      else "Remember the key until Tandem closes")
        self.remember_box.setChecked(True)
        form.addRow("", self.remember_box)
        self.key_note = Label(keys.backend_note)
        self.key_note.setObjectName("gaugeNote")
        self.key_note.setWordWrap(True)
        form.addRow("", self.key_note)
        row = QHBoxLayout()
        self.model_combo = QComboBox()
        self.model_combo.setMinimumWidth(300)
        row.addWidget(self.model_combo, 1)
        self.list_button = QPushButton("List models")
        self.list_button.clicked.connect(self._on_list_button_clicked)
        row.addWidget(self.list_button)
        form.addRow("Model", row)
        layout.addLayout(form)
        self.status_label = Label("")
        self.status_label.setWordWrap(True)
        layout.addWidget(self.status_label)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                        | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Connect")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self._update_ok()
        self.url_edit.textChanged.connect(self._on_url_edit_text_changed)

    def _say(self, text: str) -> None:
        """The line under the model: what the server answered, or why not. The dialog
        grows to a longer one (Qt lays out a wrapped label only once), never shrinks."""
        self.status_label.setText(text)
        self.resize(self.size().expandedTo(self.sizeHint()))

    def _update_ok(self) -> None:
        """Connect is on once models of the address are listed, and then the default
        button; before, Enter lists the models."""
        ok = bool(self.url_edit.text().strip()) and self.model_combo.count() > 0
        connect = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        connect.setEnabled(ok)
        connect.setDefault(ok)
        self.list_button.setDefault(not ok)

    @Slot(str)
    def _on_url_edit_text_changed(self, _text: str) -> None:
        # the models listed were another address's: list this one's first
        asking = not self.list_button.isEnabled()  # an answer still coming is the old's
        self._generation += 1
        self._listing.set()
        self.list_button.setEnabled(True)
        if self.model_combo.count() or asking:
            self.model_combo.clear()
            self._say("Another address: List models asks it for its models.")
        self._update_ok()

    def accept(self) -> None:
        """Connect, unless no model is listed or the address or key cannot be used
        (said, and the dialog stays)."""
        if not self.model_combo.count():
            return
        try:
            self.client().close()
        except Exception as exc:  # RemoteError for an address that is not one
            self._say(str(exc))
            return
        super().accept()

    def client(self) -> RemoteClient:
        """A client for the address and key as typed (raises RemoteError for a bad
        address)."""
        return RemoteClient(self.url_edit.text(), api_key=self.key_edit.text() or None)

    def connection(self) -> tuple[RemoteClient, str]:
        """The client and the chosen model id; keeps the key (keyring or session) when
        "Remember the key" is ticked, forgets it when the field is empty."""
        client = self.client()
        key = self.key_edit.text()
        if key and self.remember_box.isChecked():
            self._keys.save(client.base_url, key)
        elif not key:
            self._keys.delete(client.base_url)
        return client, str(self.model_combo.currentData())

    def list_models(self) -> None:
        """Ask the server at the typed address for its models (on a pool thread); a bad
        address is said at once."""
        try:
            client = self.client()
        except Exception as exc:  # RemoteError for an address that is not one
            self._say(str(exc))
            return
        self._generation += 1
        self._listing.set()  # an earlier list still waiting is not needed any more
        self._listing = threading.Event()
        self._say("Asking the server for its models…")
        self.list_button.setEnabled(False)

        def job(_report: Callable[[object], None],
                cancel: threading.Event) -> tuple[RemoteModel, ...]:
            with client:
                return client.models(cancel)

        self._pool.start(TaskWorker(job, self._signals, title="Could not list the models",
                                    generation=self._generation, cancel=self._listing))

    @Slot()
    def _on_list_button_clicked(self) -> None:
        self.list_models()

    @Slot(object)
    def _on_models_finished(self, outcome: TaskOutcome) -> None:
        if outcome.generation != self._generation:
            return
        self.list_button.setEnabled(True)
        self.model_combo.clear()
        if outcome.error is not None:
            self._say(outcome.error.message)
            self._update_ok()
            self._focus_after_listing(self.url_edit)
            return
        models = outcome.value if isinstance(outcome.value, tuple) else ()
        for m in models:
            self.model_combo.addItem(m.id, m.id)
        if self._wanted_model is not None:
            index = self.model_combo.findData(self._wanted_model)
            if index >= 0:
                self.model_combo.setCurrentIndex(index)
        n = len(models)
        self._say(f"{n} model{'s' if n != 1 else ''} offered." if models
                                  else "The server offers no model.")
        self._update_ok()
        self._focus_after_listing(self.buttons.button(QDialogButtonBox.StandardButton.Ok)
                                  if models else self.url_edit)

    def _focus_after_listing(self, widget: QWidget) -> None:
        """The focus left the List button while it was off (to a button): on to
        ``widget``; one the user has moved on to (typing the key) is left alone."""
        now = QApplication.focusWidget()
        if now is None or isinstance(now, QAbstractButton) or not self.isAncestorOf(now):
            widget.setFocus()

    def done(self, result: int) -> None:
        self._generation += 1  # a late answer is ignored
        self._listing.set()  # a server that does not answer is not waited for
        self._pool.waitForDone(10_000)
        super().done(result)
