"""The window's side of remote engines: the gauge and the reply footer from a server's
recorded figures (llama-server b1-0c1e570, tests/remote/data), the draft-length advice,
the "Connect to a server…" dialog against a local OpenAI-compatible server, and where API
keys go with and without a keyring backend."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail

from app.engine.stats import SpecStats, draft_length_advice
from app.remote.client import Engine, ServerInfo
from app.remote.stream import StreamState
from app.remote.figures import combine, from_response
from app.remote.prometheus import parse_spec_counters
from app.remote.session import remote_stats
from app.store.credentials import ApiKeyStore
from app.ui.chat.chat_view import reply_footer
from app.ui.connect_dialog import ConnectDialog
from app.ui.gauge.gauge_panel import SpeculationGaugeWidget
from tests.remote.broken_server import BrokenServer

LLAMA = Path(__file__).resolve().parents[1] / "remote" / "data" / "llama-server-b1-0c1e570"
INFO = ServerInfo(base_url="http://127.0.0.1:8080", engine=Engine.LLAMA_SERVER,
                  version="b1-0c1e570", models=(), metrics_prefix="llamacpp",
                  speculation_method="ngram-simple", draft_max=48)


def recorded_stats() -> SpecStats:
    """The statistics Tandem keeps for the recorded llama-server reply."""
    state = StreamState(model="m")
    list(state.read_events(iter((LLAMA / "chat_stream.sse").read_text().splitlines()), 0.0,
                           None, "http://recorded"))
    before = parse_spec_counters((LLAMA / "metrics_before.txt").read_text())
    after = parse_spec_counters((LLAMA / "metrics_after_stream.txt").read_text())
    assert before is not None and after is not None
    result = state.result(0.0, combine(from_response(state.final_fields), after.minus(before)))
    return remote_stats(INFO, "m", result)


def test_the_gauge_shows_the_servers_figures(qtbot) -> None:  # type: ignore[no-untyped-def]
    stats = recorded_stats()
    fig = stats.extra["remote"]["figures"]
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.begin_reply(None, 0, remote={"engine": "llama-server", "version": "b1-0c1e570",
                                   "method": "ngram-simple", "draft_max": 48})
    g.refresh()
    assert "live" in g.mode_label.text() and "(when the reply ends)" in g.value_text("alpha")
    g.end_reply(stats)
    assert g.mode_label.text().startswith("llama-server b1-0c1e570 · ngram-simple · k = 48")
    assert g.value_text("alpha") == (f"{fig['acceptance_rate'] * 100:.0f}%  "
                                     f"({fig['accepted']}/{fig['draft_tokens']})")
    # the gauge's τ over every pass (60 tokens, 12 of them accepted drafts: 48 passes),
    # then the server's per drafting round
    assert stats.emitted == 60 and fig["accepted"] == 12 and fig["drafts"] == 2
    assert g.value_text("tau") == "1.25 tok/round (7.00 per drafting round)"
    assert "servers do not report" in g.value_text("cost")
    rates = g.bars.rates
    assert rates and rates[0] == pytest.approx(fig["accepted_per_pos"][0] / fig["drafts"])
    # the positions up to the last accepted one (8), and the 9th where acceptance stopped
    assert rates[7] == pytest.approx(0.5) and rates[8] == 0.0 and len(rates) == 9
    assert "positions 10–48: none accepted" in g.bars.toolTip()
    footer = reply_footer(stats.to_dict(), "length")
    assert "llama-server · ngram-simple" in footer and f"α {fig['acceptance_rate'] * 100:.0f}%" in footer
    assert "τ 1.25" in footer  # the gauge's τ; the server's alone is "per drafting round"
    # one rate for the reply: the footer's is the gauge's
    assert f"{g.tps_label.text()} tok/s" in footer and stats.decode_tps != float(g.tps_label.text())


def test_a_server_that_reports_nothing_says_so(qtbot) -> None:  # type: ignore[no-untyped-def]
    stats = recorded_stats()
    remote = dict(stats.extra["remote"], figures=None, method=None, draft_max=None)
    plain = dataclasses.replace(stats, proposed=0, verified=0, accepted=0, accepted_at=(),
                                verified_at=(), extra={"remote": remote})
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    g.end_reply(plain)
    assert g.value_text("alpha") == "— (the server reports nothing)"
    assert g.value_text("tau") == "— (the server reports nothing)"
    assert "method unknown" in g.mode_label.text()
    assert "no speculation figures from the server" in reply_footer(plain.to_dict(), "stop")
    wide = dict(stats.extra["remote"], figures=dict(stats.extra["remote"]["figures"],
                                                     scope="server-wide"))
    g.end_reply(dataclasses.replace(stats, extra={"remote": wide}))
    assert "server-wide" in g.value_text("alpha")
    assert g.value_text("tau") == "7.00 per drafting round · server-wide"


def test_draft_length_advice_for_local_and_remote(qtbot) -> None:  # type: ignore[no-untyped-def]
    assert draft_length_advice(1.4, 4, 20) == "other-drafter-or-smaller-k"
    assert draft_length_advice(4.6, 4, 20) == "larger-k"
    assert draft_length_advice(3.0, 4, 20) is None
    assert draft_length_advice(1.4, 4, 3) is None  # too few rounds to call it persistent
    assert draft_length_advice(1.9, 1, 20) == "larger-k"  # k = 1 nearly always accepted
    g = SpeculationGaugeWidget()
    qtbot.addWidget(g)
    local = SpecStats(mode="prompt-lookup", draft_max=8, emitted=60, rounds=50,
                      draft_rounds=40, verified=160, proposed=160, accepted=10,
                      decode_time=1.0)
    g.end_reply(local)
    assert "try another drafter or a smaller k" in g.note_label.text()


@pytest.fixture
def broken() -> Iterator[BrokenServer]:
    server = BrokenServer()
    yield server
    server.stop()


class MemoryKeyring(KeyringBackend):
    """A keyring backend that keeps passwords in a dict (the library's plugin interface),
    so the test never touches the developer's real keyring."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.store: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.store.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.store[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.store.pop((service, username), None)


@pytest.fixture
def memory_keyring() -> Iterator[MemoryKeyring]:
    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)


