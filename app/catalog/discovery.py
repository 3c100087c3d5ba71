"""Models that other local-LLM apps already downloaded: where each app keeps them.

Used by :class:`app.catalog.library.Library` so that a GGUF on disk is offered once,
wherever it came from, instead of being downloaded again. Each app's own files say where
its models are and what they are called; nothing here loads a model or reads more than a
small settings or manifest file:

* **Ollama** stores weights as content-addressed blobs without a ``.gguf`` extension
  (``<models>/blobs/sha256-<hex>``); its manifests (``<models>/manifests/<registry>/
  <namespace>/<model>/<tag>``, OCI-style JSON) name them: the layer of media type
  ``application/vnd.ollama.image.model`` is the GGUF. ``<models>`` is ``$OLLAMA_MODELS``,
  else ``~/.ollama/models`` and, for the Linux system service,
  ``/usr/share/ollama/.ollama/models``.
* **llama.cpp** (``-hf`` / ``--hf-repo``) downloads into ``$LLAMA_CACHE``, else (recent
  versions) the Hugging Face cache, which the library scans already, and (earlier
  versions) a flat cache folder (``~/.cache/llama.cpp``, ``~/Library/Caches/llama.cpp``,
  ``%LOCALAPPDATA%\\llama.cpp``) with files named ``<owner>_<repo>_<file>.gguf`` next to
  ``manifest=<owner>=<repo>=<tag>.json`` files whose ``ggufFile.rfilename`` names them.
* **Jan** keeps a model per folder under ``<data folder>/llamacpp/models/<id>/`` with a
  ``model.yml`` whose ``model_path`` is relative to the data folder (downloads) or absolute
  (imports) and whose ``name`` is the display name. The data folder is ``data_folder`` in
  Jan's ``settings.json`` (``<user data dir>/Jan/settings.json``; older installs
  ``<user data dir>/jan.ai.app/`` or ``~/.config/Jan/``), by default
  ``<user data dir>/Jan/data``. Jan 0.4 kept GGUFs under ``~/jan/models``.
* **LM Studio** downloads into ``<home>/models`` as ``<publisher>/<repo>/<file>``, where
  ``<home>`` is ``~/.lmstudio`` (or the folder written in ``~/.lmstudio-home-pointer``
  when it was moved; ``~/.cache/lm-studio`` for versions before 0.3). When the user
  chose another models folder, ``downloadsFolder`` in ``<home>/settings.json`` says where.

Every function reads the environment and the disk when called, never raises for a
missing or malformed file (it is skipped and logged at INFO), and follows the apps'
layouts as of late 2026.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.formatting import loads_json

log = logging.getLogger(__name__)

#: Ollama's media type of the layer that holds the GGUF weights
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_DEFAULT_REGISTRY = "registry.ollama.ai"


@dataclass(frozen=True, slots=True)
class FoundModel:
    """A model file another app keeps, with the name that app gives it.

    Attributes:
        path: the GGUF (for Ollama, a blob without extension).
        label: the app's name for it (``llama3.2:1b``, ``owner/repo:Q4_K_M``, Jan's name),
            or None when the app gives none.
        repo_id: ``owner/name`` on the Hugging Face hub when the app records it.
    """

    path: Path
    label: str | None = None
    repo_id: str | None = None


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _home(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME") or environ.get("USERPROFILE")
    return Path(home) if home else Path.home()


def _read_json(path: Path) -> Any:
    try:
        return loads_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, ValueError) as exc:
        log.info("skipping %s: %s", path, exc)
        return None


def _user_data_dir(environ: Mapping[str, str], platform: str) -> Path:
    """The OS's per-user data folder as Rust's ``dirs::data_dir`` gives it (Jan uses it)."""
    home = _home(environ)
    if platform == "win32":
        return Path(environ.get("APPDATA") or home / "AppData" / "Roaming")
    if platform == "darwin":
        return home / "Library" / "Application Support"
    return Path(environ.get("XDG_DATA_HOME") or home / ".local" / "share")


# -- Ollama ---------------------------------------------------------------------------
def ollama_models_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Ollama's models folders that exist (``$OLLAMA_MODELS`` alone when it is set)."""
    env = _env(environ)
    custom = env.get("OLLAMA_MODELS", "").strip()
    candidates = [Path(custom).expanduser()] if custom else [
        _home(env) / ".ollama" / "models",
        Path("/usr/share/ollama/.ollama/models"),
    ]
    return [d for d in candidates if (d / "manifests").is_dir()]


