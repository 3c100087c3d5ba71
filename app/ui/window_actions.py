"""The chat window's menus and keyboard shortcuts, and Enter on a focused button.

File: New chat (Ctrl+N), Models… (Ctrl+M), Quit (the platform's Quit keys, Ctrl+Q where
the platform names none). Without a menu entry: Regenerate (Ctrl+R), Stop (Esc or
Ctrl+., what macOS and many chat apps use for "stop"). Help: Keyboard shortcuts (the
same table the shortcuts are made from), Documentation (the README of a source
checkout), Open log folder, Report a problem… (copies the About details and opens the
log folder), About Tandem (:class:`app.ui.about.AboutDialog`). Server → Run this on a bigger
machine… opens :class:`app.ui.server_command_dialog.ServerCommandDialog`.

Qt's push buttons answer Space but not Enter outside dialogs; :class:`EnterPressesButtonFilter`
makes Enter (and the keypad's Enter) press the focused button everywhere, as users expect.
"""

from __future__ import annotations

import html
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, QUrl
from PySide6.QtGui import QAction, QDesktopServices, QGuiApplication, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPushButton,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

import app
from app.diagnostics import about_info
from app.store.settings import UiSettings
from app.ui.chat.conversation_list import STEP_KEYS
from app.ui.labels import Label


@dataclass(frozen=True, slots=True)
class WindowActions:
    """The actions :func:`install_window_actions` made (tests trigger them)."""

    about: QAction
    quit: QAction
    shortcuts: QAction
    documentation: QAction
    log_folder: QAction
    report_problem: QAction
    #: Server → Disconnect (None without a Server menu); enabled while a server is used
    disconnect: QAction | None = None
    #: View → the panes beside the chat, shown or hidden (none without a splitter)
    panes: tuple[QAction, ...] = ()
    #: File → "Open GGUF…", "Connect to a server…" and Server's "Connect to a server…":
    #: they change the model, so they are off while it is busy (a load, a reply, a
    #: race), as the model bar's own button is
    swaps: tuple[QAction, ...] = ()


def quit_keys() -> list[QKeySequence]:
    """The platform's Quit shortcut (Ctrl+Q on Linux, Cmd+Q on macOS); Ctrl+Q where the
    platform has none (Windows names no standard Quit key). A binding without a modifier
    (some platforms add the rare keyboard's "Exit" key) is left out."""
    keys = [k for k in QKeySequence.keyBindings(QKeySequence.StandardKey.Quit)
            if "+" in k.toString(QKeySequence.SequenceFormat.PortableText)]
    return keys or [QKeySequence("Ctrl+Q")]


def documentation_path() -> Path | None:
    """The README of the source checkout Tandem runs from, or None (an installed wheel or a
    bundle carries no documentation files)."""
    readme = Path(app.__file__).resolve().parent.parent / "README.md"
    return readme if readme.is_file() else None


def _add_server_menu(window: QMainWindow, connect: Callable[[], object],
                     server: tuple[Callable[[], object], Callable[[], object], QAction],
                     ) -> tuple[QAction, QAction]:
    """The Server menu: connect to a server, run this on a bigger machine, disconnect,
    and the checkable "Serve API" of the API tab (``server``: the second and third's
    callables, and that action). Returns Disconnect (enabled while a server is in use)
    and Connect (off while the model is busy)."""
    run_elsewhere, disconnect_server, serve = server
    server_menu = window.menuBar().addMenu("&Server")
    server_menu.setToolTipsVisible(True)  # the action's tooltip says what it gives
    connect_action = server_menu.addAction("Connect to a server…")
    connect_action.setToolTip("Replies run on an OpenAI-compatible server (llama-server, "
                              "vLLM, Tandem's own API) instead of this computer")
    connect_action.triggered.connect(lambda _checked=False: connect())
    launch = server_menu.addAction("Run this on a bigger machine…")
    launch.setObjectName("runElsewhereAction")
    launch.setToolTip("The llama-server or vLLM command that runs the loaded target "
                      "and drafter on another machine")
    launch.triggered.connect(lambda _checked=False: run_elsewhere())
    disconnect = server_menu.addAction("Disconnect from the server")
    disconnect.setToolTip("Replies run on this computer again: the model opened "
                          "last is loaded, if any")
    disconnect.setEnabled(False)
    disconnect.triggered.connect(lambda _checked=False: disconnect_server())
    server_menu.addSeparator()
    server_menu.addAction(serve)  # the API tab's "Serve API" switch
    return disconnect, connect_action


