"""The robustness scripts' corpora are as large as the README says (nothing is run)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.robustness import download_faults, gguf_corpus, hostile_templates, sigkill


def test_corpus_sizes(tmp_path: Path) -> None:
    good = gguf_corpus.write_model(tmp_path / "good.gguf").read_bytes()
    typed = len(gguf_corpus.ROLES) * len(gguf_corpus.TYPES)
    assert typed == 144
    assert typed + len(gguf_corpus.value_cases()) + len(gguf_corpus.byte_cases(good)) >= 150
    assert len(hostile_templates.HOSTILE) >= 10
    faults = len(download_faults.KINDS) * len(download_faults.per_kind_faults(1000)) + len(download_faults.hub_faults())
    assert faults + 2 >= 30
    from app.chat.reply import SAVE_EVERY_S

    assert sigkill.SAVE_EVERY_S == SAVE_EVERY_S  # the kills measure the chat controller's saves
