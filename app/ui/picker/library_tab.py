"""The picker's Library tab: models on this machine, and the drafts that fit a target.

The table lists every model the library finds (:class:`app.catalog.library.Library`:
the models folder, added folders and files, LM Studio's folders, the Hugging Face
cache) with its metadata, and broken files with their error. Selecting a usable model
makes it the target; the draft list below then shows, for that target, compatible drafts
first with the draft cost ratio c estimated from the file sizes and the speedup that c
predicts at an assumed acceptance rate, drafts too large to help flagged, prompt lookup
and plain decoding, then incompatible models greyed with the rule that failed. The
pairing check of the selected draft is shown rule by rule next to the list.

Scanning and ranking run on the picker's thread pool (:class:`TaskWorker`); a newer
request supersedes an older one by its generation number, and a scan is cancelled
between files when the picker closes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, QThreadPool, Signal, Slot
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.catalog.demo import DemoModel
from app.catalog.library import Library, LibraryEntry, drafts_for
from app.catalog.pairing import DraftCandidate
from app.chat.events import UserError
from app.engine.drafter_kinds import DrafterPrediction, kinds
from app.engine.stats import predicted_speedup
from app.errors import TandemError
from app.formatting import format_bytes, format_count, format_parameters
from app.options import (
    DRAFT_MODEL_K,
    DrafterInfo,
    DrafterNeeds,
    SpecMode,
    drafter_infos,
    drafter_unusable,
)
from app.store import paths
from app.ui.picker.formatting import (
    ASSUMED_ACCEPTANCE_RATE,
    format_cost_ratio,
    format_predicted_speedup,
    prediction_status,
    prediction_words,
    source_label,
)
from app.ui.picker.pair_check import FAIL_COLOR, PASS_COLOR, WARN_COLOR, PairCheckWidget
from app.ui.picker.payloads import DraftsRanked, LibraryScanned, ScanProgressed, TaskOutcome
from app.ui.picker.workers import TaskSignals, TaskWorker
from app.ui.labels import Label

GREYED = QColor("#a0aec0")
MODEL_COLUMNS = ["File", "Name in metadata", "Architecture", "Parameters", "Quantization",
                 "Size", "Trained context", "Tokenizer", "Chat template", "Location"]
DRAFT_COLUMNS = ["Drafter", "Size", "c (est.)", "Speedup", "Status"]
_KIND_ROLE = Qt.ItemDataRole.UserRole
_INDEX_ROLE = Qt.ItemDataRole.UserRole + 1

OFF_LABEL = "Off (plain decoding)"
AUTO_LABEL = "Auto (chosen per conversation)"


def picker_label(info: DrafterInfo) -> str:
    """A drafter's row in the draft list ("Prompt lookup (no draft model)")."""
    if info.needs is DrafterNeeds.NOTHING:
        return f"{info.label} (no draft model)"
    return info.label


def listed_drafters() -> list[DrafterInfo]:
    """The registered drafters the draft list shows as rows of their own (a draft model
    is listed file by file instead), in the registry's order."""
    return [i for i in drafter_infos() if i.needs is not DrafterNeeds.DRAFT_MODEL]


def _auto_words(joiner: str) -> str:
    """What Auto chooses among without a draft model: "off, prompt lookup, suffix lookup"."""
    words = ["off"] + [i.words for i in listed_drafters() if i.auto_rank is not None]
    return ", ".join(words) if joiner == "," else ", ".join(words[:-1]) + f" {joiner} {words[-1]}"


PROMPT_LOOKUP_LABEL = picker_label(SpecMode.PROMPT_LOOKUP.info)  # type: ignore[arg-type]
SUFFIX_LABEL = picker_label(SpecMode.SUFFIX.info)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class DrafterChoice:
    """The drafter selected in the draft list.

    ``mode`` as in the settings; ``candidate`` for a draft model (its pairing check);
    ``usable``: False for an incompatible draft (it cannot be chosen).
    """

    mode: SpecMode
    candidate: DraftCandidate[LibraryEntry] | None = None

    @property
    def draft_path(self) -> Path | None:
        return self.candidate.key.path if self.candidate is not None else None

    @property
    def usable(self) -> bool:
        return self.candidate is None or self.candidate.compatible

    @property
    def label(self) -> str:
        if self.candidate is not None:
            title = self.candidate.key.title
            return f"MTP assistant: {title}" if self.candidate.assistant else title
        info = self.mode.info
        if info is not None:
            return picker_label(info)
        return AUTO_LABEL if self.mode is SpecMode.AUTO else OFF_LABEL


def drafter_mode(cand: DraftCandidate[LibraryEntry]) -> SpecMode:
    """The drafter a listed model drafts with: MTP for an MTP assistant, else the draft
    model."""
    return SpecMode("mtp") if cand.assistant else SpecMode.DRAFT_MODEL


