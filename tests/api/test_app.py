"""The API's HTTP behaviour on a real uvicorn server over the fake engine: queue sharing,
disconnect-cancels, security. Fast (no model); the real model and the real openai client
are in test_openai_client.py."""

from __future__ import annotations

import dataclasses
import json
import queue
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from app.api.app import ApiSettings
from app.api.server import ApiAddressError, ApiServer, bind, check_address, is_loopback
from app.chat.events import JobDone, JobFailed
from app.engine.reply import ReplyRecord
from app.engine.session import SessionConfig
from app.options import SpecMode, SpeculationConfig
from app.remote.client import RemoteClient
from tests.chat.fakes import Script, fake_service
from tests.remote.broken_server import BrokenServer
from tests.synthetic import write_header_only

MODEL = "fake-target"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ApiServer, Script, queue.Queue[object]]]:
    script = Script(default="one two three four five six")
    service = fake_service(script, queue_limit=1)
    events: queue.Queue[object] = queue.Queue()
    service.subscribe(events.put)
    info = service.load(SessionConfig(target_path=tmp_path / f"{MODEL}.gguf")).result(timeout=30)
    server = ApiServer(service, port=0, model=info,
                       settings=ApiSettings(speculation=SpeculationConfig(
                           mode=SpecMode.PROMPT_LOOKUP)))
    server.start()
    try:
        yield server, script, events
    finally:
        if script.gate is not None:
            script.gate.set()
        server.stop()
        service.shutdown()


def _chat(**extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


def _job_done(events: queue.Queue[object], origin: str = "api") -> JobDone:
    while True:
        event = events.get(timeout=30)
        if isinstance(event, JobDone) and event.origin == origin and event.kind in (
                "reply", "completion"):
            return event


def test_a_reply_and_its_figures(served: tuple[ApiServer, Script, queue.Queue[object]]) -> None:
    server, script, _ = served
    r = httpx.post(server.base_url + "/chat/completions", json=_chat(
        speculation={"mode": "off"}))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "one two three four five six"
    assert body["usage"]["completion_tokens"] == 6
    assert body["timings"]["predicted_n"] == 6 and body["timings"]["draft_n"] == 0
    assert body["tandem"]["mode"] == "off"
    # the per-request field reached the engine; without it the server's default is used
    assert script.calls[-1][1].mode is SpecMode.OFF
    httpx.post(server.base_url + "/chat/completions", json=_chat())
    assert script.calls[-1][1].mode is SpecMode.PROMPT_LOOKUP


def test_the_windows_replies_and_the_api_share_one_queue(
        served: tuple[ApiServer, Script, queue.Queue[object]]) -> None:
    server, script, events = served
    service = server.service
    script.gate = threading.Event()
    running = service.reply([], server.settings.sampling, SpeculationConfig(), origin="window")
    assert script.at_gate.wait(30)
    waiting = service.reply([], server.settings.sampling, SpeculationConfig(), origin="window")
    r = httpx.post(server.base_url + "/chat/completions", json=_chat())
    assert r.status_code == 429
    assert int(r.headers["retry-after"]) >= 1
    assert r.json()["error"]["code"] == "queue_full"
    script.gate.set()
    assert running.wait(30) and waiting.wait(30)


def test_a_client_that_disconnects_mid_stream_cancels_its_reply(
        served: tuple[ApiServer, Script, queue.Queue[object]]) -> None:
    server, script, events = served
    script.gate = threading.Event()  # the reply waits after its first word, until cancelled
    with httpx.stream("POST", server.base_url + "/chat/completions",
                      json=_chat(stream=True)) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first[6:])["choices"][0]["delta"]["content"] == "one"
    # the connection is closed; the job ends cancelled although the gate never opened
    done = _job_done(events)
    assert isinstance(done.value, ReplyRecord)
    assert done.value.reason == "cancelled"
    assert not script.gate.is_set()
    record = server.state.log.get(done.job_id)
    assert record is not None and record.disconnected


