"""The wire format without a server: llama-server's timings from SpecStats, request
parsing into the engine's configs, and following API jobs in the service's events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.api.protocol import ApiError, parse_chat_request, parse_completion_request, timings
from app.api.traffic import ApiReplyBegan, ApiReplyEnded, ApiReplyTokens, ApiTrafficFollower
from app.chat.events import JobDone, JobStarted, ReplyStreamed
from app.engine.events import TextDelta
from app.engine.reply import ReplyRecord, ReplyRequest, not_started
from app.engine.stats import SpecStats
from app.options import SamplingParams, SpecMode, SpeculationConfig
from tests.conftest import REPO

DEFAULTS = (SamplingParams(), SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP, draft_max=4))


def test_timings_use_llama_servers_meanings() -> None:
    s = SpecStats(mode=SpecMode.PROMPT_LOOKUP, draft_max=4, prompt_tokens=100,
                  prefill_tokens=9, emitted=50, rounds=20, proposed=40, verified=36,
                  accepted=30, prefill_time=0.5, decode_time=2.0)
    t = timings(s)
    # 99 prompt tokens go to the prefill, 9 of them evaluated: 90 came from the cache
    assert t["cache_n"] == 90 and t["prompt_n"] == 10
    assert t["prompt_ms"] == 500.0 and t["predicted_ms"] == 2000.0
    assert t["predicted_n"] == 50 and t["predicted_per_second"] == 25.0
    assert (t["draft_n"], t["draft_n_accepted"]) == (40, 30)


def test_a_request_becomes_the_engines_configs() -> None:
    body = {"model": "m", "messages": [{"role": "developer", "content": "Be brief."},
                                       {"role": "user", "content": [{"type": "text",
                                                                     "text": "Hi"}]}],
            "max_completion_tokens": 7, "temperature": 0, "seed": 5, "stop": "\n",
            "speculation": {"draft_max": 8, "adaptive": False}}
    req = parse_chat_request(json.dumps(body).encode(), *DEFAULTS, max_tokens_default=512)
    assert [(m.role, m.content) for m in req.messages] == [("system", "Be brief."),
                                                           ("user", "Hi")]
    assert req.sampling.max_tokens == 7 and req.sampling.greedy and req.sampling.seed == 5
    assert req.sampling.stop == ("\n",)
    assert req.speculation.mode is SpecMode.PROMPT_LOOKUP  # the server's, kept
    assert req.speculation.draft_max == 8 and not req.speculation.adaptive
    plain = parse_completion_request(b'{"model": "m", "prompt": ["x"]}', *DEFAULTS,
                                     max_tokens_default=512)
    assert plain.prompt == "x" and plain.sampling.max_tokens == 512


def test_llama_servers_repetition_fields_reach_the_sampler_or_are_refused() -> None:
    """repeat_last_n and the DRY fields set the sampler's (llama-server reads the same
    names); a value out of the sampler's range is a 400 naming the field."""
    body = {"model": "m", "prompt": "x", "repeat_last_n": 128, "dry_multiplier": 0.8,
            "dry_base": 2.0, "dry_allowed_length": 3}
    s = parse_completion_request(json.dumps(body).encode(), *DEFAULTS,
                                 max_tokens_default=8).sampling
    assert (s.repeat_last_n, s.dry_multiplier, s.dry_base, s.dry_allowed_length) == (
        128, 0.8, 2.0, 3)
    with pytest.raises(ApiError) as err:
        parse_completion_request(b'{"model": "m", "prompt": "x", "dry_base": 0.5}', *DEFAULTS,
                                 max_tokens_default=8)
    assert err.value.status == 400 and err.value.body()["error"]["param"] == "dry_base"


