"""The API under attack, on a real uvicorn server over the fake engine: half-sent
requests, stalled bodies, clients that stop reading, malformed headers, nested JSON, weak
keys. Every attack's input is made here; waits are for events (a closed socket, a job's
end), with generous bounds, never for a fixed time."""

from __future__ import annotations

import asyncio
import json
import queue
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import h11
import httpx
import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle
from uvicorn.server import ServerState

from app.api.app import ApiSettings
from app.api.connections import ConnectionLimits, GuardedH11Protocol, protocol_factory
from app.api.security import ApiKeyError, check_api_key, host_is_loopback
from app.api.server import ApiServer, check_address, client_host
from app.chat.events import JobDone
from app.engine.reply import ReplyRecord
from app.engine.session import SessionConfig
from app.options import SamplingParams
from tests.chat.fakes import Script, fake_service

MODEL = "fake-target"
KEY = "k" * 20
AUTH = {"Authorization": f"Bearer {KEY}"}


class Served:
    """A running :class:`ApiServer` on 127.0.0.1 over the fake engine, with the service's
    events in a queue."""

    def __init__(self, tmp_path: Path, script: Script, limits: ConnectionLimits,
                 api_key: str | None = KEY, queue_limit: int = 1,
                 max_tokens: int | None = None) -> None:
        self.script = script
        self.service = fake_service(script, queue_limit=queue_limit)
        self.events: queue.Queue[object] = queue.Queue()
        self.service.subscribe(self.events.put)
        info = self.service.load(SessionConfig(target_path=tmp_path / f"{MODEL}.gguf")
                                 ).result(timeout=30)
        self.server = ApiServer(self.service, port=0, model=info, limits=limits,
                                settings=ApiSettings(api_key=api_key, **(
                                    {} if max_tokens is None else
                                    {"sampling": SamplingParams(max_tokens=max_tokens)})))
        self.server.start()
        self.url = self.server.base_url

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.server.port), timeout=30)
        return sock

    def job_done(self) -> JobDone:
        while True:
            event = self.events.get(timeout=30)
            if isinstance(event, JobDone) and event.kind in ("reply", "completion"):
                return event

    def close(self) -> None:
        if self.script.gate is not None:
            self.script.gate.set()
        self.server.stop()
        self.service.shutdown()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[type[Served]]:
    made: list[Served] = []

    class Made(Served):
        def __init__(self, script: Script | None = None, limits: ConnectionLimits | None = None,
                     **kwargs: object) -> None:
            super().__init__(tmp_path, script or Script(), limits or ConnectionLimits(),
                             **kwargs)  # type: ignore[arg-type]
            made.append(self)

    yield Made
    for s in made:
        s.close()


def _request(path: str, body: bytes = b"", *, extra: bytes = b"",
             method: bytes = b"POST") -> bytes:
    return (method + b" " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra
            + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
            + body)


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Everything the server sends until it closes: status, headers, body."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def _openai_error(body: bytes) -> dict[str, object]:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (reads what it sent until then)."""
    sock.settimeout(0)
    try:
        while sock.recv(65536):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


# -- the private parts of uvicorn the guard relies on ------------------------------------
def test_uvicorn_still_has_what_the_guard_relies_on() -> None:
    for name in ("connection_made", "data_received", "connection_lost", "pause_writing",
                 "resume_writing", "on_response_complete", "send_400_response"):
        assert callable(getattr(H11Protocol, name)), name
    config = uvicorn.Config(app=lambda *a: None, http=protocol_factory(ConnectionLimits()),
                            h11_max_incomplete_event_size=1234)
    config.load()
    assert config.http_protocol_class(config=config, server_state=ServerState(),
                                      app_state={}).__class__ is GuardedH11Protocol

    async def make() -> GuardedH11Protocol:
        return GuardedH11Protocol(config=config, server_state=ServerState(), app_state={},
                                  limits=ConnectionLimits())

    protocol = asyncio.run(make())
    assert isinstance(protocol.conn, h11.Connection) and protocol.conn.trailing_data == (b"", False)
    assert protocol.config.h11_max_incomplete_event_size == 1234
    for name in ("app", "loop", "connections", "cycle", "transport"):
        assert hasattr(protocol, name), name
    cycle_fields = RequestResponseCycle.__init__.__code__.co_names
    for name in ("disconnected", "message_event", "response_started", "response_complete"):
        assert name in cycle_fields, name


