"""The picker's Library tab with the real test models: metadata columns, broken files,
the draft list for a target (compatible first, incompatible greyed with the failed
rule), the pairing details, and the choice saved in the settings and signalled."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.catalog.library import load_library_config
from app.store.settings import Settings, load_settings, save_settings
from app.ui.picker import ModelPickerWindow, ModelsChosen
from app.options import SpecMode
from app.ui.picker.library_tab import AUTO_LABEL, OFF_LABEL, PROMPT_LOOKUP_LABEL, SUFFIX_LABEL
from tests.ui.picker.conftest import (
    GEMMA_COPY_FILE,
    GEMMA_FILE,
    SCAN_TIMEOUT_MS,
    SMOLLM_FILE,
    wait_scanned,
)


@pytest.fixture
def picker(qtbot, models_dir: Path):  # type: ignore[no-untyped-def]
    w = ModelPickerWindow()
    qtbot.addWidget(w)
    w.show()
    wait_scanned(qtbot, w)
    yield w
    w.close()
    assert w.shutdown()


def _rows(picker: ModelPickerWindow) -> dict[str, list[str]]:
    table = picker.library_tab.model_table
    rows = {}
    for i in range(table.topLevelItemCount()):
        item = table.topLevelItem(i)
        cells = [item.text(c) for c in range(table.columnCount())]
        rows[Path(item.toolTip(0).splitlines()[0]).name] = cells
    return rows


def _choose_gemma(qtbot, picker: ModelPickerWindow) -> None:  # type: ignore[no-untyped-def]
    tab = picker.library_tab
    with qtbot.waitSignal(tab.drafts_ranked, timeout=SCAN_TIMEOUT_MS):
        assert tab.choose_target(picker.library.models_dir / GEMMA_FILE)


def test_library_lists_models_with_their_metadata_and_broken_files(picker: ModelPickerWindow) -> None:
    rows = _rows(picker)
    assert set(rows) == {GEMMA_FILE, GEMMA_COPY_FILE, SMOLLM_FILE, "broken.gguf"}
    gemma = rows[GEMMA_FILE]
    # the file name is the title, the metadata name second
    assert gemma[:9] == [GEMMA_FILE, "Gemma 3 270m", "gemma3", "268M", "Q4_K_M", "253 MB",
                         "32,768", "SPM · 262,144", "no"]
    # the context column is the trained one, which its heading and tooltip say
    table = picker.library_tab.model_table
    assert table.headerItem().text(6) == "Trained context"
    assert "Sampling → Model" in table.topLevelItem(0).toolTip(6)
    smol = rows[SMOLLM_FILE]
    assert smol[0] == SMOLLM_FILE and smol[1].startswith("Smollm2 135M")
    assert smol[2:9] == ["llama", "135M", "Q4_1", "98.4 MB", "8,192", "BPE · 49,152", "yes"]
    broken = rows["broken.gguf"]
    assert broken[0] == "⚠ broken.gguf" and "not a usable GGUF" in broken[-1]
    # usable models first, the broken file last
    assert picker.library_tab.model_table.topLevelItem(3).text(0) == "⚠ broken.gguf"
    assert "4 models (1 cannot be used)" in picker.library_tab.scan_label.text()
    assert not picker.use_button.isEnabled()  # no target yet


def test_gemma_target_lists_compatible_gemma_above_greyed_smollm(qtbot, picker: ModelPickerWindow) -> None:  # type: ignore[no-untyped-def]
    _choose_gemma(qtbot, picker)
    tab = picker.library_tab
    rows = tab.draft_rows()
    names = [r[0] for r in rows]
    gemma = next(i for i, r in enumerate(rows) if r[0] == GEMMA_COPY_FILE)
    smol = next(i for i, r in enumerate(rows) if r[0] == SMOLLM_FILE)
    assert (gemma < names.index(PROMPT_LOOKUP_LABEL) < names.index(SUFFIX_LABEL)
            < names.index(AUTO_LABEL) < names.index(OFF_LABEL) < smol)
    assert rows[gemma][1:] == ("too large: no speedup to expect", False)  # compatible, c = 1
    assert rows[smol][1].startswith("vocab_type: target SPM, draft BPE") and rows[smol][2]
    # MTP needs nextn layers in the target's own GGUF: greyed, with the reason
    mtp = next(r for r in rows if r[0].startswith("MTP"))
    assert mtp[1].startswith("needs multi-token-prediction (nextn) layers") and mtp[2]
    broken = next(r for r in rows if r[0] == "broken.gguf")
    assert broken[1].startswith("broken.gguf is not a usable GGUF file") and broken[2]
    # the same-size copy is "too large": prompt lookup is preselected, not the copy
    assert tab.drafter is not None and tab.drafter.mode == "prompt-lookup"
    # the estimated c and the labelled prediction for the compatible draft
    item = tab.draft_list.topLevelItem(gemma)
    assert item.text(2) == "≈ 1.00" and item.text(3).endswith("×")
    assert "α = 0.7" in tab.draft_list.headerItem().text(3)
    # the details of the incompatible pair: every rule, the token id that differs
    tab.choose_drafter("draft-model", picker.library.models_dir / SMOLLM_FILE)
    checks = {rule: (ok, detail) for rule, ok, detail in tab.pair_check.rule_rows()}
    assert list(checks) == ["vocab_type", "bos_token", "eos_token", "vocab_size", "token_text"]
    assert checks["vocab_type"][0] is False
    assert checks["eos_token"][0] is True
    assert checks["token_text"] == (False, "token 5 differs: target '[multimodal]', draft '<file_sep>'")
    assert "Incompatible: vocab_type" in tab.pair_check.verdict_label.text()
    assert not picker.use_button.isEnabled()
    assert "cannot draft for it" in picker.summary_label.text()
    # the compatible copy: all rules pass, the size warning is shown
    tab.choose_drafter("draft-model", picker.library.models_dir / GEMMA_COPY_FILE)
    assert all(ok for _, ok, _ in tab.pair_check.rule_rows())
    assert "expect no speedup" in tab.pair_check.note_label.text()
    assert picker.use_button.isEnabled()
    # Auto is offered here too
    assert tab.choose_drafter("auto") and tab.drafter is not None
    assert tab.drafter.mode is SpecMode.AUTO and tab.drafter.label == AUTO_LABEL
    assert tab.pair_check.title_label.text() == "Auto"
    assert "per conversation" in tab.pair_check.verdict_label.text()


def test_broken_file_cannot_be_the_target(qtbot, picker: ModelPickerWindow) -> None:  # type: ignore[no-untyped-def]
    tab = picker.library_tab
    tab.choose_target(picker.library.models_dir / "broken.gguf")
    assert tab.target is None
    assert "cannot be used" in tab.draft_list.topLevelItem(0).text(0)
    assert not picker.use_button.isEnabled()


def test_choice_is_saved_and_signalled(qtbot, picker: ModelPickerWindow) -> None:  # type: ignore[no-untyped-def]
    _choose_gemma(qtbot, picker)
    copy = picker.library.models_dir / GEMMA_COPY_FILE
    assert picker.library_tab.choose_drafter("draft-model", copy)
    with qtbot.waitSignal(picker.models_chosen, timeout=5000) as blocker:
        picker.use_button.click()
    chosen = blocker.args[0]
    assert chosen == ModelsChosen(picker.library.models_dir / GEMMA_FILE, copy, "draft-model")
    s = load_settings().settings
    assert (s.model.target_path, s.model.draft_path, s.speculation.mode) == (
        chosen.target_path, copy, "draft-model")
    assert s.speculation.draft_max == 4  # the draft model's default k, not prompt lookup's
    assert not picker.isVisible()  # "Use these models" closes the picker


def test_in_the_app_the_choice_is_signalled_and_the_settings_left_to_the_window(
        qtbot, models_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """Given the window's settings, the picker only signals the choice: the window
    applies it (or refuses it while a reply runs, tests/chat/test_controller.py), so the
    settings never say one model while another runs."""
    settings = Settings()
    before = settings.model_copy(deep=True)
    w = ModelPickerWindow(settings=settings)
    qtbot.addWidget(w)
    wait_scanned(qtbot, w)
    _choose_gemma(qtbot, w)
    w.library_tab.choose_drafter("prompt-lookup")
    with qtbot.waitSignal(w.models_chosen, timeout=5000) as blocker:
        w.apply_choice()
    assert blocker.args[0].draft_path is None
    assert blocker.args[0].speculation_mode == "prompt-lookup"
    assert blocker.args[0].target_path == models_dir / GEMMA_FILE
    assert settings == before
    assert load_settings().settings.model.target_path is None  # nothing saved by the picker
    assert w.shutdown()


def test_saved_choice_is_selected_when_the_picker_opens(qtbot, models_dir: Path) -> None:  # type: ignore[no-untyped-def]
    s = Settings()
    s.model.target_path = models_dir / GEMMA_FILE
    s.model.draft_path = None
    s.speculation = s.speculation.with_changes(mode="off")
    save_settings(s)
    w = ModelPickerWindow()
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: w.library_tab.drafter is not None, timeout=SCAN_TIMEOUT_MS)
    assert w.library_tab.target is not None and w.library_tab.target.path == models_dir / GEMMA_FILE
    assert w.library_tab.drafter.mode == "off"  # the saved choice for this target
    assert w.choice() is not None
    assert w.shutdown()


def test_a_saved_draft_too_large_to_help_is_not_preselected(qtbot, models_dir: Path) -> None:  # type: ignore[no-untyped-def]
    # for a Gemma target, prompt lookup is preselected rather than a saved same-size copy
    # marked "too large" (predicted 0.6×)
    s = Settings()
    s.model.target_path = models_dir / GEMMA_FILE
    s.model.draft_path = models_dir / GEMMA_COPY_FILE
    s.speculation = s.speculation.with_changes(mode="draft-model")
    save_settings(s)
    w = ModelPickerWindow()
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: w.library_tab.drafter is not None, timeout=SCAN_TIMEOUT_MS)
    assert w.library_tab.drafter.mode == "prompt-lookup"
    # choosing it by hand is still allowed, and a rescan keeps the user's choice
    assert w.library_tab.choose_drafter("draft-model", models_dir / GEMMA_COPY_FILE)
    with qtbot.waitSignal(w.library_tab.drafts_ranked, timeout=SCAN_TIMEOUT_MS):
        w.library_tab.rescan()
    qtbot.waitUntil(lambda: w.library_tab.drafter is not None, timeout=SCAN_TIMEOUT_MS)
    assert w.library_tab.drafter.draft_path == models_dir / GEMMA_COPY_FILE
    assert w.shutdown()


def test_preferred_draft_is_the_best_predicted_speedup(models_dir: Path) -> None:
    from app.catalog.library import Library
    from app.catalog.pairing import DraftCandidate, PairResult
    from app.ui.picker.library_tab import preferred_draft

    [entry] = [e for e in Library().scan() if e.path.name == GEMMA_FILE]
    ok = PairResult(True, ())
    big = PairResult(True, (), ("too large",))
    cands = (DraftCandidate(entry, big, 1.0), DraftCandidate(entry, ok, 0.2),
             DraftCandidate(entry, ok, 0.05), DraftCandidate(entry, ok, None))
    assert preferred_draft(cands, 4) == 2  # the smallest c predicts the most at equal α
    assert preferred_draft(cands[:1], 4) is None  # only a copy too large: prompt lookup
    assert preferred_draft((DraftCandidate(entry, ok, 0.45),), 4) is None  # predicts < 1×


def test_open_gguf_and_add_folder(qtbot, picker: ModelPickerWindow, tiny_target: Path,  # type: ignore[no-untyped-def]
                                  tiny_draft_perturbed: Path, tmp_path: Path) -> None:
    tab = picker.library_tab
    with qtbot.waitSignal(tab.scan_finished, timeout=SCAN_TIMEOUT_MS):
        tab.open_file(tiny_target)
    assert tiny_target.name in _rows(picker)
    assert tab.target is not None and tab.target.path == tiny_target  # an opened file is chosen
    folder = tmp_path / "more" / "nested"
    folder.mkdir(parents=True)
    shutil.copyfile(tiny_draft_perturbed, folder / "other.gguf")
    shutil.copyfile(tiny_target, folder / "same.gguf")  # a copy: listed once, under the first
    with qtbot.waitSignal(tab.scan_finished, timeout=SCAN_TIMEOUT_MS):
        tab.add_folder(tmp_path / "more")
    rows = _rows(picker)
    assert "other.gguf" in rows
    # added folders are scanned before opened files: the copy there lists both
    assert "same.gguf" in rows and tiny_target.name not in rows
    [tiny] = [e for e in tab.entries if e.is_file(tiny_target)]
    assert tiny.path == folder / "same.gguf" and tiny.copies == (tiny_target,)
    assert tab.target is tiny  # the chosen target stays chosen
    config = load_library_config()
    assert tiny_target in config.files and tmp_path / "more" in config.folders
    # a file that is not a GGUF is refused with a message; the list stays
    bad = tmp_path / "notes.gguf"
    bad.write_text("hello")
    with qtbot.waitSignal(tab.failed, timeout=SCAN_TIMEOUT_MS) as blocker:
        tab.open_file(bad)
    assert "notes.gguf" in blocker.args[0].message
    qtbot.waitUntil(lambda: picker.message_bar.isVisible(), timeout=2000)
    assert len(_rows(picker)) == 6


def test_closing_during_a_scan_does_not_hang(qtbot, models_dir: Path) -> None:  # type: ignore[no-untyped-def]
    w = ModelPickerWindow()
    qtbot.addWidget(w)
    w.show()
    w.library_tab.rescan()  # supersedes the first scan
    w.close()
    assert w.shutdown(10_000)
    assert w.tasks.activeThreadCount() == 0


def test_the_picker_is_freed_without_the_cycle_collector(qtbot, models_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """No reference cycle holds the window: a cycle would let Python's garbage collector
    destroy it at an arbitrary moment, even inside one of its own slots (a crash seen with
    a bound method of the window kept by a child)."""
    import gc
    import weakref

    w = ModelPickerWindow()
    assert w.shutdown()
    ref = weakref.ref(w)
    gc.disable()
    try:
        del w
        assert ref() is None
    finally:
        gc.enable()


def test_the_demo_package_model_is_written_only_when_asked(  # type: ignore[no-untyped-def]
        qtbot, empty_models_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo extra's Gemma (253 MB) is not copied into the models folder by a scan:
    the library offers a button, and the click writes and lists it."""
    import app.catalog.library
    from app.catalog.demo import GEMMA3

    monkeypatch.setattr(app.catalog.library, "installed_package_demos", lambda: (GEMMA3,))

    w = ModelPickerWindow()
    qtbot.addWidget(w)
    w.show()
    try:
        wait_scanned(qtbot, w)
        tab = w.library_tab
        assert not (empty_models_dir / GEMMA3.file).exists() and not _rows(w)
        assert not tab.demo_button.isHidden()
        assert tab.demo_button.text() == f"Add the {GEMMA3.title} demo ({GEMMA3.size_mb} MB)"
        tab.demo_button.click()
        wait_scanned(qtbot, w)
        assert (empty_models_dir / GEMMA3.file).is_file() and set(_rows(w)) == {GEMMA3.file}
        assert tab.demo_button.isHidden()
    finally:
        w.close()
        assert w.shutdown()


