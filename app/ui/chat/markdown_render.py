"""Reply text → HTML for the chat view: Markdown and highlighted code blocks.

Model output is untrusted text, so raw HTML in it is shown as text (Python-Markdown's
HTML block and inline HTML processors are removed) and images are not rendered (the view
also refuses to load any resource). Fenced code blocks are cut out before Markdown runs,
highlighted with Pygments (inline styles, so Qt's rich-text engine can show them) and put
back with a header row holding the language and a ``copy:<n>`` link; an unclosed fence
(a reply still streaming) is a code block up to the end of the text.

The draft tint is applied afterwards to the rendered document
(:mod:`app.ui.chat.draft_tint`, which matches rendered words back to the source), using
the source ranges of the code blocks recorded here. Two rewrites bring what Markdown
reads closer to what models write: leading spaces of lines that Markdown would flatten
(a paragraph's continuation lines, such as code pasted without a fence) become no-break
spaces, so their indentation shows; and a list or quote that starts right after a
paragraph line ("Ingredients:" then "- 1 pineapple") gets the blank line
Python-Markdown needs before it (CommonMark needs none).
"""

from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass
from xml.etree import ElementTree

import markdown
from markdown.blockprocessors import HashHeaderProcessor
from markdown.treeprocessors import Treeprocessor
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound

#: background of text that came from accepted draft tokens
TINT_COLOR = "#fde7b0"
_P0, _P1 = "\ue010", "\ue011"  # code-block placeholder delimiters
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[^\s`]*)[^`]*$")
_LIST_OR_QUOTE = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)]|>)(?:\s|$)")
#: what may start right after a paragraph line in CommonMark: a bullet item with text, an
#: ordered item numbered 1, a quote
_INTERRUPTS_PARAGRAPH = re.compile(r"^\s*(?:(?:[-*+]|1[.)])[ \t]+\S|>)")
_TABLE_ROW = re.compile(r"^\s*\|")
_LEADING_WS = re.compile(r"^[ \t]+")
_PLACEHOLDER = re.compile(f"(?:<p>)?{_P0}(\\d+){_P1}(?:</p>)?")
#: no-break stand-ins of the same length: a space → U+00A0, a tab → U+2003 (em space)
_KEEP_INDENT = str.maketrans({" ": "\u00a0", "\t": "\u2003"})


@dataclass(frozen=True, slots=True)
class CodeBlockSpan:
    """Where a fenced code block sits in the source text (character offsets).

    ``start``–``end`` covers the fence lines too; ``content_start``–``content_end`` is
    the code between them (the rendered code cell shows that text).
    """

    start: int
    content_start: int
    content_end: int
    end: int


@dataclass(frozen=True, slots=True)
class RenderedMarkdown:
    """HTML for a message, the text of each code block (``copy:<n>`` copies block n), and
    where each code block is in the source (:class:`CodeBlockSpan`, same order)."""

    html: str
    code_blocks: tuple[str, ...]
    code_spans: tuple[CodeBlockSpan, ...] = ()


def _keep_indentation(lines: list[str]) -> list[str]:
    """Lines with the leading whitespace of flattened continuation lines made no-break,
    and a blank line before a list or quote that follows a paragraph line.

    Markdown joins a paragraph's lines and drops their leading spaces; a model that
    writes code without a fence then loses its indentation. Only lines that continue a
    plain paragraph are touched; paragraphs that start with list, quote or table syntax
    are left to Markdown (nesting depends on spaces), and so is an indented code block
    (a block indented four columns past its container: Markdown keeps its lines). Inside
    a list item, whose content Markdown dedents by four columns, the first four columns
    of a continuation line stay spaces for it to remove and only the rest is made
    no-break, so the item's code keeps its indentation relative to its first line.
    """
    out: list[str] = []
    block_kind = "blank"  # "blank", "plain", "structured", "code" (indented code block)
    in_list = False  # a list item is open: its content is indented by four columns
    keep = 0  # columns of a continuation line left as spaces (Markdown removes them)
    for line in lines:
        if not line.strip():
            if block_kind != "code":  # an indented code block spans blank lines
                block_kind = "blank"
            out.append(line)
            continue
        width = _indent_width(line)
        base = 4 if in_list else 0
        if block_kind == "code" and width < base + 4:
            block_kind = "blank"  # a line indented less ends the code block
        if block_kind == "blank":
            if width < 4 and not _LIST_OR_QUOTE.match(line):
                in_list = False  # a paragraph at the margin ends the list
                base = 0
            if width >= base + 4:
                block_kind = "code"
            elif _LIST_OR_QUOTE.match(line) or _TABLE_ROW.match(line):
                block_kind = "structured"
                in_list = in_list or not line.lstrip().startswith((">", "|"))
            else:
                block_kind, keep = "plain", base
            out.append(line)
            continue
        if block_kind == "plain" and width < base + 4 and _INTERRUPTS_PARAGRAPH.match(line):
            out.append("")  # the blank line Python-Markdown needs before a list or quote
            block_kind = "structured"
            in_list = in_list or not line.lstrip().startswith(">")
            out.append(line)
            continue
        m = _LEADING_WS.match(line)
        if block_kind == "plain" and m and not _LIST_OR_QUOTE.match(line):
            lead = m.group(0)
            k = keep if "\t" not in lead else 0  # tabs: length-preserving only when whole
            out.append(lead[:k] + lead[k:].translate(_KEEP_INDENT) + line[m.end():])
        else:
            out.append(line)
    return out


