"""The benchmark logic: speedup formula, aggregation, hit-rate estimate, race, k sweep, CLI.

Everything here is fast: pure functions on synthetic inputs, and real runs only on the
synthetic tiny F32 model (tests/synthetic.py). Timings are never asserted; real-model
benchmarks live in bench/.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.engine.chat import tokenize_plain
from app.engine.measure.bench import (
    RunRecord,
    first_difference,
    median,
    percentile,
    summarize,
    token_latencies,
)
from app.engine.measure.lookup import estimate_lookup_hit_rate, lookup_hits
from app.engine.measure.prompts import BenchPrompt, PreparedPrompt, load_prompts, prepare_prompt
from app.engine.measure.race import run_race
from app.engine.measure.sweep import k_sweep_from_records, run_k_sweep
from app.engine.session import Session, SessionConfig
from app.engine.stats import (
    SpecStats,
    calculate_speedup,
    expected_tokens_per_round,
    predicted_speedup,
)
from app.errors import TandemError
from app.options import SamplingParams, SpeculationConfig
from tests.engine.util import record

REPO = Path(__file__).resolve().parents[2]


# -- the formula, worked by hand ------------------------------------------------------


def by_hand(alpha: float, k: int, c: float) -> float:
    """The predicted speedup computed independently of app.engine.stats: the expected
    tokens per round as the sum 1 + α + … + α^k, over the round's cost 1 + c·k."""
    return sum(alpha ** i for i in range(k + 1)) / (1 + c * k)


@pytest.mark.parametrize(
    ("alpha", "k", "c", "e", "s"),
    [
        (0.6, 3, 0.05, 2.18, 1.9),
        (0.7, 4, 0.05, 2.77, 2.3),
        (0.8, 5, 0.05, 3.69, 3.0),
    ],
)
def test_worked_values(alpha: float, k: int, c: float, e: float, s: float) -> None:
    assert round(expected_tokens_per_round(alpha, k), 2) == e
    assert round(predicted_speedup(alpha, k, c), 1) == s
    calc = calculate_speedup(alpha, k, c)
    assert round(calc.expected_tokens, 2) == e
    assert round(calc.speedup, 1) == s


def test_worked_value_alpha_075_k6() -> None:
    assert predicted_speedup(0.75, 6, 0.05) == pytest.approx(2.7, abs=0.05)


def test_alpha_one_does_not_divide_by_zero() -> None:
    assert expected_tokens_per_round(1.0, 4) == 5.0
    assert predicted_speedup(1.0, 4, 0.05) == pytest.approx(5 / 1.2)
    calc = calculate_speedup(1.0, 4, 0.0, k_max=8)
    assert calc.expected_tokens == 5.0
    assert calc.best_k == 8  # with free drafts and perfect acceptance, longer is better
    # Just below 1 the formula is continuous with the limit.
    assert expected_tokens_per_round(1 - 1e-9, 4) == pytest.approx(5.0, rel=1e-6)


def test_calculator_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        calculate_speedup(1.2, 3, 0.05)
    with pytest.raises(ValueError):
        calculate_speedup(0.5, 3, -0.1)
    with pytest.raises(ValueError):
        calculate_speedup(0.5, -1, 0.1)


def test_calculator_best_k_is_the_argmax() -> None:
    calc = calculate_speedup(0.8, 2, 0.05, k_max=16)
    assert calc.best_speedup == pytest.approx(max(by_hand(0.8, k, 0.05) for k in range(1, 17)))
    assert calc.best_speedup == pytest.approx(by_hand(0.8, calc.best_k, 0.05))
    assert calc.best_k == max(range(1, 17), key=lambda k: by_hand(0.8, k, 0.05))


# -- statistics ----------------------------------------------------------------------


def test_median_and_percentiles() -> None:
    assert median([]) is None
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    v = [1.0, 2.0, 3.0, 4.0]
    assert percentile(v, 50) == 2.5
    assert percentile(v, 95) == pytest.approx(3.85)  # numpy.percentile(v, 95)
    assert percentile(v, 0) == 1.0 and percentile(v, 100) == 4.0
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) is None
    vals = [float(x) for x in range(1, 101)]
    assert percentile(vals, 95) == pytest.approx(95.05)
    with pytest.raises(ValueError):
        percentile(v, 101)


def test_first_difference_and_latencies() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference([], []) is None
    assert token_latencies([0.5, 0.6, 0.6, 0.9]) == pytest.approx([0.1, 0.0, 0.3])
    assert token_latencies([0.5]) == []


