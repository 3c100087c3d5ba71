"""A streamed reply as a server sends it: server-sent events read line by line within
bounds, the JSON in them, and the reply they add up to.

:class:`RemoteDelta` (text as it arrives) and :class:`RemoteResult` (the end of the
reply, with the rates Tandem measured and the server's own figures) are what
:meth:`~app.remote.client.RemoteClient.stream_chat` yields. :func:`bounded_lines` cuts a
stream into lines without holding more than a line's limit; :class:`StreamState` reads
the OpenAI chunks from them, stops a server that overruns ``max_tokens`` or sends no text,
and keeps what arrived when a stream breaks (:class:`~app.remote.errors.StreamDroppedError`).
:func:`loads` reads a server's JSON with ``NaN`` and ``Infinity`` as null.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from app.formatting import JSONTooDeepError, loads_json
from app.remote.errors import ServerProtocolError, StreamDroppedError
from app.remote.figures import SpeculationFigures, count
from app.remote.prometheus import MAX_POSITIONS

#: lines of a stream without reply text Tandem reads per token asked (``max_tokens``),
#: and :data:`NO_TEXT_LINES_EXTRA` more: role, usage and finish chunks, reasoning chunks,
#: keep-alive and progress comments, the blank lines between events. A server that sends
#: more is not sending a reply. :data:`NO_TEXT_LINES_UNBOUNDED` without ``max_tokens``.
NO_TEXT_LINES_PER_TOKEN = 16
NO_TEXT_LINES_EXTRA = 10_000
NO_TEXT_LINES_UNBOUNDED = 1_000_000
#: characters a reply may carry per token asked (``max_tokens``) before Tandem stops
#: reading a server that ignores the limit (the longest tokens of common vocabularies,
#: runs of spaces in code, are well under this)
MAX_CHARS_PER_TOKEN = 256
#: the most bytes Tandem reads of an answer that is not a stream (the model list,
#: ``/props``, ``/metrics``, an error, a whole completion): a server that sends more is
#: not read further
MAX_BODY_BYTES = 8 * 2**20

log = logging.getLogger(__name__)

RemoteFinish = Literal["stop", "length", "cancelled"]


@dataclass(frozen=True, slots=True)
class RemoteDelta:
    """Reply text as it arrived. ``t``: seconds since the request was sent."""

    text: str
    t: float


@dataclass(frozen=True, slots=True)
class RemoteResult:
    """The end of one streamed reply. Always the last event of :meth:`RemoteClient.stream_chat`.

    Attributes:
        text: the whole reply.
        finish_reason: ``stop`` (end of generation or a stop string), ``length``
            (max_tokens or the context), ``cancelled`` (the caller's cancel event).
        model: the model the server says answered.
        n_tokens: reply tokens: the server's ``usage.completion_tokens``, else its
            ``timings.predicted_n``, else the number of text chunks received
            (``token_count_source`` says which).
        token_count_source: ``usage``, ``timings`` or ``chunks``.
        prompt_tokens: the server's ``usage.prompt_tokens``, None when not reported.
        ttft: seconds from sending the request to the first reply text.
        decode_time: seconds from the first to the last reply text.
        total_time: seconds from sending the request to the end of the stream.
        figures: speculation figures (:mod:`app.remote.figures`); None when the server
            reported none.
        server_timings: llama-server's ``timings`` object as sent, None when absent.
        overran: the server kept sending past the ``max_tokens`` asked for (more text
            chunks than that, or more than :data:`MAX_CHARS_PER_TOKEN` characters per
            token asked), so Tandem stopped reading; ``finish_reason`` is ``length``.
        speculation_method, draft_max: the drafter (``none`` when off) and k the
            response itself names (another Tandem's ``tandem`` object: ``mode`` and
            ``draft_max``); None when it names none.
    """

    text: str
    finish_reason: RemoteFinish
    model: str
    n_tokens: int
    token_count_source: Literal["usage", "timings", "chunks"]
    prompt_tokens: int | None
    ttft: float
    decode_time: float
    total_time: float
    figures: SpeculationFigures | None = None
    server_timings: dict[str, Any] | None = None
    overran: bool = False
    speculation_method: str | None = None
    draft_max: int | None = None

    @property
    def decode_tps(self) -> float | None:
        """Decode tokens per second measured on the stream: (n_tokens − 1) / the time
        from the first to the last text (the first token is the prefill's). None with
        fewer than two tokens."""
        if self.n_tokens < 2 or self.decode_time <= 0:
            return None
        return (self.n_tokens - 1) / self.decode_time

    @property
    def end_to_end_tps(self) -> float | None:
        """Reply tokens / seconds from sending the request to the end of the stream."""
        return self.n_tokens / self.total_time if self.total_time > 0 else None

    @property
    def server_decode_tps(self) -> float | None:
        """The server's own decode rate (``timings.predicted_per_second``), if sent."""
        value = (self.server_timings or {}).get("predicted_per_second")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value) if 0 <= value < 1e9 else None  # nonsense is not reported

    def to_dict(self) -> dict[str, Any]:
        """The result's figures, JSON-ready (seconds and tokens/s; None where unknown)."""
        return {
            "finish_reason": self.finish_reason,
            "model": self.model,
            "n_tokens": self.n_tokens,
            "token_count_source": self.token_count_source,
            "prompt_tokens": self.prompt_tokens,
            "ttft_s": self.ttft,
            "decode_s": self.decode_time,
            "total_s": self.total_time,
            "decode_tps": self.decode_tps,
            "end_to_end_tps": self.end_to_end_tps,
            "server_decode_tps": self.server_decode_tps,
            "speculation": self.figures.to_dict() if self.figures else None,
            "server_timings": self.server_timings,
        }


def _no_constant(name: str) -> None:
    """``NaN``, ``Infinity`` and ``-Infinity`` (not JSON, though Python writes them) are
    read as null: a figure that is not a number is not reported."""
    return None


def _finite(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None  # 1e999: not a number either


def loads(raw: str | bytes) -> Any:
    """JSON a server sent, parsed: ``NaN``, ``±Infinity`` and numbers past a float's
    range read as None.

    Raises:
        ValueError: not JSON (invalid UTF-8 included), or nested deeper than Python's
            recursion limit lets it parse (``[[[[…`` 100,000 deep: :class:`JSONTooDeepError`).
    """
    return loads_json(raw, parse_constant=_no_constant, parse_float=_finite)


class LineTooLongError(ValueError):
    """A line of a server-sent event stream grew past its limit (:func:`bounded_lines`).

    Attributes:
        data: the line is a ``data:`` line that starts a JSON object (a chunk, whose
            reply text a server may overrun ``max_tokens`` with); else it is a comment,
            another field, or not a chunk at all.
    """

    def __init__(self, message: str, *, data: bool = True) -> None:
        super().__init__(message)
        self.data = data


_EOL = re.compile(r"\r\n|\r|\n")


def _is_object_data(start: str) -> bool:
    """``start`` (a line's first characters) opens a ``data:`` line with a JSON object
    (or with nothing yet to tell)."""
    rest = start[5:].lstrip(" ")
    return start.startswith("data:") and (rest.startswith("{") or not rest)


def bounded_lines(texts: Iterator[str], limit: int) -> Iterator[str]:
    """The lines of a server-sent event stream (ended by CRLF, CR or LF, as the format
    says; not by the other characters ``str.splitlines`` takes for line ends), read from
    ``texts`` pieces of any size, each line at most ``limit`` characters.

    Raises:
        LineTooLongError: a line grew past ``limit`` before it ended (memory stays
            bounded by it, where a reader that waits for the line's end holds it all).
    """
    pending: list[str] = []
    size = 0
    after_cr = False  # the last piece ended with CR: an LF first in the next one is its pair
    for text in texts:
        if after_cr and text.startswith("\n"):
            text = text[1:]
        after_cr = text.endswith("\r")
        start = 0
        for m in _EOL.finditer(text):
            pending.append(text[start:m.start()])
            yield "".join(pending)
            pending, size, start = [], 0, m.end()
        if start < len(text):
            pending.append(text[start:])
            size += len(text) - start
            if size > limit:
                raise LineTooLongError(f"a line longer than {limit} characters",
                                       data=_is_object_data("".join(pending[:8])[:16]))
    if pending:
        yield "".join(pending)


def tandem_mode(mode: Any) -> str | None:
    """Another Tandem's drafter mode (``prompt-lookup``, ``draft-model``…) as a method
    name: ``none`` for ``off``; None when it is not a short word."""
    if not isinstance(mode, str) or not mode or len(mode) > 64:
        return None
    return "none" if mode == "off" else mode


def reported_draft_max(value: Any) -> int | None:
    """A draft length k a server reports: a count from 1 to :data:`MAX_POSITIONS`, else
    None."""
    k = count(value)
    return k if k is not None and 1 <= k <= MAX_POSITIONS else None


@dataclass
class StreamState:
    """What one stream has delivered so far (the reader's working state)."""

    model: str
    text: str = ""
    chunks: int = 0
    t_first: float | None = None
    t_last: float | None = None
    finish: str | None = None
    finished: bool = False
    cancelled: bool = False
    final_fields: dict[str, Any] = field(default_factory=dict)
    #: the most text chunks and characters to read (max_tokens asked); None: no limit
    max_chunks: int | None = None
    max_chars: int | None = None
    overran: bool = False

    @property
    def started(self) -> bool:
        return self.t_first is not None or bool(self.final_fields)

    def _garbage(self, base_url: str, what: str) -> StreamDroppedError:
        return StreamDroppedError(f"{base_url} sent something that is not an "
                                  f"OpenAI-compatible stream ({what}); the text "
                                  "received so far is kept.", partial_text=self.text)

    def read_events(self, lines: Iterator[str], t0: float,
                    cancel: threading.Event | None, base_url: str) -> Iterator[RemoteDelta]:
        """Server-sent events: ``data:`` lines joined until a blank line, ``[DONE]``
        ends the stream; comments and other fields are ignored. An event (or one
        ``data:`` line) longer than :meth:`line_limit` ends the reading: as an overrun of
        ``max_tokens`` when one was asked, else as garbage.

        Raises:
            StreamDroppedError: garbage: a chunk that is not OpenAI's, another line
                longer than :meth:`line_limit` (text without SSE framing, an endless
                comment or field), or more lines without reply text than
                :meth:`no_text_limit` (events without text, comments or blank lines
                without end; after a finish reason the reading just stops there); an
                error event.
        """
        data: list[str] = []
        size, limit = 0, self.line_limit()
        n_lines, no_text_limit = 0, self.no_text_limit()
        try:
            for line in lines:
                if cancel is not None and cancel.is_set():
                    self.cancelled = True
                    return
                n_lines += 1
                if n_lines - 2 * self.chunks > no_text_limit:  # a text event: 2 lines
                    if self.finished:
                        return  # the reply is complete; what follows is not read
                    raise self._garbage(base_url, f"more than {no_text_limit} lines "
                                        "without reply text")
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                    size += len(data[-1])
                    if size > limit:
                        raise LineTooLongError(f"an event longer than {limit} characters",
                                               data=_is_object_data("data:" + data[0][:8]))
                    continue
                if line.strip() or not data:
                    continue  # a comment, another field, or a blank line between events
                payload, data, size = "\n".join(data), [], 0
                if payload.strip() == "[DONE]":
                    self.finished = True
                    return
                delta = self._chunk(payload, t0, base_url)
                if delta is not None:
                    yield delta
                if self.overran:
                    return  # the caller closes the connection: the server stops
        except LineTooLongError as exc:
            if self.max_chars is None or not exc.data:
                raise self._garbage(base_url, str(exc)) from None
            self._overrun()
            return
        if data and "\n".join(data).strip() == "[DONE]":
            self.finished = True

    def line_limit(self) -> int:
        """The longest line or event read, characters: four times the reply's character
        bound and 64 KiB more (an event's JSON around its text), or
        :data:`MAX_BODY_BYTES` without ``max_tokens``."""
        return MAX_BODY_BYTES if self.max_chars is None else 4 * self.max_chars + 2**16

    def no_text_limit(self) -> int:
        """The most lines without reply text read: :data:`NO_TEXT_LINES_PER_TOKEN` per
        token asked and :data:`NO_TEXT_LINES_EXTRA` more, or
        :data:`NO_TEXT_LINES_UNBOUNDED` without ``max_tokens``."""
        if self.max_chunks is None:
            return NO_TEXT_LINES_UNBOUNDED
        return NO_TEXT_LINES_PER_TOKEN * self.max_chunks + NO_TEXT_LINES_EXTRA

    def _overrun(self) -> None:
        self.overran = True
        self.finish, self.finished = "length", True
        log.warning("the server sent more than max_tokens (%s); stopped reading",
                    self.max_chunks)

    def _take_fields(self, body: dict[str, Any]) -> None:
        """The figures a chunk or a whole answer carries: ``timings`` and ``usage`` (their
        numbers and words only: a nested value is dropped), ``metrics`` and another
        Tandem's ``tandem`` object; and the model that answered (a name of at most 256
        characters)."""
        for key in ("timings", "usage", "metrics", "tandem"):
            value = body.get(key)
            if isinstance(value, dict):
                self.final_fields[key] = value if key in ("metrics", "tandem") else {
                    k: v for k, v in value.items()
                    if v is None or isinstance(v, (str, int, float, bool))}
        model = body.get("model")
        if isinstance(model, str) and 0 < len(model) <= 256:
            self.model = model

    def _chunk(self, payload: str, t0: float, base_url: str) -> RemoteDelta | None:
        try:
            chunk = loads(payload)
        except JSONTooDeepError as exc:
            raise self._garbage(base_url, str(exc)) from None
        except ValueError:
            raise self._garbage(base_url, f"not JSON: {payload[:80]!r}") from None
        if not isinstance(chunk, dict):
            raise self._garbage(base_url, "a chunk that is not an object")
        if "error" in chunk:
            err = chunk["error"]
            message = err.get("message") if isinstance(err, dict) else err
            raise StreamDroppedError(f"{base_url} reported an error during the reply: "
                                     f"{message[:300] if isinstance(message, str) else '?'}"
                                     "; the text received so far is kept.",
                                     partial_text=self.text)
        self._take_fields(chunk)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise self._garbage(base_url, "a chunk without 'choices'")
        if not choices:
            return None
        choice = choices[0]
        if not isinstance(choice, dict):
            raise self._garbage(base_url, "a choice that is not an object")
        if choice.get("finish_reason"):
            reason = choice["finish_reason"]
            self.finish = reason if isinstance(reason, str) else "stop"
            self.finished = True  # some servers send [DONE] later or not at all
        delta = choice.get("delta")
        content = (delta.get("content") if isinstance(delta, dict)
                   else choice.get("text"))  # a completion stream's chunks carry "text"
        if not isinstance(content, str) or not content:
            return None
        now = time.perf_counter() - t0
        if self.max_chunks is not None and self.chunks >= self.max_chunks:
            self._overrun()  # a chunk carries at least one token: this one is past them
            return None
        if self.max_chars is not None and len(self.text) + len(content) > self.max_chars:
            content = content[: max(0, self.max_chars - len(self.text))]
            self._overrun()
            if not content:
                return None
        if self.t_first is None:
            self.t_first = now
        self.t_last = now
        self.chunks += 1
        self.text += content
        return RemoteDelta(text=content, t=now)

    def whole_response(self, raw: bytes, t0: float, base_url: str) -> Iterator[RemoteDelta]:
        """A server that answered one JSON completion although a stream was asked for.

        Raises:
            ServerProtocolError: ``raw`` is not a chat or text completion (not JSON,
                nested too deep to read, no ``choices[0]`` with a text).
        """
        try:
            body = loads(raw)
            choice = body["choices"][0]
            content = (choice["message"]["content"] if "message" in choice
                       else choice["text"]) or ""
            if not isinstance(body, dict) or not isinstance(content, str):
                raise TypeError("not a completion")
        except (ValueError, KeyError, IndexError, TypeError):
            raise ServerProtocolError(f"{base_url} answered the chat request with JSON "
                                      "that is not a chat completion.") from None
        self._take_fields(body)
        reason = choice.get("finish_reason")
        self.finish = reason if isinstance(reason, str) and reason else "stop"
        self.finished = True
        now = time.perf_counter() - t0
        self.t_first = self.t_last = now
        if content:
            self.chunks = 1
            self.text = str(content)
            yield RemoteDelta(text=self.text, t=now)

    def result(self, t0: float, figures: SpeculationFigures | None) -> RemoteResult:
        """The stream's :class:`RemoteResult`. A token count the server reports that is
        not one (negative, absurd: :func:`~app.remote.figures.count`), or fewer tokens
        than the text chunks received, is taken as not reported: the next source counts
        the tokens."""
        total = time.perf_counter() - t0
        usage = self.final_fields.get("usage") or {}
        timings = self.final_fields.get("timings") or {}
        tandem = self.final_fields.get("tandem") or {}
        n_tokens, source = self.chunks, "chunks"
        for name, fields, key in (("usage", usage, "completion_tokens"),
                                  ("timings", timings, "predicted_n")):
            reported = count(fields.get(key), integer=True)
            if reported is not None and reported >= self.chunks:
                n_tokens, source = reported, name
                break
        finish: RemoteFinish = "cancelled" if self.cancelled else (
            "length" if self.finish == "length" else "stop")
        return RemoteResult(
            text=self.text, finish_reason=finish, model=self.model, n_tokens=n_tokens,
            token_count_source=source,  # type: ignore[arg-type]
            prompt_tokens=count(usage.get("prompt_tokens"), integer=True),
            ttft=self.t_first if self.t_first is not None else total,
            decode_time=(self.t_last - self.t_first)
            if self.t_first is not None and self.t_last is not None else 0.0,
            total_time=total, figures=figures,
            server_timings=timings or None,
            overran=self.overran,
            speculation_method=tandem_mode(tandem.get("mode")),
            draft_max=reported_draft_max(tandem.get("draft_max")),
        )
