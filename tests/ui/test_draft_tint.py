"""The draft tint never changes the text shown, and covers exactly the drafted characters.

Property-style: replies are generated from Markdown pieces whose visible text is known
(identifiers full of underscores, bold, italics, inline code with stars and underscores,
links, escapes, entities, headings, lists, fenced code with indentation), draft spans
from random boundaries; a fixed seed and a bounded number of cases keep it deterministic
and fast. The oracle is the generator: each piece says which of its source characters
are shown, so the expected tint of every shown character is known without the code under
test.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from PySide6.QtGui import QColor, QTextDocument

from app.ui.chat.chat_view import MessageView, MessageWidget
from app.ui.chat.markdown_render import TINT_COLOR, render_markdown

TINT = QColor(TINT_COLOR).name()
CASES = 60
SEED = 20261201


@dataclass
class Reply:
    """A generated reply: its source and, for every shown non-space character, the
    source offset it came from (in order)."""

    source: str = ""
    shown: list[tuple[str, int]] = field(default_factory=list)

    def add(self, src: str, visible_at: list[int]) -> None:
        base = len(self.source)
        self.source += src
        self.shown += [(src[i], base + i) for i in visible_at if not src[i].isspace()]

    def add_plain(self, src: str) -> None:
        self.add(src, list(range(len(src))))


WORDS = ["compute_total_with_default_attribute", "snake_case_name", "x", "value2", "the",
         "a_b_c", "draft", "k", "tokens", "HTTP", "3.14", "α", "naïve", "😀", "end."]
CODE_BODIES = ["compute_total_with_default_attribute", "**kwargs", "*args", "a_b * c_d",
               "x = y ** 2", "__init__", "_private", "**", "*", "_", "~tilde~", "<b>"]


def _inline(rng: random.Random, reply: Reply) -> None:
    kind = rng.randrange(9)
    if kind <= 2:
        reply.add_plain(rng.choice(WORDS))
    elif kind == 3:
        w = rng.choice(WORDS[:10])
        reply.add(f"**{w}**", list(range(2, 2 + len(w))))
    elif kind == 4:
        w = rng.choice(WORDS[:10])
        reply.add(f"*{w}*", list(range(1, 1 + len(w))))
    elif kind == 5:
        body = rng.choice(CODE_BODIES)
        reply.add(f"`{body}`", list(range(1, 1 + len(body))))
    elif kind == 6:
        w = rng.choice(WORDS[:10])
        reply.add(f"[{w}](https://example.com/{w})", list(range(1, 1 + len(w))))
    elif kind == 7:
        reply.add("\\*literal\\*", [1, 2, 3, 4, 5, 6, 7, 8, 10])
    else:
        reply.add("A&amp;B", [0, 1, 6])


def _paragraph(rng: random.Random, reply: Reply) -> None:
    for i in range(rng.randint(1, 7)):
        if i:
            reply.add_plain(" " if rng.random() < 0.85 else "\n")
        _inline(rng, reply)


def _block(rng: random.Random, reply: Reply) -> None:
    kind = rng.randrange(6)
    if kind <= 2:
        _paragraph(rng, reply)
    elif kind == 3:
        reply.add("# ", [])
        _paragraph(rng, reply)
    elif kind == 4:
        for i in range(rng.randint(1, 3)):
            if i:
                reply.add_plain("\n")
            reply.add("- ", [])
            _paragraph(rng, reply)
    else:
        lang = rng.choice(["python", "", "bash"])
        reply.add(f"```{lang}\n", [])
        for i in range(rng.randint(1, 4)):
            if i:
                reply.add_plain("\n")
            reply.add_plain(" " * rng.choice([0, 0, 4, 8]))
            reply.add_plain(rng.choice(["def f(**kwargs):", "return a_b * c_d", "x = `y`",
                                        "if __name__ == '__main__':", "print('*')"]))
        reply.add("\n```", [])


def generate(rng: random.Random) -> Reply:
    reply = Reply()
    for i in range(rng.randint(1, 5)):
        if i:
            reply.add_plain("\n\n")
        _block(rng, reply)
    return reply


def random_spans(rng: random.Random, n: int) -> list[tuple[int, int]]:
    cuts = sorted(rng.sample(range(n + 1), k=min(n + 1, rng.randint(0, 12))))
    spans = []
    drafted = rng.random() < 0.5
    prev = 0
    for c in [*cuts, n]:
        if drafted and c > prev:
            spans.append((prev, c))
        drafted = not drafted
        prev = c
    return spans


def shown_chars(doc: QTextDocument) -> list[tuple[str, bool, str]]:
    """(character, tinted, block text) for every non-space character shown, in order,
    leaving out the code blocks' header cells (language, then the Copy link), which have
    no source."""
    out: list[tuple[str, bool, str]] = []
    block = doc.begin()
    while block.isValid():
        if not (_has_copy_link(block) or _has_copy_link(block.next())):
            it = block.begin()
            while not it.atEnd():
                frag = it.fragment()
                tinted = frag.charFormat().background().color().name() == TINT
                out += [(ch, tinted, block.text()) for ch in frag.text() if not ch.isspace()]
                it += 1
        block = block.next()
    return out


def _has_copy_link(block) -> bool:  # type: ignore[no-untyped-def]
    if not block.isValid():
        return False
    it = block.begin()
    while not it.atEnd():
        if it.fragment().charFormat().anchorHref().startswith("copy:"):
            return True
        it += 1
    return False


def reply_widget(qtbot, text: str, spans, tint: bool) -> MessageWidget:  # type: ignore[no-untyped-def]
    w = MessageWidget(MessageView(1, "assistant", text, tuple(spans)), tint=tint)
    qtbot.addWidget(w)
    return w


def test_tint_never_changes_the_text_and_covers_exactly_the_drafted_characters(qtbot) -> None:
    rng = random.Random(SEED)
    for case in range(CASES):
        reply = generate(rng)
        spans = random_spans(rng, len(reply.source))
        on = reply_widget(qtbot, reply.source, spans, tint=True)
        off = reply_widget(qtbot, reply.source, spans, tint=False)
        assert on.shown_text == off.shown_text, (case, reply.source, spans)
        got = shown_chars(on.body.document())
        expected = [ch for ch, _ in reply.shown]
        assert [ch for ch, _, _ in got] == expected, (case, reply.source)
        drafted = set()
        for a, b in spans:
            drafted.update(range(a, b))
        for (ch, tinted, block), (_, src) in zip(got, reply.shown, strict=True):
            assert tinted == (src in drafted), (case, reply.source, spans, ch, src, block)
        assert not any(t for _, t, _ in shown_chars(off.body.document()))
        on.deleteLater()
        off.deleteLater()


@pytest.mark.parametrize("text", [
    "Call `compute_total_with_default_attribute` with **kwargs and *args, not __init__.",
    "compute_total_with_default_attribute(**kwargs) uses *args and _x_ and `a*b*c`",
    "**bold** `*` _it_ * star * __dunder__ ~~strike~~ \\_escaped\\_",
])
def test_underscores_stars_and_backticks_show_the_same_with_the_tint_on_and_off(
        qtbot, text: str) -> None:
    rng = random.Random(text)
    off = reply_widget(qtbot, text, (), tint=False).shown_text
    for _ in range(20):
        spans = random_spans(rng, len(text))
        assert reply_widget(qtbot, text, spans, tint=True).shown_text == off
    # and every character: the identifier keeps its underscores whole
    whole = reply_widget(qtbot, text, [(0, len(text))], tint=True)
    assert whole.shown_text == off
    if "compute_total" in text:
        assert "compute_total_with_default_attribute" in whole.shown_text


def test_tint_on_an_identifier_full_of_underscores(qtbot) -> None:
    text = "Call `compute_total_with_default_attribute` now"
    w = reply_widget(qtbot, text, [(5, 43)], tint=True)
    got = shown_chars(w.body.document())
    word = "compute_total_with_default_attribute"
    assert "".join(ch for ch, _, _ in got) == "Call" + word + "now"
    assert [t for _, t, _ in got] == [False] * 4 + [True] * len(word) + [False] * 3


def test_user_message_keeps_its_indentation_and_markdown_characters(qtbot) -> None:
    typed = "Fix this:\n\ndef f(x):\n    if x:\n        return x * 2\n    return **kw\n\t_tab_"
    w = MessageWidget(MessageView(1, "user", typed), tint=True)
    qtbot.addWidget(w)
    assert w.shown_text == typed


def test_reply_code_outside_a_fence_keeps_its_indentation(qtbot) -> None:
    text = "Here is the function:\ndef f(x):\n    if x:\n        return x\n    return 0"
    w = reply_widget(qtbot, text, (), tint=False)
    lines = w.shown_text.replace("\u00a0", " ").splitlines()
    assert "    if x:" in lines and "        return x" in lines and "    return 0" in lines
    # lists still nest and render as lists (no bullets in the text, the indent is layout)
    nested = reply_widget(qtbot, "- a\n    - b\n- c", (), tint=False)
    assert nested.shown_text.split() == ["a", "b", "c"]


def test_an_indented_code_block_keeps_its_lines_together(qtbot) -> None:
    """A reply that continues code after a blank line (the body of a function the prompt
    began) is Markdown's indented code block: its deeper lines stay in it, indented
    relative to the first, instead of falling out as flush-left prose."""
    text = "\n\n    if n < 1:\n        return n\n\n    return fib(n - 1)\n\nDone.\n"
    for tint in (False, True):
        w = reply_widget(qtbot, text, [(6, 20)] if tint else (), tint=tint)
        lines = [line.rstrip() for line in w.shown_text.replace("\u00a0", " ").splitlines()]
        assert lines[lines.index("if n < 1:") + 1] == "    return n"
        assert "return fib(n - 1)" in lines and "Done." in lines
    html = render_markdown(text).html
    assert ('<pre style="white-space: pre-wrap"><code>if n &lt; 1:\n    return n\n\n'
            'return fib(n - 1)\n</code></pre>') in html  # wrapped like a fenced block
    # in a list item (content dedented by four columns) code indented four is a
    # paragraph of the item, eight a code block: either way its lines keep their shape
    code = "def fib(n):\n    if n < 2:\n        return n\n"
    for indent in ("    ", "        "):
        item = "1. Define it:\n\n" + "".join(indent + line + "\n" for line in code.splitlines())
        w = reply_widget(qtbot, item, (), tint=False)
        lines = [line.rstrip() for line in w.shown_text.replace("\u00a0", " ").splitlines()]
        i = lines.index("def fib(n):")
        assert lines[i + 1:i + 3] == ["    if n < 2:", "        return n"], lines


def test_a_long_unbroken_line_wraps_anywhere_and_stays_as_typed(qtbot) -> None:  # type: ignore[no-untyped-def]
    """A pasted line without spaces (minified JSON, base64): Qt's default wrapping lays
    such a run out in time growing with its square, so a text holding one wraps
    anywhere, in the message box and in the chat; the text is the one typed."""
    from PySide6.QtCore import QMimeData
    from PySide6.QtGui import QTextOption

    from app.ui.chat.chat_view import MessageView, MessageWidget
    from app.ui.chat.input_box import ComposerWidget
    from app.ui.text_wrap import LONG_RUN

    anywhere = QTextOption.WrapMode.WrapAnywhere
    typed = "short words stay " + "x" * 200_000
    w = MessageWidget(MessageView(1, "user", typed), tint=False)
    qtbot.addWidget(w)
    w.show()
    assert w.body.wordWrapMode() == anywhere and w.shown_text == typed
    w.set_content("ordinary words")
    assert w.body.wordWrapMode() == QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere
    box = ComposerWidget()
    qtbot.addWidget(box)
    paste = QMimeData()
    paste.setText("y" * (LONG_RUN + 1))
    box.input.insertFromMimeData(paste)
    assert box.input.wordWrapMode() == anywhere
    box.input.selectAll()
    box.input.textCursor().removeSelectedText()  # deleted, as a user does
    box.input.undo()  # the run comes back: still laid out anywhere
    assert box.input.toPlainText() == paste.text() and box.input.wordWrapMode() == anywhere
    box.input.set_text("")  # sent: words wrap at their boundaries again
    assert box.input.wordWrapMode() == QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere


def test_a_list_right_after_a_paragraph_line_is_a_list_and_keeps_its_tint(qtbot) -> None:
    """Models write "Ingredients:" and the list on the next line (CommonMark reads a list
    there; Python-Markdown wants a blank line first): it renders as a list, a quote
    likewise, and the tint still lands on the drafted words."""
    text = "Ingredients:\n- 1 pineapple\n- 2 bananas\n\nSteps:\n1. Peel\n2. Blend\n\nNote\n> cold"
    html = render_markdown(text).html
    assert "<ul>\n<li>1 pineapple</li>\n<li>2 bananas" in html and "<ol>" in html
    assert "<blockquote>" in html and "- 1" not in html
    assert "x - y<br />\n-5 degrees" in render_markdown("x - y\n-5 degrees").html  # no list
    drafted = text.index("bananas")
    w = reply_widget(qtbot, text, [(drafted, drafted + len("bananas"))], tint=True)
    got = shown_chars(w.body.document())
    assert "".join(ch for ch, t, _ in got if t) == "bananas"
