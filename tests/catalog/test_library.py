"""The model library: sources, split grouping, what is not a model, config, draft ranking."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app.catalog.library import (
    Library,
    LibraryConfig,
    current_models_dir,
    drafts_for,
    library_config_path,
    load_library_config,
    save_library_config,
)
from app.errors import GGUFError, TandemError
from app.store import paths
from tests.catalog.ggufs import write_small_model, write_vocab_gguf


def _hf_cache_repo(cache: Path, repo_id: str, files: dict[str, Path], commit: str = "c" * 40) -> None:
    """A Hugging Face cache entry laid out as huggingface_hub writes it (blobs + symlinks)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for i, (name, src) in enumerate(files.items()):
        blob = repo / "blobs" / f"{i:064x}"
        shutil.copy(src, blob)
        link = snap / name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    models = paths.models_dir()
    tiny_dir = models / "acme" / "tiny-GGUF"
    tiny_dir.mkdir(parents=True)
    write_vocab_gguf(tiny_dir / "tiny-Q8_0.gguf", 300, name="Tiny")
    write_vocab_gguf(tiny_dir / "mmproj-tiny-f16.gguf", 300, name="projector")
    write_vocab_gguf(tiny_dir / "imatrix.gguf", 300, name="imatrix")
    write_vocab_gguf(tiny_dir / "lora.gguf", 300, name="an adapter", general_type="adapter")
    (tiny_dir / ".partial").mkdir()
    write_vocab_gguf(tiny_dir / ".partial" / "hidden.gguf", 300)
    (tiny_dir / "next.gguf.incomplete").write_bytes(b"GGUF")
    split_dir = models / "acme" / "split-GGUF"
    split_dir.mkdir(parents=True)
    write_small_model(split_dir / "small.gguf", split_max_tensors=3)
    (models / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 10)
    (models / "loose").mkdir()
    write_vocab_gguf(models / "loose" / "orphan-00002-of-00002.gguf", 10)

    lm = tmp_path / "lmstudio"
    (lm / "pub" / "repo").mkdir(parents=True)
    write_vocab_gguf(lm / "pub" / "repo" / "lm-model.gguf", 300, name="From LM Studio")

    hf = tmp_path / "hf-cache"
    src = tmp_path / "src"
    src.mkdir()
    hf_parts = write_small_model(src / "hfsplit.gguf", split_max_tensors=4)  # 8 tensors: 2 parts
    _hf_cache_repo(hf, "owner/hf-GGUF", {p.name: p for p in hf_parts} | {"README.md": src / hf_parts[0].name})

    extra = tmp_path / "extra" / "deep" / "er"
    extra.mkdir(parents=True)
    write_vocab_gguf(extra / "added.gguf", 300, name="Added folder model")
    return {"models": models, "lmstudio": lm, "hf": hf, "extra": tmp_path / "extra"}


def test_scan_finds_every_source(tree: dict[str, Path]) -> None:
    config = LibraryConfig(folders=[tree["extra"], tree["models"]])  # models dir twice: listed once
    entries = Library(config, lmstudio_dirs=[tree["lmstudio"]], hf_cache_dir=tree["hf"]).scan()
    got = {(e.file.source, e.name, e.file.repo_id) for e in entries if e.usable}
    assert got == {
        ("models", "Tiny", "acme/tiny-GGUF"),
        ("models", "small-split-test", "acme/split-GGUF"),
        ("folder", "Added folder model", None),
        ("lmstudio", "From LM Studio", "pub/repo"),
        ("hf-cache", "small-split-test", "owner/hf-GGUF"),
    }
    by_name = {e.path.name: e for e in entries}
    split = by_name["small-00001-of-00003.gguf"]
    assert split.info is not None and split.info.split_count == 3 and len(split.file.parts) == 3
    hf = by_name["hfsplit-00001-of-00002.gguf"]
    assert hf.info is not None and hf.info.split_count == 2
    assert hf.path.is_symlink()  # the snapshot link, whose name tells the parts
    # not models: projector, imatrix, adapter, hidden and partial files
    names = {e.path.name for e in entries}
    assert not names & {"mmproj-tiny-f16.gguf", "imatrix.gguf", "lora.gguf", "hidden.gguf", "next.gguf.incomplete"}
    # unreadable ones are listed with the reason
    assert "not a usable GGUF" in (by_name["broken.gguf"].error or "")
    orphan = by_name["orphan-00001-of-00002.gguf"]
    assert orphan.info is None and "1 of 2 parts are missing (orphan-00001-of-00002.gguf)" in (orphan.error or "")


def test_sources_can_be_switched_off(tree: dict[str, Path]) -> None:
    config = LibraryConfig(scan_lmstudio=False, scan_hf_cache=False)
    sources = {m.source for m in Library(config, lmstudio_dirs=[tree["lmstudio"]], hf_cache_dir=tree["hf"]).discover()}
    assert sources == {"models"}


