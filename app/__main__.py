"""``python -m app``: with no arguments (or one GGUF file) open the window, otherwise run
the CLI (see :mod:`app.entry`)."""

import sys

from app.entry import main

if __name__ == "__main__":
    sys.exit(main())
