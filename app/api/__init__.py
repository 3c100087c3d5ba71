"""The local OpenAI-compatible API: a third front end of the chat service, beside the
window and the command line.

:mod:`app.api.protocol` reads OpenAI request bodies and writes responses, llama-server's
``timings`` and OpenAI's error JSON; :mod:`app.api.app` is the Starlette application
whose requests become jobs of :class:`~app.chat.service.ChatService` (one generation at a
time, in the queue the window's replies share); :mod:`app.api.server` runs it with
uvicorn, in the foreground (``python -m app serve``) or on a thread (the window's "Serve
API" switch); :mod:`app.api.traffic` keeps the recent requests the window lists. No Qt.

Per-request speculation: the extra body field ``"speculation"`` takes any field of
:class:`~app.options.SpeculationConfig` (``mode``: any drafter's, docs/cli.md; ``draft_max``
and the drafters' own settings; ``adaptive``) over the server's default.

The defaults where the API listens and what it reads are here, so that the command line
and the window name them without importing the server.
"""

from app.options import DEFAULT_PORT as DEFAULT_PORT  # the default port, named here too

#: the address the API listens on by default (this computer only)
DEFAULT_HOST = "127.0.0.1"
#: the default request body limit, bytes (a 32k-token conversation is about 130 KB)
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
