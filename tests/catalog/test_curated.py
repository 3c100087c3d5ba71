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
    names = {(p.target.name, p.draft.name) for p in load_curated_pairs() if p.draft}
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
             if sum(m.file_for().size_bytes for m in p.models) < 2.5e9]
    assert len(small) >= 2 and all("CPU" in p.use for p in small)


def test_every_file_records_whether_its_name_was_confirmed_and_how() -> None:
    raw = json.loads(default_pairs_path().read_text(encoding="utf-8"))
    for pair in raw["pairs"]:
        for side in ("target", "draft"):
            for f in pair[side]["files"] if side in pair else ():
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
        for model in pair.models:
            assert model.repo.lower().endswith("gguf"), model.repo
            for f in model.files:
                assert f.quant.lower() in f.file.lower(), (model.repo, f.file)
                assert f.size_approx  # sizes are verified against the hub at download time
                if f.parts > 1:
                    assert split_parts(Path(f.file)) is not None
                    assert len(f.filenames) == f.parts
        # the draft is much smaller than the target at the default quantizations: well
        # under half, where the pairing check warns "too large to help"
        if pair.draft is not None:
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


#: the hybrid and MTP entries: (id, target architecture, memory, MTP layers in the target,
#: draft kind or None, the drafters Tandem runs for them)
HYBRID_AND_MTP = [
    ("qwen3.5-0.8b-mtp", "qwen35", "hybrid", 1, None, {"mtp", "suffix", "prompt-lookup"}),
    ("qwen3.5-4b-mtp", "qwen35", "hybrid", 1, "draft-model",
     {"mtp", "suffix", "prompt-lookup", "draft-model"}),
    ("lfm2.5-1.2b-instruct", "lfm2", "hybrid", 0, "draft-model",
     {"suffix", "prompt-lookup", "draft-model"}),
    ("nemotron-3-nano-4b", "nemotron_h", "hybrid", 0, None, {"suffix", "prompt-lookup"}),
    ("gemma-4-e2b-it", "gemma4", "attention", 0, "mtp-assistant", {"mtp", "suffix", "prompt-lookup"}),
]


@pytest.mark.parametrize(("pair_id", "arch", "memory", "mtp", "draft_kind", "drafters"),
                         HYBRID_AND_MTP, ids=[row[0] for row in HYBRID_AND_MTP])
def test_hybrid_and_mtp_entries_say_what_they_are_and_what_drafts_for_them(
        pair_id: str, arch: str, memory: str, mtp: int, draft_kind: str | None,
        drafters: set[str]) -> None:
    import app.engine.drafter_kinds  # noqa: F401  (declares the MTP drafter's mode)
    from app.options import SpecMode

    pair = find_pair(pair_id)
    t = pair.target
    assert (t.architecture, t.memory, t.mtp_layers) == (arch, memory, mtp)
    assert set(pair.drafters) == drafters
    assert all(SpecMode(m).info is not None for m in pair.drafters)  # registry modes
    if draft_kind is None:
        assert pair.draft is None and pair.models == (t,) and pair.label == t.name
    else:
        assert pair.draft is not None and pair.draft_kind == draft_kind
        assert pair.draft.memory == memory and pair.label == f"{t.name} + {pair.draft.name}"
    if draft_kind == "mtp-assistant":  # Gemma 4's separate drafter: not a draft model
        assert pair.draft is not None and pair.draft.architecture == "gemma4-assistant"
        assert pair.draft.repo == t.repo and "draft-model" not in pair.drafters
    # CPU-friendly: the default files together stay under 3.5 GB
    assert sum(m.file_for().size_bytes for m in pair.models) < 3.5e9
    for m in pair.models:
        for f in m.files:  # every name confirmed, with the URL of where
            assert f.name_confirmed and f.confirmed_by and f.file in f.confirmed_by
            assert f"https://huggingface.co/{m.repo}" in f.confirmed_by


def test_an_entry_must_back_its_drafters() -> None:
    from app.catalog.curated import CuratedModel, CuratedPair

    def model(mtp: int = 0) -> CuratedModel:
        return CuratedModel(name="M", repo="o/m-GGUF", default_quant="Q8_0", mtp_layers=mtp,
                            files=({"quant": "Q8_0", "file": "m-Q8_0.gguf", "size_bytes": 1},))

    CuratedPair(id="a", title="a", target=model(1), drafters=("mtp", "suffix"))
    CuratedPair(id="b", title="b", target=model(), draft=model(), draft_kind="mtp-assistant",
                drafters=("mtp",))
    for bad, why in (({"target": model(), "drafters": ("mtp",)}, "mtp needs"),
                     ({"target": model(), "drafters": ("draft-model",)}, "draft-model needs"),
                     ({"target": model(), "draft": model(), "draft_kind": "mtp-assistant",
                       "drafters": ("draft-model",)}, "draft-model needs"),
                     ({"target": model()}, "must list its drafters"),
                     ({"target": model(1), "drafters": ("mtp", "mtp")}, "must not repeat"),
                     ({"target": model(1), "drafters": ("eagle",)}, "drafters")):
        with pytest.raises(ValueError, match=why):
            CuratedPair(id="x", title="x", **bad)  # type: ignore[arg-type]
