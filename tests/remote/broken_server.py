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
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHUNKS = ("Hello", ", world")


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
        if self.path != "/v1/models":
            self._send(404, b'{"error": {"message": "no such route"}}', "application/json")
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
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        mode = self.server.mode
        if mode == "mute":
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
