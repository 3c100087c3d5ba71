"""UI test fixtures: offscreen Qt, a guard against leaked QThreads, and a window with the
real Gemma 3 270M loaded (small context, short greedy replies, so tests stay fast)."""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QThread

from app.options import SamplingParams, SpecMode, SpeculationConfig
from app.store.settings import LoadedSettings, Settings, save_settings
from app.ui.qt_compat import apply_qt_workarounds

# PySide6 6.12.0 on Python 3.11 drops a reference to None in every void call (see
# app/ui/qt_compat.py); pytest-qt's own waiting makes thousands of such calls.
apply_qt_workarounds()

LOAD_TIMEOUT_MS = 120_000
REPLY_TIMEOUT_MS = 120_000


def running_threads(started: list[weakref.ref[QThread]]) -> list[QThread]:
    """The QThreads among ``started`` that are still running."""
    alive = []
    for ref in started:
        thread = ref()
        try:
            if thread is not None and thread.isRunning():
                alive.append(thread)
        except RuntimeError:  # the C++ object is gone: it is not running
            pass
    return alive


@pytest.fixture(autouse=True)
def no_dangling_qthreads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[weakref.ref[QThread]]]:
    """Fail any test that leaves a QThread running (napari's habit)."""
    started: list[weakref.ref[QThread]] = []
    original = QThread.start

    def start(self: QThread, *args: object, **kwargs: object) -> None:
        started.append(weakref.ref(self))
        original(self, *args, **kwargs)

    monkeypatch.setattr(QThread, "start", start)
    yield started
    alive = running_threads(started)
    if alive:
        for t in alive:  # do not let one leak poison the following tests
            t.quit()
            t.wait(5000)
        pytest.fail(f"test left {len(alive)} QThread(s) running: "
                    + ", ".join(t.objectName() or repr(t) for t in alive))


@pytest.fixture
def ui_settings(gemma_path: Path) -> Settings:
    """Settings for fast UI tests: Gemma 3 270M, n_ctx 512, 24 greedy tokens, prompt lookup."""
    s = Settings()
    s.model.target_path = gemma_path
    s.model.n_ctx = 512
    s.sampling = SamplingParams(temperature=0.0, max_tokens=24)
    # Always draft up to k: on a busy 2-core machine the adaptive policy may rightly
    # decide that drafting does not pay, and these tests need drafts to look at.
    s.speculation = SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP, draft_max=4, adaptive=False)
    save_settings(s)
    return s


def loaded_window(qtbot, settings: Settings):  # type: ignore[no-untyped-def]
    """A shown main window on ``settings`` with its target loaded, for a fixture to yield
    and then close (which joins the service)."""
    from app.ui.main_window import MainWindow

    w = MainWindow(LoadedSettings(settings))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.controller.model_info is not None
                    or w.message_bar.current is not None, timeout=LOAD_TIMEOUT_MS)
    assert w.controller.model_info is not None, w.message_bar.current
    return w


@pytest.fixture
def window(qtbot, ui_settings: Settings):  # type: ignore[no-untyped-def]
    """A shown main window with the model loaded; closed (service joined) afterwards."""
    w = loaded_window(qtbot, ui_settings)
    yield w
    w.close()


def wait_reply(qtbot, w) -> None:  # type: ignore[no-untyped-def]
    """Wait until the window's reply (if any) has finished."""
    qtbot.waitUntil(lambda: w.controller.reply is None, timeout=REPLY_TIMEOUT_MS)


#: a prompt the base model continues by repeating, so prompt lookup has drafts to verify
REPEAT_PROMPT = ("Repeat after me: the quick brown fox jumps over the lazy dog. "
                 "the quick brown fox jumps over the lazy dog.")


@contextlib.contextmanager
def api_request_at_gate(qtbot, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A window over the fake engine ("fake-target", replies "alpha beta gamma delta")
    serving the API, one API chat request running and held at the script's gate; yields
    (window, script). The gate opens, the request ends and the window closes after."""
    import threading

    import httpx

    from app.ui.main_window import MainWindow
    from tests.chat.fakes import Script, fake_service
    from tests.synthetic import write_header_only

    target = tmp_path / "fake-target.gguf"
    write_header_only(target)
    script = Script(default="alpha beta gamma delta")
    settings = Settings()
    settings.model.target_path = target
    settings.sampling = SamplingParams(max_tokens=16)
    w = MainWindow(LoadedSettings(settings), service=fake_service(script))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.controller.model_info is not None, timeout=30_000)
    sender = None
    try:
        assert w.api.start(0)
        script.gate = threading.Event()
        base = w.api_panel.url.text()
        sender = threading.Thread(target=lambda: httpx.post(
            base + "/chat/completions", timeout=60,
            json={"model": "fake-target", "messages": [{"role": "user", "content": "x"}]}))
        sender.start()
        assert script.at_gate.wait(30)
        yield w, script
    finally:
        if script.gate is not None:
            script.gate.set()
        if sender is not None:
            sender.join(30)
        w.close()
