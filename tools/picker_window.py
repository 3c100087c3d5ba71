"""``python tools/picker_window.py``: the model picker on its own (no chat window).

For trying the picker and for its screenshot: ``--target`` selects a model once the
library is scanned, ``--drafter`` a drafter (``prompt-lookup``, ``off`` or a GGUF path),
``--tab`` the tab to show, ``--size`` the window size. The choice is saved in the settings as in the app; its
downloads are paused when the window closes (they resume from the Downloads tab later).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from PySide6.QtCore import QTimer

from app.ui.launch import create_application


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/picker_window.py", description=__doc__)
    parser.add_argument("--target", type=Path, help="select this model as the target")
    parser.add_argument("--drafter", help="prompt-lookup, off, or the path of a draft GGUF")
    parser.add_argument("--tab", choices=["Library", "Catalog", "Downloads"], default="Library")
    parser.add_argument("--size", help="window size, WIDTHxHEIGHT (default 1280x800)")
    args = parser.parse_args(argv)
    qapp = create_application([sys.argv[0]])

    from app.ui.picker import ModelPickerWindow

    window = ModelPickerWindow()
    tab = window.library_tab

    def select() -> None:
        if tab.scanning:
            QTimer.singleShot(100, select)
            return
        if args.target is not None:
            tab.choose_target(args.target.resolve())
        select_drafter()

    def select_drafter() -> None:
        if args.drafter is None:
            return
        if tab.ranking:
            QTimer.singleShot(100, select_drafter)
            return
        if args.drafter in ("prompt-lookup", "off"):
            tab.choose_drafter(args.drafter)
        else:
            tab.choose_drafter("draft-model", Path(args.drafter).resolve())

    window.models_chosen.connect(lambda chosen: print(chosen, flush=True))
    window.open_tab(args.tab)
    if args.size:
        width, height = (int(v) for v in args.size.lower().split("x"))
        window.resize(width, height)
    window.show()
    QTimer.singleShot(0, select)
    status = qapp.exec()
    window.shutdown()
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
