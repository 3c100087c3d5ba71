""""Open recent": the target models the window loaded last, most recent first.

:class:`RecentModelsMenu` reads the list when it opens (the settings'
``model.recent_targets``, which :class:`~app.chat.conversation.ChatController` keeps),
so the model bar's "Open GGUF… ▾" menu and the File menu show the same list without
being told of each load. A file no longer there is listed, disabled, so the list does
not silently shrink; "Clear the list" empties it. Two files of one name show their
folders; the model loaded now is ticked.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QMenu, QWidget

from app.store.settings import ModelSettings


class RecentModelsMenu(QMenu):
    """The "Open recent" submenu.

    ``settings``: whose ``recent_targets`` it lists and clears (none until the window
    sets it); ``loaded``: the target loaded now, ticked (None: none, or a server's).
    """

    chosen = Signal(Path)
    """A listed model was clicked: load it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Open recent", parent)
        self.settings: ModelSettings | None = None
        self.loaded: Path | None = None
        self.setToolTipsVisible(True)
        self.aboutToShow.connect(self._on_about_to_show)

    @Slot()
    def _on_about_to_show(self) -> None:
        self.clear()
        paths = list(self.settings.recent_targets) if self.settings is not None else []
        if not paths:
            self.addAction("No model opened yet").setEnabled(False)
            return
        names = [p.name for p in paths]
        for path in paths:
            there = path.is_file()
            text = path.name if names.count(path.name) == 1 else \
                f"{path.name} \u2014 {path.parent.name or path.parent}"
            action = self.addAction(text if there else f"{text} (not found)")
            action.setToolTip(str(path))
            action.setEnabled(there)
            action.setCheckable(path == self.loaded)
            action.setChecked(path == self.loaded)
            action.triggered.connect(lambda _checked=False, p=path: self.chosen.emit(p))
        self.addSeparator()
        self.addAction("Clear the list", self._on_clear_triggered)

    @Slot()
    def _on_clear_triggered(self) -> None:
        if self.settings is not None:
            self.settings.recent_targets = []