@pytest.fixture
def no_keyring() -> Iterator[None]:
    previous = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    yield
    keyring.set_keyring(previous)


def test_keys_go_to_the_keyring_or_stay_for_the_session(memory_keyring: MemoryKeyring) -> None:
    store = ApiKeyStore()
    assert store.persistent and "system keyring" in store.backend_note
    assert store.save("http://h:1", "k1") is True
    assert ApiKeyStore().load("http://h:1") == "k1"  # a new session reads the keyring
    store.delete("http://h:1")
    assert ApiKeyStore().load("http://h:1") is None and memory_keyring.store == {}


def test_without_a_keyring_the_key_is_for_this_session_only(no_keyring: None) -> None:
    store = ApiKeyStore()
    assert not store.persistent and "this session only" in store.backend_note
    assert store.save("http://h:1", "k1") is False
    assert store.load("http://h:1") == "k1"
    assert ApiKeyStore().load("http://h:1") is None


def test_the_connect_dialog_lists_the_models(qtbot, broken: BrokenServer,  # type: ignore[no-untyped-def]
                                             no_keyring: None) -> None:
    keys = ApiKeyStore()
    dialog = ConnectDialog(keys, broken.base_url, "broken")
    qtbot.addWidget(dialog)
    assert "this session only" in dialog.key_note.text()
    assert dialog.remember_box.text() == "Remember the key until Tandem closes"
    dialog.key_edit.setText("secret")
    dialog.list_models()
    qtbot.waitUntil(lambda: dialog.model_combo.count() == 1, timeout=30_000)
    assert dialog.buttons.button(dialog.buttons.StandardButton.Ok).isEnabled()
    client, model = dialog.connection()
    assert (client.base_url, model) == (broken.base_url, "broken")
    assert keys.load(broken.base_url) == "secret"
    client.close()
    broken.mode = "models-401"
    dialog.list_models()
    qtbot.waitUntil(lambda: "Invalid API Key" in dialog.status_label.text(), timeout=30_000)
    assert dialog.model_combo.count() == 0
    assert not dialog.buttons.button(dialog.buttons.StandardButton.Ok).isEnabled()
    dialog.reject()


