"""Connection guards for the API's HTTP/1.1 server: read and write timeouts, a connection
limit that half-sent requests cannot exhaust, and OpenAI's error JSON where uvicorn would
answer in plain text.

uvicorn (0.55) has no timeout while a request's head or body is being read: its
keep-alive timer runs only between requests and is reset by every byte received, so a
client that sends part of a request and stops holds its connection for ever (uvicorn
has no ``--timeout-request-start`` or ``--timeout-request-complete``; the usual remedy,
as other servers built on uvicorn do it, is a wrapper of the protocol class). Its ``limit_concurrency`` counts those connections
too, so a few hundred of them lock every client out, and it answers with a plain-text
503. :class:`GuardedH11Protocol` is uvicorn's h11 protocol with:

* a **head timeout**: a request's head (request line and headers) must arrive within
  ``head_timeout_s`` of the moment the connection started waiting for it (connected,
  or finished its previous answer); a trickle of bytes does not extend it;
* a **body timeout**: a body must arrive within ``body_timeout_s`` of its head;
* either timeout answers 408 (OpenAI's error JSON, when part of a request arrived) and
  closes the connection; an application still reading the body sees ``http.disconnect``;
* a **connection limit** that sheds half-sent connections first: when a connection
  arrives at ``max_connections``, the connection that has waited longest for a request
  head is closed (it has cost nothing but its socket), so a client that sends its
  request promptly is served however many half-sent connections are held; only when
  every connection is busy with a request does a new one get 503 with ``Retry-After``;
* a **bounded send buffer** and a **write timeout**: each connection's kernel send
  buffer and transport buffer are kept small (``send_buffer_bytes``; a loopback
  socket's own send buffer grows to about 4 MB, a whole reply), so little waits on the
  server's side; once the client's kernel accepts nothing more, a write blocked for
  ``write_timeout_s`` aborts the connection, and the application sees
  ``http.disconnect`` as for a client that went away (a stream then cancels its job).
  The client's receive buffer is its own kernel's: Linux grows it while data arrives
  unread, so a client that never reads is noticed only once that stops;
* malformed HTTP (h11's protocol errors, a head over h11's size limit) answered with
  OpenAI's error JSON instead of plain text.

uvicorn's protocol class is public (``uvicorn.Config(http=…)`` takes one), but the
attributes this subclass reads (``conn``, ``transport``, ``cycle``, ``connections``,
``app``, ``loop``, ``config``, ``send_400_response``, ``on_response_complete``) are not
a documented API: they are used here only, and ``tests/api/test_connections.py`` checks
that the installed uvicorn still has them.
"""

from __future__ import annotations

import asyncio
import functools
import http
import itertools
import json
import logging
import socket
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

#: seconds a client is told to wait when every connection is busy
RETRY_AFTER_S = 5