def _rec(label: str, k: int, tps: float, *, emitted: int = 10, verified: int = 0,
         accepted: int = 0, rounds: int = 10, ids: tuple[int, ...] = (1, 2, 3),
         identical: bool | None = None, draft_time: float = 0.0, steps: int = 0,
         ttft: float = 0.1, times: tuple[float, ...] = (0.1, 0.2, 0.3),
         prompt: int = 0, rep: int = 0) -> RunRecord:
    stats = SpecStats(
        mode="off" if k == 0 else "draft-model",
        draft_max=k,
        emitted=emitted,
        rounds=rounds,
        verified=verified,
        accepted=accepted,
        verified_at=(verified,) if k else (),
        accepted_at=(accepted,) if k else (),
        draft_steps=steps,
        draft_time=draft_time,
        target_step_time=0.02,
        ttft=ttft,
        decode_time=emitted / tps,
        total_time=emitted / tps + ttft,
    )
    return RunRecord(label, f"p{prompt}", prompt, rep, record(stats, ids=ids, times=times),
                     identical, None if identical in (None, True) else 0)


def test_summarize_medians_pooling_and_identical_counts() -> None:
    records = [
        _rec("off", 0, 40.0, ttft=0.10),
        _rec("off", 0, 50.0, ttft=0.30),
        _rec("off", 0, 44.0, ttft=0.20),
        # k=4: α pooled = (6 + 2) / (8 + 8) = 0.5, not the mean of the per-run rates
        _rec("k=4", 4, 80.0, verified=8, accepted=6, rounds=4, emitted=10, identical=True,
             draft_time=0.004, steps=4, times=(0.1, 0.1, 0.2, 0.2)),
        _rec("k=4", 4, 60.0, verified=8, accepted=2, rounds=6, emitted=8, identical=False,
             draft_time=0.008, steps=4, times=(0.1, 0.3)),
        _rec("k=4", 4, 70.0, verified=0, accepted=0, rounds=2, emitted=2, identical=True,
             draft_time=0.0, steps=0, times=(0.1, 0.15)),
    ]
    off, k4 = summarize(records)
    assert off.label == "off" and off.runs == 3
    assert off.decode_tps_median == pytest.approx(44.0)
    assert off.ttft_median == pytest.approx(0.20)
    assert off.measured_speedup == pytest.approx(1.0)
    assert off.compared == 0 and off.acceptance_rate is None and off.predicted_speedup is None
    assert k4.decode_tps_median == pytest.approx(70.0)
    assert k4.measured_speedup == pytest.approx(70.0 / 44.0)  # ratio of medians
    assert k4.acceptance_rate == pytest.approx(0.5)
    assert k4.mean_acceptance_length == pytest.approx((10 + 8 + 2) / (4 + 6 + 2))
    # c per run: (0.004/4)/0.02 = 0.05 and (0.008/4)/0.02 = 0.1; the third has no steps
    assert k4.draft_cost_ratio == pytest.approx(0.075)
    assert k4.predicted_speedup == pytest.approx(by_hand(0.5, 4, 0.075))
    assert (k4.identical, k4.compared) == (2, 3)
    # gaps pooled over runs: 0, .1, 0 | .2 | .05
    assert k4.token_latency_p50 == pytest.approx(0.05)
    assert k4.token_latency_p95 == pytest.approx(percentile([0.0, 0.1, 0.0, 0.2, 0.05], 95))
    assert k4.acceptance_at == (pytest.approx(0.5),)


def test_paired_and_set_speedups_compare_the_same_turns() -> None:
    # Two prompts, three repeats. Prompt 0 is short and noisy, prompt 1 long; decode time
    # = emitted / tps, so each repeat's set throughput is exact to work out.
    records = [
        _rec("off", 0, 40.0, emitted=10, prompt=0, rep=0),
        _rec("off", 0, 50.0, emitted=100, prompt=1, rep=0),
        _rec("off", 0, 30.0, emitted=10, prompt=0, rep=1),
        _rec("off", 0, 50.0, emitted=100, prompt=1, rep=1),
        _rec("off", 0, 45.0, emitted=20, prompt=0, rep=2),
        _rec("k=4", 4, 36.0, emitted=10, prompt=0, rep=0),
        _rec("k=4", 4, 60.0, emitted=100, prompt=1, rep=0),
        _rec("k=4", 4, 33.0, emitted=12, prompt=0, rep=1),  # a reply of another length
        _rec("k=4", 4, 55.0, emitted=90, prompt=1, rep=1),
        _rec("k=4", 4, 63.0, emitted=20, prompt=0, rep=2),
        _rec("k=4", 4, 99.0, emitted=100, prompt=1, rep=2),  # its off run is missing
    ]
    off, k4 = summarize(records)
    assert off.paired_speedup == pytest.approx(1.0) and off.set_speedup == pytest.approx(1.0)
    # pairs: 36/40, 60/50, 33/30, 55/50, 63/45 → 0.9, 1.2, 1.1, 1.1, 1.4; the unpaired
    # run of repeat 2 counts in neither figure
    assert k4.paired_speedup == pytest.approx(1.1)
    rep0 = (110 / (10 / 36 + 100 / 60)) / (110 / (10 / 40 + 100 / 50))
    rep1 = (102 / (12 / 33 + 90 / 55)) / (110 / (10 / 30 + 100 / 50))
    rep2 = 63.0 / 45.0
    assert sorted([rep0, rep1, rep2])[1] == rep0  # the median is repeat 0's, not a mean
    assert k4.set_speedup == pytest.approx(rep0)
    # the ratio of medians is a different figure, over every run: (median 57.5) / (median 45)
    assert k4.measured_speedup == pytest.approx(57.5 / 45.0)
    alone = summarize([_rec("k=4", 4, 36.0)])[0]  # no off run at all
    assert alone.set_speedup is None and alone.paired_speedup is None

