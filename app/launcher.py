"""``python -m app install-launcher`` / ``uninstall-launcher``: a double-clickable Tandem.

What is installed, per platform (templates in ``resources/launchers/``, icons in
``resources/icons/``):

* Linux (freedesktop): ``io.github.tandem_chat.tandem.desktop`` (:data:`APP_ID`, the id
  the AppStream metainfo, the Wayland app id and the icons share) in
  ``$XDG_DATA_HOME/applications`` (the applications menu) and on the desktop
  (``xdg-user-dir DESKTOP``), marked executable and, where GNOME's ``gio`` exists,
  trusted. It opens GGUF files (``MimeType=application/x-gguf``, ``Exec=… %f``); the
  MIME type itself (magic ``GGUF``, glob ``*.gguf``) goes to ``$XDG_DATA_HOME/mime``.
  Icons go to ``$XDG_DATA_HOME/icons/hicolor/{48x48,256x256,scalable}/apps`` and the entry
  names the themed icon (``Icon=io.github.tandem_chat.tandem``), not a file. Entries of
  older versions (``tandem.desktop``, ``tandem.png``) are removed.
* Windows: ``Tandem.lnk`` in the Start menu's Programs folder, pointing at ``pythonw.exe``
  (no console window) or the ``tandem.exe`` GUI script, with ``tandem.ico``; written by
  PowerShell through the WScript.Shell COM object (no extra Python packages).
* macOS: ``~/Applications/Tandem.app`` — an app bundle whose executable is a small shell
  script that starts this Python environment, with ``tandem.icns``.

The launcher runs the interpreter that installed it (the project's virtual environment),
so it keeps working when the terminal is closed. Qt-free: ``python -m app
install-launcher`` (:mod:`app.cli.launcher`) calls it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template

from app import __version__
from app.errors import TandemError
from app.store import paths

Runner = Callable[[Sequence[str]], int]

#: Reverse-DNS application id: desktop file, AppStream component, icon name, Wayland app id.
APP_ID = "io.github.tandem_chat.tandem"
#: MIME type of GGUF files (resources/launchers/gguf-mime.xml)
GGUF_MIME_TYPE = "application/x-gguf"


def _run(cmd: Sequence[str]) -> int:
    try:
        return subprocess.run(list(cmd), capture_output=True, timeout=60, check=False).returncode
    except (OSError, subprocess.TimeoutExpired):
        return -1


@dataclass(frozen=True, slots=True)
class LauncherResult:
    """What an install or uninstall did: files written/removed, and notes for the user."""

    paths: tuple[Path, ...]
    notes: tuple[str, ...] = ()


def launch_command(platform: str | None = None) -> list[str]:
    """The command line that opens the window with this Python environment.

    A PyInstaller bundle runs itself; otherwise the ``tandem`` GUI script next to the
    interpreter is preferred, then ``pythonw -m app`` (Windows) / ``python -m app``.
    """
    platform = platform or sys.platform
    if getattr(sys, "frozen", False):
        return [sys.executable]
    bindir = Path(sys.executable).parent
    if platform == "win32":
        for name in ("tandem.exe",):
            if (bindir / name).is_file():
                return [str(bindir / name)]
        pythonw = bindir / "pythonw.exe"
        return [str(pythonw if pythonw.is_file() else Path(sys.executable)), "-m", "app"]
    script = bindir / "tandem"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "app"]


def _template(name: str) -> Template:
    path = paths.resources_dir() / "launchers" / name
    try:
        return Template(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TandemError(f"The launcher template {path} is missing: {exc}") from exc


def _icon(kind: str) -> Path:
    icon = paths.icon_path(kind)
    if not icon.is_file():
        raise TandemError(f"The app icon {icon} is missing.")
    return icon


# -- Linux ----------------------------------------------------------------------------
def _desktop_exec_quote(arg: str) -> str:
    """Quote one Exec argument as the Desktop Entry Specification requires."""
    if arg and not any(c in arg for c in ' \t\n"\'\\><~|&;$*?#()`='):
        return arg
    escaped = "".join("\\" + c if c in '"`$\\' else c for c in arg)
    return f'"{escaped}"'


def _xdg_data_home(home: Path) -> Path:
    value = os.environ.get("XDG_DATA_HOME", "").strip()
    return Path(value) if value else home / ".local" / "share"


def _desktop_dir(home: Path) -> Path | None:
    """The user's desktop folder (xdg-user-dirs), or None when there is none."""
    config = Path(os.environ.get("XDG_CONFIG_HOME", "").strip() or home / ".config")
    dirs_file = config / "user-dirs.dirs"
    candidate: Path | None = None
    try:
        for line in dirs_file.read_text(encoding="utf-8").splitlines():
            if line.startswith("XDG_DESKTOP_DIR="):
                value = line.split("=", 1)[1].strip().strip('"')
                candidate = Path(value.replace("$HOME", str(home)))
    except OSError:
        pass
    if candidate is None:
        candidate = home / "Desktop"
    if candidate.resolve() == home.resolve():
        return None  # desktop disabled: xdg-user-dirs points it at $HOME
    return candidate if candidate.is_dir() else None


