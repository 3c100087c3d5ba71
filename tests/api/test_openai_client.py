"""``python -m app serve`` on a real model, driven by the real ``openai`` client: replies
streamed and not, llama-server's timings, per-request speculation, and OpenAI's errors for
every kind of bad input. One server for the whole module (SmolLM2-135M-Instruct, prompt
lookup, a 512-token context so that an over-long prompt is cheap)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.serve_process import served


MODEL = "SmolLM2-135M-Instruct.Q4_1"
CODE = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"


@pytest.fixture(scope="module")
def server(smollm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(smollm_path, tmp_path_factory.mktemp("serve-home"),
                "--max-body-bytes", "65536") as base:
        yield base


@pytest.fixture(scope="module")
def client(server: str) -> openai.OpenAI:
    # no retries: a 429 must reach the test, not be retried away
    return openai.OpenAI(base_url=server, api_key="unused", max_retries=0)


def test_models_and_health(client: openai.OpenAI, server: str) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL]
    health = httpx.get(server.removesuffix("/v1") + "/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"


def test_chat_completion_with_timings(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=12,
        temperature=0, seed=1)
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage is not None and 0 < r.usage.completion_tokens <= 12
    extra = r.model_extra or {}
    t = extra["timings"]
    assert t["predicted_n"] == r.usage.completion_tokens
    assert t["prompt_n"] + t["cache_n"] == r.usage.prompt_tokens
    assert t["predicted_ms"] > 0 and t["predicted_per_second"] > 0
    assert 0 <= t["draft_n_accepted"] <= t["draft_n"]
    # serve's default k for a model-free drafter
    assert extra["tandem"]["mode"] == "prompt-lookup" and extra["tandem"]["draft_max"] == 16


def test_streamed_completion_ends_with_timings_and_usage(client: openai.OpenAI) -> None:
    # every draft verified (a fixed k): whether the cost-aware default verifies this
    # short reply's drafts depends on the CPU's pass costs
    chunks = list(client.completions.create(
        model=MODEL, prompt=CODE + "def mul(a, b):\n", max_tokens=24, temperature=0,
        stream=True, stream_options={"include_usage": True},
        extra_body={"speculation": {"mode": "prompt-lookup", "adaptive": False}}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    timings = (last.model_extra or {})["timings"]
    assert timings["predicted_n"] == last.usage.completion_tokens
    assert (finish[0].model_extra or {})["timings"] == timings
    # code that repeats itself: prompt lookup drafts from it
    assert timings["draft_n"] > 0


def test_streamed_chat_and_per_request_speculation(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count: 1, 2, 3,"}], max_tokens=16,
        temperature=0, stream=True, extra_body={"speculation": {"mode": "off"}})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    extra = chunks[-1].model_extra or {}
    assert extra["tandem"]["mode"] == "off" and extra["timings"]["draft_n"] == 0


def _error(exc: openai.APIStatusError) -> dict[str, object]:
    body = exc.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.mark.parametrize(("body", "status", "param", "code"), [
    ({"messages": [{"role": "user", "content": "x"}]}, 400, "model",
     "missing_required_parameter"),
    ({"model": MODEL}, 400, "messages", "missing_required_parameter"),
    ({"model": MODEL, "messages": "x"}, 400, "messages", "invalid_type"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "temperature": "hot"},
     400, "temperature", "invalid_type"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
     400, "max_tokens", "invalid_value"),
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}, 404, "model",
     "model_not_found"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "n",
     "unsupported_parameter"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools",
     "unsupported_parameter"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "logprobs": True},
     400, "logprobs", "unsupported_parameter"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}],
      "speculation": {"draft_max": 0}}, 400, "speculation.draft_max", "invalid_value"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}],
      "speculation": {"mode": "draft-model"}}, 400, "speculation.mode", "invalid_value"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "word " * 600}]}, 400,
     "messages", "context_length_exceeded"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}],
      "continue_final_message": True}, 400, "messages", "invalid_value"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"},
                                   {"role": "assistant", "content": "y"}],
      "continue_final_message": True, "add_generation_prompt": True}, 400,
     "add_generation_prompt", "invalid_value"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}],
      "add_generation_prompt": False}, 400, "add_generation_prompt", "unsupported_parameter"),
])
def test_bad_input_gets_openais_error(server: str, body: dict[str, object], status: int,
                                      param: str, code: str) -> None:
    r = httpx.post(server + "/chat/completions", json=body, timeout=60)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["param"], error["code"]) == (param, code)
    if code == "unsupported_parameter":
        assert f"'{param}'" in str(error["message"])  # the parameter is named


def test_a_reply_continued_with_continue_final_message(client: openai.OpenAI) -> None:
    """vLLM's ``continue_final_message``: the last, assistant message is the start of
    the reply, and the answer is the text after it. Greedy, a 10-token reply continued
    for 14 more equals the 24-token reply (the prompt is the conversation through the
    generation prompt, then that start)."""
    question = [{"role": "user", "content": "Name the planets of the solar system."}]

    def reply(messages: list[dict[str, str]], n: int, **extra: object) -> str:
        r = client.chat.completions.create(model=MODEL, messages=messages,  # type: ignore[arg-type]
                                           max_tokens=n, temperature=0, extra_body=extra)
        return r.choices[0].message.content or ""

    whole, start = reply(question, 24), reply(question, 10)
    assert whole.startswith(start) and len(start) < len(whole)
    rest = reply([*question, {"role": "assistant", "content": start}], 14,
                 continue_final_message=True, add_generation_prompt=False)
    assert start + rest == whole


def test_bad_input_through_the_openai_client(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as nf:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user",
                                                                  "content": "x"}])
    assert _error(nf.value)["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as br:
        client.completions.create(model=MODEL, prompt="x", n=3)
    assert _error(br.value)["param"] == "n"


def test_invalid_json_wrong_media_type_and_a_body_over_the_limit(server: str) -> None:
    url = server + "/chat/completions"
    r = httpx.post(url, content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(url, content=b"{}", headers={"Content-Type": "text/plain"})
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    big = b'{"model": "' + b"x" * 70_000 + b'"}'
    r = httpx.post(url, content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted while it arrives
        yield b'{"model": "'
        for _ in range(10):
            yield b"x" * 10_000
        yield b'"}'

    r = httpx.post(url, content=chunked(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert httpx.get(server + "/nowhere").json()["error"]["type"] == "not_found_error"


def test_disconnect_mid_stream_cancels_the_generation(server: str) -> None:
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 400, "stream": True,
            "temperature": 0.8, "seed": 3}
    with httpx.stream("POST", server + "/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # one token arrived; now hang up
    log_url = server.removesuffix("/v1") + "/tandem/requests"
    while True:  # wait for the server to record the end of that request
        latest = httpx.get(log_url).json()["requests"][0]
        if latest["status"] != "running" and latest["status"] != "queued":
            break
        time.sleep(0.05)
    assert latest["disconnected"] is True
    assert latest["status"] == "cancelled" and latest["finish_reason"] == "cancelled"
    assert latest["completion_tokens"] < 400
    # and the server goes on serving
    assert httpx.get(server.removesuffix("/v1") + "/health").status_code == 200


def test_tandem_is_recognised_by_the_remote_client(server: str) -> None:
    """Tandem's own server seen as a remote engine: recognised, its llama-server-named
    ``timings`` read as this request's speculation figures."""
    from app.remote import Engine, RemoteClient, RemoteResult

    with RemoteClient(server) as remote:
        info = remote.identify()
        assert info.engine is Engine.TANDEM and info.metrics_prefix is None
        events = list(remote.stream_chat(MODEL, [{"role": "user", "content": "Say hi twice."}],
                                         max_tokens=16, temperature=0))
    result = events[-1]
    assert isinstance(result, RemoteResult) and result.text
    assert result.server_timings is not None and result.figures is not None
    assert result.figures.source == "response" and result.figures.scope == "request"
    assert result.figures.draft_tokens == result.server_timings["draft_n"]
    assert result.n_tokens == result.server_timings["predicted_n"]