def preferred_draft(candidates: tuple[DraftCandidate[LibraryEntry], ...], k: int) -> int | None:
    """The index of the draft model to preselect, or None for prompt lookup.

    The compatible draft with the best predicted speedup E(α, k) / (1 + c·k) at the
    assumed α (:data:`ASSUMED_ACCEPTANCE_RATE`), if that beats plain decoding and the
    draft is small enough to help (no "too large" warning). Otherwise prompt lookup,
    which costs almost nothing and proposes nothing when it finds no match, so it never
    predicts a slowdown: a same-size copy of the target (c ≈ 1, about 0.6×) is never
    preselected.
    """
    best: tuple[float, int] | None = None
    for i, cand in enumerate(candidates):
        if not cand.useful or cand.cost_ratio is None:
            continue
        speedup = predicted_speedup(ASSUMED_ACCEPTANCE_RATE, k, cand.cost_ratio)
        if speedup > 1.0 and (best is None or speedup > best[0]):
            best = (speedup, i)
    return best[1] if best is not None else None


def _is_demo_file(entry: LibraryEntry, demo: DemoModel) -> bool:
    """Whether ``entry`` is ``demo``'s file: its name, and its size to the MB the demo
    gives (a file the user downloaded from elsewhere, or the demo written before)."""
    if entry.info is None or not any(p.name == demo.file for p in (entry.path, *entry.copies)):
        return False
    return abs(entry.info.file_size - demo.size_mb * 1_000_000) < 1_000_000


def top_items(tree: QTreeWidget) -> list[QTreeWidgetItem]:
    """The top-level items of ``tree``, top to bottom."""
    return [item for i in range(tree.topLevelItemCount())
            if (item := tree.topLevelItem(i)) is not None]


def _scan_job(library: Library, add_file: Path | None, write_demos: bool = False) -> Callable[
        [Callable[[object], None], threading.Event], LibraryScanned]:
    def job(report: Callable[[object], None], cancel: threading.Event) -> LibraryScanned:
        t0 = time.monotonic()
        if add_file is not None:
            library.add_file(add_file)
            library.save()
        entries = library.scan(on_progress=lambda d, n, p: report(ScanProgressed(d, n, p)),
                               cancel=cancel, check_loads=True, write_demos=write_demos)
        return LibraryScanned(tuple(entries), cancel.is_set(), time.monotonic() - t0)
    return job


def drafter_predictions(target: LibraryEntry) -> tuple[tuple[SpecMode, DrafterPrediction], ...]:
    """What each registered drafter that can draft for ``target`` predicts for it before
    it loads (:attr:`DrafterKind.predict`; an MTP head priced with the cost the load
    check measured). Reads the load check's cache: call it off the GUI thread."""
    out = []
    for kind in kinds():
        if kind.predict is None or drafter_unusable(kind.info, target.info) is not None:
            continue
        prediction = kind.predict(target.path, None)  # as the library's load check ran
        if prediction is not None:
            out.append((kind.mode, prediction))
    return tuple(out)


def _rank_job(target: LibraryEntry, entries: tuple[LibraryEntry, ...]) -> Callable[
        [Callable[[object], None], threading.Event], DraftsRanked]:
    def job(_report: Callable[[object], None], _cancel: threading.Event) -> DraftsRanked:
        return DraftsRanked(target, tuple(drafts_for(target, entries)),
                            drafter_predictions(target))
    return job


#: the first column of the draft list's line for a library without a draft model
NO_DRAFT_MODEL_LABEL = "Draft model: none here"


def _no_draft_model_row() -> QTreeWidgetItem:
    """The draft list's greyed line where no model of the library can draft for the target."""
    row = QTreeWidgetItem([NO_DRAFT_MODEL_LABEL, "—", "—", "—",
                           "no model in the library has this tokenizer: the Catalog tab "
                           "lists pairs to download, Open GGUF… adds a file"])
    row.setToolTip(0, "A draft model must share the target's tokenizer (vocabulary, BOS "
                      "and EOS tokens); smaller models of the same family usually do.")
    row.setFlags(row.flags() & ~Qt.ItemFlag.ItemIsSelectable & ~Qt.ItemFlag.ItemIsEnabled)
    for c in range(row.columnCount()):
        row.setForeground(c, QBrush(GREYED))
    return row