def test_scan_progress_and_cancel(tree: dict[str, Path]) -> None:
    import threading

    cancel = threading.Event()
    seen: list[tuple[int, int]] = []

    def progress(done: int, total: int, _path: Path) -> None:
        seen.append((done, total))
        if done == 1:
            cancel.set()

    lib = Library(LibraryConfig(scan_hf_cache=False, scan_lmstudio=False))
    entries = lib.scan(on_progress=progress, cancel=cancel)
    assert seen[0][0] == 0 and seen[-1][0] == 1
    assert len(entries) <= 2 < seen[0][1]


def test_config_roundtrip_and_models_dir(tmp_path: Path) -> None:
    assert load_library_config() == LibraryConfig()
    chosen = tmp_path / "my models"
    config = LibraryConfig(models_dir=chosen, folders=[tmp_path], hf_endpoint="https://hf-mirror.example")
    save_library_config(config)
    loaded = load_library_config()
    assert loaded == config
    assert current_models_dir(loaded) == chosen and chosen.is_dir()
    assert current_models_dir(LibraryConfig()) == paths.models_dir()


def test_a_models_folder_that_cannot_be_made_is_said_in_words(tmp_path: Path) -> None:
    """A configured models folder that is a file (or a drive that is gone): the CLI and
    the downloads get a FolderError naming it; the library uses <data>/models meanwhile
    and says why."""
    from app.errors import FolderError

    a_file = tmp_path / "a file"
    a_file.write_text("not a folder")
    config = LibraryConfig(models_dir=a_file)
    with pytest.raises(FolderError, match=r"models folder .*a file is a file, not a folder"):
        current_models_dir(config)
    library = Library(config, lmstudio_dirs=[], ollama_dirs=[], llama_cpp_dirs=[],
                      jan_dirs=[], hf_cache_dir=None)
    assert library.models_dir == paths.models_dir()
    assert library.models_dir_problem is not None and "a file" in library.models_dir_problem
    under = LibraryConfig(models_dir=a_file / "models")  # its parent is a file
    with pytest.raises(FolderError, match="cannot create its models folder"):
        current_models_dir(under)


def test_broken_config_gives_defaults(tmp_path: Path) -> None:
    path = library_config_path()
    path.write_text("{not json")
    assert load_library_config() == LibraryConfig()
    path.write_text('{"folders": 3}')
    assert load_library_config() == LibraryConfig()
    assert path.read_text() == '{"folders": 3}'  # left for the user to see
    path.write_text("[" * 50_000 + "]" * 50_000)  # nested past the recursion limit
    assert load_library_config() == LibraryConfig()


def test_add_file_and_folder(tmp_path: Path) -> None:
    lib = Library(LibraryConfig(scan_hf_cache=False, scan_lmstudio=False))
    model = write_vocab_gguf(tmp_path / "model.gguf", 300, name="Opened")
    assert lib.add_file(model).name == "Opened"
    with pytest.raises(TandemError, match="adapter file, not a language model"):
        lib.add_file(write_vocab_gguf(tmp_path / "x.gguf", 300, general_type="adapter"))
    (tmp_path / "junk.gguf").write_bytes(b"junk")
    with pytest.raises(GGUFError):
        lib.add_file(tmp_path / "junk.gguf")
    with pytest.raises(TandemError, match="is not a folder"):
        lib.add_folder(tmp_path / "nope")
    assert [e.name for e in lib.scan()] == ["Opened"]
    lib.save()
    assert load_library_config().files == [model]
    lib.remove(model)
    assert lib.scan() == []


def test_drafts_for_lists_compatible_first_with_reasons(gemma_path: Path, smollm_path: Path, tmp_path: Path) -> None:
    (tmp_path / "junk.gguf").write_bytes(b"junk")
    config = LibraryConfig(files=[gemma_path, smollm_path], folders=[tmp_path], scan_hf_cache=False, scan_lmstudio=False)
    entries = Library(config).scan()
    gemma = next(e for e in entries if e.path == gemma_path)
    smol = next(e for e in entries if e.path == smollm_path)
    ranked = drafts_for(smol, entries)
    assert [c.key.path for c in ranked] == [gemma_path, tmp_path / "junk.gguf"]  # the target itself is left out
    assert not ranked[0].compatible and ranked[0].reason.startswith("vocab_type: target BPE, draft SPM")
    assert ranked[0].cost_ratio == pytest.approx(gemma_path.stat().st_size / smollm_path.stat().st_size)
    assert ranked[1].result.checks[0].rule == "readable"
    assert drafts_for(gemma, [gemma]) == []


def test_remember_opened_model_adds_a_file_once_and_skips_covered_ones(tmp_path: Path) -> None:
    from app.catalog.library import Library, LibraryConfig, load_library_config, remember_opened_model, save_library_config

    models = tmp_path / "models"
    (models / "a").mkdir(parents=True)
    save_library_config(LibraryConfig(models_dir=models, scan_lmstudio=False, scan_hf_cache=False))
    outside = tmp_path / "elsewhere" / "m.gguf"
    outside.parent.mkdir()
    outside.write_bytes(b"GGUF")
    assert remember_opened_model(outside)
    assert not remember_opened_model(outside)  # once
    assert not remember_opened_model(models / "a" / "x.gguf")  # the models folder is scanned
    assert load_library_config().files == [outside]
    # a library opened before sees the file after reload()
    lib = Library(load_library_config())
    assert lib.covers(outside)