def _add_confirm_quit(file_menu: QMenu, settings: UiSettings,
                      save_soon: Callable[[], object]) -> None:
    """File → "Ask before quitting while work runs", switching ``confirm_quit``."""
    ask = file_menu.addAction("Ask before quitting while work runs")
    ask.setCheckable(True)
    ask.setChecked(settings.confirm_quit)

    def asking(on: bool) -> None:
        settings.confirm_quit = on
        save_soon()

    ask.toggled.connect(asking)
    file_menu.aboutToShow.connect(lambda: ask.setChecked(settings.confirm_quit))


def install_window_actions(window: QMainWindow, *, new_chat: Callable[[], object],
                           regenerate: Callable[[], object], stop: Callable[[], object],
                           models: Callable[[], object], open_model: Callable[[], object],
                           connect: Callable[[], object], export: Callable[[], object],
                           search: Callable[[], object], recent: QMenu | None = None,
                           server: tuple[Callable[[], object], Callable[[], object],
                                         QAction] | None = None,
                           splitter: QSplitter | None = None,
                           may_quit: Callable[[], bool] = lambda: True,
                           ui: tuple[UiSettings, Callable[[], object]] | None = None,
                           ) -> WindowActions:
    """Add the File menu (with ``recent``, "Open recent"; Quit closes ``window`` when
    ``may_quit()`` says so; with ``ui``, the settings and the function that saves them
    soon, "Ask before quitting while work runs" switches ``confirm_quit``), the View
    menu (when ``splitter`` holds the conversation list, the chat and the side panel:
    :func:`add_pane_actions`), the Server menu
    (:func:`_add_server_menu`, when ``server`` gives its actions), the Help menu, the
    shortcuts, and Enter on buttons to ``window``."""
    file_menu = window.menuBar().addMenu("&File")
    shortcut_rows: list[tuple[str, str]] = []

    def add(text: str, keys: list[QKeySequence], slot: Callable[[], object],
            in_menu: bool) -> QAction:
        action = QAction(text, window)
        action.setShortcuts(keys)
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.triggered.connect(lambda _checked=False, slot=slot: slot())
        window.addAction(action)
        if in_menu:
            file_menu.addAction(action)
        if keys:
            shortcut_rows.append((text.rstrip("…"), " or ".join(
                k.toString(QKeySequence.SequenceFormat.NativeText) for k in keys)))
        return action

    add("New chat", [QKeySequence(QKeySequence.StandardKey.New)], new_chat, True)
    swaps: tuple[QAction, ...] = (
        add("Open GGUF…", [QKeySequence(QKeySequence.StandardKey.Open)], open_model, True),)
    if recent is not None:  # "Open recent", the model bar's own submenu
        file_menu.addMenu(recent)
    swaps += (add("Connect to a server…", [], connect, True),)
    add("Models…", [QKeySequence("Ctrl+M")], models, True)
    add("Export conversation…", [QKeySequence("Ctrl+E")], export, True)
    panes: tuple[QAction, ...] = ()

    def find() -> None:
        if panes and not panes[0].isChecked():
            panes[0].setChecked(True)  # the conversation list, with its search box
        search()

    add("Search conversations", [QKeySequence(QKeySequence.StandardKey.Find)], find, False)
    add("Regenerate", [QKeySequence("Ctrl+R")], regenerate, False)
    add("Stop the reply (or leave editing)", [QKeySequence(Qt.Key.Key_Escape),
                                              QKeySequence("Ctrl+.")], stop, False)
    file_menu.addSeparator()
    if ui is not None:
        _add_confirm_quit(file_menu, *ui)
    quit_action = add("Quit", quit_keys(), lambda: may_quit() and window.close(), True)
    quit_action.setMenuRole(QAction.MenuRole.QuitRole)
    native = QKeySequence.SequenceFormat.NativeText
    shortcut_rows += [("Send the message", "Enter"), ("New line in the message", "Shift+Enter"),
                      ("Edit your last message", "Up in the empty message box"),
                      ("Next or previous conversation", " or ".join(
                          QKeySequence(k).toString(native) for k in STEP_KEYS)),
                      ("Press the focused button", "Enter or Space"),
                      # the conversation list's own keys (Qt's edit key, the Delete key)
                      ("Rename the selected conversation",
                       "Return" if sys.platform == "darwin" else "F2"),
                      ("Delete the selected conversation", QKeySequence(
                          QKeySequence.StandardKey.Delete).toString(native))]

    if splitter is not None:
        panes = add_pane_actions(window, splitter, shortcut_rows)
    disconnect = None
    if server is not None:
        disconnect, server_connect = _add_server_menu(window, connect, server)
        swaps += (server_connect,)

    help_menu = window.menuBar().addMenu("&Help")
    shortcuts = help_menu.addAction("Keyboard shortcuts")
    shortcuts.triggered.connect(lambda _checked=False: show_shortcuts(window, shortcut_rows))
    documentation = help_menu.addAction("Documentation")
    docs = documentation_path()
    documentation.setEnabled(docs is not None)
    if docs is not None:
        documentation.triggered.connect(lambda _checked=False: open_documentation(window, docs))
    log_folder = help_menu.addAction("Open log folder")
    log_folder.triggered.connect(lambda _checked=False: open_log_folder())
    report = help_menu.addAction("Report a problem…")
    report.triggered.connect(lambda _checked=False: report_problem(window))
    help_menu.addSeparator()
    about = help_menu.addAction("About Tandem")
    about.setMenuRole(QAction.MenuRole.AboutRole)
    about.triggered.connect(lambda _checked=False: show_about(window))
    install_enter_presses_buttons()
    return WindowActions(about, quit_action, shortcuts, documentation, log_folder, report,
                         disconnect, panes, swaps)


