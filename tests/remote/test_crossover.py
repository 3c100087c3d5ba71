"""The serving crossover against two real llama-servers (SmolLM2, one with n-gram
speculation, one without), its JSON round trip, the CLI with its chart, and the race
window showing the saved result."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main
from app.errors import TandemError
from app.remote.crossover import (
    CrossoverPlan,
    CrossoverResult,
    LevelSide,
    RequestFigures,
    load_crossover,
    run_crossover,
)
from tests.remote.conftest import require_llama_server
from tests.remote.llama_server import SPEC_ARGS, LlamaServer

PROMPT = "Copy this list exactly, line by line:\n" + "apple banana cherry\n" * 6



def side(name: str, c: int, tokens: int, wall: float) -> LevelSide:
    """A level side of ``c`` requests, ``tokens`` each, in ``wall`` seconds."""
    req = RequestFigures(prompt="p", n_tokens=tokens, ttft=0.1, latency=wall, decode_tps=10.0)
    return LevelSide(side="on" if name == "on" else "off", concurrency=c, wall_time=wall,
                     requests=(req,) * c)


def crossover(speedups: dict[int, float]) -> CrossoverResult:
    levels = tuple((side("on", c, 100, 10.0 / s), side("off", c, 100, 10.0))
                   for c, s in speedups.items())
    return CrossoverResult(server_on="a", server_off="b", model_on="m", model_off="m",
                           max_tokens=100, prompt_set="builtin:code", levels=levels)


def test_where_speculation_stops_paying() -> None:
    assert crossover({1: 1.5, 2: 1.2, 4: 0.9, 8: 0.7}).stops_paying_at == 4
    assert crossover({1: 1.5, 2: 1.2, 4: 1.1}).stops_paying_at is None
    dip = crossover({1: 0.9, 2: 1.2, 4: 0.95})  # a dip below 1 before a level that paid
    assert dip.stops_paying_at == 4 and dip.not_paying == (1, 4)
    assert crossover({1: 0.8, 2: 0.7}).stops_paying_at == 1
    assert crossover({1: 1.5}).speedup(0) == pytest.approx(1.5)


@pytest.fixture(scope="module")
def servers(smollm_path: Path) -> Iterator[tuple[LlamaServer, LlamaServer]]:
    """(speculation on, off): two slots each, one thread each."""
    exe = require_llama_server()
    # a short lookup n-gram, so that the short replies here draft from their start
    spec = (*SPEC_ARGS, "--spec-ngram-simple-size-n", "3", "-np", "2")
    with LlamaServer(exe, smollm_path, spec, threads=1, ctx=4096) as on, \
            LlamaServer(exe, smollm_path, ("--metrics", "-np", "2"), threads=1, ctx=4096) as off:
        yield on, off


@pytest.fixture(scope="module")
def result(servers: tuple[LlamaServer, LlamaServer]) -> CrossoverResult:
    on, off = servers
    plan = CrossoverPlan(server_on=on.base_url, server_off=off.base_url,
                         prompts=(("copy", PROMPT),), concurrency=(2, 1), max_tokens=32)
    seen: list[tuple[str, int, int, int]] = []
    got = run_crossover(plan, threading.Event(), lambda *a: seen.append(a))
    assert ("on", 2, 2, 2) in seen and ("off", 1, 1, 1) in seen
    return got


@pytest.mark.slow
def test_each_level_runs_both_servers_with_their_figures(result: CrossoverResult) -> None:
    assert [on.concurrency for on, _ in result.levels] == [1, 2]
    for on, off in result.levels:
        assert (on.side, off.side) == ("on", "off")
        assert len(on.requests) == len(off.requests) == on.concurrency  # max(1 prompt, c)
        assert on.errors == off.errors == 0
        assert on.tokens == off.tokens == 32 * on.concurrency
        assert on.aggregate_tps and off.aggregate_tps and on.stream_tps_median
        # the level's /metrics change is exactly what its responses reported
        assert on.counters is not None and on.counters.draft_tokens > 0
        assert on.counters.draft_tokens == sum(r.draft_tokens or 0 for r in on.requests)
        assert on.counters.accepted == sum(r.accepted or 0 for r in on.requests)
        assert on.acceptance_rate is not None and 0 < on.acceptance_rate <= 1
        assert on.mean_acceptance_length is not None and on.mean_acceptance_length > 1
        assert off.acceptance_rate is None and off.mean_acceptance_length is None
        d = on.to_dict()
        assert d["ttft_p50"] <= d["ttft_p95"] and d["latency_p50"] <= d["latency_p95"]
    assert result.speedup(0) is not None
    assert result.stops_paying_at in (None, 1, 2)


@pytest.mark.slow
def test_the_json_round_trip_keeps_every_figure(result: CrossoverResult, tmp_path: Path) -> None:
    data = result.to_dict()
    again = CrossoverResult.from_dict(json.loads(json.dumps(data)))
    assert again.to_dict() == data
    (tmp_path / "x.json").write_text(json.dumps({"kind": "k-sweep"}))
    with pytest.raises(TandemError, match="not a serving-crossover"):
        load_crossover(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("{")
    with pytest.raises(TandemError, match="not JSON"):
        load_crossover(tmp_path / "y.json")


@pytest.mark.slow
def test_the_cli_prints_the_table_saves_json_and_chart(
        servers: tuple[LlamaServer, LlamaServer], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    on, off = servers
    out = tmp_path / "crossover.json"
    assert main(["bench", "--server", on.base_url, "--server-off", off.base_url,
                 "--concurrency", "1", "--prompts", "builtin:code", "--limit", "1",
                 "--max-tokens", "8", "--out", str(out), "-q"]) == 0
    text, err = capsys.readouterr()
    assert "stream tok/s" in text and "speculation" in text.splitlines()[-1]
    assert out.is_file() and out.with_suffix(".png").is_file(), err
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = load_crossover(out)
    assert [lv[0].concurrency for lv in saved.levels] == [1]
    assert main(["bench", "--server", on.base_url, "--concurrency", "1"]) == 2
    assert "--server-off" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:  # argparse's usage error
        main(["bench", "--server", on.base_url, "--server-off", off.base_url,
              "--concurrency", "0"])
    assert usage.value.code == 2 and "concurrency levels" in capsys.readouterr().err


@pytest.mark.slow
def test_the_race_window_tab_shows_a_saved_crossover(
        qtbot, result: CrossoverResult, tmp_path: Path) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from app.ui.race.crossover_view import CrossoverWidget

    path = tmp_path / "c.json"
    path.write_text(json.dumps(result.to_dict()))
    view = CrossoverWidget()
    qtbot.addWidget(view)
    view.load(path)
    assert view.table.rowCount() == 4
    assert view.table.item(0, 1).text() == "on" and view.table.item(1, 1).text() == "off"
    assert view.verdict_label.text().startswith("Speculation")
    assert len(view.rate_chart.series()) == 4 and len(view.latency_chart.series()) == 2
    with pytest.raises(TandemError):
        view.load(tmp_path / "missing.json")
