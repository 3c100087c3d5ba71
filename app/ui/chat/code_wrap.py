"""Code lines that wrap show it: the wrapped part is indented past the line's own
indentation (a hanging indent).

Code blocks wrap (a chat bubble has no horizontal scroll bar); a wrapped part that
started at the left edge would read as a new, unindented line (``* (1 + tax_rate)``
under ``return sum(...)``). :func:`hang_code_lines` gives each line of a rendered reply's
fenced code blocks (the table cells :mod:`app.ui.chat.markdown_render` marks with
:data:`~app.ui.chat.markdown_render.CODE_STATE`) a hanging indent of its own indentation
plus :data:`HANG_COLUMNS` columns, so a continuation always starts right of where the
line itself starts. The text is not changed: Copy and selection give the lines as they
are.
"""

from __future__ import annotations

from collections.abc import Iterator

from PySide6.QtGui import (
    QFontMetricsF,
    QTextBlock,
    QTextCursor,
    QTextDocument,
    QTextFrame,
    QTextTable,
)

from app.ui.chat.markdown_render import CODE_STATE

#: columns a wrapped part of a code line starts right of the line's own indentation
HANG_COLUMNS = 4
#: columns between tab stops in code (Markdown's own rule for indentation)
TAB_COLUMNS = 4


def code_lines(doc: QTextDocument) -> Iterator[QTextBlock]:
    """The lines of ``doc``'s fenced code blocks: the blocks of each table cell whose
    first line carries :data:`~app.ui.chat.markdown_render.CODE_STATE`."""
    frames: list[QTextFrame] = [doc.rootFrame()]
    while frames:
        frame = frames.pop()
        frames.extend(frame.childFrames())
        if not isinstance(frame, QTextTable) or frame.rows() < 2:
            continue
        cell = frame.cellAt(1, 0)
        block = doc.findBlock(cell.firstPosition())
        if block.userState() != CODE_STATE:
            continue
        while block.isValid() and block.position() <= cell.lastPosition():
            yield block
            block = block.next()


def space_width(block: QTextBlock) -> float:
    """The width of a space in the code font of ``block`` (upright, regular weight: a
    line may start with a bold keyword), pixels."""
    font = block.charFormat().font()
    if not block.begin().atEnd():
        font = block.begin().fragment().charFormat().font()
    font.setBold(False)
    font.setItalic(False)
    return QFontMetricsF(font).horizontalAdvance(" ")


def hang_code_lines(doc: QTextDocument) -> int:
    """Give each code line of ``doc`` its hanging indent; returns the lines changed. Tab
    stops are set :data:`TAB_COLUMNS` spaces apart, as the indentation is counted."""
    lines = [b for b in code_lines(doc) if b.text()]
    if not lines:
        return 0
    space = space_width(lines[0])
    option = doc.defaultTextOption()
    option.setTabStopDistance(space * TAB_COLUMNS)
    doc.setDefaultTextOption(option)
    cursor = QTextCursor(doc)
    cursor.beginEditBlock()
    for block in lines:
        text = block.text().expandtabs(TAB_COLUMNS)
        hang = space * (len(text) - len(text.lstrip(" ")) + HANG_COLUMNS)
        fmt = block.blockFormat()
        fmt.setLeftMargin(fmt.leftMargin() + hang)
        fmt.setTextIndent(fmt.textIndent() - hang)
        cursor.setPosition(block.position())
        cursor.setBlockFormat(fmt)
    cursor.endEditBlock()
    return len(lines)
