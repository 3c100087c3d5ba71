"""Every ``--json`` output of the CLI carries ``schema_version`` and names exactly the
fields that docs/json.md documents (each object section of the document against one
real output, run in-process on synthetic GGUFs and the local fake hub)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from app.cli import main
from app.cli.json_output import SCHEMA_VERSION
from app.engine.divergence import compare_traces
from app.store import paths
from tests.catalog.fake_hub import FakeHub
from tests.catalog.ggufs import write_vocab_gguf
from tests.engine.test_divergence import rec, trace
from tests.remote.broken_server import BrokenServer

DOC = Path(__file__).resolve().parents[1] / "docs" / "json.md"


def documented_fields() -> dict[str, dict[str, bool]]:
    """``## section`` / ``### section`` → its table's fields (rows "| `name` | type | …"),
    each with whether it is optional (*only …* in its meaning)."""
    sections: dict[str, dict[str, bool]] = {}
    current: dict[str, bool] | None = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if m := re.match(r"#{2,3} (.+?)\s*$", line):
            current = sections.setdefault(m.group(1).strip("` "), {})
        elif current is not None and (m := re.match(r"\|\s*`([^`]+)`\s*\|(.*)", line)):
            current[m.group(1)] = "*only" in m.group(2)
    return {k: v for k, v in sections.items() if v}


def run_json(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> dict[str, Any]:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == status, err
    data = json.loads(out)
    assert isinstance(data, dict) and next(iter(data)) == "schema_version"
    assert data["schema_version"] == SCHEMA_VERSION
    return data


def collect_outputs(capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_target: Path,
                    hub: FakeHub) -> dict[str, Any]:
    """One real output per documented object: section name → the object. (The
    ``models pair`` output checked is the local one; the remote one adds the optional
    ``target`` and ``draft``, checked as :doc:`remote file`.)"""
    folder = paths.models_dir() / "acme" / "x-GGUF"
    folder.mkdir(parents=True)
    target = write_vocab_gguf(folder / "target.gguf", 300, name="Target")
    draft = write_vocab_gguf(folder / "draft.gguf", 300, name="Draft")
    other = write_vocab_gguf(tmp_path / "other.gguf", 300, model="gpt2", pre="default")
    hub.add("acme/x-GGUF", "x.gguf", b"GGUF" + bytes(64))

    out: dict[str, Any] = {}
    gen = run_json(capsys, "generate", "--model", str(tiny_target), "--prompt-lookup",
                   "--max-tokens", "6", "--threads", "1", "hello hello hello")
    out["generate"], out["stats"] = gen, gen["stats"]
    compared = run_json(capsys, "generate", "--model", str(tiny_target), "--prompt-lookup",
                        "--max-tokens", "6", "--threads", "1", "--compare", "hello hello hello")
    assert compared["identical"]  # synthetic F32 weights: speculation is exact
    out["generate --compare"], out["compare run"] = compared, compared["on"]
    assert set(compared["off"]) == set(compared["on"])
    # a difference, measured by the same code on hand-made records (tests/engine)
    d = compare_traces(trace([rec(1, {1: 2.00, 2: 1.95, 3: 0.0})]),
                       trace([rec(2, {1: 1.97, 2: 2.01, 3: 0.0})]), str)
    out["divergence"], out["divergence evidence"] = d.to_dict(), d.evidence()
    bench = run_json(capsys, "bench", "--model", str(tiny_target), "--prompt-lookup",
                     "--prompts", "builtin:chat", "--limit", "1", "--k", "2", "--repeat", "1",
                     "--max-tokens", "4", "--threads", "1", "--no-warmup", "-q")
    out["bench"], out["bench settings"] = bench, bench["settings"]
    out["bench config"], out["bench run"] = bench["configs"][0], bench["runs"][0]
    listed = run_json(capsys, "models", "list")
    out["models list"], out["library entry"] = listed, listed["models"][0]
    out["gguf info"] = listed["models"][0]["info"]
    info = run_json(capsys, "models", "inspect", str(tiny_target))  # a model that loads
    out["models inspect"] = info
    pair = run_json(capsys, "models", "pair", str(target), str(other), status=1)
    out["models pair"], out["pair check"] = pair, pair["checks"][0]
    hub.add("acme/t-GGUF", "t.gguf", target.read_bytes())
    hub.add("acme/d-GGUF", "d.gguf", draft.read_bytes())
    remote = run_json(capsys, "models", "pair", "hf:acme/t-GGUF/t.gguf", "hf:acme/d-GGUF/d.gguf")
    assert {"target", "draft"} <= set(remote)
    out["remote file"] = remote["target"]
    drafts = run_json(capsys, "models", "drafts", str(target))
    out["models drafts"], out["draft candidate"] = drafts, drafts["drafts"][0]
    catalog = run_json(capsys, "models", "catalog")
    out["models catalog"], out["curated pair"] = catalog, catalog["pairs"][0]
    out["curated model"] = catalog["pairs"][0]["target"]
    out["curated file"] = catalog["pairs"][0]["target"]["files"][0]
    out["models download"] = run_json(capsys, "models", "download", "acme/x-GGUF", "x.gguf")
    out["models config"] = run_json(capsys, "models", "config")
    server = BrokenServer()  # a plain OpenAI-compatible server without speculation figures
    try:
        remote = run_json(capsys, "generate", "--server", server.base_url, "--model", "broken",
                          "--chat", "hi")
    finally:
        server.stop()
    out["generate --server"], out["server"] = remote, remote["server"]
    out["remote stats"] = remote["stats"]
    out["serve-command"] = run_json(capsys, "serve-command", "--model", str(target),
                                    "--prompt-lookup", "--engine", "vllm")
    assert draft.is_file()
    return out


def test_every_json_output_is_versioned_and_documented(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_target: Path, hub: FakeHub
) -> None:
    outputs = collect_outputs(capsys, tmp_path, tiny_target, hub)
    documented = documented_fields()
    problems = []
    for name, obj in outputs.items():
        if name not in documented:
            problems.append(f"docs/json.md has no section '{name}'")
            continue
        actual, fields = set(obj), documented[name]
        required = {f for f, optional in fields.items() if not optional}
        if not required <= actual <= set(fields):
            problems.append(f"{name}: undocumented {sorted(actual - set(fields))}, "
                            f"documented but absent {sorted(required - actual)}")
    assert problems == []
    assert set(documented) == set(outputs), "a section of docs/json.md that no output has"


def test_the_document_parser_sees_fields() -> None:
    fields = documented_fields()
    assert "schema_version" in fields["generate"] and "acceptance_rate" in fields["stats"]
    assert fields["bench run"]["token_ids"] is True and fields["bench run"]["stats"] is False
