"""The draft tint on a rendered message: source character ranges → rendered text ranges.

The chat view renders a reply's Markdown to a :class:`QTextDocument` first, untouched,
and only then tints the characters that came from accepted draft tokens, with character
formats over the rendered document. The text shown is therefore the same with the tint
on or off, whatever underscores, stars or backticks the reply holds.

Markdown drops syntax (``**``, backticks, ``#``, link targets) and Qt collapses
whitespace, so rendered characters are matched back to the source in order:

* The document is cut into segments that correspond one to one with the source: each
  fenced code block's code cell (a table with a ``copy:<n>`` link, whose source range
  :func:`app.ui.chat.markdown_render.render_markdown` records) and the prose between
  them. The code blocks' header cells (language, Copy) have no source and are never
  tinted. A mistake in one segment cannot spread to the next.
* Within a segment, each run of non-space characters (a rendered word) is looked up in
  the source from where the previous word ended: verbatim when that is no further than
  matching it character by character would reach, else character by character. When the
  word follows a space inside a paragraph and the only match is glued to the previous
  word in the source (``**bold** `*```: the ``*`` after ``bold``), a match after the
  next source space is preferred.
* A rendered space is tinted when the source whitespace between its neighbours' source
  characters was drafted.

Characters that cannot be matched (none in ordinary Markdown) are left untinted.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor, QTextDocument, QTextTable

from app.ui.chat.markdown_render import RenderedMarkdown


@dataclass(slots=True)
class _DocText:
    """The document's characters: text, and per character its position (UTF-16 units)
    and block number (words never continue across blocks)."""

    text: str
    pos: list[int]
    block: list[int]


def _utf16_len(ch: str) -> int:
    return 2 if ord(ch) > 0xFFFF else 1


def _code_tables(doc: QTextDocument) -> dict[int, QTextTable]:
    """The code blocks' tables by block index (their header holds ``copy:<n>``)."""
    found: dict[int, QTextTable] = {}
    for frame in doc.rootFrame().childFrames():
        if not isinstance(frame, QTextTable) or frame.rows() != 2 or frame.columns() != 2:
            continue
        link = frame.cellAt(0, 1)
        cursor = QTextCursor(doc)
        cursor.setPosition(link.firstPosition() + 1)
        href = cursor.charFormat().anchorHref()
        if href.startswith("copy:") and href[5:].isdigit():
            found.setdefault(int(href[5:]), frame)
    return found


def _document_text(doc: QTextDocument) -> _DocText:
    parts: list[str] = []
    pos: list[int] = []
    blocks: list[int] = []
    block = doc.begin()
    while block.isValid():
        p = block.position()
        n = block.blockNumber()
        text = block.text()
        parts.append(text)
        if text.isascii():
            pos.extend(range(p, p + len(text)))
        else:
            for ch in text:
                pos.append(p)
                p += _utf16_len(ch)
        blocks.extend([n] * len(text))
        block = block.next()
    return _DocText("".join(parts), pos, blocks)


def _align(chars: str, blocks: Sequence[int], source: str, s0: int, s1: int) -> list[int | None]:
    """For each document character, its source offset in [s0, s1) (None: unmatched)."""
    out: list[int | None] = [None] * len(chars)
    j = s0
    i = 0
    n = len(chars)
    while i < n:
        if chars[i].isspace():
            i += 1
            continue
        k = i
        while k < n and not chars[k].isspace() and blocks[k] == blocks[i]:
            k += 1
        word = chars[i:k]
        start = j
        if i > 0 and chars[i - 1].isspace() and blocks[i - 1] == blocks[i]:
            first = source.find(word[0], j, s1)
            gap = _next_space(source, j, s1)
            if first >= 0 and gap > first and source.find(word[0], gap, s1) >= 0:
                # The nearest match is glued to the previous word in the source; the
                # document has a space before this word, so look after a source space.
                start = gap
        greedy: list[int | None] = []
        p = start
        for c in word:
            t = source.find(c, p, s1)
            if t < 0:
                greedy.append(None)
                continue
            greedy.append(t)
            p = t + 1
        verbatim = source.find(word, start, s1)
        if verbatim >= 0 and verbatim + len(word) <= p:
            out[i:k] = range(verbatim, verbatim + len(word))
            j = verbatim + len(word)
        else:
            out[i:k] = greedy
            j = p
        i = k
    return out


