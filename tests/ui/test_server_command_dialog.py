"""Server → Run this on a bigger machine…: the launch command for the loaded pair, with
Copy, the engine switch, notes, and the weights repository vLLM needs for a GGUF the
catalog does not know."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMessageBox

from app.catalog.curated import load_curated_pairs
from app.options import SpecMode, SpeculationConfig
from app.ui.server_command_dialog import ServerCommandDialog

PAIRS = load_curated_pairs(Path(__file__).resolve().parents[2] / "resources" / "catalog"
                           / "pairs.json")


@pytest.fixture(autouse=True)
def repo_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalog of this checkout (an editable install may point elsewhere)."""
    monkeypatch.setattr("app.catalog.server_command.load_curated_pairs", lambda: PAIRS)


def test_the_command_follows_the_engine_and_copies(qtbot, tmp_path: Path) -> None:
    target = tmp_path / "SmolLM2-1.7B-Instruct-Q4_K_M.gguf"
    draft = tmp_path / "SmolLM2-135M-Instruct-Q8_0.gguf"
    dialog = ServerCommandDialog(target, draft, SpeculationConfig(mode=SpecMode.DRAFT_MODEL,
                                                                  draft_max=6))
    qtbot.addWidget(dialog)
    text = dialog.command_edit.toPlainText()
    assert text.startswith("llama-server")
    assert "-hf bartowski/SmolLM2-1.7B-Instruct-GGUF:Q4_K_M" in text
    assert "-hfd bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0" in text and "--spec-draft-n-max 6" in text
    assert "TANDEM_SERVER_KEY" in dialog.notes_label.text()
    dialog.copy_button.click()
    assert QGuiApplication.clipboard().text() == text and dialog.copy_button.text() == "Copied"

    dialog.engine_combo.setCurrentIndex(1)  # vLLM
    text = dialog.command_edit.toPlainText()
    assert text.startswith("vllm serve HuggingFaceTB/SmolLM2-1.7B-Instruct")
    assert '"method":"draft_model","model":"HuggingFaceTB/SmolLM2-135M-Instruct"' in text
    assert not dialog.repo_edit.isVisibleTo(dialog)
    dialog.key_box.setChecked(False)
    assert "--host 127.0.0.1" in dialog.command_edit.toPlainText()
    assert dialog.copy_button.text() == "Copy"


def test_the_command_runs_tandems_context_length_until_changed(qtbot, tmp_path: Path) -> None:
    target = tmp_path / "SmolLM2-1.7B-Instruct-Q4_K_M.gguf"
    dialog = ServerCommandDialog(target, None, SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP),
                                 n_ctx=8192)
    qtbot.addWidget(dialog)
    assert " -c 8192" in dialog.command_edit.toPlainText()
    dialog.engine_combo.setCurrentIndex(1)  # vLLM
    assert "--max-model-len 8192" in dialog.command_edit.toPlainText()
    dialog.ctx_spin.setValue(0)  # "the model's own"
    assert "--max-model-len" not in dialog.command_edit.toPlainText()


def test_vllm_asks_for_the_weights_of_an_unknown_gguf(qtbot, tmp_path: Path) -> None:
    dialog = ServerCommandDialog(tmp_path / "mine.gguf", None,
                                 SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP))
    qtbot.addWidget(dialog)
    assert "--spec-type ngram-simple" in dialog.command_edit.toPlainText()
    dialog.engine_combo.setCurrentIndex(1)
    assert dialog.repo_edit.isVisibleTo(dialog) and "loads no GGUF" in dialog.notes_label.text()
    dialog.repo_edit.setText("acme/Mine-7B")
    assert dialog.command_edit.toPlainText().startswith("vllm serve acme/Mine-7B")
    assert "loads no GGUF" not in dialog.notes_label.text()


def test_a_draft_model_mode_without_a_draft_says_so(qtbot, tmp_path: Path) -> None:
    dialog = ServerCommandDialog(tmp_path / "t.gguf", None,
                                 SpeculationConfig(mode=SpecMode.DRAFT_MODEL))
    qtbot.addWidget(dialog)
    assert dialog.command is None and not dialog.copy_button.isEnabled()
    assert "needs a draft model" in dialog.notes_label.text()


def test_the_server_menu_without_a_model_explains(qtbot) -> None:
    from app.ui.main_window import MainWindow

    w = MainWindow(autoload=False)
    qtbot.addWidget(w)
    try:
        [server] = [a for a in w.menuBar().actions() if a.text() == "&Server"]
        connect, action, disconnect, _, serve = server.menu().actions()
        assert serve.text() == "Serve the API on this computer" and serve.isCheckable()
        assert connect.text() == "Connect to a server…"
        assert action.objectName() == "runElsewhereAction"
        assert disconnect.text() == "Disconnect from the server" and not disconnect.isEnabled()
        action.trigger()
        boxes = w.findChildren(QMessageBox)
        assert len(boxes) == 1 and "Load a target model first" in boxes[0].text()
        assert not w.findChildren(ServerCommandDialog)
    finally:
        w.close()


def test_a_loaded_mtp_assistant_is_the_servers_draft_model(qtbot, tmp_path: Path) -> None:
    dialog = ServerCommandDialog(tmp_path / "gemma-4-E2B-it-Q4_0.gguf",
                                 tmp_path / "mtp-gemma-4-E2B-it-Q4_0.gguf",
                                 SpeculationConfig(mode=SpecMode("mtp"), draft_max=3),
                                 draft_is_assistant=True)
    qtbot.addWidget(dialog)
    text = dialog.command_edit.toPlainText()
    assert "--spec-type draft-mtp" in text and "-hfd ggml-org/gemma-4-E2B-it-GGUF" in text
    assert "-md mtp-gemma-4-E2B-it-Q4_0.gguf" in text  # named: the repository holds both
    dialog.engine_combo.setCurrentIndex(1)  # vLLM
    assert '"method":"mtp","model":"google/gemma-4-E2B-it-assistant"' in (
        dialog.command_edit.toPlainText())
