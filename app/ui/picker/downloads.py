"""Downloads: the long-lived queue that runs them, and the picker's Downloads tab.

:class:`DownloadQueue` owns the download jobs and a QThreadPool they run on (one
:class:`~app.ui.picker.workers.DownloadWorker` per job). It lives as long as whoever
creates it: the chat window keeps one for the whole session, so closing the picker does
not stop a download; the picker finds it still running when it is opened again. When
the app quits, :meth:`DownloadQueue.shutdown` pauses every download (partial files are
kept) and joins the pool; the next start offers them again as paused downloads
(:func:`app.catalog.hub.pending_downloads`), and Resume continues where they stopped.
A partial file that another window or process is downloading is neither offered nor
deleted here: Cancel and Remove leave it to that download (the row says so).

:class:`DownloadsTabWidget` shows the jobs: bytes, speed and ETA per job, Pause/Resume,
Cancel (Remove once failed or finished), and errors in full (a gated repository's message says where to accept the
licence). Progress arrives at most ten times a second per job; the tab repaints
progress at most five times a second.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from PySide6.QtCore import QCoreApplication, QObject, Qt, QThreadPool, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.catalog.hub import PARTIAL_DIR, Download, DownloadProgress, pending_downloads
from app.chat.events import UserError
from app.errors import TandemError
from app.ui.picker.formatting import format_download
from app.ui.picker.payloads import DownloadEnded, DownloadProgressed
from app.ui.picker.workers import DownloadSignals, DownloadWorker
from app.ui.qt_compat import apply_qt_workarounds
from app.ui.labels import Label

log = logging.getLogger(__name__)

JobStatus = Literal["queued", "running", "pausing", "paused", "cancelling", "cancelled", "failed", "done"]

#: Progress repaints of the Downloads tab, at most this often (milliseconds).
REPAINT_MS = 200
#: Downloads that run at the same time (a curated pair is two).
MAX_PARALLEL_DOWNLOADS = 4


@dataclass(frozen=True, slots=True)
class DownloadJobState:
    """A snapshot of one download job, as the Downloads tab shows it.

    Attributes:
        job_id: the queue's id for the job.
        repo_id, filenames: what is downloaded (every part of a split model).
        status: ``queued`` (starting), ``running``, ``pausing``, ``paused`` (partial
            files kept), ``cancelling``, ``cancelled`` (partial files deleted, except
            one another window or process is downloading: then ``error`` says so),
            ``failed`` (``error`` says why; Resume retries), ``done`` (``path`` is in
            the models folder).
        progress: the latest progress (None before the first report).
        error: why the job failed, or (a warning) what a cancel left alone.
        path: the model file to load, once done.
    """

    job_id: int
    repo_id: str
    filenames: tuple[str, ...]
    status: JobStatus
    progress: DownloadProgress | None = None
    error: UserError | None = None
    path: Path | None = None

    @property
    def title(self) -> str:
        first = PurePosixPath(self.filenames[0]).name
        more = f" (+{len(self.filenames) - 1} parts)" if len(self.filenames) > 1 else ""
        return f"{first}{more}"

    @property
    def active(self) -> bool:
        """A worker runs (or is about to) for this job."""
        return self.status in ("queued", "running", "pausing", "cancelling")

    @property
    def finished(self) -> bool:
        return self.status in ("done", "cancelled")


class DownloadQueue(QObject):
    """Runs download jobs on its own QThreadPool and keeps their state (GUI thread).

    Create one per app session and keep it (the chat window owns it); call
    :meth:`shutdown` before quitting. Workers report through queued signals; only this
    object changes job state, always on the GUI thread.
    """

    job_added = Signal(object)
    """DownloadJobState: a job was started or a pending download was found."""
    job_changed = Signal(object)
    """DownloadJobState: a job's status or progress changed."""
    job_removed = Signal(int)
    """The job with this id was removed from the list."""
    download_completed = Signal(object)
    """DownloadJobState: a job finished and its file is in the models folder."""

    def __init__(self, parent: QObject | None = None, *,
                 max_parallel: int = MAX_PARALLEL_DOWNLOADS) -> None:
        apply_qt_workarounds()  # every emit drops a reference to True on PySide6 6.12.0
        super().__init__(parent)
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(max_parallel)
        self._signals = DownloadSignals(self)  # after the pool: see app.ui.picker.workers
        self._signals.progressed.connect(self._on_worker_progressed)
        self._signals.finished.connect(self._on_worker_finished)
        self._jobs: dict[int, DownloadJobState] = {}
        self._downloads: dict[int, Download] = {}
        self._requested: dict[int, Literal["pause", "cancel"]] = {}
        self._next_id = 1
        self._shut_down = False
        app = QCoreApplication.instance()
        if app is not None:  # a last line of defence; the owner calls shutdown() itself
            app.aboutToQuit.connect(self._on_app_about_to_quit)

    # -- reading ---------------------------------------------------------------------
    def jobs(self) -> list[DownloadJobState]:
        """Every job, oldest first."""
        return list(self._jobs.values())

    def job(self, job_id: int) -> DownloadJobState | None:
        return self._jobs.get(job_id)

    def active_count(self) -> int:
        return sum(1 for j in self._jobs.values() if j.active)

    def _find(self, repo_id: str, filenames: Sequence[str]) -> DownloadJobState | None:
        wanted = set(filenames)
        for j in self._jobs.values():
            if j.repo_id == repo_id and wanted & set(j.filenames) and not j.finished:
                return j
        return None

    # -- control ---------------------------------------------------------------------
    def start(self, repo_id: str, filenames: str | Sequence[str], *,
              models_dir: Path | None = None, endpoint: str | None = None) -> int:
        """Start downloading ``filenames`` of ``repo_id`` into ``models_dir``.

        A job already listed for the same files is resumed (when paused or failed)
        instead of started twice.

        Returns:
            The job id.

        Raises:
            TandemError: a malformed repository id or file name, or the queue is shut down.
        """
        if self._shut_down:
            raise TandemError("Downloads are stopped: the app is quitting.")
        download = Download(repo_id, filenames, models_dir=models_dir, endpoint=endpoint)
        names = tuple(f.filename for f in download.files)
        existing = self._find(repo_id, names)
        if existing is not None:
            if existing.status in ("paused", "failed"):
                self.resume(existing.job_id)
            return existing.job_id
        job_id = self._add(download, "queued")
        self._submit(job_id)
        return job_id

    def _add(self, download: Download, status: JobStatus,
             progress: DownloadProgress | None = None) -> int:
        job_id = self._next_id
        self._next_id += 1
        state = DownloadJobState(job_id, download.repo_id,
                                 tuple(f.filename for f in download.files), status, progress)
        self._jobs[job_id] = state
        self._downloads[job_id] = download
        self.job_added.emit(state)
        return job_id

    def _submit(self, job_id: int) -> None:
        self._pool.start(DownloadWorker(job_id, self._downloads[job_id], self._signals))

    def _set(self, job_id: int, **changes: object) -> DownloadJobState:
        state = dataclasses.replace(self._jobs[job_id], **changes)  # type: ignore[arg-type]
        self._jobs[job_id] = state
        self.job_changed.emit(state)
        return state

    def pause(self, job_id: int) -> None:
        """Stop a running job soon and keep its partial files (Resume continues)."""
        state = self._jobs.get(job_id)
        if state is None or state.status not in ("queued", "running"):
            return
        self._requested[job_id] = "pause"
        self._downloads[job_id].pause()
        self._set(job_id, status="pausing")

    def resume(self, job_id: int) -> None:
        """Run a paused or failed job again from its partial files."""
        state = self._jobs.get(job_id)
        if state is None or state.status not in ("paused", "failed") or self._shut_down:
            return
        self._requested.pop(job_id, None)
        self._set(job_id, status="queued", error=None)
        self._submit(job_id)

    def cancel(self, job_id: int) -> None:
        """Stop a job and delete its partial files (a completed file is never deleted)."""
        state = self._jobs.get(job_id)
        if state is None or state.finished or state.status == "cancelling":
            return
        download = self._downloads[job_id]
        if state.active:
            self._requested[job_id] = "cancel"
            download.cancel()
            self._set(job_id, status="cancelling")
        else:  # paused or failed: no worker runs, the partial files go now
            cancelled = _discarding(download, download.cancel)
            self._set(job_id, status="cancelled" if isinstance(cancelled, list) else "failed",
                      error=_left_alone(cancelled) if isinstance(cancelled, list) else cancelled)

    def remove(self, job_id: int) -> None:
        """Take a finished (done or cancelled) or failed job off the list. A failed job's
        partial files are deleted (no worker runs for it), except one that another
        window or process is downloading; a completed file never is."""
        state = self._jobs.get(job_id)
        if state is None or not (state.finished or state.status == "failed"):
            return
        if state.status == "failed":
            download = self._downloads[job_id]
            error = _discarding(download, download.discard_partial)  # logs what it leaves
            if isinstance(error, UserError):  # a folder that refuses: the row stays
                self._set(job_id, error=error)
                return
        del self._jobs[job_id]
        self._downloads.pop(job_id, None)
        self.job_removed.emit(job_id)

    def clear_finished(self) -> None:
        for job_id in [j.job_id for j in self._jobs.values() if j.finished]:
            self.remove(job_id)

    def restore_pending(self, models_dir: Path | None = None) -> list[int]:
        """List partial downloads left by an earlier run as paused jobs (Resume continues).

        Files already listed are skipped, so calling this again is harmless; so are
        partial files that another window or process is downloading now (their lock is
        held): they are not paused, and Cancel must not delete them.

        Returns:
            The ids of the jobs added.
        """
        added: list[int] = []
        try:
            pending = pending_downloads(models_dir)
        except OSError as exc:
            log.warning("cannot look for partial downloads: %s", exc)
            return added
        for p in pending:
            if p.in_use or self._find(p.repo_id, [p.filename]) is not None:
                continue
            try:
                download = Download(p.repo_id, p.filename, models_dir=models_dir, revision=p.revision)
            except TandemError as exc:
                log.warning("ignoring partial download %s/%s: %s", p.repo_id, p.filename, exc)
                continue
            names = [f.filename for f in download.files]
            if self._find(p.repo_id, names) is not None:  # another part of a listed split model
                continue
            progress = DownloadProgress(p.repo_id, p.filename, names.index(p.filename)
                                        if p.filename in names else 0, len(names),
                                        p.downloaded, p.size, 0.0, None, "downloading")
            added.append(self._add(download, "paused", progress))
        return added

    def pause_all(self, timeout_ms: int = 15_000) -> bool:
        """Pause every running job (partial files kept) and wait for the workers to stop.

        Returns:
            True when every worker has stopped within ``timeout_ms``.
        """
        for job_id, state in self._jobs.items():
            if state.active:
                self._requested.setdefault(job_id, "pause")
                if self._requested[job_id] == "pause":
                    self._downloads[job_id].pause()
        done = bool(self._pool.waitForDone(timeout_ms))
        if not done:
            log.warning("downloads did not stop within %d ms", timeout_ms)
        QCoreApplication.sendPostedEvents(self)  # deliver the workers' last reports
        return done

    def shutdown(self, timeout_ms: int = 15_000) -> bool:
        """Before quitting: :meth:`pause_all`, and refuse new downloads from now on.

        The partial files are offered again at the next start (:meth:`restore_pending`).
        """
        self._shut_down = True
        return self.pause_all(timeout_ms)

    # -- worker reports --------------------------------------------------------------
    @Slot(object)
    def _on_worker_progressed(self, update: DownloadProgressed) -> None:
        state = self._jobs.get(update.job_id)
        if state is None or not state.active:
            return
        requested = self._requested.get(update.job_id)
        if requested is not None:
            # A stop requested before the worker's run() began is cleared by run(); ask again.
            download = self._downloads[update.job_id]
            if requested == "pause":
                download.pause()
            else:
                download.cancel()
        status: JobStatus = "running" if state.status == "queued" else state.status
        self._set(update.job_id, status=status, progress=update.progress)

    @Slot(object)
    def _on_worker_finished(self, ended: DownloadEnded) -> None:
        state = self._jobs.get(ended.job_id)
        if state is None:
            return
        requested = self._requested.pop(ended.job_id, None)
        download = self._downloads[ended.job_id]
        if ended.path is not None:
            state = self._set(ended.job_id, status="done", path=ended.path, error=None)
            self.download_completed.emit(state)
        elif requested == "cancel" or ended.stopped == "cancelled":
            left = _discarding(download, download.discard_partial)
            if isinstance(left, list):
                self._set(ended.job_id, status="cancelled", error=_left_alone(left))
            else:
                self._set(ended.job_id, status="failed", error=left)
        elif ended.stopped == "paused":
            self._set(ended.job_id, status="paused")
        else:
            self._set(ended.job_id, status="failed", error=ended.error)

    @Slot()
    def _on_app_about_to_quit(self) -> None:
        self.shutdown()