def linux_paths(home: Path) -> dict[str, Path]:
    """Where the Linux launcher's files go (desktop copy excluded: it may not exist)."""
    data = _xdg_data_home(home)
    icons = data / "icons" / "hicolor"
    return {
        "menu": data / "applications" / f"{APP_ID}.desktop",
        "icon48": icons / "48x48" / "apps" / f"{APP_ID}.png",
        "icon256": icons / "256x256" / "apps" / f"{APP_ID}.png",
        "icon_svg": icons / "scalable" / "apps" / f"{APP_ID}.svg",
        "mime": data / "mime" / "packages" / f"{APP_ID}.xml",
    }


def _legacy_linux_paths(home: Path) -> list[Path]:
    """Files that versions before the reverse-DNS id wrote."""
    data = _xdg_data_home(home)
    found = [data / "applications" / "tandem.desktop",
             data / "icons" / "hicolor" / "256x256" / "apps" / "tandem.png",
             data / "icons" / "hicolor" / "scalable" / "apps" / "tandem.svg"]
    desktop = _desktop_dir(home)
    if desktop is not None:
        found.append(desktop / "tandem.desktop")
    return [p for p in found if p.exists()]


def desktop_entry(exec_cmd: Sequence[str], try_exec: str | None = None) -> str:
    """The text of the desktop entry for a command line.

    ``Exec`` is the quoted command followed by ``%f`` (a GGUF opened from a file
    manager); ``TryExec`` is ``try_exec`` or the command's program.
    """
    return _template("tandem.desktop.in").substitute(
        exec=" ".join(_desktop_exec_quote(a) for a in exec_cmd),
        try_exec=try_exec or exec_cmd[0],
        app_id=APP_ID,
        mime_type=GGUF_MIME_TYPE,
    )


def resource_file(name: str) -> Path:
    """A file of ``resources/launchers`` (mime XML, metainfo); TandemError if missing."""
    path = paths.resources_dir() / "launchers" / name
    if not path.is_file():
        raise TandemError(f"The launcher file {path} is missing.")
    return path


def _install_linux(home: Path, run: Runner) -> LauncherResult:
    where = linux_paths(home)
    written: list[Path] = []
    notes: list[str] = []
    for key, source in (("icon48", paths.icon_path("png48")), ("icon256", _icon("png")),
                        ("icon_svg", _icon("svg")), ("mime", resource_file("gguf-mime.xml"))):
        if not source.is_file():
            raise TandemError(f"The launcher file {source} is missing.")
        where[key].parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, where[key])
        written.append(where[key])
    entry = desktop_entry(launch_command("linux"))
    targets = [where["menu"]]
    desktop = _desktop_dir(home)
    if desktop is not None:
        targets.append(desktop / f"{APP_ID}.desktop")
    else:
        notes.append("No desktop folder was found; the launcher is in the applications menu only.")
    for old in _legacy_linux_paths(home):
        old.unlink()
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(entry, encoding="utf-8")
        target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        written.append(target)
    if desktop is not None and shutil.which("gio"):
        # GNOME shows untrusted desktop files as text until they are marked trusted.
        run(["gio", "set", str(desktop / f"{APP_ID}.desktop"), "metadata::trusted", "true"])
    _refresh_linux_caches(where, run)
    from app import system_libs

    missing = system_libs.missing_libraries()
    if missing:  # the launcher would only show Qt's abort: say it now
        notes.append("The window needs system libraries that are missing ("
                     + ", ".join(lib.soname for lib in missing) + "). Install them with:\n  "
                     + "\n  ".join(system_libs.install_lines(missing)))
    return LauncherResult(tuple(written), tuple(notes))


def _refresh_linux_caches(where: dict[str, Path], run: Runner) -> None:
    """Tell the desktop about new or removed entries, MIME types and icons (each tool is
    optional: without it the desktop notices at the next login)."""
    if shutil.which("update-mime-database"):
        run(["update-mime-database", str(where["mime"].parent.parent)])
    if shutil.which("update-desktop-database"):
        run(["update-desktop-database", str(where["menu"].parent)])
    if shutil.which("gtk-update-icon-cache"):
        run(["gtk-update-icon-cache", "-q", "-t", "-f", str(where["icon48"].parents[2])])


def _uninstall_linux(home: Path, run: Runner) -> LauncherResult:
    where = linux_paths(home)
    candidates = list(where.values())
    desktop = _desktop_dir(home)
    if desktop is not None:
        candidates.append(desktop / f"{APP_ID}.desktop")
    removed = [p for p in candidates if p.exists()] + _legacy_linux_paths(home)
    for p in removed:
        p.unlink()
    if removed:
        _refresh_linux_caches(where, run)
    return LauncherResult(tuple(removed))


