"""The Prometheus counter parser and the merging of a response's figures with the
``/metrics`` change (no server needed)."""

from __future__ import annotations

import pytest

from app.remote.figures import combine, from_response, from_vllm_metrics
from app.remote.prometheus import SpecCounters, parse_spec_counters

VLLM_TEXT = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 60.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 21.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 3.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""


def test_parses_vllm_names_summing_other_labels() -> None:
    c = parse_spec_counters(VLLM_TEXT)
    assert c == SpecCounters(prefix="vllm", drafts=15, draft_tokens=60, accepted=21,
                             accepted_per_pos=(12, 6, 3))


def test_no_spec_counters_is_none_and_garbage_is_an_error() -> None:
    assert parse_spec_counters("# TYPE x counter\nx_total 3\n") is None
    assert parse_spec_counters("") is None
    with pytest.raises(ValueError):
        parse_spec_counters("this is { not prometheus\n")
    with pytest.raises(ValueError):
        parse_spec_counters('llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="x"} 1\n'
                            "llamacpp:spec_decode_num_drafts_total 1\n")


def test_delta_clamps_a_restart_and_pads_positions() -> None:
    before = SpecCounters("llamacpp", 10, 40, 20, (8, 7))
    after = SpecCounters("llamacpp", 12, 50, 26, (10, 9, 1))
    assert after.minus(before) == SpecCounters("llamacpp", 2, 10, 6, (2, 2, 1))
    restarted = SpecCounters("llamacpp", 1, 4, 2, (1,))
    assert restarted.minus(before) == SpecCounters("llamacpp", 0, 0, 0, (0, 0))


def test_combine_rules() -> None:
    response = from_response({"timings": {"draft_n": 10, "draft_n_accepted": 6}})
    assert response is not None and response.drafts is None
    assert response.mean_acceptance_length is None  # rounds unknown from timings alone
    own = SpecCounters("llamacpp", 3, 10, 6, (3, 2, 1))
    merged = combine(response, own)
    assert merged is not None and merged.scope == "request" and merged.drafts == 3
    assert merged.mean_acceptance_length == pytest.approx(3.0)
    assert merged.per_position_rate == pytest.approx((1.0, 2 / 3, 1 / 3))
    shared = SpecCounters("llamacpp", 7, 30, 10, (5, 3, 2))
    kept = combine(response, shared)
    assert kept is response  # others' drafts are not this request's
    only_metrics = combine(None, shared)
    assert only_metrics is not None and only_metrics.scope == "server-wide"
    assert only_metrics.acceptance_rate == pytest.approx(1 / 3)
    nothing_drafted = combine(None, SpecCounters("llamacpp", 0, 0, 0, ()))
    assert nothing_drafted is not None and nothing_drafted.scope == "request"
    assert nothing_drafted.acceptance_rate is None
    assert combine(None, None) is None


def test_vllm_per_request_summary() -> None:
    f = from_vllm_metrics({"speculative_decoding": {
        "num_drafts": 4, "num_draft_tokens": 16, "num_accepted_tokens": 9,
        "mean_acceptance_length": 3.25, "num_accepted_tokens_per_pos": [4, 3, 1, 1]}})
    assert f is not None and f.drafts == 4 and f.accepted_per_pos == (4, 3, 1, 1)
    assert f.mean_acceptance_length == 3.25
    assert f.acceptance_rate == pytest.approx(9 / 16)
    assert from_vllm_metrics({"speculative_decoding": {"mean_acceptance_length": 2}}) is None
    assert from_response({"timings": {"predicted_n": 3}}) is None
    assert from_response({"metrics": {"speculative_decoding": "garbage"}}) is None


def test_counts_that_are_not_counts_are_not_reported() -> None:
    """NaN and ±Infinity (Python's json reads them) raised OverflowError; negative and
    absurd counts were shown as they came."""
    from app.remote.figures import MAX_COUNT, count, from_timings

    for bad in (float("nan"), float("inf"), -float("inf"), -5, 10**30, 1e308, True, "7", None):
        assert count(bad) is None
    assert count(7.0) == 7 and count(7.0, integer=True) is None and count(MAX_COUNT) == MAX_COUNT
    assert from_timings({"draft_n": float("nan"), "draft_n_accepted": float("inf")}) is None
    assert from_timings({"draft_n": -1, "draft_n_accepted": 1e308}) is None
    assert from_timings({"draft_n": 10**30, "draft_n_accepted": 5}) is None


def test_vllm_lists_past_the_positions_bound_are_not_read() -> None:
    """A histogram of millions of entries took quadratic time (a hang); past the bound
    it is not reported, below it the result is as before."""
    from app.remote.figures import MAX_POSITIONS

    spec = {"num_draft_tokens": 6, "num_accepted_draft_tokens": 3, "num_spec_steps": 2,
            "acceptance_histogram": [0] * 1_000_000, "mean_acceptance_length": float("inf")}
    f = from_vllm_metrics({"speculative_decoding": spec})
    assert f is not None and f.accepted_per_pos == () and f.mean_acceptance_length == 2.5
    spec["acceptance_histogram"] = [1, 0, 1, 0]  # one step accepted 0, one accepted 2
    f = from_vllm_metrics({"speculative_decoding": spec})
    assert f is not None and f.accepted_per_pos == (1, 1, 0)
    spec["num_accepted_tokens_per_pos"] = [1] * (MAX_POSITIONS + 1)
    f = from_vllm_metrics({"speculative_decoding": spec})
    assert f is not None and f.accepted_per_pos == (1, 1, 0)  # the list was refused


@pytest.mark.parametrize("text", [
    "llamacpp:spec_decode_num_draft_tokens_total NaN\n",
    "llamacpp:spec_decode_num_draft_tokens_total +Inf\n",
    "llamacpp:spec_decode_num_draft_tokens_total " + "9" * 5000 + "\n",
    "llamacpp:spec_decode_num_draft_tokens_total -1\n",
    'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1000000000"} 1\n'
    "llamacpp:spec_decode_num_drafts_total 1\n",
])
def test_counters_that_are_not_counts_are_an_error(text: str) -> None:
    """An infinite counter raised OverflowError (a traceback); a position of a billion
    built a tuple of a billion entries."""
    with pytest.raises(ValueError):
        parse_spec_counters(text)
