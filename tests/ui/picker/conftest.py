"""Picker fixtures: a models folder with the real test models, a picker window on it, a
local imitation of the hub (tests/catalog/fake_hub.py) and a curated pair hosted there."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app.catalog.curated import CuratedFile, CuratedModel, CuratedPair
from app.catalog.library import LibraryConfig, save_library_config
from tests.catalog.fake_hub import FakeHub

SCAN_TIMEOUT_MS = 180_000  # a first scan also runs the load check of each model (a child each)

GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA_COPY_FILE = "gemma-3-270m-copy.gguf"
SMOLLM_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_TARGET_REPO = "acme/tiny-target-GGUF"
TINY_DRAFT_REPO = "acme/tiny-draft-GGUF"


def link_or_copy(src: Path, dst: Path) -> Path:
    """A hard link (another path to the same bytes, listed separately by the library), or
    a copy where hard links are not possible."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    return dst


@pytest.fixture(scope="session")
def gemma_renamed(tmp_path_factory: pytest.TempPathFactory, gemma_path: Path) -> Path:
    """Gemma 3 270M with another ``general.name`` ("Gemma 3 270M", same length): another
    model with the same tokenizer, a compatible draft for Gemma (the library lists a file
    with the same content only once, and never as a draft for itself)."""
    path = tmp_path_factory.mktemp("gemma-renamed") / GEMMA_COPY_FILE
    shutil.copyfile(gemma_path, path)
    with path.open("r+b") as f:
        head = f.read(1 << 20)
        at = head.find(b"Gemma 3 270m")
        assert at > 0 and head.count(b"Gemma 3 270m") == 1
        f.seek(at)
        f.write(b"Gemma 3 270M")
    return path


@pytest.fixture
def models_dir(tmp_path: Path, gemma_path: Path, gemma_renamed: Path, smollm_path: Path) -> Path:
    """A models folder with Gemma 3 270M, Gemma under another name (a compatible draft for
    it), SmolLM2-135M-Instruct and a truncated file; saved as the library's models folder
    (in this test's TANDEM_HOME) with LM Studio and the Hugging Face cache left out."""
    d = tmp_path / "models"
    d.mkdir()
    link_or_copy(gemma_path, d / GEMMA_FILE)
    link_or_copy(gemma_renamed, d / GEMMA_COPY_FILE)
    (d / SMOLLM_FILE).symlink_to(smollm_path)
    with smollm_path.open("rb") as f:
        (d / "broken.gguf").write_bytes(f.read(1000))
    save_library_config(LibraryConfig(models_dir=d, scan_lmstudio=False, scan_hf_cache=False))
    return d


@pytest.fixture
def empty_models_dir(tmp_path: Path) -> Path:
    """An empty models folder saved as the library's (downloads go there)."""
    d = tmp_path / "models"
    d.mkdir()
    save_library_config(LibraryConfig(models_dir=d, scan_lmstudio=False, scan_hf_cache=False))
    return d


def wait_scanned(qtbot, picker) -> None:  # type: ignore[no-untyped-def]
    qtbot.waitUntil(lambda: not picker.library_tab.scanning, timeout=SCAN_TIMEOUT_MS)


def _model(name: str, repo: str, file: str, size: int) -> CuratedModel:
    return CuratedModel(name=name, repo=repo, license="mit", default_quant="F32",
                        files=(CuratedFile(quant="F32", file=file, size_bytes=size),))


@pytest.fixture
def tiny_pair(hub: FakeHub, tiny_target: Path, tiny_draft_perturbed: Path) -> CuratedPair:
    """A curated pair of the synthetic tiny models (same tokenizer), hosted on the fake hub."""
    hub.add(TINY_TARGET_REPO, "tiny-target-F32.gguf", tiny_target)
    hub.add(TINY_DRAFT_REPO, "tiny-draft-F32.gguf", tiny_draft_perturbed)
    return CuratedPair(
        id="tiny", title="Tiny target with tiny draft", use="tests",
        target=_model("Tiny-Target", TINY_TARGET_REPO, "tiny-target-F32.gguf",
                      tiny_target.stat().st_size),
        draft=_model("Tiny-Draft", TINY_DRAFT_REPO, "tiny-draft-F32.gguf",
                     tiny_draft_perturbed.stat().st_size),
    )
