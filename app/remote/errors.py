"""Errors of a remote engine, written for the user (subclasses of
:class:`~app.errors.TandemError`, shown as they are).

Each names the server's address, never its API key. :class:`StreamDroppedError` carries
the text that had arrived before the stream broke, so a caller keeps it.
"""

from __future__ import annotations

from app.errors import ContextOverflowError, TandemError


class RemoteError(TandemError):
    """A remote server could not be used; the message says why and what to try."""


class ServerUnreachableError(RemoteError):
    """Nothing answered at the address (refused, unknown host, TLS failure)."""


class ServerTimeoutError(RemoteError):
    """The server accepted the connection but sent nothing for too long."""


class ServerAuthError(RemoteError):
    """The server refused the API key (HTTP 401 or 403)."""


class ServerHTTPError(RemoteError):
    """The server answered with an HTTP error status.

    Attributes:
        status: the HTTP status code.
    """

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class ServerContextError(ServerHTTPError, ContextOverflowError):
    """The server refused the conversation, with the reply's ``max_tokens``, as longer
    than its context window (HTTP 400 with llama-server's ``exceed_context_size_error``,
    OpenAI's ``context_length_exceeded`` or vLLM's "maximum context length" sentences,
    which count ``max_tokens`` too): nothing was generated, so the chat gives the
    message back as for a local model's refusal."""


class RemoteCancelledError(RemoteError):
    """The request was stopped (its cancel event set) before the server answered."""


class ServerProtocolError(RemoteError):
    """The server answered something that is not what an OpenAI-compatible server sends."""


class StreamDroppedError(RemoteError):
    """The stream of a reply ended before the server said it was complete.

    Attributes:
        partial_text: the reply text received before the break ("" when none).
    """

    def __init__(self, message: str, *, partial_text: str) -> None:
        super().__init__(message)
        self.partial_text = partial_text