def _ollama_name(rel: Path) -> str:
    """``registry/namespace/model/tag`` → Ollama's short name (``model:tag`` for the
    library namespace of the default registry)."""
    parts = rel.parts
    if len(parts) < 2:
        return ":".join(parts)
    *prefix, model, tag = parts
    if prefix[:2] == [OLLAMA_DEFAULT_REGISTRY, "library"]:
        prefix = prefix[2:]
    elif prefix[:1] == [OLLAMA_DEFAULT_REGISTRY]:
        prefix = prefix[1:]
    return "/".join([*prefix, model]) + f":{tag}"


def find_ollama_models(models_dir: Path) -> list[FoundModel]:
    """The GGUF blob of every Ollama manifest under ``models_dir``, named as Ollama
    names it. Manifests whose model layer is missing, or whose blob is not on disk (a
    pull in progress), are skipped."""
    manifests = models_dir / "manifests"
    found: list[FoundModel] = []
    if not manifests.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(manifests, onerror=lambda e: None):
        dirnames.sort()
        for fname in sorted(filenames):
            if fname.startswith("."):
                continue
            manifest = Path(dirpath) / fname
            data = _read_json(manifest)
            layers = data.get("layers") if isinstance(data, dict) else None
            if not isinstance(layers, list):
                continue
            digest = next((layer.get("digest") for layer in layers if isinstance(layer, dict)
                           and layer.get("mediaType") == OLLAMA_MODEL_LAYER), None)
            if not isinstance(digest, str) or ":" not in digest:
                continue
            algo, _, hexdigest = digest.partition(":")
            # current Ollama names blobs sha256-<hex>; early versions sha256:<hex>
            blob = next((b for b in (models_dir / "blobs" / f"{algo}-{hexdigest}",
                                     models_dir / "blobs" / digest) if b.is_file()), None)
            if blob is None:
                log.info("Ollama manifest %s: blob %s is not on disk", manifest, digest)
                continue
            found.append(FoundModel(blob, _ollama_name(manifest.relative_to(manifests))))
    return found


# -- llama.cpp ------------------------------------------------------------------------
def llama_cpp_cache_dirs(environ: Mapping[str, str] | None = None,
                         platform: str | None = None) -> list[Path]:
    """llama.cpp's download cache folder (``$LLAMA_CACHE`` or the platform's), if it
    exists. (Without ``LLAMA_CACHE``, recent llama.cpp downloads into the Hugging Face
    cache, which the library scans on its own.)"""
    env = _env(environ)
    platform = platform or sys.platform
    custom = env.get("LLAMA_CACHE", "").strip()
    if custom:
        folder = Path(custom).expanduser()
    elif platform == "win32":
        local = env.get("LOCALAPPDATA")
        folder = Path(local) / "llama.cpp" if local else _home(env) / "AppData" / "Local" / "llama.cpp"
    elif platform == "darwin":
        folder = _home(env) / "Library" / "Caches" / "llama.cpp"
    else:
        folder = Path(env.get("XDG_CACHE_HOME") or _home(env) / ".cache") / "llama.cpp"
    return [folder] if folder.is_dir() else []


def _llama_cpp_manifest_names(folder: Path) -> dict[str, tuple[str, str]]:
    """Flat-cache file name → (repo id, ``owner/repo:tag``) from the manifest files."""
    names: dict[str, tuple[str, str]] = {}
    for manifest in sorted(folder.glob("manifest=*.json")):
        fields = manifest.name[len("manifest="):-len(".json")].split("=")
        if len(fields) != 3:
            continue
        owner, repo, tag = fields
        data = _read_json(manifest)
        gguf = data.get("ggufFile") if isinstance(data, dict) else None
        rfilename = gguf.get("rfilename") if isinstance(gguf, dict) else None
        if isinstance(rfilename, str) and rfilename:
            local = f"{owner}_{repo}_{rfilename.replace('/', '_')}"
            names[local] = (f"{owner}/{repo}", f"{owner}/{repo}:{tag}")
    return names


def find_llama_cpp_flat_models(folder: Path) -> list[FoundModel]:
    """GGUFs in llama.cpp's flat cache folder (not recursive), named from the manifests
    where one matches (``owner/repo:tag``). Partial downloads (``.downloadInProgress``)
    are not ``.gguf`` files and are left out."""
    names = _llama_cpp_manifest_names(folder)
    found: list[FoundModel] = []
    try:
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
    except OSError as exc:
        log.info("cannot list %s: %s", folder, exc)
        return found
    for path in files:
        repo_id, label = names.get(path.name, (None, None))
        found.append(FoundModel(path, label, repo_id))
    return found


