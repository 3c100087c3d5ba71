"""What a bug report needs to know about this installation, as ``name: value`` pairs:
Qt (PySide6), llama-cpp-python, the llama.cpp commit, the backend, Tandem's folders.

The window's and the CLI's log headers (:func:`app.store.logs.start_log`) are made from
:func:`log_fields`. Qt-free: the Qt version comes from the installed PySide6's metadata
(the window adds the running Qt's version once Qt is up). Never raises: a part that
cannot be read is reported as such.
"""

from __future__ import annotations

from importlib import metadata


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
        fields["Backend"] = (f"{info.backend} (ggml backends: {', '.join(info.backends) or 'none'}; "
                             f"GPU offload {'yes' if info.gpu_offload else 'no'})")
    try:
        fields["Folders"] = (f"config {paths.config_dir()}, data {paths.data_dir()}, "
                             f"logs {paths.log_dir()}")
    except OSError as exc:
        fields["Folders"] = f"cannot be created ({exc})"
    return fields
