"""``python -m app``: the command-line interface; with no subcommand it opens the window."""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main())