#: the panes of the window's splitter the View menu shows or hides: (index, words, key)
PANES = ((0, "Conversation list", "Ctrl+B"), (2, "Side panel (figures, sampling, API)",
                                              "Ctrl+Shift+B"))


def add_pane_actions(window: QMainWindow, splitter: QSplitter,
                     shortcut_rows: list[tuple[str, str]]) -> tuple[QAction, ...]:
    """The View menu: a checkable action per pane of :data:`PANES`. A pane hidden gives
    its width to the chat; shown again, it comes back at the width it had (dragging the
    splitter to the window's edge hides it too, and the splitter's saved state keeps it
    so at the next start)."""
    menu = window.menuBar().addMenu("&View")
    widths: dict[int, int] = {}
    actions: list[QAction] = []

    def toggle(index: int, show: bool) -> None:
        sizes = splitter.sizes()
        if show == (sizes[index] > 0):
            return
        if show:
            pane = splitter.widget(index)
            want = widths.get(index) or max(pane.sizeHint().width() if pane else 0, 200)
            sizes[1] = max(0, sizes[1] - want)
            sizes[index] = want
        else:
            widths[index] = sizes[index]
            sizes[1] += sizes[index]
            sizes[index] = 0
        splitter.setSizes(sizes)
        sync()

    def sync(*_: object) -> None:
        for (index, _words, _key), action in zip(PANES, actions, strict=True):
            action.setChecked(splitter.sizes()[index] > 0)

    for index, words, key in PANES:
        splitter.setCollapsible(index, True)
        action = menu.addAction(words)
        action.setCheckable(True)
        action.setShortcut(QKeySequence(key))
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.toggled.connect(lambda on, index=index: toggle(index, on))
        actions.append(action)
        shortcut_rows.append((f"Show or hide the {words[0].lower()}{words[1:]}",
                              QKeySequence(key).toString(QKeySequence.SequenceFormat.NativeText)))
    splitter.splitterMoved.connect(sync)
    sync()
    QTimer.singleShot(0, splitter, sync)  # after the window put its saved splitter state back
    return tuple(actions)


