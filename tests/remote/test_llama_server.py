"""The remote client against a real llama-server (built from the app's llama.cpp) with
n-gram speculation and ``--metrics``, started once for this module on 127.0.0.1."""

from __future__ import annotations

import threading

import pytest

from app.remote import Engine, RemoteClient, RemoteDelta, RemoteResult
from tests.remote.llama_server import LlamaServer

#: an answer that repeats its prompt, so the n-gram drafter drafts and gets accepted
PROMPT = "Copy this list exactly, line by line:\n" + "apple banana cherry\n" * 6
MESSAGES = [{"role": "user", "content": PROMPT}]


@pytest.fixture
def client(llama_server: LlamaServer) -> RemoteClient:
    with RemoteClient(llama_server.base_url + "/v1") as c:
        yield c  # type: ignore[misc]


@pytest.fixture
def fresh_client(fresh_llama_server: LlamaServer) -> RemoteClient:
    """A client of a server that has not seen :data:`PROMPT` (see the fixture)."""
    with RemoteClient(fresh_llama_server.base_url + "/v1") as c:
        yield c  # type: ignore[misc]


def test_identify_recognises_llama_server_and_its_drafter(fresh_client: RemoteClient) -> None:
    client = fresh_client
    info = client.identify()
    assert info.engine is Engine.LLAMA_SERVER
    assert info.version == "b1-0c1e570"
    assert info.metrics_prefix == "llamacpp"
    assert [m.id for m in info.models] and info.models[0].owned_by == "llamacpp"
    # before any request /props shows only the default settings, and /metrics has no
    # per-position series before the first accepted draft: after a reply that drafted,
    # /slots names the drafter and the series give k
    first = client.chat(info.models[0].id, MESSAGES, max_tokens=48, temperature=0)
    assert first.figures is not None and first.figures.accepted > 0
    info = client.identify()
    assert info.speculation_method == "ngram-simple"
    assert info.draft_max is not None and info.draft_max >= 1


def test_streamed_reply_carries_tandem_timing_and_server_figures(
        fresh_client: RemoteClient) -> None:
    client = fresh_client
    model = client.models()[0].id
    events = list(client.stream_chat(model, MESSAGES, max_tokens=48, temperature=0))
    deltas = [e for e in events if isinstance(e, RemoteDelta)]
    result = events[-1]
    assert isinstance(result, RemoteResult)
    assert all(isinstance(e, RemoteDelta) for e in events[:-1])
    assert "".join(d.text for d in deltas) == result.text and result.text
    assert [d.t for d in deltas] == sorted(d.t for d in deltas)
    assert result.finish_reason in ("stop", "length")
    assert result.token_count_source == "usage"
    assert result.server_timings is not None
    assert result.n_tokens == result.server_timings["predicted_n"]
    assert result.ttft == deltas[0].t and result.decode_time == deltas[-1].t - deltas[0].t
    assert result.decode_tps is not None and result.decode_tps > 0
    figures = result.figures
    assert figures is not None, "llama-server with --metrics reports speculation"
    # this prompt makes the n-gram drafter draft; the /metrics change is this request's
    assert figures.draft_tokens > 0
    assert figures.source == "response+metrics" and figures.scope == "request"
    assert figures.draft_tokens == result.server_timings["draft_n"]
    assert figures.accepted == result.server_timings["draft_n_accepted"]
    assert figures.drafts is not None and figures.drafts > 0
    assert sum(figures.accepted_per_pos) == figures.accepted
    assert figures.mean_acceptance_length == pytest.approx(1 + figures.accepted / figures.drafts)


def test_cancel_closes_the_stream_and_keeps_the_text(client: RemoteClient) -> None:
    model = client.models()[0].id
    cancel = threading.Event()
    received: list[str] = []
    result = None
    for event in client.stream_chat(model, MESSAGES, max_tokens=200, temperature=0,
                                    cancel=cancel, scrape_metrics=False):
        if isinstance(event, RemoteDelta):
            received.append(event.text)
            if len(received) == 3:
                cancel.set()
        else:
            result = event
    assert result is not None and result.finish_reason == "cancelled"
    assert result.text == "".join(received) and len(received) == 3
    after = client.chat(model, MESSAGES, max_tokens=4, temperature=0, scrape_metrics=False)
    assert after.text  # the server goes on serving after a client hung up