def _indent_width(line: str) -> int:
    """Columns of leading whitespace, a tab reaching the next multiple of 4 (Markdown's
    rule for indented code blocks)."""
    m = _LEADING_WS.match(line)
    return len(m.group(0).expandtabs(4)) if m else 0


#: the block state (Qt's ``-qt-user-state``) of a fenced code block's first line: the
#: view finds its code cells by it (:mod:`app.ui.chat.code_wrap`)
CODE_STATE = 7


@functools.lru_cache(maxsize=256)
def highlight_code(code: str, lang: str) -> str:
    """Pygments HTML (inline styles, no wrapper) for ``code`` in language ``lang``."""
    try:
        lexer = get_lexer_by_name(lang) if lang else TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    formatter = HtmlFormatter(nowrap=True, noclasses=True, style="default")
    return str(highlight(code, lexer, formatter)).rstrip("\n")


def _code_block_html(index: int, code: str, lang: str) -> str:
    label = html.escape(lang or "text")
    body = highlight_code(code, lang.lower())
    return (
        '<table width="100%" cellspacing="0" cellpadding="5" border="0" bgcolor="#f6f8fa"'
        ' style="margin-top:6px; margin-bottom:6px;">'
        f'<tr><td bgcolor="#e7ebf0"><span style="color:#57606a;">{label}</span></td>'
        f'<td bgcolor="#e7ebf0" align="right"><a href="copy:{index}"'
        ' style="color:#0969da; text-decoration:none;">Copy</a></td></tr>'
        f'<tr><td colspan="2"><pre style="margin:0; white-space:pre-wrap; '
        f'-qt-user-state:{CODE_STATE};">{body}</pre>'
        "</td></tr></table>"
    )


class _NoTitles(Treeprocessor):  # type: ignore[misc]  # Markdown ships no type hints
    """Drops ``title`` attributes (a link's ``[x](url "title")``): the chat view shows a
    title as a tooltip, which Qt draws as rich text, and the text is the model's."""

    def run(self, root: ElementTree.Element) -> None:
        for element in root.iter():
            element.attrib.pop("title", None)


class _TableCells(Treeprocessor):  # type: ignore[misc]  # Markdown ships no type hints
    """Gives tables cell padding and a thin grid: Qt's rich text draws a bare ``<table>``
    with its cells touching ("Neptune28ice giant")."""

    def run(self, root: ElementTree.Element) -> None:
        for table in root.iter("table"):
            table.attrib.update({"cellpadding": "4", "cellspacing": "0", "border": "1",
                                 "style": "border-color: #d0d7de"})


class _AtxHeading(HashHeaderProcessor):  # type: ignore[misc]  # no type hints
    """A ``#`` heading only where a space (or the line's end) follows the hashes, as
    CommonMark has it: Python-Markdown also reads ``#print(x)``, a commented-out line of
    code in a reply, as a heading and drops its ``#``."""

    RE = re.compile(r"(?:^|\n)(?P<level>#{1,6})"
                    r"(?P<header>(?:[ \t](?:\\.|[^\\#]|#+(?=[^#\n]))*?)?)#*(?:\n|$)")


