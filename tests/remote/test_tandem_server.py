"""Another Tandem as the remote engine: recognised, and its drafter mode and k taken from
what it answers (``meta.speculation`` in ``/v1/models``, the ``tandem`` object of every
reply) so that the gauge names the drafter instead of "method unknown".

Two sources: what ``python -m app serve`` answered, recorded byte for byte in
``tests/remote/data/tandem-0.1.0`` (``bench/record_server_contract.py``; its manifest
names the command) and replayed by the broken server; and a real ``serve`` on
SmolLM2-135M-Instruct with prompt lookup (slow: it loads the model).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main
from app.remote import Engine, RemoteClient, RemoteResult
from app.remote.stream import StreamState
from tests.remote.broken_server import BrokenServer
from tests.serve_process import served

RECORDED = Path(__file__).parent / "data" / "tandem-0.1.0"
MANIFEST = json.loads((RECORDED / "manifest.json").read_text())
MESSAGES = [{"role": "user", "content": MANIFEST["prompt"]}]


@pytest.fixture(scope="module")
def replayed() -> Iterator[BrokenServer]:
    server = BrokenServer()
    server.mode, server.replay = "replay", RECORDED
    yield server
    server.stop()


def test_the_recording_is_tandems() -> None:
    assert MANIFEST["engine"] == "tandem" and "--prompt-lookup" in MANIFEST["command"]
    last = json.loads((RECORDED / "chat.json").read_text())
    assert last["tandem"]["mode"] == "prompt-lookup" and last["tandem"]["draft_max"] == 16
    assert last["timings"]["draft_n"] > 0


def test_a_recorded_tandem_names_its_drafter(replayed: BrokenServer) -> None:
    """It said "method unknown": the recognition read nothing of Tandem's own objects."""
    with RemoteClient(replayed.base_url) as client:
        info = client.identify()
        assert info.engine is Engine.TANDEM
        assert (info.speculation_method, info.draft_max) == ("prompt-lookup", 16)
        events = list(client.stream_chat(MANIFEST["model"], MESSAGES, max_tokens=40))
    result = events[-1]
    assert isinstance(result, RemoteResult) and result.text
    assert (result.speculation_method, result.draft_max) == ("prompt-lookup", 16)
    assert result.figures is not None and result.figures.draft_tokens > 0
    assert result.figures.scope == "request"
    unknown = info.__class__(base_url=info.base_url, engine=info.engine, version=None,
                             models=info.models)
    refreshed = client.refresh_speculation(unknown, result)
    assert (refreshed.speculation_method, refreshed.draft_max) == ("prompt-lookup", 16)


def test_generate_against_a_recorded_tandem_names_the_drafter(
        replayed: BrokenServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--server", replayed.base_url, "--model", MANIFEST["model"],
                 "--chat", "--max-tokens", "40", MANIFEST["prompt"]]) == 0
    err = capsys.readouterr().err
    assert err.startswith("tandem · ") and "prompt-lookup, k=16" in err
    assert "method unknown" not in err and "reports nothing" not in err


def test_a_tandem_reply_without_drafting_says_none() -> None:
    state = StreamState(model="m")
    chunk = {"choices": [{"delta": {}, "finish_reason": "stop"}],
             "timings": {"draft_n": 0, "draft_n_accepted": 0},
             "tandem": {"mode": "off", "draft_max": 0}}
    lines = iter([f"data: {json.dumps(chunk)}", "", "data: [DONE]", ""])
    assert list(state.read_events(lines, 0.0, None, "http://recorded")) == []
    result = state.result(0.0, None)
    assert result.speculation_method == "none" and result.draft_max is None


@pytest.fixture(scope="module")
def tandem_server(smollm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m app serve`` with prompt lookup on 127.0.0.1 (its address, without /v1)."""
    with served(smollm_path, tmp_path_factory.mktemp("serve-home")) as base:
        yield base.removesuffix("/v1")


@pytest.mark.slow
def test_a_real_tandem_names_its_drafter(tandem_server: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with RemoteClient(tandem_server) as client:
        info = client.identify()
    assert info.engine is Engine.TANDEM
    assert (info.speculation_method, info.draft_max) == ("prompt-lookup", 16)
    model = info.models[0].id
    assert main(["generate", "--server", tandem_server, "--model", model, "--chat",
                 "--max-tokens", "24", "--temp", "0", "--json", MANIFEST["prompt"]]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["server"]["engine"] == "tandem"
    assert (out["server"]["method"], out["server"]["draft_max"]) == ("prompt-lookup", 16)
    assert out["stats"]["speculation_source"] == "response" and out["stats"]["draft_n"] >= 0
