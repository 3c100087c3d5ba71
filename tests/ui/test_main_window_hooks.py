"""The chat window opens the model picker and applies what is chosen there."""

from __future__ import annotations

from pathlib import Path

from app.options import SpecMode
from app.ui.picker import ModelsChosen
from tests.ui.conftest import LOAD_TIMEOUT_MS


def test_models_button_opens_one_picker_and_its_choice_applies(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    w = window
    w.model_bar.models_button.click()
    picker = w.windows.picker
    assert picker is not None and picker.isVisible()
    w.model_bar.models_button.click()
    assert w.windows.picker is picker  # one instance, raised again

    c = w.controller
    target = c.model_info.target_path
    # Same target, drafter switched to off: nothing reloads, the mode applies.
    picker.models_chosen.emit(ModelsChosen(target, None, SpecMode.OFF))
    assert w.settings.speculation.mode is SpecMode.OFF
    assert w.model_bar.speculation().mode is SpecMode.OFF
    assert c.model_info.target_path == target and not c.loading

    picker.models_chosen.emit(ModelsChosen(target, None, SpecMode.PROMPT_LOOKUP))
    assert w.model_bar.speculation().mode is SpecMode.PROMPT_LOOKUP
    qtbot.waitUntil(lambda: not c.loading, timeout=LOAD_TIMEOUT_MS)


def test_race_button_opens_a_race_on_the_loaded_session(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    w = window
    w.model_bar.race_button.click()
    race = w.windows.race
    c = w.controller
    assert race is not None and race.isVisible()
    assert race.service is w.bridge.service and race.model == c.model_info
    race.draft_length_applied.emit(3)
    assert w.settings.speculation.draft_max == 3 and w.model_bar.speculation().draft_max == 3
    race.busy_changed.emit(True)
    assert c.busy and not w.send_button.isEnabled()
    race.busy_changed.emit(False)
    assert not c.busy
    # loading another model first closes the race window (it describes the loaded one)
    c.load_model(c.model_info.target_path)
    assert w.windows.race is None
    qtbot.waitUntil(lambda: c.model_info is not None, timeout=LOAD_TIMEOUT_MS)


def test_a_locked_history_database_never_leaves_the_window_stuck(qtbot, window, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sqlite3

    from tests.ui.conftest import REPEAT_PROMPT, wait_reply

    w = window

    def locked(*_a, **_k):  # type: ignore[no-untyped-def]
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(w.controller.store, "finish_reply", locked)
    assert w.send_message(REPEAT_PROMPT)
    wait_reply(qtbot, w)
    assert w.controller.reply is None and w.send_button.text() == "Send"
    assert w.message_bar.current is not None
    assert w.message_bar.current.title == "History not saved"
    assert w.chat.messages[-1].text.strip()  # the reply is still on screen
    # sending while the database refuses writes keeps the text in the box
    monkeypatch.setattr(w.controller.store, "add_user_message", locked)
    w.input.setPlainText("keep me")
    assert not w.send_message()
    assert w.input.toPlainText() == "keep me"


def test_a_model_opened_in_the_chat_window_is_listed_in_the_library(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    # a model opened with Open GGUF… is listed at once, without adding its folder
    from app.catalog.library import load_library_config

    target = window.controller.model_info.target_path  # loaded from .cache/test-models, not the models folder
    assert target in load_library_config().files
    window.model_bar.models_button.click()
    picker = window.windows.picker
    qtbot.waitUntil(lambda: not picker.library_tab.scanning, timeout=LOAD_TIMEOUT_MS)
    titles = [e.title for e in picker.library_tab.entries]
    assert target.name in titles
    row = picker.library_tab.model_table.topLevelItem(0)
    assert row.text(0) == target.name  # the file name is the title
    picker.close()


def test_the_window_shows_the_last_crash_once(qtbot, tandem_home: Path) -> None:  # type: ignore[no-untyped-def]
    from app.store import logs, paths
    from app.store.settings import LoadedSettings, Settings
    from app.ui.main_window import MainWindow

    (paths.log_dir() / "crash.log").write_text("Fatal Python error: Segmentation fault\n\n")
    logs.remember_last_crash()
    w = MainWindow(LoadedSettings(Settings()), autoload=False)
    qtbot.addWidget(w)
    try:
        err = w.message_bar.current
        assert err is not None and err.title == "Tandem stopped unexpectedly"
        assert "(Segmentation fault). If it happens again" in err.message
        assert logs.pop_previous_crash() is None
    finally:
        w.close()