# -- Windows --------------------------------------------------------------------------
def windows_shortcut_path(home: Path) -> Path:
    appdata = os.environ.get("APPDATA", "").strip()
    base = Path(appdata) if appdata else home / "AppData" / "Roaming"
    return base / "Microsoft" / "Windows" / "Start Menu" / "Programs" / "Tandem.lnk"


def _ps_quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def windows_shortcut_script(shortcut: Path, command: Sequence[str], icon: Path,
                            workdir: Path) -> str:
    """The PowerShell that writes the Start-menu shortcut."""
    args = subprocess.list2cmdline(list(command[1:]))
    return "; ".join([
        "$s = (New-Object -ComObject WScript.Shell).CreateShortcut(" + _ps_quote(str(shortcut)) + ")",
        "$s.TargetPath = " + _ps_quote(command[0]),
        "$s.Arguments = " + _ps_quote(args),
        "$s.IconLocation = " + _ps_quote(f"{icon},0"),
        "$s.WorkingDirectory = " + _ps_quote(str(workdir)),
        "$s.Description = " + _ps_quote("Tandem: local GGUF chat with speculative decoding"),
        "$s.Save()",
    ])


def _install_windows(home: Path, run: Runner) -> LauncherResult:
    shortcut = windows_shortcut_path(home)
    shortcut.parent.mkdir(parents=True, exist_ok=True)
    script = windows_shortcut_script(shortcut, launch_command("win32"), _icon("ico"), home)
    rc = run(["powershell", "-NoProfile", "-NonInteractive", "-Command", script])
    if rc != 0:
        raise TandemError(f"PowerShell could not create the shortcut {shortcut} (exit {rc}).")
    return LauncherResult((shortcut,))


def _uninstall_windows(home: Path) -> LauncherResult:
    shortcut = windows_shortcut_path(home)
    if shortcut.exists():
        shortcut.unlink()
        return LauncherResult((shortcut,))
    return LauncherResult(())


# -- macOS ----------------------------------------------------------------------------
def mac_bundle_path(home: Path) -> Path:
    return home / "Applications" / "Tandem.app"


def _install_macos(home: Path, run: Runner) -> LauncherResult:
    bundle = mac_bundle_path(home)
    contents = bundle / "Contents"
    (contents / "MacOS").mkdir(parents=True, exist_ok=True)
    (contents / "Resources").mkdir(parents=True, exist_ok=True)
    plist = contents / "Info.plist"
    plist.write_text(_template("Info.plist.in").substitute(version=__version__), encoding="utf-8")
    exe = contents / "MacOS" / "Tandem"
    cmd = " ".join(_sh_quote(a) for a in launch_command("darwin"))
    exe.write_text(_template("macos-launcher.sh.in").substitute(exec=cmd), encoding="utf-8")
    exe.chmod(0o755)
    icns = contents / "Resources" / "tandem.icns"
    shutil.copyfile(_icon("icns"), icns)
    if shutil.which("touch"):
        run(["touch", str(bundle)])  # make Finder notice the new icon
    return LauncherResult((plist, exe, icns))


def _sh_quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def _uninstall_macos(home: Path) -> LauncherResult:
    bundle = mac_bundle_path(home)
    if bundle.exists():
        shutil.rmtree(bundle)
        return LauncherResult((bundle,))
    return LauncherResult(())


# -- API ------------------------------------------------------------------------------
def install_launcher(platform: str | None = None, home: Path | None = None,
                     run: Runner = _run) -> LauncherResult:
    """Install the launcher for this user.

    Args:
        platform: ``sys.platform`` value (default: this one).
        home: the user's home folder (default: ``Path.home()``).
        run: runs helper programs (gio, PowerShell); returns their exit status.

    Raises:
        TandemError: an unsupported platform, a missing resource, or the shortcut could
            not be written.
    """
    platform = platform or sys.platform
    home = home or Path.home()
    if platform.startswith("linux") or "bsd" in platform:
        return _install_linux(home, run)
    if platform == "win32":
        return _install_windows(home, run)
    if platform == "darwin":
        return _install_macos(home, run)
    raise TandemError(f"Installing a launcher is not supported on {platform}.")


def uninstall_launcher(platform: str | None = None, home: Path | None = None,
                       run: Runner = _run) -> LauncherResult:
    """Remove what :func:`install_launcher` created (missing files are not an error)."""
    platform = platform or sys.platform
    home = home or Path.home()
    if platform.startswith("linux") or "bsd" in platform:
        return _uninstall_linux(home, run)
    if platform == "win32":
        return _uninstall_windows(home)
    if platform == "darwin":
        return _uninstall_macos(home)
    raise TandemError(f"Launchers are not supported on {platform}.")
