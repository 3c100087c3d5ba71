"""Other apps' models on disk: fake Ollama, llama.cpp, Jan and LM Studio layouts with
tiny synthetic GGUFs (written with ``gguf``), found through the library."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from app.catalog import discovery
from app.catalog.library import Library, LibraryConfig
from tests.catalog.ggufs import write_vocab_gguf

ONLY_OTHER_APPS = dict(scan_lmstudio=False, scan_hf_cache=False)


def _ollama_manifest(models: Path, rel: str, blob_digest: str, *,
                     projector: str | None = None) -> Path:
    layers = [{"mediaType": "application/vnd.ollama.image.template",
               "digest": "sha256:" + "1" * 64, "size": 10}]
    if projector:
        layers.append({"mediaType": "application/vnd.ollama.image.projector",
                       "digest": projector, "size": 10})
    layers.append({"mediaType": "application/vnd.ollama.image.model",
                   "digest": blob_digest, "size": 1})
    manifest = models / "manifests" / rel
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": "sha256:" + "2" * 64, "size": 5},
        "layers": layers,
    }))
    return manifest


def _ollama_blob(models: Path, tmp: Path, name: str) -> str:
    src = write_vocab_gguf(tmp / f"{name}.gguf", 300, name=f"GGUF name of {name}")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    (models / "blobs").mkdir(parents=True, exist_ok=True)
    shutil.copy(src, models / "blobs" / f"sha256-{digest}")  # no .gguf extension
    return f"sha256:{digest}"


@pytest.fixture
def ollama(tmp_path: Path) -> Path:
    models = tmp_path / "ollama" / "models"
    tiny = _ollama_blob(models, tmp_path, "tiny")
    other = _ollama_blob(models, tmp_path, "other")
    _ollama_manifest(models, "registry.ollama.ai/library/tinyllama/latest", tiny)
    _ollama_manifest(models, "registry.ollama.ai/library/tinyllama/1.1b", tiny)  # same blob
    _ollama_manifest(models, "hf.co/acme/Other-GGUF/Q4_K_M", other, projector="sha256:" + "3" * 64)
    _ollama_manifest(models, "registry.ollama.ai/library/pulling/latest", "sha256:" + "4" * 64)
    bad = models / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    deep = models / "manifests" / "registry.ollama.ai" / "library" / "deep" / "latest"
    deep.parent.mkdir(parents=True)
    deep.write_text('{"layers": ' + "[" * 50_000 + "]" * 50_000 + "}")  # past the recursion limit
    return models


def test_ollama_blobs_are_named_by_their_manifests(ollama: Path) -> None:
    found = discovery.find_ollama_models(ollama)
    names = sorted(m.label or "" for m in found)
    assert names == ["hf.co/acme/Other-GGUF:Q4_K_M", "tinyllama:1.1b", "tinyllama:latest"]
    assert all(m.path.parent == ollama / "blobs" and m.path.suffix == "" for m in found)

    entries = Library(LibraryConfig(**ONLY_OTHER_APPS), ollama_dirs=[ollama], llama_cpp_dirs=[],
                      jan_dirs=[]).scan()
    got = {(e.file.source, e.title, e.usable) for e in entries}
    # two tags of one blob are one model; a pull without its blob and a broken manifest
    # are left out; the GGUF header is read although the blob has no extension
    assert got in ({("ollama", "tinyllama:1.1b", True), ("ollama", "hf.co/acme/Other-GGUF:Q4_K_M", True)},
                   {("ollama", "tinyllama:latest", True), ("ollama", "hf.co/acme/Other-GGUF:Q4_K_M", True)})
    assert {e.info.name for e in entries if e.info} == {"GGUF name of tiny", "GGUF name of other"}


def test_ollama_models_folder_from_the_environment(ollama: Path, tmp_path: Path) -> None:
    assert discovery.ollama_models_dirs({"OLLAMA_MODELS": str(ollama), "HOME": str(tmp_path)}) == [ollama]
    home = tmp_path / "home"
    (home / ".ollama").mkdir(parents=True)
    shutil.copytree(ollama, home / ".ollama" / "models")
    dirs = discovery.ollama_models_dirs({"HOME": str(home)})
    assert home / ".ollama" / "models" in dirs
    assert discovery.ollama_models_dirs({"OLLAMA_MODELS": str(tmp_path / "none"),
                                         "HOME": str(home)}) == []


@pytest.fixture
def llama_cache(tmp_path: Path) -> Path:
    cache = tmp_path / "llama.cpp"
    cache.mkdir()
    write_vocab_gguf(cache / "acme_Tiny-GGUF_tiny-Q4_K_M.gguf", 300, name="tiny from -hf")
    (cache / "acme_Tiny-GGUF_tiny-Q4_K_M.gguf.etag").write_text('"abc"')
    (cache / "manifest=acme=Tiny-GGUF=Q4_K_M.json").write_text(json.dumps(
        {"ggufFile": {"rfilename": "tiny-Q4_K_M.gguf", "size": 1},
         "mmprojFile": {"rfilename": "mmproj-tiny-f16.gguf"}}))
    write_vocab_gguf(cache / "acme_Tiny-GGUF_mmproj-tiny-f16.gguf", 300, name="projector")
    write_vocab_gguf(cache / "from-a-url.gguf", 300, name="downloaded with -mu")
    (cache / "manifest=broken.json").write_text("{}")
    (cache / "half.gguf.downloadInProgress").write_bytes(b"GGUF")
    return cache


def test_llama_cpp_flat_cache_with_manifests(llama_cache: Path) -> None:
    entries = Library(LibraryConfig(**ONLY_OTHER_APPS), ollama_dirs=[], llama_cpp_dirs=[llama_cache],
                      jan_dirs=[]).scan()
    got = {(e.file.source, e.title, e.file.repo_id) for e in entries}
    assert got == {("llama.cpp", "acme/Tiny-GGUF:Q4_K_M", "acme/Tiny-GGUF"),
                   ("llama.cpp", "from-a-url.gguf", None)}  # projector and partial left out


def test_llama_cpp_cache_in_the_hugging_face_layout(tmp_path: Path) -> None:
    cache = tmp_path / "llama-cache"
    snap = cache / "models--acme--Hub-GGUF" / "snapshots" / ("c" * 40)
    snap.mkdir(parents=True)
    (cache / "models--acme--Hub-GGUF" / "refs").mkdir()
    (cache / "models--acme--Hub-GGUF" / "refs" / "main").write_text("c" * 40)
    write_vocab_gguf(snap / "hub-Q8_0.gguf", 300, name="hub layout")
    assert discovery.is_hf_cache_layout(cache)
    entries = Library(LibraryConfig(**ONLY_OTHER_APPS), ollama_dirs=[], llama_cpp_dirs=[cache],
                      jan_dirs=[]).scan()
    assert {(e.file.source, e.title, e.file.repo_id) for e in entries} == {
        ("llama.cpp", "hub-Q8_0.gguf", "acme/Hub-GGUF")}


def test_llama_cpp_cache_folder_per_platform(tmp_path: Path) -> None:
    (tmp_path / "custom").mkdir()
    (tmp_path / "xdg" / "llama.cpp").mkdir(parents=True)
    (tmp_path / "Library" / "Caches" / "llama.cpp").mkdir(parents=True)
    assert discovery.llama_cpp_cache_dirs({"LLAMA_CACHE": str(tmp_path / "custom")}, "linux") == [
        tmp_path / "custom"]
    assert discovery.llama_cpp_cache_dirs({"XDG_CACHE_HOME": str(tmp_path / "xdg"),
                                           "HOME": str(tmp_path)}, "linux") == [tmp_path / "xdg" / "llama.cpp"]
    assert discovery.llama_cpp_cache_dirs({"HOME": str(tmp_path)}, "darwin") == [
        tmp_path / "Library" / "Caches" / "llama.cpp"]
    assert discovery.llama_cpp_cache_dirs({"HOME": str(tmp_path / "nobody")}, "linux") == []


@pytest.fixture
def jan(tmp_path: Path) -> dict[str, Path]:
    data_home = tmp_path / "xdg-data"
    moved = tmp_path / "elsewhere" / "jan-data"  # the user moved Jan's data folder
    (data_home / "Jan").mkdir(parents=True)
    (data_home / "Jan" / "settings.json").write_text(json.dumps({"data_folder": str(moved)}))
    downloaded = moved / "llamacpp" / "models" / "acme" / "Jan-GGUF" / "jan-Q4_K_M.gguf"
    downloaded.mkdir(parents=True)
    write_vocab_gguf(downloaded / "model.gguf", 300, name="jan download")
    (downloaded / "model.yml").write_text(
        "model_path: llamacpp/models/acme/Jan-GGUF/jan-Q4_K_M.gguf/model.gguf\n"
        "name: Jan's Tiny\nsize_bytes: 1234\n")
    (tmp_path / "imports").mkdir()
    imported_file = write_vocab_gguf(tmp_path / "imports" / "outside.gguf", 300, name="imported")
    imported = moved / "llamacpp" / "models" / "outside"
    imported.mkdir(parents=True)
    (imported / "model.yml").write_text(f"model_path: {imported_file}\nname: outside\n")
    gone = moved / "llamacpp" / "models" / "gone"
    gone.mkdir(parents=True)
    (gone / "model.yml").write_text("model_path: llamacpp/models/gone/model.gguf\nname: gone\n")
    garbled = moved / "llamacpp" / "models" / "garbled"
    garbled.mkdir(parents=True)
    (garbled / "model.yml").write_text("model_path: [unclosed\n")
    return {"data_home": data_home, "moved": moved}


def test_jan_models_from_its_configured_data_folder(jan: dict[str, Path], tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(jan["data_home"]), "HOME": str(tmp_path / "home")}
    folders = discovery.jan_data_folders(env, "linux")
    assert folders == [jan["moved"]]
    entries = Library(LibraryConfig(**ONLY_OTHER_APPS), ollama_dirs=[], llama_cpp_dirs=[],
                      jan_dirs=folders).scan()
    got = {(e.file.source, e.title, e.info.name if e.info else None) for e in entries}
    assert got == {("jan", "Jan's Tiny", "jan download"), ("jan", "outside", "imported")}


def test_jan_default_and_legacy_folders(tmp_path: Path) -> None:
    home = tmp_path / "home"
    default = home / ".local" / "share" / "Jan" / "data"
    default.mkdir(parents=True)
    legacy = home / "jan" / "models" / "old-model"
    legacy.mkdir(parents=True)
    write_vocab_gguf(legacy / "old.gguf", 300, name="jan 0.4 model")
    folders = discovery.jan_data_folders({"HOME": str(home)}, "linux")
    assert folders == [default, home / "jan"]
    entries = Library(LibraryConfig(**ONLY_OTHER_APPS), ollama_dirs=[], llama_cpp_dirs=[],
                      jan_dirs=folders).scan()
    assert {(e.file.source, e.title) for e in entries} == {("jan", "old.gguf")}


def test_lmstudio_folder_from_its_own_settings(tmp_path: Path) -> None:
    home = tmp_path / "home"
    moved_home = tmp_path / "big-disk" / ".lmstudio"
    chosen = tmp_path / "big-disk" / "models"
    (chosen / "pub" / "repo").mkdir(parents=True)
    write_vocab_gguf(chosen / "pub" / "repo" / "lm.gguf", 300, name="LM Studio model")
    moved_home.mkdir(parents=True)
    (moved_home / "settings.json").write_text(json.dumps({"downloadsFolder": str(chosen)}))
    home.mkdir()
    (home / ".lmstudio-home-pointer").write_text(str(moved_home))
    dirs = discovery.lmstudio_models_dirs({"HOME": str(home)})
    assert dirs == [chosen]
    entries = Library(LibraryConfig(scan_hf_cache=False, scan_ollama=False, scan_llama_cpp=False,
                                    scan_jan=False), lmstudio_dirs=dirs).scan()
    assert {(e.file.source, e.title, e.file.repo_id) for e in entries} == {
        ("lmstudio", "lm.gguf", "pub/repo")}
    # without settings: <home>/models of the default home
    plain = tmp_path / "plain"
    (plain / ".lmstudio" / "models").mkdir(parents=True)
    assert discovery.lmstudio_models_dirs({"HOME": str(plain)}) == [plain / ".lmstudio" / "models"]


def test_other_apps_can_be_switched_off(ollama: Path, llama_cache: Path) -> None:
    config = LibraryConfig(scan_ollama=False, scan_llama_cpp=False, scan_jan=False, **ONLY_OTHER_APPS)
    assert Library(config, ollama_dirs=[ollama], llama_cpp_dirs=[llama_cache], jan_dirs=[]).discover() == []
    config = LibraryConfig(**ONLY_OTHER_APPS)
    assert Library(config, ollama_dirs=[ollama], llama_cpp_dirs=[llama_cache], jan_dirs=[]).discover()


def test_default_folders_follow_the_environment(ollama: Path, tandem_home: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Library() with no folders given reads OLLAMA_MODELS (conftest isolates the rest)."""
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    entries = Library(LibraryConfig(**ONLY_OTHER_APPS)).scan()
    assert {e.file.source for e in entries} == {"ollama"} and len(entries) == 2
    assert all(e.to_dict()["label"] for e in entries)
