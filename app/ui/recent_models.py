""""Open recent": the target models the window loaded last, most recent first.

:class:`RecentModelsMenu` reads the list when it opens (the settings'
``model.recent_targets``, which :class:`~app.chat.conversation.ChatController` keeps),
so the model bar's "Open GGUF… ▾" menu and the File menu show the same list without
being told of each load. A file no longer there is listed, disabled, so the list does
not silently shrink.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QMenu, QWidget


class RecentModelsMenu(QMenu):
    """The "Open recent" submenu.

    ``source`` returns the paths to list, most recent first (called each time the menu
    opens; none until the window sets it).
    """

    chosen = Signal(Path)
    """A listed model was clicked: load it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Open recent", parent)
        self.source: Callable[[], Sequence[Path]] = tuple
        self.setToolTipsVisible(True)
        self.aboutToShow.connect(self._on_about_to_show)

    @Slot()
    def _on_about_to_show(self) -> None:
        self.clear()
        paths = list(self.source())
        if not paths:
            self.addAction("No model opened yet").setEnabled(False)
        for path in paths:
            there = path.is_file()
            action = self.addAction(path.name if there else f"{path.name} (not found)")
            action.setToolTip(str(path))
            action.setEnabled(there)
            action.triggered.connect(lambda _checked=False, p=path: self.chosen.emit(p))
