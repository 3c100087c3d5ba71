"""llama.cpp's pairing rule on real and synthetic GGUFs, and draft ranking for the picker."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.catalog.gguf_meta import load_vocab
from app.catalog.pairing import check_pair, estimate_draft_cost_ratio, rank_drafts
from tests.catalog.ggufs import token_list, write_vocab_gguf


def _rules(result: object) -> dict[str, bool]:
    return {c.rule: c.ok for c in result.checks}  # type: ignore[attr-defined]


def test_gemma_with_itself_is_compatible(gemma_path: Path) -> None:
    v = load_vocab(gemma_path)
    result = check_pair(v, v)
    assert result.compatible
    assert all(c.ok for c in result.checks)
    assert [c.rule for c in result.checks] == ["vocab_type", "bos_token", "eos_token", "vocab_size", "token_text"]
    assert result.reason() == "compatible"


def test_gemma_with_smollm_is_incompatible_by_vocab_type(gemma_path: Path, smollm_path: Path) -> None:
    result = check_pair(load_vocab(gemma_path), load_vocab(smollm_path))
    assert not result.compatible
    assert result.first_failure is not None and result.first_failure.rule == "vocab_type"
    assert "target SPM, draft BPE" in result.first_failure.detail
    assert result.reason().startswith("vocab_type:")
    # every rule is still evaluated and reported
    assert _rules(result) == {"vocab_type": False, "bos_token": False, "eos_token": True,
                              "vocab_size": False, "token_text": False}


@pytest.fixture(scope="module")
def qwen_like(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Qwen2.5 7B pads its vocabulary to 152064 entries, 0.5B to 151936."""
    d = tmp_path_factory.mktemp("qwen")
    big = token_list(152064, specials=("<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"))
    kw = dict(model="gpt2", pre="qwen2", bos=151643, eos=151645, add_bos=False)
    return (write_vocab_gguf(d / "target.gguf", big, **kw),  # type: ignore[arg-type]
            write_vocab_gguf(d / "draft.gguf", big[:151936], **kw))  # type: ignore[arg-type]


def test_vocab_sizes_differing_by_128_are_compatible(qwen_like: tuple[Path, Path]) -> None:
    target, draft = (load_vocab(p) for p in qwen_like)
    result = check_pair(target, draft)
    assert result.compatible, result.reason()
    size = next(c for c in result.checks if c.rule == "vocab_size")
    assert size.ok and "target 152064, draft 151936: difference 128" in size.detail


def test_vocab_sizes_differing_by_129_are_not(tmp_path: Path) -> None:
    toks = token_list(1129)
    t = load_vocab(write_vocab_gguf(tmp_path / "t.gguf", toks))
    d = load_vocab(write_vocab_gguf(tmp_path / "d.gguf", toks[:1000]))
    result = check_pair(t, d)
    assert _rules(result) == {"vocab_type": True, "bos_token": True, "eos_token": True,
                              "vocab_size": False, "token_text": True}
    assert "difference 129" in result.reason()


def test_one_differing_token_is_reported_with_its_id(tmp_path: Path) -> None:
    toks = token_list(40000)
    other = list(toks)
    other[31337] = "▁changed".encode()
    result = check_pair(load_vocab(write_vocab_gguf(tmp_path / "t.gguf", toks)),
                        load_vocab(write_vocab_gguf(tmp_path / "d.gguf", other)))
    assert not result.compatible
    assert result.first_failure is not None and result.first_failure.rule == "token_text"
    assert result.first_failure.detail == f"token 31337 differs: target {toks[31337].decode()!r}, draft '▁changed'"


def test_tokens_below_id_5_are_not_compared(tmp_path: Path) -> None:
    toks = token_list(100)
    other = list(toks)
    other[4] = b"<something-else>"
    result = check_pair(load_vocab(write_vocab_gguf(tmp_path / "t.gguf", toks)),
                        load_vocab(write_vocab_gguf(tmp_path / "d.gguf", other)))
    assert result.compatible