def test_a_drafter_that_needs_no_model_stays_chosen_for_another_target(  # type: ignore[no-untyped-def]
        qtbot, models_dir: Path) -> None:
    # Auto in use with Gemma; SmolLM2 picked as the target: no draft model of the library
    # predicts a gain for it, so Auto stays chosen (not prompt lookup)
    w = ModelPickerWindow()
    qtbot.addWidget(w)
    wait_scanned(qtbot, w)
    tab = w.library_tab
    tab.show_in_use(models_dir / GEMMA_FILE, SpecMode.AUTO, None)
    with qtbot.waitSignal(tab.drafts_ranked, timeout=SCAN_TIMEOUT_MS):
        assert tab.choose_target(models_dir / SMOLLM_FILE)
    qtbot.waitUntil(lambda: tab.drafter is not None, timeout=SCAN_TIMEOUT_MS)
    assert tab.drafter.mode == SpecMode.AUTO
    assert w.shutdown()


def test_a_models_folder_that_is_gone_is_said_and_downloads_go_to_the_default(  # type: ignore[no-untyped-def]
        qtbot, tmp_path: Path) -> None:
    """The configured models folder is a file (a drive that is gone reads the same): the
    Models window opens, lists what it finds and says where downloads go meanwhile."""
    from app.catalog.library import LibraryConfig, save_library_config
    from app.store import paths

    gone = tmp_path / "usb"
    gone.write_text("")
    save_library_config(LibraryConfig(models_dir=gone, scan_lmstudio=False, scan_hf_cache=False))
    w = ModelPickerWindow()
    qtbot.addWidget(w)
    w.show()
    wait_scanned(qtbot, w)
    qtbot.waitUntil(lambda: w.message_bar.isVisible(), timeout=5000)
    assert w.message_bar.title.text() == "Models folder cannot be used:"
    assert f"Downloads go to {paths.models_dir()} meanwhile" in w.message_bar.text.text()
    w.close()
    assert w.shutdown()
