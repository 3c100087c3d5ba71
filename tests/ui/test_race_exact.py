"""The race window's "exact verification" option: it reloads the target in the
exact configuration and opens the race again, and says so when the model cannot be
exact. Over the fake engine, so nothing here depends on timing or a real model."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QTimer

from app.store.settings import LoadedSettings, Settings
from app.ui.main_window import MainWindow
from app.ui.side_windows import SideWindows
from tests.chat.fakes import Script, fake_service
from tests.synthetic import write_header_only


def _settled_load_ends(monkeypatch: pytest.MonkeyPatch) -> list[None]:
    """A list that grows by one each time a load has ended and what the window does then
    has run: the race's reopen check is posted with a zero timer, and a zero timer posted
    after it runs after it."""
    settled: list[None] = []
    original = SideWindows.load_ended

    def load_ended(self: SideWindows) -> None:
        original(self)
        QTimer.singleShot(0, lambda: settled.append(None))

    monkeypatch.setattr(SideWindows, "load_ended", load_ended)
    return settled


def _window(qtbot, tmp_path: Path, script: Script) -> MainWindow:  # type: ignore[no-untyped-def]
    target = tmp_path / "fake-target.gguf"
    write_header_only(target)
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
        assert w.status_label.full_text().endswith("· exact verification")
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
        # the box shows what is asked for (as the Sampling tab does); the race says why
        # the loaded model does not honour it
        assert not race.model.exact_verification and race.exact_check.isChecked()
        assert w.sampling_panel.exact.isChecked()
        assert race.message.isVisible()
        assert "not possible" in race.message.text() and "other weights" in race.message.text()
        assert "exact verification" not in w.status_label.full_text()
    finally:
        w.close()


def test_a_failed_reload_does_not_reopen_the_race_later(qtbot, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from app.errors import ModelLoadError

    script = Script()
    w = _window(qtbot, tmp_path, script)
    settled = _settled_load_ends(monkeypatch)
    try:
        w.model_bar.race_button.click()
        first = w.windows.race
        first.set_race_settings(k=3, seed=77, max_tokens=50)
        script.load_error = ModelLoadError("fake-target.gguf is not a GGUF file.")
        first.exact_check.setChecked(True)
        qtbot.waitUntil(lambda: not w.controller.loading, timeout=30_000)
        qtbot.waitUntil(lambda: len(settled) >= 1, timeout=30_000)  # the reopen check ran
        assert w.windows.race is None and w.controller.model_info is None
        assert w.message_bar.current is not None and w.message_bar.current.origin == "load"
        # a later, unrelated load does not pop the race window open
        script.load_error = None
        ended = len(settled)
        w.controller.load_model(w.settings.model.target_path)
        qtbot.waitUntil(lambda: w.controller.model_info is not None, timeout=30_000)
        qtbot.waitUntil(lambda: len(settled) > ended, timeout=30_000)  # its load end ran
        assert w.windows.race is None
    finally:
        w.close()


def test_the_reopened_race_keeps_its_controls(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    w = _window(qtbot, tmp_path, Script())
    try:
        w.model_bar.race_button.click()
        first = w.windows.race
        first.select_prompt("my own prompt")
        first.set_race_settings(k=3, seed=77, max_tokens=50, temperature=0.5, adaptive=False)
        first.exact_check.setChecked(True)
        qtbot.waitUntil(lambda: w.windows.race is not None and w.windows.race is not first,
                        timeout=30_000)
        race = w.windows.race
        assert race.prompt_edit.toPlainText() == "my own prompt"
        assert (race.k_spin.value(), race.seed_spin.value(), race.max_spin.value()) == (3, 77, 50)
        assert race.temp_spin.value() == 0.5 and not race.adaptive_check.isChecked()
    finally:
        w.close()


def test_a_busy_chat_refuses_the_reload(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import threading

    script = Script(default="alpha beta gamma")
    w = _window(qtbot, tmp_path, script)
    try:
        w.model_bar.race_button.click()
        race = w.windows.race
        script.gate = threading.Event()
        assert w.send_message("hello")  # a reply runs (held after its first word)
        qtbot.waitUntil(lambda: w.controller.reply is not None, timeout=30_000)
        race.exact_check.setChecked(True)
        assert not race.exact_check.isChecked()  # put back
        assert race.message.isVisible() and "Busy" in race.message.text()
        assert not w.settings.model.exact_verification and w.windows.race is race
        script.gate.set()
        qtbot.waitUntil(lambda: w.controller.reply is None, timeout=30_000)
    finally:
        if script.gate is not None:
            script.gate.set()
        w.close()
