"""Serving the API with uvicorn: in the foreground (``python -m app serve``) or on a thread
(the window's "Serve API" switch).

:class:`ApiServer` checks the address (127.0.0.1 by default; any other host needs an
API key of at least 16 characters), binds the socket itself (so a port in use is a
:class:`~app.errors.TandemError` at once, not a log line on another thread) and runs
``uvicorn.Server`` on it with the guarded HTTP/1.1 protocol of
:mod:`app.api.connections` (read and write timeouts, a connection limit that half-sent
requests cannot exhaust). Stopping cancels the API's jobs (the window's own go on), lets
uvicorn close its connections and joins the thread.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from app.api import DEFAULT_HOST, DEFAULT_PORT
from app.api.app import ApiSettings, Defaults, close_app, create_app
from app.api.connections import ConnectionLimits, protocol_factory
from app.api.security import check_api_key
from app.chat.events import ModelInfo
from app.chat.service import ChatService
from app.errors import TandemError

log = logging.getLogger(__name__)

#: the longest request head h11 reads (its default), bytes; above it: 400
MAX_HEAD_BYTES = 16 * 1024
#: seconds uvicorn waits for running requests when told to stop, before it cuts them
GRACEFUL_S = 3


class ApiAddressError(TandemError):
    """The API cannot listen where it was asked (a port in use, a host without a key)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_address(host: str, api_key: str | None) -> None:
    """Raises :class:`ApiAddressError` when ``host`` is reachable from other machines and
    no API key is set, and :class:`~app.api.security.ApiKeyError` when the key given
    cannot protect it (see :func:`~app.api.security.check_api_key`)."""
    network = not is_loopback(host)
    if network and not api_key:
        raise ApiAddressError(
            f"Serving on {host} makes the model reachable from other machines; give an API "
            "key (--api-key KEY or TANDEM_API_KEY) or serve on 127.0.0.1.")
    if api_key is not None:
        check_api_key(api_key, network=network)


def client_host(host: str) -> str:
    """The address a client on this machine uses to reach a server listening on
    ``host``: the loopback address of a wildcard (``0.0.0.0`` → ``127.0.0.1``,
    ``::`` → ``::1``), else ``host`` itself."""
    bare = host.strip("[]")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return host
    if address.is_unspecified:
        return "::1" if address.version == 6 else "127.0.0.1"
    return bare


def bind(host: str, port: int, *, listen: bool = True) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (0: any free port), listening unless
    ``listen`` is False (then connections are refused until the server listens: a
    socket taken before a long load, so that nobody connects and waits meanwhile).

    Raises:
        ApiAddressError: the port is in use or the address is not this machine's.
    """
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        if listen:
            sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ApiAddressError(f"Cannot listen on {host}:{port}: {exc.strerror or exc}.") from None
    sock.set_inheritable(True)
    return sock


class ApiServer:
    """The local API over ``service`` on ``host``:``port``.

    Args:
        service: the chat service (not shut down by the server).
        settings: defaults and security; ``loopback_only`` is set from ``host``.
        model: what is loaded now.
        defaults: the sampling and speculation for requests that do not say (the
            window's live settings); see :func:`app.api.app.create_app`.
        limits: timeouts and the connection limit (default
            :class:`~app.api.connections.ConnectionLimits`).
        sock: a socket from :func:`bind` (on ``host``:``port``, listening or not) to serve on,
            bound before a long load so that a port in use is said at once; None: bind
            when serving starts. The server closes it when it stops.

    Raises:
        ApiAddressError: ``host`` is not loopback and no key is given (here), or the
            port is in use (from :meth:`start` / :meth:`serve_forever`, or from
            :func:`bind` before, for ``sock``).
        ApiKeyError: the key cannot protect the server (here).
    """

    def __init__(self, service: ChatService, *, host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT, settings: ApiSettings | None = None,
                 model: ModelInfo | None = None, defaults: Defaults | None = None,
                 limits: ConnectionLimits | None = None,
                 sock: socket.socket | None = None) -> None:
        settings = settings or ApiSettings()
        check_address(host, settings.api_key)
        self.limits = limits or ConnectionLimits()
        self.service = service
        self.host = host
        self.settings = settings.model_copy(update={"loopback_only": is_loopback(host)})
        self.app, self.state = create_app(service, self.settings, model, defaults)
        self._sock: socket.socket | None = None
        self._bound = sock
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._requested_port = port
        self.port = port

    @property
    def base_url(self) -> str:
        """What clients set as their base URL: ``http://127.0.0.1:8080/v1``. A server on
        a wildcard address (``0.0.0.0``, ``::``) gives its loopback address, which a
        client can use (other machines use this machine's own address)."""
        host = client_host(self.host)
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/v1"

    def _prepare(self) -> Any:
        import uvicorn

        given, self._bound = self._bound, None  # a given socket serves once
        if given is not None:
            given.listen(128)
        self._sock = given if given is not None else bind(self.host, self._requested_port)
        self.port = self._sock.getsockname()[1]
        # The connection limit and the timeouts are the guarded protocol's, not
        # uvicorn's limit_concurrency (which half-sent requests exhaust, see
        # app.api.connections).
        config = uvicorn.Config(self.app, log_level="warning", access_log=False,
                                lifespan="off", http=protocol_factory(self.limits),
                                loop="asyncio", h11_max_incomplete_event_size=MAX_HEAD_BYTES,
                                timeout_graceful_shutdown=GRACEFUL_S, server_header=False)
        self._server = uvicorn.Server(config)
        return self._server

    def serve_forever(self, on_ready: Callable[[str], None] | None = None) -> None:
        """Serve on this thread until Ctrl-C / SIGTERM (uvicorn's handlers); ``on_ready``
        is called with :attr:`base_url` once the server accepts connections."""
        server = self._prepare()
        try:
            asyncio.run(self._serve(server, on_ready))
        finally:
            self._finish()

    async def _serve(self, server: Any, on_ready: Callable[[str], None] | None) -> None:
        task = asyncio.ensure_future(server.serve(sockets=[self._sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started and on_ready is not None:
            on_ready(self.base_url)
        # When uvicorn is told to stop (Ctrl-C, SIGTERM, stop()), end the API's replies
        # first: their streams then close with an error within one round, inside
        # uvicorn's graceful-shutdown time, instead of being cut.
        while not task.done():
            if server.should_exit:
                self.service.cancel_all(origin="api")
                break
            await asyncio.sleep(0.1)
        await task

    def start(self) -> None:
        """Serve on a background thread; returns once the server accepts connections."""
        server = self._prepare()
        started = threading.Event()

        def run() -> None:
            try:
                asyncio.run(self._serve(server, lambda _url: started.set()))
            except BaseException:
                log.exception("the API server stopped with an error")
            finally:
                started.set()

        self._thread = threading.Thread(target=run, name="tandem-api", daemon=True)
        self._thread.start()
        started.wait()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the API's jobs, close the connections, join the thread (idempotent)."""
        self.service.cancel_all(origin="api")
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._finish()

    def _finish(self) -> None:
        close_app(self.app)
        for sock in (self._sock, self._bound):  # a given socket never served included
            if sock is not None:
                sock.close()
        self._sock = self._bound = None
