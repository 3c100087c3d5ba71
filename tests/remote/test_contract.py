"""Recorded contract: the parsers read what real engines produced, byte for byte.

Each folder under ``tests/remote/data`` was written by ``bench/record_server_contract.py``
against a running engine (its ``manifest.json`` names the engine, its version and the
command). These tests need no server: they pin the field names, metric names and
stream framing the parsers rely on, so a change in an engine's output shows up as a
failing test when the fixtures are re-recorded for a new version.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.errors import ContextOverflowError
from app.remote import Engine, RemoteClient, RemoteResult
from app.remote.errors import ServerHTTPError
from app.remote.client import _llama_spec_types
from app.remote.stream import StreamState
from app.remote.figures import combine, from_response
from app.remote.prometheus import metric_prefixes, parse_spec_counters

DATA = Path(__file__).parent / "data"
LLAMA = DATA / "llama-server-b1-0c1e570"


def _stream(folder: Path) -> StreamState:
    state = StreamState(model="m")
    lines = iter((folder / "chat_stream.sse").read_text().splitlines())
    deltas = list(state.read_events(lines, 0.0, None, "http://recorded"))
    assert "".join(d.text for d in deltas) == state.text
    return state


def test_manifest_names_the_engine_and_version() -> None:
    manifest = json.loads((LLAMA / "manifest.json").read_text())
    assert manifest["engine"] == "llama-server"
    assert manifest["version"] == "b1-0c1e570"
    assert "--spec-type ngram-simple" in manifest["command"]
    assert "--metrics" in manifest["command"]
    props = json.loads((LLAMA / "props.json").read_text())
    assert props["build_info"] == manifest["version"]


def test_llama_server_stream_framing_and_final_timings() -> None:
    state = _stream(LLAMA)
    assert state.finished and state.finish == "length"
    usage = state.final_fields["usage"]
    timings = state.final_fields["timings"]
    assert usage["completion_tokens"] == timings["predicted_n"] == 60
    assert {"draft_n", "draft_n_accepted", "predicted_per_second", "prompt_ms"} <= set(timings)
    result = state.result(0.0, None)
    assert result.n_tokens == 60 and result.token_count_source == "usage"
    assert result.text.strip()


def test_llama_server_metrics_names_and_delta_match_the_response() -> None:
    before = parse_spec_counters((LLAMA / "metrics_before.txt").read_text())
    after = parse_spec_counters((LLAMA / "metrics_after_stream.txt").read_text())
    assert before is not None and after is not None
    assert after.prefix == "llamacpp"
    assert metric_prefixes((LLAMA / "metrics_after_stream.txt").read_text()) == {"llamacpp"}
    delta = after.minus(before)
    response = from_response(_stream(LLAMA).final_fields)
    assert response is not None and response.scope == "request"
    assert (delta.draft_tokens, delta.accepted) == (response.draft_tokens, response.accepted)
    assert delta.drafts > 0
    assert sum(delta.accepted_per_pos) == delta.accepted
    merged = combine(response, delta)
    assert merged is not None
    assert merged.source == "response+metrics" and merged.scope == "request"
    assert merged.mean_acceptance_length == pytest.approx(1 + delta.accepted / delta.drafts)
    assert merged.acceptance_rate == pytest.approx(response.accepted / response.draft_tokens)


def test_llama_server_metrics_text_names() -> None:
    text = (LLAMA / "metrics_after_stream.txt").read_text()
    for name in ("llamacpp:spec_decode_num_draft_tokens_total",
                 "llamacpp:spec_decode_num_accepted_tokens_total",
                 "llamacpp:spec_decode_num_drafts_total",
                 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"}'):
        assert name in text


def test_llama_server_non_streamed_response_carries_timings() -> None:
    body = json.loads((LLAMA / "chat.json").read_text())
    figures = from_response(body)
    before = parse_spec_counters((LLAMA / "metrics_after_stream.txt").read_text())
    after = parse_spec_counters((LLAMA / "metrics_after_chat.txt").read_text())
    assert before is not None and after is not None
    delta = after.minus(before)
    if figures is None:  # llama-server omits draft_n when the request drafted nothing
        assert delta.draft_tokens == 0
    else:
        assert (figures.draft_tokens, figures.accepted) == (delta.draft_tokens, delta.accepted)


def test_llama_server_props_and_slots_name_the_drafter() -> None:
    props = json.loads((LLAMA / "props.json").read_text())
    # /props reports the default settings before any request: no drafter named there
    assert _llama_spec_types(props["default_generation_settings"]) in ("none", "ngram-simple")
    slots = json.loads((LLAMA / "slots.json").read_text())
    used = [s for s in slots if "params" in s]
    assert used, "the slot that ran the requests shows its parameters"
    assert _llama_spec_types({"params": used[0]["params"]}) == "ngram-simple"
    assert all(s["speculative"] is True for s in slots)


@pytest.mark.parametrize(("body", "context"), [
    # llama-server (the vendored tools/server: server-common.cpp, server-task.cpp)
    ({"error": {"code": 400, "message": "request (2600 tokens) exceeds the available "
                "context size (2048 tokens), try increasing it",
                "type": "exceed_context_size_error", "n_prompt_tokens": 2600, "n_ctx": 2048}},
     True),
    # older llama-server builds: the same refusal without the count
    ({"error": {"code": 400, "message": "the request exceeds the available context size, "
                "try increasing it", "type": "exceed_context_size_error"}}, True),
    # vLLM's sentence (its error type is BadRequestError)
    ({"error": {"message": "This model's maximum context length is 2048 tokens. However, you "
                "requested 3000 tokens (2000 in the messages, 1000 in the completion).",
                "type": "BadRequestError", "param": None, "code": 400}}, True),
    # vLLM when the prompt fits but not with max_tokens
    ({"error": {"message": "'max_tokens' or 'max_completion_tokens' is too large: 8000. This "
                "model's maximum context length is 4096 tokens and your request has 2778 "
                "input tokens (8000 > 4096 - 2778).", "type": "BadRequestError",
                "code": 400}}, True),
    # OpenAI's code, as Tandem's own API answers
    ({"error": {"message": "The conversation does not fit.", "type": "invalid_request_error",
                "code": "context_length_exceeded"}}, True),
    ({"error": {"message": "temperature must be at least 0", "type": "BadRequestError"}}, False),
])
def test_a_context_refusal_is_told_from_other_bad_requests(body: dict, context: bool) -> None:
    client = RemoteClient("http://127.0.0.1:9")
    error = client._status_error(httpx.Response(400, json=body), "the chat request")
    assert isinstance(error, ServerHTTPError) and error.status == 400
    assert isinstance(error, ContextOverflowError) is context
    assert body["error"]["message"] in str(error)
    # llama-server's refusal is of the prompt alone: fewer reply tokens would not help
    prompt_alone = "exceeds the available context size" in body["error"]["message"]
    assert ("lower Max tokens" in str(error)) is (context and not prompt_alone)


def test_the_recorded_model_lists_and_props_give_the_context_length() -> None:
    """vLLM's ``max_model_len`` and another Tandem's ``meta.n_ctx`` as recorded; a value
    that is not a positive whole number of tokens is no context length."""
    from app.remote.client import _model_entry

    def first(folder: str) -> dict:  # type: ignore[type-arg]
        return json.loads((DATA / folder / "models.json").read_text())["data"][0]

    assert _model_entry(first("vllm-0.32.0")).context_length == 2048
    assert _model_entry(first("tandem-0.1.0")).context_length == 512
    # llama-server's whole context; a slot's, which identify() prefers, is in /props
    assert _model_entry(first("llama-server-b1-0c1e570")).context_length == 2048
    props = json.loads((LLAMA / "props.json").read_text())
    assert props["default_generation_settings"]["n_ctx"] == 2048  # one slot
    for bad in (True, 0, -5, 2**40, "2048", 2048.0, None):
        assert _model_entry({"id": "m", "max_model_len": bad}).context_length is None


@contextlib.contextmanager
def _replayed_llama(folder: Path, props: dict) -> Iterator[RemoteClient]:  # type: ignore[type-arg]
    """A client of the broken server replaying the recorded llama-server answers from a
    copy in ``folder``, its ``/props`` being ``props`` (the test may rewrite or remove
    ``folder / "props.json"`` as it goes)."""
    from tests.remote.broken_server import BrokenServer

    for name in ("models.json", "slots.json"):
        (folder / name).write_bytes((LLAMA / name).read_bytes())
    (folder / "props.json").write_text(json.dumps(props))
    server = BrokenServer()
    server.mode, server.replay = "replay", folder
    try:
        with RemoteClient(server.base_url + "/v1") as client:
            yield client
    finally:
        server.stop()


def test_a_llama_server_slot_window_from_props_wins_over_the_model_list(tmp_path: Path) -> None:
    """llama-server's ``/props`` gives one slot's window (what one request may fill): it
    is taken over the model list's ``meta.n_ctx``, which some builds give for the whole
    context. The recorded answers, replayed, with the two numbers made to differ."""
    props = json.loads((LLAMA / "props.json").read_text())
    props["default_generation_settings"]["n_ctx"] = 1024
    props["build_info"] = {"x": 1}  # not a word: no version is shown
    models = json.loads((LLAMA / "models.json").read_text())
    assert models["data"][0]["meta"]["n_ctx"] == 2048
    with _replayed_llama(tmp_path, props) as client:
        info = client.identify()
        assert [m.context_length for m in info.models] == [1024]
        assert info.version is None
        props["build_info"] = "b1\n\x1b[31mred"  # one line, its escape written out
        (tmp_path / "props.json").write_text(json.dumps(props))
        assert client.identify().version == "b1 \\x1b[31mred"
        (tmp_path / "props.json").unlink()  # no /props: the model list's figure
        assert [m.context_length for m in client.identify().models] == [2048]


def _ended(finish: str, n_tokens: int, prompt: int | None, *, source: str = "usage",
           overran: bool = False) -> RemoteResult:
    return RemoteResult(text="x", finish_reason=finish, model="m",  # type: ignore[arg-type]
                        n_tokens=n_tokens, token_count_source=source,  # type: ignore[arg-type]
                        prompt_tokens=prompt, ttft=0.1, decode_time=1.0, total_time=1.1,
                        overran=overran)


@pytest.mark.parametrize(("result", "filled"), [
    (_ended("length", 56, 200), True),  # as llama-server ended it: 256 of 256
    (_ended("length", 55, 200), True),  # one short: the last token is not kept
    (_ended("length", 54, 200), False),  # room left: a limit of the server's own
    (_ended("stop", 56, 200), False),
    (_ended("length", 100, 200), False),  # the max tokens asked for were reached
    (_ended("length", 56, None), False),  # no prompt count: cannot tell
    (_ended("length", 56, 200, source="chunks"), False),  # counted from chunks: not tokens
    (_ended("length", 56, 200, overran=True), False),  # Tandem stopped reading
])
def test_a_reply_fills_the_servers_context_only_by_its_own_counts(result: RemoteResult,
                                                                   filled: bool) -> None:
    from app.remote.client import RemoteModel, ServerInfo
    from app.remote.session import RemoteSession

    info = ServerInfo(base_url="http://x", engine=Engine.LLAMA_SERVER, version=None,
                      models=(RemoteModel("m", context_length=256),))
    session = RemoteSession(RemoteClient("http://x"), info, "m")
    try:
        assert session.context_filled(result, 100) == (256 if filled else None)
        other = RemoteSession(RemoteClient("http://x"), ServerInfo(
            base_url="http://x", engine=Engine.LLAMA_SERVER, version=None, models=(RemoteModel("m"),)), "m")
        assert other.context_filled(result, 100) is None  # the server said no window
        other.close()
    finally:
        session.close()


def test_a_speculating_server_fills_its_context_a_draft_early() -> None:
    """llama-server stops when the accepted tokens and a draft being checked fill the
    window (its log said n_tokens = 511 where usage counted 500 of 512): within k of it
    counts as full when the server speculates (k as it says, else 16), not otherwise."""
    from app.remote.client import RemoteModel, ServerInfo
    from app.remote.session import RemoteSession

    def filled(method: str | None, draft_max: int | None, prompt: int, n: int) -> int | None:
        info = ServerInfo(base_url="http://x", engine=Engine.LLAMA_SERVER, version=None,
                          models=(RemoteModel("m", context_length=512),),
                          speculation_method=method, draft_max=draft_max)
        session = RemoteSession(RemoteClient("http://x"), info, "m")
        try:
            return session.context_filled(_ended("length", n, prompt), 1000)
        finally:
            session.close()

    assert filled("ngram-simple", None, 440, 60) == 512  # 500: within the default 16
    assert filled("ngram-simple", 8, 440, 60) is None  # k 8: 12 short is not a draft
    assert filled("ngram-simple", 8, 440, 64) == 512
    assert filled("none", None, 440, 60) is None  # no drafts: one token of slack only
    assert filled(None, None, 440, 71) == 512


def test_the_servers_window_is_read_again_and_kept_when_it_cannot_be(tmp_path: Path) -> None:
    """After a reply the slot's window is read again from ``/props`` (a restart with
    another ``-c``); a server that does not answer it leaves what was known."""
    props = json.loads((LLAMA / "props.json").read_text())
    with _replayed_llama(tmp_path, props) as client:
        info = client.identify()
        assert [m.context_length for m in info.models] == [2048]
        props["default_generation_settings"]["n_ctx"] = 4096
        (tmp_path / "props.json").write_text(json.dumps(props))
        assert [m.context_length for m in client.refresh_context(info).models] == [4096]
        (tmp_path / "props.json").unlink()  # /props answers 404 now
        assert client.refresh_context(info) is info