class LibraryTabWidget(QWidget):
    """Models on this machine (top), drafts for the selected target and the pairing check
    (bottom). See the module docstring.

    Args:
        library: where to look (saved when folders or files are added).
        tasks: the thread pool for scans and ranking.
        draft_max: k, for the predicted speedup column.
    """

    selection_changed = Signal()
    """The target or the drafter changed (read :attr:`target` and :attr:`drafter`)."""
    choice_activated = Signal()
    """A drafter was double-clicked: use this target and drafter."""
    scan_finished = Signal(object)
    """LibraryScanned: a scan ended and the table shows its result."""
    drafts_ranked = Signal(object)
    """DraftsRanked: the draft list shows the drafts for a new target."""
    failed = Signal(object)
    """UserError: a scan, an added file or folder, or the draft ranking failed."""

    def __init__(self, library: Library, tasks: QThreadPool, *, draft_max: int = DRAFT_MODEL_K,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.library = library
        self._tasks = tasks
        self.draft_max = draft_max
        self.entries: tuple[LibraryEntry, ...] = ()
        self.target: LibraryEntry | None = None
        self.candidates: tuple[DraftCandidate[LibraryEntry], ...] = ()
        #: what registered drafters predict for the current target (:class:`DraftsRanked`)
        self.predictions: dict[SpecMode, DrafterPrediction] = {}
        self.drafter: DrafterChoice | None = None
        self.scanning = False
        self.ranking = False
        self._scan_generation = 0
        self._scan_cancel: threading.Event | None = None
        self._rank_generation = 0
        self._wanted_target: Path | None = None
        self._wanted_mode: SpecMode = SpecMode.PROMPT_LOOKUP
        self._wanted_draft: Path | None = None
        # The target the wanted drafter was chosen for: a saved choice, or a click here.
        # Any other target gets the drafter with the best predicted speedup.
        self._wanted_for: Path | None = None
        self._wanted_clicked = False
        # Carriers owned here, connected once (see app.ui.picker.workers).
        self._scan_signals = TaskSignals(self)
        self._scan_signals.progressed.connect(self._on_scan_worker_progressed)
        self._scan_signals.finished.connect(self._on_scan_worker_finished)
        self._rank_signals = TaskSignals(self)
        self._rank_signals.finished.connect(self._on_rank_worker_finished)
        self._build()

    # -- layout -----------------------------------------------------------------------
    def _build(self) -> None:
        col = QVBoxLayout(self)
        col.setContentsMargins(10, 10, 10, 6)
        col.setSpacing(6)
        bar = QHBoxLayout()
        self.open_button = QPushButton("Open GGUF…")
        self.open_button.setToolTip("Add one .gguf file to the library")
        self.open_button.clicked.connect(self._on_open_button_clicked)
        self.add_folder_button = QPushButton("Add folder…")
        self.add_folder_button.setToolTip("Add a folder; it is searched for .gguf files, "
                                          "subfolders included")
        self.add_folder_button.clicked.connect(self._on_add_folder_button_clicked)
        self.rescan_button = QPushButton("Rescan")
        self.rescan_button.clicked.connect(self._on_rescan_button_clicked)
        self.models_dir_button = QPushButton("Models folder…")
        self.models_dir_button.setToolTip("Where downloads go (also scanned)")
        self.models_dir_button.clicked.connect(self._on_models_dir_button_clicked)
        # an installed package demo (the demo extra's Gemma) is written only when asked
        self.demo_button = QPushButton()
        self.demo_button.setToolTip("Write the demo model of the installed package into the "
                                    "models folder, so it is listed here")
        self.demo_button.clicked.connect(lambda: self.rescan(write_demos=True))
        for b in (self.open_button, self.add_folder_button, self.rescan_button, self.demo_button):
            bar.addWidget(b)
        self._show_demo_button()
        self.scan_label = Label()
        self.scan_label.setObjectName("pickerHint")
        bar.addWidget(self.scan_label, 1)
        bar.addWidget(self.models_dir_button)
        col.addLayout(bar)

        self.model_table = QTreeWidget()
        self.model_table.setObjectName("modelTable")
        self.model_table.setColumnCount(len(MODEL_COLUMNS))
        self.model_table.setHeaderLabels(MODEL_COLUMNS)
        self.model_table.setRootIsDecorated(False)
        self.model_table.setUniformRowHeights(True)
        self.model_table.setAlternatingRowColors(True)
        header = self.model_table.header()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(MODEL_COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.model_table.currentItemChanged.connect(self._on_model_table_current_item_changed)

        drafts = QWidget()
        dcol = QVBoxLayout(drafts)
        dcol.setContentsMargins(0, 0, 0, 0)
        dcol.setSpacing(4)
        self.drafts_title = Label("Drafts")
        self.drafts_title.setObjectName("pickerSectionTitle")
        dcol.addWidget(self.drafts_title)
        self.draft_list = QTreeWidget()
        self.draft_list.setObjectName("draftList")
        self.draft_list.setColumnCount(len(DRAFT_COLUMNS))
        self.draft_list.setHeaderLabels(self._draft_headers())
        self.draft_list.setRootIsDecorated(False)
        self.draft_list.setUniformRowHeights(True)
        dh = self.draft_list.header()
        dh.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        dh.setSectionResizeMode(len(DRAFT_COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.draft_list.headerItem().setToolTip(
            3, f"Predicted decode speedup E(α,k)/(1+c·k) at an assumed acceptance rate "
               f"α = {ASSUMED_ACCEPTANCE_RATE} and k = {self.draft_max}; the real α depends "
               "on the text and the chat window measures it.")
        self.draft_list.headerItem().setToolTip(
            2, "Draft cost ratio c: time of one draft step / one target step, estimated "
               "as draft file size / target file size.")
        self.draft_list.currentItemChanged.connect(self._on_draft_list_current_item_changed)
        self.draft_list.itemDoubleClicked.connect(self._on_draft_list_item_double_clicked)
        dcol.addWidget(self.draft_list, 1)
        self.drafts_hint = Label(
            f"c is estimated from file sizes. Speedup = E(α,k)/(1+c·k) at an assumed "
            f"α = {ASSUMED_ACCEPTANCE_RATE}, k = {self.draft_max}: a prediction, not a "
            "measurement; the real α depends on the text.")
        self.drafts_hint.setObjectName("pickerHint")
        self.drafts_hint.setWordWrap(True)
        dcol.addWidget(self.drafts_hint)
        self.pair_check = PairCheckWidget()

        models = QWidget()
        mcol = QVBoxLayout(models)
        mcol.setContentsMargins(0, 0, 0, 0)
        mcol.setSpacing(4)
        models_title = Label("Models on this computer: select the target")
        models_title.setObjectName("pickerSectionTitle")
        mcol.addWidget(models_title)
        mcol.addWidget(self.model_table, 1)
        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)
        for w, stretch in ((models, 2), (drafts, 2), (self.pair_check, 2)):
            split.addWidget(w)
            split.setStretchFactor(split.count() - 1, stretch)
        split.setSizes([200, 230, 230])
        col.addWidget(split, 1)
        self._show_no_target()

    def _draft_headers(self) -> list[str]:
        return ["Drafter", "Size", "c (est.)",
                f"Speedup at α = {ASSUMED_ACCEPTANCE_RATE}, k = {self.draft_max}", "Status"]

    # -- wishes from the window --------------------------------------------------------
    def set_wanted(self, target: Path | None, mode: SpecMode | str, draft: Path | None,
                   *, in_use: bool = False) -> None:
        """Select this target and drafter when they appear (the saved choice). A saved draft
        model that is too large to help is not preselected (see :func:`preferred_draft`),
        unless ``in_use``: the chat window runs with it now, and the picker shows that."""
        self._wanted_target = target
        self._wanted_mode = SpecMode(mode)
        self._wanted_draft = draft
        self._wanted_for = target
        self._wanted_clicked = in_use

    def show_in_use(self, target: Path | None, mode: SpecMode | str, draft: Path | None) -> None:
        """Select the target and drafter the chat window uses now, replacing whatever
        was selected here: at once when they are listed, else once a scan or the draft
        ranking lists them (a target not in the library leaves the selection as it is)."""
        self.set_wanted(target, mode, draft, in_use=True)
        if target is None:
            return
        if self.target is None or not self.target.is_file(target):
            self.choose_target(target)  # ranks its drafts, then preselects the wanted one
        elif not self.ranking and (off := self._drafter_item(SpecMode.OFF, None)) is not None:
            self._preselect(self.candidates, off)  # its drafts are listed: select again

    def choose_target(self, path: Path) -> bool:
        """Select the model at ``path`` as the target; False when it is not listed."""
        self._wanted_target = path
        for item in top_items(self.model_table):
            entry = self.entries[item.data(0, _INDEX_ROLE)]
            if entry.is_file(path):
                self.model_table.setCurrentItem(item)
                return True
        return False

    def choose_drafter(self, mode: SpecMode | str, draft: Path | None = None) -> bool:
        """Select a drafter in the list (``mode`` or its name); False when it is not
        listed (yet)."""
        mode = SpecMode(mode)
        self._wanted_mode = mode
        self._wanted_draft = draft
        self._wanted_for = self.target.path if self.target is not None else self._wanted_target
        self._wanted_clicked = True
        item = self._drafter_item(mode, draft)
        if item is None:
            return False
        self.draft_list.setCurrentItem(item)
        return True

    def _drafter_item(self, mode: SpecMode, draft: Path | None) -> QTreeWidgetItem | None:
        for item in top_items(self.draft_list):
            kind = item.data(0, _KIND_ROLE)
            if kind is None:
                continue
            if kind == "draft":
                cand = self.candidates[item.data(0, _INDEX_ROLE)]
                if mode is drafter_mode(cand) and draft is not None and cand.key.is_file(draft):
                    return item
            elif kind == mode:
                return item
        return None

    def draft_rows(self) -> list[tuple[str, str, bool]]:
        """``(drafter, status, greyed)`` for each row of the draft list, top to bottom."""
        rows = []
        for item in top_items(self.draft_list):
            greyed = item.foreground(0).color() == GREYED
            rows.append((item.text(0), item.text(4), greyed))
        return rows

    # -- scanning ----------------------------------------------------------------------
    def _show_demo_button(self) -> None:
        # a demo already listed from another folder (same file name and size) is not offered
        missing = [d for d in self.library.missing_demos()
                   if not any(_is_demo_file(e, d) for e in self.entries)]
        self.demo_button.setVisible(bool(missing))
        if missing:
            self.demo_button.setText(" and ".join(f"Add the {d.title} demo ({d.size_mb} MB)"
                                                  for d in missing))

    def rescan(self, *, add_file: Path | None = None, write_demos: bool = False) -> None:
        """Scan the library again off the GUI thread (a running scan is cancelled);
        ``write_demos``: first write the missing package demos into the models folder.

        The saved configuration is read again first: the chat window remembers models
        opened there (:func:`app.catalog.library.remember_opened_model`)."""
        self.cancel_scan()
        self.library.reload()
        self._scan_generation += 1
        cancel = threading.Event()
        self._scan_cancel = cancel
        worker = TaskWorker(_scan_job(self.library, add_file, write_demos), self._scan_signals,
                            title="Library scan failed", generation=self._scan_generation,
                            cancel=cancel)
        self.scanning = True
        self.scan_label.setText(f"Reading {add_file.name}…" if add_file else
                                "Writing the demo model…" if write_demos else "Scanning…")
        self.rescan_button.setEnabled(False)
        self.demo_button.setEnabled(False)
        self._tasks.start(worker)

    def cancel_scan(self) -> None:
        if self._scan_cancel is not None:
            self._scan_cancel.set()

    @Slot(object)
    def _on_scan_worker_progressed(self, progress: ScanProgressed) -> None:
        if self.scanning and isinstance(progress, ScanProgressed):
            self.scan_label.setText(
                f"Reading {progress.done + 1} of {progress.total}: {progress.path.name}")

    @Slot(object)
    def _on_scan_worker_finished(self, outcome: TaskOutcome) -> None:
        if outcome.generation != self._scan_generation:
            return  # superseded by a newer scan
        self.scanning = False
        self._scan_cancel = None
        self.rescan_button.setEnabled(True)
        self.demo_button.setEnabled(True)
        if outcome.error is not None or not isinstance(outcome.value, LibraryScanned):
            self._show_demo_button()
            self.scan_label.setText("Scan failed")
            self.failed.emit(outcome.error or UserError("Library scan failed", "No result."))
            return
        scanned = outcome.value
        self.set_entries(scanned.entries)
        self._show_demo_button()  # after the entries: a demo listed already is not offered
        broken = sum(1 for e in scanned.entries if not e.usable)
        n = len(scanned.entries)
        text = f"{n} model{'s' if n != 1 else ''}"
        if broken:
            text += f" ({broken} cannot be used)"
        text += f" · scanned in {scanned.seconds:.1f} s"
        if scanned.cancelled:
            text += " · stopped early"
        self.scan_label.setText(text)
        if self.library.demo_problems:  # the "Add … demo" button's write failed
            self.failed.emit(UserError("Demo model not written", " ".join(self.library.demo_problems),
                                       level="warning"))
        if self.library.models_dir_problem:  # a drive that is gone: downloads go elsewhere
            self.failed.emit(UserError(
                "Models folder cannot be used", f"{self.library.models_dir_problem} Downloads go "
                f"to {paths.models_dir()} meanwhile (Models folder… changes it).",
                level="warning"))
        self.scan_finished.emit(scanned)

    def set_entries(self, entries: tuple[LibraryEntry, ...]) -> None:
        """Show ``entries`` (usable ones by name, then unreadable ones) and keep the target."""
        keep = self.target.path if self.target is not None else self._wanted_target
        self.entries = entries
        order = sorted(range(len(entries)),
                       key=lambda i: (not entries[i].usable, entries[i].title.lower()))
        self.model_table.blockSignals(True)
        self.model_table.clear()
        for i in order:
            self.model_table.addTopLevelItem(self._model_item(i, entries[i]))
        self.model_table.blockSignals(False)
        self.target = None
        if keep is None or not self.choose_target(keep):
            self._show_no_target()
            self.selection_changed.emit()

    def _model_item(self, index: int, e: LibraryEntry) -> QTreeWidgetItem:
        where = f"{source_label(e.file.source)} · {e.file.repo_id or e.path.name}"
        info = e.info
        if info is None or e.error is not None:
            item = QTreeWidgetItem([f"⚠ {e.path.name}", "—", "—", "—", "—", "—", "—", "—", "—",
                                    e.error or "unreadable"])
            for c in range(len(MODEL_COLUMNS)):
                item.setForeground(c, QBrush(FAIL_COLOR))
            item.setToolTip(len(MODEL_COLUMNS) - 1, f"{e.path}\n{e.error}")
            item.setToolTip(0, f"{e.path}\n{e.error}")
        else:
            params = format_parameters(info.parameter_count)
            if info.size_label and params == "—":
                params = info.size_label
            item = QTreeWidgetItem([
                e.title,
                info.name,
                info.architecture,
                params,
                info.quantization,
                format_bytes(info.file_size),
                format_count(info.context_length),
                f"{info.vocab_type} · {format_count(info.n_vocab)}",
                "yes" if info.has_chat_template else "no",
                where,
            ])
            item.setToolTip(0, str(e.path) + "".join(f"\nthe same model also at {c}" for c in e.copies))
            item.setToolTip(1, "general.name in the GGUF metadata")
            item.setToolTip(6, "the context length the model was trained for (its GGUF's "
                               "context_length); a load uses the context length set in "
                               "Sampling → Model, at most this")
            item.setToolTip(7, f"tokenizer model {info.tokenizer_model}, pre-tokenizer "
                               f"{info.tokenizer_pre}; BOS {info.bos_id} (added: {info.add_bos}), "
                               f"EOS {info.eos_id} (added: {info.add_eos})")
            item.setToolTip(len(MODEL_COLUMNS) - 1, str(e.path))
            for c in (3, 5, 6):
                item.setTextAlignment(c, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        item.setData(0, _INDEX_ROLE, index)
        return item

    # -- target and drafts -------------------------------------------------------------
    @Slot(QTreeWidgetItem, QTreeWidgetItem)
    def _on_model_table_current_item_changed(self, current: QTreeWidgetItem | None,
                                             _previous: QTreeWidgetItem | None) -> None:
        entry = self.entries[current.data(0, _INDEX_ROLE)] if current is not None else None
        if entry is None:
            self.target = None
            self._show_no_target()
        elif not entry.usable:
            self.target = None
            why = entry.error or "unreadable"
            # a load-check refusal is a sentence that already names the file
            self._show_no_target(why if entry.loads is False else f"{entry.path.name} cannot be used: {why}")
        else:
            self.target = entry
            self._wanted_target = entry.path
            self._rank(entry)
        self.selection_changed.emit()

    def _show_no_target(self, why: str = "Select a model above as the target.") -> None:
        self._rank_generation += 1  # drop a ranking still running
        self.ranking = False
        self.candidates = ()
        self.drafter = None
        self.drafts_title.setText("Drafts")
        self._show_draft_message(why)
        self.pair_check.show_message("Pairing check", "Choose a target, then a draft.")

    def _show_draft_message(self, text: str) -> None:
        """Replace the draft list by one unselectable line. Signals stay blocked while
        the rows go: Qt makes another row current as it removes the current one, and a
        draft row made current then indexes candidates already replaced."""
        self.draft_list.blockSignals(True)
        self.draft_list.clear()
        line = QTreeWidgetItem([text])
        line.setFlags(Qt.ItemFlag.NoItemFlags)
        self.draft_list.addTopLevelItem(line)
        line.setFirstColumnSpanned(True)
        self.draft_list.blockSignals(False)

    def _rank(self, target: LibraryEntry) -> None:
        self._rank_generation += 1
        self.ranking = True
        self.candidates = ()
        self.drafter = None
        info = target.info
        assert info is not None
        self.drafts_title.setText(
            f"Drafts for {target.title}  ·  {info.vocab_type} tokenizer, "
            f"{format_count(info.n_vocab)} tokens, {format_bytes(info.file_size)}")
        self._show_draft_message("Checking every model as a draft…")
        self.pair_check.show_message("Pairing check", "Checking…")
        self._tasks.start(TaskWorker(_rank_job(target, self.entries), self._rank_signals,
                                     title="Draft check failed",
                                     generation=self._rank_generation))

    @Slot(object)
    def _on_rank_worker_finished(self, outcome: TaskOutcome) -> None:
        if outcome.generation != self._rank_generation:
            return
        self.ranking = False
        if outcome.error is not None or not isinstance(outcome.value, DraftsRanked):
            self._show_no_target("The target's tokenizer could not be read.")
            self.failed.emit(outcome.error or UserError("Draft check failed", "No result."))
            self.selection_changed.emit()
            return
        ranked = outcome.value
        self.show_drafts(ranked.candidates, dict(ranked.predictions))
        self.drafts_ranked.emit(ranked)

    def show_drafts(self, candidates: tuple[DraftCandidate[LibraryEntry], ...],
                    predictions: Mapping[SpecMode, DrafterPrediction] | None = None) -> None:
        """Fill the draft list: compatible drafts (useful, then too large), the
        registered drafters (with their ``predictions`` for this target: c, speedup),
        off, then incompatible ones greyed with the failed rule."""
        self.candidates = candidates
        self.predictions = dict(predictions or {})
        self.draft_list.blockSignals(True)
        self.draft_list.clear()
        compatible = [i for i, c in enumerate(candidates) if c.compatible]
        incompatible = [i for i, c in enumerate(candidates) if not c.compatible]
        for i in compatible:
            self.draft_list.addTopLevelItem(self._draft_item(i, candidates[i]))
        rows: list[QTreeWidgetItem] = [] if compatible else [_no_draft_model_row()]
        target_info = self.target.info if self.target is not None else None
        for info in listed_drafters():  # from the registry
            why = drafter_unusable(info, target_info)
            unusable = why is not None
            prediction = None if unusable else self.predictions.get(SpecMode(info.mode))
            if prediction is not None:
                row = QTreeWidgetItem([picker_label(info), "—",
                                       format_cost_ratio(prediction.cost_ratio),
                                       f"{prediction.speedup:.1f}×",
                                       prediction_status(prediction)])
            else:
                row = QTreeWidgetItem([picker_label(info), "—", "—" if unusable else "≈ 0",
                                       "—" if unusable else info.picker_expect,
                                       why or info.picker_status])
            row.setData(0, _KIND_ROLE, info.mode)
            row.setToolTip(0, why or info.picker_tooltip or info.summary)
            if prediction is not None:
                row.setToolTip(4, prediction_words(info, prediction))
            if unusable:
                row.setFlags(row.flags() & ~Qt.ItemFlag.ItemIsSelectable
                             & ~Qt.ItemFlag.ItemIsEnabled)
                for c in range(row.columnCount()):
                    row.setForeground(c, QBrush(GREYED))
            rows.append(row)
        auto = QTreeWidgetItem([AUTO_LABEL, "—", "≈ 0", "learned per conversation",
                                "always available: the drafter measured fastest here"])
        auto.setData(0, _KIND_ROLE, SpecMode.AUTO.value)
        auto.setToolTip(0, f"Chooses {_auto_words('or')} and the draft length "
                           "per conversation from the rates measured in it.")
        off = QTreeWidgetItem([OFF_LABEL, "—", "—", "1.0×", "no speculation"])
        off.setData(0, _KIND_ROLE, SpecMode.OFF.value)
        for item in (*rows, auto, off):
            self.draft_list.addTopLevelItem(item)
        for i in incompatible:
            self.draft_list.addTopLevelItem(self._draft_item(i, candidates[i]))
        self.draft_list.blockSignals(False)
        self._preselect(candidates, off)

    def _preselect(self, candidates: tuple[DraftCandidate[LibraryEntry], ...],
                   off: QTreeWidgetItem) -> None:
        """Select the wanted drafter, else the best draft model, else the wanted drafter
        when it needs no model (Auto, lookup, off: it suits any target), else prompt
        lookup."""
        chosen = None
        if self.target is not None and self._wanted_for is not None and self.target.is_file(self._wanted_for):
            chosen = self._drafter_item(self._wanted_mode, self._wanted_draft)
            if chosen is not None and not (self._item_usable(chosen) and (
                    self._wanted_clicked or self._item_helps(chosen))):
                chosen = None  # a saved draft too large to help is not preselected
        if chosen is None:
            chosen = self._best_predicted(candidates)
        if chosen is None and self._wanted_mode.needs in (None, DrafterNeeds.NOTHING):
            chosen = self._drafter_item(self._wanted_mode, None)
        self.draft_list.setCurrentItem(
            chosen or self._drafter_item(SpecMode.PROMPT_LOOKUP, None) or off)

    def _best_predicted(self, candidates: tuple[DraftCandidate[LibraryEntry], ...]
                        ) -> QTreeWidgetItem | None:
        """The drafter with the best predicted gain: the best draft model (α assumed,
        c from file sizes) or a registered drafter whose prediction beats 1× (an MTP
        head), whichever predicts more; None when none predicts a gain."""
        best: tuple[float, QTreeWidgetItem] | None = None
        i = preferred_draft(candidates, self.draft_max)
        if i is not None:
            item = self._drafter_item(drafter_mode(candidates[i]), candidates[i].key.path)
            c = candidates[i].cost_ratio
            if item is not None:
                best = (predicted_speedup(ASSUMED_ACCEPTANCE_RATE, self.draft_max, c)
                        if c is not None else 1.0, item)
        for mode, prediction in self.predictions.items():
            item = self._drafter_item(mode, None)
            if (item is not None and prediction.helps and item.flags() & Qt.ItemFlag.ItemIsEnabled
                    and (best is None or prediction.speedup > best[0])):
                best = (prediction.speedup, item)
        return best[1] if best is not None else None

    def _item_usable(self, item: QTreeWidgetItem) -> bool:
        if item.data(0, _KIND_ROLE) != "draft":
            return bool(item.flags() & Qt.ItemFlag.ItemIsEnabled)  # MTP without heads: greyed
        return self.candidates[int(item.data(0, _INDEX_ROLE))].compatible

    def _item_helps(self, item: QTreeWidgetItem) -> bool:
        """Not a draft model too large to speed anything up."""
        if item.data(0, _KIND_ROLE) != "draft":
            return True
        return self.candidates[int(item.data(0, _INDEX_ROLE))].useful

    def _draft_item(self, index: int, cand: DraftCandidate[LibraryEntry]) -> QTreeWidgetItem:
        entry = cand.key
        size = format_bytes(entry.info.file_size) if entry.info is not None else "—"
        if cand.useful:
            status, color = "compatible", PASS_COLOR
        elif cand.compatible:
            status, color = "too large: no speedup to expect", WARN_COLOR
        else:
            status, color = cand.reason, GREYED
        name = entry.title
        if sum(1 for c in self.candidates if c.key.title == name) > 1 or (
                self.target is not None and self.target.title == name):
            name = f"{name} · {entry.path.parent.name}"  # same file name: tell the folders apart
        if cand.assistant:
            name = f"MTP assistant: {name}"
        item = QTreeWidgetItem([
            name,
            size,
            format_cost_ratio(cand.cost_ratio) if cand.compatible else "—",
            format_predicted_speedup(cand.cost_ratio, self.draft_max) if cand.compatible else "—",
            status,
        ])
        item.setData(0, _KIND_ROLE, "draft")
        item.setData(0, _INDEX_ROLE, index)
        item.setToolTip(0, f"{entry.name}\n{entry.path}")
        tip = "\n".join((cand.reason, *cand.result.warnings))
        item.setToolTip(4, tip)
        if cand.compatible:
            item.setForeground(4, QBrush(color))
            if cand.useful:
                bold = QFont(item.font(4))
                bold.setBold(True)
                item.setFont(4, bold)
        else:
            for c in range(len(DRAFT_COLUMNS)):
                item.setForeground(c, QBrush(GREYED))
        return item

    @Slot(QTreeWidgetItem, QTreeWidgetItem)
    def _on_draft_list_current_item_changed(self, current: QTreeWidgetItem | None,
                                            _previous: QTreeWidgetItem | None) -> None:
        kind = current.data(0, _KIND_ROLE) if current is not None else None
        if kind is None or self.target is None:
            self.drafter = None
        elif kind == "draft" and current is not None:
            cand = self.candidates[int(current.data(0, _INDEX_ROLE))]
            self.drafter = DrafterChoice(drafter_mode(cand), cand)
            if cand.compatible:
                self._wanted_mode, self._wanted_draft = drafter_mode(cand), cand.key.path
                self._wanted_for, self._wanted_clicked = self.target.path, True
            note = ""
            if cand.compatible and cand.cost_ratio is not None:
                note = (f"Estimated draft cost ratio c ≈ {cand.cost_ratio:.2f} (file sizes); "
                        f"predicted speedup {format_predicted_speedup(cand.cost_ratio, self.draft_max)}"
                        f" at an assumed α = {ASSUMED_ACCEPTANCE_RATE}, k = {self.draft_max}.")
            role = "the MTP assistant" if cand.assistant else "the draft"
            self.pair_check.show_result(
                f"Pairing check: {cand.key.title} as {role} for {self.target.title}",
                cand.result, note)
        else:
            mode = SpecMode(kind)  # Qt hands item data back as a plain str
            self.drafter = DrafterChoice(mode)
            self._wanted_mode, self._wanted_draft = mode, None
            self._wanted_for, self._wanted_clicked = self.target.path, True
            if mode.info is not None:
                prediction = self.predictions.get(mode)
                self.pair_check.show_message(
                    mode.info.label, (mode.info.explanation or mode.info.summary)
                    + (f". {prediction_words(mode.info, prediction)}" if prediction else ""))
            elif mode is SpecMode.AUTO:
                self.pair_check.show_message(
                    "Auto",
                    "Tandem measures, per conversation, how fast each drafter it can use "
                    f"decodes here ({_auto_words(',')}) and uses the fastest "
                    "with a draft length learned from its rates; a reply or two are needed "
                    "to learn. To let Auto weigh a draft model too, choose the draft model "
                    "here, then Auto in the chat window's drafter menu.")
            else:
                self.pair_check.show_message(
                    "Plain decoding", "No drafter: the target generates one token per pass.")
        self.selection_changed.emit()

    @Slot(QTreeWidgetItem, int)
    def _on_draft_list_item_double_clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        if item.data(0, _KIND_ROLE) is not None and self._item_usable(item):
            self.choice_activated.emit()

    # -- buttons ------------------------------------------------------------------------
    def open_file(self, path: Path) -> None:
        """Add one GGUF file to the library (its header is read off the GUI thread)."""
        self._wanted_target = path
        self.rescan(add_file=path)

    def add_folder(self, folder: Path) -> None:
        """Remember a folder to scan, save the library settings, and rescan."""
        try:
            self.library.reload()
            self.library.add_folder(folder)
            self.library.save()
        except (TandemError, OSError) as exc:
            self.failed.emit(UserError("Folder not added", str(exc)))
            return
        self.rescan()

    def set_models_dir(self, folder: Path) -> None:
        """Use ``folder`` as the models folder (downloads go there) and rescan."""
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self.library.reload()
            self.library.config.models_dir = folder
            self.library.save()
        except (ValueError, OSError) as exc:
            self.failed.emit(UserError("Models folder not changed", str(exc)))
            return
        self.rescan()

    @Slot()
    def _on_open_button_clicked(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Open a GGUF model",
                                              str(self.library.models_dir),
                                              "GGUF models (*.gguf);;All files (*)")
        if name:
            self.open_file(Path(name))

    @Slot()
    def _on_add_folder_button_clicked(self) -> None:
        name = QFileDialog.getExistingDirectory(self, "Add a folder of GGUF models",
                                                str(Path.home()))
        if name:
            self.add_folder(Path(name))

    @Slot()
    def _on_rescan_button_clicked(self) -> None:
        self.rescan()

    @Slot()
    def _on_models_dir_button_clicked(self) -> None:
        name = QFileDialog.getExistingDirectory(self, "Models folder (downloads go here)",
                                                str(self.library.models_dir))
        if name:
            self.set_models_dir(Path(name))
