"""The chat window's keyboard shortcuts and its Help menu.

Shortcuts: Ctrl+N new chat, Ctrl+R regenerate, Esc or Ctrl+. stop the reply (Ctrl+. is
what macOS and many chat apps use for "stop"), Ctrl+M the model picker. Help → About
Tandem opens :class:`app.ui.about.AboutDialog`.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDialog, QMainWindow


def install_window_actions(window: QMainWindow, *, new_chat: Callable[[], object],
                           regenerate: Callable[[], object], stop: Callable[[], object],
                           models: Callable[[], object]) -> QAction:
    """Add the shortcuts and the Help menu to ``window``.

    Returns:
        the Help → About Tandem action.
    """
    for text, keys, slot in (
        ("New chat", [QKeySequence(QKeySequence.StandardKey.New)], new_chat),
        ("Regenerate", [QKeySequence("Ctrl+R")], regenerate),
        ("Stop", [QKeySequence(Qt.Key.Key_Escape), QKeySequence("Ctrl+.")], stop),
        ("Models…", [QKeySequence("Ctrl+M")], models),
    ):
        action = QAction(text, window)
        action.setShortcuts(keys)
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.triggered.connect(lambda _checked=False, slot=slot: slot())
        window.addAction(action)
    about = window.menuBar().addMenu("&Help").addAction("About Tandem")
    about.triggered.connect(lambda _checked=False: show_about(window))
    return about


def show_about(parent: QMainWindow) -> QDialog:
    """Help → About: versions, backend, folders, "Open log folder" (app/ui/about.py);
    the dialog is deleted when closed."""
    from app.ui.about import AboutDialog

    dialog = AboutDialog(parent=parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()
    return dialog
