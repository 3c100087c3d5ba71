"""Sampling, speculation and context settings: temperature, top-p, top-k, min-p, repeat
penalty, seed, max tokens; the drafter's finer settings (draft_min, draft_p_min, n-gram
sizes, the suffix drafter's cap and probability floor, as ``python -m app generate``
offers them; those the chosen drafter does not read are greyed out); context length and
GPU layers (these two apply when the model is reloaded).

The panel edits the settings' own objects (:class:`app.options.SamplingParams`,
:class:`app.options.SpeculationConfig`) and emits them whole, validated; the window hands
them to the controller. Widget ranges are those of the models, so every value the panel
can produce is valid for the engine; ranges and tooltips are read from the models' fields
(:func:`app.options.field_schema`).
"""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QCheckBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from pydantic import BaseModel

from app.engine.cpu import usable_cores
from app.options import (
    ContextOverflow,
    SamplingParams,
    SpecMode,
    SpeculationConfig,
    field_schema,
    max_threads,
)
from app.store.settings import ModelSettings
from app.ui.labels import Label

#: the most threads the setting offers (as SessionConfig allows: 4 × the logical CPUs)
MAX_THREADS = max_threads()
#: the largest value a QSpinBox holds (a C int); seeds above it are shown as this
SPIN_MAX = 2**31 - 1


_CPU_ONLY_TIP = "Run every layer on the CPU even when a GPU backend is available"
_GPU_LAYERS_TIP = "layers to put on the GPU; 999 = all"


