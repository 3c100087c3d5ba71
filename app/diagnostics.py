"""What a bug report needs to know about this installation, as ``name: value`` pairs:
Qt (PySide6), llama-cpp-python, the llama.cpp commit, the backend, Tandem's folders.

The window's and the CLI's log headers (:func:`app.store.logs.start_log`) are made from
:func:`log_fields`; the window's Help → About shows :func:`about_info`. Qt-free: the Qt version comes from the installed PySide6's metadata
(the window adds the running Qt's version once Qt is up). Never raises: a part that
cannot be read is reported as such.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the module loads llama.cpp only when asked (log_fields, about_info)
    from app.engine.llama import BuildInfo


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def log_fields() -> dict[str, str]:
    """Header fields: ``Qt``, ``llama-cpp-python``, ``llama.cpp``, ``Backend``,
    ``Folders``. Loads llama.cpp's library (about 0.1 s) to read its build."""
    from app.store import paths

    fields = {"Qt": f"PySide6 {_dist_version('PySide6')}"}
    try:
        from app.engine.llama import build_info

        info = build_info()
    except Exception as exc:  # a broken llama-cpp-python is exactly what a log must show
        fields["llama-cpp-python"] = f"cannot be loaded ({exc})"
    else:
        fields["llama-cpp-python"] = info.llama_cpp_python
        fields["llama.cpp"] = (f"ggml {info.ggml_version or 'unknown'}, "
                               f"commit {info.ggml_commit or 'unknown'}")
        fields["Backend"] = backend_line(info)
    try:
        fields["Folders"] = (f"config {paths.config_dir()}, data {paths.data_dir()}, "
                             f"logs {paths.log_dir()}")
    except OSError as exc:
        fields["Folders"] = f"cannot be created ({exc})"
    return fields


def backend_line(info: BuildInfo) -> str:
    """The backend, ggml's backends, the CPU features compiled in and GPU offload, in one
    line (About, the log's header)."""
    cpu = f"CPU features: {' '.join(info.cpu_features)}; " if info.cpu_features else ""
    return (f"{info.backend} (ggml backends: {', '.join(info.backends) or 'none'}; {cpu}"
            f"GPU offload {'yes' if info.gpu_offload else 'no'})")


@dataclass(frozen=True)
class AboutInfo:
    """What Help → About shows: ``versions`` and ``paths`` as (label, value) rows in the
    order shown, ``backend`` as one line, ``log_dir`` for "Open log folder" (None when
    it cannot be created)."""

    versions: tuple[tuple[str, str], ...]
    backend: str
    paths: tuple[tuple[str, str], ...]
    log_dir: Path | None

    def as_text(self) -> str:
        """Every row as ``label: value`` lines, for the clipboard (a bug report)."""
        rows = [*self.versions, ("Backend", self.backend), *self.paths]
        return "\n".join(f"{label}: {value}" for label, value in rows) + "\n"


def about_info() -> AboutInfo:
    """Versions (Tandem, llama-cpp-python, the llama.cpp commit, PySide6, Python), the
    backend, and the data, models, log and settings folders. Loads llama.cpp's library to
    read its build (about 0.1 s). Never raises: a part that cannot be read says so."""
    from app import __version__
    from app.catalog.library import current_models_dir
    from app.store import paths

    versions: list[tuple[str, str]] = [("Tandem", __version__)]
    try:
        from app.engine.llama import build_info

        info = build_info()
    except Exception as exc:  # a broken llama-cpp-python is exactly what About must show
        versions.append(("llama-cpp-python", f"cannot be loaded ({exc})"))
        backend = "unknown (llama.cpp cannot be loaded)"
    else:
        versions.append(("llama-cpp-python", info.llama_cpp_python))
        versions.append(("llama.cpp", f"commit {info.ggml_commit or 'unknown'}"
                                      f" (ggml {info.ggml_version or 'unknown'})"))
        backend = backend_line(info)
    versions.append(("PySide6", _dist_version("PySide6")))
    versions.append(("Python", f"{platform.python_version()} ({platform.python_implementation()})"))

    rows: list[tuple[str, str]] = []
    log_dir: Path | None = None
    for label, where in (("Data", paths.data_dir), ("Models", current_models_dir),
                         ("Logs", paths.log_dir), ("Settings", paths.config_dir)):
        try:
            folder = where()
        except (OSError, ValueError) as exc:
            rows.append((label, f"cannot be created ({exc})"))
            continue
        rows.append((label, str(folder)))
        if label == "Logs":
            log_dir = folder
    return AboutInfo(tuple(versions), backend, tuple(rows), log_dir)
