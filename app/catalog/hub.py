"""Downloads from the Hugging Face Hub, and the pairing check before a download.

Everything here runs on a worker thread and never touches Qt: progress reaches the UI
as :class:`DownloadProgress` values through a plain callback, which the UI wraps in a
signal.

Downloads (:class:`Download`) go through ``huggingface_hub``: the file's metadata comes
from :func:`huggingface_hub.get_hf_file_metadata` (a HEAD on the ``/resolve/`` URL, which
gives size, ETag, commit, and the typed errors for gated, missing and private repos),
and the bytes through :func:`app.catalog.hf_transport.download_to` (huggingface_hub's
HTTP client, resuming with an HTTP Range request after a dropped connection; the one
module that touches huggingface_hub's undocumented helpers). ``hf_hub_download`` itself
is not used:
since huggingface_hub 1.x it downloads into a process-unique temporary file that it
deletes on failure, so a paused download or one interrupted by closing the app could
not resume. Here the bytes go to ``<models>/<owner>/<repo>/.partial/<file>.incomplete``
with a small JSON note of the ETag and size next to it; a later run (same session or
after a restart) continues from there when the remote file is unchanged. A file enters
the models folder, and so the library, only after its size and its hash match: the
sha256 the hub gives for an LFS file, or the git object id it gives for a file kept in
git (or, from a mirror without LFS headers, the id of the LFS pointer, which the
content's sha256 and size determine). A file with neither is never resumed: its bytes
are taken in one request from byte 0, since nothing could check resumed ones. A
transfer holds a lock file next to its partial file (filelock, taken without waiting)
and removes it when it ends; deleting a partial download (cancel, a failed job removed)
takes the same lock, so a file that another window or process is downloading is left
alone. A server that sends more than the size it announced is stopped at that size.
Xet storage is not used: plain HTTP through the hub's redirect works for every file and
is what makes resuming ours.

Tokens: huggingface_hub's own storage (``hf auth login``) and ``HF_TOKEN``. Endpoint: see
:func:`resolve_endpoint` (flag, ``HF_ENDPOINT``, the library setting, huggingface.co).

The check before a download (:func:`check_remote_pair`) reads the GGUF headers of the
remote target and draft with HTTP range requests, growing the fetched prefix until the
metadata parses (typically 1–3 % of a file), and runs the pairing rule on them.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urljoin, urlparse

from app.catalog.gguf_meta import (
    GGUFVocab,
    IncompleteHeaderError,
    parse_gguf_head,
    split_part_names,
    split_parts,
)
from app.catalog.hf_transport import CHUNK_BYTES, BodyTooLongError, download_to, open_stream
from app.catalog.pairing import ModelShape, PairResult, check_drafter_pair
from app.errors import (
    DownloadError,
    GGUFError,
    HubAccessError,
    HubError,
    HubFileNotFoundError,
    HubGatedRepoError,
    HubOfflineError,
    HubRateLimitError,
    HubRepoNotFoundError,
    HubRevisionNotFoundError,
    HubServerError,
    HubUnreachableError,
    NotAHubError,
    TandemError,
)
from app.formatting import format_bytes, loads_json
from app.store.files import write_json_atomic

if TYPE_CHECKING:
    from app.catalog.curated import CuratedModel, CuratedPair

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
PARTIAL_DIR = ".partial"
MANIFEST_NAME = ".tandem-downloads.json"
#: Bytes per read while downloading: progress and pause/cancel act at this granularity.
DOWNLOAD_CHUNK_BYTES = CHUNK_BYTES  # 256 KiB
#: First request of a remote header read; later ones grow from what the parse needs.
HEADER_FIRST_REQUEST = 256 << 10

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
_REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_PROGRESS_INTERVAL_S = 0.1
_METADATA_RETRY_WAITS_S = (1.0, 3.0)
_SPEED_WINDOW_S = 5.0

Phase = Literal["checking", "downloading", "verifying", "done"]


def resolve_endpoint(endpoint: str | None = None) -> str:
    """The hub to talk to, first found of: ``endpoint`` (a command-line flag or a caller's
    choice), the ``HF_ENDPOINT`` environment variable, the library's ``hf_endpoint``
    setting (:class:`app.catalog.library.LibraryConfig`), https://huggingface.co.

    Read at call time, so a changed setting applies to the next request.
    """
    value = endpoint or os.environ.get("HF_ENDPOINT")
    if not value:
        from app.catalog.library import load_library_config

        value = load_library_config().hf_endpoint or DEFAULT_ENDPOINT
    return value.strip().rstrip("/")


class DownloadStopped(TandemError):
    """The user paused (``paused`` True: the partial file is kept) or cancelled
    (``paused`` False: the partial file is deleted) a download."""

    def __init__(self, paused: bool, filename: str) -> None:
        what = "paused; it will resume where it stopped" if paused else "cancelled"
        super().__init__(f"Download of {filename} {what}.")
        self.paused = paused


@dataclass(frozen=True, slots=True)
class RemoteFile:
    """A file in a model repository on the hub.

    Raises:
        DownloadError: ``repo_id`` is not ``owner/name`` or ``filename`` is not a plain
            relative path inside the repository.
    """

    repo_id: str
    filename: str
    revision: str = "main"

    def __post_init__(self) -> None:
        if not _REPO_RE.match(self.repo_id) or any(
            part in (".", "..") for part in self.repo_id.split("/")
        ):
            raise DownloadError(f"{self.repo_id!r} is not a repository id of the form owner/name.")
        p = PurePosixPath(self.filename)
        if not self.filename or p.is_absolute() or ".." in p.parts or "\\" in self.filename:
            raise DownloadError(f"{self.filename!r} is not a file name inside a repository.")

    @property
    def display(self) -> str:
        return f"{self.repo_id}/{self.filename}"


#: Where the hub endpoint is set, for messages about an unreachable or odd hub.
ENDPOINT_SETTING_HINT = (
    "the Hub endpoint field in Models → Catalog, `tandem-cli models config --endpoint`, or "
    "the HF_ENDPOINT environment variable"
)

_HUB_URL_RE = re.compile(
    r"^https?://[^/]+/(?P<repo>[^/]+/[^/]+)/(?:blob|resolve)/(?P<rev>[^/]+)/(?P<file>[^?#]+)"
)


def parse_hub_file(text: str) -> RemoteFile:
    """A file on the hub from what a user pastes.

    Accepted: a file's page or download link (``https://huggingface.co/owner/repo/blob/
    main/file.gguf``, ``…/resolve/<revision>/…``, from any mirror host),
    ``hf:owner/repo/file.gguf``, ``owner/repo/file.gguf``, ``owner/repo:file.gguf`` and
    ``owner/repo file.gguf``.

    Raises:
        DownloadError: the text names no repository and file (the message shows the
            accepted forms), or names a file that is not a ``.gguf``.
    """
    raw = text.strip()
    m = _HUB_URL_RE.match(raw)
    if m:
        repo, revision, filename = m.group("repo"), m.group("rev"), m.group("file")
    elif re.match(r"^https?://", raw):
        raise DownloadError(
            f"{raw!r} is not a link to a file. Open the file on the hub and copy its address "
            "(…/owner/repo/blob/main/file.gguf).")
    else:
        body = raw.removeprefix("hf:").removeprefix("hf://").strip().strip("/")
        for sep in (" ", ":"):
            if sep in body:
                repo, _, filename = body.partition(sep)
                break
        else:
            parts = body.split("/", 2)
            repo, filename = ("/".join(parts[:2]), parts[2]) if len(parts) == 3 else (body, "")
        repo, filename, revision = repo.strip(), filename.strip(), "main"
    if not repo or not filename:
        raise DownloadError(
            f"{raw!r} does not name a repository and a file. Paste owner/repo/file.gguf, "
            "owner/repo file.gguf or a huggingface.co link to the file.")
    if not filename.lower().endswith(".gguf"):
        raise DownloadError(f"{filename!r} is not a GGUF file (its name must end in .gguf).")
    return RemoteFile(repo, filename, revision)


@dataclass(frozen=True, slots=True)
class RemoteFileInfo:
    """What the hub says about a file before it is downloaded.

    Attributes:
        url: where the bytes are (the hub's redirect target, often a CDN).
        size: bytes (``X-Linked-Size`` for LFS files, else ``Content-Length``).
        etag: the ETag without quotes; for LFS files it is the sha256 of the content.
        sha256: the expected sha256 (hex) when the ETag is one, else None.
        commit: the repository commit the file was resolved at.
        git_sha1: the ETag when it is a git object id (40 hex digits): what the hub sends
            for a file kept in git itself, and what a mirror without LFS headers sends
            for an LFS file (then it names the LFS pointer, not the content).
    """

    file: RemoteFile
    url: str
    size: int
    etag: str
    sha256: str | None
    commit: str | None
    git_sha1: str | None = None

    @property
    def checkable(self) -> bool:
        """Whether the downloaded bytes can be verified (sha256, or a git object id)."""
        return self.sha256 is not None or self.git_sha1 is not None


def _hub_error(exc: BaseException, file: RemoteFile, endpoint: str) -> DownloadError:
    """The typed Tandem error, with one clear sentence, for a failure talking to the hub.

    huggingface_hub's typed errors map onto :mod:`app.errors`' hub classes: gated →
    :class:`HubGatedRepoError`; repository, revision, file not found (or HTTP 404) →
    :class:`HubRepoNotFoundError`, :class:`HubRevisionNotFoundError`,
    :class:`HubFileNotFoundError`; HTTP 401/403 → :class:`HubAccessError`, 429 →
    :class:`HubRateLimitError`, 5xx → :class:`HubServerError`, other statuses →
    :class:`HubError`; offline mode → :class:`HubOfflineError`; no commit or ETag →
    :class:`NotAHubError`; network failures → :class:`HubUnreachableError`. Anything else
    is a plain :class:`DownloadError`.
    """
    import httpx2
    from huggingface_hub import errors as hf

    repo = file.repo_id
    status = (exc.response.status_code if isinstance(exc, hf.HfHubHTTPError)
              and exc.response is not None else None)
    if isinstance(exc, hf.GatedRepoError):
        return HubGatedRepoError(
            f"{repo} is a gated repository. Accept its licence on https://huggingface.co/{repo}"
            " (signed in), then log in here with an access token (`hf auth login`, or set"
            " HF_TOKEN) and try again.", status=status)
    if isinstance(exc, hf.RepositoryNotFoundError):
        return HubRepoNotFoundError(
            f"Repository {repo} was not found on {endpoint}. Check the name; if it is private"
            " or gated, log in with an access token (`hf auth login`, or set HF_TOKEN).",
            status=status)
    if isinstance(exc, hf.RevisionNotFoundError):
        return HubRevisionNotFoundError(
            f"Revision {file.revision!r} of {repo} was not found on {endpoint}.", status=status)
    if isinstance(exc, hf.RemoteEntryNotFoundError):
        return HubFileNotFoundError(
            f"{file.filename} was not found in {repo} (revision {file.revision}).", status=status)
    if isinstance(exc, hf.HfHubHTTPError):
        if status == 404:
            return HubFileNotFoundError(
                f"{file.filename} was not found in {repo} (HTTP 404 from {endpoint}).", status=status)
        if status in (401, 403):
            return HubAccessError(
                f"Access to {repo} was refused (HTTP {status}). If it is gated, accept its licence on"
                f" https://huggingface.co/{repo} and log in with an access token (`hf auth login`).",
                status=status)
        if status == 429:
            return HubRateLimitError(
                f"{endpoint} is rate-limiting requests (HTTP 429); try again in a few minutes.",
                status=status)
        if status is not None and status >= 500:
            return HubServerError(
                f"{endpoint} had a server error (HTTP {status}); try again later.", status=status)
        return HubError(f"{endpoint} refused {file.display} (HTTP {status}).", status=status)
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return HubOfflineError(
            "Downloads are switched off: the HF_HUB_OFFLINE environment variable is set. Unset it"
            " to download models."
        )
    if isinstance(exc, hf.FileMetadataError):
        return NotAHubError(
            f"{endpoint} did not answer like a Hugging Face Hub (no commit or ETag for"
            f" {file.display}). Check the hub endpoint: {ENDPOINT_SETTING_HINT}."
        )
    if isinstance(exc, (httpx2.TransportError, hf.LocalEntryNotFoundError, ConnectionError,
                        TimeoutError)):
        return HubUnreachableError(
            f"Cannot reach {endpoint} ({_network_cause(exc)}). Check your connection, or the hub"
            f" endpoint: {ENDPOINT_SETTING_HINT}."
        )
    return DownloadError(
        f"Talking to {endpoint} about {file.display} failed ({type(exc).__name__}). Try again; if it"
        f" keeps failing, check the hub endpoint: {ENDPOINT_SETTING_HINT}."
    )


def _network_cause(exc: BaseException) -> str:
    """A few words for why a connection failed, from the OS where it says (never a
    library's advice to its own callers)."""
    import httpx2

    if isinstance(exc, (httpx2.TimeoutException, TimeoutError)):
        return "no answer in time"
    for e in (exc, exc.__cause__, exc.__context__):
        if isinstance(e, OSError) and e.strerror:
            return e.strerror.lower()
        m = re.search(r"\[Errno -?\d+\] ([^\]\n]+)", str(e or ""))
        if m:
            return m.group(1).strip().rstrip(".").lower()
    if isinstance(exc, httpx2.RemoteProtocolError):
        return "the server closed the connection"
    return "the connection failed"


def _headers(token: str | bool | None, url: str, endpoint: str) -> dict[str, str]:
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # lazily exported

    headers = build_hf_headers(token=token)
    headers["Accept-Encoding"] = "identity"
    if urlparse(url).netloc != urlparse(endpoint).netloc:
        # A signed CDN URL: the hub token must not leave the hub (as huggingface_hub does).
        headers.pop("authorization", None)
        headers.pop("Authorization", None)
    return headers


def remote_file_info(
    file: RemoteFile, *, endpoint: str | None = None, token: str | bool | None = None
) -> RemoteFileInfo:
    """Ask the hub about a file (one HEAD request, redirects on the hub followed).

    Raises:
        DownloadError: gated (message names the repo and the licence page), not found,
            unreachable, or the server is not a hub.
    """
    import httpx2
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    ep = resolve_endpoint(endpoint)
    url = hf_hub_url(file.repo_id, file.filename, revision=file.revision, endpoint=ep)
    for attempt, wait in enumerate((*_METADATA_RETRY_WAITS_S, None)):
        try:
            meta = get_hf_file_metadata(url, token=token, endpoint=ep)
            break
        except (HfHubHTTPError, OSError, httpx2.HTTPError) as exc:
            # Transient trouble (server errors, rate limits, timeouts) is retried briefly;
            # a refused connection or a 4xx answer is reported at once.
            status = exc.response.status_code if isinstance(exc, HfHubHTTPError) and exc.response is not None else None
            transient = (status is not None and (status >= 500 or status == 429)) or isinstance(
                exc, (httpx2.TimeoutException, httpx2.RemoteProtocolError)
            )
            if wait is None or not transient:
                raise _hub_error(exc, file, ep) from exc
            log.info("hub answered %s for %s; retry %d in %.0f s", status or exc, file.display, attempt + 1, wait)
            time.sleep(wait)
    if meta.size is None:
        raise DownloadError(f"{ep} did not say how large {file.display} is; it cannot be verified.")
    if not meta.etag:
        raise DownloadError(f"{ep} gave no ETag for {file.display}; it cannot be verified.")
    etag = meta.etag.lower()
    return RemoteFileInfo(
        file=file,
        url=urljoin(url, meta.location),
        size=int(meta.size),
        etag=meta.etag,
        sha256=etag if _SHA256_RE.match(etag) else None,
        commit=meta.commit_hash,
        git_sha1=etag if _SHA1_RE.match(etag) else None,
    )


# --------------------------------------------------------------------------- progress


@dataclass(frozen=True, slots=True)
class DownloadProgress:
    """A snapshot of one download job (all its files).

    Attributes:
        repo_id: the repository.
        filename: the file being worked on now.
        file_index / file_count: its position in the job (0-based) and the job's size.
        downloaded: bytes on disk for the whole job, including earlier sessions.
        total: bytes of the whole job (None until the hub has answered).
        speed: bytes per second over the last few seconds (0 when unknown).
        eta: seconds left at that speed (None when unknown).
        phase: ``checking`` (asking the hub), ``downloading``, ``verifying`` (sha256),
            ``done``.
    """

    repo_id: str
    filename: str
    file_index: int
    file_count: int
    downloaded: int
    total: int | None
    speed: float
    eta: float | None
    phase: Phase

    @property
    def fraction(self) -> float | None:
        return self.downloaded / self.total if self.total else None


ProgressCallback = Callable[[DownloadProgress], None]


def _manifest_path(repo_dir: Path) -> Path:
    return repo_dir / MANIFEST_NAME


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = loads_json(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _existing_parent(path: Path) -> Path:
    for p in (path, *path.parents):
        if p.exists():
            return p
    return path


def _lock_path(partial: Path) -> Path:
    """The lock file a transfer holds while it writes ``partial`` (filelock's, taken
    without waiting)."""
    return partial.with_name(partial.name + ".lock")


def _partial_in_use(partial: Path) -> bool:
    """Whether a transfer holds the lock of ``partial`` now: one in another window or
    process (a live one: the OS releases a dead process's lock), or another job here.

    Probes by taking the lock without waiting and releasing it at once. A missing lock
    file means no transfer (each creates it before writing); a lock file that cannot be
    opened counts as free, so that the caller meets the real error where it acts.
    """
    from filelock import FileLock, Timeout

    lock_path = _lock_path(partial)
    if not lock_path.exists():
        return False
    try:
        with FileLock(str(lock_path), timeout=0):
            return False
    except Timeout:
        return True
    except OSError:
        return False


def _hash_file(path: Path, on_bytes: Callable[[int], None]) -> tuple[str, str]:
    """``(sha256, git blob sha1)`` of a file's content, in one pass.

    The git object id of a blob is sha1(``b"blob <size>\\0"`` + content) (git's object
    format, the ETag the hub gives for a file stored in git itself).
    """
    size = path.stat().st_size
    h = hashlib.sha256()
    g = hashlib.sha1(f"blob {size}\0".encode())
    with path.open("rb") as f:
        while chunk := f.read(DOWNLOAD_CHUNK_BYTES * 4):
            h.update(chunk)
            g.update(chunk)
            on_bytes(len(chunk))
    return h.hexdigest(), g.hexdigest()


def lfs_pointer_sha1(sha256: str, size: int) -> str:
    """The git object id of the LFS pointer file for content with this sha256 and size.

    A mirror that serves an LFS file without the hub's ``X-Linked-Etag`` header sends the
    pointer's id as the ETag; the pointer's text is fixed by the LFS spec
    (https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md), so the content's sha256
    and size determine it and the download can still be verified.
    """
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
    return hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()


def _ordered_names(names: Sequence[str]) -> list[str]:
    """File names with every split part's siblings added, each split model's parts in
    order (part 1 first), duplicates dropped; the first model named stays first."""
    out: list[str] = []
    for name in names:
        sp = split_parts(Path(name))
        if sp is None:
            group = [name]
        else:
            parent = PurePosixPath(name).parent
            group = [str(parent / n) if str(parent) != "." else n for n in split_part_names(sp[0].name, sp[2])]
        out.extend(n for n in group if n not in out)
    return out


class Download:
    """One download job: a model file, or every part of a split model, into the models folder.

    Files land at ``<models_dir>/<owner>/<repo>/<filename>``, where the library finds them.

    Args:
        repo_id: ``owner/name``.
        filenames: one file name, or several; a single split part name
            (``…-00001-of-00003.gguf``) means every part.
        models_dir: default :func:`app.catalog.library.current_models_dir`.
        endpoint: hub endpoint (default :func:`resolve_endpoint`).
        revision: branch, tag or commit.
        token: as huggingface_hub takes it (None: the stored token or ``HF_TOKEN``).

    :meth:`run` blocks (call it on a worker thread); :meth:`pause` and :meth:`cancel`
    may be called from any thread and take effect within one read of
    :data:`DOWNLOAD_CHUNK_BYTES`. A paused job may be run again (same object, or a new
    one after a restart): it continues from the partial file.

    Raises:
        DownloadError: from the constructor, for a malformed repo id or file name.
    """

    def __init__(
        self,
        repo_id: str,
        filenames: str | Sequence[str],
        *,
        models_dir: Path | None = None,
        endpoint: str | None = None,
        revision: str = "main",
        token: str | bool | None = None,
    ) -> None:
        names = _ordered_names([filenames] if isinstance(filenames, str) else list(filenames))
        if not names:
            raise DownloadError("Nothing to download: no file names given.")
        self.files = tuple(RemoteFile(repo_id, n, revision) for n in names)
        self.repo_id = repo_id
        if models_dir is None:
            from app.catalog.library import current_models_dir

            models_dir = current_models_dir()
        self.models_dir = Path(models_dir)
        self.endpoint = resolve_endpoint(endpoint)
        self.token = token
        owner, name = repo_id.split("/", 1)
        self.repo_dir = self.models_dir / owner / name
        self._stop = threading.Event()
        self._stop_paused = True
        self._lock = threading.Lock()
        self._on_progress: ProgressCallback | None = None
        self._done = 0
        self._total: int | None = None
        self._index = 0
        self._phase: Phase = "checking"
        self._samples: deque[tuple[float, int]] = deque()
        self._last_emit = 0.0
        self._running = False

    # -- paths ----------------------------------------------------------------------

    def final_path(self, filename: str) -> Path:
        """Where ``filename`` of this repository lives once complete."""
        return self.repo_dir / PurePosixPath(filename)

    def _partial_path(self, filename: str) -> Path:
        return self.repo_dir / PARTIAL_DIR / (filename.replace("/", "__") + ".incomplete")

    @property
    def model_path(self) -> Path:
        """The file to load when done (part 1 of a split model, whatever order the names
        were given in)."""
        return self.final_path(self.files[0].filename)

    # -- control --------------------------------------------------------------------

    def pause(self) -> None:
        """Stop soon and keep the partial file; :meth:`run` raises :class:`DownloadStopped`."""
        self._stop_paused = True
        self._stop.set()

    def cancel(self) -> list[str]:
        """Stop soon and delete the partial files; when the job is not running, delete
        them now (a paused download the user gives up), as :meth:`discard_partial` does.

        Returns:
            When the job is not running, the names of the files whose partial file was
            left alone because another download is writing it; else an empty list.
        """
        self._stop_paused = False
        self._stop.set()
        if not self._running:
            return self.discard_partial()
        return []

    def discard_partial(self) -> list[str]:
        """Delete this job's partial files, notes and lock files (never a completed file),
        except those another transfer is writing now (another window or process, or
        another job here): each file's lock is taken first without waiting, as a
        transfer takes it, and a file whose lock is held is left alone. Called when this
        job's own transfer has ended (its lock released).

        Returns:
            The names of the files left alone because another download holds their lock
            (empty when everything was deleted).

        Raises:
            OSError: a lock file could not be created or a file deleted (a read-only
                folder).
        """
        from filelock import FileLock, Timeout

        in_use: list[str] = []
        for f in self.files:
            p = self._partial_path(f.filename)
            note, lock_path = p.with_name(p.name + ".json"), _lock_path(p)
            if not any(q.exists() for q in (p, note, lock_path)):
                continue  # nothing to delete; taking the lock would create .partial/
            try:
                with FileLock(str(lock_path), timeout=0):
                    try:
                        p.unlink(missing_ok=True)
                        note.unlink(missing_ok=True)
                    finally:
                        lock_path.unlink(missing_ok=True)  # as _fetch does, while held
            except Timeout:
                log.info("not deleting %s: another download is writing it", p)
                in_use.append(f.filename)
        return in_use

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise DownloadStopped(self._stop_paused, self.files[self._index].filename)

    # -- progress -------------------------------------------------------------------

    def _advance(self, n: int) -> None:
        # download_to reports a chunk *before* writing it, so a stop is honoured here,
        # before the chunk is counted: the count then equals the bytes on disk, and the
        # previous chunk has been written (the partial file is never shorter than reported).
        self._check_stop()
        with self._lock:
            self._done += n
        self._emit()

    def _emit(self, force: bool = False) -> None:
        cb = self._on_progress
        now = time.monotonic()
        with self._lock:
            self._samples.append((now, self._done))
            while len(self._samples) > 2 and now - self._samples[0][0] > _SPEED_WINDOW_S:
                self._samples.popleft()
            if not force and now - self._last_emit < _PROGRESS_INTERVAL_S:
                return
            self._last_emit = now
            t0, b0 = self._samples[0]
            speed = (self._done - b0) / (now - t0) if now - t0 > 0.2 and self._phase == "downloading" else 0.0
            eta = (self._total - self._done) / speed if speed > 0 and self._total is not None else None
            progress = DownloadProgress(
                self.repo_id,
                self.files[self._index].filename,
                self._index,
                len(self.files),
                self._done,
                self._total,
                max(0.0, speed),
                eta,
                self._phase,
            )
        if cb is not None:
            cb(progress)

    def _set_phase(self, phase: Phase, index: int | None = None) -> None:
        with self._lock:
            self._phase = phase
            if index is not None:
                self._index = index
            self._samples.clear()
        self._emit(force=True)

    # -- the job ----------------------------------------------------------------------

    def run(self, on_progress: ProgressCallback | None = None) -> Path:
        """Download every file that is not complete yet; return :attr:`model_path`.

        Files already complete (same ETag as the hub's) are skipped; partial files from
        an earlier run continue where they stopped.

        Raises:
            DownloadStopped: :meth:`pause` or :meth:`cancel` was called.
            DownloadError: hub errors (gated, not found, unreachable), not enough free
                space, a size or sha256 mismatch (the bad file is deleted), a server
                that sends more than the size it announced (stopped there, the partial
                file deleted), a connection lost for good (the partial file is kept for
                resuming), the file being downloaded by another window or process, or a
                disk error.
        """
        self._stop.clear()  # a paused job object may be run again
        self._on_progress = on_progress
        self._running = True
        try:
            return self._run()
        except DownloadStopped as stop:
            if not stop.paused:
                self.discard_partial()
            raise
        except OSError as exc:  # folders that cannot be made or written, outside a transfer
            where = getattr(exc, "filename", None) or self.models_dir
            raise DownloadError(
                f"Cannot write into {where}: {exc.strerror or exc}. Choose another models folder."
            ) from exc
        finally:
            self._running = False

    def _run(self) -> Path:
        self._set_phase("checking", 0)
        infos: list[RemoteFileInfo] = []
        for i, f in enumerate(self.files):
            self._check_stop()
            with self._lock:
                self._index = i
            infos.append(remote_file_info(f, endpoint=self.endpoint, token=self.token))
        manifest = _read_json(_manifest_path(self.repo_dir))
        todo: list[RemoteFileInfo] = []
        completed = 0
        partial_bytes = 0
        for info in infos:
            if self._is_complete(info, manifest):
                completed += info.size
                continue
            partial_bytes += self._prepare_partial(info)
            todo.append(info)
        with self._lock:
            self._total = sum(i.size for i in infos)
            self._done = completed + partial_bytes
        self._check_free_space(self._total - completed - partial_bytes)
        for n, info in enumerate(todo):
            self._fetch(info, self.files.index(info.file))
            completed += info.size
            later = sum(self._partial_size(i) for i in todo[n + 1 :])
            with self._lock:  # exact count from disk, whatever the transfer reported
                self._done = completed + later
        self._set_phase("done")
        return self.model_path

    def _is_complete(self, info: RemoteFileInfo, manifest: dict[str, Any]) -> bool:
        final = self.final_path(info.file.filename)
        rec = manifest.get(info.file.filename)
        try:
            size = final.stat().st_size
        except OSError:
            return False
        return isinstance(rec, dict) and rec.get("etag") == info.etag and size == info.size

    def _prepare_partial(self, info: RemoteFileInfo) -> int:
        """Bytes already downloaded for this file that can be kept (0 after a change)."""
        from filelock import FileLock, Timeout

        partial = self._partial_path(info.file.filename)
        try:
            have = partial.stat().st_size
        except OSError:
            return 0
        lock_path = _lock_path(partial)
        lock = FileLock(str(lock_path), timeout=0)
        try:
            lock.acquire()  # held while deciding and deleting, as discard_partial does
        except (Timeout, OSError):
            # another download writes it, or no lock can be taken here (a read-only
            # folder, another account's lock file): nothing is deleted, _fetch reports it
            return have
        try:
            return self._keep_or_discard(partial, info)
        finally:
            try:
                lock_path.unlink(missing_ok=True)  # as _fetch does, while held
            except OSError:
                pass  # (a read-only folder): the lock file stays, unheld, harmless
            finally:
                lock.release()

    def _keep_or_discard(self, partial: Path, info: RemoteFileInfo) -> int:
        """The bytes of ``partial`` kept for resuming, or 0 after deleting a stale or
        uncheckable one (the caller holds its lock)."""
        note = _read_json(partial.with_name(partial.name + ".json"))
        try:
            have = partial.stat().st_size
        except OSError:
            return 0
        if note.get("etag") != info.etag or note.get("size") != info.size or have > info.size:
            log.info("discarding stale partial download %s", partial)
            partial.unlink(missing_ok=True)
            return 0
        if have and not info.checkable:
            # Nothing can check resumed bytes of this file afterwards: start over.
            log.info("no checksum for %s: not resuming %s", info.file.display, partial)
            partial.unlink(missing_ok=True)
            return 0
        return have

    def _check_free_space(self, need: int) -> None:
        where = _existing_parent(self.repo_dir)
        try:
            free = shutil.disk_usage(where).free
        except OSError as exc:
            log.warning("cannot check free space in %s: %s", where, exc)
            return
        if need > free:
            raise DownloadError(
                f"Not enough free disk space in {where}: {self.repo_id} needs {format_bytes(need)} more"
                f" but only {format_bytes(free)} is free. Free some space or choose another models folder."
            )

    def _partial_size(self, info: RemoteFileInfo) -> int:
        try:
            return self._partial_path(info.file.filename).stat().st_size
        except OSError:
            return 0

    def _fetch(self, info: RemoteFileInfo, index: int) -> None:
        from filelock import FileLock, Timeout

        partial = self._partial_path(info.file.filename)
        partial.parent.mkdir(parents=True, exist_ok=True)
        lock_path = _lock_path(partial)
        try:
            with FileLock(str(lock_path), timeout=0):
                try:
                    self._transfer(info, index)
                finally:
                    # A lock file means something only while it is held; leaving it would
                    # litter .partial/ with one per file ever downloaded.
                    lock_path.unlink(missing_ok=True)
        except Timeout:
            raise DownloadError(
                f"{info.file.display} is already being downloaded (by another window or process)."
            ) from None
        try:
            partial.parent.rmdir()  # only when empty: other partial downloads stay
        except OSError:
            pass

    def _transfer(self, info: RemoteFileInfo, index: int) -> None:
        import httpx2
        from huggingface_hub.errors import HfHubHTTPError
        name = info.file.filename
        partial = self._partial_path(name)
        note_path = partial.with_name(partial.name + ".json")
        write_json_atomic(
            note_path,
            {"repo_id": self.repo_id, "filename": name, "revision": info.file.revision,
             "etag": info.etag, "size": info.size, "commit": info.commit},
            indent=1, sort_keys=True,
        )
        self._set_phase("downloading", index)
        transfer_error: BaseException | None = None
        try:
            with partial.open("r+b" if partial.exists() else "w+b") as fh:
                fh.seek(0, os.SEEK_END)
                have = fh.tell()
                try:
                    if not info.checkable:
                        # nothing can check resumed bytes of this file afterwards: they are
                        # only ever taken in one piece from byte 0
                        fh.truncate(0)
                        fh.seek(0)
                        have = 0
                    download_to(
                        info.url,
                        fh,
                        resume_size=have,
                        headers=_headers(self.token, info.url, self.endpoint),
                        expected_size=info.size,
                        on_bytes=self._advance,
                        resume=info.checkable,
                    )
                except DownloadStopped:
                    raise
                except HfHubHTTPError as exc:
                    status = exc.response.status_code if exc.response is not None else None
                    if status == 416:  # our partial file does not fit the remote one
                        transfer_error = DownloadError(
                            f"The partial download of {name} does not match the file on the hub; it was"
                            " discarded. Start the download again."
                        )
                        fh.truncate(0)
                    else:
                        raise _hub_error(exc, info.file, self.endpoint) from exc
                except httpx2.HTTPError as exc:
                    transfer_error = exc  # connection lost for good: sizes decide below
                except BodyTooLongError as exc:
                    # Nothing past the announced size was written, but what was may be the
                    # start of a body that is not the file: never resume from it.
                    transfer_error = DownloadError(
                        f"{name} arrived larger than the hub says: {urlparse(info.url).netloc}"
                        f" sent more than the {info.size} bytes ({format_bytes(info.size)}) it"
                        " announced; the download was stopped and the partial file discarded."
                        " Try again; if it keeps happening, check the hub endpoint:"
                        f" {ENDPOINT_SETTING_HINT}."
                    )
                    transfer_error.__cause__ = exc
                    fh.truncate(0)
                    note_path.unlink(missing_ok=True)
                except OSError as exc:
                    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                        raise DownloadError(
                            f"The disk is full: {name} could not be written to {partial.parent}."
                        ) from exc
                    if exc.errno is not None:
                        raise DownloadError(f"Cannot write {partial}: {exc.strerror}.") from exc
                    transfer_error = exc  # download_to's size consistency check
        except OSError as exc:
            raise DownloadError(f"Cannot write {partial}: {exc.strerror or exc}.") from exc
        if isinstance(transfer_error, DownloadError):
            partial.unlink(missing_ok=True)
            raise transfer_error
        self._emit(force=True)  # the final count, which throttling may have skipped
        if transfer_error is not None and not info.checkable and partial.stat().st_size < info.size:
            partial.unlink(missing_ok=True)
            note_path.unlink(missing_ok=True)
            raise DownloadError(
                f"The connection was lost while downloading {name}. The hub gives no checksum for this"
                " file, so a resumed download could not be checked; the partial file was discarded."
                " Try again."
            )
        self._verify_and_place(info, partial, note_path, transfer_error)

    def _verify_and_place(
        self, info: RemoteFileInfo, partial: Path, note_path: Path, transfer_error: BaseException | None
    ) -> None:
        name = info.file.filename
        size = partial.stat().st_size
        if size < info.size:
            why = " (the connection was lost)" if transfer_error is not None else ""
            got, want = format_bytes(size), format_bytes(info.size)
            if got == want:
                got, want = f"{size}", f"{info.size} bytes"
            if not info.checkable:
                partial.unlink(missing_ok=True)
                note_path.unlink(missing_ok=True)
                raise DownloadError(
                    f"The download of {name} stopped at {got} of {want}{why}. The hub gives no checksum"
                    " for this file, so it cannot be resumed; the partial file was discarded. Try again."
                )
            raise DownloadError(
                f"The download of {name} stopped at {got} of {want}{why}. The partial file is kept:"
                " resume the download to continue."
            )
        if size > info.size:
            partial.unlink(missing_ok=True)
            raise DownloadError(
                f"{name} arrived larger than the hub says ({size} bytes instead of {info.size});"
                " the file was discarded. Try again."
            )
        verified = "size"
        if info.checkable:
            self._set_phase("verifying")
            with self._lock:
                self._samples.clear()

            def tick(_n: int) -> None:
                self._check_stop()

            digest, blob_sha1 = _hash_file(partial, tick)
            if info.sha256 is not None:
                ok, want, got, kind = digest == info.sha256, info.sha256, digest, "sha256"
            else:
                assert info.git_sha1 is not None
                # the content's own git id, or (a mirror without LFS headers) its pointer's
                ok = info.git_sha1 in (blob_sha1, lfs_pointer_sha1(digest, size))
                want, got, kind = info.git_sha1, blob_sha1, "git hash"
            if not ok:
                partial.unlink(missing_ok=True)
                note_path.unlink(missing_ok=True)
                raise DownloadError(
                    f"{name} is corrupt: its {kind} does not match the hub's ({got[:12]}… instead of"
                    f" {want[:12]}…). The file was discarded; try again."
                )
            verified = kind
        final = self.final_path(name)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial, final)
        note_path.unlink(missing_ok=True)
        manifest_path = _manifest_path(self.repo_dir)
        manifest = _read_json(manifest_path)
        manifest[name] = {
            "etag": info.etag, "size": info.size, "sha256": info.sha256, "commit": info.commit,
            "revision": info.file.revision, "completed": time.time(), "verified": verified,
        }
        write_json_atomic(manifest_path, manifest, indent=1, sort_keys=True)


@dataclass(frozen=True, slots=True)
class PendingDownload:
    """A partial download in the models folder (for the downloads panel to offer).

    Attributes:
        downloaded / size: bytes on disk and bytes of the whole file.
        in_use: a transfer holds the file's lock now (another window or process, or a
            job here, is downloading it): not a paused download to offer or delete.
    """

    repo_id: str
    filename: str
    revision: str
    downloaded: int
    size: int
    in_use: bool = False


def pending_downloads(models_dir: Path | None = None) -> list[PendingDownload]:
    """Partial downloads in the models folder: left by an earlier run (resumable with
    :class:`Download`), or being written now by another window or process (``in_use``)."""
    if models_dir is None:
        from app.catalog.library import current_models_dir

        models_dir = current_models_dir()
    out: list[PendingDownload] = []
    for note in sorted(Path(models_dir).glob(f"*/*/{PARTIAL_DIR}/*.incomplete.json")):
        data = _read_json(note)
        partial = note.with_name(note.name.removesuffix(".json"))
        try:
            out.append(
                PendingDownload(
                    str(data["repo_id"]), str(data["filename"]), str(data.get("revision", "main")),
                    partial.stat().st_size if partial.exists() else 0, int(data["size"]),
                    _partial_in_use(partial),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out


# --------------------------------------------------------------------------- remote headers


@dataclass(frozen=True, slots=True)
class RemoteGGUF:
    """A remote model's tokenizer and metadata, read from its header.

    Attributes:
        meta: the hub's answer for the file read (part 1 of a split model).
        vocab: the parsed header (``vocab.info`` has the metadata; ``file_size`` is the
            size of all parts).
        bytes_fetched: bytes of the file transferred to read it.
    """

    meta: RemoteFileInfo
    vocab: GGUFVocab
    bytes_fetched: int


def _fetch_range(url: str, start: int, stop: int, headers: dict[str, str], out: bytearray) -> int:
    """Append bytes ``start`` … ``stop - 1`` of ``url`` to ``out``; return how many came.

    Reads at most ``stop - start`` bytes even if the server ignores the Range header
    (then only a request from byte 0 can be served; others raise DownloadError).
    """
    from huggingface_hub import hf_raise_for_status

    h = dict(headers)
    h["Range"] = f"bytes={start}-{stop - 1}"
    want = stop - start
    got = 0
    with open_stream("GET", url, h) as response:
        hf_raise_for_status(response)
        if response.status_code != 206 and start > 0:
            raise DownloadError(
                f"The server of {url.split('?')[0]} ignores HTTP range requests, so the model's header"
                " cannot be read without downloading the whole file."
            )
        for chunk in response.iter_bytes(64 << 10):
            take = chunk[: want - got]
            out += take
            got += len(take)
            if got >= want:
                break
    return got


def remote_file_parts(file: RemoteFile) -> list[str]:
    """Every file to download for ``file``: all parts of a split GGUF
    (``…-00001-of-0000N.gguf``, in the same folder of the repository), else the file."""
    sp = split_parts(Path(file.filename))
    if sp is None or sp[2] <= 1:
        return [file.filename]
    parent = PurePosixPath(file.filename).parent
    return [str(parent / n) if str(parent) != "." else n for n in split_part_names(sp[0].name, sp[2])]


def read_remote_gguf(
    file: RemoteFile,
    *,
    endpoint: str | None = None,
    token: str | bool | None = None,
    first_request: int = HEADER_FIRST_REQUEST,
) -> RemoteGGUF:
    """Read a remote GGUF's header with HTTP range requests, without downloading it.

    The prefix grows until the metadata parses: each retry asks for what the parser
    says it needs (for a token list, estimated from the entries read so far) plus a
    small margin, so the bytes fetched stay close to the header's size (for Gemma 3's
    262,144-token vocabulary: about 6.6 MB of a 253 MB file, in five requests).

    Raises:
        DownloadError: hub errors (gated, not found, unreachable).
        GGUFError: the header is not a usable GGUF.
    """
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    ep = resolve_endpoint(endpoint)
    meta = remote_file_info(file, endpoint=ep, token=token)
    total_size = meta.size
    split_names = remote_file_parts(file)
    if len(split_names) > 1:
        for other in split_names[1:]:
            total_size += remote_file_info(RemoteFile(file.repo_id, other, file.revision), endpoint=ep, token=token).size
    headers = _headers(token, meta.url, ep)
    head = bytearray()  # the prefix read so far; it grows until the header parses
    want = min(meta.size, first_request)
    while True:
        have = len(head)
        try:
            got = _fetch_range(meta.url, have, want, headers, head)
        except HfHubHTTPError as exc:
            raise _hub_error(exc, file, ep) from exc
        except httpx2.HTTPError as exc:
            raise _hub_error(exc, file, ep) from exc
        if got < want - have:
            raise DownloadError(f"{ep} sent only {len(head)} of the first {want} bytes of {file.display}.")
        try:
            vocab = parse_gguf_head(bytes(head), meta.size, file.display)
            break
        except IncompleteHeaderError as more:
            if len(head) >= meta.size:  # pragma: no cover - parse of a whole file never asks for more
                raise GGUFError(f"{file.display} is not a usable GGUF file: the header is truncated.") from None
            # What the parser asked for plus a margin for the small keys that follow, and
            # never less than 64 KiB more (tensor infos come in many small reads).
            want = min(meta.size, max(more.needed + (32 << 10), len(head) + (64 << 10)))
    fetched = len(head)
    info = vocab.info
    full_info = replace(info, file_size=total_size, split_paths=tuple(f"{file.repo_id}/{n}" for n in split_names))
    log.info("read the header of %s: %d of %d bytes", file.display, fetched, meta.size)
    return RemoteGGUF(meta, vocab.with_info(full_info), fetched)


@dataclass(frozen=True, slots=True)
class RemotePairCheck:
    """The pairing check of two remote models, before downloading them."""

    target: RemoteGGUF
    draft: RemoteGGUF
    result: PairResult

    def to_dict(self) -> dict[str, object]:
        d = self.result.to_dict()
        d["target"] = {"file": self.target.meta.file.display, "size": self.target.vocab.info.file_size,
                       "bytes_fetched": self.target.bytes_fetched}
        d["draft"] = {"file": self.draft.meta.file.display, "size": self.draft.vocab.info.file_size,
                      "bytes_fetched": self.draft.bytes_fetched}
        return d


def check_remote_pair(
    target: RemoteFile,
    draft: RemoteFile,
    *,
    endpoint: str | None = None,
    token: str | bool | None = None,
) -> RemotePairCheck:
    """llama.cpp's pairing rule on two models still on the hub (headers only); for an
    MTP assistant as the draft (Gemma 4's), the assistant rules
    (:func:`app.catalog.pairing.check_assistant_pair`).

    Raises:
        DownloadError: hub errors for either file.
        GGUFError: either header is not a usable GGUF.
    """
    t = read_remote_gguf(target, endpoint=endpoint, token=token)
    d = read_remote_gguf(draft, endpoint=endpoint, token=token)
    result = check_drafter_pair(t.vocab, d.vocab,
                                target_shape=ModelShape.from_header(t.vocab.info),
                                draft_shape=ModelShape.from_header(d.vocab.info),
                                target_size=t.vocab.info.file_size, draft_size=d.vocab.info.file_size)
    return RemotePairCheck(t, d, result)


def _curated_remote(model: CuratedModel, quant: str | None) -> RemoteFile:
    f = model.file_for(quant)
    return RemoteFile(model.repo, f.file)


def check_curated_pair(
    pair: CuratedPair,
    *,
    target_quant: str | None = None,
    draft_quant: str | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
) -> RemotePairCheck:
    """:func:`check_remote_pair` for a curated pair at the chosen quantizations.

    Raises:
        TandemError: the entry has no draft (:func:`check_curated_target` reads its
            target's header instead).
    """
    if pair.draft is None:
        raise TandemError(f"{pair.id} has no draft to pair; check its target alone.")
    return check_remote_pair(
        _curated_remote(pair.target, target_quant),
        _curated_remote(pair.draft, draft_quant),
        endpoint=endpoint,
        token=token,
    )


def check_curated_target(
    pair: CuratedPair,
    *,
    target_quant: str | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
) -> RemoteGGUF:
    """The header of a curated entry's target at the chosen quantization, read from the
    hub (:func:`read_remote_gguf`): the check of an entry that has no draft.

    Raises:
        DownloadError: hub errors.
        GGUFError: the header is not a usable GGUF.
    """
    return read_remote_gguf(_curated_remote(pair.target, target_quant), endpoint=endpoint,
                            token=token)


def curated_downloads(
    pair: CuratedPair,
    *,
    target_quant: str | None = None,
    draft_quant: str | None = None,
    models_dir: Path | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
) -> tuple[Download, ...]:
    """The download jobs of a curated entry, not started: (target, draft), or (target,)
    for an entry without a draft.

    Raises:
        TandemError: a quantization that the entry does not offer.
    """
    jobs = []
    for model, quant in zip(pair.models, (target_quant, draft_quant)):
        f = model.file_for(quant)
        jobs.append(Download(model.repo, f.filenames, models_dir=models_dir, endpoint=endpoint, token=token))
    return tuple(jobs)