def _discarding(download: Download, discard: Callable[[], list[str]]) -> list[str] | UserError:
    """``discard()`` (a job's partial files deleted: what was left alone), or the error
    for a folder that refused (a lock file that cannot be made, a file that cannot be
    deleted: a read-only or foreign models folder), which names the folder."""
    try:
        return discard()
    except OSError as exc:
        return UserError(
            "Partial files not deleted",
            f"The partial download in {download.repo_dir / PARTIAL_DIR} could not be deleted "
            f"({exc}). "
            "Delete that folder's files by hand, or make the folder writable.",
            origin="download")


def _left_alone(filenames: Sequence[str]) -> UserError | None:
    """The warning for a cancelled job whose partial files another download is writing
    (None when there are none): they were not deleted."""
    if not filenames:
        return None
    names = ", ".join(PurePosixPath(n).name for n in filenames)
    what = (("is", "its partial file was") if len(filenames) == 1
            else ("are", "their partial files were"))
    return UserError(
        "Partial file left alone",
        f"{names} {what[0]} being downloaded by another window or process right now, so"
        f" {what[1]} not deleted. Cancel that download there, or let it finish.",
        level="warning", origin="download")


_STATUS_TEXT: dict[str, str] = {
    "queued": "Starting…",
    "pausing": "Pausing…",
    "paused": "Paused: Resume continues where it stopped",
    "cancelling": "Cancelling…",
    "cancelled": "Cancelled: partial files deleted",
    "failed": "Failed",
    "done": "Done: in the library",
}
_PHASE_TEXT: dict[str, str] = {
    "checking": "Asking the hub…",
    "downloading": "Downloading",
    "verifying": "Verifying size and sha256…",
    "done": "Finishing…",
}