def test_the_connect_dialog_connects_only_to_the_address_it_listed(  # type: ignore[no-untyped-def]
        qtbot, broken: BrokenServer, no_keyring: None) -> None:
    """Models listed, then the address edited: the list goes (it was another server's),
    Connect is off and Enter lists again; after listing, the focus is on Connect (Enter
    connects); a key a header cannot carry is said in the dialog, which stays open; the
    focus the user moved on to stays where it is when the list arrives."""
    from PySide6.QtCore import Qt

    dialog = ConnectDialog(ApiKeyStore(), broken.base_url, "broken")
    qtbot.addWidget(dialog)
    dialog.show()
    connect = dialog.buttons.button(dialog.buttons.StandardButton.Ok)
    assert dialog.list_button.isDefault() and not connect.isEnabled()
    qtbot.keyClick(dialog.url_edit, Qt.Key.Key_Return)  # Enter lists
    qtbot.waitUntil(lambda: dialog.model_combo.count() == 1, timeout=30_000)
    assert connect.isEnabled() and connect.isDefault()
    assert dialog.url_edit.hasFocus()  # where the user is: Enter again connects
    dialog.key_edit.setText("clé")  # not a character an HTTP header can carry
    connect.click()
    assert dialog.isVisible() and "API key has a character" in dialog.status_label.text()
    dialog.key_edit.setText("")
    dialog.url_edit.setText("http://127.0.0.1:notaport")
    assert dialog.model_combo.count() == 0 and not connect.isEnabled()
    assert dialog.status_label.text().startswith("Another address")
    dialog.accept()  # nothing listed: nothing to connect to
    assert dialog.isVisible()
    dialog.url_edit.setText(broken.base_url)
    dialog.list_models()
    dialog.key_edit.setFocus()  # typing the key while the list is asked for
    qtbot.waitUntil(lambda: dialog.model_combo.count() == 1, timeout=30_000)
    assert dialog.key_edit.hasFocus()
    dialog.url_edit.setText(broken.base_url + "/")  # another address: list again
    dialog.list_button.setFocus()
    qtbot.keyClick(dialog.list_button, Qt.Key.Key_Space)  # its focus falls to a button
    qtbot.waitUntil(lambda: dialog.model_combo.count() == 1, timeout=30_000)
    assert connect.hasFocus()  # on to what comes next
    dialog.reject()


def test_connect_to_a_server_sits_beside_open_gguf(qtbot) -> None:  # type: ignore[no-untyped-def]
    from app.ui.model_bar import ModelBarWidget

    bar = ModelBarWidget()
    qtbot.addWidget(bar)
    actions = [a.text() for a in bar.open_button.menu().actions()]
    assert actions == ["Open GGUF…", "Open recent", "Connect to a server…"]
    with qtbot.waitSignal(bar.connect_server_clicked, timeout=5000):
        bar.connect_action.trigger()
    with qtbot.waitSignal(bar.open_target_clicked, timeout=5000):
        bar.open_button.click()


def test_server_disconnect_goes_back_to_the_local_model(  # type: ignore[no-untyped-def]
        qtbot, window, broken: BrokenServer) -> None:
    """Server → Disconnect is enabled only while a server is in use, and loads the local
    model again."""
    from app.remote import RemoteClient

    local = window.controller.model_info.target_path
    disconnect = window.window_actions.disconnect
    assert disconnect is not None and not disconnect.isEnabled()
    window.controller.connect_server(RemoteClient(broken.base_url))
    qtbot.waitUntil(lambda: window.controller.remote is not None, timeout=30_000)
    assert disconnect.isEnabled()
    disconnect.trigger()
    qtbot.waitUntil(lambda: window.controller.model_info is not None
                    and window.controller.remote is None, timeout=120_000)
    assert window.controller.model_info.target_path == local
    assert not disconnect.isEnabled()
    assert window.model_bar.target_label.full_text() == local.stem


