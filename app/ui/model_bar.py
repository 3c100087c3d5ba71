"""The model bar: target, drafter and k, where the layers run, and load progress.

The drafter choice (every :class:`~app.options.SpecMode`: off, prompt lookup, draft
model, suffix lookup…) and k apply from the next reply;
they never reload the target. Choosing a draft GGUF loads it next to the loaded target.
The widget reports clicks; the window opens file dialogs and talks to the worker.

Its width never depends on a file name: model names are elided (the full name is in the
tooltip), and load progress takes a row of its own under the bar while a model loads,
with its label on one line, so the window fits 1024 px and never widens itself.
"""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.events import ModelInfo, UserError
from app.options import K_MAX, DrafterNeeds, SpecMode, SpeculationConfig, drafter_unusable
from app.remote.errors import ServerTimeoutError, ServerUnreachableError, StreamDroppedError
from app.ui.elided import ElidedButtonWidget, ElidedLabelWidget
from app.ui.labels import Label
from app.ui.recent_models import RecentModelsMenu

#: the most pixels a model's file name takes in the bar (the rest is elided)
NAME_MAX_PX = 260
MODE_TIP = ("Speculative decoding for the next reply: a drafter proposes k tokens and the "
            "target checks them in one pass. Applies without reloading the target.")


def shown_name(file_name: str) -> str:
    """A GGUF's file name as the bar shows it: without the ".gguf" every one of them
    ends with, so a name shortened to fit keeps its quantization ("SmolLM2…Q4_1")."""
    stem, dot, ext = file_name.rpartition(".")
    return stem if dot and stem and ext.lower() == "gguf" else file_name


#: what the server's line adds while the server does not answer
_NOT_ANSWERING = " · not answering"