# -- half-sent requests ---------------------------------------------------------------
def test_half_sent_connections_do_not_lock_out_a_keyed_client(serve: type[Served]) -> None:
    s = serve(limits=ConnectionLimits(max_connections=20, head_timeout_s=600))
    held = []
    for _ in range(40):  # twice the limit, each stopping inside its head, without a key
        sock = s.connect()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
        held.append(sock)
    for _ in range(5):  # the keyed client is served each time, on a fresh connection
        r = httpx.get(s.url + "/models", headers=AUTH)
        assert r.status_code == 200, r.text
    # the server kept no more than its limit: the oldest half-sent ones were closed
    open_ = [sock for sock in held if not _closed_by_server(sock)]
    assert len(open_) <= 20
    assert _closed_by_server(held[0])  # oldest first
    for sock in held:
        sock.close()


def test_a_head_that_never_ends_times_out_with_openais_error(serve: type[Served]) -> None:
    s = serve(limits=ConnectionLimits(head_timeout_s=0.3))
    sock = s.connect()
    sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    status, headers, body = _answer(sock)  # returns once the server closes
    assert status == 408 and headers["connection"] == "close"
    assert _openai_error(body)["code"] == "request_timeout"
    # a trickle of bytes does not extend it: one header line after another until closed
    sock = s.connect()
    sock.sendall(b"GET /v1/models HTTP/1.1\r\n")
    sent = 0
    with pytest.raises(OSError):
        while sent < 3000:  # bounded (30 s); the server closes long before
            sock.sendall(b"X-Slow: 1\r\n")
            sent += 1
            threading.Event().wait(0.01)
    # a connection that sends nothing is closed too, silently
    idle = s.connect()
    assert idle.recv(100) == b""


def test_a_stalled_body_times_out_and_an_unkeyed_one_is_refused_at_once(
        serve: type[Served]) -> None:
    s = serve(limits=ConnectionLimits(body_timeout_s=0.3))
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
            b"application/json\r\nContent-Length: 1000\r\n")
    sock = s.connect()
    sock.sendall(head + b"Authorization: Bearer " + KEY.encode() + b"\r\n\r\n" + b'{"model": ')
    status, _, body = _answer(sock)
    assert status == 408 and _openai_error(body)["code"] == "request_timeout"
    # without the key the head is enough to refuse: 401 and closed, the body not awaited
    sock = s.connect()
    sock.sendall(head + b"\r\n" + b'{"model": ')
    status, headers, body = _answer(sock)
    assert status == 401 and headers["connection"] == "close"
    assert _openai_error(body)["code"] == "invalid_api_key"
    assert httpx.get(s.url + "/models", headers=AUTH).status_code == 200


def test_when_every_connection_is_busy_a_new_one_gets_503_with_retry_after(
        serve: type[Served]) -> None:
    s = serve(Script(gate=threading.Event()), ConnectionLimits(max_connections=2),
              api_key=None)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    busy = [s.connect(), s.connect()]
    busy[0].sendall(_request("/v1/chat/completions", body.encode()))
    assert s.script.at_gate.wait(30)  # running, held at the gate
    busy[1].sendall(_request("/v1/chat/completions", body.encode()))  # queued behind it
    while s.service.waiting == 0:
        threading.Event().wait(0.01)
    r = httpx.get(s.url + "/models", headers={"Connection": "close"})
    assert r.status_code == 503 and r.headers["retry-after"]
    assert r.json()["error"]["code"] == "too_many_connections"
    assert s.script.gate is not None
    s.script.gate.set()
    for sock in busy:
        assert _answer(sock)[0] == 200
    assert httpx.get(s.url + "/models").status_code == 200


