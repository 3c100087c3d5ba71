"""The model library: every GGUF model on this machine that Tandem can offer.

Models come from the models folder (in the data folder by default, changeable), folders
the user added ("Add folder…", scanned recursively), single files the user opened
("Open GGUF…"), other apps' downloads (LM Studio, Ollama, llama.cpp's ``-hf`` cache, Jan;
where each keeps them is :mod:`app.catalog.discovery`) and the Hugging Face cache. A split GGUF
(``…-00001-of-0000N.gguf``) is one model; ``mmproj`` (vision projector), ``imatrix``
and adapter files are not offered as models. Metadata comes from
:mod:`app.catalog.gguf_meta` (cached, so a rescan is fast).

A model reachable in several ways (a symlink, a hard link, two folders over one file)
is listed once, and so is a copy with the same content (the demo model written into the
models folder and the same file opened from elsewhere): the first found is kept and the
others become its :attr:`LibraryEntry.copies`, and no file is offered as a draft for
itself. A demo model whose package is installed (the ``demo`` extra's Gemma 3 270M) is
written into the models folder when the user asks (the Models window's "Add … demo"
button, :func:`write_installed_demos`), never by a scan of its own accord: it is a
quarter of a gigabyte.

Where to look is a :class:`LibraryConfig` (pydantic) saved as ``library.json`` in the
config folder, next to the app's ``settings.json``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.catalog import discovery
from app.catalog.demo import DEMOS, DemoModel
from app.catalog.gguf_meta import GGUFInfo, inspect_gguf, load_vocab, split_part_names, split_parts
from app.catalog.pairing import (
    DraftCandidate,
    ModelShape,
    VocabView,
    is_assistant_arch,
    rank_drafts,
    unreadable_candidate,
)
from app.errors import FolderError, TandemError
from app.formatting import loads_json
from app.store import paths
from app.store.files import write_text_atomic

log = logging.getLogger(__name__)

Source = Literal["models", "folder", "file", "lmstudio", "ollama", "llama.cpp", "jan", "hf-cache"]

#: ``general.type`` values and architectures that are not language models to chat with.
NON_MODEL_TYPES = frozenset({"mmproj", "adapter", "imatrix", "vocab"})
NON_MODEL_ARCHITECTURES = frozenset({"clip"})

_SKIP_SUFFIXES = (".incomplete", ".part", ".partial", ".tmp", ".download")


class LibraryConfig(BaseModel):
    """Where the library looks for models, and the hub endpoint for downloads.

    Attributes:
        models_dir: where downloads go and the first folder scanned; None means
            ``<data folder>/models``.
        folders: folders added with "Add folder…" (scanned recursively).
        files: single files opened with "Open GGUF…".
        scan_lmstudio: include LM Studio's models folders.
        scan_ollama: include Ollama's models (its blobs, named by its manifests).
        scan_llama_cpp: include llama.cpp's ``-hf`` download cache.
        scan_jan: include Jan's models.
        scan_hf_cache: include GGUF files in the Hugging Face cache.
        hf_endpoint: a hub mirror (``https://hf-mirror.example``); None means the
            ``HF_ENDPOINT`` environment variable, else https://huggingface.co.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    models_dir: Path | None = None
    folders: list[Path] = Field(default_factory=list)
    files: list[Path] = Field(default_factory=list)
    scan_lmstudio: bool = True
    scan_ollama: bool = True
    scan_llama_cpp: bool = True
    scan_jan: bool = True
    scan_hf_cache: bool = True
    hf_endpoint: str | None = Field(default=None, pattern=r"^https?://\S+$")


def library_config_path() -> Path:
    """``library.json`` in the config folder."""
    return paths.config_dir() / "library.json"


def load_library_config(path: Path | None = None) -> LibraryConfig:
    """The saved library configuration, or defaults.

    Never raises: an unreadable or invalid file is logged and defaults are used (the
    file is left as it is, so nothing the user wrote is lost).
    """
    path = path or library_config_path()
    try:
        return LibraryConfig.model_validate(loads_json(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return LibraryConfig()
    except (OSError, ValueError, ValidationError) as exc:
        log.warning("library config %s unusable (%s); using defaults", path, exc)
        return LibraryConfig()


def save_library_config(config: LibraryConfig, path: Path | None = None) -> Path:
    """Write the configuration atomically (temporary file, fsync, rename).

    Raises:
        OSError: the config folder is not writable.
    """
    return write_text_atomic(path or library_config_path(),
                             config.model_dump_json(indent=2) + "\n")


def current_models_dir(config: LibraryConfig | None = None) -> Path:
    """The models folder (created if missing): the configured one or ``<data>/models``.

    Raises:
        FolderError: it is a file or cannot be created (a drive that is gone, read-only).
    """
    config = config if config is not None else load_library_config()
    if config.models_dir is None:
        return paths.models_dir()
    return paths.ensure_folder(config.models_dir.expanduser(), "models folder")


def lmstudio_models_dirs() -> list[Path]:
    """LM Studio's models folders that exist, the one its settings name when the user
    moved it included (see :func:`app.catalog.discovery.lmstudio_models_dirs`)."""
    return discovery.lmstudio_models_dirs()


@dataclass(frozen=True, slots=True)
class ModelFile:
    """A model found on disk, before its header is read.

    Attributes:
        path: the file to load (part 1 of a split model).
        parts: every part, in order (one for a single file).
        missing_parts: names of parts that are not on disk.
        source: where it was found.
        repo_id: ``owner/name`` when the location says it (hub cache, LM Studio,
            a download into the models folder), else None.
        label: the name the app it came from gives it (Ollama's ``llama3.2:1b``, Jan's
            model name, llama.cpp's ``owner/repo:tag``), else None.
    """

    path: Path
    parts: tuple[Path, ...]
    missing_parts: tuple[str, ...]
    source: Source
    repo_id: str | None = None
    label: str | None = None


@dataclass(frozen=True, slots=True)
class LibraryEntry:
    """A model in the library: where it is, and its metadata or why it cannot be used.

    ``loads``: whether llama.cpp loads and decodes with it (:mod:`app.catalog.loadcheck`),
    None when that was not checked. A file that does not load has ``error`` set (with
    its ``info`` kept), so the library and ``generate`` agree on what is usable.
    """

    file: ModelFile
    info: GGUFInfo | None
    error: str | None = None
    loads: bool | None = None
    copies: tuple[Path, ...] = ()
    """Other files with the same content (listed once, under this entry)."""

    @property
    def path(self) -> Path:
        return self.file.path

    def is_file(self, path: Path) -> bool:
        """Whether ``path`` is this model: its file (through any link) or one of its
        :attr:`copies`."""
        return any(same_file(p, path) for p in (self.file.path, *self.copies))

    @property
    def name(self) -> str:
        """The name in the GGUF metadata (``general.name``), else the file name."""
        return self.info.name if self.info is not None else self.file.path.name

    @property
    def title(self) -> str:
        """What the library lists the model as: its file name (part 1 of a split model).
        Metadata names are often a training run's label ("Smollm2 135M 8k Lc100K Mix1
        Ep2"); the file name is what the user downloaded and can find on disk. Where the
        app the model came from names it (an Ollama blob is ``sha256-…``), that name."""
        return self.file.label or self.file.path.name

    @property
    def usable(self) -> bool:
        return self.info is not None and self.error is None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: path, source, repo_id, error and the metadata fields."""
        return {
            "path": str(self.file.path),
            "source": self.file.source,
            "repo_id": self.file.repo_id,
            "label": self.file.label,
            "parts": [str(p) for p in self.file.parts],
            "error": self.error,
            "loads": self.loads,
            "copies": [str(p) for p in self.copies],
            "info": self.info.to_dict() if self.info is not None else None,
        }


def is_auxiliary_name(name: str) -> bool:
    """True for GGUF files that are not models by their name: vision projectors
    (``mmproj-…``) and importance matrices (``imatrix…``)."""
    low = name.lower()
    return "mmproj" in low or "imatrix" in low


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same path, the same target of links, or the
    same inode (a hard link). A missing file is only the same as its own path."""
    if os.path.abspath(a) == os.path.abspath(b) or os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


#: bytes read at each of the start, middle and end of a file for :func:`copy_key`
IDENTITY_SAMPLE_BYTES = 1 << 20


def copy_key(path: Path) -> tuple[int, str]:
    """``(size in bytes, hex digest)`` that two copies of one model share.

    The digest is SHA-256 over 1 MiB at the start (the GGUF header and metadata), the
    middle and the end (tensor data) of the file, so it reads at most 3 MiB whatever the
    model's size. Two different models of the same size agree on all three only when
    they share those bytes, which fine-tunes and other quantizations do not (their
    tensor data differs).

    Raises:
        OSError: the file cannot be read.
    """
    size = os.path.getsize(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for offset in sorted({0, max(0, size // 2 - IDENTITY_SAMPLE_BYTES // 2),
                              max(0, size - IDENTITY_SAMPLE_BYTES)}):
            f.seek(offset)
            digest.update(f.read(IDENTITY_SAMPLE_BYTES))
    return size, digest.hexdigest()


def merge_copies(entries: Sequence[LibraryEntry]) -> list[LibraryEntry]:
    """``entries`` with copies of one model merged into the first (its :attr:`copies`).

    Only readable entries of equal file size are compared (:func:`copy_key`), so
    a library of different models reads nothing more. Order is kept; a file that cannot
    be read is kept as it is.
    """
    by_size: dict[int, list[int]] = {}
    for i, e in enumerate(entries):
        if e.info is not None and len(e.file.parts) == 1:
            by_size.setdefault(e.info.file_size, []).append(i)
    first_of: dict[int, int] = {}
    for group in by_size.values():
        if len(group) < 2:
            continue
        seen: dict[tuple[int, str], int] = {}
        for i in group:
            try:
                key = copy_key(entries[i].path)
            except OSError:
                continue
            if key in seen:
                first_of[i] = seen[key]
            else:
                seen[key] = i
    copies: dict[int, list[Path]] = {}
    for i, first in first_of.items():
        copies.setdefault(first, []).append(entries[i].path)
    return [replace(e, copies=(*e.copies, *copies.get(i, ()))) for i, e in enumerate(entries)
            if i not in first_of]


def installed_package_demos() -> tuple[DemoModel, ...]:
    """Demo models whose package is installed (the ``demo`` extra's Gemma 3 270M)."""
    return tuple(d for d in DEMOS.values()
                 if d.import_name is not None and importlib.util.find_spec(d.import_name) is not None)


def missing_package_demos(models_dir: Path, demos: Sequence[DemoModel] | None = None
                          ) -> tuple[DemoModel, ...]:
    """The installed package demos (default :func:`installed_package_demos`) whose file
    is not in ``models_dir``."""
    demos = installed_package_demos() if demos is None else demos
    return tuple(d for d in demos if d.import_name is not None
                 and not (models_dir / d.file).is_file())


def write_installed_demos(models_dir: Path, demos: Sequence[DemoModel],
                          problems: list[str] | None = None) -> list[Path]:
    """Write each package demo that is not in ``models_dir`` there, so the library lists
    it (asked for by the user: it is 253 MB for Gemma 3 270M).

    A demo is skipped when the disk lacks room for it with 1 GB to spare or writing
    fails: logged, and a sentence saying why appended to ``problems``; a scan never
    fails because of a demo.

    Returns:
        The files written.
    """
    said = problems if problems is not None else []
    import importlib

    written: list[Path] = []
    for demo in missing_package_demos(models_dir, demos):
        dest = models_dir / demo.file
        if demo.import_name is None:  # not a package demo (missing_package_demos: never)
            continue
        try:
            if shutil.disk_usage(models_dir).free < demo.size_mb * 1_000_000 + 1_000_000_000:
                log.warning("not writing the demo %s into %s: too little free space", demo.title, models_dir)
                said.append(f"{demo.title} was not written into {models_dir}: it needs "
                            f"{demo.size_mb} MB and 1 GB to spare on that disk.")
                continue
            package = importlib.import_module(demo.import_name)
            tmp = dest.with_name(dest.name + ".incomplete")
            package.assemble(tmp, overwrite=True)
            tmp.replace(dest)
            written.append(dest)
            log.info("wrote the demo model %s to %s", demo.title, dest)
        except (ImportError, OSError, ValueError) as exc:
            log.warning("could not write the demo %s into %s: %s", demo.title, models_dir, exc)
            said.append(f"{demo.title} could not be written into {models_dir}: {exc}")
    return written


def is_chat_model(info: GGUFInfo) -> bool:
    """False for GGUFs that are not language models (projectors, adapters, imatrix)."""
    return info.model_type not in NON_MODEL_TYPES and info.architecture not in NON_MODEL_ARCHITECTURES


def _group(files: Iterable[Path], source: Source, repo_of: Callable[[Path], str | None]) -> list[ModelFile]:
    """Turn a folder's .gguf files into models: split parts grouped under part 1."""
    singles: list[ModelFile] = []
    splits: dict[Path, set[Path]] = {}
    for f in files:
        if is_auxiliary_name(f.name):
            continue
        sp = split_parts(f)
        if sp is None:
            singles.append(ModelFile(f, (f,), (), source, repo_of(f)))
        else:
            splits.setdefault(sp[0], set()).add(f)
    for first, present in splits.items():
        sp = split_parts(first)
        assert sp is not None
        names = split_part_names(first.name, sp[2])
        parts = tuple(first.with_name(n) for n in names)
        missing = tuple(p.name for p in parts if p not in present and not p.exists())
        singles.append(ModelFile(first, parts, missing, source, repo_of(first)))
    return singles


def _walk_ggufs(root: Path, recursive: bool) -> list[Path]:
    found: list[Path] = []
    seen_dirs: set[str] = set()
    if not root.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=lambda e: None):
        real = os.path.realpath(dirpath)
        if real in seen_dirs:  # a symlink loop
            dirnames[:] = []
            continue
        seen_dirs.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith(".") or not name.lower().endswith(".gguf") or name.endswith(_SKIP_SUFFIXES):
                continue
            found.append(Path(dirpath) / name)
        if not recursive:
            break
    return found


def _repo_from_layout(root: Path) -> Callable[[Path], str | None]:
    """``owner/name`` for files at ``root/owner/name/…`` (LM Studio and download layout)."""

    def repo_of(path: Path) -> str | None:
        try:
            rel = path.relative_to(root)
        except ValueError:
            return None
        return f"{rel.parts[0]}/{rel.parts[1]}" if len(rel.parts) >= 3 else None

    return repo_of


def find_models_in_folder(root: Path, source: Source = "folder", *, recursive: bool = True) -> list[ModelFile]:
    """Models in a folder (recursively by default), skipping hidden folders and partial
    downloads. In the models folder and LM Studio's, whose layout is
    ``<owner>/<repo>/<file>``, files get ``repo_id`` ``owner/repo``."""
    root = Path(os.path.abspath(root.expanduser()))
    repo_of = _repo_from_layout(root) if source in ("models", "lmstudio") else _no_repo
    return _group(_walk_ggufs(root, recursive), source, repo_of)


def _no_repo(_path: Path) -> str | None:
    return None


def find_models_in_hf_cache(cache_dir: Path | None = None) -> list[ModelFile]:
    """GGUF models in the Hugging Face cache (``huggingface_hub.scan_cache_dir``).

    Newest revision first; a file name already seen in a newer revision of the same
    repository is skipped. A missing or unreadable cache gives an empty list.
    """
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache_dir)
    except (CacheNotFound, OSError, ValueError) as exc:
        log.info("no Hugging Face cache to scan: %s", exc)
        return []
    models: list[ModelFile] = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        seen: set[str] = set()
        for rev in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True):
            files = []
            for f in rev.files:
                rel = f.file_path.relative_to(rev.snapshot_path).as_posix()
                if rel.lower().endswith(".gguf") and rel not in seen:
                    seen.add(rel)
                    files.append(f.file_path)
            models.extend(_group(sorted(files), "hf-cache", _const_repo(repo.repo_id)))
    return models


def _const_repo(repo_id: str) -> Callable[[Path], str | None]:
    return lambda _path: repo_id


ScanProgress = Callable[[int, int, Path], None]


class Library:
    """Finds and inspects the models on this machine.

    Args:
        config: where to look; default :func:`load_library_config`.
        lmstudio_dirs: LM Studio folders to scan (default :func:`lmstudio_models_dirs`).
        ollama_dirs: Ollama models folders (default
            :func:`app.catalog.discovery.ollama_models_dirs`).
        llama_cpp_dirs: llama.cpp cache folders (default
            :func:`app.catalog.discovery.llama_cpp_cache_dirs`).
        jan_dirs: Jan data folders (default :func:`app.catalog.discovery.jan_data_folders`).
        hf_cache_dir: the Hugging Face cache (default: huggingface_hub's, from ``HF_HOME``
            / ``HF_HUB_CACHE``).
        demos: package demos that :meth:`scan` writes into the models folder when they
            are missing there and it is asked to (default :func:`installed_package_demos`;
            :meth:`missing_demos`).

    Methods read the disk each time; nothing is kept between calls except the metadata
    cache of :mod:`app.catalog.gguf_meta`. Safe to use from a worker thread.
    """

    def __init__(
        self,
        config: LibraryConfig | None = None,
        *,
        lmstudio_dirs: Sequence[Path] | None = None,
        ollama_dirs: Sequence[Path] | None = None,
        llama_cpp_dirs: Sequence[Path] | None = None,
        jan_dirs: Sequence[Path] | None = None,
        hf_cache_dir: Path | None = None,
        demos: Sequence[DemoModel] | None = None,
    ) -> None:
        self._from_disk = config is None
        self._demos = demos
        #: why the last :meth:`scan` asked to write demos left one unwritten (sentences)
        self.demo_problems: list[str] = []
        #: why the configured models folder cannot be used (None: it can)
        self.models_dir_problem: str | None = None
        self.config = config if config is not None else load_library_config()
        self._lmstudio_dirs = lmstudio_dirs
        self._ollama_dirs = ollama_dirs
        self._llama_cpp_dirs = llama_cpp_dirs
        self._jan_dirs = jan_dirs
        self._hf_cache_dir = hf_cache_dir

    @property
    def models_dir(self) -> Path:
        """The configured models folder, or ``<data>/models`` while the configured one
        cannot be used (:attr:`models_dir_problem` then says why)."""
        try:
            folder = current_models_dir(self.config)
        except FolderError as exc:
            if self.models_dir_problem != str(exc):
                log.warning("%s Using %s meanwhile.", exc, paths.models_dir())
            self.models_dir_problem = str(exc)
            return paths.models_dir()
        self.models_dir_problem = None
        return folder

    def missing_demos(self) -> tuple[DemoModel, ...]:
        """The package demos :meth:`scan` would write when asked to (see ``demos``)."""
        return missing_package_demos(self.models_dir, self._demos)

    def add_folder(self, folder: Path) -> None:
        """Remember a folder to scan ("Add folder…"). Raises TandemError if not a folder."""
        folder = Path(os.path.abspath(folder.expanduser()))
        if not folder.is_dir():
            raise TandemError(f"{folder} is not a folder.")
        if folder not in self.config.folders:
            self.config.folders = [*self.config.folders, folder]

    def add_file(self, path: Path) -> GGUFInfo:
        """Remember a single model file ("Open GGUF…") after checking that it reads.

        Raises:
            GGUFError: the file is not a usable GGUF.
            TandemError: it is a projector/adapter/imatrix, not a model.
        """
        path = Path(os.path.abspath(path.expanduser()))
        info = inspect_gguf(path)
        if not is_chat_model(info) or is_auxiliary_name(path.name):
            raise TandemError(f"{path.name} is a {info.model_type} file, not a language model.")
        first = Path(info.path)
        if first not in self.config.files:
            self.config.files = [*self.config.files, first]
        return info

    def covers(self, path: Path) -> bool:
        """Whether the library already finds ``path`` without reading the disk: it is an
        opened file, or lies in the models folder or an added folder."""
        real = Path(os.path.realpath(path.expanduser()))
        if any(Path(os.path.realpath(f)) == real for f in self.config.files):
            return True
        roots = [self.models_dir, *self.config.folders]
        for root in roots:
            try:
                real.relative_to(os.path.realpath(root.expanduser()))
                return True
            except ValueError:
                continue
        return False

    def reload(self) -> None:
        """Read the saved configuration again (another window may have added a file).
        A library made with an explicit ``config`` keeps it."""
        if self._from_disk:
            self.config = load_library_config()

    def remove(self, path: Path) -> None:
        """Forget an added folder or file (files on disk are not touched)."""
        path = Path(os.path.abspath(path.expanduser()))
        self.config.folders = [f for f in self.config.folders if f != path]
        self.config.files = [f for f in self.config.files if f != path]

    def save(self) -> Path:
        """Save :attr:`config` (see :func:`save_library_config`)."""
        return save_library_config(self.config)

    def discover(self) -> list[ModelFile]:
        """Every model file from every source, without reading headers.

        A model reachable from several sources (an added folder inside the models folder,
        a symlink, a hard link, two Ollama tags of one blob) is listed once, under the first source in
        the order models folder, added folders, opened files, LM Studio, Ollama,
        llama.cpp, Jan, Hugging Face cache.
        """
        found: list[ModelFile] = []
        found += find_models_in_folder(self.models_dir, "models")
        for folder in self.config.folders:
            found += find_models_in_folder(folder, "folder")
        files = [p for p in self.config.files if p.is_file()]
        found += _group(files, "file", _no_repo)
        if self.config.scan_lmstudio:
            dirs = self._lmstudio_dirs if self._lmstudio_dirs is not None else lmstudio_models_dirs()
            for d in dirs:
                found += find_models_in_folder(d, "lmstudio")
        found += self._other_apps()
        if self.config.scan_hf_cache:
            found += find_models_in_hf_cache(self._hf_cache_dir)
        unique: list[ModelFile] = []
        seen: set[str | tuple[int, int]] = set()
        for m in found:
            keys: list[str | tuple[int, int]] = [os.path.realpath(m.path)]
            try:
                st = os.stat(m.path)
                keys.append((st.st_dev, st.st_ino))  # a hard link
            except OSError:
                pass
            if not any(k in seen for k in keys):
                seen.update(keys)
                unique.append(m)
        return unique

    def _other_apps(self) -> list[ModelFile]:
        """Ollama's, llama.cpp's and Jan's models, as configured."""
        found: list[ModelFile] = []
        if self.config.scan_ollama:
            dirs = self._ollama_dirs if self._ollama_dirs is not None else discovery.ollama_models_dirs()
            for d in dirs:
                found += _from_discovery(discovery.find_ollama_models(d), "ollama")
        if self.config.scan_llama_cpp:
            dirs = (self._llama_cpp_dirs if self._llama_cpp_dirs is not None
                    else discovery.llama_cpp_cache_dirs())
            for d in dirs:
                if discovery.is_hf_cache_layout(d):  # recent llama.cpp under $LLAMA_CACHE
                    found += [_with_source(m, "llama.cpp") for m in find_models_in_hf_cache(d)]
                found += _from_discovery(discovery.find_llama_cpp_flat_models(d), "llama.cpp")
        if self.config.scan_jan:
            dirs = self._jan_dirs if self._jan_dirs is not None else discovery.jan_data_folders()
            for d in dirs:
                found += _from_discovery(discovery.find_jan_models(d), "jan")
                for legacy in discovery.jan_legacy_model_folders(d):
                    found += find_models_in_folder(legacy, "jan")
        return found

    def scan(
        self,
        *,
        on_progress: ScanProgress | None = None,
        cancel: threading.Event | None = None,
        check_loads: bool = False,
        write_demos: bool = False,
    ) -> list[LibraryEntry]:
        """Discover and inspect every model.

        Args:
            on_progress: called as ``(done, total, path)`` before each file is read.
            cancel: when set, stop and return the entries read so far.
            check_loads: also find out whether llama.cpp loads each model (a child
                process per file not checked before; see :mod:`app.catalog.loadcheck`).
                The window and ``models list`` do; header-only callers need not.
            write_demos: first write the installed package demos that the models folder
                lacks into it (:func:`write_installed_demos`; the Models window's "Add …
                demo" button).

        Returns:
            Entries in discovery order, copies of one model merged into the first
            (:func:`merge_copies`). Unreadable files are entries with ``error`` set;
            projectors, adapters and imatrix files are left out.
        """
        self.demo_problems = []
        if write_demos:
            write_installed_demos(self.models_dir, self.missing_demos(), self.demo_problems)
        files = self.discover()
        entries: list[LibraryEntry] = []
        for i, mf in enumerate(files):
            if cancel is not None and cancel.is_set():
                break
            if on_progress is not None:
                on_progress(i, len(files), mf.path)
            entry = inspect_model_file(mf)
            if entry.info is not None and not is_chat_model(entry.info):
                continue
            if check_loads and entry.usable:
                entry = check_entry_loads(entry, cancel)
            entries.append(entry)
        return merge_copies(entries)


def remember_opened_model(path: Path) -> bool:
    """Remember a model the user opened outside the picker (the chat window's
    "Open GGUF…"), so that the library lists it from now on.

    Nothing is read from the file (it has just loaded). A file the library finds already
    (an opened file, or in the models folder or an added folder) is left alone. The saved
    configuration is read and written at once, so other windows' changes are kept.

    Returns:
        True when ``library.json`` was changed. Never raises: a configuration that
        cannot be written is logged (the model still loads; it is just not remembered).
    """
    try:
        library = Library()
        if library.covers(path):
            return False
        library.config.files = [*library.config.files, Path(os.path.abspath(path.expanduser()))]
        library.save()
        return True
    except (OSError, ValueError) as exc:
        log.warning("could not remember %s in the library: %s", path, exc)
        return False


def _from_discovery(found: Sequence[discovery.FoundModel], source: Source) -> list[ModelFile]:
    """Another app's files as models: split parts grouped, labels and repo ids kept."""
    by_path = {m.path: m for m in found}
    models = _group([m.path for m in found], source, lambda p: by_path[p].repo_id if p in by_path else None)
    out: list[ModelFile] = []
    for mf in models:
        origin = by_path.get(mf.path)
        out.append(mf if origin is None or origin.label is None else
                   ModelFile(mf.path, mf.parts, mf.missing_parts, mf.source, mf.repo_id, origin.label))
    return out


def _with_source(mf: ModelFile, source: Source) -> ModelFile:
    return ModelFile(mf.path, mf.parts, mf.missing_parts, source, mf.repo_id, mf.label)


def inspect_model_file(mf: ModelFile) -> LibraryEntry:
    """Read one found model's header; problems become the entry's ``error``."""
    if mf.missing_parts:
        return LibraryEntry(
            mf, None,
            f"{len(mf.missing_parts)} of {len(mf.parts)} parts are missing ({', '.join(mf.missing_parts)}).",
        )
    try:
        return LibraryEntry(mf, inspect_gguf(mf.path))
    except TandemError as exc:
        return LibraryEntry(mf, None, str(exc))
    except (OSError, UnicodeError, ValueError) as exc:  # one odd file never breaks a scan
        return LibraryEntry(mf, None, f"{mf.path.name}: {exc}")


def check_entry_loads(entry: LibraryEntry, cancel: threading.Event | None = None) -> LibraryEntry:
    """``entry`` with :attr:`LibraryEntry.loads` found out (a child process, or the
    verdict remembered for its content); a refusal becomes its ``error``. A cancelled or
    unfinished check leaves ``loads`` None and the entry usable (loading probes again)."""
    from app.catalog.loadcheck import check_loads

    try:
        verdict = check_loads(entry.path, should_stop=(cancel.is_set if cancel is not None else None))
    except TandemError as exc:
        log.info("load check of %s gave no verdict: %s", entry.path, exc)
        return entry
    if verdict.loads:
        return replace(entry, loads=True)
    return replace(entry, loads=False, error=verdict.message(entry.path.name))


def drafts_for(target: LibraryEntry, candidates: Sequence[LibraryEntry]) -> list[DraftCandidate[LibraryEntry]]:
    """The library's models ranked as drafts for ``target`` (for the draft picker).

    The target itself is left out, through any link and as a copy with the same content
    (:func:`copy_key`). Compatible drafts come first with the estimated draft
    cost ratio c (size ratio); incompatible and unreadable ones follow with the reason.
    See :func:`app.catalog.pairing.rank_drafts`.

    Raises:
        GGUFError: the target's vocabulary cannot be read.
    """
    target_vocab = load_vocab(target.path)
    target_size = target.info.file_size if target.info is not None else None
    readable: list[tuple[LibraryEntry, VocabView, int | None]] = []
    unreadable: list[DraftCandidate[LibraryEntry]] = []
    target_identity: tuple[int, str] | None = None
    for cand in candidates:
        if target.is_file(cand.path) or any(cand.is_file(p) for p in (target.path, *target.copies)):
            continue
        if cand.info is not None and target.info is not None and cand.info.file_size == target.info.file_size:
            try:
                target_identity = target_identity or copy_key(target.path)
                if copy_key(cand.path) == target_identity:
                    continue
            except OSError:
                pass
        if cand.info is None:
            unreadable.append(unreadable_candidate(cand, cand.error or "unreadable"))
            continue
        try:
            readable.append((cand, load_vocab(cand.path), cand.info.file_size))
        except TandemError as exc:
            unreadable.append(unreadable_candidate(cand, str(exc)))
    return rank_drafts(target_vocab, target_size, readable,
                       target_shape=model_shape(target.info), shape_of=lambda e: model_shape(e.info)
                       ) + unreadable


def is_assistant_file(path: Path) -> bool:
    """Whether the GGUF at ``path`` is an MTP assistant (:func:`app.catalog.pairing.
    is_assistant_arch`); False when its header cannot be read."""
    try:
        return is_assistant_arch(inspect_gguf(path).architecture)
    except (TandemError, OSError):
        return False


def model_shape(info: GGUFInfo | None) -> ModelShape | None:
    """The :class:`~app.catalog.pairing.ModelShape` of a file's header (None: unread or
    without a hidden size)."""
    if info is None or info.embedding_length is None:
        return None
    return ModelShape.from_header(info)