def show_about(parent: QMainWindow) -> QDialog:
    """Help → About: versions, backend, folders, "Open log folder" (app/ui/about.py);
    the dialog is deleted when closed."""
    from app.ui.about import AboutDialog

    dialog = AboutDialog(parent=parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()
    return dialog


def show_shortcuts(parent: QWidget, rows: list[tuple[str, str]]) -> QDialog:
    """Help → Keyboard shortcuts: ``(what, keys)`` rows; deleted when closed."""
    dialog = QDialog(parent)
    dialog.setObjectName("shortcutsDialog")
    dialog.setWindowTitle("Keyboard shortcuts")
    dialog.setMinimumWidth(380)  # the title whole in the title bar
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    col = QVBoxLayout(dialog)
    grid = QGridLayout()
    for i, (what, keys) in enumerate(rows):
        grid.addWidget(Label(what), i, 0)
        key_label = Label(f"<b>{html.escape(keys)}</b>", rich=True)
        grid.addWidget(key_label, i, 1)
    col.addLayout(grid)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dialog.reject)
    col.addWidget(buttons)
    dialog.open()
    return dialog


def open_documentation(parent: QWidget, docs: Path) -> bool:
    """Open the README with the desktop's viewer; where none opens it (no opener
    installed), say where it is instead of doing nothing. Returns whether it opened."""
    if QDesktopServices.openUrl(QUrl.fromLocalFile(str(docs))):
        return True
    box = QMessageBox(QMessageBox.Icon.Information, "Documentation",
                      f"No program here opens it; the documentation is the file\n{docs}\n"
                      "(Markdown: any text editor shows it).", parent=parent)
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return False


def open_log_folder() -> bool:
    """Show the log folder in the file manager; False when there is none or it failed."""
    log_dir = about_info().log_dir
    return log_dir is not None and QDesktopServices.openUrl(QUrl.fromLocalFile(str(log_dir)))


def report_problem(parent: QWidget) -> QMessageBox:
    """Help → Report a problem…: put the About details (versions, backend, folders) on the
    clipboard, open the log folder, and say what to send; the box is deleted when closed."""
    info = about_info()
    QGuiApplication.clipboard().setText(info.as_text())
    opened = open_log_folder()
    where = str(info.log_dir) if info.log_dir is not None else "the log folder"
    box = QMessageBox(QMessageBox.Icon.Information, "Report a problem",
                      "The details of this installation (versions, backend, folders) are on "
                      "the clipboard: paste them into your report, with what you did and what "
                      f"happened, and attach tandem.log from {where}"
                      + (" (opened in the file manager)." if opened else "."),
                      QMessageBox.StandardButton.Close, parent)
    box.setObjectName("reportProblemBox")
    box.setTextFormat(Qt.TextFormat.PlainText)  # a folder's name is any text
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return box


class EnterPressesButtonFilter(QObject):
    """An application event filter: Enter or Return on a focused push or tool button
    clicks it (Qt does so only for a dialog's default buttons, which are left to Qt)."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() != QEvent.Type.KeyPress or not isinstance(watched, (QPushButton, QToolButton)):
            return False
        key_event = event
        assert isinstance(key_event, QKeyEvent)
        if key_event.key() not in (Qt.Key.Key_Return, Qt.Key.Key_Enter) or key_event.isAutoRepeat():
            return False
        if key_event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier:
            return False
        if isinstance(watched, QPushButton) and (watched.autoDefault() or watched.isDefault()):
            return False  # Qt presses it itself
        if not (watched.hasFocus() and watched.isEnabled() and watched.isVisible()):
            return False
        watched.animateClick()
        return True


def install_enter_presses_buttons() -> None:
    """Install :class:`EnterPressesButtonFilter` on the application once."""
    qapp = QApplication.instance()
    if qapp is None or qapp.property("tandemEnterFilter"):
        return
    qapp.installEventFilter(EnterPressesButtonFilter(qapp))
    qapp.setProperty("tandemEnterFilter", True)