def test_another_drafter_without_a_k_gets_its_default_unless_the_servers_k_was_chosen() -> None:
    def k(server: SpeculationConfig, speculation: dict[str, object]) -> int:
        body = {"model": "m", "prompt": "x", "speculation": speculation}
        return parse_completion_request(json.dumps(body).encode(), SamplingParams(), server,
                                        max_tokens_default=8).speculation.draft_max

    at_default = SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP)  # k = 16
    assert k(at_default, {"mode": "draft-model"}) == 4
    assert k(at_default, {"mode": "draft-model", "draft_max": 6}) == 6
    assert k(at_default, {"mode": "suffix"}) == 16
    assert k(SpeculationConfig(mode=SpecMode.PROMPT_LOOKUP, draft_max=5),
             {"mode": "draft-model"}) == 5  # the server's own choice
    with pytest.raises(ApiError, match="speculation"):
        k(at_default, {"mode": "telepathy"})


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"model": "m", "prompt": [1, 2, 3]}, "prompt", "unsupported_parameter"),
    ({"model": "m", "prompt": "x", "echo": True}, "echo", "unsupported_parameter"),
    ({"model": "m", "prompt": "x", "seed": 2**40}, "seed", "invalid_value"),
    ({"model": "m", "prompt": "x", "stream_options": {"include_usage": True}},
     "stream_options", "invalid_value"),
    ({"model": 3, "prompt": "x"}, "model", "invalid_type"),
    ({"model": "m", "prompt": "x", "speculation": {"mode": "prompt-lookup", "ngram_min": 9,
                                                   "ngram_max": 2}},
     "speculation.ngram_max", "invalid_value"),
])
def test_completion_refusals_name_the_parameter(body: dict[str, object], param: str,
                                                code: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_completion_request(json.dumps(body).encode(), *DEFAULTS, max_tokens_default=64)
    assert (err.value.status, err.value.param, err.value.code) == (400, param, code)


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_not_json(number: bytes) -> None:
    body = b'{"model": "m", "prompt": "x", "temperature": ' + number + b"}"
    with pytest.raises(ApiError) as err:
        parse_completion_request(body, *DEFAULTS, max_tokens_default=64)
    assert (err.value.status, err.value.code) == (400, "invalid_json")


def test_an_image_part_is_refused() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]}
    with pytest.raises(ApiError) as err:
        parse_chat_request(json.dumps(body).encode(), *DEFAULTS, max_tokens_default=64)
    assert err.value.param == "messages[0].content[0].type"


def test_the_follower_keeps_only_api_jobs() -> None:
    f = ApiTrafficFollower()
    assert f.handle(JobStarted(1, "reply", "window")) is None
    assert f.handle(ReplyStreamed(1, (TextDelta("x", False, 0.1, 1),))) is None
    assert f.handle(JobStarted(2, "completion", "api")) == ApiReplyBegan(2, "completion")
    assert f.handle(ReplyStreamed(2, (TextDelta("a", False, 0.1, 1),
                                      TextDelta("b", True, 0.2, 3)))) == ApiReplyTokens(2, 0.2, 3)
    stats = SpecStats(mode=SpecMode.PROMPT_LOOKUP, emitted=3, verified=2, accepted=2)
    asked = SpeculationConfig(mode="prompt-lookup", draft_max=3)
    record = ReplyRecord(ReplyRequest(SamplingParams(), asked, 4), asked, "stop", "ab",
                         (1, 2, 3), (0.1, 0.2, 0.2), stats, 1)
    done = f.handle(JobDone(2, "completion", "api", record))
    assert isinstance(done, ApiReplyEnded) and done.tokens == 3 and not f.active
    # the traffic event carries the request's own record: its speculation and figures
    assert done.reply is record and done.reply.request.speculation.draft_max == 3
    assert done.began
    # a request stopped while it waited never started: listed, not followed
    waited = f.handle(JobDone(5, "reply", "api", not_started(ReplyRequest(*DEFAULTS, 0))))
    assert isinstance(waited, ApiReplyEnded) and not waited.began
    assert (waited.endpoint, waited.finish_reason, waited.tokens) == ("chat", "cancelled", 0)
    assert f.handle(JobDone(6, "reply", "window", record)) is None and not f.active


def test_serve_refuses_another_host_without_a_key(smollm_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "app", "serve", "--model", str(smollm_path),
                           "--host", "0.0.0.0"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items()
                                            if k != "TANDEM_API_KEY"})
    assert proc.returncode == 2 and "API key" in proc.stderr and not proc.stdout


@pytest.mark.parametrize("nested", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"model": "m", "messages": [{"role": "user", "content": '
    + b"[" * 2000 + b"]" * 2000 + b"}]}",
    b'{"model": "m", "speculation": ' + b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"}",
])
def test_nesting_past_the_depth_bound_is_invalid_json_not_a_recursion_error(
        nested: bytes) -> None:
    with pytest.raises(ApiError) as err:
        parse_chat_request(nested, *DEFAULTS, max_tokens_default=64)
    assert (err.value.status, err.value.code) == (400, "invalid_json")


def test_nesting_up_to_the_depth_bound_is_read() -> None:
    from app.api.protocol import MAX_JSON_DEPTH

    # the body object, "messages", one message, "content", one part: 5 levels, the rest
    # inside an extra field of the part
    deep = "[" * (MAX_JSON_DEPTH - 5) + "]" * (MAX_JSON_DEPTH - 5)
    body = ('{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", '
            f'"text": "hi", "x": {deep}}}]}}]}}').encode()
    req = parse_chat_request(body, *DEFAULTS, max_tokens_default=64)
    assert req.messages[0].content == "hi"
