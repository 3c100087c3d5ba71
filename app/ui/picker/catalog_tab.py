"""The picker's Catalog tab: curated target/draft pairs, checked before they are downloaded.

The pairs come from ``resources/catalog/pairs.json`` (:mod:`app.catalog.curated`). For the
selected pair the user picks a quantization for each side and sees the sizes; "Check
pair" reads both GGUF headers from the hub with HTTP range requests and runs the pairing
check on them (:func:`app.catalog.hub.check_curated_pair`, a few MB instead of
gigabytes), on the picker's thread pool; "Download pair" starts both downloads in the
:class:`~app.ui.picker.downloads.DownloadQueue`.

Below the list, "From Hugging Face" takes any repository and file the user pastes
(:func:`app.catalog.hub.parse_hub_file`), a target and optionally a draft: Check reads
their headers the same way (the pairing rule with a draft, a readable header without
one) and Download is offered once that check passed. The hub endpoint (a mirror instead
of huggingface.co) is set here too, saved in the library settings; ``HF_ENDPOINT`` in the
environment takes precedence, and the tab says so.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from pydantic import ValidationError
from PySide6.QtCore import Qt, QThreadPool, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.catalog.curated import CuratedModel, CuratedPair, load_curated_pairs
from app.catalog.hub import (
    DEFAULT_ENDPOINT,
    RemoteFile,
    check_curated_pair,
    check_curated_target,
    check_remote_pair,
    parse_hub_file,
    read_remote_gguf,
    remote_file_parts,
    resolve_endpoint,
)
from app.catalog.library import Library
from app.chat.events import UserError
from app.errors import TandemError
from app.formatting import format_bytes
from app.options import SpecMode
from app.ui.picker.downloads import DownloadQueue
from app.ui.picker.library_tab import top_items
from app.ui.picker.pair_check import PairCheckWidget
from app.ui.picker.payloads import HubFilesChecked, PairChecked, TaskOutcome
from app.ui.picker.workers import TaskSignals, TaskWorker
from app.ui.labels import Label

_PAIR_ROLE = Qt.ItemDataRole.UserRole

#: what a failed check says beside its button: the reason is in the message bar above
CHECK_FAILED_SEE_ABOVE = "the reason is in the message above."


def _approx(size: int, approx: bool) -> str:
    return ("≈ " if approx else "") + format_bytes(size)


def _check_job(pair: CuratedPair, tq: str, dq: str) -> Callable[
        [Callable[[object], None], threading.Event], PairChecked]:
    def job(_report: Callable[[object], None], _cancel: threading.Event) -> PairChecked:
        if pair.draft is None:
            return PairChecked(pair.id, tq, dq,
                               header=check_curated_target(pair, target_quant=tq))
        return PairChecked(pair.id, tq, dq,
                           check=check_curated_pair(pair, target_quant=tq, draft_quant=dq))
    return job


def _drafter_words(mode: str) -> str:
    """A catalog entry's drafter in a sentence ("suffix lookup"; the mode itself when the
    registry does not know it in this process)."""
    try:
        return SpecMode(mode).words
    except ValueError:
        return mode


def describe_kind(pair: CuratedPair) -> str:
    """What kind of model an entry is and what Tandem drafts for it with, in one line
    ("Hybrid memory (qwen35), MTP heads in the file · drafts with: …"); "" for a
    classic pair that records neither."""
    t = pair.target
    parts = []
    if t.memory == "hybrid":
        parts.append(f"Hybrid memory{f' ({t.architecture})' if t.architecture else ''}: "
                     "rolled back through recurrent-state snapshots")
    elif t.architecture:
        parts.append(f"Architecture {t.architecture}")
    if t.mtp_layers:
        parts.append(f"{t.mtp_layers} MTP head{'s' if t.mtp_layers > 1 else ''} in the file")
    if pair.draft is not None and pair.draft_kind == "mtp-assistant":
        parts.append("a separate MTP assistant as its drafter")
    if pair.drafters:
        parts.append("drafts with: " + ", ".join(_drafter_words(m) for m in pair.drafters))
    return " · ".join(parts)


def _hub_check_job(target: RemoteFile, draft: RemoteFile | None) -> Callable[
        [Callable[[object], None], threading.Event], HubFilesChecked]:
    def job(_report: Callable[[object], None], _cancel: threading.Event) -> HubFilesChecked:
        if draft is None:
            return HubFilesChecked(target, None, header=read_remote_gguf(target))
        return HubFilesChecked(target, draft, check=check_remote_pair(target, draft))
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
    """tuple[int, ...]: "Download pair" (or Download from Hugging Face) started or
    resumed these job ids."""
    pair_checked = Signal(object)
    """PairChecked: a remote pairing check finished and is shown."""
    hub_files_checked = Signal(object)
    """HubFilesChecked: the check of pasted Hugging Face files finished and is shown."""
    check_started = Signal()
    """A new check started (the window clears the banner of a failed one)."""
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
        self.hub_check: HubFilesChecked | None = None
        self._hub_checking = False
        self._hub_generation = 0
        self._hub_signals = TaskSignals(self)
        self._hub_signals.finished.connect(self._on_hub_worker_finished)
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
            files = [m.file_for() for m in pair.models]
            item = QTreeWidgetItem([pair.label, pair.use,
                                    _approx(sum(f.size_bytes for f in files),
                                            any(f.size_approx for f in files))])
            kind = describe_kind(pair)
            item.setToolTip(0, pair.title + (f"\n{kind}" if kind else ""))
            item.setData(0, _PAIR_ROLE, pair.id)
            self.pair_list.addTopLevelItem(item)
        self.pair_list.currentItemChanged.connect(self._on_pair_list_current_item_changed)
        left = QWidget()
        lcol = QVBoxLayout(left)
        lcol.setContentsMargins(0, 0, 0, 0)
        lcol.addWidget(self.pair_list, 1)
        lcol.addWidget(self._build_hub_box())
        lcol.addWidget(self._build_endpoint_box())
        split.addWidget(left)

        right = QWidget()
        rcol = QVBoxLayout(right)
        rcol.setContentsMargins(8, 0, 0, 0)
        self.title_label = Label()
        self.title_label.setObjectName("pickerSectionTitle")
        self.title_label.setWordWrap(True)
        rcol.addWidget(self.title_label)
        self.kind_label = Label()
        self.kind_label.setObjectName("pairKind")
        self.kind_label.setWordWrap(True)
        rcol.addWidget(self.kind_label)
        self.note_label = Label()
        self.note_label.setWordWrap(True)
        self.note_label.setObjectName("pickerHint")
        rcol.addWidget(self.note_label)
        form = QFormLayout()
        self.target_label = Label()
        self.target_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.target_quant = QComboBox()
        self.draft_label = Label()
        self.draft_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.draft_quant = QComboBox()
        form.addRow("Target", self.target_label)
        form.addRow("Quantization", self.target_quant)
        self.draft_row_label = Label("Draft")
        form.addRow(self.draft_row_label, self.draft_label)
        form.addRow("Quantization", self.draft_quant)
        self.total_label = Label()
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
        self.status_label = Label()
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

    def _build_hub_box(self) -> QGroupBox:
        box = QGroupBox("From Hugging Face")
        box.setObjectName("hubBox")
        col = QVBoxLayout(box)
        form = QFormLayout()
        self.hf_target_edit = QLineEdit()
        self.hf_target_edit.setPlaceholderText("owner/repo/file.gguf, or a link to the file")
        self.hf_target_edit.setClearButtonEnabled(True)
        self.hf_draft_edit = QLineEdit()
        self.hf_draft_edit.setPlaceholderText("optional: a draft model with the same tokenizer")
        self.hf_draft_edit.setClearButtonEnabled(True)
        form.addRow("Target", self.hf_target_edit)
        form.addRow("Draft", self.hf_draft_edit)
        col.addLayout(form)
        row = QHBoxLayout()
        self.hf_check_button = QPushButton("Check")
        self.hf_check_button.setToolTip("Read the GGUF headers from the hub (a few MB) and, with "
                                        "a draft, run llama.cpp's pairing rule on them")
        self.hf_check_button.clicked.connect(self._on_hf_check_button_clicked)
        self.hf_download_button = QPushButton("Download")
        self.hf_download_button.setToolTip("Download the checked files into the models folder")
        self.hf_download_button.clicked.connect(self._on_hf_download_button_clicked)
        row.addWidget(self.hf_check_button)
        row.addWidget(self.hf_download_button)
        row.addStretch(1)
        col.addLayout(row)
        self.hf_status = Label("Paste a repository and file, then Check: Download is offered "
                                "once the check passed.")
        self.hf_status.setObjectName("pickerHint")
        self.hf_status.setWordWrap(True)
        col.addWidget(self.hf_status)
        self.hf_target_edit.textChanged.connect(self._on_hf_edit_text_changed)
        self.hf_draft_edit.textChanged.connect(self._on_hf_edit_text_changed)
        self.hf_target_edit.returnPressed.connect(self._on_hf_check_button_clicked)
        self.hf_draft_edit.returnPressed.connect(self._on_hf_check_button_clicked)
        self._update_hub_buttons()
        return box

    def _build_endpoint_box(self) -> QGroupBox:
        box = QGroupBox("Hub endpoint")
        box.setObjectName("endpointBox")
        col = QVBoxLayout(box)
        row = QHBoxLayout()
        self.endpoint_edit = QLineEdit(self._library.config.hf_endpoint or "")
        self.endpoint_edit.setPlaceholderText(DEFAULT_ENDPOINT)
        self.endpoint_edit.setToolTip("A Hugging Face mirror to use instead of huggingface.co "
                                      "(the same as the HF_ENDPOINT variable)")
        self.endpoint_edit.returnPressed.connect(self._on_endpoint_button_clicked)
        self.endpoint_button = QPushButton("Save")
        self.endpoint_button.clicked.connect(self._on_endpoint_button_clicked)
        row.addWidget(self.endpoint_edit, 1)
        row.addWidget(self.endpoint_button)
        col.addLayout(row)
        self.endpoint_label = Label()
        self.endpoint_label.setObjectName("pickerHint")
        self.endpoint_label.setWordWrap(True)
        col.addWidget(self.endpoint_label)
        self._show_endpoint()
        return box

    # -- hub endpoint -------------------------------------------------------------------
    def set_endpoint(self, text: str) -> bool:
        """Save ``text`` as the hub endpoint (empty: huggingface.co). False (and the reason
        shown) when it is not an http(s) URL or cannot be saved."""
        value = text.strip().rstrip("/") or None
        try:
            self._library.reload()
            self._library.config.hf_endpoint = value
            self._library.save()
        except ValidationError:
            self.endpoint_label.setText(f"{text.strip()!r} is not an http(s) address such as "
                                        f"{DEFAULT_ENDPOINT}.")
            return False
        except OSError as exc:
            self.failed.emit(UserError("Hub endpoint not saved", str(exc)))
            return False
        self._show_endpoint(saved=True)
        return True

    def _show_endpoint(self, saved: bool = False) -> None:
        env = os.environ.get("HF_ENDPOINT")
        if env:
            self.endpoint_label.setText(
                f"HF_ENDPOINT is set in the environment ({env}) and takes precedence over "
                "this setting.")
        else:
            self.endpoint_label.setText(("Saved. " if saved else "")
                                        + f"Downloads and checks use {resolve_endpoint()}.")

    @Slot()
    def _on_endpoint_button_clicked(self) -> None:
        self.set_endpoint(self.endpoint_edit.text())

    # -- from Hugging Face --------------------------------------------------------------
    def hub_files(self) -> tuple[RemoteFile, RemoteFile | None]:
        """The pasted target and draft (None: no draft).

        Raises:
            DownloadError: a field does not name a repository and a GGUF file.
        """
        target = parse_hub_file(self.hf_target_edit.text())
        draft_text = self.hf_draft_edit.text().strip()
        return target, (parse_hub_file(draft_text) if draft_text else None)

    def check_hub_files(self) -> bool:
        """Check the pasted files on the hub off the GUI thread. False (the reason shown)
        when a field cannot be read."""
        try:
            target, draft = self.hub_files()
        except TandemError as exc:
            self.hf_status.setText(str(exc))
            return False
        self.check_started.emit()
        self._hub_generation += 1
        self._hub_checking = True
        self.hub_check = None
        what = f"{target.display} with {draft.display}" if draft else target.display
        self.hf_status.setText(f"Checking {what} on the hub…")
        self.pair_check.show_message("Checking…", f"Reading the header{'s' if draft else ''} "
                                     f"of {what} from the hub…")
        self._tasks.start(TaskWorker(_hub_check_job(target, draft), self._hub_signals,
                                     title="Check failed", generation=self._hub_generation))
        self._update_hub_buttons()
        return True

    @Slot(object)
    def _on_hub_worker_finished(self, outcome: TaskOutcome) -> None:
        if outcome.generation != self._hub_generation:
            return
        self._hub_checking = False
        if outcome.error is not None or not isinstance(outcome.value, HubFilesChecked):
            error = outcome.error or UserError("Check failed", "No result.")
            # the reason is shown once, in the picker's message bar (failed → show_error)
            self.hf_status.setText(f"Check failed: {CHECK_FAILED_SEE_ABOVE}")
            self.pair_check.show_message("Check failed", CHECK_FAILED_SEE_ABOVE)
            self.failed.emit(error)
            self._update_hub_buttons()
            return
        checked = outcome.value
        self.hub_check = checked
        if checked.check is not None:
            c = checked.check
            t, d = c.target, c.draft
            note = (f"Read {format_bytes(t.bytes_fetched)} of {format_bytes(t.vocab.info.file_size)} "
                    f"(target) and {format_bytes(d.bytes_fetched)} of "
                    f"{format_bytes(d.vocab.info.file_size)} (draft) from the hub.")
            self.pair_check.show_result(f"{checked.target.display} with {checked.draft.display}"
                                        if checked.draft else checked.target.display, c.result, note)
            self.hf_status.setText("Compatible: Download fetches both." if c.result.compatible
                                   else f"Incompatible: {c.result.reason()}")
        elif checked.header is not None:
            info = checked.header.vocab.info
            self.pair_check.show_message(
                checked.target.display,
                f"A readable GGUF: {info.name}, {info.architecture}, {info.quantization}, "
                f"{info.vocab_type} tokenizer with {info.n_vocab:,} tokens, "
                f"{format_bytes(info.file_size)} (read {format_bytes(checked.header.bytes_fetched)} "
                "from the hub). No draft given: prompt lookup needs none.")
            self.hf_status.setText("Readable: Download fetches it.")
        self._update_hub_buttons()
        self.hub_files_checked.emit(checked)

    def download_hub_files(self) -> tuple[int, ...] | None:
        """Download the pasted files once their check passed; the job ids."""
        checked = self.hub_check
        if checked is None or not checked.ok or self._hub_checking:
            return None
        folder = self._library.models_dir
        ids: list[int] = []
        try:
            for f in (checked.target, checked.draft):
                if f is not None:
                    ids.append(self.downloads.start(f.repo_id, remote_file_parts(f),
                                                    models_dir=folder))
        except TandemError as exc:
            self.failed.emit(UserError("Download not started", str(exc)))
            return None
        self.hf_status.setText("Downloading: see the Downloads tab.")
        self.downloads_started.emit(tuple(ids))
        return tuple(ids)

    def _update_hub_buttons(self) -> None:
        has_text = bool(self.hf_target_edit.text().strip())
        self.hf_check_button.setEnabled(has_text and not self._hub_checking)
        ok = self.hub_check is not None and self.hub_check.ok and not self._hub_checking
        self.hf_download_button.setEnabled(ok)

    @Slot(str)
    def _on_hf_edit_text_changed(self, _text: str) -> None:
        if self.hub_check is not None:
            self.hub_check = None  # the check was of other files
            self.hf_status.setText("Check the new files before downloading them.")
        self._update_hub_buttons()

    @Slot()
    def _on_hf_check_button_clicked(self) -> None:
        if self.hf_check_button.isEnabled():
            self.check_hub_files()

    @Slot()
    def _on_hf_download_button_clicked(self) -> None:
        self.download_hub_files()

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
        """The chosen quantizations (target, draft); the draft's is "" without a draft."""
        dq = self.draft_quant.currentData()
        return str(self.target_quant.currentData()), "" if dq is None else str(dq)

    def _fill_quants(self, combo: QComboBox, model: CuratedModel | None) -> None:
        combo.blockSignals(True)
        combo.clear()
        for f in model.files if model is not None else ():
            combo.addItem(f"{f.quant}  ·  {_approx(f.size_bytes, f.size_approx)}", f.quant)
        if model is not None:
            combo.setCurrentIndex(max(0, combo.findData(model.default_quant)))
        combo.setEnabled(model is not None)
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
        kind = describe_kind(pair)
        self.kind_label.setText(kind)
        self.kind_label.setVisible(bool(kind))
        self.note_label.setText(pair.note)
        self.draft_row_label.setText("MTP assistant" if pair.draft_kind == "mtp-assistant"
                                     and pair.draft is not None else "Draft")
        alone = pair.draft is None
        self.check_button.setText("Check model" if alone else "Check pair")
        self.download_button.setText("Download model" if alone else "Download pair")
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
        self.target_label.setText(self._describe(pair.target, tq))
        self.total_label.setText(self._total(pair, tq, dq))
        if pair.draft is None:
            self.draft_label.setText("None: it drafts without a second file.")
        else:
            self.draft_label.setText(self._describe(pair.draft, dq))
        key = (pair.id, tq, dq)
        checked = self.checks.get(key)
        if checked is not None:
            self._show_check(checked)
        elif self._checking == key:
            self.pair_check.show_message("Checking…", "Reading both headers from the hub…")
        elif pair.draft is None:
            self.pair_check.show_message(
                "Check before download",
                "Check model reads the model's header from the hub (a few MB, not the whole "
                "file) and says what it is.")
        else:
            self.pair_check.show_message(
                "Check before download",
                "Check pair reads the two headers from the hub (a few MB, not the whole files) "
                "and runs llama.cpp's pairing rule on them.")
        self.check_button.setEnabled(self._checking != key)

    def _describe(self, model: CuratedModel, quant: str) -> str:
        f = model.file_for(quant)
        have = "  ✓ downloaded" if self._downloaded(model, quant) else ""
        lic = f" · {model.license}" if model.license else ""
        return f"{model.name}  ({model.repo}){lic}\n{f.file}{have}"

    @staticmethod
    def _total(pair: CuratedPair, tq: str, dq: str) -> str:
        tf = pair.target.file_for(tq)
        if pair.draft is None:
            return f"{_approx(tf.size_bytes, tf.size_approx)} to download"
        df = pair.draft.file_for(dq)
        total = _approx(tf.size_bytes + df.size_bytes, tf.size_approx or df.size_approx)
        side = "assistant" if pair.draft_kind == "mtp-assistant" else "draft"
        return (f"{total} to download · {side}/target size ratio ≈ "
                f"{df.size_bytes / tf.size_bytes:.2f} (the estimated draft cost ratio c)")

    # -- check and download ---------------------------------------------------------------
    def check_pair(self) -> None:
        """Run the remote pairing check of the selected pair off the GUI thread."""
        pair = self.pair
        if pair is None:
            return
        tq, dq = self.quants()
        self.check_started.emit()
        self._check_generation += 1
        self._checking = (pair.id, tq, dq)
        self.status_label.setText(
            f"Checking {pair.target.name} {tq}"
            + (f" with {pair.draft.name} {dq}" if pair.draft is not None else "") + " on the hub…")
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
            error = outcome.error or UserError("Pair check failed", "No result.")
            self.status_label.setText(f"Check failed: {CHECK_FAILED_SEE_ABOVE}")
            self.failed.emit(error)
            self._refresh()
            return
        checked = outcome.value
        self.checks[(checked.pair_id, checked.target_quant, checked.draft_quant)] = checked
        verdict = ("a readable GGUF" if checked.check is None
                   else "compatible" if checked.ok else "incompatible")
        self.status_label.setText(f"Checked on the hub: {verdict}.")
        self._refresh()
        self.pair_checked.emit(checked)

    def _show_check(self, checked: PairChecked) -> None:
        c = checked.check
        if c is None:
            h = checked.header
            if h is not None:
                info = h.vocab.info
                self.pair_check.show_message(
                    h.meta.file.filename,
                    f"A readable GGUF: {info.name}, {info.architecture}, {info.quantization}, "
                    f"{info.vocab_type} tokenizer with {info.n_vocab:,} tokens, "
                    f"{format_bytes(info.file_size)} (read {format_bytes(h.bytes_fetched)} "
                    "from the hub).")
            return
        t, d = c.target, c.draft
        note = (f"Read {format_bytes(t.bytes_fetched)} of {format_bytes(t.vocab.info.file_size)} "
                f"(target) and {format_bytes(d.bytes_fetched)} of "
                f"{format_bytes(d.vocab.info.file_size)} (draft) from the hub.")
        self.pair_check.show_result(
            f"{t.meta.file.filename} with {d.meta.file.filename}", c.result, note)

    def download_pair(self) -> tuple[int, ...] | None:
        """Start downloading the selected entry's target and draft (the target alone for
        an entry without a draft); their job ids."""
        pair = self.pair
        if pair is None:
            return None
        folder = self._library.models_dir
        try:
            ids = tuple(self.downloads.start(m.repo, m.file_for(q).filenames, models_dir=folder)
                        for m, q in zip(pair.models, self.quants()))
        except TandemError as exc:
            self.failed.emit(UserError("Download not started", str(exc)))
            return None
        what = " and ".join(m.name for m in pair.models)
        self.status_label.setText(f"Downloading {what}: see the Downloads tab.")
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