def test_the_window_notices_a_server_that_stopped_answering_between_replies(  # type: ignore[no-untyped-def]
        qtbot, window, broken: BrokenServer) -> None:
    """While a server is connected and nothing runs, the window asks it for its model
    list now and then (its own connection, with the key): the server's line says "not
    answering" and why when it does not, and goes back when it answers again."""
    from app.remote import RemoteClient

    window.controller.connect_server(RemoteClient(broken.base_url, api_key="sk-watch-1234"))
    qtbot.waitUntil(lambda: window.controller.remote is not None, timeout=30_000)
    line, watch = window.model_bar.layers_label, window.server_watch
    connected = line.full_text()

    def check() -> None:
        assert watch.check()
        qtbot.waitUntil(lambda: not watch.running, timeout=30_000)

    broken.mode = "models-garbage"
    asked = len(broken.paths)
    check()
    assert broken.paths[asked:] == ["/v1/models"] and broken.last_auth == "Bearer sk-watch-1234"
    assert line.property("unreachable") and line.full_text() == connected + " · not answering"
    assert line.toolTip().startswith("The server did not answer a check: ")
    broken.mode = "ok"
    check()
    assert not line.property("unreachable") and line.full_text() == connected
    assert "Replies run on the server" in line.toolTip()
    broken.stop()
    check()
    assert line.property("unreachable") and "Cannot reach" in line.toolTip()
    window.controller.disconnect_server()  # nothing to check then
    qtbot.waitUntil(lambda: window.controller.remote is None, timeout=120_000)
    assert not watch.check()


def test_a_servers_long_names_do_not_widen_the_window(qtbot) -> None:  # type: ignore[no-untyped-def]
    """The bar elides a remote model's name and the server's engine and drafter, so
    connecting never raises the window's minimum width."""
    from app.chat.events import RemoteConnected, remote_model_info
    from app.ui.model_bar import ModelBarWidget

    bar = ModelBarWidget()
    qtbot.addWidget(bar)
    empty = bar.minimumSizeHint().width()
    info = dataclasses.replace(INFO, speculation_method="draft-model " * 8,
                               base_url="http://a-rather-long-host-name.example:8080")
    bar.set_model(remote_model_info(RemoteConnected(info, "/models/" + "x" * 80 + ".gguf"), 0.1))
    assert bar.minimumSizeHint().width() <= empty
    assert bar.layers_label.full_text().startswith("llama-server · draft-model")
    bar.set_remote_drafter("llama-server", "ngram-mod " * 10)
    assert bar.minimumSizeHint().width() <= empty


def test_the_bar_says_when_the_server_stopped_answering(qtbot) -> None:  # type: ignore[no-untyped-def]
    """A reply that could not reach the server (or lost it) marks the server's line
    until a reply gets through; other failures do not."""
    from app.chat.events import RemoteConnected, UserError, remote_model_info
    from app.remote.errors import ServerHTTPError, ServerUnreachableError, StreamDroppedError
    from app.ui.model_bar import ModelBarWidget

    bar = ModelBarWidget()
    qtbot.addWidget(bar)
    bar.set_model(remote_model_info(RemoteConnected(INFO, "m"), 0.1))
    line = bar.layers_label
    bar.reply_failed(UserError("Reply failed", "HTTP 500", cause=ServerHTTPError))
    assert not line.property("unreachable") and line.full_text() == "llama-server · ngram-simple"
    refused = "Cannot reach http://127.0.0.1:8080: Connection refused."
    bar.reply_failed(UserError("Reply failed", refused, cause=ServerUnreachableError))
    assert line.property("unreachable") and line.full_text().endswith("· not answering")
    assert refused in line.toolTip()
    dropped = "The connection broke during the reply."
    bar.reply_failed(UserError("Reply failed", dropped, cause=StreamDroppedError))
    assert dropped in line.toolTip() and line.full_text().count("not answering") == 1
    bar.set_remote_drafter("llama-server", "ngram-simple")  # a reply got through
    assert not line.property("unreachable") and line.full_text() == "llama-server · ngram-simple"
    assert "Replies run on the server" in line.toolTip()
