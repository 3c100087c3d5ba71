"""Start the desktop app: ``tandem`` (GUI entry point) and ``python -m app`` with no
arguments both call :func:`main`.

Sets up logging to a file in the cache folder (bugs' tracebacks go there, never on
screen), the application's name, icon and style sheet, creates the main window, and
turns SIGINT/SIGTERM into a normal window close (workers stopped and joined, exit
status 0).
"""

from __future__ import annotations

import logging
import logging.handlers
import signal
import sys
import types
from collections.abc import Sequence

from PySide6.QtCore import QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

import app
from app.store import paths
from app.ui.qt_compat import apply_qt_workarounds

log = logging.getLogger("app.ui")


def _setup_logging() -> None:
    handler: logging.Handler
    try:
        handler = logging.handlers.RotatingFileHandler(
            paths.log_dir() / "tandem.log", maxBytes=2_000_000, backupCount=2, encoding="utf-8"
        )
    except OSError:
        handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
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


def create_application(argv: Sequence[str] | None = None) -> QApplication:
    """The QApplication (the existing one, if any) with name, icon and style sheet set."""
    apply_qt_workarounds()
    qapp = QApplication.instance()
    if not isinstance(qapp, QApplication):
        qapp = QApplication(list(argv if argv is not None else sys.argv))
    qapp.setApplicationName("Tandem")
    qapp.setApplicationDisplayName("Tandem")
    qapp.setApplicationVersion(app.__version__)
    qapp.setOrganizationName("Tandem")
    qapp.setDesktopFileName("tandem")
    icon = paths.icon_path("png")
    if icon.is_file():
        qapp.setWindowIcon(QIcon(str(icon)))
    qapp.setStyle("Fusion")
    qapp.setStyleSheet(style_sheet())
    return qapp


def main(argv: Sequence[str] | None = None) -> int:
    """Open the window and run until it is closed. Returns the exit status (0; 2 when the
    app's folders cannot be created)."""
    _setup_logging()
    sys.excepthook = _log_uncaught
    qapp = create_application(argv)

    from app.ui.main_window import MainWindow

    try:
        window = MainWindow()
    except OSError as exc:
        # Typically an unwritable home/config/data folder: say so instead of vanishing.
        log.critical("cannot start", exc_info=True)
        from PySide6.QtWidgets import QMessageBox

        where = getattr(exc, "filename", None) or ""
        QMessageBox.critical(
            None,
            "Tandem cannot start",
            f"Tandem could not prepare its folders {where}: {exc.strerror or exc}.\n\n"
            "Check that your home folder is writable (or set TANDEM_HOME to a writable "
            "folder) and start Tandem again.",
        )
        return 2

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
    status = qapp.exec()
    log.info("exit with status %s", status)
    return int(status)
