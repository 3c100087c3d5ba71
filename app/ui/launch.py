"""Start the desktop app: :mod:`app.entry` calls :func:`main` for ``tandem`` (the GUI
script and the frozen app) and ``python -m app`` with no arguments or one GGUF file.

Starts the window's log file (``tandem.log`` in the user log folder, with a header; bugs'
tracebacks go there, never on screen), sets the application's name, desktop id, icon and
style sheet, creates the main window, loads a GGUF given on the command line, and turns
SIGINT/SIGTERM into a normal window close (workers stopped and joined, exit status 0).
"""

from __future__ import annotations

import logging
import signal
import sys
import types
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor, QIcon, QPalette
from PySide6.QtWidgets import QApplication

import app
from app.launcher import APP_ID
from app.store import logs, paths
from app.ui.qt_compat import apply_qt_workarounds

log = logging.getLogger("app.ui")


def _setup_logging() -> None:
    from app.diagnostics import log_fields

    if logs.start_log("gui", log_fields()) is None:
        logging.basicConfig(level=logging.INFO)  # no writable log folder: stderr then
    # llama.cpp's loader warnings are kept in the log, not the terminal.
    logging.getLogger("app.engine.llama").setLevel(logging.WARNING)


def _log_uncaught(kind: type[BaseException], value: BaseException,
                  tb: types.TracebackType | None) -> None:
    log.critical("uncaught exception", exc_info=(kind, value, tb))


def style_sheet() -> str:
    """The app's Qt style sheet from ``resources/styles/tandem.qss`` ("" if missing)."""
    path = paths.resources_dir() / "styles" / "tandem.qss"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def light_palette() -> QPalette:
    """The palette the style sheet's light colours are drawn with: Qt's palette made
    from Fusion's light grey button colour (black text on white fields), with a blue
    selection, links and pale yellow tooltips."""
    palette = QPalette(QColor("#efefef"))
    for role, colour in ((QPalette.ColorRole.Highlight, "#2b6cb0"),
                         (QPalette.ColorRole.HighlightedText, "#ffffff"),
                         (QPalette.ColorRole.Link, "#0969da"),
                         (QPalette.ColorRole.LinkVisited, "#6b46c1"),
                         (QPalette.ColorRole.Accent, "#2b6cb0"),
                         (QPalette.ColorRole.ToolTipBase, "#ffffdc"),
                         (QPalette.ColorRole.ToolTipText, "black"),
                         (QPalette.ColorRole.PlaceholderText, "#8a94a3")):
        palette.setColor(role, QColor(colour))
    return palette


def create_application(argv: Sequence[str] | None = None) -> QApplication:
    """The QApplication (the existing one, if any) with name, icon, style sheet and
    palette set. Tandem's look is light: under a dark system theme (macOS, Windows,
    GNOME) the platform's dark palette would put its light text on the style sheet's
    light backgrounds, so the light scheme is asked for (Qt 6.8 and later) and the
    light palette set whatever the platform gives."""
    apply_qt_workarounds()
    qapp = QApplication.instance()
    if not isinstance(qapp, QApplication):
        qapp = QApplication(list(argv if argv is not None else sys.argv))
    qapp.setApplicationName("Tandem")
    qapp.setApplicationDisplayName("Tandem")
    qapp.setApplicationVersion(app.__version__)
    qapp.setOrganizationName("Tandem")
    qapp.setDesktopFileName(APP_ID)  # Wayland matches the window to the desktop entry
    icon = paths.icon_path("png")
    if icon.is_file():
        qapp.setWindowIcon(QIcon(str(icon)))
    qapp.setStyle("Fusion")
    hints = qapp.styleHints()
    if hasattr(hints, "setColorScheme"):  # Qt 6.8
        hints.setColorScheme(Qt.ColorScheme.Light)
    qapp.setPalette(light_palette())
    qapp.setStyleSheet(style_sheet())
    from app.ui import tooltips

    tooltips.install(qapp)
    return qapp


