"""A client for one OpenAI-compatible server: models, engine recognition, streamed chat.

Built on ``httpx`` (TLS verified by default, an API key sent as ``Authorization: Bearer``
and never logged or shown). :class:`RemoteClient` offers:

* :meth:`~RemoteClient.models`: ``GET /v1/models``;
* :meth:`~RemoteClient.identify`: which engine answers (llama-server, vLLM, SGLang,
  Tandem, Ollama, LM Studio, or another OpenAI-compatible server), from what it answers
  at ``/v1/models``, ``/props``, ``/slots``, ``/metrics``, ``/version`` and
  ``/api/version``; with llama-server also the speculation method (``/slots``, ``/props``)
  and the draft length k (the number of per-position series in ``/metrics``);
* :meth:`~RemoteClient.stream_chat`: ``POST /v1/chat/completions`` with
  ``stream: true``, yielding :class:`~app.remote.stream.RemoteDelta` text as it arrives
  (read by :mod:`app.remote.stream`) and ending with one
  :class:`~app.remote.stream.RemoteResult`: tok/s and TTFT measured by Tandem on the
  stream, the server's own ``timings``, and the speculation figures from the response
  or from the change of the ``/metrics`` counters around the request
  (:mod:`app.remote.figures`).

A server that is down, slow, answers garbage or drops a stream raises a
:class:`~app.remote.errors.RemoteError` subclass whose message is written for the user;
a dropped stream's error carries the text received so far.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import unquote, urlsplit

import certifi
import httpx
import truststore

from app.remote.errors import (
    RemoteCancelledError,
    RemoteError,
    ServerAuthError,
    ServerContextError,
    ServerHTTPError,
    ServerProtocolError,
    ServerTimeoutError,
    ServerUnreachableError,
    StreamDroppedError,
)
from app.formatting import JSONTooDeepError, printable
from app.remote.display import (
    looks_like_html,
    page_text,
    redact_url,
    redact_userinfo,
    url_password,
)
from app.remote.figures import combine, count, from_response
from app.remote.prometheus import (
    MAX_POSITIONS,
    SpecCounters,
    metric_prefixes,
    parse_spec_counters,
)
from app.remote.stream import (
    MAX_BODY_BYTES,
    MAX_CHARS_PER_TOKEN,
    RemoteDelta,
    RemoteResult,
    StreamState,
    bounded_lines,
    loads,
    reported_draft_max,
    tandem_mode,
)

#: seconds to wait for a connection before calling a server unreachable
DEFAULT_CONNECT_TIMEOUT_S = 10.0
#: seconds without a byte from the server before a request is called timed out (a long
#: prompt's prefill on a busy server can take this long before the first token)
DEFAULT_READ_TIMEOUT_S = 300.0
#: seconds each recognition probe (``/props``, ``/metrics``…) may take, its whole answer
#: included
PROBE_TIMEOUT_S = 10.0
#: seconds the whole answer to ``GET /v1/models`` may take (headers and body): a server
#: that trickles it is cut off there (the read timeout alone restarts with every byte)
ANSWER_DEADLINE_S = 60.0
#: the longest server address Tandem takes, characters
MAX_URL_CHARS = 2048
log = logging.getLogger(__name__)

ChatMessage = Mapping[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": text}``."""


class Engine(str, Enum):
    """The serving engine behind an address, as recognised from what it answers."""

    LLAMA_SERVER = "llama-server"
    VLLM = "vllm"
    SGLANG = "sglang"
    TANDEM = "tandem"
    OLLAMA = "ollama"
    LM_STUDIO = "lm-studio"
    OPENAI_COMPATIBLE = "openai-compatible"


@dataclass(frozen=True, slots=True)
class RemoteModel:
    """One entry of ``/v1/models``: its ``id`` (what requests name) and ``owned_by``;
    ``speculation_method`` and ``draft_max`` where the entry says how the server drafts
    for it (another Tandem's ``meta.speculation``: its default drafter mode, ``none``
    when off, and k), else None; ``context_length``, the context window one request may
    fill, in tokens (prompt and reply together), where the server says (vLLM's
    ``max_model_len``, another Tandem's or llama-server's ``meta.n_ctx``; llama-server's
    ``/props`` ``default_generation_settings.n_ctx``, a slot's, before it), else None."""

    id: str
    owned_by: str | None = None
    speculation_method: str | None = None
    draft_max: int | None = None
    context_length: int | None = None


