"""A local HTTP server on 127.0.0.1 that answers like the Hugging Face Hub's file endpoints.

It speaks what the real ``huggingface_hub`` client uses for a download:

* ``HEAD|GET /<owner>/<repo>/resolve/<revision>/<file>`` → ``302`` to a "CDN" URL on a
  different origin (``localhost`` instead of ``127.0.0.1``, as the hub redirects LFS
  files to its CDN) carrying ``X-Repo-Commit``, ``X-Linked-Etag`` (the sha256),
  ``X-Linked-Size`` and ``Location``; with ``redirect=False`` it answers ``200`` itself
  with ``ETag``/``Content-Length``.
* ``GET|HEAD /cdn/<owner>/<repo>/<file>`` → the bytes, with ``Range`` → ``206`` and
  ``Content-Range``, ``416`` past the end.
* errors as the hub sends them: ``X-Error-Code`` ``RepoNotFound`` / ``EntryNotFound`` /
  ``GatedRepo`` with 401/403/404.

Faults can be injected per file: drop the connection after n body bytes (once), claim a
wrong size, serve corrupted bytes (always, or only to resumed requests), send a body that
never ends (``endless_body``: the file, then zeros, chunked, until the client hangs up),
describe it by another kind of ETag (``etag_kind``), or answer a status code a number of
times first; and
``rate`` slows bodies down to a given number of bytes per second, like a real network.
Every body byte sent is counted per file (:attr:`FakeHub.sent`).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class HostedFile:
    data: bytes | Path
    sha256: str
    size: int

    def read(self, start: int, stop: int) -> bytes:
        if isinstance(self.data, bytes):
            return self.data[start:stop]
        with self.data.open("rb") as f:
            f.seek(start)
            return f.read(stop - start)


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class FakeHub:
    """Start with ``with FakeHub() as hub:``; ``hub.endpoint`` is the HF_ENDPOINT to use."""

    redirect: bool = True
    files: dict[str, HostedFile] = field(default_factory=dict)  # "owner/repo/file"
    repos: set[str] = field(default_factory=set)
    gated: dict[str, int] = field(default_factory=dict)  # repo → 401 or 403
    drop_after: dict[str, int] = field(default_factory=dict)  # one-shot
    size_claims: dict[str, int] = field(default_factory=dict)
    corrupt: dict[str, bytes] = field(default_factory=dict)
    fail_first: dict[str, list[int]] = field(default_factory=dict)  # statuses answered first
    rate: float | None = None  # bytes per second for file bodies (None: as fast as possible)
    #: when given, a file body stops after its first MiB until the event is set (a
    #: download that is surely still running while a test acts; set it to let it end)
    hold: threading.Event | None = None
    ignore_range: bool = False  # answer 200 with the whole file, as some proxies do
    # How /resolve/ describes a file: "lfs" (default: 302 to the CDN with X-Linked-Etag =
    # sha256), "git" (a file kept in git: 200 with ETag = its git blob id), "pointer" (a
    # mirror without LFS headers: 200 with ETag = the LFS pointer's git id), "opaque" (an
    # ETag that is no hash at all).
    etag_kind: dict[str, str] = field(default_factory=dict)
    corrupt_resumed: dict[str, bytes] = field(default_factory=dict)  # served to Range requests only
    endless_body: set[str] = field(default_factory=set)  # GETs of these bytes never end
    sent: Counter[str] = field(default_factory=Counter)
    requests: list[Request] = field(default_factory=list)

    def add(self, repo: str, filename: str, data: bytes | Path) -> HostedFile:
        if isinstance(data, Path):
            h = hashlib.sha256()
            with data.open("rb") as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
            hosted = HostedFile(data, h.hexdigest(), data.stat().st_size)
        else:
            hosted = HostedFile(data, hashlib.sha256(data).hexdigest(), len(data))
        self.repos.add(repo)
        self.files[f"{repo}/{filename}"] = hosted
        return hosted

    def etag_of(self, key: str, hosted: HostedFile) -> str:
        """The ETag /resolve/ sends for a file answered directly (see ``etag_kind``)."""
        kind = self.etag_kind.get(key, "lfs")
        data = hosted.read(0, hosted.size)
        if kind == "git":
            return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        if kind == "pointer":
            pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{hosted.sha256}\n"
                       f"size {hosted.size}\n").encode()
            return hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()
        if kind == "opaque":
            return hashlib.md5(data).hexdigest() + "-1"
        return hosted.sha256

    # -- server ---------------------------------------------------------------------

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            fake = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cdn_url(self, key: str) -> str:
        return f"http://localhost:{self.port}/cdn/{key}"

    def ranges(self, key: str) -> list[str | None]:
        """Range headers of the GETs of one file's bytes, in order."""
        return [r.range for r in self.requests if r.method == "GET" and self._key_of(r.path) == key]

    @staticmethod
    def _key_of(path: str) -> str | None:
        p = urlparse(path).path
        if p.startswith("/cdn/"):
            return unquote(p[len("/cdn/"):])
        m = re.match(r"^/([^/]+/[^/]+)/resolve/[^/]+/(.+)$", p)
        return f"{m[1]}/{unquote(m[2])}" if m else None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        return

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _error(self, status: int, code: str | None, message: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        body = b"" if self.command == "HEAD" else message.encode()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _serve(self, head: bool) -> None:
        hub = self.fake
        hub.requests.append(Request(self.command, self.path, self.headers.get("Range"), self.headers.get("Authorization")))
        path = urlparse(self.path).path
        if path.startswith("/cdn/"):
            key = unquote(path[len("/cdn/"):])
            hosted = hub.files.get(key)
            if hosted is None:
                self._error(404, None, "no such blob")
                return
            if key in hub.endless_body and not head:
                self._send_endless(key, hosted)
                return
            self._send_bytes(key, hosted, head)
            return
        m = re.match(r"^/([^/]+)/([^/]+)/resolve/([^/]+)/(.+)$", path)
        if not m:
            self._error(404, None, "not a hub URL")
            return
        repo, filename = f"{m[1]}/{m[2]}", unquote(m[4])
        key = f"{repo}/{filename}"
        statuses = hub.fail_first.get(key)
        if statuses:
            self._error(statuses.pop(0), None, "injected failure")
            return
        if repo in hub.gated:
            self._error(
                hub.gated[repo], "GatedRepo",
                f"Access to model {repo} is restricted. You must have access to it and be authenticated to access it. Please log in.",
            )
            return
        if repo not in hub.repos:
            self._error(404, "RepoNotFound", "Repository not found")
            return
        hosted = hub.files.get(key)
        if hosted is None:
            self._error(404, "EntryNotFound", f"{filename} does not exist on \"main\"", {"X-Repo-Commit": COMMIT})
            return
        size = hub.size_claims.get(key, hosted.size)
        if hub.etag_kind.get(key, "lfs") != "lfs":
            self._send_bytes(key, hosted, head, claim=size, hub_headers=True)
            return
        if hub.redirect:
            self.send_response(302)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("X-Linked-Etag", f'"{hosted.sha256}"')
            self.send_header("X-Linked-Size", str(size))
            self.send_header("ETag", '"0000000000000000000000000000000000000000"')
            self.send_header("Location", hub.cdn_url(key))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._send_bytes(key, hosted, head, claim=size, hub_headers=True)

    def _send_bytes(self, key: str, hosted: HostedFile, head: bool, claim: int | None = None, hub_headers: bool = False) -> None:
        hub = self.fake
        total = hosted.size
        start, stop = 0, total
        rng = None if hub.ignore_range else self.headers.get("Range")
        status = 200
        if rng:
            m = re.match(r"^bytes=(\d+)-(\d*)$", rng.strip())
            if not m:
                self._error(416, None, "bad range")
                return
            start = int(m[1])
            stop = min(total, int(m[2]) + 1) if m[2] else total
            if start >= total:
                self._error(416, None, "range not satisfiable", {"Content-Range": f"bytes */{total}"})
                return
            status = 206
        self.send_response(status)
        if hub_headers:
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{hub.etag_of(key, hosted)}"')
        self.send_header("Accept-Ranges", "bytes")
        length = stop - start
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{total}")
        self.send_header("Content-Length", str(claim if claim is not None and status == 200 and head else length))
        self.end_headers()
        if head:
            return
        body_source = hub.corrupt.get(key)
        if start > 0 and key in hub.corrupt_resumed:
            body_source = hub.corrupt_resumed[key]
        drop = hub.drop_after.pop(key, None)
        pos = start
        while pos < stop:
            n = min(64 << 10, stop - pos)
            if drop is not None and (pos - start) + n > drop:
                n = drop - (pos - start)
                if n > 0:
                    self._write(key, body_source[pos:pos + n] if body_source else hosted.read(pos, pos + n))
                self.close_connection = True
                try:
                    self.wfile.flush()
                    self.connection.shutdown(2)
                except OSError:
                    pass
                return
            chunk = body_source[pos:pos + n] if body_source else hosted.read(pos, pos + n)
            if not self._write(key, chunk):
                return
            pos += n

    def _send_endless(self, key: str, hosted: HostedFile) -> None:
        """A body that never ends: the file from the requested byte, then zeros, in HTTP
        chunks, until the client closes the connection (as a broken proxy might)."""
        m = re.match(r"^bytes=(\d+)-", (self.headers.get("Range") or "").strip())
        start = int(m[1]) if m else 0
        self.send_response(206 if m else 200)
        if m:
            self.send_header("Content-Range", f"bytes {start}-{hosted.size - 1}/{hosted.size}")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        pos = start
        while True:
            data = hosted.read(pos, pos + (64 << 10)) if pos < hosted.size else b""
            data += bytes((64 << 10) - len(data))
            if not self._write(key, b"%x\r\n%s\r\n" % (len(data), data)):
                return
            pos += len(data)

    def _write(self, key: str, chunk: bytes) -> bool:
        if self.fake.rate:
            time.sleep(len(chunk) / self.fake.rate)
        if self.fake.hold is not None and self.fake.sent[key] >= 1 << 20:
            self.fake.hold.wait(120)
        try:
            self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return False
        self.fake.sent[key] += len(chunk)
        return True