def test_a_copy_of_a_model_is_listed_once_and_never_a_draft_for_itself(smollm_path: Path, tmp_path: Path) -> None:
    """The demo written into the models folder and the same file opened from elsewhere,
    reached again through a symlinked folder and a hard link: one entry, no self-draft."""
    from app.catalog.library import remember_opened_model

    models = paths.models_dir()
    shutil.copy(smollm_path, models / smollm_path.name)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(smollm_path, elsewhere / smollm_path.name)
    os.link(elsewhere / smollm_path.name, elsewhere / "hardlink.gguf")
    os.symlink(elsewhere, tmp_path / "via-link")
    assert remember_opened_model(elsewhere / smollm_path.name)
    library = Library()
    library.add_folder(tmp_path / "via-link")
    library.save()

    entries = Library().scan()
    assert [e.path for e in entries] == [models / smollm_path.name]
    [entry] = entries
    assert entry.is_file(elsewhere / smollm_path.name)
    assert entry.is_file(tmp_path / "via-link" / "hardlink.gguf")
    assert drafts_for(entry, [entry]) == []
    # a caller that hands both copies still gets no self-draft
    other = Library(LibraryConfig(models_dir=tmp_path / "empty", files=[elsewhere / smollm_path.name]),
                    lmstudio_dirs=[], ollama_dirs=[], llama_cpp_dirs=[], jan_dirs=[], hf_cache_dir=tmp_path / "none")
    [copy] = [e for e in other.scan() if e.path == elsewhere / smollm_path.name]
    assert drafts_for(entry, [entry, copy]) == []


def test_different_models_of_one_size_stay_apart(tmp_path: Path) -> None:
    """Content identity compares bytes, not sizes: two synthetic models of equal size but
    different weights are two entries."""
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    write_small_model(a, seed=1)
    write_small_model(b, seed=2)
    assert a.stat().st_size == b.stat().st_size
    library = Library(LibraryConfig(models_dir=tmp_path / "empty", files=[a, b]), lmstudio_dirs=[], ollama_dirs=[], llama_cpp_dirs=[],
                      jan_dirs=[], hf_cache_dir=tmp_path / "none")
    assert sorted(e.path.name for e in library.scan()) == ["a.gguf", "b.gguf"]


def test_the_installed_gemma_demo_is_written_into_the_models_folder_when_asked(
        tmp_path: Path) -> None:
    """The ``demo`` extra's package is installed here: a scan asked to (the Models
    window's button) writes its model into the models folder and lists it; a plain scan
    never writes it (253 MB), also after the user deleted it."""
    from app.catalog import library as library_module
    from app.catalog.demo import GEMMA3

    assert GEMMA3 in library_module.__dict__["DEMOS"].values()
    library = Library(LibraryConfig(), lmstudio_dirs=[], ollama_dirs=[], llama_cpp_dirs=[], jan_dirs=[],
                      hf_cache_dir=tmp_path / "none", demos=[GEMMA3])
    assert library.missing_demos() == (GEMMA3,)
    assert library.scan() == [] and library.missing_demos() == (GEMMA3,)
    [entry] = library.scan(write_demos=True)
    assert entry.path == paths.models_dir() / GEMMA3.file
    assert entry.usable and entry.info is not None and entry.info.architecture == "gemma3"
    assert library.missing_demos() == ()
    mtime = entry.path.stat().st_mtime_ns
    assert [e.path for e in library.scan(write_demos=True)] == [entry.path]
    assert entry.path.stat().st_mtime_ns == mtime  # not written again while it is there
    entry.path.unlink()  # the user deletes it: it stays deleted until asked for again
    assert library.scan() == [] and not entry.path.exists()
    assert library.missing_demos() == (GEMMA3,)


def test_a_demo_that_cannot_be_written_says_why(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Too little room for the demo (and 1 GB to spare): nothing is written, and the
    scan that was asked to write it says why (the Models window shows it)."""
    from collections import namedtuple

    from app.catalog import library as library_module
    from app.catalog.demo import GEMMA3

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(library_module.shutil, "disk_usage",
                        lambda _p: usage(10**9, 9 * 10**8, 10**8))
    library = Library(LibraryConfig(), lmstudio_dirs=[], ollama_dirs=[], llama_cpp_dirs=[], jan_dirs=[],
                      hf_cache_dir=tmp_path / "none", demos=[GEMMA3])
    assert library.scan(write_demos=True) == []
    assert not (paths.models_dir() / GEMMA3.file).exists()
    [why] = library.demo_problems
    assert why.startswith("Gemma 3 270M was not written into") and "253 MB" in why
