"""The picker prices a target's own MTP head before it loads: α as DeepSeek-V3 reports
for its MTP head (a documented prior), c as the load check's child measured it, the
speedup E(α, k) / (1 + c·k); it shows those figures on the MTP row and preselects MTP
when they predict a gain (the synthetic GLM-4.5 MTP model, probed for real)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.catalog import loadcheck
from app.catalog.library import LibraryConfig, save_library_config
from app.engine.drafter_kinds import DrafterPrediction, kind_for
from app.engine.drafter_kinds.mtp import MTP_K, MTP_PRIOR_ACCEPTANCE
from app.engine.stats import predicted_speedup
from app.options import SpecMode
from app.ui.picker import ModelPickerWindow
from tests.ui.picker.conftest import SCAN_TIMEOUT_MS, link_or_copy, wait_scanned

MTP = SpecMode("mtp")


def test_a_prediction_is_the_speedup_formula_on_its_figures() -> None:
    cheap = DrafterPrediction(0.85, 0.3, 3)
    assert cheap.speedup == pytest.approx(predicted_speedup(0.85, 3, 0.3)) and cheap.helps
    costly = DrafterPrediction(0.85, 1.4, 3)
    assert costly.speedup < 1.0 and not costly.helps


def test_mtp_predicts_from_the_load_checks_measured_cost(tiny_mtp: Path,
                                                         tiny_target: Path) -> None:
    kind = kind_for(MTP)
    assert kind is not None and kind.predict is not None
    verdict = loadcheck.check_loads(tiny_mtp)
    assert verdict.mtp == "ok" and verdict.mtp_cost_ratio is not None
    assert verdict.mtp_cost_ratio > 0
    p = kind.predict(tiny_mtp, None)
    assert p == DrafterPrediction(MTP_PRIOR_ACCEPTANCE, verdict.mtp_cost_ratio, MTP_K,
                                  "measured by the load check")
    loadcheck.check_loads(tiny_target)
    assert kind.predict(tiny_target, None) is None  # no head ran there


@pytest.fixture
def mtp_picker(qtbot, tmp_path: Path, tiny_mtp_deep: Path):  # type: ignore[no-untyped-def]
    d = tmp_path / "models"
    d.mkdir()
    link_or_copy(tiny_mtp_deep, d / tiny_mtp_deep.name)
    save_library_config(LibraryConfig(models_dir=d, scan_lmstudio=False, scan_hf_cache=False))
    w = ModelPickerWindow()
    qtbot.addWidget(w)
    w.show()
    wait_scanned(qtbot, w)
    yield w
    w.close()
    assert w.shutdown()


def _choose(qtbot, w: ModelPickerWindow, path: Path) -> None:  # type: ignore[no-untyped-def]
    tab = w.library_tab
    with qtbot.waitSignal(tab.drafts_ranked, timeout=SCAN_TIMEOUT_MS):
        assert tab.choose_target(path)


def test_the_picker_shows_mtps_prediction_and_preselects_it_on_a_gain(
        qtbot, mtp_picker: ModelPickerWindow, tiny_mtp_deep: Path) -> None:  # type: ignore[no-untyped-def]
    tab = mtp_picker.library_tab
    path = mtp_picker.library.models_dir / tiny_mtp_deep.name
    _choose(qtbot, mtp_picker, path)
    verdict = loadcheck.cached_verdict(path)
    assert verdict is not None and verdict.mtp_cost_ratio is not None
    c = verdict.mtp_cost_ratio
    prediction = tab.predictions[MTP]
    assert (prediction.cost_ratio, prediction.k) == (c, MTP_K)
    item = tab.draft_list.currentItem()
    row = next(i for i in (tab.draft_list.topLevelItem(n)
                           for n in range(tab.draft_list.topLevelItemCount()))
               if i is not None and i.text(0).startswith("MTP"))
    assert row.text(2) == f"≈ {c:.2f}" and row.text(3) == f"{prediction.speedup:.1f}×"
    if prediction.helps:  # eight trunk layers: c ≈ 0.3 here, a predicted 1.6×
        assert item is row and tab.drafter is not None and tab.drafter.mode is MTP
        assert row.text(4).startswith("predicted gain (α 0.85 assumed, k = 3")
        words = tab.pair_check.verdict_label.text()
        assert f"Predicted speedup {prediction.speedup:.1f}× with MTP at k = 3" in words
        assert f"c = {c:.2f} measured by the load check" in words
    else:  # a machine where the head costs too much: prompt lookup, and the row says why
        assert item is not row and row.text(4).startswith("no gain predicted")

    # the same model remembered with a head as costly as its trunk: no MTP preselected
    costly = dataclasses.replace(verdict, mtp_cost_ratio=1.4)
    key = loadcheck._verdict_key(path, None)
    loadcheck._remember(key, costly)
    try:
        tab.set_wanted(None, SpecMode.PROMPT_LOOKUP, None)  # no saved choice for it
        tab._rank(tab.target)  # type: ignore[arg-type]
        qtbot.waitUntil(lambda: not tab.ranking, timeout=SCAN_TIMEOUT_MS)
        assert tab.predictions[MTP].cost_ratio == 1.4
        assert tab.drafter is not None and tab.drafter.mode is SpecMode.PROMPT_LOOKUP
    finally:
        loadcheck._remember(key, verdict)
