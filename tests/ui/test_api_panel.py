"""The window's "Serve API" switch on its own loaded session: an API request drives the
gauge live, labelled as API traffic, and lands in the list of recent requests."""

from __future__ import annotations

import dataclasses
import threading

import httpx
import pytest
from PySide6.QtWidgets import QApplication

from app.chat.events import JobDone
from tests.ui.conftest import REPEAT_PROMPT, api_request_at_gate
from tests.synthetic import write_header_only

pytestmark = pytest.mark.slow


def test_serve_api_gauge_follows_an_api_request(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    panel = window.api_panel
    window.settings.sampling = window.settings.sampling.with_changes(seed=42)  # the chat's
    assert window.api.start(0)  # any free port
    base = panel.url.text()
    assert base.startswith("http://127.0.0.1:") and base.endswith("/v1")
    assert panel.copy_button.isEnabled() and panel.switch.isChecked()
    assert window.api_status_label.text() == f"API on {base}"
    assert "503" not in panel.status.text()  # a model of its own is loaded
    info = window.controller.model_info
    try:  # the line says why requests get 503 while nothing local is loaded
        window.controller.model_info = None
        window.api.handle(JobDone(0, "load", "window", None))  # as after an unload
        qtbot.waitUntil(lambda: "No model is loaded: requests are answered 503"
                        in panel.status.text(), timeout=5000)
        assert window.api_status_label.text() == (
            f"API on {base} (503 until a model is loaded in Tandem)")  # the bar says it too
        window.controller.model_info = dataclasses.replace(info, remote=object())
        window.api._show_serving()
        assert "connected to a server" in panel.status.text()
        assert window.api_status_label.text().endswith("(503 until a model is loaded in Tandem)")
    finally:
        window.controller.model_info = info
        window.api._show_serving()
    assert window.api_status_label.text() == f"API on {base}"
    # beside a long model status, the address still shows whole (the status is elided)
    window.resize(1024, 720)
    qtbot.waitUntil(lambda: window.width() == 1024, timeout=5000)
    window.status_label.set_full_text("a status far longer than the bar " * 6)
    QApplication.processEvents()
    assert window.width() == 1024  # the long status did not widen the window
    label = window.api_status_label
    assert label.width() >= label.fontMetrics().horizontalAdvance(label.text())
    assert window.status_label.text() != window.status_label.full_text()  # elided
    # words, cut at their end: what shows reads from the start
    assert window.status_label.text().startswith("a status far longer")
    assert window.status_label.text().endswith("…")
    window.state_changed()

    model = httpx.get(base + "/models").json()["data"][0]["id"]
    answers: list[httpx.Response] = []
    # the window drafts with prompt lookup, k = 4; the request asks for its own drafter
    assert window.settings.speculation.mode == "prompt-lookup"
    body = {"model": model, "prompt": REPEAT_PROMPT, "max_tokens": 40, "temperature": 0,
            "speculation": {"mode": "suffix", "draft_max": 12}}

    sender = threading.Thread(target=lambda: answers.append(
        httpx.post(base + "/completions", json=body, timeout=120)))
    sender.start()
    live: list[str] = []

    def observe() -> bool:
        if window.gauge.source_label.isVisible():
            live.append(window.gauge.mode_label.text())
        return panel.table.rowCount() == 1

    qtbot.waitUntil(observe, timeout=120_000)
    sender.join(60)
    assert answers and answers[0].status_code == 200, answers
    assert window.gauge.source_label.text() == "API traffic · completion request"
    assert any("live" in text for text in live), live  # followed while it ran
    # the gauge showed the request's own drafter and k, live and at the end (its record)
    assert any(text.startswith("Suffix lookup · k = 12") for text in live), live
    window.gauge.refresh()
    assert window.gauge.mode_label.text().startswith("Suffix lookup · k = 12")
    logged = window.api.server.state.log.records()[0].reply
    assert logged is not None and logged.request.speculation.mode == "suffix"
    assert logged.speculation.draft_max == 12 and logged.stats.mode == "suffix"
    assert window.settings.speculation.mode == "prompt-lookup"  # the window's unchanged
    # a request without a seed gets a random one, not the window conversation's
    assert logged.request.sampling.seed == -1 and window.settings.sampling.seed == 42
    assert "random seed" in panel.status.text()
    usage = answers[0].json()["usage"]
    assert panel.table.item(0, 1).text() == "completion"
    assert panel.table.item(0, 2).text() == str(usage["completion_tokens"])
    assert float(panel.table.item(0, 3).text()) > 0
    # the window's own conversation is untouched by API traffic
    assert window.controller.reply is None and not window.chat.messages

    panel.switch.setChecked(False)  # the user turns it off
    assert window.api.server is None and not panel.copy_button.isEnabled()
    with pytest.raises(httpx.ConnectError):
        httpx.get(base + "/models")


def test_a_port_in_use_is_reported(qtbot) -> None:  # type: ignore[no-untyped-def]
    import socket

    from app.store.settings import LoadedSettings, Settings
    from app.ui.main_window import MainWindow
    from tests.chat.fakes import Script, fake_service

    window = MainWindow(LoadedSettings(Settings()), autoload=False,
                        service=fake_service(Script()))
    qtbot.addWidget(window)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        assert not window.api.start(taken.getsockname()[1])
        assert window.message_bar.current is not None
        assert "Cannot listen" in window.message_bar.current.message
        assert not window.api_panel.switch.isChecked()
        assert window.api.start(0)  # another port: it serves, and the error is gone
        assert window.message_bar.current is None and window.message_bar.isHidden()
        window.api.stop()
    finally:
        taken.close()
        window.close()


def test_a_window_reply_queued_behind_an_api_reply_says_so_and_the_gauge_follows_the_api(  # type: ignore[no-untyped-def]
        qtbot, tmp_path) -> None:
    """Over the fake engine: the API reply runs (held at a gate), the user sends a
    message, which waits in the same queue: its header says what it waits for and the
    gauge keeps following the API reply; once the window's reply runs, the header says
    "writing…" and the gauge is the window's; the API reply lands in the list."""
    with api_request_at_gate(qtbot, tmp_path) as (w, script):
        qtbot.waitUntil(lambda: w.gauge.source_label.isVisible(), timeout=30_000)
        assert w.send_message("hello")  # queued behind the API reply
        reply_widget = w.chat.messages[-1]
        assert reply_widget.stream_status == "● waiting for 1 API request · next in the queue"
        # the gauge still follows the API reply, which goes on streaming
        w.gauge.refresh()
        assert w.gauge.source_label.isVisible()
        assert w.gauge.source_label.text() == "API traffic · chat request"
        api_gate, script.gate = script.gate, threading.Event()  # the next reply waits too
        api_gate.set()  # the API reply ends; the window's runs and holds after one word
        qtbot.waitUntil(lambda: w.api_panel.table.rowCount() == 1 and w.controller.reply
                        is not None and w.controller.reply.text == "alpha", timeout=30_000)
        w.gauge.refresh()
        assert reply_widget.stream_status == "● writing…"
        assert "live" in w.gauge.mode_label.text() and not w.gauge.source_label.isVisible()
        script.gate.set()
        qtbot.waitUntil(lambda: w.controller.reply is None, timeout=30_000)
        assert w.chat.messages[-1].text == "alpha beta gamma delta"
        assert reply_widget.stream_status == ""


def test_a_failed_api_request_does_not_leave_the_gauge_live(qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Over the fake engine: an API reply that fails after its first word (the gauge
    followed it live) ends with the gauge saying it failed, not "live"."""
    from app.errors import TandemError
    from app.store.settings import LoadedSettings, Settings
    from app.ui.main_window import MainWindow
    from tests.chat.fakes import Script, fake_service

    target = tmp_path / "fake-target.gguf"
    write_header_only(target)
    script = Script(default="alpha beta gamma", fail_after=TandemError("the engine broke"))
    settings = Settings()
    settings.model.target_path = target
    w = MainWindow(LoadedSettings(settings), service=fake_service(script))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.controller.model_info is not None, timeout=30_000)
    try:
        assert w.api.start(0)
        r = httpx.post(w.api_panel.url.text() + "/chat/completions", timeout=60,
                       json={"model": "fake-target",
                             "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 400
        qtbot.waitUntil(lambda: w.api_panel.table.rowCount() == 1, timeout=30_000)
        w.gauge.refresh()
        assert not w.gauge.live and "live" not in w.gauge.mode_label.text()
        assert "failed" in w.gauge.mode_label.text()
        assert "the engine broke" in w.gauge.note_label.text()
    finally:
        w.close()


def test_the_api_port_and_switch_are_remembered(qtbot, tandem_home) -> None:  # type: ignore[no-untyped-def]
    """The port, and "Serve API" left on: the next window serves at start (an editor
    pointed at it needs no click); turned off (with the switch or its twin in the Server
    menu), it stays off; a start that fails (the port taken) says why, and the next
    start tries again."""
    import socket

    from app.store.settings import LoadedSettings, Settings, load_settings
    from app.ui.main_window import MainWindow

    def window(settings: Settings) -> MainWindow:
        w = MainWindow(LoadedSettings(settings), autoload=False)
        qtbot.addWidget(w)
        return w

    w = window(Settings())
    assert w.api_panel.port.value() == 8080 and not w.api_panel.switch.isChecked()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    w.api_panel.port.setValue(port)
    w.api_panel.switch.click()
    assert w.api.server is not None
    w.close()
    saved = load_settings().settings
    assert saved.ui.api_port == port and saved.ui.api_serving
    again = window(saved)
    assert again.api_panel.port.value() == port and again.api_panel.switch.isChecked()
    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 503
    server_menu = next(a.menu() for a in again.menuBar().actions() if a.text() == "&Server")
    assert again.api.action in server_menu.actions() and again.api.action.isChecked()
    again.api.action.trigger()  # the Server menu's twin of the switch: off, stays off
    assert again.api.server is None and not again.api_panel.switch.isChecked()
    again.api.action.trigger()
    assert again.api.server is not None and again.api_panel.switch.isChecked()
    again.api_panel.switch.click()
    assert again.api.server is None and not again.api.action.isChecked()
    again.close()
    assert not load_settings().settings.ui.api_serving

    saved.ui.api_serving = True
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        third = window(saved)  # the switch off, the choice kept for the next start
        assert not third.api_panel.switch.isChecked() and saved.ui.api_serving
        error = third.message_bar.current
        assert error is not None and error.title == "Could not serve the API"
        third.close()


def test_stop_on_a_reply_waiting_behind_an_api_request_ends_it_at_once(  # type: ignore[no-untyped-def]
        qtbot, tmp_path) -> None:
    """The window's reply waits for an API request (held at a gate): Stop ends it now,
    nothing of it kept, while the API request goes on."""
    with api_request_at_gate(qtbot, tmp_path) as (w, script):
        assert w.send_message("hello")
        w.controller.stop_reply()
        qtbot.waitUntil(lambda: w.controller.reply is None, timeout=5_000)
        assert not script.gate.is_set()  # the API request still runs
        assert [m.text for m in w.chat.messages] == ["hello"]  # no reply kept
        assert w.send_button.text() == "Send"
        w.gauge.refresh()  # the gauge still follows the API request, which goes on
        assert w.gauge.live and w.gauge.source_label.text() == "API traffic · chat request"


def test_a_request_stopped_before_its_end_says_so_in_the_list(qtbot) -> None:  # type: ignore[no-untyped-def]
    from app.api.traffic import ApiReplyEnded
    from app.engine.reply import ReplyRequest, not_started
    from app.engine.stats import SpecStats
    from app.options import SamplingParams, SpeculationConfig
    from app.ui.api.api_panel import STOPPED_WHY, ApiPanelWidget

    panel = ApiPanelWidget()
    qtbot.addWidget(panel)
    record = not_started(ReplyRequest(SamplingParams(), SpeculationConfig(), 5))
    cut = dataclasses.replace(record, stats=dataclasses.replace(SpecStats(), emitted=62))
    panel.add_request(ApiReplyEnded(1, "completion", 0.0, cut))
    assert panel.table.item(0, 2).text() == "62 stopped"
    assert panel.table.item(0, 2).toolTip() == STOPPED_WHY
    whole = dataclasses.replace(cut, reason="length")
    panel.add_request(ApiReplyEnded(2, "chat", 0.0, whole))
    assert panel.table.item(0, 2).text() == "62" and panel.table.item(0, 2).toolTip() == ""


def test_turning_the_api_off_while_a_request_runs_asks_first(  # type: ignore[no-untyped-def]
        qtbot, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The switch turned off while an API request runs names it and what the client
    gets; Cancel keeps serving (switch and menu still on), "Turn off" stops."""
    from PySide6.QtWidgets import QMessageBox

    asked: list[str] = []
    choices = ["Cancel", "Turn off"]

    def answer(box: QMessageBox) -> int:
        asked.append(box.text())
        choice = choices.pop(0)
        if choice != "Cancel":
            next(b for b in box.buttons() if b.text() == choice).click()
        return 0

    monkeypatch.setattr(QMessageBox, "exec", answer)
    with api_request_at_gate(qtbot, tmp_path) as (w, _script):
        server = w.api.server
        w.api_panel.switch.click()
        assert asked == ["Turning the API off now stops:\n•  1 request to the local API "
                         "(the client gets an error saying the server is shutting down)"]
        assert w.api.server is server and w.api_panel.switch.isChecked()  # not restarted
        assert ("reply", "api") in w.controller.service.jobs()  # the request goes on
        assert w.api.action.isChecked()
        w.api.action.trigger()  # the Server menu's twin asks the same
        assert len(asked) == 2 and w.api.server is None
        assert not w.api_panel.switch.isChecked() and not w.settings.ui.api_serving
