"""The API's checks on who may ask: the API key and the ``Host`` header, as ASGI
middleware that answers with OpenAI's error JSON, and the key's strength at start.

Both checks run as soon as a request's head has arrived, before its body is read (the
earliest point uvicorn calls the application; half-sent heads are the business of
:mod:`app.api.connections`). A refusal closes the connection (``Connection: close``), so
a client that announced a body it never sends does not keep the connection.
"""

from __future__ import annotations

import hmac
import ipaddress

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import TandemError

#: the shortest API key accepted where the key guards a network address (characters);
#: 16 random characters of a URL-safe alphabet are 96 bits
MIN_API_KEY_LENGTH = 16


class ApiKeyError(TandemError):
    """The API key cannot protect the server (too short, or not sendable in a header)."""


def check_api_key(key: str, *, network: bool) -> None:
    """Raises :class:`ApiKeyError` unless ``key`` can be sent and, with ``network`` (the
    server is reachable from other machines), has at least :data:`MIN_API_KEY_LENGTH`
    characters.

    A key is sent as ``Authorization: Bearer KEY``: HTTP strips spaces around a header
    value and clients encode it as ASCII, so a key with whitespace, control or non-ASCII
    characters would refuse every client (RFC 6750's ``b64token`` is stricter still).
    """
    if not key or any(not (0x21 <= ord(ch) <= 0x7E) for ch in key):
        raise ApiKeyError(
            "The API key must be printable ASCII without spaces (it is sent in an HTTP "
            "header); generate one with: python -c \"import secrets; "
            "print(secrets.token_urlsafe(24))\"")
    if network and len(key) < MIN_API_KEY_LENGTH:
        raise ApiKeyError(
            f"The API key has {len(key)} characters; a server reachable from other "
            f"machines needs at least {MIN_API_KEY_LENGTH}. Generate one with: python -c "
            "\"import secrets; print(secrets.token_urlsafe(24))\"")


def _refusal(status: int, message: str, *, type: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type, "param": None,
                                   "code": code}},
                        status_code=status, headers={"Connection": "close"})


class ApiKeyMiddleware:
    """Every route but ``/health`` (and CORS preflights) needs exactly one
    ``Authorization: Bearer KEY`` header (401 otherwise). The key is compared with
    :func:`hmac.compare_digest`, in constant time."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._key = api_key.encode()

    def _authorized(self, scope: Scope) -> bool:
        given = [value for name, value in scope.get("headers", [])
                 if name == b"authorization"]
        if len(given) != 1:  # none, or two that could disagree: refuse, never pick one
            return False
        scheme, _, token = given[0].strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health" \
                and scope.get("method") != "OPTIONS" and not self._authorized(scope):
            response = _refusal(401, "Invalid or missing API key: send one header "
                                "'Authorization: Bearer KEY'.",
                                type="authentication_error", code="invalid_api_key")
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def host_is_loopback(host_header: bytes) -> bool:
    """Whether a ``Host`` header value names this machine by a loopback name or address
    (``localhost``, 127.0.0.0/8, ``[::1]``; any port)."""
    try:
        host = host_header.decode("ascii").strip().lower()
    except UnicodeDecodeError:
        return False
    if host.startswith("["):
        name, bracket, port = host[1:].partition("]")
        if not bracket or (port and not (port[:1] == ":" and port[1:].isdigit())):
            return False
    else:
        name, _, port = host.partition(":")
        if port and not port.isdigit():
            return False
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class LoopbackHostMiddleware:
    """On a loopback address, requests must name a loopback ``Host`` (400 otherwise):
    a web page on another name that resolves to 127.0.0.1 (DNS rebinding) is refused."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            hosts = [value for name, value in scope.get("headers", []) if name == b"host"]
            if len(hosts) != 1 or not host_is_loopback(hosts[0]):
                response = _refusal(400, "Invalid Host header: this server answers requests "
                                    "for 127.0.0.1, localhost or [::1] only.",
                                    type="invalid_request_error", code="invalid_host")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class JsonCORSMiddleware(CORSMiddleware):
    """Starlette's CORS middleware, whose refused preflight (an origin, method or header
    not allowed) answers OpenAI's error JSON like every other refusal: 400
    ``cors_not_allowed``, with the preflight's own headers (``Vary``, the allowed methods
    and headers), instead of Starlette's plain text."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        refused = bytes(response.body).decode("utf-8", "replace").removeprefix(
            "Disallowed CORS ").strip()
        headers = {name: value for name, value in response.headers.items()
                   if name not in ("content-type", "content-length")}
        why = "; ".join(_refusal_words(part.strip(), request_headers)
                        for part in refused.split(",") if part.strip()) or "it is not allowed"
        return JSONResponse(
            {"error": {"message": f"CORS preflight refused: {why}.",
                       "type": "invalid_request_error", "param": None,
                       "code": "cors_not_allowed"}},
            status_code=response.status_code, headers=headers)


def _refusal_words(part: str, request_headers: Headers) -> str:
    """One reason Starlette gave for refusing a preflight ("origin", "method",
    "headers"…), in words that say what to change."""
    if part == "origin":
        return (f"the origin {request_headers.get('origin', '')!r} is not allowed (serve "
                "--cors-origin names the origins whose pages may call this API)")
    if part == "method":
        return (f"the method {request_headers.get('access-control-request-method', '')!r} "
                "is not allowed (GET and POST are)")
    if part == "headers":
        return ("a requested header is not allowed (authorization and content-type are): "
                f"{request_headers.get('access-control-request-headers', '')!r}")
    return f"the {part} is not allowed"
