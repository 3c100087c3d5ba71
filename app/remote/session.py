"""A remote server as the session the chat service drives: the same events, the same
reply record as a local model.

:class:`RemoteSession` wraps a :class:`~app.remote.client.RemoteClient` and one model id.
Its :meth:`~RemoteSession.chat` takes the engine's arguments (messages, sampling,
speculation, cancel event) and yields the engine's events
(:class:`~app.engine.events.TextDelta`, then one :class:`~app.engine.reply.ReplyRecord`), so
:class:`~app.chat.service.ChatService` streams, stores and cancels a remote reply
exactly as a local one. The reply's :class:`~app.engine.stats.SpecStats` carries what
Tandem measured on the stream (tokens, TTFT, decode time) and the server's speculation
counts; everything that only the remote engine reports (its name, method, k, the scope
of its figures, τ over drafting rounds, its own tok/s) sits in ``stats.extra["remote"]``
(:func:`remote_extra`), so a stored reply keeps it.

Speculation settings of the window do not reach the server (it speculates as it was
started); sampling settings do (temperature, top-p, top-k and min-p where the server
takes them, seed, max tokens, stop strings).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from app.engine.chat import ChatMessage
from app.engine.events import Event, TextDelta
from app.engine.reply import ReplyRecord, ReplyRequest, context_full_note
from app.engine.stats import SpecStats, draft_length_advice
from app.options import SamplingParams, SpecMode, SpeculationConfig
from app.remote.client import RemoteClient, ServerInfo
from app.remote.stream import RemoteDelta, RemoteResult
from app.remote.errors import RemoteError, StreamDroppedError


def remote_extra(info: ServerInfo, model: str, result: RemoteResult) -> dict[str, Any]:
    """What the gauge, the history and ``--json`` keep about a remote reply (JSON-ready).

    Keys: ``engine``, ``version``, ``base_url``, ``model``, ``method`` and ``draft_max``
    (None: the server does not say), ``figures`` (:meth:`SpeculationFigures.to_dict
    <app.remote.figures.SpeculationFigures.to_dict>`, None when the server reported
    nothing about speculation), ``decode_tps`` and ``server_decode_tps`` (tokens/s),
    ``ttft_s``, ``advice`` (:func:`~app.engine.stats.draft_length_advice`).
    """
    figures = result.figures
    k = info.draft_max
    advice = None
    if figures is not None and figures.drafts is not None:
        advice = draft_length_advice(figures.mean_acceptance_length, k, figures.drafts)
    return {
        "engine": info.engine.value,
        "version": info.version,
        "base_url": info.base_url,
        "model": model,
        "method": info.speculation_method,
        "draft_max": k,
        "figures": figures.to_dict() if figures is not None else None,
        "decode_tps": result.decode_tps,
        "server_decode_tps": result.server_decode_tps,
        "ttft_s": result.ttft,
        "token_count_source": result.token_count_source,
        "advice": advice,
    }


#: the draft length assumed for a speculating server that does not say its k
#: (llama-server's default --draft-max)
DRAFT_ROOM = 16

#: said before a remote reply's context-full note: the window is the server's
SERVER_CONTEXT = ("The server sets its context window where it starts (llama-server's -c, "
                  "split among its -np slots; vLLM's --max-model-len; another Tandem's "
                  "Context length): Tandem's own Context length does not change it.")


def context_length(info: ServerInfo, model: str) -> int | None:
    """The context window of ``model`` on the server, in tokens, where the server said
    (:attr:`~app.remote.client.RemoteModel.context_length`), else None."""
    return next((m.context_length for m in info.models if m.id == model), None)


def remote_stats(info: ServerInfo, model: str, result: RemoteResult) -> SpecStats:
    """The reply record's statistics for a remote reply (see the module docstring).

    ``proposed``/``verified`` are the server's draft tokens, ``accepted`` its accepted
    ones, ``draft_rounds`` its drafts, ``accepted_at`` its per-position counts with
    ``verified_at`` = drafts at every position (the server counts rounds, not
    verifications per position). ``rounds`` stays 0: the server does not say how many
    plain rounds it ran, so the local τ (emitted / rounds) is not computed from it.
    """
    f = result.figures
    drafts = f.drafts if f is not None and f.drafts is not None else 0
    per_pos = f.accepted_per_pos if f is not None else ()
    return SpecStats(
        mode=SpecMode.OFF,
        draft_max=info.draft_max or 0,
        n_ctx=context_length(info, model) or 0,
        prompt_tokens=result.prompt_tokens or 0,
        emitted=result.n_tokens,
        draft_rounds=drafts,
        proposed=f.draft_tokens if f is not None else 0,
        verified=f.draft_tokens if f is not None else 0,
        accepted=f.accepted if f is not None else 0,
        accepted_at=tuple(per_pos),
        verified_at=(drafts,) * len(per_pos) if drafts else (),
        ttft=result.ttft,
        prefill_time=result.ttft,
        decode_time=result.decode_time,
        total_time=result.total_time,
        extra={"remote": remote_extra(info, model, result)},
    )


def request_fields(sampling: SamplingParams) -> dict[str, Any]:
    """The keyword arguments of :meth:`RemoteClient.stream_chat` (and
    ``stream_completion``) that carry ``sampling``: OpenAI's fields, and llama-server's
    ``top_k``, ``min_p`` and ``repeat_penalty`` in ``extra`` (a new dict each call); a
    negative seed (random) is not sent, so the server draws one."""
    return {"max_tokens": sampling.max_tokens, "temperature": sampling.temperature,
            "top_p": sampling.top_p, "seed": sampling.seed if sampling.seed >= 0 else None,
            "stop": tuple(sampling.stop),
            "extra": {"top_k": sampling.top_k, "min_p": sampling.min_p,
                      "repeat_penalty": sampling.repeat_penalty}}


class RemoteSession:
    """One model on one server, driven like a local session.

    Args:
        client: the connection (closed by :meth:`close`).
        info: what :meth:`RemoteClient.identify` found.
        model: the model id requests name.
    """

    def __init__(self, client: RemoteClient, info: ServerInfo, model: str) -> None:
        self.client = client
        self.info = info
        self.model = model
        self.closed = False

    @property
    def name(self) -> str:
        """``model @ host`` for window titles and logs (never the API key, a password in
        the address as ``***``)."""
        return f"{self.model} @ {self.info.display_url}"

    def close(self) -> None:
        """Close the connection; the session cannot be used after."""
        self.closed = True
        self.client.close()

    def chat(self, messages: Sequence[ChatMessage], sampling: SamplingParams,
             speculation: SpeculationConfig, cancel: threading.Event,
             continuation: str = "") -> Iterator[Event]:
        """One reply to ``messages``: :class:`TextDelta` events, then its
        :class:`~app.engine.reply.ReplyRecord` (also when cancelled, with the text so
        far; its ``speculation`` is off: Tandem asks the server for none, and what the
        server did is in ``stats.extra["remote"]``). With ``continuation`` (the start of
        the reply, cut short before; only where :attr:`ServerInfo.can_continue
        <app.remote.client.ServerInfo.can_continue>`) it is sent as the
        last, assistant message with ``continue_final_message`` (vLLM's and
        llama-server's field), and the events carry the text after it.

        Raises:
            RemoteError: the server failed before the reply ended. A stream that broke
                raises :class:`StreamDroppedError` with the text received (the chat
                service keeps what it already streamed).
        """
        # the server speculates as it was started: ``speculation`` is only recorded
        asked = ReplyRequest(sampling, speculation, 0, tuple(messages))
        started_at = time.time()
        body = [{"role": m.role, "content": m.content} for m in messages]
        fields = request_fields(sampling)
        if continuation:
            body.append({"role": "assistant", "content": continuation})
            fields["extra"].update(continue_final_message=True, add_generation_prompt=False)
        n_chunks = 0
        for event in self.client.stream_chat(self.model, body, cancel=cancel, **fields):
            if isinstance(event, RemoteDelta):
                n_chunks += 1
                yield TextDelta(text=event.text, from_draft=False, t=event.t,
                                n_tokens=n_chunks)
            else:
                self.info = self._followed(event, cancel)
                yield self._finished(event, asked, started_at)

    def _followed(self, result: RemoteResult, cancel: threading.Event) -> ServerInfo:
        """What the server is after this reply: read again in full when the reply drafted
        although the server was found not to speculate (it was restarted with a drafter
        while connected: its method, k and metrics changed), else with the drafter and k
        the reply names (another Tandem), or filled in where they were unknown
        (:meth:`RemoteClient.refresh_speculation`). Best effort: a failed probe keeps
        what was known."""
        figures = result.figures
        if figures is not None and figures.draft_tokens > 0 and (
                self.info.speculation_method == "none"):
            try:
                return self.client.identify(cancel)
            except RemoteError:  # a stop (RemoteCancelledError) included
                return self.info
        info = self.client.refresh_speculation(self.info, result, cancel)
        return self.client.refresh_context(info, cancel)  # restarted with another -c

    def context_filled(self, result: RemoteResult, max_tokens: int) -> int | None:
        """The server's context window in tokens when ``result`` ended because it was
        full, else None: a ``length`` ending before the ``max_tokens`` asked for, with
        the prompt and the reply (the server's own counts) within one token of the
        context length the server reported for this model
        (:attr:`RemoteModel.context_length`), or within a draft of it when the server
        speculates (seen: usage 500 of a 512-token llama-server with n-gram drafts,
        whose log said n_tokens = 511 when it stopped: presumably the draft being
        checked, in its cache too). A server that does not report its context length,
        or a reply cut by a limit of the server's own well before the window
        (llama-server's ``--n-predict``), gives None."""
        n_ctx = context_length(self.info, self.model)
        if (n_ctx is None or result.finish_reason != "length" or result.overran
                or result.token_count_source == "chunks" or result.prompt_tokens is None
                or result.n_tokens >= max_tokens):
            return None
        drafting = self.info.speculation_method not in (None, "none") or (
            result.figures is not None and result.figures.draft_tokens > 0)
        room = 1 + ((self.info.draft_max or DRAFT_ROOM) if drafting else 0)
        return n_ctx if result.prompt_tokens + result.n_tokens >= n_ctx - room else None

    def _finished(self, result: RemoteResult, asked: ReplyRequest,
                  started_at: float) -> ReplyRecord:
        stats = remote_stats(self.info, self.model, result)
        notes = []
        if result.overran:
            notes.append(f"The server kept writing past the {asked.sampling.max_tokens} "
                         "tokens asked for (max tokens): Tandem stopped reading there.")
        if result.figures is None:
            notes.append("The server reported nothing about speculation for this reply.")
        note = " ".join(notes) or None
        n_ctx = self.context_filled(result, asked.sampling.max_tokens)
        if n_ctx is not None:  # said last: the ending is read from it, as a local reply's
            note = "\n".join(filter(None, (note, SERVER_CONTEXT, context_full_note(n_ctx))))
        return ReplyRecord(
            request=dataclasses.replace(asked, prompt_tokens=stats.prompt_tokens),
            speculation=SpeculationConfig(mode=SpecMode.OFF), reason=result.finish_reason,
            text=result.text, token_ids=(), token_times=(), stats=stats,
            seed=asked.sampling.seed, note=note, started_at=started_at)


__all__ = ["RemoteSession", "StreamDroppedError", "remote_extra", "remote_stats",
           "request_fields"]