def _next_space(source: str, a: int, b: int) -> int:
    for t in range(a, b):
        if source[t].isspace():
            return t
    return -1


def _tinted_flags(chars: str, where: Sequence[int | None], source: str, mask: bytearray,
                  s0: int, s1: int) -> list[bool]:
    flags = [False] * len(chars)
    # the next matched source offset after each index, for the spaces
    nxt: list[int] = [s1] * len(chars)
    following = s1
    for idx in range(len(chars) - 1, -1, -1):
        nxt[idx] = following
        w = where[idx]
        if w is not None:
            following = w
    prev = s0 - 1
    for idx, w in enumerate(where):
        if w is not None:
            flags[idx] = bool(mask[w])
            prev = w
        elif chars[idx].isspace():
            between = [t for t in range(prev + 1, nxt[idx]) if source[t].isspace()]
            flags[idx] = bool(between) and all(mask[t] for t in between)
    return flags


def draft_mask(length: int, spans: Sequence[tuple[int, int]]) -> bytearray:
    """One byte per source character: 1 where ``spans`` (``[start, end)``) cover it."""
    mask = bytearray(length)
    for a, b in spans:
        a, b = max(0, a), min(length, b)
        if b > a:
            mask[a:b] = b"\x01" * (b - a)
    return mask


def tinted_ranges(doc: QTextDocument, rendered: RenderedMarkdown, source: str,
                  spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Document ranges of the characters that came from ``spans`` of ``source``.

    Args:
        doc: the document ``rendered.html`` was set into.
        rendered: the rendering of ``source``.
        source: the message text (Python character offsets, as the spans use).
        spans: ``(start, end)`` source ranges that came from accepted drafts.

    Returns:
        Sorted, disjoint ``(start, end)`` document ranges (UTF-16 units, as QTextCursor
        counts), never crossing a block boundary.
    """
    mask = draft_mask(len(source), spans)
    if not any(mask):
        return []
    doc_text = _document_text(doc)
    starts = doc_text.pos
    tables = _code_tables(doc)
    # (document range, source range) pairs that correspond one to one
    segments: list[tuple[int, int, int, int]] = []
    doc_from, src_from = 0, 0
    for n, span in enumerate(rendered.code_spans):
        table = tables.get(n)
        if table is None:
            continue  # not rendered: its source stays in the prose around it
        cell = table.cellAt(1, 0)
        segments.append((doc_from, table.firstPosition(), src_from, span.start))
        segments.append((cell.firstPosition(), cell.lastPosition() + 1,
                         span.content_start, span.content_end))
        doc_from, src_from = table.lastPosition() + 1, span.end
    segments.append((doc_from, starts[-1] + 2 if starts else 0, src_from, len(source)))

    runs: list[list[int]] = []  # [start, end, block]
    for doc_a, doc_b, src_a, src_b in segments:
        i0, i1 = bisect_left(starts, doc_a), bisect_left(starts, doc_b)
        if i1 <= i0 or src_b <= src_a:
            continue
        chars, blocks = doc_text.text[i0:i1], doc_text.block[i0:i1]
        where = _align(chars, blocks, source, src_a, src_b)
        flags = _tinted_flags(chars, where, source, mask, src_a, src_b)
        for k, on in enumerate(flags):
            if not on:
                continue
            at, block = starts[i0 + k], blocks[k]
            end = at + _utf16_len(chars[k])
            if runs and runs[-1][1] == at and runs[-1][2] == block:
                runs[-1][1] = end
            else:
                runs.append([at, end, block])
    return [(a, b) for a, b, _block in runs]


def apply_tint(doc: QTextDocument, ranges: Sequence[tuple[int, int]], color: QColor) -> None:
    """Give the characters in ``ranges`` the background ``color`` (one edit block)."""
    if not ranges:
        return
    fmt = QTextCharFormat()
    fmt.setBackground(color)
    cursor = QTextCursor(doc)
    cursor.beginEditBlock()
    for a, b in ranges:
        cursor.setPosition(a)
        cursor.setPosition(b, QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeCharFormat(fmt)
    cursor.endEditBlock()