def test_prompt_progress_is_streamed_and_the_client_ignores_or_reads_it(
        client: openai.OpenAI, server: str) -> None:
    messages = [{"role": "user", "content": CODE * 6 + "Summarise."}]
    # without return_progress: comment lines only, which the openai client skips
    plain = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4,
                                                temperature=0, stream=True))
    assert all("prompt_progress" not in (c.model_extra or {}) for c in plain)
    assert any(c.choices and c.choices[0].delta.content for c in plain)
    # with llama-server's return_progress: chunks that carry prompt_progress
    other = [{"role": "user", "content": "Another request. " + CODE * 6}]  # nothing cached
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=other, max_tokens=4, temperature=0, stream=True,
        extra_body={"return_progress": True}))
    progress = [(c.model_extra or {})["prompt_progress"] for c in chunks
                if "prompt_progress" in (c.model_extra or {})]
    assert progress  # progress that arrives together goes out as one chunk
    assert all(c.choices[0].delta.content is None for c in chunks
               if "prompt_progress" in (c.model_extra or {}))
    last = progress[-1]
    assert last["processed"] == last["total"] > last["cache"] and last["time_ms"] >= 0
    assert [p["processed"] for p in progress] == sorted(p["processed"] for p in progress)
    # the comment lines on the wire
    with httpx.stream("POST", server + "/chat/completions", timeout=60, json={
            "model": MODEL, "messages": messages, "max_tokens": 2, "stream": True}) as r:
        lines = [line for line in r.iter_lines() if line.startswith(": prompt_progress ")]
    assert lines and '"processed":' in lines[-1]