class SamplingSettingsWidget(QWidget):
    """Form for sampling and speculation details (next reply) and model options (reload)."""

    sampling_changed = Signal(object)
    """SamplingParams: any sampling value changed."""
    speculation_changed = Signal(object)
    """SpeculationConfig: draft_min, draft_p_min or an n-gram size changed."""
    model_options_changed = Signal(int, object, bool, object, int)
    """Context length (tokens), GPU layers (None: all when possible; 0: CPU), exact
    verification, CPU threads (None: Auto) or the prompt cache (MiB; 0: off) changed."""
    reload_clicked = Signal()
    """"Reload model" was clicked (to apply context length / GPU layers / exact)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._filling = False
        self._sampling = SamplingParams()
        self._speculation = SpeculationConfig()
        outer = QVBoxLayout(self)
        outer.setContentsMargins(10, 10, 10, 10)

        box = QGroupBox("Sampling (next reply)")
        form = QFormLayout(box)
        self.temperature = self._double_field(SamplingParams, "temperature", 0.05, 2)
        self.top_p = self._double_field(SamplingParams, "top_p", 0.01, 2)
        self.top_k = self._int_field(SamplingParams, "top_k")
        self.min_p = self._double_field(SamplingParams, "min_p", 0.01, 2)
        self.repeat_penalty = self._double_field(SamplingParams, "repeat_penalty", 0.05, 2)
        self.dry_multiplier = self._double_field(SamplingParams, "dry_multiplier", 0.1, 2)
        self.dry_multiplier.setSpecialValueText("off")
        self.seed = self._int_field(SamplingParams, "seed")
        self.seed.setSpecialValueText("random")
        self.max_tokens = self._int_field(SamplingParams, "max_tokens")
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Top-k", self.top_k)
        form.addRow("Min-p", self.min_p)
        form.addRow("Repeat penalty", self.repeat_penalty)
        form.addRow("Loop control (DRY)", self.dry_multiplier)
        form.addRow("Seed", self.seed)
        form.addRow("Max tokens", self.max_tokens)
        self.context_overflow = QComboBox()
        for policy in ContextOverflow:
            self.context_overflow.addItem(policy.label, policy)
        self.context_overflow.setToolTip(
            field_schema(SamplingParams, "context_overflow").description)
        form.addRow("Too long for the context", self.context_overflow)
        outer.addWidget(box)

        sbox = QGroupBox("Speculation details (next reply)")
        sform = QFormLayout(sbox)
        self.draft_min = self._int_field(SpeculationConfig, "draft_min")
        self.draft_p_min = self._double_field(SpeculationConfig, "draft_p_min", 0.05, 2)
        self.ngram_min = self._int_field(SpeculationConfig, "ngram_min")
        self.ngram_max = self._int_field(SpeculationConfig, "ngram_max")
        self.suffix_spec_factor = self._double_field(SpeculationConfig, "suffix_spec_factor",
                                                     0.25, 2)
        self.suffix_min_prob = self._double_field(SpeculationConfig, "suffix_min_prob", 0.05, 2)
        sform.addRow("Min draft length", self.draft_min)
        sform.addRow("Draft min probability", self.draft_p_min)
        sform.addRow("Lookup n-gram min", self.ngram_min)
        sform.addRow("Lookup n-gram max", self.ngram_max)
        sform.addRow("Suffix tokens per match", self.suffix_spec_factor)
        sform.addRow("Suffix min probability", self.suffix_min_prob)
        outer.addWidget(sbox)

        outer.addWidget(self._model_box())
        outer.addStretch(1)

        for w in (self.temperature, self.top_p, self.min_p, self.repeat_penalty, self.dry_multiplier):
            w.valueChanged.connect(self._on_sampling_value_changed)
        for s in (self.top_k, self.seed, self.max_tokens):
            s.valueChanged.connect(self._on_sampling_value_changed)
        self.context_overflow.currentIndexChanged.connect(self._on_sampling_value_changed)
        # the n-gram sizes move together, visibly: a maximum below the minimum is refused
        # by the options (first, so the change below is emitted already consistent)
        self.ngram_min.valueChanged.connect(
            lambda v: self.ngram_max.setValue(max(v, self.ngram_max.value())))
        self.ngram_max.valueChanged.connect(
            lambda v: self.ngram_min.setValue(min(v, self.ngram_min.value())))
        for spin in (self.draft_min, self.draft_p_min, self.ngram_min, self.ngram_max,
                     self.suffix_spec_factor, self.suffix_min_prob):
            spin.valueChanged.connect(self._on_speculation_value_changed)
        self.n_ctx.valueChanged.connect(self._on_model_value_changed)
        self.threads.valueChanged.connect(self._on_model_value_changed)
        self.prompt_cache.valueChanged.connect(self._on_model_value_changed)
        self.gpu_layers.valueChanged.connect(self._on_model_value_changed)
        self.cpu_only.toggled.connect(self._on_model_value_changed)
        self.exact.toggled.connect(self._on_model_value_changed)

    def _model_box(self) -> QGroupBox:
        """The "Model (applies on reload)" group: context, threads, prompt cache, GPU
        layers, exact verification, Reload."""
        mbox = QGroupBox("Model (applies on reload)")
        mform = QFormLayout(mbox)
        self.n_ctx = self._int_field(ModelSettings, "n_ctx")
        self.n_ctx.setSingleStep(1024)
        self.cpu_only = QCheckBox("CPU only")
        self.cpu_only.setToolTip(_CPU_ONLY_TIP)
        self.gpu_layers = self._int(0, 999, _GPU_LAYERS_TIP)
        self._gpu_supported = True
        self._saved_gpu_layers: int | None = None  # the setting, kept on a CPU-only build
        # 0 shows the setting's None (Auto); at most what this computer may use
        self.threads = self._int(0, MAX_THREADS, field_schema(ModelSettings, "n_threads").description)
        self.threads.setSpecialValueText("Auto (free cores)")
        self.prompt_cache = self._int_field(ModelSettings, "prompt_cache_mib")
        self.prompt_cache.setSuffix(" MiB")
        self.prompt_cache.setSingleStep(256)
        self.prompt_cache.setSpecialValueText("Off")
        mform.addRow("Context length", self.n_ctx)
        mform.addRow("CPU threads", self.threads)
        mform.addRow("Prompt cache", self.prompt_cache)
        mform.addRow("GPU layers", self.gpu_layers)
        mform.addRow("", self.cpu_only)
        self.exact = QCheckBox("Exact verification")
        self.exact.setToolTip(
            "Load so that a verification batch computes exactly like one-token passes: "
            "speculation's output then equals plain decoding's (measured with Gemma 3 270M "
            "on an x86-64 build: 128 of 128 on builtin:code, docs/proof.md). CPU only (tick "
            "CPU only on a GPU build); needs Q4_1, Q5_1, Q5_0 or Q8_0 weights, or Q4_K/Q6_K "
            "(most Q4_K_M files) after a restart of Tandem (python -m app.engine.exact "
            "converts other models). Prompt processing gets slower; decoding measured as fast "
            "on Q4_K_M.")
        mform.addRow("", self.exact)
        self.reload_button = QPushButton("Reload model")
        self.reload_button.clicked.connect(self.reload_clicked)
        mform.addRow("", self.reload_button)
        self.pending_label = Label("")
        self.pending_label.setObjectName("gaugeNote")
        self.pending_label.setWordWrap(True)
        mform.addRow(self.pending_label)
        return mbox

    def _double(self, lo: float, hi: float, step: float, decimals: int, tip: str) -> QDoubleSpinBox:
        w = QDoubleSpinBox()
        w.setRange(lo, hi)
        w.setSingleStep(step)
        w.setDecimals(decimals)
        w.setToolTip(tip)
        return w

    def _int(self, lo: int, hi: int, tip: str) -> QSpinBox:
        w = QSpinBox()
        w.setRange(lo, hi)
        w.setToolTip(tip)
        return w

    def _double_field(self, model: type[BaseModel], name: str, step: float,
                      decimals: int) -> QDoubleSpinBox:
        """A spin box with the field's range and description (an open lower bound starts
        one shown step above it: the smallest value the box can show that is allowed)."""
        f = field_schema(model, name)
        assert f.low is not None and f.high is not None
        lo = f.low + 10.0 ** -decimals if f.low_open else f.low
        return self._double(lo, f.high, step, decimals, f.description)

    def _int_field(self, model: type[BaseModel], name: str) -> QSpinBox:
        """A spin box with the field's range and description, its maximum capped at
        :data:`SPIN_MAX` (a QSpinBox holds a 32-bit int; it matters for the seed only)."""
        f = field_schema(model, name)
        assert f.low is not None and f.high is not None
        return self._int(int(f.low), min(int(f.high), SPIN_MAX), f.description)

    def set_values(self, sampling: SamplingParams, model: ModelSettings,
                   speculation: SpeculationConfig) -> None:
        """Show settings without emitting change signals."""
        self._filling = True
        try:
            self._sampling = sampling
            self.temperature.setValue(sampling.temperature)
            self.top_p.setValue(sampling.top_p)
            self.top_k.setValue(sampling.top_k)
            self.min_p.setValue(sampling.min_p)
            self.repeat_penalty.setValue(sampling.repeat_penalty)
            self.dry_multiplier.setValue(sampling.dry_multiplier)
            self.seed.setValue(min(sampling.seed, SPIN_MAX))
            self.max_tokens.setValue(sampling.max_tokens)
            self.context_overflow.setCurrentIndex(
                self.context_overflow.findData(sampling.context_overflow))
            self.n_ctx.setValue(model.n_ctx)
            self.threads.setValue(model.n_threads or 0)
            self.prompt_cache.setValue(model.prompt_cache_mib)
            self._saved_gpu_layers = model.n_gpu_layers
            self.cpu_only.setChecked(model.n_gpu_layers == 0 or not self._gpu_supported)
            self.gpu_layers.setValue(999 if model.n_gpu_layers is None else model.n_gpu_layers)
            self.gpu_layers.setEnabled(self._gpu_supported and model.n_gpu_layers != 0)
            self.exact.setChecked(model.exact_verification)
        finally:
            self._filling = False
        self.set_speculation(speculation)

    def show_exact_verification(self, on: bool) -> None:
        """Show the exact-verification setting (changed elsewhere) without emitting."""
        self._filling = True
        try:
            self.exact.setChecked(on)
        finally:
            self._filling = False

    def set_speculation(self, speculation: SpeculationConfig) -> None:
        """Show the speculation details without emitting :attr:`speculation_changed`."""
        self._filling = True
        try:
            self._speculation = speculation
            self.draft_min.setValue(speculation.draft_min)
            self.draft_p_min.setValue(speculation.draft_p_min)
            self.ngram_min.setValue(speculation.ngram_min)
            self.ngram_max.setValue(speculation.ngram_max)
            self.suffix_spec_factor.setValue(speculation.suffix_spec_factor)
            self.suffix_min_prob.setValue(speculation.suffix_min_prob)
        finally:
            self._filling = False
        self._enable_details(speculation.mode)

    def _enable_details(self, mode: SpecMode) -> None:
        """Grey out the details the chosen drafter does not read (its
        :attr:`~app.options.DrafterInfo.options`); Auto may use any drafter, off none."""
        info = mode.info
        for name in ("draft_p_min", "ngram_min", "ngram_max", "suffix_spec_factor",
                     "suffix_min_prob"):
            used = mode is SpecMode.AUTO or (info is not None and name in info.options)
            getattr(self, name).setEnabled(used)
        self.draft_min.setEnabled(mode is not SpecMode.OFF)

    def sampling(self) -> SamplingParams:
        """The sampling as shown (stop strings and the penalty window as last given)."""
        return self._sampling.with_changes(
            temperature=round(self.temperature.value(), 4),
            top_p=round(self.top_p.value(), 4),
            top_k=self.top_k.value(),
            min_p=round(self.min_p.value(), 4),
            repeat_penalty=round(self.repeat_penalty.value(), 4),
            dry_multiplier=round(self.dry_multiplier.value(), 4),
            seed=self.seed.value(),
            max_tokens=self.max_tokens.value(),
            context_overflow=self.context_overflow.currentData(),
        )

    def speculation(self) -> SpeculationConfig:
        """The speculation settings with the details as shown (a draft_min above k is
        lowered to k, as a lower k lowers it everywhere)."""
        return self._speculation.with_changes(
            draft_min=min(self.draft_min.value(), self._speculation.draft_max),
            draft_p_min=round(self.draft_p_min.value(), 4),
            ngram_min=self.ngram_min.value(),
            ngram_max=self.ngram_max.value(),
            suffix_spec_factor=round(self.suffix_spec_factor.value(), 4),
            suffix_min_prob=round(self.suffix_min_prob.value(), 4),
        )

    def gpu_layers_value(self) -> int | None:
        """GPU layers as set (0: CPU only, None: all); a build without a GPU backend keeps
        the saved setting (its "CPU only" box is ticked because every layer runs there)."""
        if not self._gpu_supported:
            return self._saved_gpu_layers
        if self.cpu_only.isChecked():
            return 0
        v = self.gpu_layers.value()
        return None if v >= 999 else v

    def set_pending_reload(self, pending: bool) -> None:
        """Say that the model options wait for a reload (``pending``), and when the
        threads asked for are more than this computer's logical CPUs."""
        notes = ["Reload the model to apply the new context length / threads / prompt "
                 "cache / GPU layers."] if pending else []
        cpus = usable_cores()
        if (n := self.threads.value()) > cpus:
            notes.append(f"{n} threads on {cpus} logical CPUs: the threads beyond them wait "
                         "for each other at every step, which is usually slower.")
        self.pending_label.setText(" ".join(notes))

    @Slot()
    def _on_sampling_value_changed(self) -> None:
        if not self._filling:
            self._sampling = self.sampling()
            self.sampling_changed.emit(self._sampling)

    @Slot()
    def _on_speculation_value_changed(self) -> None:
        if not self._filling:
            self._speculation = self.speculation()
            self.speculation_changed.emit(self._speculation)

    def set_gpu_supported(self, supported: bool) -> None:
        """Whether this llama.cpp build can put layers on a GPU (:attr:`ModelInfo.gpu_supported
        <app.chat.events.ModelInfo.gpu_supported>`): without a GPU backend, GPU layers and
        CPU only are greyed out, CPU only ticked, and their tooltips say why (every layer
        runs on the CPU whatever the setting holds; the setting itself is kept)."""
        if self._gpu_supported:
            self._saved_gpu_layers = self.gpu_layers_value()
        self._gpu_supported = supported
        why = ("This llama.cpp build has no GPU backend (CUDA, Metal or Vulkan): every "
               "layer runs on the CPU.")
        self.cpu_only.blockSignals(True)
        self.cpu_only.setChecked(not supported or self._saved_gpu_layers == 0)
        self.cpu_only.blockSignals(False)
        self.cpu_only.setEnabled(supported)
        self.cpu_only.setToolTip(_CPU_ONLY_TIP if supported else why)
        self.gpu_layers.setToolTip(_GPU_LAYERS_TIP if supported else why)
        self.gpu_layers.setEnabled(supported and not self.cpu_only.isChecked())

    @Slot()
    def _on_model_value_changed(self) -> None:
        self.gpu_layers.setEnabled(self._gpu_supported and not self.cpu_only.isChecked())
        if not self._filling:
            self.model_options_changed.emit(self.n_ctx.value(), self.gpu_layers_value(),
                                            self.exact.isChecked(), self.threads.value() or None,
                                            self.prompt_cache.value())
