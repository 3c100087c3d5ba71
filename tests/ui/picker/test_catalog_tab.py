"""The Catalog tab's "From Hugging Face" field, its hub endpoint setting, and the banner of
a failed check, against the local imitation of the hub."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.catalog.curated import CuratedFile, CuratedModel, CuratedPair
from app.catalog.library import load_library_config
from app.ui.picker import ModelPickerWindow
from tests.catalog.fake_hub import FakeHub
from tests.ui.picker.conftest import TINY_DRAFT_REPO, TINY_TARGET_REPO

TIMEOUT_MS = 30_000


@pytest.fixture
def picker(qtbot, tiny_pair: CuratedPair, empty_models_dir: Path):  # type: ignore[no-untyped-def]
    w = ModelPickerWindow(pairs=(tiny_pair,))
    qtbot.addWidget(w)
    w.show()
    w.open_tab("Catalog")
    yield w
    w.close()
    assert w.shutdown()


def test_pasted_pair_is_checked_before_it_can_be_downloaded(  # type: ignore[no-untyped-def]
        qtbot, picker: ModelPickerWindow, tiny_target: Path, empty_models_dir: Path) -> None:
    tab = picker.catalog_tab
    assert not tab.hf_check_button.isEnabled() and not tab.hf_download_button.isEnabled()
    tab.hf_target_edit.setText(f"https://huggingface.co/{TINY_TARGET_REPO}/blob/main/tiny-target-F32.gguf")
    tab.hf_draft_edit.setText(f"{TINY_DRAFT_REPO}/tiny-draft-F32.gguf")
    assert tab.hf_check_button.isEnabled() and not tab.hf_download_button.isEnabled()
    with qtbot.waitSignal(tab.hub_files_checked, timeout=TIMEOUT_MS) as blocker:
        tab.hf_check_button.click()
    checked = blocker.args[0]
    assert checked.ok and checked.check is not None and checked.check.result.compatible
    assert [r[0] for r in tab.pair_check.rule_rows()] == [
        "vocab_type", "bos_token", "eos_token", "vocab_size", "token_text"]
    assert "Compatible" in tab.hf_status.text()
    assert list(empty_models_dir.iterdir()) == []  # only headers were read
    assert tab.hf_download_button.isEnabled()
    ids = tab.download_hub_files()
    assert ids is not None and len(ids) == 2
    assert picker.tabs.currentWidget() is picker.downloads_tab
    for job in ids:
        qtbot.waitUntil(lambda j=job: picker.downloads.job(j).status in ("done", "failed"),
                        timeout=TIMEOUT_MS)
        assert picker.downloads.job(job).status == "done", picker.downloads.job(job).error
    assert (empty_models_dir / TINY_TARGET_REPO / "tiny-target-F32.gguf").read_bytes() == \
        tiny_target.read_bytes()
    # editing a field drops the check: download needs a new one
    tab.hf_draft_edit.setText("")
    assert not tab.hf_download_button.isEnabled()


def test_pasted_target_alone_and_bad_input(qtbot, picker: ModelPickerWindow, hub: FakeHub,  # type: ignore[no-untyped-def]
                                           smollm_path: Path, tiny_target: Path) -> None:
    tab = picker.catalog_tab
    tab.hf_target_edit.setText("just-a-name")
    assert not tab.check_hub_files()
    assert "does not name a repository" in tab.hf_status.text()
    tab.hf_target_edit.setText(f"{TINY_TARGET_REPO} tiny-target-F32.gguf")
    with qtbot.waitSignal(tab.hub_files_checked, timeout=TIMEOUT_MS) as blocker:
        assert tab.check_hub_files()
    assert blocker.args[0].header is not None and tab.hf_download_button.isEnabled()
    assert tab.pair_check.verdict_label.text().startswith("A readable GGUF")
    assert tab.hf_status.text() == "Readable: Download fetches it."
    # an incompatible draft: shown rule by rule, Download not offered
    hub.add("acme/smol-GGUF", "smol.gguf", smollm_path)
    tab.hf_draft_edit.setText("acme/smol-GGUF/smol.gguf")
    with qtbot.waitSignal(tab.hub_files_checked, timeout=TIMEOUT_MS) as blocker:
        tab.check_hub_files()
    assert not blocker.args[0].ok
    assert tab.hf_status.text().startswith("Incompatible")
    assert not tab.hf_download_button.isEnabled()


def test_hub_endpoint_is_set_in_the_gui(qtbot, picker: ModelPickerWindow, hub: FakeHub,  # type: ignore[no-untyped-def]
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    tab = picker.catalog_tab
    assert "HF_ENDPOINT is set" in tab.endpoint_label.text()  # the fixture sets it
    monkeypatch.delenv("HF_ENDPOINT")
    tab.endpoint_edit.setText("not a url")
    tab.endpoint_button.click()
    assert "is not an http(s) address" in tab.endpoint_label.text()
    assert load_library_config().hf_endpoint is None
    tab.endpoint_edit.setText(hub.endpoint + "/")
    tab.endpoint_button.click()
    assert load_library_config().hf_endpoint == hub.endpoint
    assert f"use {hub.endpoint}" in tab.endpoint_label.text()
    # the saved endpoint is what a check uses (no HF_ENDPOINT now)
    tab.hf_target_edit.setText(f"{TINY_TARGET_REPO}/tiny-target-F32.gguf")
    with qtbot.waitSignal(tab.hub_files_checked, timeout=TIMEOUT_MS):
        tab.check_hub_files()
    tab.endpoint_edit.setText("")
    tab.endpoint_button.click()
    assert load_library_config().hf_endpoint is None


def test_pair_check_failed_banner_is_cleared_on_leaving_reopening_and_a_new_check(  # type: ignore[no-untyped-def]
        qtbot, hub: FakeHub, tiny_pair: CuratedPair, empty_models_dir: Path) -> None:
    missing = CuratedPair(
        id="missing", title="Not on the hub", target=CuratedModel(
            name="Gone", repo="acme/gone-GGUF", default_quant="F32",
            files=(CuratedFile(quant="F32", file="gone-F32.gguf", size_bytes=1000),)),
        draft=tiny_pair.draft)
    w = ModelPickerWindow(pairs=(missing, tiny_pair))
    qtbot.addWidget(w)
    w.show()
    w.open_tab("Catalog")
    tab = w.catalog_tab

    def fail() -> None:
        tab.select_pair("missing")
        with qtbot.waitSignal(tab.failed, timeout=TIMEOUT_MS):
            tab.check_pair()
        assert w.message_bar.isVisible() and w.message_bar.current.title == "Pair check failed"
        assert tab.status_label.text().startswith("Check failed:")

    fail()
    w.open_tab("Library")  # leaving the tab
    assert w.message_bar.current is None and not w.message_bar.isVisible()
    w.open_tab("Catalog")
    fail()
    w.close()  # reopening
    w.show()
    assert w.message_bar.current is None
    fail()
    tab.select_pair("tiny")  # a new check
    with qtbot.waitSignal(tab.pair_checked, timeout=TIMEOUT_MS):
        tab.check_pair()
        assert w.message_bar.current is None  # cleared when the check started
    assert w.message_bar.current is None
    w.close()
    assert w.shutdown()


def _visible_texts(window) -> list[str]:  # type: ignore[no-untyped-def]
    from PySide6.QtWidgets import QLabel

    return [label.text() for label in window.findChildren(QLabel) if label.isVisible()]


def test_an_offline_hub_error_is_shown_once(  # type: ignore[no-untyped-def]
        qtbot, picker, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the hub unreachable, a check's error text appears in one place (the banner);
    the tab's own status and the pairing panel only say that the check failed."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    tab = picker.catalog_tab
    for start, what in ((tab.check_pair, "catalog"), (tab.check_hub_files, "pasted")):
        if what == "pasted":
            tab.hf_target_edit.setText(f"{TINY_TARGET_REPO}/tiny-target-F32.gguf")
        with qtbot.waitSignal(tab.failed, timeout=TIMEOUT_MS) as failed:
            start()
        message = failed.args[0].message
        shown = [t for t in _visible_texts(picker) if message in t]
        assert len(shown) == 1, (what, shown)
        assert picker.message_bar.current is failed.args[0]


def test_an_entry_without_a_draft_is_checked_and_downloaded_alone(  # type: ignore[no-untyped-def]
        qtbot, hub: FakeHub, tiny_pair: CuratedPair, tiny_target: Path,
        empty_models_dir: Path) -> None:
    """A model that drafts with its own MTP heads or lookup: the Draft row says none, the
    check reads the target's header only, the download fetches the target only."""
    lone = CuratedPair(id="tiny-alone", title="Tiny alone", use="tests",
                       target=tiny_pair.target.model_copy(update={"mtp_layers": 1,
                                                                  "memory": "hybrid",
                                                                  "architecture": "llama"}),
                       drafters=("mtp", "suffix"))
    w = ModelPickerWindow(pairs=(lone,))
    qtbot.addWidget(w)
    w.show()
    w.open_tab("Catalog")
    tab = w.catalog_tab
    assert tab.pair_list.topLevelItem(0).text(0) == "Tiny-Target"
    assert tab.quants() == ("F32", "") and not tab.draft_quant.isEnabled()
    assert tab.draft_label.text().startswith("None")
    assert tab.check_button.text() == "Check model"
    assert tab.download_button.text() == "Download model"
    kind = tab.kind_label.text()
    assert "Hybrid memory (llama)" in kind and "1 MTP head in the file" in kind
    assert "suffix lookup" in kind
    with qtbot.waitSignal(tab.pair_checked, timeout=TIMEOUT_MS) as blocker:
        tab.check_button.click()
    checked = blocker.args[0]
    assert checked.ok and checked.check is None and checked.header is not None
    assert "A readable GGUF" in tab.pair_check.verdict_label.text()
    assert "readable" in tab.status_label.text()
    assert list(empty_models_dir.iterdir()) == []  # only the header was read
    ids = tab.download_pair()
    assert ids is not None and len(ids) == 1
    qtbot.waitUntil(lambda: w.downloads.job(ids[0]).status in ("done", "failed"),
                    timeout=TIMEOUT_MS)
    assert w.downloads.job(ids[0]).status == "done"
    assert (empty_models_dir / TINY_TARGET_REPO / "tiny-target-F32.gguf").read_bytes() == \
        tiny_target.read_bytes()
    assert not (empty_models_dir / TINY_DRAFT_REPO).exists()
    w.close()
    assert w.shutdown()