class ModelBarWidget(QFrame):
    """Target · drafter · k · layers · progress. See the module docstring."""

    _remote = False  # a server is connected (its drafter and k are its own)
    _remote_tip = ""  # the tooltip of the server's line

    open_target_clicked = Signal()
    """"Open GGUF…" for the target was clicked."""
    connect_server_clicked = Signal()
    """"Connect to a server…" (in the Open GGUF button's menu) was chosen."""
    open_draft_clicked = Signal()
    """"Choose draft…" was clicked."""
    speculation_changed = Signal(object)
    """SpeculationConfig: the drafter, k or "adaptive" changed (the other fields are those
    last given to :meth:`set_speculation`)."""
    load_cancel_clicked = Signal()
    """Cancel was clicked while a model loads."""
    models_clicked = Signal()
    """"Models…" (library, draft pairing, downloads) was clicked."""
    race_clicked = Signal()
    """"Race…" (speculation off vs on, side by side) was clicked."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelBar")
        rows = QVBoxLayout(self)
        rows.setContentsMargins(10, 6, 10, 6)
        rows.setSpacing(4)
        row = QHBoxLayout()
        row.setSpacing(6)
        rows.addLayout(row)

        row.addWidget(self._caption("Target"))
        self.target_label = ElidedLabelWidget("no model", max_px=NAME_MAX_PX, min_px=110)
        self.target_label.setObjectName("targetName")
        row.addWidget(self.target_label)
        self.open_button = self._open_button()
        row.addWidget(self.open_button)
        self.models_button = QPushButton("Models…")
        self.models_button.setToolTip(
            "Model library, which drafts fit this target, and downloads (Ctrl+M)"
        )
        self.models_button.clicked.connect(self.models_clicked)
        row.addWidget(self.models_button)
        row.addWidget(self._separator())

        row.addWidget(self._caption("Drafter"))
        self.mode_combo = QComboBox()
        for mode in SpecMode:
            self.mode_combo.addItem(mode.label, mode)
        self.mode_combo.setToolTip(MODE_TIP)
        # as wide as the longest drafter name wants, down to about 12 characters in a
        # narrow window (the layout honours an explicit minimum width over the hint; the
        # list still shows every name whole)
        self.mode_combo.setMinimumWidth(self.mode_combo.fontMetrics().horizontalAdvance("x" * 12)
                                        + 40)
        row.addWidget(self.mode_combo)
        self.draft_button = ElidedButtonWidget("Choose draft…", max_px=NAME_MAX_PX)
        # "Choose draft…" stays whole; a draft's file name is shortened below that
        self.draft_button.keep_whole("Choose draft…")
        self.draft_button.setToolTip("A small GGUF with the same tokenizer as the target")
        self.draft_button.clicked.connect(self.open_draft_clicked)
        row.addWidget(self.draft_button)
        row.addWidget(self._caption("k"))
        self.k_spin = QSpinBox()
        self.k_spin.setRange(1, K_MAX)
        self.k_spin.setValue(SpeculationConfig().draft_max)
        self.k_spin.setToolTip("Draft length k: the most tokens proposed per round (adaptive: "
                               "each round verifies only as many as pay on this machine)")
        row.addWidget(self.k_spin)
        self.adaptive_box = QCheckBox("adaptive")
        self.adaptive_box.setChecked(True)
        self.adaptive_box.setToolTip(
            "k is a maximum: each round verifies only as many draft tokens as the costs "
            "measured on this machine make worthwhile. Off: always draft up to k."
        )
        row.addWidget(self.adaptive_box)
        row.addWidget(self._separator())

        # where the layers run (kept whole); a server's engine and drafter, which can be
        # long, are elided instead, so they never widen the window
        self.layers_label = ElidedLabelWidget("", min_px=60)
        self.layers_label.setObjectName("layersLabel")
        row.addWidget(self.layers_label)
        row.addStretch(1)
        self.race_button = QPushButton("Race…")
        self.race_button.setToolTip(
            "Run the same prompt and seed with speculation off and on, side by side"
        )
        self.race_button.clicked.connect(self.race_clicked)
        row.addWidget(self.race_button)

        # Load progress: a row of its own, shown only while a model loads, so it adds
        # no width to the bar; the bar shows the percentage, the label what loads.
        self.loading_row = QWidget()
        self.loading_row.setObjectName("loadingRow")
        lr = QHBoxLayout(self.loading_row)
        lr.setContentsMargins(0, 0, 0, 0)
        lr.setSpacing(8)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(True)
        self.progress.setFormat("%p%")
        self.progress.setFixedWidth(160)
        lr.addWidget(self.progress)
        self.progress_label = ElidedLabelWidget()
        self.progress_label.setObjectName("progressLabel")
        lr.addWidget(self.progress_label, 1)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.load_cancel_clicked)
        lr.addWidget(self.cancel_button)
        self.loading_row.hide()
        rows.addWidget(self.loading_row)

        self.mode_combo.currentIndexChanged.connect(self._on_mode_combo_current_index_changed)
        self.k_spin.valueChanged.connect(self._on_k_spin_value_changed)
        self.adaptive_box.toggled.connect(self._on_adaptive_box_toggled)
        self._draft_name: str | None = None
        self._draft_detail: str | None = None
        self._draft_assistant = False
        self._speculation = SpeculationConfig()
        self._update_draft_button()

    def _open_button(self) -> QToolButton:
        """"Open GGUF…", with "Connect to a server…" beside it in the button's menu (a
        button of its own would make the bar wider than a 1024 px window allows with a
        draft shown; the welcome screen has it as a button)."""
        button = QToolButton()
        button.setText("Open GGUF…")
        button.setToolTip("Choose a target model (.gguf file); the arrow: connect to a "
                          "server (llama-server, vLLM, SGLang, another Tandem, Ollama, "
                          "LM Studio) instead")
        button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        button.clicked.connect(self.open_target_clicked)
        menu = QMenu(button)
        menu.addAction("Open GGUF…", self.open_target_clicked.emit)
        self.recent_menu = RecentModelsMenu(menu)  # its chosen signal: a target to load
        menu.addMenu(self.recent_menu)
        self.connect_action = menu.addAction("Connect to a server…",
                                             self.connect_server_clicked.emit)
        button.setMenu(menu)
        return button

    @staticmethod
    def _caption(text: str) -> QLabel:
        label = Label(text)
        label.setObjectName("barCaption")
        return label

    @staticmethod
    def _separator() -> QFrame:
        line = QFrame()
        line.setFrameShape(QFrame.Shape.VLine)
        line.setObjectName("barSeparator")
        return line

    # -- state from the window --------------------------------------------------------
    def set_speculation(self, speculation: SpeculationConfig) -> None:
        """Show the drafter settings without emitting :attr:`speculation_changed`."""
        self._speculation = speculation
        for w in (self.mode_combo, self.k_spin, self.adaptive_box):
            w.blockSignals(True)
        self.mode_combo.setCurrentIndex(max(0, self.mode_combo.findData(speculation.mode)))
        self.k_spin.setValue(speculation.draft_max)
        self.adaptive_box.setChecked(speculation.adaptive)
        for w in (self.mode_combo, self.k_spin, self.adaptive_box):
            w.blockSignals(False)
        self._update_draft_button()

    def speculation(self) -> SpeculationConfig:
        """The settings as shown (fields the bar does not show as last given)."""
        k = self.k_spin.value()
        # a k below draft_min takes draft_min down with it (draft_min > k drafts nothing)
        return self._speculation.with_changes(mode=self.mode(), draft_max=k,
                                              draft_min=min(self._speculation.draft_min, k),
                                              adaptive=self.adaptive_box.isChecked())

    def mode(self) -> SpecMode:
        """The drafter chosen in the combo box (Qt hands its data back as a plain str)."""
        return SpecMode(self.mode_combo.currentData())

    def set_model(self, info: ModelInfo | None) -> None:
        """Show the loaded target and where its layers run (None: nothing loaded)."""
        self._grey_unusable_drafters(info if info is not None and info.remote is None else None)
        self.recent_menu.loaded = info.target_path if info is not None and info.remote is None \
            else None
        if info is None:
            self._set_remote(False)
            self.target_label.set_full_text("no model", tooltip="")
            self.layers_label.set_full_text("", tooltip="")
            return
        if info.remote is not None:
            self._show_remote(info)
            return
        self._set_remote(False)
        self.target_label.set_full_text(shown_name(info.target_path.name), tooltip=(
            f"{info.target_path.name}\n{info.target_name}\n{info.target_path}\n"
            f"context {info.n_ctx} tokens"
            + ("\nno chat template in the GGUF: a plain User/Assistant transcript is used"
               if info.uses_fallback_template else "")
        ))
        if info.n_gpu_layers > 0:
            self.layers_label.set_full_text(f"GPU · {info.n_gpu_layers}/{info.n_layer} layers",
                                            tooltip=info.system_info)
        else:
            self.layers_label.set_full_text("CPU only", tooltip=(
                f"All {info.n_layer} layers run on the CPU because {info.cpu_reason}."
                f"\n\n{info.system_info}"))
        self.layers_label.keep_whole(self.layers_label.full_text())
        # the file name, as for the target (the metadata name is in the tooltip)
        self._draft_assistant = info.draft_is_assistant
        self.set_draft_name(info.draft_path.name if info.draft_path is not None else None,
                            info.draft_name)

    def _grey_unusable_drafters(self, info: ModelInfo | None) -> None:
        """Grey the drafters the loaded target cannot use (MTP without nextn layers or
        a loaded MTP assistant), each with its reason as the item's tooltip
        (:func:`drafter_unusable`, the rule the model picker follows too), and label
        each as it drafts now (MTP names a loaded assistant:
        :meth:`~app.options.DrafterInfo.label_for`). The chosen drafter stays chosen:
        the reply then decodes plainly and its note says why."""
        model = self.mode_combo.model()
        assert isinstance(model, QStandardItemModel)
        assistant = (info.draft_path.name if info is not None and info.draft_is_assistant
                     and info.draft_path is not None else None)
        for row in range(self.mode_combo.count()):
            mode = SpecMode(self.mode_combo.itemData(row))
            drafter = mode.info
            why = (drafter_unusable(drafter, info, assistant=assistant is not None)
                   if drafter is not None else None)
            item = model.item(row)
            item.setText(drafter.label_for(assistant) if drafter is not None else mode.label)
            item.setEnabled(why is None)
            item.setToolTip(f"{drafter.label}: {why}" if why and drafter else "")

    def _show_remote(self, info: ModelInfo) -> None:
        assert info.remote is not None
        server = info.remote.info
        self.target_label.set_full_text(info.target_name, tooltip=(
            f"{info.remote.model}\non {server.display_url}\n{server.engine.value}"
            + (f" {server.version}" if server.version else "")))
        method = server.speculation_method or "drafter not reported"
        self.layers_label.keep_whole("")
        self._remote_tip = ("Replies run on the server; it speculates as it was started. "
                            "What it answered: " + ", ".join(server.evidence))
        self._mark_unreachable(None)
        self.layers_label.set_full_text(f"{server.engine.value} · {method}",
                                        tooltip=self._remote_tip)
        self._set_remote(True)

    def set_remote_drafter(self, engine: str | None, method: str | None) -> None:
        """The remote server's drafter as its latest reply named it (it answers)."""
        self._mark_unreachable(None)
        self.layers_label.set_full_text(
            f"{engine or 'server'} · {method or 'drafter not reported'}",
            tooltip=self._remote_tip)

    def reply_failed(self, error: UserError) -> None:
        """A reply failed: when it could not reach the connected server, or lost it
        mid-reply, the server's line says so (amber) until a reply gets through."""
        lost = (ServerUnreachableError, ServerTimeoutError, StreamDroppedError)
        if self._remote and error.cause is not None and issubclass(error.cause, lost):
            self._mark_unreachable(f"The last reply failed: {error.message}")

    def set_server_answering(self, why_not: str | None) -> None:
        """What a check of the connected server found (app/ui/server_watch.py): it
        answered (None), or why it did not."""
        if self._remote:
            self._mark_unreachable(None if why_not is None else
                                   f"The server did not answer a check: {why_not}")

    def _mark_unreachable(self, why: str | None) -> None:
        """Mark the server's line as not answering (``why``: what failed, its tooltip)
        or unmark it (None)."""
        label = self.layers_label
        marked = bool(label.property("unreachable"))
        if why is not None and marked:
            label.setToolTip(why)
            return
        if (why is not None) == marked:
            return
        label.setProperty("unreachable", why is not None)
        label.style().unpolish(label)
        label.style().polish(label)
        if why is not None:
            label.set_full_text(label.full_text() + _NOT_ANSWERING, tooltip=why)
        else:
            label.set_full_text(label.full_text().removesuffix(_NOT_ANSWERING),
                                tooltip=self._remote_tip)

    def _set_remote(self, remote: bool) -> None:
        """A remote server decides its own drafter and k: the bar's are off meanwhile."""
        self._remote = remote
        if not remote:
            self._mark_unreachable(None)
        tip = "The server speculates as it was started; this applies to local models."
        for w in (self.mode_combo, self.k_spin, self.adaptive_box, self.draft_button):
            w.setEnabled(not remote)
            if remote:
                w.setToolTip(tip)
        if not remote:
            self._update_draft_button()

    def set_draft_name(self, name: str | None, detail: str | None = None) -> None:
        """Show the loaded draft model's file ``name`` (``detail``: its metadata name)."""
        self._draft_name = name
        self._draft_detail = detail if detail and detail != name else None
        self._update_draft_button()

    def set_loading(self, loading: bool, fraction: float = 0.0, what: str = "") -> None:
        """Show or hide the loading row: progress, what loads (one line), Cancel."""
        self.loading_row.setVisible(loading)
        self.progress.setVisible(loading)
        self.cancel_button.setVisible(loading)
        self.cancel_button.setEnabled(True)
        if loading:
            self.progress.setValue(int(fraction * 1000))
            self.progress_label.set_full_text(what or "Loading…")

    def set_busy(self, busy: bool) -> None:
        """While a model loads or a reply streams, models cannot be swapped."""
        self.open_button.setEnabled(not busy)
        self.recent_menu.menuAction().setEnabled(not busy)  # in the File menu too
        self.draft_button.setEnabled(not busy)

    def _update_draft_button(self) -> None:
        info = self.mode().info
        is_draft = info is not None and info.needs is DrafterNeeds.DRAFT_MODEL
        # an MTP assistant (Gemma 4's) drafts as MTP: its button shows with that drafter
        assistant = (self._draft_assistant and self._draft_name is not None
                     and info is not None and info.needs is DrafterNeeds.MTP_HEAD)
        self.draft_button.setVisible(is_draft or assistant)
        role = "MTP assistant" if assistant else "Draft"
        name = self._draft_name
        # elided: a long draft file name must not widen the bar (and so the window); its
        # role stays whole
        self.draft_button.keep_prefix(f"{role}: ")
        self.draft_button.set_full_text(f"{role}: {shown_name(name)}" if name
                                        else "Choose draft…")
        self.draft_button.setToolTip(
            (f"{role}: {name}\n" if name else "")
            + (f"{self._draft_detail}\n" if self._draft_detail else "")
            + "A small GGUF with the same tokenizer as the target")
        speculating = self.mode() is not SpecMode.OFF
        self.k_spin.setEnabled(speculating)
        self.adaptive_box.setEnabled(speculating)

    @Slot(int)
    def _on_mode_combo_current_index_changed(self, _index: int) -> None:
        # k left at the previous drafter's default follows the new drafter's default
        # (16 for the model-free drafters, 4 for a draft model: app.options)
        self.k_spin.blockSignals(True)
        shown = self._speculation.model_copy(update={"draft_max": self.k_spin.value()})
        self.k_spin.setValue(shown.k_for(self.mode()))
        self.k_spin.blockSignals(False)
        self._update_draft_button()
        self._emit()

    @Slot(int)
    def _on_k_spin_value_changed(self, _value: int) -> None:
        self._emit()

    @Slot(bool)
    def _on_adaptive_box_toggled(self, _on: bool) -> None:
        self._emit()

    def _emit(self) -> None:
        self._speculation = self.speculation()
        self.speculation_changed.emit(self._speculation)
