"""How a text view wraps a text that may hold a very long run without whitespace
(a pasted line of minified JSON or base64).

Qt's default wrapping (at a word boundary, else anywhere) lays such a run out in time
that grows with the square of its length: 300,000 characters took 3.7 s in a
QPlainTextEdit and 5.4 s in a QTextBrowser under X11, 100,000 characters 0.4 and 0.6 s;
wrapping anywhere took 0.07 and 0.10 s (``bench/long_line_layout.py``, 2-core Zen 4).
Such a text is wrapped anywhere, every other text at word boundaries.
"""

from __future__ import annotations

import re

from PySide6.QtGui import QTextOption
from PySide6.QtWidgets import QPlainTextEdit, QTextEdit

#: the longest run without whitespace that still wraps at word boundaries, characters
LONG_RUN = 2000
_LONG = re.compile(r"\S{%d}" % (LONG_RUN + 1))


def wrap_mode(text: str) -> QTextOption.WrapMode:
    """``WrapAnywhere`` for a text with a run of more than :data:`LONG_RUN` characters
    without whitespace, else ``WrapAtWordBoundaryOrAnywhere`` (Qt's default)."""
    if len(text) > LONG_RUN and _LONG.search(text):
        return QTextOption.WrapMode.WrapAnywhere
    return QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere


def set_plain_text(view: QTextEdit | QPlainTextEdit, text: str) -> None:
    """Replace ``view``'s text, wrapped as :func:`wrap_mode` says; the wrap mode changes
    while the shorter of the two texts is shown (a change re-lays the text out)."""
    mode = wrap_mode(text)
    if mode == QTextOption.WrapMode.WrapAnywhere:
        view.setWordWrapMode(mode)
    view.setPlainText(text)
    view.setWordWrapMode(mode)