def _new_markdown() -> markdown.Markdown:
    md = markdown.Markdown(extensions=["tables", "sane_lists", "nl2br"])
    md.parser.blockprocessors.register(_AtxHeading(md.parser), "hashheader", 70)
    # Untrusted text: raw HTML is shown as text, and images are never fetched.
    md.preprocessors.deregister("html_block")
    for name in ("html", "image_link", "image_reference", "short_image_ref"):
        md.inlinePatterns.deregister(name)
    md.treeprocessors.register(_NoTitles(md), "no_titles", 0)
    md.treeprocessors.register(_TableCells(md), "table_cells", 0)
    return md


_md: markdown.Markdown | None = None

#: longer messages are shown as plain text (see :func:`render_markdown`)
MAX_MARKDOWN_CHARS = 100_000


def render_markdown(text: str) -> RenderedMarkdown:
    """Render a message (Markdown) to an HTML body fragment.

    Args:
        text: the message.

    Returns:
        The HTML, the code blocks' text and their source spans (character offsets into
        ``text``).
    """
    global _md
    if len(text) > MAX_MARKDOWN_CHARS:
        # Python-Markdown's inline processing grows faster than linearly; a pasted
        # megabyte would freeze the window for a minute. Show such text as it is.
        return RenderedMarkdown(
            f'<pre style="white-space: pre-wrap">{html.escape(text)}</pre>', ()
        )
    # The placeholder characters must not be forgeable; replaced, not removed, so that
    # offsets into the text still hold.
    text = text.replace(_P0, "\ufffd").replace(_P1, "\ufffd")
    lines = text.split("\n")
    out_lines: list[str] = []
    prose: list[str] = []
    blocks: list[tuple[str, str]] = []
    spans: list[CodeBlockSpan] = []
    pos = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _FENCE.match(line)
        if m:
            out_lines.extend(_keep_indentation(prose))
            prose = []
            fence, indent = m.group("fence"), m.group("indent")
            lang = m.group("lang")
            start = pos
            code_lines: list[str] = []
            pos += len(line) + 1
            content_start = content_end = min(pos, len(text))
            i += 1
            while i < len(lines):
                inner = lines[i]
                stripped = inner.strip()
                if stripped.startswith(fence[0] * len(fence)) and set(stripped) <= {fence[0]}:
                    content_end = pos
                    pos += len(inner) + 1
                    i += 1
                    break
                pos += len(inner) + 1
                content_end = min(pos, len(text))
                i += 1
                code_lines.append(inner[len(indent):] if inner.startswith(indent) else inner)
            blocks.append(("\n".join(code_lines), lang))
            spans.append(CodeBlockSpan(start, content_start, max(content_start, content_end),
                                       min(pos, len(text))))
            out_lines.extend(["", f"{indent}{_P0}{len(blocks) - 1}{_P1}", ""])
            continue
        prose.append(line)
        pos += len(line) + 1
        i += 1
    out_lines.extend(_keep_indentation(prose))
    if _md is None:
        _md = _new_markdown()
    _md.reset()
    body = _md.convert("\n".join(out_lines))
    code_texts = tuple(code for code, _ in blocks)

    def put_block(match: re.Match[str]) -> str:
        n = int(match.group(1))
        if n >= len(blocks):
            return ""
        code, lang = blocks[n]
        return _code_block_html(n, code, lang)

    body = _PLACEHOLDER.sub(put_block, body)
    # an indented code block (Markdown's own <pre>) wraps as the fenced ones do: Qt does
    # not scroll a message sideways, so a long line would be cut off at its edge
    body = body.replace("<pre><code>", '<pre style="white-space: pre-wrap"><code>')
    return RenderedMarkdown(body, code_texts, tuple(spans))


def warm_up() -> None:
    """Import Markdown's and Pygments' lazily loaded parts now (at start-up), so the
    first streamed reply does not pause the GUI thread to load them."""
    render_markdown("# t\n\n**b** `c`\n\n| a |\n|---|\n| 1 |\n\n```python\nx = 1\n```\n")
    for lang in ("python", "bash", "javascript", "json", "c", "cpp", "rust"):
        highlight_code("x", lang)
