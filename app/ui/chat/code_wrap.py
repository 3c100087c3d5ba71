"""Code lines that wrap show it: the wrapped part is indented past the line's own
indentation (a hanging indent).

Code blocks wrap (a chat bubble has no horizontal scroll bar), and a wrapped part that
began at the left edge read as a new, unindented line: ``* (1 + tax_rate)`` under
``return sum(...)``. :func:`hang_code_lines` gives each code line of a rendered reply a
hanging indent of its own indentation plus :data:`HANG_COLUMNS` columns, so a
continuation always starts right of where the line itself starts. The text is not
changed: Copy and selection give the lines as they are.
"""

from __future__ import annotations

from PySide6.QtGui import QFontMetricsF, QTextBlock, QTextCursor, QTextDocument

#: columns a wrapped part of a code line starts right of the line's own indentation
HANG_COLUMNS = 4


def _is_code(block: QTextBlock) -> bool:
    """A line of a code block: text, all of it in a monospace font (a paragraph that only
    starts with inline code is not)."""
    it = block.begin()
    if it.atEnd():
        return False
    while not it.atEnd():
        fmt = it.fragment().charFormat()
        if "monospace" not in (fmt.fontFamilies() or ()) and not fmt.fontFixedPitch():
            return False
        it += 1
    return True


def hang_code_lines(doc: QTextDocument) -> int:
    """Give each code line of ``doc`` its hanging indent; returns the lines changed."""
    cursor: QTextCursor | None = None
    changed = 0
    block = doc.begin()
    while block.isValid():
        if _is_code(block):
            text = block.text().expandtabs(4)
            lead = len(text) - len(text.lstrip(" "))
            space = QFontMetricsF(block.begin().fragment().charFormat().font()).horizontalAdvance(" ")
            hang = space * (lead + HANG_COLUMNS)
            fmt = block.blockFormat()
            fmt.setLeftMargin(fmt.leftMargin() + hang)
            fmt.setTextIndent(fmt.textIndent() - hang)
            if cursor is None:
                cursor = QTextCursor(doc)
                cursor.beginEditBlock()
            cursor.setPosition(block.position())
            cursor.setBlockFormat(fmt)
            changed += 1
        block = block.next()
    if cursor is not None:
        cursor.endEditBlock()
    return changed
