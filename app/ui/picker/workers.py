"""The picker's background work: QRunnables on a QThreadPool, each with a QObject that
carries its signals to the GUI thread.

:class:`TaskWorker` runs one short job (a library scan, ranking the drafts for a target,
the remote pairing check before a download); :class:`DownloadWorker` runs one
:class:`app.catalog.hub.Download`. Workers never touch a widget and never raise: every
result, progress report and error leaves as a frozen payload
(:mod:`app.ui.picker.payloads`) on the carrier's signals, which Qt queues to the GUI
thread. Cancelling is the job's business: a ``threading.Event`` it checks (the scan), or
``Download.pause``/``cancel`` (downloads).

The carriers (:class:`TaskSignals`, :class:`DownloadSignals`) are not the workers' own:
each belongs to the widget or queue that receives the results, created on the GUI
thread after that owner's QThreadPool, and a worker only holds a reference. A carrier is
therefore never destroyed on a pool thread (PySide deletes an auto-deleted runnable,
and everything only it references, on the thread that ran it) nor while a queued signal
from it is still waiting for the GUI thread; and because a QObject deletes its children
in creation order, the pool (which waits for its workers) goes before the carriers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, QRunnable, Signal

from app.catalog.hub import Download, DownloadProgress, DownloadStopped
from app.chat.failures import user_error
from app.ui.picker.payloads import DownloadEnded, DownloadProgressed, TaskOutcome

log = logging.getLogger(__name__)

#: A job: ``job(report, cancel) -> value``. ``report`` sends a progress payload.
Job = Callable[[Callable[[object], None], threading.Event], object]


class TaskSignals(QObject):
    """The signals of :class:`TaskWorker` runs (a QRunnable cannot have its own). One
    carrier per kind of task, owned by the receiver; see the module docstring."""

    progressed = Signal(object)
    """A progress payload from the job (for example ScanProgressed)."""
    finished = Signal(object)
    """TaskOutcome: the job's value, or the error it raised as a UserError."""


class TaskWorker(QRunnable):
    """Runs ``job`` on a pool thread and reports through :attr:`signals`.

    Args:
        job: the work; it gets a ``report`` callback and the cancel event.
        signals: the receiver's carrier (never created here: see the module docstring).
        title: the title of the error shown when the job fails.
        generation: copied into the outcome so that a newer request can supersede this one.
        cancel: set it to ask the job to stop (the job decides where it checks).
    """

    def __init__(self, job: Job, signals: TaskSignals, *, title: str, generation: int = 0,
                 cancel: threading.Event | None = None) -> None:
        super().__init__()
        self.setAutoDelete(True)
        self.signals = signals
        self.cancel = cancel if cancel is not None else threading.Event()
        self._job = job
        self._title = title
        self._generation = generation

    def _report(self, payload: object) -> None:
        try:
            self.signals.progressed.emit(payload)
        except RuntimeError:  # the carrier's owner is gone (cannot happen while its pool waits)
            pass

    def run(self) -> None:
        try:
            outcome = TaskOutcome(self._generation, self._job(self._report, self.cancel))
        except BaseException as exc:  # reported as a value, never raised across threads
            error = user_error(exc, self._title)  # logs the traceback of a bug
            outcome = TaskOutcome(self._generation, None, error)
        try:
            self.signals.finished.emit(outcome)
        except RuntimeError:
            pass


class DownloadSignals(QObject):
    """The signals of :class:`DownloadWorker` runs; one carrier, owned by the queue."""

    progressed = Signal(object)
    """DownloadProgressed: bytes, speed and ETA (at most every 0.1 s)."""
    finished = Signal(object)
    """DownloadEnded: done, paused, cancelled or failed."""


class DownloadWorker(QRunnable):
    """Runs one download job (every file of it) on a pool thread.

    Pause and cancel go to the :class:`~app.catalog.hub.Download` object directly
    (thread-safe there); the worker turns the resulting ``DownloadStopped`` into
    ``DownloadEnded.stopped``.
    """

    def __init__(self, job_id: int, download: Download, signals: DownloadSignals) -> None:
        super().__init__()
        self.setAutoDelete(True)
        self.signals = signals
        self.job_id = job_id
        self.download = download

    def _on_progress(self, progress: DownloadProgress) -> None:
        try:
            self.signals.progressed.emit(DownloadProgressed(self.job_id, progress))
        except RuntimeError:
            pass

    def run(self) -> None:
        try:
            path = self.download.run(self._on_progress)
            ended = DownloadEnded(self.job_id, path)
        except DownloadStopped as stop:
            ended = DownloadEnded(self.job_id, None, stopped="paused" if stop.paused else "cancelled")
        except BaseException as exc:
            error = user_error(exc, "Download failed", origin="download")
            ended = DownloadEnded(self.job_id, None, error=error)
        try:
            self.signals.finished.emit(ended)
        except RuntimeError:
            pass
