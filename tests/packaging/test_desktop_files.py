"""The freedesktop files: the desktop entry as the launcher and the Linux packages write
it, the AppStream metainfo and the GGUF MIME type, checked with the reference validators
(``desktop-file-validate``, ``appstreamcli validate``, ``update-mime-database``), which
``packaging/install.sh --test`` installs."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from app import launcher
from app.store import paths

RES = paths.resources_dir() / "launchers"
METAINFO = RES / f"{launcher.APP_ID}.metainfo.xml"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: run bash packaging/install.sh --test")
    return path


@pytest.mark.parametrize("command", [["tandem"], ["/opt/my apps/tandem"], ["/usr/bin/python3", "-m", "app"]])
def test_desktop_entry_validates(tmp_path: Path, command: list[str]) -> None:
    entry = tmp_path / f"{launcher.APP_ID}.desktop"
    entry.write_text(launcher.desktop_entry(command), encoding="utf-8")
    proc = subprocess.run([_tool("desktop-file-validate"), str(entry)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == "", proc.stdout + proc.stderr
    text = entry.read_text()
    assert f"Icon={launcher.APP_ID}\n" in text  # a themed icon name, never a path
    assert "MimeType=application/x-gguf;\n" in text and " %f\n" in text


def test_metainfo_validates_and_names_the_desktop_entry() -> None:
    proc = subprocess.run([_tool("appstreamcli"), "validate", "--no-net", str(METAINFO)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Validation was successful." in proc.stdout and ":" not in proc.stdout.split("successful")[1]
    root = ET.parse(METAINFO).getroot()
    assert root.findtext("id") == launcher.APP_ID
    assert root.findtext("launchable") == f"{launcher.APP_ID}.desktop"
    assert root.findtext("project_license") == "MIT"
    assert "application/x-gguf" in [m.text for m in root.iter("mediatype")]
    from app import __version__

    assert root.find("releases/release").get("version") == __version__  # type: ignore[union-attr]


def test_gguf_mime_type_by_magic_and_glob(tmp_path: Path) -> None:
    mime = tmp_path / "mime"
    (mime / "packages").mkdir(parents=True)
    shutil.copy(RES / "gguf-mime.xml", mime / "packages" / f"{launcher.APP_ID}.xml")
    proc = subprocess.run([_tool("update-mime-database"), str(mime)], capture_output=True, text=True)
    assert proc.returncode == 0 and "warning" not in proc.stderr.lower(), proc.stderr
    assert "application/x-gguf:*.gguf" in (mime / "globs2").read_text()
    magic = (mime / "magic").read_bytes()
    assert b"[60:application/x-gguf]" in magic and b"GGUF" in magic
    gio = shutil.which("gio")
    if gio:  # the desktop's own lookup, where GLib's tool is installed
        sample = tmp_path / "model-without-extension"
        sample.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 64)
        env = {"XDG_DATA_DIRS": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "none")}
        out = subprocess.run([gio, "info", "-a", "standard::content-type", str(sample)],
                             capture_output=True, text=True, env=env).stdout
        assert "application/x-gguf" in out, out
