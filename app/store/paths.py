"""Where Tandem keeps its files: config, data (history, models), cache, logs, resources.

Folders follow the platform's conventions through :mod:`platformdirs` (app name
``Tandem``): on Linux ``~/.config/Tandem``, ``~/.local/share/Tandem`` and
``~/.cache/Tandem``; on macOS ``~/Library/Application Support/Tandem`` and
``~/Library/Caches/Tandem``; on Windows ``%LOCALAPPDATA%\\Tandem``. When the environment
variable ``TANDEM_HOME`` is set, every folder lives under it instead (``config/``,
``data/``, ``cache/``, ``logs/``), which is how tests and portable installs isolate
themselves. Logs go to platformdirs' user log folder (see :func:`log_dir`).

Every function reads the environment when called (nothing is cached), so a test that
changes ``TANDEM_HOME`` sees its own folders. Folders are created on first use.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import platformdirs

from app.errors import FolderError

APP_NAME = "Tandem"
HOME_ENV = "TANDEM_HOME"


def _home_override() -> Path | None:
    value = os.environ.get(HOME_ENV, "").strip()
    return Path(value).expanduser() if value else None


def ensure_folder(path: Path, what: str = "folder") -> Path:
    """``path``, created with its parents when missing.

    Raises:
        FolderError: it is a file, or cannot be created; the message names ``what`` (the
            models folder, …), the path and the reason in words.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        error = FolderError(f"Tandem's {what} {path} is a file, not a folder: move it away "
                            "or choose another folder.")
    except OSError as exc:
        error = FolderError(f"Tandem cannot create its {what} {path}: "
                            f"{exc.strerror or exc}.")
        error.errno = exc.errno
    else:
        return path
    raise error


def _folder(sub: str, what: str, platform_path: Callable[..., Path], **kw: bool) -> Path:
    """``<TANDEM_HOME>/<sub>`` when that is set, else ``platform_path`` (a
    :mod:`platformdirs` ``user_*_path`` function) for Tandem; created if missing (see
    :func:`ensure_folder`, whose errors name the folder ``what``)."""
    home = _home_override()
    path = home / sub if home is not None else platform_path(APP_NAME, appauthor=False, **kw)
    return ensure_folder(path, what)


def config_dir() -> Path:
    """The folder that holds ``settings.json`` (created if missing)."""
    return _folder("config", "settings folder", platformdirs.user_config_path, roaming=True)


def data_dir() -> Path:
    """The folder that holds the chat history database and the models folder."""
    return _folder("data", "data folder", platformdirs.user_data_path)


def cache_dir() -> Path:
    """Files that can be recreated at any time."""
    return _folder("cache", "cache folder", platformdirs.user_cache_path)


def models_dir() -> Path:
    """Where Tandem puts GGUF files it writes itself (the bundled demo model)."""
    return ensure_folder(data_dir() / "models", "models folder")


def log_dir() -> Path:
    """Where the window and the CLI write their log files (``tandem.log``,
    ``tandem-cli.log``): platformdirs' user log folder, which users do not clear as they
    may a cache (Linux ``~/.local/state/Tandem/log``, macOS ``~/Library/Logs/Tandem``,
    Windows ``%LOCALAPPDATA%\\Tandem\\Logs``); ``<TANDEM_HOME>/logs`` when that is set."""
    return _folder("logs", "log folder", platformdirs.user_log_path)


def settings_path() -> Path:
    """The settings file (JSON)."""
    return config_dir() / "settings.json"


def history_path() -> Path:
    """The chat history database (SQLite, WAL journal)."""
    return data_dir() / "history.sqlite3"


def resources_dir() -> Path:
    """The data files (icons, style sheet, catalog, prompts, templates, notices).

    They are the package ``app.resources`` (``setup.py`` maps the repository's
    ``resources/`` folder to it), found through :mod:`importlib.resources`: the same call
    finds them in an editable install (the repository folder), an installed wheel
    (``site-packages/app/resources``) and a PyInstaller bundle (``_internal/app/resources``).

    Raises:
        TandemError: the package is missing or not a folder on disk (a broken install).
    """
    from importlib import resources

    from app.errors import TandemError

    try:
        root = resources.files("app.resources")
    except ModuleNotFoundError as exc:
        raise TandemError(
            "Tandem's data files (the app.resources package) are not installed; "
            "reinstall Tandem."
        ) from exc
    if not isinstance(root, Path):  # e.g. a zip import: the callers need real files
        raise TandemError(f"Tandem's data files are not a folder on disk ({root}).")
    return root


def icon_path(kind: str = "png") -> Path:
    """The app icon: ``png`` (256 px), ``png48`` (48 px), ``svg``, ``ico`` (Windows) or
    ``icns`` (macOS)."""
    names = {"png": "tandem-256.png", "png48": "tandem-48.png", "svg": "tandem.svg",
             "ico": "tandem.ico", "icns": "tandem.icns"}
    if kind not in names:
        raise ValueError(f"unknown icon kind {kind!r}; one of {sorted(names)}")
    return resources_dir() / "icons" / names[kind]
