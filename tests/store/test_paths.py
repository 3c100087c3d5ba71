"""Folders: TANDEM_HOME moves every folder under it; resources are found."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.store import paths


def test_tandem_home_holds_every_folder(tandem_home: Path) -> None:
    for folder in (paths.config_dir(), paths.data_dir(), paths.cache_dir(), paths.models_dir(),
                   paths.log_dir()):
        assert folder.is_dir()
        assert folder.resolve().is_relative_to(tandem_home.resolve())
    assert paths.settings_path().parent == paths.config_dir()
    assert paths.history_path().parent == paths.data_dir()
    assert paths.models_dir().parent == paths.data_dir()


def test_without_tandem_home_platformdirs_are_used(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.delenv("TANDEM_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    import sys
    if sys.platform.startswith("linux"):
        assert paths.config_dir() == tmp_path / "xdg-config" / "Tandem"
        assert paths.data_dir() == tmp_path / "xdg-data" / "Tandem"
        assert paths.cache_dir() == tmp_path / "xdg-cache" / "Tandem"
    else:
        assert paths.config_dir().name == "Tandem"


def test_icons_exist() -> None:
    for kind in ("png", "svg", "ico", "icns"):
        assert paths.icon_path(kind).is_file(), kind
    with pytest.raises(ValueError):
        paths.icon_path("gif")