def test_k_sweep_from_records_recommends_fastest_k() -> None:
    records = [_rec("off", 0, 40.0)]
    for k, tps in [(1, 50.0), (2, 65.0), (3, 65.0), (4, 55.0)]:
        records.append(_rec(f"k={k}", k, tps, verified=10, accepted=7, rounds=5,
                            draft_time=0.001 * k, steps=k, identical=True))
    sweep = k_sweep_from_records(records)
    assert [p.k for p in sweep.points] == [1, 2, 3, 4]
    assert sweep.recommended_k == 2  # tie with k=3 goes to the smaller k
    assert sweep.acceptance_rate == pytest.approx(0.7)
    assert sweep.plain_decode_tps == pytest.approx(40.0)
    assert [k for k, _ in sweep.predicted_curve] == [1, 2, 3, 4]
    c = sweep.draft_cost_ratio
    assert c is not None
    assert sweep.predicted_curve[2][1] == pytest.approx(by_hand(0.7, 3, c))
    assert sweep.predicted_tps[0][1] == pytest.approx(40.0 * sweep.predicted_curve[0][1])
    assert sweep.predicted_best_k is not None
    assert all(p.identical for p in sweep.points)
    json.dumps(sweep.to_dict())


# -- prompt lookup hit-rate estimate -------------------------------------------------


class _Msg:
    def __init__(self, role: str, content: str) -> None:
        self.role = role
        self.content = content


def _word_tokenizer() -> tuple[dict[str, int], Callable[[str], list[int]]]:
    vocab: dict[str, int] = {}

    def tok(text: str) -> list[int]:
        return [vocab.setdefault(w, len(vocab)) for w in text.split()]

    return vocab, tok


def test_lookup_hits_by_hand() -> None:
    # prompt: a b c d ; reply: a b c x
    a, b, c, d, x = range(5)
    h = lookup_hits([a, b, c, d], [a, b, c, x], 2)
    # pos0 ctx "a b c d": last 2 "c d" never seen before → no lookup
    # pos1 ctx "…d a": "d a" unseen → none
    # pos2 ctx "…a b": "a b" at 0 → proposes c, actual c → hit
    # pos3 ctx "…b c": "b c" at 1 → proposes d, actual x → miss
    assert (h.positions, h.lookups, h.hits) == (4, 2, 1)
    assert h.hit_rate == 0.25 and h.precision == 0.5 and h.coverage == 0.5
    # n=1: pos0 "d" unseen; pos1 "a" at 0 → b? actual b hit; pos2 "b" → c hit; pos3 "c" → d miss
    h1 = lookup_hits([a, b, c, d], [a, b, c, x], 1)
    assert (h1.positions, h1.lookups, h1.hits) == (4, 3, 2)
    with pytest.raises(ValueError):
        lookup_hits([a], [b], 0)


def test_lookup_uses_most_recent_occurrence() -> None:
    # "a b" occurs twice with different continuations; the later one wins.
    a, b, c, d = range(4)
    h = lookup_hits([a, b, c, a, b, d, c], [a, b, d], 2)
    # pos2: ctx ends "a b" → most recent "a b" (index 3) continues with d → hit
    assert h.hits >= 1
    h_only = lookup_hits([a, b, c, a, b, d, c, a, b], [d], 2)
    assert (h_only.lookups, h_only.hits) == (1, 1)