_phase_order = itertools.count()  # orders phases that began at the same loop time


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a client may take and how many connections are kept.

    Fields:
        head_timeout_s: seconds for a request's head (request line and headers) to
            arrive, from the moment the connection waits for it (10).
        body_timeout_s: seconds for a request body to arrive, from its head (30; a
            4 MiB body at 1 Mbit/s takes 32 s, on loopback milliseconds).
        write_timeout_s: seconds an answer may wait for a client that does not read
            before the connection is dropped (10).
        max_connections: connections kept at once (256); see the module docstring.
        send_buffer_bytes: the kernel send buffer (``SO_SNDBUF``, which Linux doubles)
            and the transport's high-water mark of each connection, bytes (16 KiB).
    """

    head_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    write_timeout_s: float = 10.0
    max_connections: int = 256
    send_buffer_bytes: int = 16 * 1024


def error_bytes(status: int, message: str, *, type: str, code: str,
                headers: dict[str, str] | None = None) -> bytes:
    """A complete HTTP/1.1 response carrying OpenAI's error JSON, closing the connection
    (for answers written below the application, where there is no ASGI ``send``)."""
    body = json.dumps({"error": {"message": message, "type": type, "param": None,
                                 "code": code}}).encode()
    lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
             "content-type: application/json", f"content-length: {len(body)}",
             "connection: close", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


_TIMEOUT = functools.partial(
    error_bytes, 408, "The request did not arrive in time; the connection is closed.",
    type="invalid_request_error", code="request_timeout")
_BUSY = functools.partial(
    error_bytes, 503, "The server is busy: every connection is in use. Retry later.",
    type="unavailable_error", code="too_many_connections",
    headers={"Retry-After": str(RETRY_AFTER_S)})


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the guards of the module docstring. Made by
    :func:`protocol_factory` (uvicorn passes ``config``, ``server_state``,
    ``app_state`` and ``_loop``)."""

    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        #: "head" (waiting for a request head), "body" (reading a body) or None
        self.phase: str | None = None
        #: (loop time, sequence number) the current phase began
        self.phase_since: tuple[float, int] = (0.0, 0)
        self._read_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._over_limit = False
        self.app = self._admit(self.app)

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        size = self.limits.send_buffer_bytes
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
        transport.set_write_buffer_limits(high=size)
        self._update_read_timer()
        if len(self.connections) > self.limits.max_connections:
            self._make_room()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._update_read_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.limits.write_timeout_s,
                                                     self._on_write_timeout)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    # -- uvicorn's hooks ----------------------------------------------------------------
    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._update_read_timer()

    def send_400_response(self, msg: str) -> None:
        """h11 could not parse the request (uvicorn answers plain text here)."""
        self._close_with(error_bytes(
            400, "The request is not valid HTTP/1.1 (a malformed request line or header, or "
            "a request head too large).",
            type="invalid_request_error", code="invalid_http_request"))

    # -- the guards -----------------------------------------------------------------------
    def _admit(self, app: Any) -> Any:
        """The application, behind the connection limit: a request on a connection that
        arrived over the limit (nothing could be shed) gets 503."""

        async def admitted(scope: Any, receive: Any, send: Any) -> None:
            if self._over_limit and len(self.connections) > self.limits.max_connections:
                log.warning("every connection is busy: a request was refused (503)")
                self._close_with(_BUSY())
                return
            await app(scope, receive, send)

        return admitted

    def _update_read_timer(self) -> None:
        """Start the head or body timeout when the connection enters that phase (a
        phase keeps its start time however many bytes arrive), stop it after."""
        state = self.conn.their_state
        phase = "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if phase == self.phase or self.transport.is_closing():
            return
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        self.phase, self.phase_since = phase, (self.loop.time(), next(_phase_order))
        if phase is not None:
            limit = self.limits.head_timeout_s if phase == "head" else self.limits.body_timeout_s
            self._read_timer = self.loop.call_later(limit, self._on_read_timeout)

    def _head_started(self) -> bool:
        """Whether part of a request head has arrived (else the connection is idle)."""
        return bool(self.conn.trailing_data[0])

    def _on_read_timeout(self) -> None:
        self._read_timer = None
        if self.phase == "head" and not self._head_started():
            self._close_with(None)  # idle: nothing was asked, nothing to answer
            return
        log.info("a request did not arrive within its %s timeout", self.phase)
        answered = self.phase == "body" and self.cycle is not None \
            and self.cycle.response_started
        self._close_with(None if answered else _TIMEOUT())

    def _on_write_timeout(self) -> None:
        self._write_timer = None
        log.info("a client read nothing for %.0f s: its connection is dropped",
                 self.limits.write_timeout_s)
        self._end_cycle()
        self.transport.abort()  # close() would wait for the client to read the buffer

    def _make_room(self) -> None:
        """Over the limit: close the connection that has waited longest for a request
        head (this one keeps its place); if every other connection is busy with a
        request, this one is marked to be refused."""
        waiting = [c for c in self.connections
                   if isinstance(c, GuardedH11Protocol) and c is not self
                   and c.phase == "head" and not c.transport.is_closing()]
        if not waiting:
            self._over_limit = True
            return
        oldest = min(waiting, key=lambda c: c.phase_since)
        oldest._close_with(_BUSY() if oldest._head_started() else None)

    def _end_cycle(self) -> None:
        """Tell an application still running on this connection that the client is
        gone (its ``receive`` returns ``http.disconnect``, its sends are dropped)."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()

    def _close_with(self, response: bytes | None) -> None:
        """Write ``response`` (when given), end any running cycle and close."""
        if self.transport.is_closing():
            return
        self._cancel_timers()
        self._end_cycle()
        if response is not None:
            self.transport.write(response)
        self.transport.close()

    def _cancel_timers(self) -> None:
        for timer in (self._read_timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        self._read_timer = self._write_timer = None


def protocol_factory(limits: ConnectionLimits) -> Any:
    """What ``uvicorn.Config(http=…)`` takes: makes a :class:`GuardedH11Protocol` with
    ``limits`` for each connection."""
    return functools.partial(GuardedH11Protocol, limits=limits)