#: the servers that continue a reply cut short (:attr:`ServerInfo.can_continue`), in words
CONTINUING_SERVERS = "llama-server, vLLM 0.6.3 or later, another Tandem"


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What a server is, as far as it says.

    Attributes:
        base_url: the address requests go to (no trailing ``/v1``).
        engine: the recognised engine.
        version: the engine's version or build where it says (llama-server's
            ``build_info``, vLLM's ``/version``), else None.
        models: ``/v1/models``.
        metrics_prefix: the prefix of the speculation counters in ``/metrics``
            (``llamacpp``, ``vllm``…), None when it exports none.
        speculation_method: the drafter the server reports (llama-server's
            ``speculative.types``, for example ``ngram-simple``; ``none`` when it says it
            does not speculate); None when it does not say.
        draft_max: k, the maximum draft length, where the server shows it; else None.
        evidence: what the recognition was based on, one short phrase each.
    """

    base_url: str
    engine: Engine
    version: str | None
    models: tuple[RemoteModel, ...]
    metrics_prefix: str | None = None
    speculation_method: str | None = None
    draft_max: int | None = None
    evidence: tuple[str, ...] = ()

    @property
    def display_url(self) -> str:
        """:attr:`base_url` as messages and logs show it: a password in it as ``***``."""
        return redact_url(self.base_url)

    @property
    def can_continue(self) -> bool:
        """Whether the server goes on from a reply's start sent as the last, assistant
        message with ``continue_final_message`` (vLLM's field, read by llama-server and
        Tandem too; :data:`CONTINUING_SERVERS`); another server would answer that start
        as a finished message, and so would a vLLM older than 0.6.3, the first release
        that reads the field. llama-server continues a last assistant message without the
        field too."""
        if self.engine is Engine.VLLM and self.version is not None:
            found = re.match(r"v?(\d+)\.(\d+)\.(\d+)", self.version)
            if found is not None and tuple(map(int, found.groups())) < (0, 6, 3):
                return False
        return self.engine in (Engine.LLAMA_SERVER, Engine.VLLM, Engine.TANDEM)


RemoteEvent = RemoteDelta | RemoteResult


_EXAMPLE = "give one like http://127.0.0.1:8080 or https://host/path"
#: characters a host name may have (letters of any script for an internationalised one)
_HOST = re.compile(r"[\w.\-:]+")


def tls_context(verify: bool | str = True) -> ssl.SSLContext:
    """The TLS context of a client's connections.

    ``True``: ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` where either is set (they replace
    every other authority, as in httpx and OpenSSL), else the operating system's own
    verification (truststore: the macOS keychain, the Windows store, OpenSSL's system
    paths on Linux) with certifi's authorities added, so that an authority a company
    installed on the system is trusted as the system's browser trusts it. A string:
    that CA file or folder only. ``False``: no verification.

    Raises:
        OSError, ssl.SSLError: the CA file or folder cannot be read.
    """
    if verify is not True or os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"):
        if isinstance(verify, str):
            if os.path.isdir(verify):
                return ssl.create_default_context(capath=verify)
            return ssl.create_default_context(cafile=verify)
        return httpx.create_ssl_context(verify=verify)
    ctx = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=certifi.where())
    return ctx


def normalize_base_url(url: str) -> str:
    """``http(s)://[user[:password]@]host[:port][/prefix]`` without a trailing ``/`` or
    ``/v1``.

    Raises:
        RemoteError: not an http or https address with a host: longer than
            :data:`MAX_URL_CHARS`, with a space or a control character, a host that is
            not a host name or IP address, a port outside 1–65535. The message shows the
            address with its password as ``***`` and its control characters escaped.
    """
    text = url.strip()
    if len(text) > MAX_URL_CHARS:
        raise RemoteError(f"The server address is {len(text)} characters long; Tandem takes "
                          f"addresses of up to {MAX_URL_CHARS}: {_EXAMPLE}.")
    shown = printable(repr(redact_url(text)))
    if len(shown) > 120:
        shown = shown[:100] + "…"
    if any(ch.isspace() or not ch.isprintable() for ch in text):
        raise RemoteError(f"{shown} is not a server address: it contains a space or a "
                          f"control character; {_EXAMPLE}.")
    if "://" not in text:
        if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/", text):  # "htp:/host", "http:/host"
            raise RemoteError(f"{shown} is not a server address: it should start with "
                              f"http:// or https://; {_EXAMPLE}.")
        text = "http://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535"…
        raise RemoteError(f"{shown} is not a server address ({exc}); {_EXAMPLE}.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"{shown} is not a server address: {_EXAMPLE}.")
    if not _HOST.fullmatch(parts.hostname):
        raise RemoteError(f"{shown} is not a server address: its host has characters a "
                          f"host name cannot have; {_EXAMPLE}.")
    if port == 0:
        raise RemoteError(f"{shown} is not a server address: port 0 is not a port a "
                          f"server listens on (ports are 1–65535); {_EXAMPLE}.")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    normalized = f"{parts.scheme}://{parts.netloc}{path}"
    try:
        httpx.URL(normalized)
    except httpx.InvalidURL as exc:
        raise RemoteError(f"{shown} is not a server address ({printable(str(exc))}); "
                          f"{_EXAMPLE}.") from None
    return normalized


def _checked_key(api_key: str | None) -> str | None:
    """``api_key`` without the spaces and line ends around it (a key file written on
    Windows ends in CR LF); None when nothing is left.

    Raises:
        RemoteError: the key has a character an HTTP header cannot carry (a control
            character, or one outside ASCII). The message does not show the key.
    """
    if api_key is None or not api_key.strip():
        return None
    key = api_key.strip()
    if not all(" " <= ch <= "~" for ch in key):
        raise RemoteError("The API key has a character that cannot be sent to a server (a "
                          "control character, or one outside ASCII): check the key, or "
                          "the file or variable it came from. (The key is not shown here.)")
    return key


def _error_message(response: httpx.Response) -> str:
    """The server's own error sentence (OpenAI's ``{"error": {"message"}}``, a plain
    ``error`` or ``detail`` string), else the start of its body; at most 300 characters."""
    return _error_fields(response)[0]


def _error_fields(response: httpx.Response) -> tuple[str, str]:
    """The server's error sentence (as :func:`_error_message`) and its ``type`` and
    ``code`` joined by a space ("" when it has none)."""
    try:
        body = loads(response.content)
    except JSONTooDeepError:
        return "an error body that is not OpenAI's (JSON nested too deep to read)", ""
    except ValueError:
        return _body_start(response.text), ""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            kinds = " ".join(str(err.get(key) or "") for key in ("type", "code"))
            return str(err["message"])[:300], kinds
        if isinstance(err, str):
            return err[:300], ""
        if isinstance(body.get("detail"), str):
            return str(body["detail"])[:300], ""
    return _body_start(response.text), ""


#: llama-server's refusal of a prompt longer than a slot's window by itself
_PROMPT_OVER_CONTEXT = re.compile(r"request(?: \(\d+ tokens\))? exceeds the available "
                                  r"context size")

#: how servers name a request longer than their context window: llama-server's error
#: type, OpenAI's error code, and vLLM's sentences ("This model's maximum context length
#: is N tokens…", "The decoder prompt (length N) is longer than the maximum model length")
_CONTEXT_REFUSAL = re.compile(r"exceed_context_size_error|context_length_exceeded|"
                              r"maximum context length|longer than the maximum model length",
                              re.IGNORECASE)


def _body_start(text: str) -> str:
    """The start of an error body that is not JSON: an HTML page's words (a proxy's
    "502 Bad Gateway" page), else the text itself; at most 200 characters."""
    if looks_like_html(text):
        return page_text(text) or "an HTML page without text"
    return text.strip()[:200]


def _sampling_fields(max_tokens: int | None, temperature: float | None, top_p: float | None,
                     seed: int | None, stop: Sequence[str],
                     extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """A request body's sampling fields: those given (None: the server's default), then
    ``extra`` over them."""
    out: dict[str, Any] = {key: value for key, value in (
        ("max_tokens", max_tokens), ("temperature", temperature), ("top_p", top_p),
        ("seed", seed)) if value is not None}
    if stop:
        out["stop"] = list(stop)
    out.update(extra or {})
    return out


class RemoteClient:
    """One OpenAI-compatible server at ``base_url``.

    Args:
        base_url: ``http(s)://host:port`` (a trailing ``/v1`` is accepted and dropped;
            a ``user:password@`` part is sent as HTTP basic authentication and shown as
            ``user:***@`` in every message: :attr:`display_url`).
        api_key: sent as ``Authorization: Bearer …`` when given (the spaces and line
            ends around it dropped; only spaces left is no key); never logged, never in
            ``repr`` or error messages.
        verify: TLS verification (:func:`tls_context`): True (the operating system's
            verification and certifi's authorities; ``SSL_CERT_FILE`` or ``SSL_CERT_DIR``
            instead where set), a CA bundle path, or False (only for a server the user
            chose not to verify).
        connect_timeout, read_timeout: seconds (see the module constants).
        answer_deadline: seconds the whole answer to ``GET /v1/models`` may take
            (:data:`ANSWER_DEADLINE_S`).
        transport: an httpx transport (tests: ``httpx.MockTransport`` is not used here;
            the tests run real servers); None for the default.

    Raises:
        RemoteError: ``base_url`` is not an address (:func:`normalize_base_url`), or the
            key has a character a header cannot carry.

    Every error the client raises is a :class:`RemoteError` whose message shows neither
    the API key nor the address's password, with the control characters of what the
    server sent escaped (:func:`~app.formatting.printable`). The client is used from
    one thread at a time; :meth:`close` releases its connections.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None,
                 verify: bool | str = True,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
                 read_timeout: float = DEFAULT_READ_TIMEOUT_S,
                 answer_deadline: float = ANSWER_DEADLINE_S,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = normalize_base_url(base_url)
        self._made_with: dict[str, Any] = dict(  # for another thread's own client: twin()
            base_url=self.base_url, api_key=api_key, verify=verify,
            connect_timeout=connect_timeout, read_timeout=read_timeout,
            answer_deadline=answer_deadline)
        #: the address as messages and logs show it (a password as ``***``)
        self.display_url = redact_url(self.base_url)
        self.read_timeout = read_timeout
        self.answer_deadline = answer_deadline
        key = _checked_key(api_key)
        headers = {"Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        #: what an error message must not show, longest first, and what it shows instead
        self._secrets = sorted(
            ((secret, "***") for secret in (key, url_password(self.base_url))
             if secret and len(secret) >= 4), key=lambda pair: -len(pair[0]))
        self._http_args: dict[str, Any] = dict(
            # one TLS context for every client made here (a stream has its own): httpx
            # makes one per client otherwise, for http too, loading the CA bundle (about
            # 40 ms on a 2-core CPU), which every reply's time to first token would carry
            base_url=self.base_url, headers=headers,
            verify=tls_context(verify),
            timeout=httpx.Timeout(read_timeout, connect=connect_timeout),
            follow_redirects=False, transport=transport,
        )
        self._http = httpx.Client(**self._http_args)
        self._closed = False
        #: the socket of the stream being read, for a stop to cut (:meth:`_cut_on_cancel`)
        self._stream_socket: socket.socket | None = None
        #: the socket of the pooled connection the GETs use, and the event that stops them
        self._get_socket: socket.socket | None = None
        self._get_cancel: threading.Event | None = None
        self._metrics_prefix: str | None | bool = False  # False: not looked at yet

    def __repr__(self) -> str:
        return f"RemoteClient({self.display_url!r})"

    def _clean(self, text: str) -> str:
        """``text`` as a message may show it: the address with its password hidden, the
        key and the password replaced by ``***``, control characters escaped."""
        text = redact_userinfo(text.replace(self.base_url, self.display_url))
        for secret, shown in self._secrets:
            text = text.replace(secret, shown)
            with contextlib.suppress(UnicodeError):
                text = text.replace(unquote(secret), shown)
        return printable(text)

    @contextlib.contextmanager
    def _scrubbed(self) -> Iterator[None]:
        """Every error leaving the block is a :class:`RemoteError` with a clean message
        (:meth:`_clean`); the exceptions it was raised from are dropped when their text
        shows a secret (a log with tracebacks would show it). A server's JSON nested
        past the recursion limit somewhere else, or a number past a float's range, is a
        :class:`ServerProtocolError` instead of a traceback."""
        try:
            yield
        except (RecursionError, OverflowError) as exc:
            what = ("nested too deep" if isinstance(exc, RecursionError)
                    else "a number out of range")
            raise ServerProtocolError(f"{self.display_url} sent something that is not "
                                      f"OpenAI-compatible ({what}).") from None
        except RemoteError as exc:
            exc.args = tuple(self._clean(a) if isinstance(a, str) else a for a in exc.args)
            if any(self._clean(str(c)) != printable(str(c)) for c in _causes(exc)):
                exc.__cause__ = exc.__context__ = None
                exc.__suppress_context__ = True
            raise

    def twin(self, *, connect_timeout: float | None = None, read_timeout: float | None = None,
             answer_deadline: float | None = None) -> RemoteClient:
        """A new client to the same server with the same key and TLS settings, and its own
        connections (for another thread; a ``transport`` given to this one is not
        shared: the twin has the default); the timeouts given replace this one's."""
        given = {"connect_timeout": connect_timeout, "read_timeout": read_timeout,
                 "answer_deadline": answer_deadline}
        return RemoteClient(**{**self._made_with,
                               **{k: v for k, v in given.items() if v is not None}})

    def close(self) -> None:
        """Close the connections (the client cannot be used after)."""
        self._closed = True
        self._http.close()

    def _cut_on_cancel(self, cancel: threading.Event | None, done: threading.Event,
                       sock_of: Callable[[], socket.socket | None] | None = None
                       ) -> threading.Thread | None:
        """A thread that shuts the stream's socket down as soon as ``cancel`` is set while
        the stream runs (``done`` not set), so a stop never waits for a silent server's
        next byte or for its read timeout: before the answer's headers (a long prompt
        being read, a request queued) as after. A socket still connecting is shut down
        once it is connected. A shutdown, unlike a close, wakes a thread blocked reading
        the socket; the plain socket's shutdown is used on a TLS socket too (the TLS
        one also unwraps it under the reader's feet). ``sock_of`` gives the socket to cut
        (default: the stream's)."""
        if cancel is None:
            return None

        def watch() -> None:
            while not cancel.wait(0.05):
                if done.is_set():
                    return
            while not done.is_set():
                sock = sock_of() if sock_of is not None else self._stream_socket
                if sock is not None:
                    with contextlib.suppress(OSError):
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)
                    return
                done.wait(0.05)

        thread = threading.Thread(target=watch, name="remote-cancel", daemon=True)
        thread.start()
        return thread

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------------
    def _translate(self, exc: httpx.HTTPError, what: str,
                   waited: float | None = None) -> RemoteError:
        """A user's sentence for an httpx failure while doing ``what`` (``waited``: the
        read timeout it ran under, default :attr:`read_timeout`)."""
        url = self.base_url
        if isinstance(exc, httpx.ConnectTimeout):
            return ServerUnreachableError(f"{url} did not accept a connection in time "
                                          f"({what}). Is the address right and the "
                                          "server running?")
        if isinstance(exc, httpx.ConnectError):
            reason = str(exc) or type(exc).__name__
            if "CERTIFICATE" in reason.upper() or "SSL" in reason.upper():
                return ServerUnreachableError(
                    f"{url}: its TLS certificate could not be verified ({reason}). For a "
                    "server whose certificate your own authority signed, add that "
                    "authority to this computer's trusted certificates, or start Tandem "
                    "with SSL_CERT_FILE set to a PEM bundle holding it and the public "
                    "authorities (it replaces them).")
            return ServerUnreachableError(f"Cannot reach {url} ({reason}). Is the server "
                                          "running, and is the address right?")
        if isinstance(exc, httpx.TimeoutException):
            return ServerTimeoutError(f"{url} sent nothing for {waited or self.read_timeout:g} s "
                                      f"({what}). The server may be overloaded.")
        if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
            return RemoteError(f"{url} is not an address Tandem can use ({exc}).")
        return ServerUnreachableError(f"The connection to {url} failed ({what}: "
                                      f"{type(exc).__name__}: {exc}).")

    def _status_error(self, response: httpx.Response, what: str) -> RemoteError:
        status = response.status_code
        message, kinds = _error_fields(response)
        if status in (401, 403):
            return ServerAuthError(f"{self.base_url} refused the request ({status}): "
                                   f"{message or 'the API key is missing or wrong'}.")
        if 300 <= status < 400:
            location = response.headers.get("location", "")[:200]
            return ServerHTTPError(f"{self.base_url} answered {status} to {what}, a redirect"
                                   f"{f' to {location}' if location else ''}: Tandem does "
                                   "not follow redirects; give the address it points to "
                                   "if you trust it.", status=status)
        if status == 400 and _CONTEXT_REFUSAL.search(f"{kinds} {message}"):
            # llama-server's sentence is about the prompt alone: fewer reply tokens
            # cannot make it fit
            prompt_alone = _PROMPT_OVER_CONTEXT.search(message)
            return ServerContextError(
                f"The server at {self.base_url} refused the conversation as too long for "
                f"its context window (it said: {message}). Shorten the message or the "
                "conversation, " + ("" if prompt_alone else "lower Max tokens (Sampling "
                                    "tab), ") + "or start the server with a longer context.",
                status=status)
        return ServerHTTPError(f"{self.base_url} answered {status} to {what}: "
                               f"{message or '(no message)'}", status=status)

    def _get(self, path: str, *, timeout: float | None = None) -> httpx.Response:
        """GET ``path``, its body read up to :data:`MAX_BODY_BYTES`, the whole answer
        within ``timeout`` seconds (default :attr:`answer_deadline`): the connection is
        cut there however slowly the server trickles its bytes.

        Raises:
            RemoteCancelledError: the cancel event of :meth:`_cancellable` is set.
            ServerTimeoutError: the answer took longer than ``timeout``.
            RemoteError: as :meth:`_translate` and :meth:`_bounded` say.
        """
        cancel = self._get_cancel
        limit = timeout or self.answer_deadline
        read = min(limit, self.read_timeout)

        def trace(event: str, info: dict[str, Any]) -> None:
            if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
                self._get_socket = _socket_of(info.get("return_value"))

        if cancel is not None and cancel.is_set():
            raise RemoteCancelledError(f"Stopped before {self.base_url} answered.")
        per_read = httpx.Timeout(read, connect=self._http.timeout.connect)
        expired, stop_timer = self._deadline(limit)
        answered = False
        try:
            with self._http.stream("GET", path, timeout=per_read,
                                   extensions={"trace": trace}) as response:
                answered = True
                return self._bounded(response, f"GET {path}")
        except httpx.HTTPError as exc:
            if cancel is not None and cancel.is_set():
                raise RemoteCancelledError(f"Stopped before {self.base_url} answered.") from exc
            if expired.is_set():
                how = ("it sends its answer too slowly" if answered else
                       "not even a response head came: busy, hung, or not an HTTP server")
                raise ServerTimeoutError(
                    f"{self.base_url} took more than {limit:g} s to answer GET {path} "
                    f"({how}); Tandem stopped waiting.") from exc
            raise self._translate(exc, f"GET {path}", read) from exc
        finally:
            stop_timer()

    def _deadline(self, seconds: float) -> tuple[threading.Event, Callable[[], None]]:
        """A timer that shuts the GETs' connection down ``seconds`` from now (a read
        blocked on it wakes with an error): the event it sets then, and the function
        that stops it (call it when the GET is over; after it the timer cuts nothing)."""
        expired = threading.Event()
        lock = threading.Lock()
        over = False

        def expire() -> None:
            with lock:
                if over:
                    return
                expired.set()
                sock = self._get_socket
                if sock is not None:
                    with contextlib.suppress(OSError):
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)

        def stop() -> None:
            nonlocal over
            with lock:
                over = True
            timer.cancel()

        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        timer.start()
        return expired, stop

    @contextlib.contextmanager
    def _cancellable(self, cancel: threading.Event | None) -> Iterator[None]:
        """The GETs made inside stop as soon as ``cancel`` is set: the pooled connection's
        socket is shut down (a silent server is not waited for) and later GETs raise
        :class:`RemoteCancelledError`."""
        if cancel is None:
            yield
            return
        done = threading.Event()
        self._get_cancel = cancel
        watcher = self._cut_on_cancel(cancel, done, lambda: self._get_socket)
        try:
            yield
        finally:
            done.set()
            if watcher is not None:
                watcher.join()
            self._get_cancel = None

    def _bounded(self, response: httpx.Response, what: str) -> httpx.Response:
        """``response`` with its body read, or ServerProtocolError past
        :data:`MAX_BODY_BYTES` (decoded bytes: a compressed body counts as it unpacks)."""
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ServerProtocolError(
                    f"{self.base_url} sent more than {MAX_BODY_BYTES // 2**20} MiB in answer "
                    f"to {what}; Tandem stopped reading it.")
            chunks.append(chunk)
        # the bytes are decoded already: the copy carries no encoding or length to redo
        headers = [(k, v) for k, v in response.headers.multi_items()
                   if k.lower() not in ("content-encoding", "content-length",
                                        "transfer-encoding")]
        return httpx.Response(response.status_code, headers=headers,
                              content=b"".join(chunks), request=response.request)

    def _probe_json(self, path: str) -> Any:
        """GET ``path`` as JSON; None on any status other than 200, a non-JSON answer or
        one past :data:`MAX_BODY_BYTES`."""
        try:
            response = self._get(path, timeout=PROBE_TIMEOUT_S)
        except ServerProtocolError:
            return None
        if response.status_code != 200:
            return None
        try:
            return loads(response.content)
        except ValueError:
            return None

    # -- models and recognition ----------------------------------------------------
    def models(self, cancel: threading.Event | None = None) -> tuple[RemoteModel, ...]:
        """``GET /v1/models``: the models the server offers (``cancel``: set it to stop
        waiting for the answer).

        Raises:
            RemoteCancelledError: ``cancel`` was set first.
            ServerUnreachableError, ServerTimeoutError, ServerAuthError: as named.
            ServerHTTPError: another error status (404: not an OpenAI-compatible server).
            ServerProtocolError: the answer is not OpenAI's model list (JSON nested
                past the recursion limit included).
            ServerTimeoutError: no answer, or not all of it, within
                :attr:`answer_deadline` seconds.
        """
        with self._scrubbed(), self._cancellable(cancel):
            return self._models()

    def _models(self) -> tuple[RemoteModel, ...]:
        response = self._get("/v1/models")
        if response.status_code != 200:
            if response.status_code == 404:
                raise ServerHTTPError(f"{self.base_url} has no /v1/models: it is not an "
                                      "OpenAI-compatible server (or the address needs "
                                      "another path).", status=404)
            raise self._status_error(response, "GET /v1/models")
        try:
            body = loads(response.content)
        except JSONTooDeepError:
            raise ServerProtocolError(f"{self.base_url}/v1/models sent something that is not "
                                      "OpenAI-compatible (JSON nested too deep to read)."
                                      ) from None
        except ValueError as exc:
            raise ServerProtocolError(f"{self.base_url}/v1/models did not answer JSON: "
                                      f"{response.text[:120]!r}") from exc
        data = body.get("data") if isinstance(body, dict) else None
        entries = [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)
                   ] if isinstance(data, list) else []
        if not isinstance(data, list) or (data and not entries):
            raise ServerProtocolError(f"{self.base_url}/v1/models is not an OpenAI model "
                                      "list (no 'data' list of models with an 'id').")
        if len(entries) < len(data):  # the models it names are still offered
            log.warning("%s/v1/models: %d of %d entries have no model id; left out",
                        self.display_url, len(data) - len(entries), len(data))
        return tuple(_model_entry(m) for m in entries)

    def metrics_text(self) -> str | None:
        """``GET /metrics`` as text; None when the server has no metrics endpoint.

        Raises:
            RemoteError: the server could not be reached, or sent more than
                :data:`MAX_BODY_BYTES` or took more than :data:`PROBE_TIMEOUT_S`.
        """
        with self._scrubbed():
            response = self._get("/metrics", timeout=PROBE_TIMEOUT_S)
        if response.status_code != 200:
            return None
        return response.text

    def spec_counters(self) -> SpecCounters | None:
        """The speculation counters in ``/metrics`` now; None when the server exports
        none (no endpoint, not Prometheus text, or no ``spec_decode`` counters)."""
        text = self.metrics_text()
        if text is None:
            return None
        try:
            return parse_spec_counters(text)
        except ValueError:
            return None

    def identify(self, cancel: threading.Event | None = None) -> ServerInfo:
        """Recognise the engine and read what it says about speculation (``cancel``: set
        it to stop at once, whichever request waits).

        Raises:
            the errors of :meth:`models` (the one request that must succeed); the other
            probes are best effort. RemoteCancelledError: ``cancel`` was set.
        """
        with self._scrubbed(), self._cancellable(cancel):
            return self._identify()

    def _identify(self) -> ServerInfo:
        models = self.models()
        evidence: list[str] = []
        owners = {m.owned_by for m in models if m.owned_by}
        engine = _engine_from_owners(owners)
        if engine is not None:
            evidence.append(f"/v1/models owned_by {sorted(owners)[0]!r}")
        version: str | None = None
        method: str | None = None
        props = self._probe_json("/props")
        if isinstance(props, dict) and "default_generation_settings" in props:
            engine = Engine.LLAMA_SERVER
            evidence.append("/props")
            build = props.get("build_info")  # a short word, or not taken
            version = printable(" ".join(build.split()))[:80] if isinstance(
                build, str) and build.strip() else None
            models = _with_slot_context(models, props)
        if engine is Engine.LLAMA_SERVER:
            # /props shows the default settings, whose drafter reads "none" until a
            # request ran even on a server started with --spec-type (b1-0c1e570): /slots
            # decides; its params name the drafter once a slot has served a request
            method = self._llama_slots_method()
        prefix, counters = self._metrics_probe()
        if prefix:
            evidence.append(f"/metrics prefix {prefix}:")
            engine = engine or {"llamacpp": Engine.LLAMA_SERVER, "vllm": Engine.VLLM,
                                "sglang": Engine.SGLANG}.get(prefix)
        if engine in (None, Engine.VLLM, Engine.SGLANG):
            ver = self._probe_json("/version")
            if isinstance(ver, dict) and isinstance(ver.get("version"), str):
                version = ver["version"]
                evidence.append("/version")
        if engine is None:
            ollama = self._probe_json("/api/version")
            if isinstance(ollama, dict) and isinstance(ollama.get("version"), str):
                engine, version = Engine.OLLAMA, ollama["version"]
                evidence.append("/api/version")
        if engine is None and isinstance(self._probe_json("/api/v0/models"), dict):
            engine = Engine.LM_STUDIO
            evidence.append("/api/v0/models")
        draft_max = None
        if engine is Engine.LLAMA_SERVER and counters is not None and counters.accepted_per_pos:
            draft_max = len(counters.accepted_per_pos)  # one series per position up to k
        if engine is Engine.TANDEM:  # its default drafter, in its model list
            method = next((m.speculation_method for m in models if m.speculation_method),
                          None)
            draft_max = next((m.draft_max for m in models if m.draft_max), None)
        return ServerInfo(base_url=self.base_url, engine=engine or Engine.OPENAI_COMPATIBLE,
                          version=version, models=models, metrics_prefix=prefix,
                          speculation_method=method, draft_max=draft_max,
                          evidence=tuple(evidence))

    def refresh_speculation(self, info: ServerInfo, result: RemoteResult | None = None,
                            cancel: threading.Event | None = None) -> ServerInfo:
        """``info`` with the drafter and k of the reply ``result`` where it names them
        (another Tandem: its ``tandem`` object says which drafter served that reply),
        else read again where they were unknown (llama-server names them only after its
        first request); unchanged for other engines or when both are known. Probes are
        best effort: a failure, or ``cancel`` set, keeps ``info``."""
        if result is not None and (result.speculation_method or result.draft_max):
            return dataclasses.replace(
                info, speculation_method=result.speculation_method or info.speculation_method,
                draft_max=result.draft_max or info.draft_max)
        if info.engine is not Engine.LLAMA_SERVER or (
                info.speculation_method is not None and info.draft_max is not None):
            return info
        try:
            with self._scrubbed(), self._cancellable(cancel):
                method = info.speculation_method or self._llama_slots_method()
                draft_max = info.draft_max
                if draft_max is None:
                    counters = self.spec_counters()
                    if counters is not None and counters.accepted_per_pos:
                        draft_max = len(counters.accepted_per_pos)
        except RemoteError:
            return info
        return dataclasses.replace(info, speculation_method=method, draft_max=draft_max)

    def refresh_context(self, info: ServerInfo,
                        cancel: threading.Event | None = None) -> ServerInfo:
        """``info`` with llama-server's context window read again from ``/props`` (the
        server may have been restarted with another ``-c`` while connected); unchanged
        for other engines, or when the probe fails or ``cancel`` is set."""
        if info.engine is not Engine.LLAMA_SERVER:
            return info
        try:
            with self._scrubbed(), self._cancellable(cancel):
                props = self._probe_json("/props")
        except RemoteError:
            return info
        if not isinstance(props, dict):
            return info
        return dataclasses.replace(info, models=_with_slot_context(info.models, props))

    def _llama_slots_method(self) -> str | None:
        slots = self._probe_json("/slots")
        if not isinstance(slots, list) or not slots:
            return None
        for slot in slots:
            if isinstance(slot, dict) and isinstance(slot.get("params"), dict):
                found = _llama_spec_types({"params": slot["params"]})
                if found:
                    return found
        if all(isinstance(s, dict) and s.get("speculative") is False for s in slots):
            return "none"
        return None  # speculating, drafter not named yet

    def _metrics_probe(self) -> tuple[str | None, SpecCounters | None]:
        text = self.metrics_text()
        if text is None:
            self._metrics_prefix = None
            return None, None
        try:
            counters = parse_spec_counters(text)
            prefixes = metric_prefixes(text)
        except ValueError:
            self._metrics_prefix = None
            return None, None
        prefix = counters.prefix if counters else next(
            (p for p in ("llamacpp", "vllm", "sglang") if p in prefixes), None)
        self._metrics_prefix = counters.prefix if counters else None
        return prefix, counters

    # -- chat ----------------------------------------------------------------------
    def stream_chat(self, model: str, messages: Sequence[ChatMessage], *,
                    max_tokens: int | None = None, temperature: float | None = None,
                    top_p: float | None = None, seed: int | None = None,
                    stop: Sequence[str] = (), extra: Mapping[str, Any] | None = None,
                    cancel: threading.Event | None = None,
                    scrape_metrics: bool = True) -> Iterator[RemoteEvent]:
        """Stream one chat reply: :class:`RemoteDelta` events, then one :class:`RemoteResult`.

        Args:
            model: a model id from :meth:`models` (llama-server requires the field).
            messages: the conversation, oldest first.
            max_tokens, temperature, top_p, seed, stop: OpenAI's request fields, sent
                only when given.
            extra: more request fields, sent as they are (for example llama-server's
                ``speculative.n_max``).
            cancel: set it to stop: the connection is closed (the server stops), and
                the result says ``cancelled`` with the text received.
            scrape_metrics: read ``/metrics`` just before and after the request for the
                counters' change (skipped when the server has no speculation counters).

        Raises:
            ServerUnreachableError, ServerTimeoutError, ServerAuthError,
            ServerHTTPError: before any text arrived.
            StreamDroppedError: the stream broke, timed out, carried an error or
                garbage (:meth:`StreamState.read_events`: not OpenAI's chunks, text
                without SSE framing, more lines without reply text than
                ``max_tokens`` allows) after it began; ``partial_text`` holds what had
                arrived.
            ServerProtocolError: the answer is not an OpenAI chat stream or completion
                (JSON nested past the recursion limit included).
        """
        body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages],
                                "stream": True, "stream_options": {"include_usage": True}}
        body.update(_sampling_fields(max_tokens, temperature, top_p, seed, stop, extra))
        yield from self._measured_stream("/v1/chat/completions", body, cancel, scrape_metrics)

    def stream_completion(self, model: str, prompt: str, *, max_tokens: int | None = None,
                          temperature: float | None = None, top_p: float | None = None,
                          seed: int | None = None, stop: Sequence[str] = (),
                          extra: Mapping[str, Any] | None = None,
                          cancel: threading.Event | None = None,
                          scrape_metrics: bool = True) -> Iterator[RemoteEvent]:
        """A plain completion of ``prompt`` (``POST /v1/completions``, no chat template),
        streamed like :meth:`stream_chat`, with the same arguments and errors."""
        body: dict[str, Any] = {"model": model, "prompt": prompt, "stream": True,
                                "stream_options": {"include_usage": True}}
        body.update(_sampling_fields(max_tokens, temperature, top_p, seed, stop, extra))
        yield from self._measured_stream("/v1/completions", body, cancel, scrape_metrics)

    def _measured_stream(self, path: str, body: dict[str, Any],
                         cancel: threading.Event | None,
                         scrape_metrics: bool) -> Iterator[RemoteEvent]:
        with self._scrubbed():
            before = self._scrape(cancel) if scrape_metrics else None
            state = StreamState(model=str(body.get("model", "")))
            asked = body.get("max_tokens")
            if isinstance(asked, int) and asked > 0:  # a server that ignores it is cut off
                state.max_chunks, state.max_chars = asked, asked * MAX_CHARS_PER_TOKEN
            t0 = time.perf_counter()
            yield from self._run_stream(path, body, state, t0, cancel)
            delta = None
            if before is not None:
                after = self._scrape(cancel)
                delta = after.minus(before) if after is not None else None
            yield state.result(t0, combine(from_response(state.final_fields), delta))

    def _scrape(self, cancel: threading.Event | None = None) -> SpecCounters | None:
        """The ``/metrics`` counters now (best effort: None on any failure, within
        :data:`PROBE_TIMEOUT_S`; None at once when ``cancel`` is set)."""
        if self._metrics_prefix is None or (cancel is not None and cancel.is_set()):
            return None
        try:
            counters = self.spec_counters()
        except RemoteError:
            return None
        if self._metrics_prefix is False:
            self._metrics_prefix = counters.prefix if counters else None
        return counters

    def _run_stream(self, path: str, body: dict[str, Any], state: StreamState, t0: float,
                    cancel: threading.Event | None) -> Iterator[RemoteDelta]:
        done = threading.Event()
        watcher = self._cut_on_cancel(cancel, done)
        try:
            yield from self._read_stream(path, body, state, t0, cancel)
        except Exception:
            if cancel is not None and cancel.is_set():
                state.cancelled = True  # the connection was cut for the stop
            else:
                raise
        finally:
            done.set()
            if watcher is not None:
                watcher.join()
        if cancel is not None and cancel.is_set() and not state.finished:
            state.cancelled = True  # the stop's shutdown ended the stream early
        if not state.finished and not state.cancelled:
            raise StreamDroppedError(
                f"{self.base_url} ended the stream before the reply was complete; the "
                "text received so far is kept.", partial_text=state.text)

    def _read_stream(self, path: str, body: dict[str, Any], state: StreamState, t0: float,
                     cancel: threading.Event | None) -> Iterator[RemoteDelta]:
        """The stream, on a connection of its own: its socket is known from the moment it
        connects (httpcore's ``trace`` request extension), for a stop to shut it down
        (:meth:`_cut_on_cancel`); a pooled connection would be known only from the
        answer's headers on."""

        def trace(event: str, info: dict[str, Any]) -> None:
            if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
                self._stream_socket = _socket_of(info.get("return_value"))

        try:
            with httpx.Client(**self._http_args) as http, http.stream(
                    "POST", path, json=body, headers={"Accept": "text/event-stream"},
                    extensions={"trace": trace}) as response:
                if response.status_code != 200:
                    raise self._status_error(self._bounded(response, "the chat request"),
                                             "the chat request")
                ctype = response.headers.get("content-type", "")
                if ctype.startswith("application/json"):
                    whole = self._bounded(response, "the chat request").content
                    yield from state.whole_response(whole, t0, self.base_url)
                    return
                if not ctype.startswith("text/event-stream"):
                    raise ServerProtocolError(f"{self.base_url} answered the chat request "
                                              f"with {ctype or 'no content type'}, not a "
                                              "stream of server-sent events.")
                yield from state.read_events(
                    bounded_lines(response.iter_text(), state.line_limit()), t0, cancel,
                    self.base_url)
        except httpx.HTTPError as exc:
            if not state.started:
                raise self._translate(exc, "the chat request") from exc
            raise StreamDroppedError(
                f"The connection to {self.base_url} broke during the reply "
                f"({type(exc).__name__}); the text received so far is kept.",
                partial_text=state.text) from exc
        finally:
            self._stream_socket = None

    def chat(self, model: str, messages: Sequence[ChatMessage],
             **kwargs: Any) -> RemoteResult:
        """:meth:`stream_chat` consumed to its result (same arguments and errors)."""
        for event in self.stream_chat(model, messages, **kwargs):
            if isinstance(event, RemoteResult):
                return event
        raise ServerProtocolError("the stream ended without a result")  # not reached


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions ``exc`` was raised from or while handling (20 at most)."""
    seen = exc.__cause__ or exc.__context__
    for _ in range(20):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


def _socket_of(stream: object) -> socket.socket | None:
    """The socket under an httpcore network stream (its ``get_extra_info("socket")``), None
    where there is none."""
    get = getattr(stream, "get_extra_info", None)
    sock = get("socket") if get is not None else None
    return sock if isinstance(sock, socket.socket) else None


def _model_entry(entry: dict[str, Any]) -> RemoteModel:
    """One ``/v1/models`` entry (an object with a string ``id``): another Tandem's
    ``meta.speculation`` gives its default drafter and k."""
    owned_by = entry.get("owned_by")
    meta = entry.get("meta")
    spec = meta.get("speculation") if isinstance(meta, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    return RemoteModel(id=entry["id"], owned_by=owned_by if isinstance(owned_by, str) else None,
                       speculation_method=tandem_mode(spec.get("mode")),
                       draft_max=reported_draft_max(spec.get("draft_max")),
                       context_length=count(entry.get("max_model_len"), integer=True) or count(
                           meta.get("n_ctx") if isinstance(meta, dict) else None, integer=True)
                       or None)


def _with_slot_context(models: tuple[RemoteModel, ...],
                       props: dict[str, Any]) -> tuple[RemoteModel, ...]:
    """``models`` with llama-server's slot context window from its ``/props``
    (``default_generation_settings.n_ctx``: what one request may fill, prompt and reply;
    some builds' model list gives the whole context instead) where it gives one."""
    settings = props.get("default_generation_settings")
    n_ctx = count(settings.get("n_ctx") if isinstance(settings, dict) else None,
                  integer=True) or None
    return tuple(dataclasses.replace(m, context_length=n_ctx or m.context_length)
                 for m in models)


def _engine_from_owners(owners: set[str]) -> Engine | None:
    table = {"llamacpp": Engine.LLAMA_SERVER, "vllm": Engine.VLLM, "sglang": Engine.SGLANG,
             "tandem": Engine.TANDEM, "library": Engine.OLLAMA,
             "organization_owner": Engine.LM_STUDIO}
    for owner in owners:
        if owner.lower() in table:
            return table[owner.lower()]
    return None


def _llama_spec_types(settings: Any) -> str | None:
    """llama-server's ``speculative.types`` ("none,ngram-simple") → ``ngram-simple``;
    ``none`` when only none; None when absent."""
    if not isinstance(settings, dict) or not isinstance(settings.get("params"), dict):
        return None
    raw = settings["params"].get("speculative.types")
    if not isinstance(raw, str) or not raw:
        return None
    kinds = [k for k in raw.split(",") if k and k != "none"]
    return ",".join(kinds) if kinds else "none"
