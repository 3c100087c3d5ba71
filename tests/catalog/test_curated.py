"""The curated pairs in resources/catalog/pairs.json: valid, consistent, and with pairs for
CPUs and GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.catalog.curated import default_pairs_path, find_pair, load_curated_pairs
from app.catalog.gguf_meta import split_parts
from app.errors import TandemError


def test_the_required_pairs_are_there() -> None:
    names = {(p.target.name, p.draft.name) for p in load_curated_pairs()}
    assert {
        ("Qwen2.5-7B-Instruct", "Qwen2.5-0.5B-Instruct"),
        ("Qwen2.5-Coder-7B-Instruct", "Qwen2.5-Coder-0.5B-Instruct"),
        ("Qwen3-8B", "Qwen3-0.6B"),
        ("Llama-3.1-8B-Instruct", "Llama-3.2-1B-Instruct"),
        ("Gemma-3-12B-it", "Gemma-3-270M-it"),
        ("Gemma-3-27B-it", "Gemma-3-1B-it"),
        ("Qwen2.5-Coder-32B-Instruct", "Qwen2.5-Coder-0.5B-Instruct"),
        ("SmolLM2-1.7B-Instruct", "SmolLM2-135M-Instruct"),
        ("Qwen2.5-1.5B-Instruct", "Qwen2.5-0.5B-Instruct"),
    } <= names


def test_some_pairs_suit_a_cpu() -> None:
    # pairs of 5–8 GB each alone would leave nothing that suits a CPU
    small = [p for p in load_curated_pairs()
             if p.target.file_for().size_bytes + p.draft.file_for().size_bytes < 2.5e9]
    assert len(small) >= 2 and all("CPU" in p.use for p in small)


def test_every_file_records_whether_its_name_was_confirmed_and_how() -> None:
    raw = json.loads(default_pairs_path().read_text(encoding="utf-8"))
    for pair in raw["pairs"]:
        for side in ("target", "draft"):
            for f in pair[side]["files"]:
                assert "name_confirmed" in f, (pair["id"], f["file"])
                if f["name_confirmed"]:
                    assert f["confirmed_by"] and f["file"] in f["confirmed_by"] or (
                        "model card" in f["confirmed_by"]), (pair["id"], f["file"])
                else:
                    assert f.get("confirmed_by") is None
    with pytest.raises(ValueError, match="confirmed_by"):
        from app.catalog.curated import CuratedFile

        CuratedFile(quant="Q8_0", file="x-Q8_0.gguf", size_bytes=1, name_confirmed=True)


def test_files_are_consistent() -> None:
    for pair in load_curated_pairs():
        for model in (pair.target, pair.draft):
            assert model.repo.lower().endswith("gguf"), model.repo
            for f in model.files:
                assert f.quant.lower() in f.file.lower(), (model.repo, f.file)
                assert f.size_approx  # sizes are verified against the hub at download time
                if f.parts > 1:
                    assert split_parts(Path(f.file)) is not None
                    assert len(f.filenames) == f.parts
        # the draft is much smaller than the target at the default quantizations: well
        # under half, where the pairing check warns "too large to help"
        assert pair.draft.file_for().size_bytes < 0.3 * pair.target.file_for().size_bytes


def test_quant_lookup_and_errors() -> None:
    pair = find_pair("qwen3-8b")
    assert pair.target.file_for("q8_0").file == "Qwen3-8B-Q8_0.gguf"
    with pytest.raises(TandemError, match="choose one of: Q4_K_M, Q8_0"):
        pair.target.file_for("IQ1_S")
    with pytest.raises(TandemError, match="No curated pair 'nope'"):
        find_pair("nope")


def test_invalid_catalog_file_is_a_clear_error(tmp_path: Path) -> None:
    raw = json.loads(default_pairs_path().read_text())
    raw["pairs"][0]["target"]["default_quant"] = "Q9"
    bad = tmp_path / "pairs.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(TandemError, match=r"invalid at pairs\.0\.target"):
        load_curated_pairs(bad)
    bad.write_text("{")
    with pytest.raises(TandemError, match="not valid JSON"):
        load_curated_pairs(bad)
