"""Visible confirmation of a copy to the clipboard: the button says so for a moment.

Used by every Copy in the window (a message, a code block, the API's base URL), so that a
click that changes nothing on screen still shows that it worked.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QAbstractButton

#: how long the confirmation stays (milliseconds)
CONFIRM_MS = 1500
COPIED_TEXT = "Copied ✓"


def confirm_copied(button: QAbstractButton, text: str = COPIED_TEXT) -> None:
    """Show ``text`` on ``button`` for :data:`CONFIRM_MS`, then its own text again. A second
    copy meanwhile restarts the wait (the button's own text is never lost)."""
    timer = getattr(button, "_copied_timer", None)
    if not isinstance(timer, QTimer):
        timer = QTimer(button)
        timer.setSingleShot(True)
        timer.setInterval(CONFIRM_MS)
        original = button.text()
        timer.timeout.connect(lambda: button.setText(original))
        button._copied_timer = timer  # type: ignore[attr-defined]
    button.setText(text)
    timer.start()