def status_text(state: DownloadJobState) -> str:
    """One line: what the job is doing, with bytes, speed and ETA while it runs."""
    if state.status == "running" and state.progress is not None:
        p = state.progress
        where = f"file {p.file_index + 1} of {p.file_count} · " if p.file_count > 1 else ""
        return f"{_PHASE_TEXT.get(p.phase, p.phase)} · {where}{format_download(p)}"
    if state.status == "cancelled" and state.error is not None:
        return "Cancelled"  # the error says which partial file was left alone
    text = _STATUS_TEXT.get(state.status, state.status)
    if (state.progress is not None and state.progress.downloaded > 0
            and state.status in ("paused", "failed", "pausing")):
        text += f" · {format_download(dataclasses.replace(state.progress, speed=0.0))}"
    return text


class DownloadRowWidget(QFrame):
    """One job in the Downloads tab: file, progress bar, bytes/speed/ETA, buttons, error."""

    pause_clicked = Signal(int)
    """Pause was clicked for this job id."""
    resume_clicked = Signal(int)
    """Resume (or Retry) was clicked for this job id."""
    cancel_clicked = Signal(int)
    """Cancel was clicked for this job id."""
    remove_clicked = Signal(int)
    """Remove was clicked for this finished or failed job id."""

    def __init__(self, state: DownloadJobState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("downloadRow")
        self.job_id = state.job_id
        col = QVBoxLayout(self)
        col.setContentsMargins(10, 8, 10, 8)
        col.setSpacing(4)
        top = QHBoxLayout()
        self.title_label = Label(state.title)
        self.title_label.setObjectName("downloadTitle")
        self.repo_label = Label(state.repo_id)
        self.repo_label.setObjectName("downloadRepo")
        top.addWidget(self.title_label)
        top.addWidget(self.repo_label)
        top.addStretch(1)
        self.pause_button = QPushButton("Pause")
        self.pause_button.clicked.connect(self._on_pause_button_clicked)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop and delete the partial file")
        self.cancel_button.clicked.connect(self._on_cancel_button_clicked)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setToolTip("Take this line off the list")
        self.remove_button.clicked.connect(self._on_remove_button_clicked)
        for b in (self.pause_button, self.cancel_button, self.remove_button):
            top.addWidget(b)
        col.addLayout(top)
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 1000)
        self.progress_bar.setTextVisible(True)
        col.addWidget(self.progress_bar)
        self.status_label = Label()
        self.status_label.setObjectName("downloadStatus")
        col.addWidget(self.status_label)
        self.error_label = Label()
        self.error_label.setObjectName("downloadError")
        self.error_label.setWordWrap(True)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.hide()
        col.addWidget(self.error_label)
        self.state = state
        self.set_state(state)

    def set_state(self, state: DownloadJobState) -> None:
        self.state = state
        fraction = state.progress.fraction if state.progress is not None else None
        if state.status == "done":
            fraction = 1.0
        if fraction is None:
            self.progress_bar.setRange(0, 0 if state.active else 1000)  # busy while asking
        else:
            self.progress_bar.setRange(0, 1000)
            self.progress_bar.setValue(int(round(fraction * 1000)))
            self.progress_bar.setFormat(f"{fraction * 100:.1f}%")
        self.status_label.setText(status_text(state))
        if state.status in ("paused", "failed"):
            self.pause_button.setText("Retry" if state.status == "failed" else "Resume")
        else:
            self.pause_button.setText("Pause")
        failed = state.status == "failed"
        self.pause_button.setVisible(not state.finished)
        self.pause_button.setEnabled(state.status in ("queued", "running", "paused", "failed"))
        # A failed download has nothing to cancel: Remove deletes what it left behind.
        self.cancel_button.setVisible(not state.finished and not failed)
        self.cancel_button.setEnabled(state.status != "cancelling")
        self.remove_button.setVisible(state.finished or failed)
        self.remove_button.setToolTip(
            "Delete the partial file and take this line off the list" if failed
            else "Take this line off the list")
        if state.error is not None:
            self.error_label.setText(state.error.message)
            self.error_label.show()
        else:
            self.error_label.hide()

    @Slot()
    def _on_pause_button_clicked(self) -> None:
        if self.state.status in ("paused", "failed"):
            self.resume_clicked.emit(self.job_id)
        else:
            self.pause_clicked.emit(self.job_id)

    @Slot()
    def _on_cancel_button_clicked(self) -> None:
        self.cancel_clicked.emit(self.job_id)

    @Slot()
    def _on_remove_button_clicked(self) -> None:
        self.remove_clicked.emit(self.job_id)


