"""Each time the chat window opens the Models window, it shows the target and drafter the
chat window uses now (not those of the first opening, nor a choice left unapplied), and
the demo button is not offered for a demo model the library lists already."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QWidget

from app.catalog.library import LibraryConfig, save_library_config
from app.options import SpecMode
from app.store.settings import Settings
from app.ui.picker import DownloadQueue, ModelPickerWindow
from app.ui.side_windows import SideWindows
from tests.ui.picker.conftest import (
    GEMMA_COPY_FILE,
    GEMMA_FILE,
    SCAN_TIMEOUT_MS,
    SMOLLM_FILE,
    link_or_copy,
    wait_scanned,
)


def _settled(picker: ModelPickerWindow) -> bool:
    tab = picker.library_tab
    return not tab.scanning and not tab.ranking and tab.drafter is not None


def _shown(picker: ModelPickerWindow) -> tuple[str | None, SpecMode | None, Path | None]:
    tab = picker.library_tab
    target = tab.target.path.name if tab.target is not None else None
    if tab.drafter is None:
        return target, None, None
    return target, SpecMode(tab.drafter.mode), tab.drafter.draft_path


def test_every_opening_shows_the_models_the_chat_window_uses(  # type: ignore[no-untyped-def]
        qtbot, models_dir: Path) -> None:
    window = QWidget()
    qtbot.addWidget(window)
    s = Settings()
    s.model.target_path = models_dir / GEMMA_FILE
    s.model.draft_path = models_dir / GEMMA_COPY_FILE
    s.speculation = s.speculation.with_changes(mode=SpecMode.DRAFT_MODEL)
    controller: Any = None  # opening the picker does not use them
    windows = SideWindows(window, controller, controller, s, DownloadQueue(window))
    windows.open_model_picker()
    picker = windows.picker
    assert picker is not None
    try:
        qtbot.waitUntil(lambda: _settled(picker), timeout=SCAN_TIMEOUT_MS)
        # in use, so shown, although the pairing check finds this copy too large to help
        assert _shown(picker) == (GEMMA_FILE, SpecMode.DRAFT_MODEL, models_dir / GEMMA_COPY_FILE)
        assert f"Drafter: {picker.library_tab.drafter.label}" in picker.summary_label.text()

        # a choice made in the picker and not applied is not what the window uses
        assert picker.library_tab.choose_drafter(SpecMode.OFF)
        picker.close()
        s.speculation = s.speculation.with_changes(mode=SpecMode.PROMPT_LOOKUP)
        windows.open_model_picker()  # reopened: it rescans
        qtbot.waitUntil(lambda: _settled(picker), timeout=SCAN_TIMEOUT_MS)
        assert _shown(picker) == (GEMMA_FILE, SpecMode.PROMPT_LOOKUP, None)
        assert "Drafter: Prompt lookup" in picker.summary_label.text()

        # another target (the window loaded SmolLM): raised again, it follows too
        s.model.target_path = models_dir / SMOLLM_FILE
        s.model.draft_path = None
        s.speculation = s.speculation.with_changes(mode=SpecMode.OFF)
        windows.open_model_picker()
        qtbot.waitUntil(lambda: _settled(picker) and _shown(picker)[0] == SMOLLM_FILE,
                        timeout=SCAN_TIMEOUT_MS)
        assert _shown(picker) == (SMOLLM_FILE, SpecMode.OFF, None)

        # open_drafts_for (the chat window's "Choose draft…") shows the one in use too
        picker.library_tab.choose_drafter(SpecMode.AUTO)
        windows.open_drafts_for(models_dir / SMOLLM_FILE)
        qtbot.waitUntil(lambda: _settled(picker), timeout=SCAN_TIMEOUT_MS)
        assert _shown(picker) == (SMOLLM_FILE, SpecMode.OFF, None)
    finally:
        windows.shutdown()
        picker.close()


def test_a_demo_listed_from_another_folder_is_not_offered(  # type: ignore[no-untyped-def]
        qtbot, tmp_path: Path, gemma_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import app.catalog.library
    from app.catalog.demo import GEMMA3

    monkeypatch.setattr(app.catalog.library, "installed_package_demos", lambda: (GEMMA3,))
    models, elsewhere = tmp_path / "models", tmp_path / "elsewhere"
    models.mkdir()
    elsewhere.mkdir()
    link_or_copy(gemma_path, elsewhere / GEMMA3.file)
    save_library_config(LibraryConfig(models_dir=models, folders=[elsewhere],
                                      scan_lmstudio=False, scan_hf_cache=False))
    w = ModelPickerWindow()
    qtbot.addWidget(w)
    w.show()
    try:
        wait_scanned(qtbot, w)
        assert [e.path for e in w.library_tab.entries] == [elsewhere / GEMMA3.file]
        assert w.library.missing_demos() == (GEMMA3,)  # not in the models folder …
        assert w.library_tab.demo_button.isHidden()  # … but listed: not offered
    finally:
        w.close()
        assert w.shutdown()