# -- a client that stops reading ------------------------------------------------------
def test_a_client_that_stops_reading_is_dropped_and_its_reply_cancelled(
        serve: type[Served]) -> None:
    words = 20_000  # 20 MB of reply at 1 ms a word: far more than any buffer holds
    s = serve(Script(default=" ".join(["x" * 1000] * words), word_s=0.001),
              ConnectionLimits(write_timeout_s=0.3), api_key=None)
    sock = s.connect()
    body = json.dumps({"model": MODEL, "stream": True, "max_tokens": words,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    sock.sendall(_request("/v1/chat/completions", body))  # and never read
    done = s.job_done()
    assert isinstance(done.value, ReplyRecord)
    assert done.value.reason == "cancelled"
    assert done.value.stats.emitted < words
    record = s.server.state.log.get(done.job_id)
    assert record is not None and record.disconnected and record.disconnected_at is not None
    # the slot is free: the next request is answered
    s.script.word_s = 0.0
    s.script.replies.append("a short reply")
    r = httpx.post(s.url + "/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == \
        "a short reply"
    sock.close()


def test_a_never_reading_stream_without_max_tokens_ends_at_the_servers_max_tokens(
        serve: type[Served]) -> None:
    # A client's kernel keeps accepting a slow stream it never reads (it grows its
    # receive buffer), so no write blocks: what bounds the slot is the server's Max tokens
    # setting, which a request that names no max_tokens gets (not the whole context).
    s = serve(Script(default=" ".join(["w"] * 5_000), word_s=0.001),
              ConnectionLimits(write_timeout_s=60), api_key=None, max_tokens=40)
    sock = s.connect()
    body = json.dumps({"model": MODEL, "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    sock.sendall(_request("/v1/chat/completions", body))  # and never read
    done = s.job_done()
    assert isinstance(done.value, ReplyRecord)
    assert done.value.reason == "length"
    assert done.value.stats.emitted == 40
    s.script.replies.append("next")
    r = httpx.post(s.url + "/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "next"
    sock.close()


def test_a_disconnect_stops_the_reply_at_its_next_round(serve: type[Served]) -> None:
    # each "round" of the fake engine takes 0.2 s (or ends at once when cancelled): the
    # reply must end at the round under way when the client hung up, not later
    s = serve(Script(default=" ".join(["w"] * 10_000), word_s=0.2), api_key=None)
    for _ in range(3):
        with httpx.stream("POST", s.url + "/completions", json={
                "model": MODEL, "prompt": "hi", "stream": True}) as r:
            words = 0
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    words += len(json.loads(line[6:])["choices"][0]["text"].split())
                    if words >= 3:
                        break
        done = s.job_done()
        assert done.value.reason == "cancelled"
        record = s.server.state.log.get(done.job_id)
        assert record is not None and record.disconnected_at is not None
        # what the client saw, plus at most the one round that was running
        assert done.value.stats.emitted <= words + 1


# -- malformed requests get OpenAI's error JSON ---------------------------------------
@pytest.mark.parametrize(("raw", "status", "code"), [
    (b"GET /v1/models HTTP/1.1\r\nHost: evil.example\r\n" + b"Authorization: Bearer "
     + KEY.encode() + b"\r\n\r\n", 400, "invalid_host"),
    (b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n", 400,
     None),
    (b"NOT HTTP AT ALL\r\n\r\n", 400, "invalid_http_request"),
    # a head over the size limit (h11 checks what it holds of a head not yet complete)
    (b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 20_000, 400,
     "invalid_http_request"),
    (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ten\r\n\r\n", 400,
     "invalid_http_request"),
    (b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer wrong\r\n"
     b"Authorization: Bearer " + KEY.encode() + b"\r\n\r\n", 401, "invalid_api_key"),
    (b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + KEY.encode()
     + b"\r\nAuthorization: Bearer wrong\r\n\r\n", 401, "invalid_api_key"),
    (b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic " + KEY.encode()
     + b"\r\n\r\n", 401, "invalid_api_key"),
])
def test_malformed_headers_get_openais_error_json(serve: type[Served], raw: bytes,
                                                  status: int, code: str | None) -> None:
    s = serve()
    sock = s.connect()
    sock.sendall(raw)
    got, headers, body = _answer(sock)
    assert got == status and headers["content-type"] == "application/json"
    error = _openai_error(body)
    if code is not None:
        assert error["code"] == code


def test_host_header_names() -> None:
    for ok in (b"127.0.0.1", b"127.0.0.1:8080", b"localhost:1", b"LOCALHOST", b"[::1]:80",
               b"[::1]", b"127.1.2.3"):
        assert host_is_loopback(ok), ok
    for bad in (b"evil.example", b"127.0.0.1.evil.example", b"[::1", b"[::1]x",
                b"127.0.0.1:http", b"", b"10.0.0.1", b"\xff"):
        assert not host_is_loopback(bad), bad


# -- deeply nested JSON ---------------------------------------------------------------
def _chat_with_content(content: str) -> bytes:
    return (f'{{"model":"{MODEL}","messages":[{{"role":"user","content":{content}}}]}}'
            ).encode()


@pytest.mark.parametrize("body", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 5000 + b"1" + b"}" * 5000,
    _chat_with_content("[" * 2000 + "]" * 2000),
    _chat_with_content('[{"type":"text","text":"hi","x":' + "[" * 1000 + "]" * 1000 + "}]"),
], ids=["arrays-100000", "objects-5000", "content-2000", "content-part-1000"])
def test_deep_json_is_400_invalid_json(serve: type[Served], body: bytes) -> None:
    s = serve(api_key=None)
    r = httpx.post(s.url + "/chat/completions", content=body,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_json"
    # nesting that fits (150 levels inside a content part) is still read
    fits = _chat_with_content('[{"type":"text","text":"hi","x":' + "[" * 150 + "]" * 150
                              + "}]")
    r = httpx.post(s.url + "/chat/completions", content=fits,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text


# -- the key and the address ----------------------------------------------------------
def test_weak_or_unsendable_keys_are_refused_at_start() -> None:
    with pytest.raises(ApiKeyError, match="at least 16"):
        check_address("0.0.0.0", "x")
    with pytest.raises(ApiKeyError, match="without spaces"):
        check_address("0.0.0.0", " ")
    with pytest.raises(ApiKeyError, match="without spaces"):
        check_address("127.0.0.1", "a key with spaces")
    with pytest.raises(ApiKeyError, match="without spaces"):
        check_api_key("clé-non-ascii-0123456789", network=True)
    check_address("0.0.0.0", "0123456789abcdef")
    check_address("127.0.0.1", "short")  # on loopback the key is an extra, not the guard


def test_the_printed_base_url_names_an_address_a_client_can_use() -> None:
    assert client_host("0.0.0.0") == "127.0.0.1"
    assert client_host("::") == "::1" and client_host("[::]") == "::1"
    assert client_host("192.168.1.5") == "192.168.1.5"
    assert client_host("localhost") == "localhost"
    service = fake_service(Script())
    try:
        server = ApiServer(service, host="0.0.0.0", port=8080,
                           settings=ApiSettings(api_key="0123456789abcdef"))
        assert server.base_url == "http://127.0.0.1:8080/v1"
        assert ApiServer(service, host="::", port=8080, settings=ApiSettings(
            api_key="0123456789abcdef")).base_url == "http://[::1]:8080/v1"
    finally:
        service.shutdown()
