"""The race window: what speculative decoding buys, on the user's own machine.

A separate top-level window that the chat window opens with its chat service (the
target is never loaded twice: races, sweeps and estimates are jobs on the session the
service already holds, queued with the chat's own replies), the current conversation or
a prompt, and its sampling and speculation settings. Four tabs:

* **Race**: the same prompt and seed with speculation off, then on (the chosen drafter
  and k), run one after the other on the race worker thread; then both replies replay
  side by side from t = 0 at their true pace, followed by the table of figures and the
  verdict on the two texts (:mod:`app.ui.race.race_view`). Export as PNG or Markdown.
* **k sweep**: measured tok/s against k with the predicted curve, and the best k applied
  with one click (:attr:`RaceWindow.draft_length_applied`).
* **Prompt lookup**: would n-gram lookup have helped on past conversations?
* **Calculator**: α, k and c give E and the predicted speedup.

Everything that touches the model runs as a job of :class:`~app.chat.service.ChatService`
(:mod:`app.chat.measure`); results arrive through the window's
:class:`~app.ui.service_bridge.ServiceBridge`. Closing the window cancels its jobs, which
stop within one engine round. The chat window closes this one before it loads another
model (the drafter list and the target name describe the loaded one).
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, Signal, Slot
from PySide6.QtGui import QCloseEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QMainWindow,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.chat.events import JobDone, JobFailed, ModelInfo, UserError
from app.chat.history_source import PastConversation
from app.chat.measure import start_lookup_estimate, start_race, start_sweep
from app.chat.recording import RaceRecording
from app.chat.requests import (
    LookupRequest,
    PromptSpec,
    RaceProgressed,
    RaceRequest,
    SweepProgressed,
    SweepRequest,
)
from app.chat.service import Job
from app.engine.chat import ChatMessage
from app.engine.measure.lookup import LookupEstimate
from app.engine.measure.prompts import BenchPrompt, load_prompts
from app.engine.measure.sweep import KSweepResult
from app.errors import TandemError
from app.formatting import draft_length_words
from app.options import (
    K_MAX,
    DrafterNeeds,
    SamplingParams,
    SpecMode,
    SpeculationConfig,
    drafter_infos,
    drafter_unusable,
    field_schema,
)
from app.ui.explain import context_fit_words
from app.ui.qt_compat import apply_qt_workarounds
from app.ui.race.calculator import SpeedupCalculatorWidget
from app.ui.race.lookup_view import LookupEstimateWidget
from app.ui.race.race_view import RaceViewWidget
from app.ui.race.crossover_view import CrossoverWidget
from app.ui.race.sweep_view import KSweepWidget
from app.ui.sampling_panel import SPIN_MAX
from app.ui.service_bridge import ServiceBridge
from app.ui.labels import Label
from app.ui.text_wrap import set_plain_text

log = logging.getLogger(__name__)

#: longest reply the race offers by default (both runs and the replay take this long)
DEFAULT_RACE_TOKENS = 128

STYLE = """
#raceHeader { background: #ffffff; border-bottom: 1px solid #dde3ea; }
#raceTarget { font-weight: 600; color: #1a365d; }
#raceError { background: #fde8e8; color: #822727; padding: 6px 10px; border-radius: 4px; }
#raceError[level="warning"] { background: #fff5db; color: #744210; }
#raceError[level="info"] { background: #e6fffa; color: #234e52; }
#raceLane { background: #ffffff; border: 1px solid #dde3ea; border-radius: 8px; }
#raceLane[side="on"] { border: 1px solid #a3bffa; }
#laneTitle { font-size: 15px; font-weight: 700; color: #2d3748; }
#laneSubtitle { color: #4a5568; }
#laneBadge { color: #4a5568; padding: 2px 8px; border-radius: 9px; background: #edf2f7; }
#laneBadge[winner="true"] { color: #ffffff; background: #2f855a; font-weight: 700; }
#laneText { background: #fbfcfd; border: 1px solid #e3e8ee; border-radius: 6px; }
#statValue { font-size: 22px; font-weight: 700; color: #1a202c; }
#raceLane[side="on"] #statValue { color: #2b6cb0; }
#statCaption { color: #718096; font-size: 11px; }
#raceResults { background: #ffffff; border: 1px solid #dde3ea; border-radius: 8px; }
#racePlaceholder { color: #a0aec0; }
#raceSideScroll, #raceSide { background: transparent; }
#raceHeadline { font-size: 17px; font-weight: 700; color: #975a16; }
#raceHeadline[faster="true"] { color: #2b6cb0; }
#racePrediction { color: #4a5568; font-size: 11px; }
#raceVerdict { font-size: 14px; font-weight: 700; color: #c05621; }
#raceVerdict[identical="true"] { color: #2f855a; }
#raceExplanation { color: #744210; background: #fffaf0; padding: 6px; border-radius: 4px; }
#raceSettings, #sweepCaption, #lookupAbout { color: #718096; font-size: 11px; }
#raceStatus { color: #4a5568; }
#sweepRecommendation { font-weight: 600; color: #22543d; }
#sweepRecommendation[none_beat="true"] { color: #975a16; }
#sweepError { color: #c53030; }
#lookupVerdict { font-weight: 600; color: #2d3748; }
#lookupVerdict[tone="pays"] { color: #22543d; }
#lookupVerdict[tone="costs"] { color: #975a16; }
#calcBig { font-size: 20px; font-weight: 700; color: #2b6cb0; }
"""


def _examples() -> list[tuple[str, BenchPrompt]]:
    """The builtin prompts as ("code: rename-variable", prompt) (none if unreadable)."""
    out: list[tuple[str, BenchPrompt]] = []
    for name in ("code", "chat"):
        try:
            out += [(f"{name}: {p.name}", p) for p in load_prompts(f"builtin:{name}")]
        except TandemError:
            log.warning("builtin prompt set %s unavailable", name)
    return out


def race_drafters(draft_path: Path | None, model: ModelInfo | None = None
                  ) -> list[tuple[SpecMode, str]]:
    """The drafters a race can use, from the registry, with their labels: those that
    need no second model first (without those the loaded ``model`` cannot use:
    :func:`app.options.drafter_unusable`, MTP on a model with neither its layers nor a
    loaded MTP assistant), then a drafter that needs a draft model when one is loaded
    (labelled with its file name). An MTP assistant at ``draft_path``
    (``model.draft_is_assistant``) drafts through MTP only, whose lane names it
    (:meth:`~app.options.DrafterInfo.label_for`): no draft-model lane."""
    assistant = model is not None and model.draft_is_assistant
    name = draft_path.name if assistant and draft_path is not None else None
    free = [(SpecMode(i.mode), i.label_for(name)) for i in drafter_infos()
            if i.needs is not DrafterNeeds.DRAFT_MODEL
            and drafter_unusable(i, model, assistant=assistant) is None]
    drafts = [(SpecMode(i.mode), f"{i.label} · {draft_path.name}") for i in drafter_infos()
              if i.needs is DrafterNeeds.DRAFT_MODEL and draft_path is not None
              and not assistant]
    return free + drafts


class RaceWindow(QMainWindow):
    """The race window (see the module docstring).

    Args:
        bridge: the chat window's service bridge: jobs go to its service, events come
            back on its signal.
        model: what is loaded (target name, draft model, CPU or GPU).
        sampling: the chat window's sampling settings (temperature, seed, max tokens and
            the sampler chain); the race window lets the user change temperature, seed
            and max tokens for the race.
        speculation: the chat window's speculation settings; mode "off" starts the race
            with prompt lookup (a race needs a drafter).
        messages: the current conversation; the race then regenerates its last reply
            (trailing assistant messages are dropped). Takes precedence over ``prompt``.
        prompt: a prompt text to race instead (without ``messages``); neither: the first
            builtin code-editing example.
        conversations: past conversations offered to the prompt-lookup estimate
            (:func:`app.ui.race.conversations_from_history`).
        parent: the chat window; this window stays top-level, and closes (joining its
            thread) when the parent closes.
    """

    draft_length_applied = Signal(int)
    """k: the user applied this draft length from the k sweep (the chat window should
    set its speculation's draft_max to it)."""
    exact_verification_requested = Signal(bool)
    """The user turned exact verification on or off here: the chat window reloads the
    target that way (which closes this window) and opens the race again."""
    busy_changed = Signal(bool)
    """True while a race or k sweep uses the model, False when it is free again (the chat
    window should not start a reply meanwhile: the engine would refuse it)."""

    def __init__(
        self,
        bridge: ServiceBridge,
        model: ModelInfo,
        *,
        sampling: SamplingParams | None = None,
        speculation: SpeculationConfig | None = None,
        messages: Sequence[ChatMessage] = (),
        prompt: str = "",
        conversations: Sequence[PastConversation] = (),
        parent: QWidget | None = None,
    ) -> None:
        apply_qt_workarounds()
        super().__init__(parent)
        self.setWindowFlag(Qt.WindowType.Window, True)
        self.setWindowTitle("Race: speculation off vs on")  # Qt appends the app name
        # Esc stops a running race or sweep, else closes the window; Ctrl+W closes it
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self).activated.connect(self._escape)
        QShortcut(QKeySequence(QKeySequence.StandardKey.Close), self).activated.connect(self.close)
        self.setObjectName("raceWindow")
        self.setStyleSheet(STYLE)
        self.bridge = bridge
        self.service = bridge.service
        self.model = model
        self._sampling = sampling or SamplingParams()
        spec = speculation or SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP)
        if spec.mode in (SpecMode.OFF, SpecMode.AUTO):  # a race needs one named drafter
            spec = spec.with_changes(mode=SpecMode.PROMPT_LOOKUP)
        self._speculation = spec
        msgs = list(messages)
        while msgs and msgs[-1].role == "assistant":
            msgs.pop()
        self._messages = tuple(msgs) if any(m.role == "user" for m in msgs) else ()
        self._examples = _examples()
        self._race: Job | None = None
        self._sweep: Job | None = None
        self._lookup: Job | None = None
        self._warm = False  # the first race or sweep warms the model up
        self._closed = False
        self._filling_prompt = False
        bridge.event_received.connect(self._on_bridge_event_received)

        self._build(prompt)
        self.lookup_view.set_conversations(conversations)
        self._update_state()
        self.resize(1360, 860)
        if parent is not None:
            parent.installEventFilter(self)

    # -- layout -----------------------------------------------------------------------
    def _build(self, prompt: str) -> None:
        central = QWidget()
        col = QVBoxLayout(central)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(0)

        header = QFrame()
        header.setObjectName("raceHeader")
        hc = QVBoxLayout(header)
        hc.setContentsMargins(12, 8, 12, 8)
        hc.setSpacing(6)
        top = QHBoxLayout()
        self.target_label = Label(f"Target: {self.model.target_path.name}")
        self.target_label.setObjectName("raceTarget")
        top.addWidget(self.target_label)
        top.addSpacing(16)
        top.addWidget(Label("Prompt:"))
        self.prompt_combo = QComboBox()
        self.prompt_combo.setMinimumWidth(260)
        if self._messages:
            n = len(self._messages)
            self.prompt_combo.addItem(f"This conversation ({n} message{'s' * (n != 1)})",
                                      ("conversation", None))
        self.prompt_combo.addItem("Custom text", ("custom", None))
        for label, example in self._examples:
            self.prompt_combo.addItem(f"Example — {label}", ("example", example))
        top.addWidget(self.prompt_combo)
        top.addStretch(1)
        hc.addLayout(top)

        self.prompt_edit = QPlainTextEdit()
        self.prompt_edit.setObjectName("racePrompt")
        self.prompt_edit.setFixedHeight(72)
        self.prompt_edit.setPlaceholderText("The prompt both runs answer")
        hc.addWidget(self.prompt_edit)

        row = QHBoxLayout()
        row.setSpacing(8)
        row.addWidget(Label("Drafter"))
        self.drafter_combo = QComboBox()
        for mode, label in race_drafters(self.model.draft_path,
                                         self.model if self.model.remote is None else None):
            self.drafter_combo.addItem(label, mode)
        idx = self.drafter_combo.findData(self._speculation.mode)
        self.drafter_combo.setCurrentIndex(max(0, idx))
        self._shown_drafter = SpecMode(self.drafter_combo.currentData())
        row.addWidget(self.drafter_combo)
        row.addWidget(Label("k"))
        self.k_spin = QSpinBox()
        self.k_spin.setRange(1, K_MAX)
        self.k_spin.setValue(self._speculation.draft_max)
        self.k_spin.setToolTip("Draft length: tokens proposed per round. Where the two texts "
                               "differ, the race measures the first difference and says "
                               "whether it is a near-tie or suspect.")
        row.addWidget(self.k_spin)
        self.adaptive_check = QCheckBox("adaptive")
        self.adaptive_check.setChecked(self._speculation.adaptive)
        self.adaptive_check.setToolTip(
            "Adaptive: k is a maximum and each round drafts only as many tokens as the "
            "measured costs on this machine make worthwhile (as in the chat). Off: every "
            "round drafts up to exactly k.")
        row.addWidget(self.adaptive_check)
        self.exact_check = QCheckBox("exact verification")
        self.exact_check.setChecked(self.model.exact_verification)
        self.exact_check.setToolTip(
            "Reload the target so that a verification batch computes exactly like one-token "
            "passes (measured with Gemma 3 270M on an x86-64 build: 128 of 128 outputs "
            "identical on builtin:code, k 1-8, greedy and seeded; docs/proof.md). CPU "
            "only (GPU layers 0), Q4_1/Q5_1/Q5_0/Q8_0 weights, or Q4_K/Q6_K (most Q4_K_M "
            "files) after a restart of Tandem; prompt processing gets slower. Changing it "
            "reloads the model and reopens this window.")
        self.exact_check.toggled.connect(self.exact_verification_requested)
        row.addWidget(self.exact_check)
        row.addStretch(1)
        hc.addLayout(row)
        row = QHBoxLayout()  # two rows, so that the window fits a 1024-pixel screen
        row.setSpacing(8)
        row.addWidget(Label("Seed"))
        self.seed_spin = QSpinBox()
        self.seed_spin.setRange(-1, SPIN_MAX)  # as the Sampling tab's
        self.seed_spin.setSpecialValueText("random")
        self.seed_spin.setValue(min(self._sampling.seed, SPIN_MAX))
        row.addWidget(self.seed_spin)
        row.addWidget(Label("Temperature"))
        self.temp_spin = QDoubleSpinBox()
        temperature = field_schema(SamplingParams, "temperature")
        self.temp_spin.setRange(temperature.low or 0.0, temperature.high or 0.0)
        self.temp_spin.setSingleStep(0.1)
        self.temp_spin.setDecimals(2)
        self.temp_spin.setValue(self._sampling.temperature)
        row.addWidget(self.temp_spin)
        row.addWidget(Label("Max tokens"))
        self.max_spin = QSpinBox()
        self.max_spin.setRange(4, 4096)
        self.max_spin.setValue(min(DEFAULT_RACE_TOKENS, self._sampling.max_tokens))
        row.addWidget(self.max_spin)
        row.addStretch(1)
        self.start_button = QPushButton("Start race")
        self.start_button.setObjectName("primaryButton")
        self.start_button.setMinimumWidth(120)
        self.start_button.clicked.connect(self._on_start_button_clicked)
        row.addWidget(self.start_button)
        hc.addLayout(row)
        self.message = Label("", rich=True)  # every text escaped (_show_message)
        self.message.setObjectName("raceError")
        self.message.setWordWrap(True)
        self.message.hide()
        hc.addWidget(self.message)
        col.addWidget(header)

        self.tabs = QTabWidget()
        self.race_view = RaceViewWidget()
        self.sweep_view = KSweepWidget()
        self.lookup_view = LookupEstimateWidget()
        self.calculator = SpeedupCalculatorWidget()
        self.crossover_view = CrossoverWidget()
        self.tabs.addTab(self.race_view, "Race")
        self.tabs.addTab(self.sweep_view, "k sweep")
        self.tabs.addTab(self.lookup_view, "Is prompt lookup worth it?")
        self.tabs.addTab(self.calculator, "Calculator")
        self.tabs.addTab(self.crossover_view, "Serving crossover")
        col.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

        self.race_view.export_png_clicked.connect(self._on_race_view_export_png_clicked)
        self.race_view.export_markdown_clicked.connect(self._on_race_view_export_markdown_clicked)
        self.sweep_view.run_clicked.connect(self._on_sweep_view_run_clicked)
        self.sweep_view.stop_clicked.connect(self._on_sweep_view_stop_clicked)
        self.sweep_view.apply_clicked.connect(self._on_sweep_view_apply_clicked)
        self.lookup_view.estimate_clicked.connect(self._on_lookup_view_estimate_clicked)
        self.crossover_view.open_clicked.connect(self._on_crossover_view_open_clicked)
        self.prompt_combo.currentIndexChanged.connect(self._on_prompt_combo_current_index_changed)
        self.prompt_edit.textChanged.connect(self._on_prompt_edit_text_changed)
        self.drafter_combo.currentIndexChanged.connect(self._on_drafter_combo_current_index_changed)
        self.k_spin.valueChanged.connect(self._on_k_spin_value_changed)
        self.sweep_view.offer_k(self.k_spin.value())
        self.adaptive_check.toggled.connect(self._on_adaptive_check_toggled)

        if self._messages:
            self.prompt_combo.setCurrentIndex(0)
        elif prompt.strip() or not self._examples:
            self.prompt_combo.setCurrentIndex(self.prompt_combo.findText("Custom text"))
        else:
            self.prompt_combo.setCurrentIndex(1)  # the first code example
        self._fill_prompt(prompt)
        self._update_on_subtitle()

    # -- the prompt -------------------------------------------------------------------
    def _fill_prompt(self, custom: str = "") -> None:
        kind, example = self.prompt_combo.currentData()
        self._filling_prompt = True
        try:
            if kind == "conversation":
                self.prompt_edit.setReadOnly(True)
                set_plain_text(self.prompt_edit, "\n\n".join(
                    f"{m.role}: {m.content}" for m in self._messages))
            elif kind == "example":
                assert isinstance(example, BenchPrompt)
                self.prompt_edit.setReadOnly(False)
                plain = self.model.uses_fallback_template
                set_plain_text(self.prompt_edit, example.plain if plain else example.chat)
            else:
                self.prompt_edit.setReadOnly(False)
                if custom:
                    set_plain_text(self.prompt_edit, custom)
        finally:
            self._filling_prompt = False

    def prompt_spec(self) -> PromptSpec:
        """What the next race or sweep will run."""
        kind, example = self.prompt_combo.currentData()
        if kind == "conversation":
            return PromptSpec(text="", messages=self._messages, name="this conversation")
        text = self.prompt_edit.toPlainText()
        if kind == "example":
            assert isinstance(example, BenchPrompt)
            return PromptSpec(text=text, stop=example.stop, name=example.name)
        return PromptSpec(text=text, name="custom")

    def select_prompt(self, text: str) -> None:
        """Race ``text`` as a custom prompt (no stop strings)."""
        self.prompt_combo.setCurrentIndex(self.prompt_combo.findText("Custom text"))
        set_plain_text(self.prompt_edit, text)

    def select_example(self, name: str) -> None:
        """Race the builtin example called ``name`` (e.g. "rename-variable").

        Raises:
            KeyError: no such example.
        """
        for i in range(self.prompt_combo.count()):
            kind, example = self.prompt_combo.itemData(i)
            if kind == "example" and example.name == name:
                self.prompt_combo.setCurrentIndex(i)
                return
        raise KeyError(name)

    # -- settings ---------------------------------------------------------------------
    def sampling(self) -> SamplingParams:
        """The chat window's sampling with this window's temperature, seed, max tokens."""
        return self._sampling.with_changes(temperature=self.temp_spin.value(),
                                           seed=self.seed_spin.value(),
                                           max_tokens=self.max_spin.value())

    def speculation(self) -> SpeculationConfig:
        """The "on" side: the chosen drafter and k (other settings from the chat window)."""
        k = self.k_spin.value()
        return self._speculation.with_changes(mode=SpecMode(self.drafter_combo.currentData()),
                                              draft_max=k,
                                              draft_min=min(self._speculation.draft_min, k),
                                              adaptive=self.adaptive_check.isChecked())

    def set_race_settings(self, *, k: int | None = None, seed: int | None = None,
                          temperature: float | None = None, max_tokens: int | None = None,
                          drafter: str | None = None, adaptive: bool | None = None) -> None:
        """Set the race's controls from code (tests, the standalone launcher)."""
        if drafter is not None:  # first: a drafter change moves a default k
            idx = self.drafter_combo.findData(drafter)
            if idx < 0:
                raise ValueError(f"drafter {drafter!r} is not available")
            self.drafter_combo.setCurrentIndex(idx)
        if k is not None:
            self.k_spin.setValue(k)
        if adaptive is not None:
            self.adaptive_check.setChecked(adaptive)
        if seed is not None:
            self.seed_spin.setValue(seed)
        if temperature is not None:
            self.temp_spin.setValue(temperature)
        if max_tokens is not None:
            self.max_spin.setValue(max_tokens)

    def controls_state(self) -> dict[str, object]:
        """What the user set here (prompt, drafter, k, adaptive, seed, temperature, max
        tokens), for :meth:`restore_controls` on a new race window."""
        return {"prompt_index": self.prompt_combo.currentIndex(),
                "prompt_text": self.prompt_edit.toPlainText(),
                "drafter": self.drafter_combo.currentData(), "k": self.k_spin.value(),
                "adaptive": self.adaptive_check.isChecked(), "seed": self.seed_spin.value(),
                "temperature": self.temp_spin.value(), "max_tokens": self.max_spin.value()}

    def restore_controls(self, state: dict[str, object]) -> None:
        """Set the controls from :meth:`controls_state` of an earlier window (a drafter
        this model does not offer, or a prompt entry that is gone, is left as it is)."""
        index = int(state["prompt_index"])  # type: ignore[call-overload]
        if 0 <= index < self.prompt_combo.count():
            self.prompt_combo.setCurrentIndex(index)
            if self.prompt_combo.itemData(index)[0] == "custom":
                set_plain_text(self.prompt_edit, str(state["prompt_text"]))
        drafter = state["drafter"]
        self.set_race_settings(
            k=int(state["k"]), adaptive=bool(state["adaptive"]),  # type: ignore[call-overload]
            seed=int(state["seed"]), temperature=float(state["temperature"]),  # type: ignore[call-overload, arg-type]
            max_tokens=int(state["max_tokens"]),  # type: ignore[call-overload]
            drafter=drafter if self.drafter_combo.findData(drafter) >= 0 else None)  # type: ignore[arg-type]

    def show_exact_requested(self, on: bool) -> None:
        """Show whether exact verification is asked for (the setting), without emitting
        :attr:`exact_verification_requested`."""
        self.exact_check.blockSignals(True)
        self.exact_check.setChecked(on)
        self.exact_check.blockSignals(False)

    def _update_on_subtitle(self) -> None:
        words = SpecMode(self.drafter_combo.currentData()).words
        self.race_view.set_lane_titles(
            f"{words}, {draft_length_words(self.k_spin.value(), self.adaptive_check.isChecked())}")

    # -- state ------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """A race or a k sweep is running on the model."""
        return self._race is not None or self._sweep is not None

    def _update_state(self) -> None:
        racing = self._race is not None
        sweeping = self._sweep is not None
        self.start_button.setText("Stop" if racing else "Start race")
        self.start_button.setEnabled(not sweeping)
        for w in (self.prompt_combo, self.prompt_edit, self.drafter_combo, self.k_spin,
                  self.adaptive_check, self.exact_check, self.seed_spin, self.temp_spin,
                  self.max_spin):
            w.setEnabled(not self.busy)
        self.sweep_view.set_enabled_to_run(not racing)

    def _set_busy(self, race: Job | None = None, sweep: Job | None = None) -> None:
        was = self.busy
        self._race, self._sweep = race, sweep
        self._update_state()
        if was != self.busy:
            self.busy_changed.emit(self.busy)

    def show_error(self, error: UserError) -> None:
        """Log ``error`` and show it at the top of the window (the one place errors go)."""
        if error.detail:
            log.error("%s: %s\n%s", error.title, error.message, error.detail)
        else:
            log.warning("%s: %s", error.title, error.message)
        self._show_message(f"{error.title}.", error.level, error.message)

    def _show_message(self, text: str, level: str, detail: str = "") -> None:
        """Show ``text`` (in bold when a ``detail`` follows it) in the message strip."""
        shown = html.escape(text)
        self.message.setText(f"<b>{shown}</b> {html.escape(detail)}" if detail else shown)
        self.message.setProperty("level", level)
        self.message.style().unpolish(self.message)
        self.message.style().polish(self.message)
        self.message.show()

    def _clear_message(self) -> None:
        self.message.hide()

    # -- race -------------------------------------------------------------------------
    def start_race(self) -> bool:
        """Start a race with the current settings. Returns False when busy, closed or
        the prompt is empty (the reason is shown)."""
        if self.busy or self._closed:
            return False
        spec = self.prompt_spec()
        if not spec.messages and not spec.text.strip():
            self.show_error(UserError("No prompt", "Type a prompt or choose an example.",
                                      level="warning"))
            return False
        request = RaceRequest(spec, self.sampling(), self.speculation(), warm_up=not self._warm)
        if (job := self._submit(lambda: start_race(self.service, request))) is None:
            return False
        self._set_busy(race=job)
        self.tabs.setCurrentWidget(self.race_view)
        self.race_view.begin_race()
        return True

    def _submit(self, start: Callable[[], Job]) -> Job | None:
        self._clear_message()
        try:
            return start()
        except TandemError as exc:  # the queue is full or the app is closing
            self.show_error(UserError("Not now", str(exc), level="warning"))
            return None

    def _escape(self) -> None:
        if self._race is not None or self._sweep is not None:
            self.stop()
        else:
            self.close()

    def stop(self) -> None:
        """Stop the running race or sweep; the engine stops within one round and what
        ran so far is shown."""
        for job in (self._race, self._sweep):
            if job is not None:
                job.cancel()

    @Slot()
    def _on_start_button_clicked(self) -> None:
        if self._race is not None:
            self.stop()
        else:
            self.start_race()

    @Slot(object)
    def _on_bridge_event_received(self, event: object) -> None:
        """Every event of the service; this window keeps those of its own jobs."""
        if self._closed:
            return
        job_id = getattr(event, "job_id", None)
        race, sweep, lookup = (j.id if j is not None else None
                               for j in (self._race, self._sweep, self._lookup))
        if job_id is None or job_id not in (race, sweep, lookup):
            return
        if isinstance(event, RaceProgressed):
            self.race_view.show_progress(event.lane, event.tokens, event.max_tokens, event.pair)
        elif isinstance(event, SweepProgressed):
            self.sweep_view.show_progress(event.done, event.total, event.label, event.decode_tps)
        elif isinstance(event, (JobDone, JobFailed)):
            error = event.error if isinstance(event, JobFailed) else None
            value = event.value if isinstance(event, JobDone) else None
            if job_id == race:
                self._set_busy()
                self._race_ended(value, error)
            elif job_id == sweep:
                self._set_busy()
                self._sweep_ended(value, error)
            else:
                self._lookup = None
                self._lookup_ended(value, error)

    def _race_ended(self, rec: RaceRecording | None, error: UserError | None) -> None:
        if error is not None or rec is None:
            self.race_view.end_without_race("The race did not run.")
            if error is not None:
                self.show_error(error)
            return
        self._warm = True
        r = rec.result
        if r.cancelled and not r.on.token_ids and not r.off.token_ids:
            self.race_view.end_without_race("Stopped before any token was produced.")
            return
        self.race_view.show_recording(rec)
        s = r.on.stats
        self.calculator.set_measured(s.acceptance_rate, s.draft_cost_ratio, s.draft_max or None,
                                     verified=s.verified)
        if s.mode is SpecMode.PROMPT_LOOKUP:
            self.lookup_view.set_measured_alpha(
                "this window's race", s.acceptance_rate, verified=s.verified,
                speedup=r.measured_speedup,
                settled=not r.pairs or r.verdict in ("faster", "slower"))
        # both lanes raced the shortened conversation when it had to be shortened
        notes = [s.fallback_reason, context_fit_words(rec.context) if rec.context else None]
        if any(notes):
            self._show_message(" ".join(n for n in notes if n),
                               "warning" if s.fallback_reason else "info")

    # -- k sweep ----------------------------------------------------------------------
    def start_sweep(self) -> bool:
        """Start the k sweep with the sweep tab's draft lengths. Returns False when busy
        or the input is invalid (the reason is shown)."""
        if self.busy or self._closed:
            return False
        try:
            ks = self.sweep_view.ks()
        except ValueError as exc:
            self.sweep_view.show_error(str(exc))
            return False
        spec = self.prompt_spec()
        if not spec.messages and not spec.text.strip():
            self.sweep_view.show_error("Type a prompt or choose an example above.")
            return False
        repeat = self.sweep_view.repeat()
        request = SweepRequest(spec, self.sampling(), self.speculation(), ks,
                               repeat=repeat, warm_up=self.sweep_view.warm_up())
        if (job := self._submit(lambda: start_sweep(self.service, request))) is None:
            return False
        self._set_busy(sweep=job)
        self.sweep_view.begin(repeat * (len(ks) + 1))
        return True

    @Slot()
    def _on_sweep_view_run_clicked(self) -> None:
        self.start_sweep()

    @Slot()
    def _on_sweep_view_stop_clicked(self) -> None:
        self.stop()

    @Slot(int)
    def _on_sweep_view_apply_clicked(self, k: int) -> None:
        self.apply_draft_length(k)

    def apply_draft_length(self, k: int) -> None:
        """Use ``k`` for the race and tell the chat window (:attr:`draft_length_applied`)."""
        self.k_spin.setValue(k)
        self.draft_length_applied.emit(k)
        self._show_message(f"Draft length k = {k} applied.", "info")

    def _sweep_ended(self, result: KSweepResult | None, error: UserError | None) -> None:
        if error is not None or result is None:
            self.sweep_view.show_error(error.message if error else "The sweep failed.")
            if error is not None:
                self.show_error(error)
            return
        self._warm = True
        self.sweep_view.show_result(result)
        if result.context is not None:  # every k swept the shortened conversation
            self._show_message(context_fit_words(result.context), "info")
        if self.speculation().mode is SpecMode.PROMPT_LOOKUP:
            speedups = [p.measured_speedup for p in result.points
                        if p.measured_speedup is not None]
            self.lookup_view.set_measured_alpha("the k sweep", result.acceptance_rate,
                                                speedup=max(speedups, default=None))

    # -- prompt-lookup estimate -------------------------------------------------------
    def start_estimate(self) -> bool:
        """Estimate the lookup hit rate over the ticked conversations."""
        if self._closed or self._lookup is not None:
            return False
        convs = self.lookup_view.selected_conversations()
        if not convs:
            self.lookup_view.show_error("Tick at least one conversation.")
            return False
        request = LookupRequest(tuple(convs))
        if (job := self._submit(lambda: start_lookup_estimate(self.service, request))) is None:
            return False
        self._lookup = job
        self.lookup_view.set_busy(True)
        return True

    @Slot()
    def _on_lookup_view_estimate_clicked(self) -> None:
        self.start_estimate()

    def _lookup_ended(self, estimate: LookupEstimate | None, error: UserError | None) -> None:
        if error is not None or estimate is None:
            self.lookup_view.show_error(error.message if error else "No estimate.")
            return
        self.lookup_view.show_estimate(estimate)

    # -- export -----------------------------------------------------------------------
    def export_png(self, path: Path) -> None:
        """Save the finished race view as a PNG image (raises ValueError/OSError)."""
        if not self.race_view.finished:
            raise ValueError("There is no finished race to export.")
        self.race_view.export_png(path)

    def export_markdown(self, path: Path) -> None:
        """Save the finished race as Markdown (raises ValueError/OSError)."""
        if not self.race_view.finished:
            raise ValueError("There is no finished race to export.")
        self.race_view.export_markdown(path)

    def _default_export_path(self, suffix: str) -> str:
        stem = self.model.target_path.stem
        return str(Path.home() / f"tandem-race-{stem}{suffix}")

    @Slot()
    def _on_race_view_export_png_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export race as PNG",
                                              self._default_export_path(".png"), "PNG (*.png)")
        if path:
            self._export(self.export_png, Path(path))

    @Slot()
    def _on_race_view_export_markdown_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export race as Markdown",
                                              self._default_export_path(".md"),
                                              "Markdown (*.md)")
        if path:
            self._export(self.export_markdown, Path(path))

    def _export(self, fn: Callable[[Path], None], path: Path) -> None:
        try:
            fn(path)
        except (OSError, ValueError) as exc:
            self.show_error(UserError("Export failed", str(exc)))
        else:
            self._show_message(f"Saved {path}.", "info")

    def open_crossover(self, path: Path) -> bool:
        """Show the serving crossover saved in ``path`` (``bench --server … --out``) in
        its tab; a file that is not one gets a message. Returns whether it was shown."""
        try:
            self.crossover_view.load(path)
        except TandemError as exc:
            self.show_error(UserError("Cannot open the crossover", str(exc)))
            return False
        self.tabs.setCurrentWidget(self.crossover_view)
        return True

    @Slot()
    def _on_crossover_view_open_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a serving crossover", str(Path.home()),
                                              "Crossover JSON (*.json)")
        if path:
            self.open_crossover(Path(path))

    # -- other slots ------------------------------------------------------------------
    @Slot(int)
    def _on_prompt_combo_current_index_changed(self, _index: int) -> None:
        self._fill_prompt()

    @Slot()
    def _on_prompt_edit_text_changed(self) -> None:
        if self._filling_prompt:
            return
        kind, example = self.prompt_combo.currentData()
        if kind == "example":
            # an edited example is the user's own prompt: no example stop strings
            custom = self.prompt_combo.findText("Custom text")
            self.prompt_combo.blockSignals(True)
            self.prompt_combo.setCurrentIndex(custom)
            self.prompt_combo.blockSignals(False)

    @Slot(int)
    def _on_drafter_combo_current_index_changed(self, _index: int) -> None:
        # k left at the previous drafter's default follows the new drafter's (16 ↔ 4)
        new = SpecMode(self.drafter_combo.currentData())
        shown = self._speculation.model_copy(
            update={"mode": self._shown_drafter, "draft_max": self.k_spin.value()})
        self._shown_drafter = new
        self.k_spin.blockSignals(True)
        self.k_spin.setValue(shown.k_for(new))
        self.k_spin.blockSignals(False)
        self._update_on_subtitle()
        self.sweep_view.offer_k(self.k_spin.value())

    @Slot(int)
    def _on_k_spin_value_changed(self, value: int) -> None:
        self._update_on_subtitle()
        self.sweep_view.offer_k(value)

    @Slot(bool)
    def _on_adaptive_check_toggled(self, _checked: bool) -> None:
        self._update_on_subtitle()

    # -- lifetime ---------------------------------------------------------------------
    def shutdown(self) -> None:
        """Cancel this window's jobs (a running one stops within one engine round) and
        stop listening. Idempotent; the window can no longer run anything afterwards."""
        if self._closed:
            return
        self._closed = True
        self.race_view.stop_replay()
        for job in (self._race, self._sweep, self._lookup):
            if job is not None:
                job.cancel()
        self.bridge.event_received.disconnect(self._on_bridge_event_received)
        if self.busy:
            self._race = self._sweep = None
            self.busy_changed.emit(False)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Close with the parent (the chat window), so its jobs end in time."""
        if watched is self.parent() and event.type() == QEvent.Type.Close:
            self.close()
        return False

    def closeEvent(self, event: QCloseEvent) -> None:
        """Cancel this window's jobs, then close."""
        parent = self.parent()
        if parent is not None:
            parent.removeEventFilter(self)
        self.shutdown()
        super().closeEvent(event)
