"""PyInstaller entry point: the same as the ``tandem`` GUI script (app.ui.launch:main)."""

import sys

from app.ui.launch import main

if __name__ == "__main__":
    sys.exit(main())