def is_hf_cache_layout(folder: Path) -> bool:
    """Whether ``folder`` holds a Hugging Face cache (``models--owner--name`` folders),
    as recent llama.cpp writes under ``$LLAMA_CACHE``."""
    try:
        return any(p.name.startswith("models--") and p.is_dir() for p in folder.iterdir())
    except OSError:
        return False


# -- Jan ------------------------------------------------------------------------------
def jan_data_folders(environ: Mapping[str, str] | None = None,
                     platform: str | None = None) -> list[Path]:
    """Jan's data folders that exist: the configured one (``data_folder`` in its
    ``settings.json``) or the default, and Jan 0.4's ``~/jan``."""
    env = _env(environ)
    platform = platform or sys.platform
    data_dir = _user_data_dir(env, platform)
    settings = [data_dir / "Jan" / "settings.json", data_dir / "jan.ai.app" / "settings.json"]
    if platform.startswith("linux"):
        settings.append(Path(env.get("XDG_CONFIG_HOME") or _home(env) / ".config") / "Jan" / "settings.json")
    folders: list[Path] = []
    for candidate in settings:
        data = _read_json(candidate) if candidate.is_file() else None
        value = data.get("data_folder") if isinstance(data, dict) else None
        if isinstance(value, str) and value.strip():
            folders.append(Path(value).expanduser())
            break
    else:
        folders.append(data_dir / "Jan" / "data")
    folders.append(_home(env) / "jan")
    unique = list(dict.fromkeys(folders))
    return [f for f in unique if f.is_dir()]


def find_jan_models(data_folder: Path) -> list[FoundModel]:
    """The GGUF of every ``llamacpp/models/**/model.yml`` in a Jan data folder, named as
    Jan names it. Entries whose file is missing are skipped. (Jan 0.4's
    ``<data>/models/**/*.gguf`` are found by :func:`jan_legacy_model_folders`.)"""
    import yaml  # PyYAML: Jan writes model.yml with serde_yaml

    root = data_folder / "llamacpp" / "models"
    found: list[FoundModel] = []
    if not root.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: None):
        dirnames.sort()
        if "model.yml" not in filenames:
            continue
        dirnames[:] = []  # Jan stops at the first folder with a model.yml
        config_file = Path(dirpath) / "model.yml"
        try:
            config = yaml.safe_load(config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeError, yaml.YAMLError) as exc:
            log.info("skipping %s: %s", config_file, exc)
            continue
        if not isinstance(config, dict) or not isinstance(config.get("model_path"), str):
            continue
        model_path = Path(config["model_path"])
        if not model_path.is_absolute():
            model_path = data_folder / model_path
        if not model_path.is_file():
            log.info("Jan model %s: %s is not on disk", config_file.parent, model_path)
            continue
        model_id = Path(dirpath).relative_to(root).as_posix()
        name = config.get("name")
        found.append(FoundModel(model_path, str(name) if name else model_id))
    return found


def jan_legacy_model_folders(data_folder: Path) -> list[Path]:
    """Jan 0.4's models folder (``<data>/models``, one folder per model), if present."""
    folder = data_folder / "models"
    return [folder] if folder.is_dir() else []


# -- LM Studio ------------------------------------------------------------------------
def lmstudio_models_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """LM Studio's models folders that exist: ``downloadsFolder`` from each LM Studio
    home's ``settings.json`` when set, else ``<home>/models``; homes are
    ``~/.lmstudio`` (or the path in ``~/.lmstudio-home-pointer``) and, for versions
    before 0.3, ``~/.cache/lm-studio``."""
    env = _env(environ)
    home = _home(env)
    lm_home = home / ".lmstudio"
    pointer = home / ".lmstudio-home-pointer"
    try:
        target = pointer.read_text(encoding="utf-8").strip()
        if target:
            lm_home = Path(target).expanduser()
    except OSError:
        pass
    folders: list[Path] = []
    for lm in (lm_home, home / ".cache" / "lm-studio"):
        settings = _read_json(lm / "settings.json") if (lm / "settings.json").is_file() else None
        chosen = settings.get("downloadsFolder") if isinstance(settings, dict) else None
        if isinstance(chosen, str) and chosen.strip():
            folders.append(Path(chosen).expanduser())
        folders.append(lm / "models")
    unique = list(dict.fromkeys(folders))
    return [f for f in unique if f.is_dir()]
