"""The Catalog and Downloads tabs against a local imitation of the hub (HF_ENDPOINT):
the remote pairing check, a pair downloaded into the library with progress shown,
pause/resume/cancel, a gated repository's message, partial downloads found at start-up,
and closing the picker while a download runs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from app.catalog.curated import CuratedPair
from app.catalog.hub import PARTIAL_DIR
from app.ui.picker import DownloadQueue, ModelPickerWindow
from app.ui.picker.downloads import DownloadJobState
from tests.catalog.fake_hub import FakeHub
from tests.ui.picker.conftest import TINY_DRAFT_REPO, TINY_TARGET_REPO, wait_scanned

SLOW_REPO = "acme/slow-GGUF"
SLOW_FILE = "slow-Q8_0.gguf"
SLOW_SIZE = 4_000_000
JOB_TIMEOUT_MS = 30_000


@pytest.fixture
def slow_file(hub: FakeHub) -> bytes:
    """A 4 MB file served at 2 MB/s, so a download can be paused mid-way."""
    data = random.Random(0).randbytes(SLOW_SIZE)
    hub.add(SLOW_REPO, SLOW_FILE, data)
    hub.rate = 2_000_000
    return data


def _partials(models: Path, repo: str = SLOW_REPO) -> list[Path]:
    d = models / repo / PARTIAL_DIR
    return sorted(p for p in d.glob("*.incomplete")) if d.is_dir() else []


def _wait_status(qtbot, queue: DownloadQueue, job_id: int, *statuses: str) -> DownloadJobState:  # type: ignore[no-untyped-def]
    qtbot.waitUntil(lambda: queue.job(job_id).status in statuses, timeout=JOB_TIMEOUT_MS)
    return queue.job(job_id)


def _wait_bytes(qtbot, queue: DownloadQueue, job_id: int) -> None:  # type: ignore[no-untyped-def]
    def moving() -> bool:
        j = queue.job(job_id)
        return (j.status == "running" and j.progress is not None
                and j.progress.phase == "downloading" and j.progress.downloaded > 0)
    qtbot.waitUntil(moving, timeout=JOB_TIMEOUT_MS)


def test_check_pair_reads_headers_on_the_hub(qtbot, hub: FakeHub, tiny_pair: CuratedPair,  # type: ignore[no-untyped-def]
                                             empty_models_dir: Path) -> None:
    w = ModelPickerWindow(pairs=(tiny_pair,))
    qtbot.addWidget(w)
    w.open_tab("Catalog")
    tab = w.catalog_tab
    assert "Tiny-Target" in tab.target_label.text() and tab.quants() == ("F32", "F32")
    with qtbot.waitSignal(tab.pair_checked, timeout=JOB_TIMEOUT_MS) as blocker:
        tab.check_button.click()
    assert blocker.args[0].check.result.compatible
    assert [r[0] for r in tab.pair_check.rule_rows()] == [
        "vocab_type", "bos_token", "eos_token", "vocab_size", "token_text"]
    assert "from the hub" in tab.pair_check.note_label.text()
    assert "compatible" in tab.status_label.text()
    assert list((empty_models_dir).iterdir()) == []  # nothing downloaded
    assert w.shutdown()


def test_download_pair_shows_progress_and_completes_into_the_library(  # type: ignore[no-untyped-def]
        qtbot, hub: FakeHub, tiny_pair: CuratedPair, tiny_target: Path, empty_models_dir: Path) -> None:
    w = ModelPickerWindow(pairs=(tiny_pair,))
    qtbot.addWidget(w)
    w.show()
    wait_scanned(qtbot, w)
    seen: list[DownloadJobState] = []
    w.downloads.job_changed.connect(seen.append)
    ids = w.catalog_tab.download_pair()
    assert ids is not None
    assert w.tabs.currentWidget() is w.downloads_tab
    for job_id in ids:
        state = _wait_status(qtbot, w.downloads, job_id, "done", "failed")
        assert state.status == "done", state.error
    target = empty_models_dir / TINY_TARGET_REPO / "tiny-target-F32.gguf"
    assert target.read_bytes() == tiny_target.read_bytes()
    progress = [s.progress for s in seen if s.progress is not None]
    assert {p.phase for p in progress} >= {"checking", "downloading", "done"}
    assert progress[-1].downloaded == progress[-1].total == tiny_target.stat().st_size
    row = w.downloads_tab.rows[ids[0]]
    qtbot.waitUntil(lambda: row.state.status == "done", timeout=5000)
    assert row.status_label.text().startswith("Done") and row.progress_bar.value() == 1000
    assert row.remove_button.isVisible() and not row.pause_button.isVisible()
    # both files enter the library (a rescan follows each completed download)
    qtbot.waitUntil(lambda: {e.file.repo_id for e in w.library_tab.entries}
                    == {TINY_TARGET_REPO, TINY_DRAFT_REPO}, timeout=JOB_TIMEOUT_MS)
    assert "✓ downloaded" in w.catalog_tab.target_label.text()
    w.downloads_tab.clear_button.click()
    assert w.downloads.jobs() == [] and w.downloads_tab.rows == {}
    assert w.shutdown()


def test_pause_resume_and_cancel(qtbot, slow_file: bytes, empty_models_dir: Path) -> None:  # type: ignore[no-untyped-def]
    queue = DownloadQueue()
    w = ModelPickerWindow(downloads=queue)
    qtbot.addWidget(w)
    job = queue.start(SLOW_REPO, SLOW_FILE, models_dir=empty_models_dir)
    row = w.downloads_tab.rows[job]
    _wait_bytes(qtbot, queue, job)
    qtbot.waitUntil(lambda: " of " in row.status_label.text(), timeout=5000)
    assert "MB" in row.status_label.text()
    row.pause_button.click()
    state = _wait_status(qtbot, queue, job, "paused")
    assert row.pause_button.text() == "Resume"
    kept = _partials(empty_models_dir)
    assert len(kept) == 1 and 0 < kept[0].stat().st_size < SLOW_SIZE
    assert state.progress is not None and state.progress.downloaded > 0
    row.pause_button.click()  # Resume
    _wait_bytes(qtbot, queue, job)
    assert _wait_status(qtbot, queue, job, "done", "failed").status == "done"
    assert (empty_models_dir / SLOW_REPO / SLOW_FILE).read_bytes() == slow_file
    # a second job, cancelled mid-way: the partial file goes
    (empty_models_dir / SLOW_REPO / SLOW_FILE).unlink()
    job2 = queue.start(SLOW_REPO, SLOW_FILE, models_dir=empty_models_dir)
    assert job2 != job
    _wait_bytes(qtbot, queue, job2)
    w.downloads_tab.rows[job2].cancel_button.click()
    _wait_status(qtbot, queue, job2, "cancelled")
    assert _partials(empty_models_dir) == []
    assert not (empty_models_dir / SLOW_REPO / SLOW_FILE).exists()
    assert queue.shutdown()


def test_gated_repository_error_is_shown(qtbot, hub: FakeHub, empty_models_dir: Path) -> None:  # type: ignore[no-untyped-def]
    hub.add("acme/gated-GGUF", "g.gguf", b"x" * 1000)
    hub.gated["acme/gated-GGUF"] = 403
    w = ModelPickerWindow()
    qtbot.addWidget(w)
    job = w.downloads.start("acme/gated-GGUF", "g.gguf", models_dir=empty_models_dir)
    state = _wait_status(qtbot, w.downloads, job, "failed", "done")
    assert state.status == "failed" and state.error is not None
    row = w.downloads_tab.rows[job]
    qtbot.waitUntil(lambda: not row.error_label.isHidden(), timeout=5000)
    text = row.error_label.text()
    assert "acme/gated-GGUF" in text and "licence" in text
    assert row.pause_button.text() == "Retry"
    assert w.shutdown()


def test_closing_the_picker_pauses_its_own_downloads_and_they_resume_later(  # type: ignore[no-untyped-def]
        qtbot, slow_file: bytes, empty_models_dir: Path) -> None:
    w = ModelPickerWindow()
    qtbot.addWidget(w)
    w.show()
    job = w.downloads.start(SLOW_REPO, SLOW_FILE, models_dir=empty_models_dir)
    _wait_bytes(qtbot, w.downloads, job)
    w.close()  # owns its queue: pauses the download and waits for the worker
    assert w.downloads.job(job).status == "paused"
    assert w.downloads.active_count() == 0 and len(_partials(empty_models_dir)) == 1
    assert w.shutdown(1000)

    # "after a restart": a new picker offers the partial download, and Resume finishes it
    w2 = ModelPickerWindow()
    qtbot.addWidget(w2)
    [state] = w2.downloads.jobs()
    assert state.status == "paused" and state.repo_id == SLOW_REPO
    assert state.progress is not None and 0 < state.progress.downloaded < SLOW_SIZE
    assert "Paused" in w2.downloads_tab.rows[state.job_id].status_label.text()
    w2.downloads.resume(state.job_id)
    assert _wait_status(qtbot, w2.downloads, state.job_id, "done", "failed").status == "done"
    assert (empty_models_dir / SLOW_REPO / SLOW_FILE).read_bytes() == slow_file
    assert w2.shutdown()


def test_closing_the_picker_leaves_the_apps_downloads_running(  # type: ignore[no-untyped-def]
        qtbot, slow_file: bytes, empty_models_dir: Path) -> None:
    queue = DownloadQueue()
    w = ModelPickerWindow(downloads=queue)  # deleted below, so not handed to qtbot
    w.show()
    job = queue.start(SLOW_REPO, SLOW_FILE, models_dir=empty_models_dir)
    _wait_bytes(qtbot, queue, job)
    w.close()
    assert queue.job(job).status == "running"
    w.deleteLater()  # the window goes; the queue and its download stay
    assert _wait_status(qtbot, queue, job, "done", "failed").status == "done"
    # reopening shows the finished job
    w2 = ModelPickerWindow(downloads=queue)
    qtbot.addWidget(w2)
    assert w2.downloads_tab.rows[job].state.status == "done"
    assert queue.shutdown() and w2.shutdown()
    with pytest.raises(Exception, match="quitting"):
        queue.start(SLOW_REPO, SLOW_FILE, models_dir=empty_models_dir)


def test_a_failed_download_offers_remove_which_deletes_the_partial_file(  # type: ignore[no-untyped-def]
        qtbot, hub: FakeHub, empty_models_dir: Path) -> None:
    # a failed download offers "Remove", not "Cancel"
    data = random.Random(1).randbytes(300_000)
    hub.add(SLOW_REPO, SLOW_FILE, data)
    hub.drop_after[f"{SLOW_REPO}/{SLOW_FILE}"] = 200_000
    hub.size_claims[f"{SLOW_REPO}/{SLOW_FILE}"] = len(data) + 1  # never completes: it fails
    w = ModelPickerWindow()
    qtbot.addWidget(w)
    job = w.downloads.start(SLOW_REPO, SLOW_FILE, models_dir=empty_models_dir)
    state = _wait_status(qtbot, w.downloads, job, "failed", "done")
    assert state.status == "failed", state
    row = w.downloads_tab.rows[job]
    qtbot.waitUntil(lambda: row.state.status == "failed", timeout=5000)
    assert row.cancel_button.isHidden() and not row.remove_button.isHidden()
    assert "partial file" in row.remove_button.toolTip()
    assert row.pause_button.text() == "Retry"
    partial_dir = empty_models_dir / SLOW_REPO / PARTIAL_DIR
    assert len(list(partial_dir.glob("*.incomplete"))) == 1  # what the failure left behind
    row.remove_button.click()
    assert w.downloads.job(job) is None and job not in w.downloads_tab.rows
    assert list(partial_dir.glob("*.incomplete*")) == []
    assert w.shutdown()


def test_esc_closes_the_models_window_from_its_table(qtbot, empty_models_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QAbstractItemView

    w = ModelPickerWindow(pairs=())
    qtbot.addWidget(w)
    w.show()
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=5000)
    table = w.findChildren(QAbstractItemView)[0]
    table.setFocus()
    qtbot.keyClick(table, Qt.Key.Key_Escape)
    assert not w.isVisible()
    assert w.shutdown()
