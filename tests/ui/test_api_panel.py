"""The window's "Serve API" switch on its own loaded session: an API request drives the
gauge live, labelled as API traffic, and lands in the list of recent requests."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.ui.conftest import REPEAT_PROMPT

pytestmark = pytest.mark.slow


def test_serve_api_gauge_follows_an_api_request(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    panel = window.api_panel
    assert window.start_api(0)  # any free port
    base = panel.url.text()
    assert base.startswith("http://127.0.0.1:") and base.endswith("/v1")
    assert panel.copy_button.isEnabled() and panel.switch.isChecked()
    assert window.api_status_label.text() == f"API on {base}"

    model = httpx.get(base + "/models").json()["data"][0]["id"]
    answers: list[httpx.Response] = []
    body = {"model": model, "prompt": REPEAT_PROMPT, "max_tokens": 40, "temperature": 0}
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
    usage = answers[0].json()["usage"]
    assert panel.table.item(0, 1).text() == "completion"
    assert panel.table.item(0, 2).text() == str(usage["completion_tokens"])
    assert float(panel.table.item(0, 3).text()) > 0
    # the window's own conversation is untouched by API traffic
    assert window.controller.reply is None and not window.chat.messages

    panel.switch.setChecked(False)  # the user turns it off
    assert window.api_server is None and not panel.copy_button.isEnabled()
    with pytest.raises(httpx.ConnectError):
        httpx.get(base + "/models")


def test_a_port_in_use_is_reported(qtbot, window) -> None:  # type: ignore[no-untyped-def]
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        assert not window.start_api(taken.getsockname()[1])
        assert window.message_bar.current is not None
        assert "Cannot listen" in window.message_bar.current.message
        assert not window.api_panel.switch.isChecked()
    finally:
        taken.close()
