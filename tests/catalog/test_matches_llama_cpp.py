"""The metadata reader must see each tokenizer exactly as llama.cpp does once loaded.

Every case is loaded twice: by :func:`app.catalog.gguf_meta.load_vocab` (header only)
and by llama.cpp itself with ``vocab_only`` (:class:`app.engine.llama.LlamaModel`); the
vocabulary type, size, BOS/EOS ids, add flags and every token text must agree. This is
what makes a pairing check on metadata (before loading, before downloading) the same
check llama.cpp runs on loaded models.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.catalog.gguf_meta import load_vocab
from app.catalog.pairing import check_pair
from tests.catalog.ggufs import token_list, write_vocab_gguf

llama = pytest.importorskip("app.engine.llama")

CASES: dict[str, dict[str, object]] = {
    "spm-defaults": dict(model="llama"),
    "spm-keys": dict(model="llama", bos=5, eos=6, add_bos=False, add_eos=True),
    "bpe-default-pre": dict(model="gpt2", pre="default"),
    "bpe-llama3-pre": dict(model="gpt2", pre="llama-bpe"),
    "bpe-chatglm-pre": dict(model="gpt2", pre="chatglm-bpe"),
    "bpe-keys": dict(model="gpt2", pre="qwen2", bos=3, eos=4),
    "wpm": dict(model="bert"),
    "ugm": dict(model="t5"),
    "rwkv": dict(model="rwkv"),
}


def _as_llama_sees_it(path: Path) -> tuple[object, ...]:
    m = llama.LlamaModel(path, vocab_only=True, n_gpu_layers=0)
    try:
        return (
            llama.VOCAB_TYPE_NAMES.get(m.vocab_type),
            m.n_vocab,
            m.bos if m.bos >= 0 else None,
            m.eos if m.eos >= 0 else None,
            m.add_bos,
            m.add_eos,
            [m.token_text(i) for i in range(m.n_vocab)],
        )
    finally:
        m.close()


def _as_we_see_it(path: Path) -> tuple[object, ...]:
    v = load_vocab(path)
    return (v.vocab_type, v.n_vocab, v.bos_id, v.eos_id, v.add_bos, v.add_eos, v.token_texts(0, v.n_vocab))


@pytest.mark.parametrize("case", sorted(CASES))
def test_synthetic_tokenizers_match_llama_cpp(tmp_path: Path, case: str) -> None:
    toks = token_list(300)
    toks[7] = b""  # llama.cpp shows an empty entry as [EMPTY_7]
    path = write_vocab_gguf(tmp_path / f"{case}.gguf", toks, hparams=True, **CASES[case])  # type: ignore[arg-type]
    assert _as_we_see_it(path) == _as_llama_sees_it(path)


def test_default_ids_outside_the_vocabulary_match_llama_cpp(tmp_path: Path) -> None:
    path = write_vocab_gguf(tmp_path / "two.gguf", 2, model="llama", hparams=True)
    assert _as_we_see_it(path) == _as_llama_sees_it(path)


@pytest.mark.slow
def test_real_models_match_llama_cpp(gemma_path: Path, smollm_path: Path) -> None:
    for path in (gemma_path, smollm_path):
        assert _as_we_see_it(path) == _as_llama_sees_it(path)


@pytest.mark.slow
def test_pairing_on_metadata_equals_pairing_on_loaded_models(gemma_path: Path, smollm_path: Path) -> None:
    from app.engine.session import check_loaded_pair

    pairs = [(gemma_path, gemma_path), (gemma_path, smollm_path), (smollm_path, gemma_path)]
    for t, d in pairs:
        tm = llama.LlamaModel(t, vocab_only=True, n_gpu_layers=0)
        dm = llama.LlamaModel(d, vocab_only=True, n_gpu_layers=0)
        try:
            loaded = check_loaded_pair(tm, dm)
        finally:
            tm.close()
            dm.close()
        meta = check_pair(load_vocab(t), load_vocab(d))
        assert [(c.rule, c.ok) for c in meta.checks] == [(c.rule, c.ok) for c in loaded.checks]
        assert meta.compatible == loaded.compatible


def test_the_loaded_pair_and_the_files_give_the_same_size_warning(
        gemma_path: Path, gemma_q5_1: Path) -> None:
    """The window (two loaded models) and ``models pair`` (two files) word the
    draft-too-large warning with the same percentage: both compare file sizes."""
    from app.catalog.gguf_meta import inspect_gguf, load_vocab
    from app.catalog.pairing import check_pair
    from app.engine.session import check_loaded_pair

    files = check_pair(load_vocab(gemma_q5_1), load_vocab(gemma_path),
                       target_size=inspect_gguf(gemma_q5_1).file_size,
                       draft_size=inspect_gguf(gemma_path).file_size)
    tm = llama.LlamaModel(gemma_q5_1, vocab_only=True, n_gpu_layers=0)
    dm = llama.LlamaModel(gemma_path, vocab_only=True, n_gpu_layers=0)
    try:
        loaded = check_loaded_pair(tm, dm)
    finally:
        tm.close()
        dm.close()
    assert files.warnings and loaded.warnings == files.warnings