def test_hit_rate_matches_prompt_lookup_drafter() -> None:
    import random

    from app.engine.drafters import PromptLookupDrafter

    rng = random.Random(5)
    prompt = [rng.randrange(6) for _ in range(40)]
    reply = [rng.randrange(6) for _ in range(40)]
    for n in (2, 3):
        drafter = PromptLookupDrafter(n, n)
        drafter.begin(prompt)
        hits = lookups = 0
        for i, tok in enumerate(reply):
            d = drafter.draft(prompt + reply[:i], 1)
            if d:
                lookups += 1
                hits += d[0] == tok
        h = lookup_hits(prompt, reply, n)
        assert (h.lookups, h.hits) == (lookups, hits)


def test_estimate_over_a_hand_made_conversation() -> None:
    _, tok = _word_tokenizer()
    convs = [
        [
            _Msg("system", "you are terse"),
            _Msg("user", "rename x to count in : x = x + 1"),
            _Msg("assistant", "count = count + 1"),
            _Msg("user", "thanks"),
            _Msg("assistant", "you are welcome"),
        ],
        [_Msg("user", "hello"), _Msg("assistant", "")],  # an empty reply counts nothing
    ]
    est = estimate_lookup_hit_rate(convs, tok, (1, 2))
    assert est.replies == 2 and est.reply_tokens == 5 + 3
    # Reply 1 "count = count + 1" after "you are terse rename x to count in : x = x + 1":
    #   n=1: "1" has no earlier occurrence → no lookup; "count" → "in" (from "count in"),
    #        miss; "=" → "x" (from "x = x"), miss; "count" → "=" (the reply's own first
    #        "count", the most recent), miss; "+" → "1", hit.  5 positions, 4 lookups, 1 hit.
    #   n=2: "+ 1", "1 count", "count =", "= count", "count +" never occurred earlier.
    # Reply 2 "you are welcome" after "… thanks":
    #   n=1: "thanks" unseen; "you" → "are", hit; "are" → "terse", miss.
    #   n=2: "1 thanks", "thanks you" unseen; "you are" → "terse", miss.
    h1, h2 = est.for_n(1), est.for_n(2)
    assert (h1.positions, h1.lookups, h1.hits) == (8, 6, 2)
    assert (h2.positions, h2.lookups, h2.hits) == (8, 1, 0)
    assert h1.hit_rate == 0.25 and h1.precision == pytest.approx(1 / 3)
    assert est.best_n == 1
    json.dumps(est.to_dict())


# -- prompt sets ---------------------------------------------------------------------


def test_builtin_prompt_sets() -> None:
    code = load_prompts("builtin:code")
    chat = load_prompts("builtin:chat")
    assert len(code) >= 6 and len(chat) >= 6
    for p in code:
        # the edited code repeats the input: the completion prompt opens the code block
        assert p.plain.endswith("```python\n") or p.plain.endswith("```javascript\n")
        assert "```" in p.chat and p.stop == ("\n```",)
    assert len({p.name for p in code + chat}) == len(code) + len(chat)
    with pytest.raises(TandemError):
        load_prompts("builtin:nope")


