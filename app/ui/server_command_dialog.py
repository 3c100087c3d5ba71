"""Server → "Run this on a bigger machine…": the launch command for the loaded pair.

Shows the command that starts the loaded target with the chosen drafter and k on
llama-server or vLLM (:mod:`app.catalog.server_command` writes it), with a Copy button
and the notes worded for people. For vLLM, which loads no GGUF, the model can be
replaced by its Hugging Face repository when the catalog does not know it. Layout and
wiring only.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.catalog.server_command import (
    DEFAULT_API_KEY_ENV,
    ServeCommand,
    ServeEngine,
    ServeNote,
    ServePlan,
    build_command,
    plan_for,
)
from app.chat.events import ModelInfo
from app.errors import TandemError
from app.formatting import serve_note_words
from app.options import DEFAULT_PORT, N_CTX_MAX, SpeculationConfig
from app.ui.labels import Label

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class ServerCommandDialog(QDialog):
    """The launch command for ``target`` (+ ``draft``) with ``speculation``'s drafter;
    ``draft_is_assistant``: ``draft`` is an MTP assistant (MTP drafts with it);
    ``n_ctx``: the context length Tandem runs it with, tokens (the command's, until
    changed; None: the model's own)."""

    def __init__(self, target: Path, draft: Path | None, speculation: SpeculationConfig,
                 parent: QWidget | None = None, *, draft_is_assistant: bool = False,
                 n_ctx: int | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Run this on a bigger machine")
        self.setObjectName("serverCommandDialog")
        self.resize(760, 460)
        self._target, self._draft, self._speculation = target, draft, speculation
        self._assistant = draft if draft_is_assistant else None
        self.command: ServeCommand | None = None

        layout = QVBoxLayout(self)
        intro = Label(
            "Start the same target and drafter on a server with a GPU, then connect Tandem "
            "to it. The server reports its own acceptance figures to the gauge.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        self.engine_combo = QComboBox()
        self.engine_combo.addItem("llama-server (llama.cpp)", ServeEngine.LLAMA_SERVER.value)
        self.engine_combo.addItem("vLLM", ServeEngine.VLLM.value)
        form.addRow("Engine", self.engine_combo)
        row = QHBoxLayout()
        self.port_spin = QSpinBox()
        self.port_spin.setRange(1, 65535)
        self.port_spin.setValue(DEFAULT_PORT)
        row.addWidget(self.port_spin)
        self.key_box = QCheckBox(f"require an API key (from ${DEFAULT_API_KEY_ENV})")
        self.key_box.setChecked(True)
        self.key_box.setToolTip("Without a key the server listens on 127.0.0.1 only "
                                "(reach it through an SSH tunnel).")
        row.addWidget(self.key_box)
        row.addStretch(1)
        form.addRow("Port", row)
        self.gpus_spin = QSpinBox()
        self.gpus_spin.setRange(1, 64)
        self.gpus_spin.setToolTip("vLLM spreads the target over this many GPUs "
                                  "(--tensor-parallel-size); llama-server uses every visible GPU")
        form.addRow("GPUs", self.gpus_spin)
        self.ctx_spin = QSpinBox()
        self.ctx_spin.setRange(0, N_CTX_MAX)
        self.ctx_spin.setSingleStep(1024)
        self.ctx_spin.setSpecialValueText("the model's own")
        self.ctx_spin.setValue(n_ctx or 0)
        self.ctx_spin.setToolTip("The server's context length in tokens (-c, --max-model-len); "
                                 "Tandem's own to start with")
        form.addRow("Context", self.ctx_spin)
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("owner/name of the original weights, e.g. "
                                          "HuggingFaceTB/SmolLM2-1.7B-Instruct")
        self.repo_label = Label("Weights repository")
        form.addRow(self.repo_label, self.repo_edit)
        layout.addLayout(form)

        self.command_edit = QPlainTextEdit()
        self.command_edit.setObjectName("serverCommandText")
        self.command_edit.setReadOnly(True)
        # a JSON value is one shell word: scroll rather than break it across lines
        self.command_edit.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.command_edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        layout.addWidget(self.command_edit, 1)
        self.notes_label = Label("")
        self.notes_label.setObjectName("serverCommandNotes")
        self.notes_label.setWordWrap(True)
        layout.addWidget(self.notes_label)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setDefault(True)
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        layout.addWidget(buttons)

        self.engine_combo.currentIndexChanged.connect(self._on_option_changed)
        self.port_spin.valueChanged.connect(self._on_option_changed)
        self.gpus_spin.valueChanged.connect(self._on_option_changed)
        self.ctx_spin.valueChanged.connect(self._on_option_changed)
        self.key_box.toggled.connect(self._on_option_changed)
        self.repo_edit.textChanged.connect(self._on_option_changed)
        self.refresh()

    def engine(self) -> ServeEngine:
        return ServeEngine(self.engine_combo.currentData())

    def _plan(self) -> ServePlan:
        plan = plan_for(self.engine(), self._target, self._speculation,
                        draft=None if self._assistant else self._draft,
                        assistant=self._assistant,
                        port=self.port_spin.value(), gpus=self.gpus_spin.value(),
                        ctx_size=self.ctx_spin.value() or None,
                        api_key_env=DEFAULT_API_KEY_ENV if self.key_box.isChecked() else None)
        repo = self.repo_edit.text().strip()
        if self.engine() is ServeEngine.VLLM and _REPO_ID.match(repo):
            plan = dataclasses.replace(plan, target=dataclasses.replace(plan.target,
                                                                        weights_repo=repo))
        return plan

    def refresh(self) -> None:
        """Write the command for the options shown (or why there is none)."""
        vllm = self.engine() is ServeEngine.VLLM
        self.gpus_spin.setEnabled(vllm)
        try:
            self.command = build_command(self._plan())
        except TandemError as exc:
            self.command = None
            self.command_edit.setPlainText("")
            self.notes_label.setText(str(exc))
            self.copy_button.setEnabled(False)
            return
        needs_repo = ServeNote.VLLM_NEEDS_WEIGHTS in self.command.notes
        show_repo = vllm and (needs_repo or bool(self.repo_edit.text().strip()))
        self.repo_label.setVisible(show_repo)
        self.repo_edit.setVisible(show_repo)
        self.command_edit.setPlainText(self.command.shell(width=80))
        self.notes_label.setText("\n".join(
            "• " + serve_note_words(n.value, api_key_env=DEFAULT_API_KEY_ENV)
            for n in self.command.notes))
        self.copy_button.setEnabled(True)
        self.copy_button.setText("Copy")

    @Slot()
    def _on_option_changed(self) -> None:
        self.refresh()

    @Slot()
    def _on_copy_button_clicked(self) -> None:
        if self.command is not None:
            QGuiApplication.clipboard().setText(self.command.shell(width=80))
            self.copy_button.setText("Copied")


def open_server_command(info: ModelInfo | None, speculation: SpeculationConfig,
                        parent: QWidget) -> QDialog | None:
    """Server → Run this on a bigger machine…: open the launch command's dialog for the
    loaded target and drafter ``info`` with ``speculation`` (None, after a message box
    saying why, when no model is loaded)."""
    if info is None:
        box = QMessageBox(QMessageBox.Icon.Information, "Run this on a bigger machine",
                          "Load a target model first: the command starts the loaded "
                          "target and drafter on a server.", parent=parent)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        return None
    dialog = ServerCommandDialog(info.target_path, info.draft_path, speculation,
                                 parent=parent, draft_is_assistant=info.draft_is_assistant,
                                 n_ctx=info.n_ctx or None)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()
    return dialog
