"""The race window's "exact verification" option (issue 8): it reloads the target in the
exact configuration and opens the race again, and says so when the model cannot be
exact. Over the fake engine, so nothing here depends on timing or a real model."""

from __future__ import annotations

from pathlib import Path

from app.store.settings import LoadedSettings, Settings
from app.ui.main_window import MainWindow
from tests.chat.fakes import Script, fake_service


def _window(qtbot, tmp_path: Path, script: Script) -> MainWindow:  # type: ignore[no-untyped-def]
    target = tmp_path / "fake-target.gguf"
    target.write_bytes(b"GGUF")
    settings = Settings()
    settings.model.target_path = target
    w = MainWindow(LoadedSettings(settings), service=fake_service(script))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.controller.model_info is not None, timeout=30_000)
    return w


def test_the_race_option_reloads_exact_and_reopens_the_race(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    w = _window(qtbot, tmp_path, Script())
    try:
        w.model_bar.race_button.click()
        first = w.windows.race
        assert first is not None and not first.exact_check.isChecked()
        assert not w.sampling_panel.exact.isChecked()
        first.exact_check.setChecked(True)
        qtbot.waitUntil(lambda: w.windows.race is not None and w.windows.race is not first,
                        timeout=30_000)
        race = w.windows.race
        assert race.model.exact_verification and race.exact_check.isChecked()
        assert w.settings.model.exact_verification and w.sampling_panel.exact.isChecked()
        assert w.status_label.text().endswith("· exact verification")
        assert not race.message.isVisible()
    finally:
        w.close()


def test_a_model_that_cannot_be_exact_is_said_in_the_race(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    w = _window(qtbot, tmp_path, Script(exact_possible=False))
    try:
        w.model_bar.race_button.click()
        first = w.windows.race
        first.exact_check.setChecked(True)
        qtbot.waitUntil(lambda: w.windows.race is not None and w.windows.race is not first,
                        timeout=30_000)
        race = w.windows.race
        assert not race.model.exact_verification and not race.exact_check.isChecked()
        assert race.message.isVisible()
        assert "not possible" in race.message.text() and "other weights" in race.message.text()
        assert "exact verification" not in w.status_label.text()
    finally:
        w.close()
