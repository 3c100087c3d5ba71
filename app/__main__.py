"""``python -m app``: with no arguments open the window, otherwise run the CLI."""

import sys


def _main() -> int:
    if len(sys.argv) == 1:
        from app.ui.launch import main as gui_main

        return gui_main()
    from app.cli import main

    return main()


if __name__ == "__main__":
    sys.exit(_main())