class DownloadsTabWidget(QWidget):
    """The Downloads tab: one :class:`DownloadRowWidget` per job of a :class:`DownloadQueue`."""

    def __init__(self, queue: DownloadQueue, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.queue = queue
        col = QVBoxLayout(self)
        col.setContentsMargins(10, 10, 10, 10)
        top = QHBoxLayout()
        self.where_label = Label()
        self.where_label.setObjectName("pickerHint")
        top.addWidget(self.where_label, 1)
        self.clear_button = QPushButton("Clear finished")
        self.clear_button.clicked.connect(self._on_clear_button_clicked)
        top.addWidget(self.clear_button)
        col.addLayout(top)
        self.scroll_area = QScrollArea()
        self.scroll_area.setWidgetResizable(True)
        body = QWidget()
        body.setObjectName("downloadList")
        self.rows_layout = QVBoxLayout(body)
        self.rows_layout.setContentsMargins(0, 0, 0, 0)
        self.rows_layout.setSpacing(6)
        self.empty_label = Label(
            "No downloads. Choose a pair in the Catalog tab and click Download pair.")
        self.empty_label.setObjectName("pickerHint")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.rows_layout.addWidget(self.empty_label)
        self.rows_layout.addStretch(1)
        self.scroll_area.setWidget(body)
        col.addWidget(self.scroll_area, 1)
        self.rows: dict[int, DownloadRowWidget] = {}
        self._dirty: dict[int, DownloadJobState] = {}
        self._repaint_timer = QTimer(self)
        self._repaint_timer.setSingleShot(True)
        self._repaint_timer.setInterval(REPAINT_MS)
        self._repaint_timer.timeout.connect(self._on_repaint_timer_timeout)
        queue.job_added.connect(self._on_queue_job_added)
        queue.job_changed.connect(self._on_queue_job_changed)
        queue.job_removed.connect(self._on_queue_job_removed)
        for state in queue.jobs():
            self._on_queue_job_added(state)

    def set_models_dir(self, folder: Path) -> None:
        self.where_label.setText(f"Downloads go to {folder}")

    def _update_empty(self) -> None:
        self.empty_label.setVisible(not self.rows)

    @Slot(object)
    def _on_queue_job_added(self, state: DownloadJobState) -> None:
        if state.job_id in self.rows:
            return
        row = DownloadRowWidget(state)
        row.pause_clicked.connect(self._on_row_pause_clicked)
        row.resume_clicked.connect(self._on_row_resume_clicked)
        row.cancel_clicked.connect(self._on_row_cancel_clicked)
        row.remove_clicked.connect(self._on_row_remove_clicked)
        self.rows[state.job_id] = row
        self.rows_layout.insertWidget(self.rows_layout.count() - 1, row)
        self._update_empty()

    @Slot(object)
    def _on_queue_job_changed(self, state: DownloadJobState) -> None:
        row = self.rows.get(state.job_id)
        if row is None:
            return
        if state.status != row.state.status:  # status changes show at once
            self._dirty.pop(state.job_id, None)
            row.set_state(state)
            return
        self._dirty[state.job_id] = state  # progress: repainted by the timer
        if not self._repaint_timer.isActive():
            self._repaint_timer.start()

    @Slot(int)
    def _on_queue_job_removed(self, job_id: int) -> None:
        row = self.rows.pop(job_id, None)
        self._dirty.pop(job_id, None)
        if row is not None:
            row.hide()
            row.deleteLater()
        self._update_empty()

    @Slot()
    def _on_repaint_timer_timeout(self) -> None:
        dirty, self._dirty = self._dirty, {}
        for job_id, state in dirty.items():
            row = self.rows.get(job_id)
            if row is not None:
                row.set_state(state)

    @Slot(int)
    def _on_row_pause_clicked(self, job_id: int) -> None:
        self.queue.pause(job_id)

    @Slot(int)
    def _on_row_resume_clicked(self, job_id: int) -> None:
        self.queue.resume(job_id)

    @Slot(int)
    def _on_row_cancel_clicked(self, job_id: int) -> None:
        self.queue.cancel(job_id)

    @Slot(int)
    def _on_row_remove_clicked(self, job_id: int) -> None:
        self.queue.remove(job_id)

    @Slot()
    def _on_clear_button_clicked(self) -> None:
        self.queue.clear_finished()
