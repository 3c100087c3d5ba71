"""Code lines that wrap show it: the wrapped part is indented past the line's own
indentation (a hanging indent).

Code blocks wrap (a chat bubble has no horizontal scroll bar); a wrapped part that
started at the left edge would read as a new, unindented line (``* (1 + tax_rate)``
under ``return sum(...)``). :func:`hang_code_lines` gives each code line of a rendered
reply a hanging indent of its own indentation plus :data:`HANG_COLUMNS` columns, so a
continuation always starts right of where the line itself starts. The text is not
changed: Copy and selection give the lines as they are.
"""

from __future__ import annotations

from PySide6.QtGui import QFontMetricsF, QTextBlock, QTextCursor, QTextDocument

from app.ui.chat.markdown_render import CODE_FAMILY

#: columns a wrapped part of a code line starts right of the line's own indentation
HANG_COLUMNS = 4
#: columns between tab stops in code (Markdown's own rule for indentation)
TAB_COLUMNS = 4


def _is_code(block: QTextBlock) -> bool:
    """A line of a code block: its text carries the code blocks' font family
    (:data:`~app.ui.chat.markdown_render.CODE_FAMILY`; inline code has not)."""
    it = block.begin()
    return not it.atEnd() and CODE_FAMILY in (it.fragment().charFormat().fontFamilies() or ())


def space_width(block: QTextBlock) -> float:
    """The width of a space in the code font of ``block`` (upright, regular weight: a
    line may start with a bold keyword), pixels."""
    font = block.begin().fragment().charFormat().font()
    font.setBold(False)
    font.setItalic(False)
    return QFontMetricsF(font).horizontalAdvance(" ")


def hang_code_lines(doc: QTextDocument) -> int:
    """Give each code line of ``doc`` its hanging indent; returns the lines changed. Tab
    stops are set 4 spaces apart, as the indentation is counted."""
    cursor: QTextCursor | None = None
    changed, space = 0, 0.0
    block = doc.begin()
    while block.isValid():
        if _is_code(block):
            text = block.text().expandtabs(TAB_COLUMNS)
            lead = len(text) - len(text.lstrip(" "))
            if cursor is None:
                space = space_width(block)
                option = doc.defaultTextOption()
                option.setTabStopDistance(space * TAB_COLUMNS)
                doc.setDefaultTextOption(option)
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