def test_a_client_that_disconnects_from_a_plain_request_cancels_it(
        served: tuple[ApiServer, Script, queue.Queue[object]]) -> None:
    server, script, events = served
    script.gate = threading.Event()
    body = json.dumps(_chat()).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))
    assert script.at_gate.wait(30)  # the reply runs and is held after its first word
    sock.close()  # the client goes away before any answer
    done = _job_done(events)
    assert done.value.reason == "cancelled"
    assert not script.gate.is_set()


@pytest.mark.parametrize("stream", [True, False])
def test_a_reply_the_server_stops_is_an_error_not_a_finished_reply(
        served: tuple[ApiServer, Script, queue.Queue[object]], stream: bool) -> None:
    """Serve API turned off (or the window closing) mid-reply: the openai client gets
    an error naming the shutdown (a stream: after the text already sent), not a reply
    with a finish reason of its own."""
    server, script, _events = served
    script.gate = threading.Event()  # the reply waits after its first word
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    got: list[str] = []
    failure: list[Exception] = []

    def ask() -> None:
        try:
            if stream:
                for chunk in client.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": "hi"}],
                        stream=True):
                    got.append(chunk.choices[0].delta.content or "")
            else:
                client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}])
        except openai.APIError as exc:
            failure.append(exc)

    reader = threading.Thread(target=ask)
    reader.start()
    assert script.at_gate.wait(30)
    server.stop()
    reader.join(30)
    assert not reader.is_alive()
    assert failure, got
    error = failure[0]
    assert "shutting down" in error.message, error.message
    assert isinstance(error.body, dict) and error.body.get("code") == "shutting_down"
    if stream:
        assert "".join(got) == "one"
    else:
        assert isinstance(error, openai.APIStatusError) and error.status_code == 503


def test_only_loopback_without_a_key() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    with pytest.raises(ApiAddressError, match="API key"):
        check_address("0.0.0.0", None)
    check_address("0.0.0.0", "a-secret-of-24-characters")
    sock = bind("127.0.0.1", 0)
    try:
        with pytest.raises(ApiAddressError, match="Cannot listen"):
            bind("127.0.0.1", sock.getsockname()[1])
    finally:
        sock.close()


