"""PyInstaller entry point: the same as the ``tandem`` GUI script (:func:`app.entry.main`):
the window with no arguments or one GGUF file, the CLI otherwise and when the program is
invoked as ``tandem-cli`` (a symlink in the Linux bundle)."""

import sys

from app.entry import main

if __name__ == "__main__":
    sys.exit(main())
