"""``python -m app generate --server`` and ``bench --server`` against the real
llama-server of this folder (in-process through ``app.cli.main``)."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from tests.remote.llama_server import LlamaServer
from tests.remote.test_llama_server import PROMPT


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def _model(llama_server: LlamaServer) -> str:
    import httpx

    return str(httpx.get(llama_server.base_url + "/v1/models").json()["data"][0]["id"])


def test_generate_server_json_carries_the_servers_acceptance(
        capsys: pytest.CaptureFixture[str], fresh_llama_server: LlamaServer) -> None:
    llama_server = fresh_llama_server
    out = _json(capsys, "generate", "--server", llama_server.base_url + "/v1",
                "--model", _model(llama_server), "--chat", "--temp", "0",
                "--max-tokens", "48", PROMPT)
    assert out["server"]["engine"] == "llama-server" and out["server"]["method"] == "ngram-simple"
    stats = out["stats"]
    assert stats["draft_n"] > 0 and stats["speculation_scope"] == "request"
    assert stats["acceptance_rate"] == pytest.approx(stats["draft_n_accepted"] / stats["draft_n"])
    assert sum(stats["accepted_per_pos"]) == stats["draft_n_accepted"]
    assert stats["n_tokens"] > 0 and stats["decode_tps"] > 0 and out["text"]


def test_bench_server_reports_medians_and_the_server_wide_change(
        capsys: pytest.CaptureFixture[str], llama_server: LlamaServer) -> None:
    out = _json(capsys, "bench", "--server", llama_server.base_url, "--model",
                _model(llama_server), "--prompts", "builtin:code", "--limit", "2",
                "--repeat", "1", "--max-tokens", "24", "--no-warmup", "-q")
    assert out["summary"]["runs"] == len(out["runs"]) == 2
    assert out["summary"]["decode_tps_median"] > 0
    wide = out["server_wide"]
    drafted = [r for r in out["runs"] if r["draft_n"] is not None]
    assert wide["draft_tokens"] == sum(r["draft_n"] for r in drafted)


def test_generate_server_refuses_compare_and_a_missing_key(
        capsys: pytest.CaptureFixture[str], llama_server: LlamaServer) -> None:
    assert main(["generate", "--server", llama_server.base_url, "--model", "m",
                 "--compare", "x"]) == 2
    assert "needs a local --model" in capsys.readouterr().err
    assert main(["generate", "--server", llama_server.base_url, "--model", "m",
                 "--api-key-env", "TANDEM_TEST_UNSET_KEY", "x"]) == 2
    assert "not set" in capsys.readouterr().err


@pytest.mark.parametrize(("command", "flag"), [
    ("generate", "--prompt-lookup"), ("generate", "--no-spec"), ("generate", "--auto"),
    ("generate", "--suffix"), ("bench", "--prompt-lookup"), ("bench", "--auto")])
def test_a_drafter_option_beside_server_is_refused_not_ignored(
        capsys: pytest.CaptureFixture[str], command: str, flag: str) -> None:
    """The server drafts as it was started: a local drafter's option next to --server is
    a usage error naming it (before anything is sent; nothing listens on port 9)."""
    argv = [command, "--server", "http://127.0.0.1:9", "--model", "m", flag]
    assert main(argv + (["x"] if command == "generate" else [])) == 2
    err = capsys.readouterr().err
    assert f"{flag} has no effect with --server" in err and "Traceback" not in err


def test_generate_server_checks_its_sampling_options_as_a_local_run_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """An out-of-range option is refused before anything is sent (nothing listens on
    port 9), with the local run's message."""
    for where in (["--server", "http://127.0.0.1:9", "--model", "m"], ["--model", "m.gguf"]):
        assert main(["generate", *where, "--temp", "99", "x"]) == 2
        err = capsys.readouterr().err
        assert "Invalid option --temp" in err and "Traceback" not in err, err
