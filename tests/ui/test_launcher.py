"""install-launcher / uninstall-launcher on Linux, macOS and Windows (paths faked)."""

from __future__ import annotations

import configparser
import os
import plistlib
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from app import launcher
from app.store import paths

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    (h / "Desktop").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("APPDATA", raising=False)
    return h


APP_ID = "io.github.tandem_chat.tandem"


def _read_entry(path: Path) -> configparser.SectionProxy:
    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read(path)
    return cp["Desktop Entry"]


def test_linux_menu_and_desktop_entries(home: Path) -> None:
    calls: list[list[str]] = []

    def run(cmd: Sequence[str]) -> int:
        calls.append(list(cmd))
        return 0

    legacy = home / ".local/share/applications/tandem.desktop"  # written by 0.1 launchers
    legacy.parent.mkdir(parents=True)
    legacy.write_text("[Desktop Entry]\n")
    result = launcher.install_launcher("linux", home, run)
    data = home / ".local/share"
    menu = data / f"applications/{APP_ID}.desktop"
    desktop = home / f"Desktop/{APP_ID}.desktop"
    icon48 = data / f"icons/hicolor/48x48/apps/{APP_ID}.png"
    icon256 = data / f"icons/hicolor/256x256/apps/{APP_ID}.png"
    svg = data / f"icons/hicolor/scalable/apps/{APP_ID}.svg"
    mime = data / f"mime/packages/{APP_ID}.xml"
    assert {menu, desktop, icon48, icon256, svg, mime} <= set(result.paths)
    assert not legacy.exists()
    assert icon48.read_bytes() == paths.icon_path("png48").read_bytes()
    assert icon256.read_bytes() == paths.icon_path("png").read_bytes()
    assert b'type="application/x-gguf"' in mime.read_bytes()
    for entry in (menu, desktop):
        d = _read_entry(entry)
        assert d["Type"] == "Application" and d["Name"] == "Tandem"
        assert d["Icon"] == APP_ID and d["Terminal"] == "false"  # a themed name, not a path
        assert d["Exec"].split()[0].strip('"') == launcher.launch_command("linux")[0]
        assert d["Exec"].endswith(" %f") and d["MimeType"] == "application/x-gguf;"
        assert os.access(entry, os.X_OK)
    if any(c[0] == "gio" for c in calls):
        assert ["gio", "set", str(desktop), "metadata::trusted", "true"] in calls
    if any(c[0] == "update-mime-database" for c in calls):
        assert ["update-mime-database", str(data / "mime")] in calls

    removed = launcher.uninstall_launcher("linux", home, run)
    assert {menu, desktop, icon48, icon256, svg, mime} <= set(removed.paths)
    assert not menu.exists() and not desktop.exists() and not icon48.exists()
    assert launcher.uninstall_launcher("linux", home).paths == ()


def test_linux_without_a_desktop_folder_uses_the_menu_only(home: Path) -> None:
    (home / "Desktop").rmdir()
    result = launcher.install_launcher("linux", home, lambda cmd: 0)
    assert (home / f".local/share/applications/{APP_ID}.desktop").is_file()
    assert result.notes and "applications menu only" in result.notes[0]


def test_linux_respects_xdg_dirs(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    (home / ".config").mkdir()
    (home / "Schreibtisch").mkdir()
    (home / ".config/user-dirs.dirs").write_text('XDG_DESKTOP_DIR="$HOME/Schreibtisch"\n')
    launcher.install_launcher("linux", home, lambda cmd: 0)
    assert (home / f"data/applications/{APP_ID}.desktop").is_file()
    assert (home / f"Schreibtisch/{APP_ID}.desktop").is_file()
    assert not (home / f"Desktop/{APP_ID}.desktop").exists()


def test_exec_line_quotes_paths_with_spaces() -> None:
    entry = launcher.desktop_entry(["/opt/my apps/python", "-m", "app"])
    assert 'Exec="/opt/my apps/python" -m app %f' in entry


def test_macos_app_bundle(home: Path) -> None:
    result = launcher.install_launcher("darwin", home, lambda cmd: 0)
    bundle = home / "Applications/Tandem.app"
    info = plistlib.loads((bundle / "Contents/Info.plist").read_bytes())
    assert info["CFBundleExecutable"] == "Tandem" and info["CFBundleIconFile"] == "tandem.icns"
    exe = bundle / "Contents/MacOS/Tandem"
    assert os.access(exe, os.X_OK) and exe.read_text().startswith("#!/bin/sh")
    assert launcher.launch_command("darwin")[0] in exe.read_text()
    assert (bundle / "Contents/Resources/tandem.icns").read_bytes()[:4] == b"icns"
    assert len(result.paths) == 3
    launcher.uninstall_launcher("darwin", home)
    assert not bundle.exists()


def test_windows_start_menu_shortcut(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPDATA", str(home / "AppData/Roaming"))
    scripts: list[list[str]] = []

    def run(cmd: Sequence[str]) -> int:
        scripts.append(list(cmd))
        Path(launcher.windows_shortcut_path(home)).write_bytes(b"LNK")  # what PowerShell does
        return 0

    result = launcher.install_launcher("win32", home, run)
    lnk = home / "AppData/Roaming/Microsoft/Windows/Start Menu/Programs/Tandem.lnk"
    assert result.paths == (lnk,)
    [cmd] = scripts
    assert cmd[0] == "powershell" and "WScript.Shell" in cmd[-1]
    assert "tandem.ico,0" in cmd[-1] and str(lnk) in cmd[-1]
    assert launcher.uninstall_launcher("win32", home).paths == (lnk,)
    assert not lnk.exists()

    with pytest.raises(launcher.TandemError, match="PowerShell"):
        launcher.install_launcher("win32", home, lambda c: 1)


def test_cli_subcommands(home: Path, tmp_path: Path) -> None:
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(REPO))
    env.pop("XDG_DATA_HOME", None)
    out = subprocess.run([sys.executable, "-m", "app", "install-launcher"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"{APP_ID}.desktop" in out.stdout
    assert (home / f".local/share/applications/{APP_ID}.desktop").is_file()
    out = subprocess.run([sys.executable, "-m", "app", "uninstall-launcher"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "removed" in out.stdout
    assert not (home / f".local/share/applications/{APP_ID}.desktop").exists()


def test_linux_launcher_warns_of_missing_qt_libraries(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app import system_libs

    monkeypatch.setattr(system_libs, "loads", lambda so: so != "libxcb-cursor.so.0")
    result = launcher.install_launcher("linux", home, lambda cmd: 0)
    [note] = [n for n in result.notes if "system libraries" in n]
    assert "libxcb-cursor.so.0" in note and "sudo apt install libxcb-cursor0" in note
