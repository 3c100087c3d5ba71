"""Reply text → HTML for the chat view: Markdown, highlighted code blocks, draft tint.

Model output is untrusted text, so raw HTML in it is shown as text (Python-Markdown's
HTML block and inline HTML processors are removed) and images are not rendered (the view
also refuses to load any resource). Fenced code blocks are cut out before Markdown runs,
highlighted with Pygments (inline styles, so Qt's rich-text engine can show them) and put
back with a header row holding the language and a ``copy:<n>`` link; an unclosed fence
(a reply still streaming) is a code block up to the end of the text.

Tinting: the character ranges that came from accepted draft tokens are marked with two
private-use characters before Markdown runs (never inside block syntax such as ``#`` or
``-``, and never inside code blocks), and afterwards every run of marked *text* between
two tags is wrapped in its own ``<span>``, so spans never cross element boundaries.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

import markdown
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound

TINT_COLOR = "#fde7b0"
_S, _E = "\ue000", "\ue001"  # draft-run start / end
_P0, _P1 = "\ue010", "\ue011"  # code-block placeholder delimiters
_MARKERS = re.compile(f"[{_S}{_E}]")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[^\s`]*)[^`]*$")
_BLOCK_PREFIX = re.compile(r"^\s*(?:(?:#{1,6}|>|[-*+]|\d{1,9}[.)])(?:\s+|$))*")
_SYNTAX_ONLY = re.compile(r"^[\s|:\-=*_#>+`~]*$")
_TAG_OR_TEXT = re.compile(r"(<[^>]*>)")
_PLACEHOLDER = re.compile(f"(?:<p>)?{_P0}(\\d+){_P1}(?:</p>)?")


@dataclass(frozen=True, slots=True)
class RenderedMarkdown:
    """HTML for a message, and the text of each code block (``copy:<n>`` copies block n)."""

    html: str
    code_blocks: tuple[str, ...]


def _draft_mask(text: str, spans: Sequence[tuple[int, int]]) -> bytearray:
    mask = bytearray(len(text))
    for a, b in spans:
        a, b = max(0, a), min(len(text), b)
        if b > a:
            mask[a:b] = b"\x01" * (b - a)
    return mask


def _mark_line(line: str, mask: memoryview, tint: bool) -> str:
    """The line with draft runs wrapped in markers, block syntax left unmarked."""
    if not tint or not any(mask) or _SYNTAX_ONLY.match(line):
        return line
    start = _BLOCK_PREFIX.match(line)
    p = start.end() if start else 0
    out = [line[:p]]
    inside = False
    for ch, m in zip(line[p:], mask[p:], strict=True):
        if m and not inside:
            out.append(_S)
            inside = True
        elif not m and inside:
            out.append(_E)
            inside = False
        out.append(ch)
    if inside:
        out.append(_E)
    return "".join(out)


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
        f'<tr><td colspan="2"><pre style="margin:0; white-space:pre-wrap;">{body}</pre>'
        "</td></tr></table>"
    )


def _new_markdown() -> markdown.Markdown:
    md = markdown.Markdown(extensions=["tables", "sane_lists", "nl2br"])
    # Untrusted text: raw HTML is shown as text, and images are never fetched.
    md.preprocessors.deregister("html_block")
    for name in ("html", "image_link", "image_reference", "short_image_ref"):
        md.inlinePatterns.deregister(name)
    return md


_md: markdown.Markdown | None = None


def _wrap_draft_runs(fragment: str) -> str:
    """Replace markers with spans that wrap only text between tags (always well nested)."""
    if _S not in fragment and _E not in fragment:
        return fragment
    out: list[str] = []
    inside = False
    for part in _TAG_OR_TEXT.split(fragment):
        if not part:
            continue
        if part.startswith("<"):
            out.append(_MARKERS.sub("", part))  # markers never belong inside a tag
            continue
        buf: list[str] = []
        for piece in re.split(f"([{_S}{_E}])", part):
            if piece == _S:
                inside = True
            elif piece == _E:
                inside = False
            elif piece:
                if inside:
                    buf.append(f'<span style="background-color:{TINT_COLOR};">{piece}</span>')
                else:
                    buf.append(piece)
        out.append("".join(buf))
    return "".join(out)


#: longer messages are shown as plain text (see :func:`render_markdown`)
MAX_MARKDOWN_CHARS = 100_000


def render_markdown(
    text: str, draft_spans: Sequence[tuple[int, int]] = (), *, tint: bool = False
) -> RenderedMarkdown:
    """Render a message.

    Args:
        text: the message (Markdown).
        draft_spans: ``(start, end)`` character ranges that came from accepted drafts.
        tint: whether to tint those ranges (prose and inline code; not code blocks).

    Returns:
        The HTML body fragment and the code blocks' text.
    """
    global _md
    if len(text) > MAX_MARKDOWN_CHARS:
        # Python-Markdown's inline processing grows faster than linearly; a pasted
        # megabyte would freeze the window for a minute. Show such text as it is.
        return RenderedMarkdown(
            f'<pre style="white-space: pre-wrap">{html.escape(text)}</pre>', ()
        )
    text = _MARKERS.sub("", text).replace(_P0, "").replace(_P1, "")
    mask = _draft_mask(text, draft_spans) if tint and draft_spans else bytearray(len(text))
    view = memoryview(mask)
    lines = text.split("\n")
    out_lines: list[str] = []
    blocks: list[tuple[str, str]] = []
    pos = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _FENCE.match(line)
        if m:
            fence, indent = m.group("fence"), m.group("indent")
            lang = m.group("lang")
            code_lines: list[str] = []
            pos += len(line) + 1
            i += 1
            while i < len(lines):
                inner = lines[i]
                pos += len(inner) + 1
                i += 1
                stripped = inner.strip()
                if stripped.startswith(fence[0] * len(fence)) and set(stripped) <= {fence[0]}:
                    break
                code_lines.append(inner[len(indent):] if inner.startswith(indent) else inner)
            blocks.append(("\n".join(code_lines), lang))
            out_lines.extend(["", f"{indent}{_P0}{len(blocks) - 1}{_P1}", ""])
            continue
        out_lines.append(_mark_line(line, view[pos : pos + len(line)], tint))
        pos += len(line) + 1
        i += 1
    if _md is None:
        _md = _new_markdown()
    _md.reset()
    body = _md.convert("\n".join(out_lines))
    body = _wrap_draft_runs(body)
    code_texts = tuple(code for code, _ in blocks)

    def put_block(match: re.Match[str]) -> str:
        n = int(match.group(1))
        if n >= len(blocks):
            return ""
        code, lang = blocks[n]
        return _code_block_html(n, code, lang)

    body = _PLACEHOLDER.sub(put_block, body)
    return RenderedMarkdown(body, code_texts)


def warm_up() -> None:
    """Import Markdown's and Pygments' lazily loaded parts now (at start-up), so the
    first streamed reply does not pause the GUI thread to load them."""
    render_markdown("# t\n\n**b** `c`\n\n| a |\n|---|\n| 1 |\n\n```python\nx = 1\n```\n", [(0, 3)], tint=True)
    for lang in ("python", "bash", "javascript", "json", "c", "cpp", "rust"):
        highlight_code("x", lang)
