"""How long Qt takes to lay out a text with one very long run without whitespace (a
pasted line of minified JSON or base64), wrapped at word boundaries (Qt's default) and
anywhere (what app.ui.text_wrap picks for such a text).

For each length: a QPlainTextEdit (the message box) and a QTextBrowser (a chat message)
given the text, shown 800 px wide, timed until the event queue is empty; then the chat
view's own widget opening a user message of that length. Run it on the display users
have (an X server; Xvfb: ``DISPLAY=:99``): the offscreen platform lays text out
differently.

Usage:
    DISPLAY=:99 .venv/bin/python bench/long_line_layout.py --chars 100000,300000
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import _common as C


def _timed(app: Any, work: Any) -> float:
    t0 = time.perf_counter()
    work()
    app.processEvents()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/long_line_layout.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chars", default="100000,300000", help="run lengths, e.g. 100000,300000")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from PySide6.QtGui import QTextOption
    from PySide6.QtWidgets import QApplication, QPlainTextEdit, QTextBrowser

    from app.ui.chat.chat_view import MessageView, MessageWidget

    app = QApplication(sys.argv[:1])
    modes = {"word boundary": QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere,
             "anywhere": QTextOption.WrapMode.WrapAnywhere}
    rows = []
    for n in C.value_list(ap, "--chars", args.chars, int):
        text = "x" * n
        for name, mode in modes.items():
            for kind in (QPlainTextEdit, QTextBrowser):
                view = kind()
                view.resize(800, 400)
                view.setWordWrapMode(mode)
                view.show()
                app.processEvents()
                rows.append({"chars": n, "widget": kind.__name__, "wrap": name,
                             "seconds": _timed(app, lambda v=view: v.setPlainText(text))})
                view.close()
        message = MessageWidget(MessageView(1, "user", "hi"), tint=False)
        message.resize(800, 400)
        message.show()
        app.processEvents()
        rows.append({"chars": n, "widget": "chat message (Tandem's)", "wrap": "as chosen",
                     "seconds": _timed(app, lambda m=message: m.set_content(text))})
        message.close()
    out = {"platform": app.platformName(), "rows": rows}

    def text_out(data: dict[str, Any]) -> None:
        print(f"Qt platform {data['platform']}")
        for r in data["rows"]:
            print(f"{r['chars']:>9,} chars  {r['widget']:<24} {r['wrap']:<14} "
                  f"{r['seconds']:7.2f} s")

    C.report("long_line_layout", out, args.json, text_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