def test_a_server_restarted_with_a_drafter_is_followed(smollm_path) -> None:  # type: ignore[no-untyped-def]
    """A llama-server restarted with ``--spec-type`` while Tandem stays connected: the
    first reply that drafts makes the session read the server again, so its drafter is
    named without a manual reconnect."""
    from app.engine.chat import ChatMessage
    from app.options import SamplingParams, SpeculationConfig
    from app.remote.session import RemoteSession
    from tests.remote.conftest import require_llama_server
    from tests.remote.llama_server import SPEC_ARGS

    exe = require_llama_server()
    sampling = SamplingParams(temperature=0.0, max_tokens=48)
    messages = [ChatMessage("user", PROMPT)]

    def reply(session: RemoteSession) -> None:
        for _ in session.chat(messages, sampling, SpeculationConfig(), threading.Event()):
            pass

    with LlamaServer(exe, smollm_path, ("--metrics",)) as plain:
        port = plain.port
        client = RemoteClient(plain.base_url)
        info = client.identify()
        session = RemoteSession(client, info, info.models[0].id)
        reply(session)
        assert session.info.speculation_method in ("none", None)
    try:
        with LlamaServer(exe, smollm_path, SPEC_ARGS, port=port):
            reply(session)
            assert session.info.speculation_method == "ngram-simple"
            assert session.info.metrics_prefix == "llamacpp"
    finally:
        session.close()


def test_a_reply_cut_by_the_servers_full_context_says_so(smollm_path) -> None:  # type: ignore[no-untyped-def]
    """A reply that fills llama-server's context window (``-c 256``, read from
    ``/props``) ends with the context-full note, so the chat says so and offers no
    Continue; one that ends at the max tokens asked for does not."""
    from app.engine.chat import ChatMessage
    from app.engine.reply import ReplyRecord, can_continue, ended_at_full_context
    from app.options import SamplingParams, SpeculationConfig
    from app.remote.session import RemoteSession
    from app.ui.gauge.gauge_panel import remote_rows
    from tests.remote.conftest import require_llama_server

    exe = require_llama_server()
    # about 170 tokens to copy, in a 256-token context
    messages = [ChatMessage("user", "Copy this list exactly, line by line:\n"
                            + "apple banana cherry\n" * 40)]

    def reply(session: RemoteSession, max_tokens: int) -> ReplyRecord:
        sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        *_, record = session.chat(messages, sampling, SpeculationConfig(), threading.Event())
        assert isinstance(record, ReplyRecord)
        return record

    with LlamaServer(exe, smollm_path, ctx=256) as server, \
            RemoteClient(server.base_url + "/v1") as client:
        info = client.identify()
        assert [m.context_length for m in info.models] == [256]
        session = RemoteSession(client, info, info.models[0].id)
        full = reply(session, 1000)
        assert full.reason == "length" and full.stats.emitted < 1000
        assert full.note is not None and ended_at_full_context(full.note)
        assert "(256 tokens) is full" in full.note
        assert not can_continue(full.reason, full.text, full.note)
        # the gauge's "Context used" for it: the server's counts in its window
        assert full.stats.n_ctx == 256
        assert remote_rows(full.stats, full.stats.extra["remote"])["context"] == (
            "256 / 256 tokens (100%)")
        short = reply(session, 8)
        assert short.reason == "length" and not ended_at_full_context(short.note)
        assert can_continue(short.reason, short.text, short.note)


def test_the_servers_window_is_read_again_after_each_reply(smollm_path) -> None:  # type: ignore[no-untyped-def]
    """llama-server restarted with another ``-c`` while connected: the next reply's
    figures and its context-full check use the new window."""
    from app.engine.chat import ChatMessage
    from app.options import SamplingParams, SpeculationConfig
    from app.remote.session import RemoteSession
    from tests.remote.conftest import require_llama_server

    exe = require_llama_server()
    with LlamaServer(exe, smollm_path, ctx=256) as first:
        port = first.port
        client = RemoteClient(first.base_url + "/v1")
        info = client.identify()
    session = RemoteSession(client, info, info.models[0].id)
    try:
        assert [m.context_length for m in session.info.models] == [256]
        with LlamaServer(exe, smollm_path, ctx=512, port=port):
            *_, record = session.chat([ChatMessage("user", "Say hi.")],
                                      SamplingParams(temperature=0.0, max_tokens=4),
                                      SpeculationConfig(), threading.Event())
            assert [m.context_length for m in session.info.models] == [512]
            assert record.stats.n_ctx == 512
    finally:
        session.close()