def test_prompt_files(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(["one", {"text": "two", "name": "t", "stop": "\n"}]))
    ps = load_prompts(str(tmp_path / "a.json"))
    assert ps[0] == BenchPrompt("prompt-1", "one", "one")
    assert ps[1] == BenchPrompt("t", "two", "two", ("\n",))
    (tmp_path / "b.jsonl").write_text('{"plain": "p", "chat": "c"}\n\n"x"\n')
    assert [(p.plain, p.chat) for p in load_prompts(str(tmp_path / "b.jsonl"))] == [("p", "c"), ("x", "x")]
    (tmp_path / "c.txt").write_text("first\nprompt\n---\nsecond\n---\n\n")
    assert [p.plain for p in load_prompts(str(tmp_path / "c.txt"))] == ["first\nprompt", "second"]
    with pytest.raises(TandemError):
        load_prompts(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(TandemError):
        load_prompts(str(tmp_path / "bad.json"))
    (tmp_path / "empty.txt").write_text("\n---\n")
    with pytest.raises(TandemError):
        load_prompts(str(tmp_path / "empty.txt"))


# -- real runs on the synthetic tiny model -------------------------------------------


@pytest.fixture(scope="module")
def self_draft_session(tiny_target: Path) -> Iterator[Session]:
    s = Session.open(SessionConfig(target_path=tiny_target, draft_path=tiny_target,
                                   n_ctx=512, n_threads=2))
    yield s
    s.close()


def _tiny_prompt(session: Session) -> PreparedPrompt:
    return prepare_prompt(session, BenchPrompt("t", "▁def x ( y ) : return y", "hi"), "plain")


def test_race_on_tiny_model_is_identical(self_draft_session: Session) -> None:
    s = self_draft_session
    prompt = _tiny_prompt(s)
    assert prompt.tokens == tuple(tokenize_plain(s.target, "▁def x ( y ) : return y"))
    events: list[str] = []
    race = run_race(s, prompt, SamplingParams(temperature=0.0, max_tokens=20),
                    # fixed k: the draft-length policy, knowing the pass costs measured at
                    # load, may rightly decline a draft as costly as the target
                    SpeculationConfig(mode="draft-model", draft_max=3, adaptive=False),
                    on_event=lambda lane, ev: events.append(lane))
    assert race.identical and race.first_difference is None
    assert race.off.token_ids == race.on.token_ids and len(race.on.token_ids) > 0
    assert race.on.stats.acceptance_rate == 1.0  # draft = target
    assert race.off.text == race.on.text
    assert set(events) == {"off", "on"}
    lane = race.on
    assert lane.tokens_at(-1.0) == 0 and lane.text_at(-1.0) == ""
    assert lane.tokens_at(lane.token_times[-1]) == len(lane.token_ids)
    assert lane.text_at(lane.duration) == lane.text
    assert list(lane.text_offsets) == sorted(lane.text_offsets)
    json.dumps(race.to_dict())


def test_k_sweep_gives_one_point_per_k(self_draft_session: Session) -> None:
    sweep = run_k_sweep(self_draft_session, _tiny_prompt(self_draft_session),
                        SamplingParams(temperature=0.0, max_tokens=12),
                        SpeculationConfig(mode="draft-model"), ks=(1, 2, 3), warmup=False)
    assert [p.k for p in sweep.points] == [1, 2, 3]
    assert all(p.decode_tps is not None and p.decode_tps > 0 for p in sweep.points)
    assert all(p.identical for p in sweep.points)
    assert sweep.acceptance_rate == 1.0
    assert sweep.fastest_k in (1, 2, 3)
    # a draft as large as its target rarely beats off: then no k is recommended
    assert sweep.recommended_k == (None if sweep.no_k_beat_off else sweep.fastest_k)
    assert len(sweep.predicted_curve) == 3


def test_bench_cli_json_on_tiny_model(tiny_target: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "app", "bench", "--model", str(tiny_target),
         "--draft", str(tiny_target), "--prompts", "builtin:chat", "--limit", "2",
         "--k", "1,2", "--repeat", "2", "--max-tokens", "10", "--threads", "2", "--fixed-k",
         "--json", "-q"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) >= {"settings", "configs", "runs", "notes"}
    assert out["settings"]["mode"] == "draft-model" and out["settings"]["repeat"] == 2
    assert out["settings"]["divergence_recorded"] is True
    configs = {c["label"]: c for c in out["configs"]}
    assert list(configs) == ["off", "k=1", "k=2"]
    for c in out["configs"]:
        assert c["runs"] == 4  # 2 prompts × 2 repeats
        for key in ("decode_tps_median", "token_latency_p50_s", "token_latency_p95_s",
                    "ttft_median_s", "measured_speedup"):
            assert isinstance(c[key], float) and c[key] >= 0, key
    for lab in ("k=1", "k=2"):
        c = configs[lab]
        # draft = target on an F32 model: everything accepted, every output identical
        assert c["acceptance_rate"] == 1.0
        assert (c["identical_to_off"], c["compared_to_off"]) == (4, 4)
        assert (c["near_tie"], c["suspect"], c["unmeasured"]) == (0, 0, 0)
        assert c["mean_acceptance_length"] > 1.0
        assert c["predicted_speedup"] is not None and c["draft_cost_ratio"] is not None
    assert configs["off"]["compared_to_off"] == 0
    assert len(out["runs"]) == 12
    assert all(r["identical_to_off"] is True for r in out["runs"] if r["label"] != "off")
    assert not any("divergence" in r for r in out["runs"])  # only runs that differ carry one
    assert any("8 identical, 0 near-ties, 0 suspect (of 8 runs)" in n for n in out["notes"])


def test_bench_cli_errors(tiny_target: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "app", "bench", "--model", str(tmp_path / "none.gguf")],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )
    assert proc.returncode == 2 and "not found" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "app", "bench", "--model", str(tiny_target),
         "--prompts", "builtin:nope"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )
    assert proc.returncode == 2 and "builtin:code" in proc.stderr


def test_no_nan_in_formula() -> None:
    for a in (0.0, 0.3, 0.999999, 1.0):
        for k in range(0, 9):
            assert math.isfinite(expected_tokens_per_round(a, k))
