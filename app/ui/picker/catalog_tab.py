"""The picker's Catalog tab: curated target/draft pairs, checked before they are downloaded.

The pairs come from ``resources/catalog/pairs.json`` (:mod:`app.catalog.curated`). For the
selected pair the user picks a quantization for each side and sees the sizes; "Check
pair" reads both GGUF headers from the hub with HTTP range requests and runs the pairing
check on them (:func:`app.catalog.hub.check_curated_pair`, a few MB instead of
gigabytes), on the picker's thread pool; "Download pair" starts both downloads in the
:class:`~app.ui.picker.downloads.DownloadQueue`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from PySide6.QtCore import QThreadPool, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.catalog.curated import CuratedModel, CuratedPair, load_curated_pairs
from app.catalog.hub import check_curated_pair
from app.catalog.library import Library
from app.catalog.units import format_bytes
from app.errors import TandemError
from app.ui.payloads import UserError
from app.ui.picker.downloads import DownloadQueue
from app.ui.picker.library_tab import top_items
from app.ui.picker.pair_check import PairCheckWidget
from app.ui.picker.payloads import PairChecked, TaskOutcome
from app.ui.picker.workers import TaskSignals, TaskWorker

_PAIR_ROLE = Qt.ItemDataRole.UserRole


def _approx(size: int, approx: bool) -> str:
    return ("≈ " if approx else "") + format_bytes(size)


def _check_job(pair: CuratedPair, tq: str, dq: str) -> Callable[
        [Callable[[object], None], threading.Event], PairChecked]:
    def job(_report: Callable[[object], None], _cancel: threading.Event) -> PairChecked:
        return PairChecked(pair.id, tq, dq,
                           check_curated_pair(pair, target_quant=tq, draft_quant=dq))
    return job


class CatalogTabWidget(QWidget):
    """Curated pairs (left) and the selected pair with quantizations, check and download
    (right). See the module docstring.

    Args:
        downloads: where "Download pair" starts the two jobs.
        tasks: the thread pool for the remote check.
        library: the library, for its models folder (which can change while open).
        pairs: the curated pairs (default: :func:`load_curated_pairs`).
    """

    downloads_started = Signal(object)
    """tuple[int, int]: "Download pair" started (or resumed) these two job ids."""
    pair_checked = Signal(object)
    """PairChecked: a remote pairing check finished and is shown."""
    failed = Signal(object)
    """UserError: the catalog could not be read, a check or a download could not start."""

    def __init__(self, downloads: DownloadQueue, tasks: QThreadPool, library: Library, *,
                 pairs: tuple[CuratedPair, ...] | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.downloads = downloads
        self._tasks = tasks
        self._library = library  # not a bound method of the window: no reference cycle
        self._pairs_error: UserError | None = None
        if pairs is None:
            try:
                pairs = load_curated_pairs()
            except TandemError as exc:
                pairs = ()
                self._pairs_error = UserError("Catalog unavailable", str(exc))
        self.pairs = pairs
        self.checks: dict[tuple[str, str, str], PairChecked] = {}
        self._checking: tuple[str, str, str] | None = None
        self._check_generation = 0
        self._check_signals = TaskSignals(self)  # owned here: see app.ui.picker.workers
        self._check_signals.finished.connect(self._on_check_worker_finished)
        self._build()
        if self.pairs:
            self.pair_list.setCurrentItem(top_items(self.pair_list)[0])

    def startup_error(self) -> UserError | None:
        """Why the catalog is empty, if it could not be read."""
        return self._pairs_error

    # -- layout -----------------------------------------------------------------------
    def _build(self) -> None:
        col = QVBoxLayout(self)
        col.setContentsMargins(10, 10, 10, 6)
        split = QSplitter(Qt.Orientation.Horizontal)
        self.pair_list = QTreeWidget()
        self.pair_list.setObjectName("pairList")
        self.pair_list.setHeaderLabels(["Pair", "Use", "Download"])
        self.pair_list.setRootIsDecorated(False)
        self.pair_list.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.pair_list.header().setStretchLastSection(False)
        for pair in self.pairs:
            t, d = pair.target.file_for(), pair.draft.file_for()
            item = QTreeWidgetItem([f"{pair.target.name} + {pair.draft.name}", pair.use,
                                    _approx(t.size_bytes + d.size_bytes,
                                            t.size_approx or d.size_approx)])
            item.setToolTip(0, pair.title)
            item.setData(0, _PAIR_ROLE, pair.id)
            self.pair_list.addTopLevelItem(item)
        self.pair_list.currentItemChanged.connect(self._on_pair_list_current_item_changed)
        split.addWidget(self.pair_list)

        right = QWidget()
        rcol = QVBoxLayout(right)
        rcol.setContentsMargins(8, 0, 0, 0)
        self.title_label = QLabel()
        self.title_label.setObjectName("pickerSectionTitle")
        self.title_label.setWordWrap(True)
        rcol.addWidget(self.title_label)
        self.note_label = QLabel()
        self.note_label.setWordWrap(True)
        self.note_label.setObjectName("pickerHint")
        rcol.addWidget(self.note_label)
        form = QFormLayout()
        self.target_label = QLabel()
        self.target_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.target_quant = QComboBox()
        self.draft_label = QLabel()
        self.draft_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.draft_quant = QComboBox()
        form.addRow("Target", self.target_label)
        form.addRow("Quantization", self.target_quant)
        form.addRow("Draft", self.draft_label)
        form.addRow("Quantization", self.draft_quant)
        self.total_label = QLabel()
        form.addRow("Total", self.total_label)
        rcol.addLayout(form)
        self.target_quant.currentIndexChanged.connect(self._on_target_quant_current_index_changed)
        self.draft_quant.currentIndexChanged.connect(self._on_draft_quant_current_index_changed)
        buttons = QHBoxLayout()
        self.check_button = QPushButton("Check pair")
        self.check_button.setToolTip("Read both GGUF headers from the hub (a few MB) and check "
                                     "that the draft fits the target, before downloading")
        self.check_button.clicked.connect(self._on_check_button_clicked)
        self.download_button = QPushButton("Download pair")
        self.download_button.setObjectName("primaryButton")
        self.download_button.clicked.connect(self._on_download_button_clicked)
        buttons.addWidget(self.check_button)
        buttons.addWidget(self.download_button)
        buttons.addStretch(1)
        rcol.addLayout(buttons)
        self.status_label = QLabel()
        self.status_label.setWordWrap(True)
        rcol.addWidget(self.status_label)
        self.pair_check = PairCheckWidget()
        self.pair_check.show_message("Check before download",
                                     "Check pair reads the two headers from the hub and runs "
                                     "llama.cpp's pairing rule on them.")
        rcol.addWidget(self.pair_check, 1)
        split.addWidget(right)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        split.setSizes([600, 680])
        col.addWidget(split, 1)

    # -- selection ----------------------------------------------------------------------
    @property
    def pair(self) -> CuratedPair | None:
        item = self.pair_list.currentItem()
        if item is None:
            return None
        pair_id = item.data(0, _PAIR_ROLE)
        return next((p for p in self.pairs if p.id == pair_id), None)

    def select_pair(self, pair_id: str) -> bool:
        for item in top_items(self.pair_list):
            if item.data(0, _PAIR_ROLE) == pair_id:
                self.pair_list.setCurrentItem(item)
                return True
        return False

    def quants(self) -> tuple[str, str]:
        return str(self.target_quant.currentData()), str(self.draft_quant.currentData())

    def _fill_quants(self, combo: QComboBox, model: CuratedModel) -> None:
        combo.blockSignals(True)
        combo.clear()
        for f in model.files:
            combo.addItem(f"{f.quant}  ·  {_approx(f.size_bytes, f.size_approx)}", f.quant)
        combo.setCurrentIndex(max(0, combo.findData(model.default_quant)))
        combo.blockSignals(False)

    def _downloaded(self, model: CuratedModel, quant: str) -> bool:
        owner, name = model.repo.split("/", 1)
        folder = self._library.models_dir / owner / name
        return all((folder / n).is_file() for n in model.file_for(quant).filenames)

    @Slot(QTreeWidgetItem, QTreeWidgetItem)
    def _on_pair_list_current_item_changed(self, _current: QTreeWidgetItem | None,
                                           _previous: QTreeWidgetItem | None) -> None:
        pair = self.pair
        if pair is None:
            return
        self.title_label.setText(pair.title)
        self.note_label.setText(pair.note)
        self._fill_quants(self.target_quant, pair.target)
        self._fill_quants(self.draft_quant, pair.draft)
        self._refresh()

    @Slot(int)
    def _on_target_quant_current_index_changed(self, _index: int) -> None:
        self._refresh()

    @Slot(int)
    def _on_draft_quant_current_index_changed(self, _index: int) -> None:
        self._refresh()

    def _refresh(self) -> None:
        pair = self.pair
        if pair is None:
            return
        tq, dq = self.quants()
        tf, df = pair.target.file_for(tq), pair.draft.file_for(dq)

        def describe(model: CuratedModel, quant: str) -> str:
            f = model.file_for(quant)
            have = "  ✓ downloaded" if self._downloaded(model, quant) else ""
            lic = f" · {model.license}" if model.license else ""
            return f"{model.name}  ({model.repo}){lic}\n{f.file}{have}"

        self.target_label.setText(describe(pair.target, tq))
        self.draft_label.setText(describe(pair.draft, dq))
        approx = tf.size_approx or df.size_approx
        ratio = df.size_bytes / tf.size_bytes
        self.total_label.setText(
            f"{_approx(tf.size_bytes + df.size_bytes, approx)} to download · draft/target size "
            f"ratio ≈ {ratio:.2f} (the estimated draft cost ratio c)")
        key = (pair.id, tq, dq)
        checked = self.checks.get(key)
        if checked is not None:
            self._show_check(checked)
        elif self._checking == key:
            self.pair_check.show_message("Checking…", "Reading both headers from the hub…")
        else:
            self.pair_check.show_message(
                "Check before download",
                "Check pair reads the two headers from the hub (a few MB, not the whole files) "
                "and runs llama.cpp's pairing rule on them.")
        self.check_button.setEnabled(self._checking != key)

    # -- check and download ---------------------------------------------------------------
    def check_pair(self) -> None:
        """Run the remote pairing check of the selected pair off the GUI thread."""
        pair = self.pair
        if pair is None:
            return
        tq, dq = self.quants()
        self._check_generation += 1
        self._checking = (pair.id, tq, dq)
        self.status_label.setText(f"Checking {pair.target.name} {tq} with {pair.draft.name} {dq} "
                                  "on the hub…")
        self._tasks.start(TaskWorker(_check_job(pair, tq, dq), self._check_signals,
                                     title="Pair check failed",
                                     generation=self._check_generation))
        self._refresh()

    @Slot(object)
    def _on_check_worker_finished(self, outcome: TaskOutcome) -> None:
        if outcome.generation != self._check_generation:
            return
        self._checking = None
        if outcome.error is not None or not isinstance(outcome.value, PairChecked):
            self.status_label.setText("The check failed (see the message above).")
            self.failed.emit(outcome.error or UserError("Pair check failed", "No result."))
            self._refresh()
            return
        checked = outcome.value
        self.checks[(checked.pair_id, checked.target_quant, checked.draft_quant)] = checked
        verdict = "compatible" if checked.check.result.compatible else "incompatible"
        self.status_label.setText(f"Checked on the hub: {verdict}.")
        self._refresh()
        self.pair_checked.emit(checked)

    def _show_check(self, checked: PairChecked) -> None:
        c = checked.check
        t, d = c.target, c.draft
        note = (f"Read {format_bytes(t.bytes_fetched)} of {format_bytes(t.vocab.info.file_size)} "
                f"(target) and {format_bytes(d.bytes_fetched)} of "
                f"{format_bytes(d.vocab.info.file_size)} (draft) from the hub.")
        self.pair_check.show_result(
            f"{t.meta.file.filename} with {d.meta.file.filename}", c.result, note)

    def download_pair(self) -> tuple[int, int] | None:
        """Start downloading the selected pair's target and draft; their job ids."""
        pair = self.pair
        if pair is None:
            return None
        tq, dq = self.quants()
        folder = self._library.models_dir
        try:
            ids = (
                self.downloads.start(pair.target.repo, pair.target.file_for(tq).filenames,
                                     models_dir=folder),
                self.downloads.start(pair.draft.repo, pair.draft.file_for(dq).filenames,
                                     models_dir=folder),
            )
        except TandemError as exc:
            self.failed.emit(UserError("Download not started", str(exc)))
            return None
        self.status_label.setText(f"Downloading {pair.target.name} and {pair.draft.name}: "
                                  "see the Downloads tab.")
        self.downloads_started.emit(ids)
        return ids

    @Slot()
    def _on_check_button_clicked(self) -> None:
        self.check_pair()

    @Slot()
    def _on_download_button_clicked(self) -> None:
        self.download_pair()

    def refresh_downloaded(self) -> None:
        """Update the "downloaded" marks (after a download completed)."""
        self._refresh()
