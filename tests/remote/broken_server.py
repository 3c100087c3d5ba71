"""A deliberately broken OpenAI-compatible server on 127.0.0.1 for the failure tests.

One :class:`BrokenServer` per test module; set :attr:`BrokenServer.mode` before a
request. ``/v1/models`` always answers a valid list (unless the mode breaks it), so the
client gets as far as the chat request. Modes:

* ``ok``: a two-chunk stream that finishes properly;
* ``models-garbage``: ``/v1/models`` answers HTML; ``models-401``: it answers 401;
* ``chat-500``: the chat request gets OpenAI's error JSON with status 500;
* ``garbage``: two good chunks, then a ``data:`` line that is not JSON;
* ``drop-close``: two good chunks, then the connection closes without ``[DONE]`` or a
  finish reason (an HTTP/1.0 style body that ends at close);
* ``drop-chunked``: two good chunks in chunked encoding, then the socket closes in the
  middle of the body (a protocol error for the client);
* ``error-event``: two good chunks, then ``data: {"error": …}``;
* ``slow``: headers, one chunk, then nothing until the test ends;
* ``mute``: reads the request, then sends nothing, not even headers, until released
  (a server reading a long prompt, or queueing the request);
* ``endless-line``: the stream's headers, then one ``data:`` line without end;
* ``endless-error``: status 500 with a body without end (until the client goes);
  ``endless-models``: ``/v1/models`` answers so; ``mute-models``: it answers nothing
  until released, as ``mute`` does;
* ``endless``: one-word chunks without end, whatever ``max_tokens`` asked (until the
  client goes); ``huge``: the two chunks, then one of 1 MB;
* ``json``: a whole non-streamed completion although a stream was asked for;
* ``html``: a 200 answer with an HTML page.

Hostile modes (a server that means harm, or is badly broken):

* ``models-trickle``: ``/v1/models`` promises a body and sends one byte of it every
  0.05 s (until the client goes); ``models-deep``: a model list nested 50,000 deep;
  ``models-escapes``: a model id with terminal escapes (ESC, OSC, BEL);
  ``models-mixed``: a model list with one good entry among malformed ones;
  ``models-no-id``: a model list of entries without a string id;
  ``models-echo-key``: 401 with an error that repeats the ``Authorization`` header
  and carries an escape sequence;
* ``deep-json``: the chat request answered with one JSON completion nested 100,000
  deep; ``deep-error``: status 500 with such an ``error``; ``deep-chunk``: the two
  chunks, then one nested so deep;
* ``bad-figures``: the two chunks, then figures that are not counts (``NaN`` and
  ``Infinity`` draft counts, ``usage.completion_tokens`` of 10**30, ``-5`` prompt
  tokens), then the finish;
* ``empty-deltas``, ``no-choices``, ``comments``, ``blank-lines``: events without text
  (``{"choices":[{"delta":{}}]}``, ``{"choices":[]}``), ``: ping`` comment lines or
  blank lines without end (until the client goes);
* ``raw-text``: ``xxxx…`` without a line end or SSE framing; ``endless-field``: one
  ``event:`` line without end;
* ``proxy-502``: status 502 with the HTML page a proxy (nginx) sends when the server
  behind it is down;
* ``escapes``: one chunk of text with NUL, ESC, CSI and OSC sequences, then the finish;
* ``replay``: what a real engine answered, from the folder :attr:`BrokenServer.replay`
  (``models.json``, ``chat_stream.sse``, ``chat.json`` of ``tests/remote/data``, and
  llama-server's ``/props`` and ``/slots`` where the folder has them).

The last request's ``Authorization`` header is kept in :attr:`BrokenServer.last_auth`,
every request's path in :attr:`BrokenServer.paths`.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CHUNKS = ("Hello", ", world")
#: the model id of the ``models-escapes`` mode
ESCAPED_ID = "m\x1b]0;PWNED\x07\x1b[2J"
#: the text of the ``escapes`` mode
ESCAPED_TEXT = "a\x00b\x1b[2J\x1b]0;PWN\x07\x9bc"
#: lines (or events) the endless modes send at most
_ENDLESS_LINES = 10_000_000


def _chunk(text: str | None = None, finish: str | None = None) -> bytes:
    delta = {"content": text} if text is not None else {}
    body = {"object": "chat.completion.chunk", "model": "broken",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class _Handler(BaseHTTPRequestHandler):
    server: BrokenServer  # type: ignore[assignment]
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        mode = self.server.mode
        self.server.last_auth = self.headers.get("Authorization")
        self.server.paths.append(self.path)
        replayed = {"/props": "props.json", "/slots": "slots.json"}.get(self.path)
        if mode == "replay" and replayed and self.server.replay is not None and (
                self.server.replay / replayed).is_file():  # llama-server's, as recorded
            self._send(200, (self.server.replay / replayed).read_bytes(), "application/json")
        elif self.path != "/v1/models":
            self._send(404, b'{"error": {"message": "no such route"}}', "application/json")
        elif mode == "replay":
            assert self.server.replay is not None
            self._send(200, (self.server.replay / "models.json").read_bytes(),
                       "application/json")
        elif mode in _HOSTILE_MODELS:
            _HOSTILE_MODELS[mode](self)
        elif mode == "models-garbage":
            self._send(200, b"<html>hello</html>", "text/html")
        elif mode == "endless-models":
            self._endless_body(200)
        elif mode == "mute-models":
            self.server.release.wait(60)
            self.server.mute_ended = True
            self.close_connection = True
        elif mode == "models-401":
            self._send(401, b'{"error": {"message": "Invalid API Key"}}', "application/json")
        else:
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": "broken", "object": "model", "owned_by": "someone"}]}).encode(),
                "application/json")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        mode = self.server.mode
        self.server.last_auth = self.headers.get("Authorization")
        self.server.paths.append(self.path)
        self.server.last_body = body
        if mode in _HOSTILE_CHAT:
            _HOSTILE_CHAT[mode](self)
        elif mode == "replay":
            self._replay(bool(body.get("stream")))
        elif mode == "mute":
            self.server.release.wait(60)
            self.server.mute_ended = True
            self.close_connection = True
        elif mode == "endless-error":
            self._endless_body(500)
        elif mode == "chat-500":
            self._send(500, b'{"error": {"message": "out of memory", "type": "server_error"}}',
                       "application/json")
        elif mode == "json":
            body = {"object": "chat.completion", "model": "broken", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "whole"},
                 "finish_reason": "stop"}], "usage": {"completion_tokens": 1}}
            self._send(200, json.dumps(body).encode(), "application/json")
        elif mode == "html":
            self._send(200, b"<html>proxy login</html>", "text/html")
        elif mode == "drop-chunked":
            self._stream_chunked()
        else:
            self._stream(mode)

    def _endless_body(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self._write_without_end(b'{"error": {"message": "')

    def _write_without_end(self, head: bytes) -> None:
        """``head``, then kilobytes of text without a line end until the client goes
        (100 MB at most)."""
        try:
            self.wfile.write(head)
            for _ in range(100_000):
                self.wfile.write(b"x" * 1024)
        except OSError:  # the client closed the connection
            pass

    def _stream(self, mode: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if mode == "endless-line":
            self._write_without_end(b'data: {"choices": [{"delta": {"content": "')
            return
        for text in CHUNKS:
            self.wfile.write(_chunk(text))
        self.wfile.flush()
        if mode == "ok":
            self.wfile.write(_chunk(finish="stop") + b"data: [DONE]\n\n")
        elif mode == "garbage":
            self.wfile.write(b"data: <<<not json>>>\n\n")
        elif mode == "error-event":
            self.wfile.write(b'data: {"error": {"message": "slot crashed"}}\n\n')
        elif mode == "slow":
            self.wfile.flush()
            self.server.release.wait(60)
            self.server.slow_ended = True
        elif mode == "huge":
            self.wfile.write(_chunk("x" * 1_000_000) + _chunk(finish="stop"))
        elif mode == "endless":
            try:
                for _ in range(1_000_000):
                    self.wfile.write(_chunk(" word"))
                    self.server.endless_sent += 1
            except OSError:  # the client closed the connection
                pass
        # drop-close: nothing more; the connection closes

    def _replay(self, stream: bool) -> None:
        folder = self.server.replay
        assert folder is not None, "set BrokenServer.replay for the replay mode"
        if stream:
            self._start_stream()
            self.wfile.write((folder / "chat_stream.sse").read_bytes())
        else:
            self._send(200, (folder / "chat.json").read_bytes(), "application/json")

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _repeat(self, piece: bytes) -> None:
        """``piece`` again and again until the client goes (:data:`_ENDLESS_LINES` times
        at most)."""
        try:
            for _ in range(_ENDLESS_LINES):
                self.wfile.write(piece)
        except OSError:  # the client closed the connection
            pass

    def _stream_chunked(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for text in CHUNKS:
            data = _chunk(text)
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.write(b"400\r\npartial")  # promises 1024 bytes, sends 7, then closes
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True


def _models_trickle(h: _Handler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", "100000")
    h.end_headers()
    h.close_connection = True
    try:
        for _ in range(100_000):
            h.wfile.write(b" ")
            h.wfile.flush()
            time.sleep(0.05)
    except OSError:
        pass


def _models_deep(h: _Handler) -> None:
    h._send(200, b'{"data":' + b"[" * 50_000 + b"]" * 50_000 + b"}", "application/json")


def _models_escapes(h: _Handler) -> None:
    h._send(200, json.dumps({"object": "list", "data": [
        {"id": ESCAPED_ID, "object": "model", "owned_by": "x"}]}).encode(), "application/json")


def _models_echo_key(h: _Handler) -> None:
    message = f"Invalid API key: {h.headers.get('Authorization')} \x1b[31mRED"
    h._send(401, json.dumps({"error": {"message": message}}).encode(), "application/json")


def _models_mixed(h: _Handler) -> None:
    h._send(200, json.dumps({"object": "list", "data": [
        {"id": 5}, "a string", {"id": "good", "owned_by": "x"}, None]}).encode(),
        "application/json")


def _models_no_id(h: _Handler) -> None:
    h._send(200, json.dumps({"object": "list", "data": [{"id": 5}, {"name": "m"}]}).encode(),
            "application/json")


_HOSTILE_MODELS = {"models-trickle": _models_trickle, "models-deep": _models_deep,
                   "models-escapes": _models_escapes, "models-echo-key": _models_echo_key,
                   "models-mixed": _models_mixed, "models-no-id": _models_no_id}


def _deep_json(h: _Handler) -> None:
    h._send(200, b'{"choices":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "application/json")


def _deep_error(h: _Handler) -> None:
    h._send(500, b'{"error":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "application/json")


_NGINX_502 = (b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
              b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.24.0"
              b"</center>\r\n</body>\r\n</html>\r\n")


def _proxy_502(h: _Handler) -> None:
    h._send(502, _NGINX_502, "text/html")


def _deep_chunk(h: _Handler) -> None:
    h._start_stream()
    for text in CHUNKS:
        h.wfile.write(_chunk(text))
    h.wfile.write(b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n")


def _bad_figures(h: _Handler) -> None:
    h._start_stream()
    for text in CHUNKS:
        h.wfile.write(_chunk(text))
    h.wfile.write(b'data: {"choices": [], "usage": {"completion_tokens": 1' + b"0" * 30
                  + b', "prompt_tokens": -5}, "timings": {"draft_n": NaN, '
                  b'"draft_n_accepted": Infinity, "predicted_n": -3, '
                  b'"predicted_per_second": 1e999}}\n\n')
    h.wfile.write(_chunk(finish="stop") + b"data: [DONE]\n\n")


def _endless(piece: bytes) -> Any:
    def send(h: _Handler) -> None:
        h._start_stream()
        h._repeat(piece)
    return send


def _escapes(h: _Handler) -> None:
    h._start_stream()
    h.wfile.write(_chunk(ESCAPED_TEXT) + _chunk(finish="stop") + b"data: [DONE]\n\n")


_HOSTILE_CHAT = {
    "deep-json": _deep_json, "deep-error": _deep_error, "deep-chunk": _deep_chunk,
    "proxy-502": _proxy_502,
    "bad-figures": _bad_figures, "escapes": _escapes,
    "empty-deltas": _endless(b'data: {"choices": [{"delta": {}}]}\n\n'),
    "no-choices": _endless(b'data: {"choices": []}\n\n'),
    "comments": _endless(b": ping\n" * 100),
    "blank-lines": _endless(b"\n" * 1000),
    "raw-text": _endless(b"x" * 1024),
}


def _endless_field(h: _Handler) -> None:
    h._start_stream()
    h.wfile.write(b"event: ")
    h._repeat(b"x" * 1024)


_HOSTILE_CHAT["endless-field"] = _endless_field


class BrokenServer(ThreadingHTTPServer):
    """The broken server; ``base_url`` is where it listens; :meth:`stop` ends it."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = "ok"
        self.endless_sent = 0
        self.slow_ended = False  # a "slow" answer stopped waiting (released or 60 s)
        self.mute_ended = False  # likewise a "mute" one
        self.release = threading.Event()
        #: the folder the ``replay`` mode answers from
        self.replay: Path | None = None
        #: the ``Authorization`` header of the last request (None: none)
        self.last_auth: str | None = None
        #: the path of every request, in order
        self.paths: list[str] = []
        #: the JSON body of the last POST (None: none yet)
        self.last_body: Any = None
        self.base_url = f"http://127.0.0.1:{self.server_address[1]}"
        self._thread = threading.Thread(target=self.serve_forever, name="broken-server",
                                        daemon=True)
        self._thread.start()

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up mid-answer is what these tests do; anything else prints."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()
        self._thread.join(10)