def main(argv: Sequence[str] | None = None, open_path: Path | None = None) -> int:
    """Open the window and run until it is closed.

    Args:
        argv: Qt's command line (default ``sys.argv``).
        open_path: a GGUF to load instead of the last model (``tandem model.gguf``).

    Returns:
        The exit status: 0; 2 when the app's folders cannot be created.
    """
    _setup_logging()
    sys.excepthook = _log_uncaught
    qapp = create_application(argv)
    from PySide6.QtCore import qVersion

    log.info("Qt %s, platform %s", qVersion(), qapp.platformName())

    from app.ui.main_window import MainWindow
    from app.ui.single_instance import InstanceServer, hand_over, take_lock

    try:
        lock = take_lock()
        if lock is None:  # another Tandem runs for this data folder
            return _second_start(open_path, hand_over(open_path))
        window = MainWindow(autoload=open_path is None)
    except OSError as exc:
        return _cannot_start(exc)

    def _close_on_signal(_signum: int, _frame: types.FrameType | None) -> None:
        QTimer.singleShot(0, window.close)

    signal.signal(signal.SIGINT, _close_on_signal)
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, _close_on_signal)
    # Python runs signal handlers only between bytecodes; wake it up regularly.
    wake = QTimer()
    wake.start(250)
    wake.timeout.connect(lambda: None)

    window.show()
    log.info("window shown")
    instance = InstanceServer(parent=window)
    instance.open_requested.connect(lambda path: _brought_forward(window, path))
    if open_path is not None:
        _open_from_command_line(window, open_path)
    status = qapp.exec()
    log.info("exit with status %s", status)
    lock.unlock()
    return int(status)


def _cannot_start(exc: OSError) -> int:
    """Typically an unwritable home, config or data folder (or a file where a folder
    should be): say so instead of vanishing. Returns the exit status, 2."""
    log.critical("cannot start", exc_info=True)
    from PySide6.QtWidgets import QMessageBox

    where = getattr(exc, "filename", None) or ""
    box = QMessageBox(
        QMessageBox.Icon.Critical,
        "Tandem cannot start",
        f"Tandem could not prepare its folders {where}: {exc.strerror or exc}.\n\n"
        "Check that your home folder is writable (or set TANDEM_HOME to a writable "
        "folder) and start Tandem again.",
    )
    box.setTextFormat(Qt.TextFormat.PlainText)  # a folder's name is any text
    print(f"Tandem cannot start: it could not prepare its folders {where}: "
          f"{exc.strerror or exc}.", file=sys.stderr)
    box.exec()
    return 2


def _second_start(open_path: Path | None, handed: bool) -> int:
    """This start found another Tandem running: say what became of ``open_path``."""
    if handed:
        log.info("handed %s to the Tandem already running", open_path or "nothing")
        print("Tandem is already running" + (f": {open_path} opens there." if open_path
                                              else "; its window was brought forward."))
        return 0
    log.warning("another Tandem holds this data folder and did not answer")
    from PySide6.QtWidgets import QMessageBox

    box = QMessageBox(QMessageBox.Icon.Warning, "Tandem is already running",
                      "Another Tandem window uses this data folder but did not answer "
                      "(it may be busy). Use that window, or close it and start again.")
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.exec()
    return 1


def _brought_forward(window: object, path: Path | None) -> None:
    """A later start's request: the window comes to the front and loads ``path``."""
    from app.ui.main_window import MainWindow

    assert isinstance(window, MainWindow)
    if window.isMinimized():
        window.showNormal()
    window.raise_()
    window.activateWindow()
    if path is not None:
        _open_from_command_line(window, path)


def _open_from_command_line(window: object, path: Path) -> None:
    """Load the GGUF named on the command line, or say why not (in the window)."""
    from app.chat.events import UserError
    from app.ui.main_window import MainWindow

    assert isinstance(window, MainWindow)
    log.info("opening %s from the command line", path)
    if path.is_file():
        window.controller.load_model(path)
    else:
        window.show_error(UserError("Model not found", f"{path} does not exist or is not a file."))
