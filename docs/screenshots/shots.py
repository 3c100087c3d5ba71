"""What the screenshot scripts here share: let Qt run until a condition holds or for a
while, and save the Xvfb screen with ImageMagick's ``import``. A script run as
``python docs/screenshots/<script>.py`` has this folder on ``sys.path``."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QApplication


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
