"""The curated pairs in resources/catalog/pairs.json: valid, consistent, and as the issue asks."""

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
    } <= names


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
        # the draft is much smaller than the target at the default quantizations
        assert pair.draft.file_for().size_bytes < 0.3 * pair.target.file_for().size_bytes


def test_quant_lookup_and_errors() -> None:
    pair = find_pair("qwen3-8b")
    assert pair.target.file_for("q8_0").file == "Qwen3-8B-Q8_0.gguf"
    with pytest.raises(TandemError, match="choose one of: Q4_K_M, Q5_K_M, Q6_K, Q8_0"):
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
