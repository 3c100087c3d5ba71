"""Starter prompts in the empty chat: a few things to try, suited to the loaded model.

The prompts live in ``resources/prompts/starters.json``: ``chat`` prompts for models with
a chat template (instruct models: a code edit that prompt lookup speeds up, rewrites, a
question) and ``base`` prompts for base models, which continue text rather than follow
instructions. :class:`StarterPromptsWidget` shows them as buttons; one click emits the
prompt, and the chat window sends it as the user's message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QGridLayout, QPushButton, QVBoxLayout, QWidget

from app.formatting import loads_json
from app.store.paths import resources_dir
from app.ui.labels import Label

log = logging.getLogger(__name__)


class StarterPrompt(BaseModel):
    """One starter: the button's title, why it is there (the tooltip) and the prompt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str = Field(min_length=1, max_length=60)
    why: str = ""
    prompt: str = Field(min_length=1)


class _StartersFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    about: str = ""
    chat: tuple[StarterPrompt, ...] = Field(min_length=1, max_length=4)
    base: tuple[StarterPrompt, ...] = Field(min_length=1, max_length=4)


def starters_path() -> Path:
    """``resources/prompts/starters.json``."""
    return resources_dir() / "prompts" / "starters.json"


def load_starter_prompts(has_chat_template: bool, path: Path | None = None) -> tuple[StarterPrompt, ...]:
    """The starters for a model with (``chat``) or without (``base``) a chat template.

    Never raises: a missing or invalid file is logged and no starters are offered (the
    chat works without them).
    """
    path = path or starters_path()
    try:
        data = _StartersFile.model_validate(loads_json(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        log.warning("starter prompts %s unusable: %s", path, exc)
        return ()
    return data.chat if has_chat_template else data.base


class StarterPromptsWidget(QFrame):
    """"Try one of these": one button per starter prompt."""

    starter_prompt_clicked = Signal(str)
    """A starter was clicked: its prompt text, to send as the user's message."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("starterPrompts")
        col = QVBoxLayout(self)
        col.setContentsMargins(8, 24, 8, 8)
        col.setSpacing(8)
        self.title = Label("Try one of these")
        self.title.setObjectName("starterTitle")
        col.addWidget(self.title)
        self.hint = Label()
        self.hint.setObjectName("starterHint")
        self.hint.setWordWrap(True)
        col.addWidget(self.hint)
        self._grid = QGridLayout()
        self._grid.setSpacing(8)
        col.addLayout(self._grid)
        self.buttons: list[QPushButton] = []
        self._prompts: tuple[StarterPrompt, ...] = ()

    @property
    def prompts(self) -> tuple[StarterPrompt, ...]:
        return self._prompts

    def set_prompts(self, prompts: Sequence[StarterPrompt], *, base_model: bool = False) -> None:
        """Show these starters (none: the widget hides itself)."""
        for b in self.buttons:
            self._grid.removeWidget(b)
            b.deleteLater()
        self.buttons = []
        self._prompts = tuple(prompts)
        self.hint.setText(
            "A base model continues the text you give it; these show speculation at work."
            if base_model else
            "Edits and rewrites repeat the prompt, which is what prompt lookup drafts from: "
            "watch the tint and the gauge.")
        for i, p in enumerate(self._prompts):
            b = QPushButton(p.title)
            b.setObjectName("starterButton")
            preview = p.prompt if len(p.prompt) <= 400 else p.prompt[:400] + "…"
            b.setToolTip(f"{p.why}\n\n{preview}" if p.why else preview)
            b.clicked.connect(lambda _checked=False, text=p.prompt: self.starter_prompt_clicked.emit(text))
            self._grid.addWidget(b, i // 2, i % 2)
            self.buttons.append(b)
        self.setVisible(bool(self._prompts))