def test_api_key_cors_and_host(tmp_path: Path) -> None:
    script = Script()
    service = fake_service(script)
    info = service.load(SessionConfig(target_path=tmp_path / f"{MODEL}.gguf")).result(timeout=30)
    server = ApiServer(service, port=0, model=info, settings=ApiSettings(
        api_key="s3cret", cors_origins=("http://editor.local",)))
    server.start()
    try:
        url = server.base_url
        assert httpx.get(url.removesuffix("/v1") + "/health").status_code == 200  # open
        r = httpx.get(url + "/models")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(url + "/models", headers={"Authorization": "Bearer wrong"}
                         ).status_code == 401
        ok = httpx.get(url + "/models", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["data"][0]["id"] == MODEL
        pre = httpx.options(url + "/chat/completions", headers={
            "Origin": "http://editor.local", "Access-Control-Request-Method": "POST"})
        assert pre.headers.get("access-control-allow-origin") == "http://editor.local"
        other = httpx.options(url + "/chat/completions", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in other.headers
        # DNS rebinding: a page on another name that resolves to 127.0.0.1 is refused
        assert httpx.get(url + "/models", headers={"Authorization": "Bearer s3cret",
                                                    "Host": "evil.example"}).status_code == 400
    finally:
        server.stop()
        service.shutdown()


def test_a_refused_cors_preflight_is_openai_error_json(tmp_path: Path) -> None:
    """A refused preflight is OpenAI's error JSON, as every refusal of this API is, and
    says what was refused: the origin (with the option that allows one), or for an
    allowed origin the method."""
    service = fake_service(Script())
    info = service.load(SessionConfig(target_path=tmp_path / f"{MODEL}.gguf")).result(timeout=30)
    server = ApiServer(service, port=0, model=info, settings=ApiSettings(
        cors_origins=("http://editor.local",)))
    server.start()
    try:
        url = server.base_url + "/chat/completions"
        other = httpx.options(url, headers={"Origin": "http://evil.example",
                                            "Access-Control-Request-Method": "POST"})
        assert other.status_code == 400
        assert other.headers["content-type"] == "application/json"
        assert "access-control-allow-origin" not in other.headers
        assert "Origin" in other.headers["vary"]
        error = other.json()["error"]
        assert (error["type"], error["code"]) == ("invalid_request_error", "cors_not_allowed")
        assert "origin" in error["message"] and "http://evil.example" in error["message"]
        assert "--cors-origin" in error["message"]
        method = httpx.options(url, headers={"Origin": "http://editor.local",
                                             "Access-Control-Request-Method": "DELETE"})
        words = method.json()["error"]["message"]
        assert method.status_code == 400 and "'DELETE' is not allowed (GET and POST are)" in words
        assert "--cors-origin" not in words  # the origin was fine
        ok = httpx.options(url, headers={"Origin": "http://editor.local",
                                         "Access-Control-Request-Method": "POST"})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == "http://editor.local"
    finally:
        server.stop()
        service.shutdown()


def test_the_server_serves_on_a_socket_bound_before_it(tmp_path: Path) -> None:
    """``serve`` binds the port before the long load (a port in use is said at once) and
    hands the socket over; the server serves on it and closes it when it stops."""
    service = fake_service(Script())
    info = service.load(SessionConfig(target_path=tmp_path / f"{MODEL}.gguf")).result(timeout=30)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = ApiServer(service, port=0, model=info, sock=sock)
    server.start()
    try:
        assert server.port == port and server.base_url.endswith(f":{port}/v1")
        assert httpx.get(server.base_url.removesuffix("/v1") + "/health").status_code == 200
    finally:
        server.stop()
        service.shutdown()
    assert sock.fileno() == -1  # closed with the server
    bind("127.0.0.1", port).close()  # and the port is free again


def test_no_model_is_503_until_one_loads(tmp_path: Path) -> None:
    service = fake_service(Script())
    server = ApiServer(service, port=0)  # nothing loaded yet
    server.start()
    try:
        health = server.base_url.removesuffix("/v1") + "/health"
        assert httpx.get(health).status_code == 503
        r = httpx.post(server.base_url + "/chat/completions", json=_chat())
        assert r.status_code == 503 and r.headers["retry-after"]
        assert r.json()["error"]["code"] == "model_not_loaded"
        # a load by anyone (here: the window's way) is followed from the service's events;
        # listeners run in order, so once this one has the JobDone the server has it too
        events: queue.Queue[object] = queue.Queue()
        service.subscribe(events.put)
        service.load(SessionConfig(target_path=tmp_path / f"{MODEL}.gguf"))
        while not (isinstance(ev := events.get(timeout=30), JobDone) and ev.kind == "load"):
            pass
        assert httpx.get(health).json()["model"] == MODEL
        assert httpx.post(server.base_url + "/chat/completions", json=_chat()).status_code == 200
    finally:
        server.stop()
        service.shutdown()


def test_the_api_follows_refused_loads_failed_connects_and_a_remote_server(
        served: tuple[ApiServer, Script, queue.Queue[object]], tmp_path: Path) -> None:
    """A load refused before anything was unloaded, and a server that cannot be used,
    leave the loaded model served; once the window's replies run on a remote server the
    API says so (503 without Retry-After: waiting would not help)."""
    server, _, events = served
    service = server.state.service
    health = server.base_url.removesuffix("/v1") + "/health"

    def failed(job_kind: str) -> None:
        while not (isinstance(ev := events.get(timeout=30), JobFailed) and ev.kind == job_kind):
            pass

    service.load(SessionConfig(target_path=tmp_path / "missing.gguf"))
    failed("load")
    service.connect(RemoteClient("http://127.0.0.1:9/v1"))  # nothing listens on port 9
    failed("load")
    assert httpx.get(health).json()["model"] == MODEL
    assert httpx.post(server.base_url + "/chat/completions", json=_chat()).status_code == 200

    broken = BrokenServer()
    try:
        service.connect(RemoteClient(broken.base_url)).result(timeout=30)
        r = httpx.post(server.base_url + "/chat/completions", json=_chat())
        assert r.status_code == 503 and "retry-after" not in r.headers
        assert "remote server" in r.json()["error"]["message"]
        h = httpx.get(health)
        assert h.status_code == 503 and "remote server" in h.json()["status"]
        assert httpx.get(server.base_url + "/models").json()["data"] == []
        service.disconnect().result(timeout=30)
        r = httpx.post(server.base_url + "/chat/completions", json=_chat())
        assert r.status_code == 503 and "remote server" not in r.json()["error"]["message"]
        target = write_header_only(tmp_path / f"{MODEL}.gguf")
        service.load(SessionConfig(target_path=target)).result(timeout=30)
        assert httpx.post(server.base_url + "/chat/completions", json=_chat()).status_code == 200
    finally:
        broken.stop()


def test_a_conversation_longer_than_the_context_follows_the_overflow_policy(
        served: tuple[ApiServer, Script, queue.Queue[object]]) -> None:
    """The server's policy (truncate middle by default) drops earlier messages and says
    so in ``tandem.context``; ``"context_overflow": "stop"`` gets OpenAI's 400."""
    server, script, _ = served
    long = "word " * 1100  # the fake template: a token a word (window: 4096 tokens)
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": "first " + long},
                {"role": "assistant", "content": "answer " + long},
                {"role": "user", "content": "second " + long},
                {"role": "assistant", "content": "answer " + long},
                {"role": "user", "content": "and now?"}]
    r = httpx.post(server.base_url + "/chat/completions",
                   json={"model": MODEL, "messages": messages})
    assert r.status_code == 200, r.text
    context = r.json()["tandem"]["context"]
    assert context["policy"] == "truncate-middle" and context["kept_first"]
    assert (context["dropped_messages"], context["dropped_tokens"]) == (2, 2 * 1102)
    assert [m.content.split()[0] for m in script.calls[-1][0]] == [  # type: ignore[union-attr]
        "be", "first", "answer", "and"]

    r = httpx.post(server.base_url + "/chat/completions",
                   json={"model": MODEL, "messages": messages, "context_overflow": "stop"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    # the API's own way to let Tandem drop them, not the window's
    message = r.json()["error"]["message"]
    assert message.endswith('send "context_overflow": "truncate-middle" or "rolling-window".')
    assert "Sampling" not in message
    r = httpx.post(server.base_url + "/chat/completions",
                   json={"model": MODEL, "messages": messages,
                         "context_overflow": "rolling-window"})
    assert r.json()["tandem"]["context"]["policy"] == "rolling-window"
    assert [m.content.split()[0] for m in script.calls[-1][0]] == [  # type: ignore[union-attr]
        "be", "second", "answer", "and"]
    r = httpx.post(server.base_url + "/chat/completions", json=_chat(context_overflow="sideways"))
    assert r.status_code == 400 and r.json()["error"]["param"] == "context_overflow"
    assert httpx.post(server.base_url + "/chat/completions",
                      json=_chat()).json()["tandem"]["context"] is None


@pytest.mark.parametrize(("mode", "assistant", "named"), [
    (SpecMode.PROMPT_LOOKUP, False, None), (SpecMode.SUFFIX, False, None),
    (SpecMode.OFF, False, None), (SpecMode.DRAFT_MODEL, False, "small-draft"),
    (SpecMode.AUTO, False, "small-draft"),
    (SpecMode("mtp"), False, None),  # the target's own heads draft, not the loaded draft
    (SpecMode("mtp"), True, "small-draft")])  # an MTP assistant drafts for them
def test_the_model_list_names_the_draft_only_where_requests_draft_with_it(
        tmp_path: Path, mode: SpecMode, assistant: bool, named: str | None) -> None:
    service = fake_service(Script())
    info = service.load(SessionConfig(target_path=tmp_path / f"{MODEL}.gguf")).result(timeout=30)
    info = dataclasses.replace(info, draft_name="small-draft", draft_path=tmp_path / "d.gguf",
                               draft_is_assistant=assistant)
    server = ApiServer(service, port=0, model=info,
                       settings=ApiSettings(speculation=SpeculationConfig(mode=mode)))
    server.start()
    try:
        [entry] = httpx.get(f"{server.base_url}/models").json()["data"]
        assert entry["meta"]["draft_model"] == named
        assert entry["meta"]["draft_loaded"] == "small-draft"
        assert entry["meta"]["speculation"]["mode"] == mode.value
    finally:
        server.stop()
        service.shutdown()