@pytest.mark.parametrize(
    ("target_kw", "draft_kw", "rule", "ok"),
    [
        (dict(add_bos=True, bos=1), dict(add_bos=True, bos=2), "bos_token", False),
        (dict(add_bos=True), dict(add_bos=False), "bos_token", False),
        (dict(add_bos=False, bos=1), dict(add_bos=False, bos=2), "bos_token", True),  # not added: ids may differ
        (dict(add_eos=True, eos=2), dict(add_eos=True, eos=3), "eos_token", False),
        (dict(add_eos=True), dict(add_eos=False), "eos_token", False),
        (dict(add_eos=False, eos=2), dict(add_eos=False, eos=3), "eos_token", True),
        (dict(model="llama"), dict(model="gpt2", pre="default"), "vocab_type", False),
        (dict(model="gpt2", pre="default"), dict(model="gpt2", pre="qwen2"), "vocab_type", True),
    ],
)
def test_each_rule(tmp_path: Path, target_kw: dict[str, object], draft_kw: dict[str, object], rule: str, ok: bool) -> None:
    toks = token_list(300)
    t = load_vocab(write_vocab_gguf(tmp_path / "t.gguf", toks, **target_kw))  # type: ignore[arg-type]
    d = load_vocab(write_vocab_gguf(tmp_path / "d.gguf", toks, **draft_kw))  # type: ignore[arg-type]
    result = check_pair(t, d)
    assert _rules(result)[rule] is ok
    others = {r: v for r, v in _rules(result).items() if r != rule}
    if rule != "vocab_type":
        assert all(others.values()), result.checks
    assert result.compatible is (ok and all(others.values()))


def test_bos_detail_names_both_ids(tmp_path: Path) -> None:
    toks = token_list(300)
    t = load_vocab(write_vocab_gguf(tmp_path / "t.gguf", toks, add_bos=True, bos=1))
    d = load_vocab(write_vocab_gguf(tmp_path / "d.gguf", toks, add_bos=True, bos=2))
    check = next(c for c in check_pair(t, d).checks if c.rule == "bos_token")
    assert check.detail == "add_bos: target True, draft True; BOS id: target 1, draft 2"


def test_large_draft_warns_but_is_compatible(tmp_path: Path) -> None:
    v = load_vocab(write_vocab_gguf(tmp_path / "t.gguf", 300))
    result = check_pair(v, v, target_size=1000, draft_size=600)
    assert result.compatible
    assert result.warnings and "60%" in result.warnings[0]
    assert not check_pair(v, v, target_size=1000, draft_size=400).warnings


def test_rank_drafts_orders_for_the_picker(tmp_path: Path) -> None:
    toks = token_list(300)
    target = load_vocab(write_vocab_gguf(tmp_path / "t.gguf", toks))
    same = load_vocab(write_vocab_gguf(tmp_path / "s.gguf", toks))
    other = load_vocab(write_vocab_gguf(tmp_path / "o.gguf", toks, model="gpt2", pre="default"))
    ranked = rank_drafts(
        target,
        10_000,
        [
            ("incompatible", other, 500),
            ("big", same, 8_000),
            ("small", same, 1_000),
            ("tiny", same, 500),
            ("unknown-size", same, None),
        ],
    )
    assert [c.key for c in ranked] == ["tiny", "small", "unknown-size", "big", "incompatible"]
    by_key = {c.key: c for c in ranked}
    assert by_key["tiny"].cost_ratio == pytest.approx(0.05)
    assert by_key["small"].cost_ratio == pytest.approx(estimate_draft_cost_ratio(10_000, 1_000))
    assert by_key["unknown-size"].cost_ratio is None
    assert by_key["big"].compatible and not by_key["big"].useful
    assert not by_key["incompatible"].compatible
    assert by_key["incompatible"].reason.startswith("vocab_type: target SPM, draft BPE")


def test_eos_detail_names_both_ids_also_when_they_may_differ(tmp_path: Path) -> None:
    """llama.cpp compares EOS ids only when tokenizing adds EOS: the rule passes with
    other ids then, and its detail shows both ids and says why they may differ."""
    toks = token_list(300)
    t = load_vocab(write_vocab_gguf(tmp_path / "t.gguf", toks, add_eos=False, eos=2))
    d = load_vocab(write_vocab_gguf(tmp_path / "d.gguf", toks, add_eos=False, eos=1))
    check = next(c for c in check_pair(t, d).checks if c.rule == "eos_token")
    assert check.ok and check.detail == (
        "add_eos: target False, draft False; EOS id: target 2, draft 1 (not added to "
        "prompts, so the ids may differ)")
