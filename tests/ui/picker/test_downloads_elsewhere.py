"""The window's download queue and a partial download that another window or process is
writing (its lock held, here by a second lock holder in the test): it is not offered as
paused, and Cancel or Remove of this window's job leaves it alone and says so."""

from __future__ import annotations

import json
import random
from pathlib import Path

from filelock import FileLock

from app.catalog.hub import PARTIAL_DIR
from app.ui.picker import DownloadQueue
from app.ui.picker.downloads import DownloadJobState, DownloadRowWidget, status_text
from tests.catalog.fake_hub import FakeHub

REPO = "acme/busy-GGUF"
FILE = "busy-Q8_0.gguf"
SIZE = 400_000
JOB_TIMEOUT_MS = 30_000


def _leave_partial(models: Path, hub: FakeHub) -> tuple[Path, FileLock]:
    """A partial download of half the file, as a transfer writes it, and its lock (not
    taken yet)."""
    data = random.Random(2).randbytes(SIZE)
    hosted = hub.add(REPO, FILE, data)
    partial = models / REPO / PARTIAL_DIR / (FILE + ".incomplete")
    partial.parent.mkdir(parents=True)
    partial.write_bytes(data[: SIZE // 2])
    partial.with_name(partial.name + ".json").write_text(json.dumps(
        {"repo_id": REPO, "filename": FILE, "revision": "main", "etag": hosted.sha256,
         "size": SIZE, "commit": None}))
    return partial, FileLock(str(partial.with_name(partial.name + ".lock")), timeout=0)


def _wait_status(qtbot, queue: DownloadQueue, job_id: int, *statuses: str) -> DownloadJobState:  # type: ignore[no-untyped-def]
    qtbot.waitUntil(lambda: queue.job(job_id).status in statuses, timeout=JOB_TIMEOUT_MS)
    return queue.job(job_id)


def test_a_partial_being_downloaded_elsewhere_is_not_offered_as_paused(  # type: ignore[no-untyped-def]
        qtbot, hub: FakeHub, empty_models_dir: Path) -> None:
    _, other = _leave_partial(empty_models_dir, hub)
    queue = DownloadQueue()
    with other:
        assert queue.restore_pending(empty_models_dir) == []
        assert queue.jobs() == []
    [job] = queue.restore_pending(empty_models_dir)  # released: a paused download again
    assert queue.job(job).status == "paused"
    assert queue.shutdown()


def test_cancel_of_a_paused_job_leaves_a_partial_another_download_took(  # type: ignore[no-untyped-def]
        qtbot, hub: FakeHub, empty_models_dir: Path) -> None:
    partial, other = _leave_partial(empty_models_dir, hub)
    queue = DownloadQueue()
    [job] = queue.restore_pending(empty_models_dir)
    with other:  # another process resumed it since this window listed it
        queue.cancel(job)
        state = queue.job(job)
        assert state.status == "cancelled" and state.error is not None
        assert state.error.level == "warning"
        assert "another window or process" in state.error.message
        assert partial.stat().st_size == SIZE // 2
        row = DownloadRowWidget(state)
        qtbot.addWidget(row)
        assert row.status_label.text() == status_text(state) == "Cancelled"
        assert not row.error_label.isHidden() and not row.remove_button.isHidden()
    # once nobody holds it, Cancel deletes it as before
    [job2] = queue.restore_pending(empty_models_dir)
    queue.cancel(job2)
    assert queue.job(job2).status == "cancelled" and queue.job(job2).error is None
    assert list(partial.parent.glob("*.incomplete*")) == []
    assert queue.shutdown()


def test_remove_of_a_failed_job_leaves_the_other_downloads_partial(  # type: ignore[no-untyped-def]
        qtbot, hub: FakeHub, empty_models_dir: Path) -> None:
    partial, other = _leave_partial(empty_models_dir, hub)
    queue = DownloadQueue()
    with other:
        job = queue.start(REPO, FILE, models_dir=empty_models_dir)
        state = _wait_status(qtbot, queue, job, "failed", "done")
        assert state.status == "failed" and state.error is not None
        assert "already being downloaded" in state.error.message
        queue.remove(job)
        assert queue.job(job) is None
        assert partial.stat().st_size == SIZE // 2
        assert partial.with_name(partial.name + ".json").exists()
    assert queue.shutdown()


def test_a_partial_that_cannot_be_deleted_is_said_not_raised(  # type: ignore[no-untyped-def]
        qtbot, hub: FakeHub, empty_models_dir: Path) -> None:
    """A lock file that cannot be opened (a folder in its place here; a read-only or
    foreign models folder in life): Cancel and Remove say which folder, nothing escapes
    the slot, and the row stays with the reason."""
    partial, _ = _leave_partial(empty_models_dir, hub)
    queue = DownloadQueue()
    [job] = queue.restore_pending(empty_models_dir)
    partial.with_name(partial.name + ".lock").mkdir()
    queue.cancel(job)
    state = queue.job(job)
    assert state.status == "failed" and state.error is not None
    assert state.error.title == "Partial files not deleted"
    assert str(partial.parent) in state.error.message and partial.exists()
    queue.remove(job)  # a failed job: Remove tries again, and keeps the row
    assert queue.job(job) is not None and queue.job(job).error is not None
    assert queue.shutdown()
