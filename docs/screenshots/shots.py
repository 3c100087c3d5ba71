"""What the screenshot scripts here share: let Qt run until a condition holds or for a
while, and save the Xvfb screen with ImageMagick's ``import``. A script run as
``python docs/screenshots/<script>.py`` has this folder on ``sys.path``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QApplication

if TYPE_CHECKING:
    from app.store.settings import Settings
    from app.ui.main_window import MainWindow


def scratch_home(name: str) -> tuple[Path, Path]:
    """Start a screenshot script: an empty ``/tmp/tandem-<name>-screenshots`` as
    ``TANDEM_HOME`` (before ``app`` is imported: its paths read it) and the repository
    root (the working directory) on ``sys.path``. Returns (root, output folder from
    ``sys.argv[1]``)."""
    root = Path.cwd()
    home = Path(f"/tmp/tandem-{name}-screenshots")
    shutil.rmtree(home, ignore_errors=True)
    os.environ["TANDEM_HOME"] = str(home)
    sys.path.insert(0, str(root))
    return root, Path(sys.argv[1])


def wait(cond: Callable[[], object], timeout: float = 300.0) -> None:
    """Process Qt events until ``cond()`` is true.

    Raises:
        TimeoutError: it was not true within ``timeout`` seconds.
    """
    t0 = time.monotonic()
    while not cond():
        QApplication.processEvents()
        time.sleep(0.01)
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(cond)


def settle(s: float = 0.8) -> None:
    """Process Qt events for ``s`` seconds (layouts, repaints)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < s:
        QApplication.processEvents()
        time.sleep(0.01)


def make_shot(out: Path) -> Callable[[str], None]:
    """``shot(name)``: settle, then save the whole screen as ``out / name``."""
    def shot(name: str) -> None:
        settle()
        subprocess.run(["import", "-window", "root", str(out / name)], check=True)
        print("saved", name, flush=True)

    return shot


def open_main_window(settings: Settings) -> tuple[QApplication, MainWindow]:
    """Create the application, save ``settings`` as the scratch home's, and show a
    1380 × 860 main window at (10, 10) once its model has loaded (waits up to 300 s)."""
    from app.store.settings import LoadedSettings, save_settings
    from app.ui.launch import create_application
    from app.ui.main_window import MainWindow

    app = create_application(sys.argv[:1])
    save_settings(settings)
    w = MainWindow(LoadedSettings(settings))
    w.resize(1380, 860)
    w.move(10, 10)
    w.show()
    wait(lambda: w.controller.model_info is not None)
    return app, w


#: a two-turn code conversation where lookup drafts well: a function, then an edit of it
CODE_EDIT_TURNS = ("Write a Python function add(a, b) that returns a + b, with a docstring.",
                   "Rename it to add_numbers and keep everything else the same.")


def converse(w: MainWindow, turns: Sequence[str]) -> None:
    """Start a new conversation in ``w`` and send each turn, waiting for its reply."""
    w.new_conversation()
    for text in turns:
        assert w.send_message(text)
        wait(lambda: w.controller.reply is None)
