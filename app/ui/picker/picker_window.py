"""The model picker window: Library, Catalog and Downloads, and the choice it hands over.

The user picks a target and a drafter (a draft model, prompt lookup, or none) in the
Library tab, or downloads a curated pair from the Catalog tab first. "Use these models"
emits :attr:`ModelPickerWindow.models_chosen` with a
:class:`~app.ui.picker.payloads.ModelsChosen`, for the chat window to load (and save);
a picker opened on its own saves the choice in the settings (``model.target_path``,
``model.draft_path``, ``speculation.mode``) for the next start.

Threads: scans, draft ranking and the remote pairing check run on this window's
QThreadPool; downloads run on the :class:`~app.ui.picker.downloads.DownloadQueue`'s.
Closing the window cancels a scan (between two files) and drops the results of a check
still in flight. Downloads belong to the queue: with a queue passed in by the chat
window they go on in the background and are shown again when the picker is reopened;
a picker that made its own queue (opened on its own) pauses them when it closes, and
they are offered for resuming the next time.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QCoreApplication, Qt, QThreadPool, Signal, Slot
from PySide6.QtGui import QCloseEvent, QIcon, QKeySequence, QShortcut, QShowEvent
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QTabWidget, QVBoxLayout, QWidget

from app.catalog.curated import CuratedPair
from app.catalog.library import Library
from app.chat.events import UserError
from app.formatting import format_bytes
from app.options import SpecMode
from app.store import paths
from app.store.settings import Settings, load_settings, save_settings
from app.ui.panels import MessageBarWidget
from app.ui.picker.catalog_tab import CatalogTabWidget
from app.ui.picker.downloads import DownloadJobState, DownloadQueue, DownloadsTabWidget
from app.ui.picker.library_tab import LibraryTabWidget
from app.ui.picker.payloads import LibraryScanned, ModelsChosen
from app.ui.qt_compat import apply_qt_workarounds
from app.ui.labels import Label

log = logging.getLogger(__name__)

#: Threads for scans, draft ranking and remote checks (downloads have their own pool).
TASK_THREADS = 2

PICKER_STYLE = """
#pickerSectionTitle { font-weight: 700; color: #1a365d; }
#pickerHint { color: #718096; }
#pickerSummary { color: #2d3748; }
#pickerSummary[problem="true"] { color: #c53030; }
#downloadRow { background: #ffffff; border: 1px solid #e3e8ee; border-radius: 8px; }
#downloadTitle { font-weight: 600; color: #1a202c; }
#downloadRepo { color: #718096; }
#downloadStatus { color: #4a5568; }
#downloadError { color: #c53030; }
"""


class ModelPickerWindow(QWidget):
    """Library / Catalog / Downloads. See the module docstring.

    Args:
        settings: the chat window's settings (the picker shows them; the window applies
            and saves a choice); None: read the settings file, and write the choice there.
        downloads: the app's download queue; None: the picker makes one and pauses its
            downloads when it closes.
        library: where models are found; None: from the saved library settings.
        pairs: the curated pairs (default: the bundled catalog).
        parent: a parent widget; the picker is still a window of its own.
    """

    models_chosen = Signal(object)
    """ModelsChosen: the user chose a target and drafter. Opened on its own (no settings
    passed in) the picker has saved the choice for the next start already; in the app the
    receiver applies it (:meth:`app.chat.conversation.ChatController.use_models`), which
    also refuses it while a reply runs."""

    def __init__(self, *, settings: Settings | None = None, downloads: DownloadQueue | None = None,
                 library: Library | None = None, pairs: tuple[CuratedPair, ...] | None = None,
                 parent: QWidget | None = None) -> None:
        apply_qt_workarounds()
        super().__init__(parent, Qt.WindowType.Window)
        self.setObjectName("modelPicker")
        self.setWindowTitle("Models · Tandem")
        icon = paths.icon_path("png")
        if icon.is_file():
            self.setWindowIcon(QIcon(str(icon)))
        self.setStyleSheet(PICKER_STYLE)
        # Esc closes it, as a dialog (a combo box's open list takes its own Esc first)
        QShortcut(QKeySequence(QKeySequence.StandardKey.Cancel), self, self.close,
                  context=Qt.ShortcutContext.WindowShortcut)
        # Created before any worker's carrier: a pool's destructor waits for its workers.
        self.tasks = QThreadPool(self)
        self.tasks.setMaxThreadCount(TASK_THREADS)
        self.settings = settings
        self.library = library if library is not None else Library()
        self._owns_downloads = downloads is None
        self.downloads = downloads if downloads is not None else DownloadQueue(self)
        self._closed = False
        # The banner of a failed catalog check belongs to that check: it goes when the
        # user leaves the tab, reopens the window or starts another check.
        self._catalog_error: UserError | None = None
        current = settings if settings is not None else load_settings().settings

        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(0)
        self.message_bar = MessageBarWidget()
        col.addWidget(self.message_bar)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("pickerTabs")
        # the draft models' predicted speedups at the k a draft model would run with
        k = current.speculation.k_for(SpecMode.DRAFT_MODEL)
        self.library_tab = LibraryTabWidget(self.library, self.tasks, draft_max=k)
        self.catalog_tab = CatalogTabWidget(self.downloads, self.tasks, self.library, pairs=pairs)
        self.downloads_tab = DownloadsTabWidget(self.downloads)
        self.tabs.addTab(self.library_tab, "Library")
        self.tabs.addTab(self.catalog_tab, "Catalog")
        self.tabs.addTab(self.downloads_tab, "Downloads")
        col.addWidget(self.tabs, 1)

        bottom = QHBoxLayout()
        bottom.setContentsMargins(12, 8, 12, 10)
        self.summary_label = Label()
        self.summary_label.setObjectName("pickerSummary")
        self.summary_label.setWordWrap(True)
        bottom.addWidget(self.summary_label, 1)
        self.use_button = QPushButton("Use these models")
        self.use_button.setObjectName("primaryButton")
        self.use_button.setDefault(True)
        self.use_button.clicked.connect(self._on_use_button_clicked)
        self.close_button = QPushButton("Close")
        self.close_button.clicked.connect(self.close)
        bottom.addWidget(self.use_button)
        bottom.addWidget(self.close_button)
        col.addLayout(bottom)

        self.library_tab.selection_changed.connect(self._on_library_tab_selection_changed)
        self.library_tab.choice_activated.connect(self._on_library_tab_choice_activated)
        self.library_tab.scan_finished.connect(self._on_library_tab_scan_finished)
        self.library_tab.failed.connect(self.show_error)
        self.catalog_tab.failed.connect(self._on_catalog_tab_failed)
        self.catalog_tab.check_started.connect(self._on_catalog_tab_check_started)
        self.tabs.currentChanged.connect(self._on_tabs_current_changed)
        self.catalog_tab.downloads_started.connect(self._on_catalog_tab_downloads_started)
        self.downloads.download_completed.connect(self._on_downloads_download_completed)
        self.downloads.job_changed.connect(self._on_downloads_job_changed)

        # in the app the settings are what the chat window uses now: shown as they are
        self.library_tab.set_wanted(current.model.target_path, current.speculation.mode,
                                    current.model.draft_path, in_use=settings is not None)
        self.downloads_tab.set_models_dir(self._models_dir())
        self.downloads.restore_pending(self._models_dir())
        self._update_downloads_tab_title()
        if (err := self.catalog_tab.startup_error()) is not None:
            self.show_error(err)
        self._update_summary()
        self.resize(1280, 800)
        self.library_tab.rescan()

    def _models_dir(self) -> Path:
        return self.library.models_dir

    # -- public -----------------------------------------------------------------------
    def open_tab(self, name: str) -> None:
        """Show the tab called ``name``: "Library", "Catalog" or "Downloads"."""
        for i in range(self.tabs.count()):
            if self.tabs.tabText(i).split(" ")[0] == name:
                self.tabs.setCurrentIndex(i)
                return
        raise ValueError(f"no tab {name!r}")

    @Slot(object)
    def show_error(self, error: UserError) -> None:
        """The one place where the picker's errors reach the user."""
        if error.detail:
            log.error("%s: %s\n%s", error.title, error.message, error.detail)
        self.message_bar.show_error(error)

    def choice(self) -> ModelsChosen | None:
        """The target and drafter selected now, or None when they cannot be used."""
        target, drafter = self.library_tab.target, self.library_tab.drafter
        if target is None or drafter is None or not drafter.usable:
            return None
        return ModelsChosen(target.path, drafter.draft_path, drafter.mode)

    def apply_choice(self) -> ModelsChosen | None:
        """Emit :attr:`models_chosen` with the selected target and drafter, and close;
        opened on its own, save them in the settings first. Returns what was chosen
        (None: nothing usable)."""
        chosen = self.choice()
        if chosen is None:
            return None
        if self.settings is None:  # on its own: the next start uses the choice
            s = load_settings().settings
            s.model.target_path = chosen.target_path
            s.model.draft_path = chosen.draft_path
            s.speculation = s.speculation.with_changes(mode=chosen.speculation_mode)
            try:
                save_settings(s)
            except OSError as exc:
                self.show_error(UserError(
                    "Settings not saved", f"The choice could not be saved: {exc}",
                    level="warning"))
        self.models_chosen.emit(chosen)
        self.close()
        return chosen

    def shutdown(self, timeout_ms: int = 5000) -> bool:
        """Stop the picker's background work and wait for it (tests and app exit).

        Cancels a scan, waits for the task pool, delivers the tasks' last results (so no
        signal for this window is left waiting in the event queue), and pauses this
        picker's own downloads (never those of a queue passed in). Returns True when
        everything stopped in time.
        """
        self._closed = True  # no rescan after a download completes from now on
        self.library_tab.cancel_scan()
        ok = bool(self.tasks.waitForDone(timeout_ms))
        if self._owns_downloads:
            ok = self.downloads.pause_all(timeout_ms) and ok
        QCoreApplication.sendPostedEvents()
        return ok

    # -- state --------------------------------------------------------------------------
    def _update_summary(self) -> None:
        target, drafter = self.library_tab.target, self.library_tab.drafter
        problem = False
        if target is None:
            text = "Choose a target model in the Library tab."
            problem = True
        else:
            size = format_bytes(target.info.file_size) if target.info is not None else ""
            text = f"Target: {target.title} ({size})"
            if self.library_tab.ranking:
                text += "  ·  checking drafts…"
            elif drafter is None:
                text += "  ·  choose a drafter"
            elif not drafter.usable and drafter.candidate is not None:
                text += (f"  ·  {drafter.label} cannot draft for it "
                         f"({drafter.candidate.reason})")
                problem = True
            else:
                text += f"  ·  Drafter: {drafter.label}"
        self.summary_label.setText(text)
        self.summary_label.setProperty("problem", problem)
        self.summary_label.style().unpolish(self.summary_label)
        self.summary_label.style().polish(self.summary_label)
        self.use_button.setEnabled(self.choice() is not None)

    def _update_downloads_tab_title(self) -> None:
        n = self.downloads.active_count()
        self.tabs.setTabText(2, f"Downloads ({n})" if n else "Downloads")

    @Slot()
    def _on_library_tab_selection_changed(self) -> None:
        self._update_summary()

    @Slot()
    def _on_library_tab_choice_activated(self) -> None:
        self.apply_choice()

    @Slot(object)
    def _on_library_tab_scan_finished(self, _scanned: LibraryScanned) -> None:
        self.downloads_tab.set_models_dir(self._models_dir())
        self.catalog_tab.refresh_downloaded()

    @Slot(object)
    def _on_catalog_tab_downloads_started(self, _ids: object) -> None:
        self.open_tab("Downloads")

    @Slot(object)
    def _on_catalog_tab_failed(self, error: UserError) -> None:
        self.show_error(error)
        self._catalog_error = error

    @Slot()
    def _on_catalog_tab_check_started(self) -> None:
        self._clear_catalog_error()

    @Slot(int)
    def _on_tabs_current_changed(self, _index: int) -> None:
        if self.tabs.currentWidget() is not self.catalog_tab:
            self._clear_catalog_error()

    def _clear_catalog_error(self) -> None:
        if self._catalog_error is not None and self.message_bar.current is self._catalog_error:
            self.message_bar.clear()
        self._catalog_error = None

    @Slot(object)
    def _on_downloads_download_completed(self, _state: DownloadJobState) -> None:
        if not self._closed:
            self.library_tab.rescan()

    @Slot(object)
    def _on_downloads_job_changed(self, _state: DownloadJobState) -> None:
        self._update_downloads_tab_title()

    @Slot()
    def _on_use_button_clicked(self) -> None:
        self.apply_choice()

    # -- showing and closing ---------------------------------------------------------------
    def showEvent(self, event: QShowEvent) -> None:
        reopened = self._closed
        self._closed = False
        super().showEvent(event)
        if reopened:
            self._clear_catalog_error()
            self.library_tab.rescan()

    def closeEvent(self, event: QCloseEvent) -> None:
        """Cancel a scan; pause the downloads only when this picker owns their queue."""
        self._closed = True
        self.library_tab.cancel_scan()
        if self._owns_downloads:
            self.downloads.pause_all()
        super().closeEvent(event)
