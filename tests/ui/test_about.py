"""Help → About: the versions, the backend and Tandem's folders, with "Open log folder"
and "Copy details"."""

from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication

import app
from app.catalog.library import current_models_dir
from app.engine.llama import build_info
from app.store import paths
from app.ui.about import AboutDialog


def test_about_shows_versions_backend_and_folders(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.ui.main_window import MainWindow

    w = MainWindow(autoload=False)
    qtbot.addWidget(w)
    try:
        assert [a.text() for a in w.menuBar().actions()] == ["&File", "&View", "&Server", "&Help"]
        w.window_actions.about.trigger()
        dialogs = w.findChildren(AboutDialog)
        assert len(dialogs) == 1 and dialogs[0].isVisible()
        about = dialogs[0]
        shown = {label: v.text() for label, v in about.values.items()}
        info = build_info()
        assert list(shown)[:5] == ["Tandem", "llama-cpp-python", "llama.cpp", "PySide6", "Python"]
        assert shown["Tandem"] == app.__version__
        assert shown["llama-cpp-python"] == info.llama_cpp_python == metadata.version("llama-cpp-python")
        assert info.ggml_commit and f"commit {info.ggml_commit}" in shown["llama.cpp"]
        assert shown["PySide6"].startswith(metadata.version("PySide6") + " (Qt ")
        assert shown["Python"].startswith(platform.python_version())
        assert shown["Backend"].startswith(info.backend)
        assert shown["Data"] == str(paths.data_dir())
        assert shown["Models"] == str(current_models_dir())
        assert shown["Logs"] == str(paths.log_dir())

        opened: list[QUrl] = []
        monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
        about.open_logs_button.click()
        assert [Path(u.toLocalFile()) for u in opened] == [paths.log_dir()]

        about.copy_button.click()
        copied = QGuiApplication.clipboard().text()
        assert f"Tandem: {app.__version__}\n" in copied and f"Logs: {paths.log_dir()}\n" in copied
        about.close()
    finally:
        w.close()


def test_open_log_folder_is_off_without_a_log_folder(qtbot) -> None:
    from app.diagnostics import AboutInfo

    about = AboutDialog(AboutInfo((("Tandem", "0"),), "CPU", (("Logs", "cannot be created"),), None))
    qtbot.addWidget(about)
    assert not about.open_logs_button.isEnabled() and about.open_log_folder() is False
