"""The picker's Library tab with a Gemma 4 target and its separate MTP assistant: the
assistant is refused as a target in one sentence, listed for the target as "MTP
assistant: <file>" with its pairing check, and choosing it saves MTP with the
assistant as the drafter model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.catalog.library import LibraryConfig, save_library_config
from app.store.settings import load_settings
from app.ui.picker import ModelPickerWindow, ModelsChosen
from tests.synthetic import write_tiny_gemma4, write_tiny_gemma4_assistant, write_tiny_llama
from tests.ui.picker.conftest import SCAN_TIMEOUT_MS, wait_scanned


@pytest.fixture
def gemma4_dir(tmp_path: Path) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    write_tiny_gemma4(d / "gemma4.gguf")
    write_tiny_gemma4_assistant(d / "gemma4-assistant.gguf")
    save_library_config(LibraryConfig(models_dir=d, scan_lmstudio=False, scan_hf_cache=False))
    return d


def test_a_paired_assistant_is_offered_as_the_mtp_drafter(qtbot, gemma4_dir: Path) -> None:  # type: ignore[no-untyped-def]
    picker = ModelPickerWindow()
    qtbot.addWidget(picker)
    picker.show()
    wait_scanned(qtbot, picker)
    tab = picker.library_tab
    table = tab.model_table
    rows = {table.topLevelItem(i).text(0): table.topLevelItem(i).text(table.columnCount() - 1)
            for i in range(table.topLevelItemCount())}
    assert rows["⚠ gemma4-assistant.gguf"] == (
        "gemma4-assistant.gguf is an MTP assistant (gemma4-assistant), not a model to chat "
        "with: choose it as the MTP drafter of a gemma4 model.")
    with qtbot.waitSignal(tab.drafts_ranked, timeout=SCAN_TIMEOUT_MS):
        assert tab.choose_target(gemma4_dir / "gemma4.gguf")
    rows_d = tab.draft_rows()
    assert rows_d[0] == ("MTP assistant: gemma4-assistant.gguf", "compatible", False)
    assistant = gemma4_dir / "gemma4-assistant.gguf"
    assert tab.choose_drafter("mtp", assistant)
    assert "as the MTP assistant for gemma4.gguf" in picker.library_tab.pair_check.title_label.text()
    with qtbot.waitSignal(picker.models_chosen, timeout=5000) as blocker:
        picker.use_button.click()
    assert blocker.args[0] == ModelsChosen(gemma4_dir / "gemma4.gguf", assistant, "mtp")
    s = load_settings().settings
    assert (s.model.draft_path, s.speculation.mode) == (assistant, "mtp")
    picker.close()
    assert picker.shutdown()


def test_another_target_after_the_assistant_raises_nothing(qtbot, gemma4_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """Changing the target empties the draft list; the rows of the old list (the assistant,
    then another draft model below it) are never made current against the new, empty
    candidates (an IndexError in the draft list's slot, uncaught, before)."""
    write_tiny_llama(gemma4_dir / "llama.gguf")  # a second draft row for gemma4
    raised: list[BaseException] = []
    old_hook = sys.excepthook
    sys.excepthook = lambda _t, exc, _tb: raised.append(exc)
    try:
        picker = ModelPickerWindow()
        qtbot.addWidget(picker)
        picker.show()
        wait_scanned(qtbot, picker)
        tab = picker.library_tab
        with qtbot.waitSignal(tab.drafts_ranked, timeout=SCAN_TIMEOUT_MS):
            assert tab.choose_target(gemma4_dir / "gemma4.gguf")
        rows = [r[0] for r in tab.draft_rows()]
        assert rows[:2] == ["MTP assistant: gemma4-assistant.gguf", "llama.gguf"]
        assert tab.draft_list.currentItem().text(0) == rows[0]
        with qtbot.waitSignal(tab.drafts_ranked, timeout=SCAN_TIMEOUT_MS):
            assert tab.choose_target(gemma4_dir / "llama.gguf")
        assert tab.draft_list.currentItem() is not None
        with qtbot.waitSignal(tab.drafts_ranked, timeout=SCAN_TIMEOUT_MS):
            assert tab.choose_target(gemma4_dir / "gemma4.gguf")
        assert tab.choose_target(gemma4_dir / "gemma4-assistant.gguf")
        assert tab.drafter is None and tab.draft_rows()[0][0].startswith("gemma4-assistant.gguf is")
        picker.close()
        assert picker.shutdown()
    finally:
        sys.excepthook = old_hook
    assert raised == []


def test_the_model_bar_names_the_assistant_with_the_mtp_drafter(qtbot) -> None:  # type: ignore[no-untyped-def]
    from app.chat.events import ModelInfo
    from app.options import SpecMode, SpeculationConfig
    from app.ui.model_bar import ModelBarWidget

    bar = ModelBarWidget()
    qtbot.addWidget(bar)
    info = ModelInfo(target_path=Path("gemma4.gguf"), target_name="gemma4",
                     draft_path=Path("gemma4-assistant.gguf"), draft_name="assistant",
                     n_ctx=256, n_layer=6, n_gpu_layers=0, gpu_supported=False,
                     cpu_reason="no GPU", uses_fallback_template=True, load_seconds=0.1,
                     draft_is_assistant=True)
    bar.set_model(info)
    bar.set_speculation(SpeculationConfig(mode=SpecMode("mtp")))
    assert bar.draft_button.isVisibleTo(bar)
    assert bar.draft_button.toolTip().startswith("MTP assistant: gemma4-assistant.gguf")
    bar.set_speculation(SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP))
    assert not bar.draft_button.isVisibleTo(bar)
