"""Serving the API with uvicorn: in the foreground (``python -m app serve``) or on a thread
(the window's "Serve API" switch).

:class:`ApiServer` checks the address (127.0.0.1 by default; any other host needs an
API key), binds the socket itself (so a port in use is a :class:`~app.errors.TandemError`
at once, not a log line on another thread) and runs ``uvicorn.Server`` on it. Stopping
cancels the API's jobs (the window's own go on), lets uvicorn close its connections
and joins the thread.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from app.api.app import ApiSettings, Defaults, close_app, create_app
from app.chat.events import ModelInfo
from app.chat.service import ChatService
from app.errors import TandemError

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
#: connections uvicorn accepts at once; beyond them it answers 503 (plain text)
MAX_CONNECTIONS = 256


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
    no API key is set."""
    if not is_loopback(host) and not api_key:
        raise ApiAddressError(
            f"Serving on {host} makes the model reachable from other machines; give an API "
            "key (--api-key KEY or TANDEM_API_KEY) or serve on 127.0.0.1.")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: any free port).

    Raises:
        ApiAddressError: the port is in use or the address is not this machine's.
    """
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
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

    Raises:
        ApiAddressError: from :meth:`start` / :meth:`serve_forever`.
    """

    def __init__(self, service: ChatService, *, host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT, settings: ApiSettings | None = None,
                 model: ModelInfo | None = None, defaults: Defaults | None = None) -> None:
        settings = settings or ApiSettings()
        check_address(host, settings.api_key)
        self.service = service
        self.host = host
        self.settings = settings.model_copy(update={"loopback_only": is_loopback(host)})
        self.app, self.state = create_app(service, self.settings, model, defaults)
        self._sock: socket.socket | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._requested_port = port
        self.port = port

    @property
    def base_url(self) -> str:
        """What clients set as their base URL: ``http://127.0.0.1:8080/v1``."""
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") \
            else self.host
        return f"http://{host}:{self.port}/v1"

    def _prepare(self) -> Any:
        import uvicorn

        self._sock = bind(self.host, self._requested_port)
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False,
                                lifespan="off", http="h11", loop="asyncio",
                                limit_concurrency=MAX_CONNECTIONS,
                                timeout_graceful_shutdown=3, server_header=False)
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
        # first: their streams then close with "cancelled" within one round, inside
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
        if self._sock is not None:
            self._sock.close()
            self._sock = None
