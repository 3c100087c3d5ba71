"""Remote engines: OpenAI-compatible servers (llama-server, vLLM, SGLang, another Tandem,
Ollama, LM Studio…) reached over HTTP, with the speculation figures they report.

No Qt here. :mod:`app.remote.client` talks to one server (model list, engine
recognition, a streaming chat call measured by Tandem); :mod:`app.remote.stream` reads
a stream's events within bounds into the reply and its result; :mod:`app.remote.figures` turns
what the server reports (a response's ``timings`` or ``metrics.speculative_decoding``, or
the change of its ``/metrics`` counters around a request) into acceptance figures;
:mod:`app.remote.prometheus` reads the Prometheus text those counters come in;
:mod:`app.remote.errors` holds the errors a user sees when a server is down, slow, answers
garbage or drops a stream; :mod:`app.remote.crossover` measures the serving crossover
(speculation on vs off on two servers as concurrency grows).
"""

from __future__ import annotations

from app.remote.client import (
    ChatMessage,
    Engine,
    RemoteClient,
    RemoteEvent,
    RemoteModel,
    ServerInfo,
)
from app.remote.errors import (
    RemoteError,
    ServerAuthError,
    ServerHTTPError,
    ServerProtocolError,
    ServerTimeoutError,
    ServerUnreachableError,
    StreamDroppedError,
)
from app.remote.figures import FigureScope, SpeculationFigures
from app.remote.stream import RemoteDelta, RemoteResult
from app.remote.prometheus import SpecCounters, parse_spec_counters

__all__ = [
    "ChatMessage",
    "Engine",
    "FigureScope",
    "RemoteClient",
    "RemoteDelta",
    "RemoteError",
    "RemoteEvent",
    "RemoteModel",
    "RemoteResult",
    "ServerAuthError",
    "ServerHTTPError",
    "ServerInfo",
    "ServerProtocolError",
    "ServerTimeoutError",
    "ServerUnreachableError",
    "SpecCounters",
    "SpeculationFigures",
    "StreamDroppedError",
    "parse_spec_counters",
]
