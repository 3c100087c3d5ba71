"""HTTP through huggingface_hub: the one module that uses its undocumented helpers.

Tandem talks to the hub through ``huggingface_hub``'s documented API
(``get_hf_file_metadata``, ``hf_hub_url``, ``build_hf_headers``,
``hf_raise_for_status``, the typed errors) everywhere else. Two things it needs have no
public form, so they live here and nowhere else, pinned by a contract test
(tests/catalog/test_hf_transport.py) that fails loudly when an upgrade changes them:

* :func:`open_stream` — ``huggingface_hub.utils.http_stream_backoff``: a streamed
  request on the hub's configured HTTP client (proxies, certificates, user agent) with
  its retry rules for rate limits;
* :func:`download_to` — the resumable transfer that ``file_download.http_get`` does,
  written here on :func:`open_stream` because ``http_get`` reads 10 MB per chunk from a
  process-wide constant (``constants.DOWNLOAD_CHUNK_SIZE``) that Tandem must not
  change: pause, cancel and progress act per :data:`CHUNK_BYTES` here, and no library
  setting is touched. It keeps ``http_get``'s behaviour: resume with an HTTP Range
  request, start over when the server ignores the range, retry a dropped connection a
  few times from where it stopped, and a size consistency check at the end. Unlike
  ``http_get``, it also stops as soon as a server sends more than the expected size
  (:class:`BodyTooLongError`), so an endless body cannot fill the disk.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Literal

log = logging.getLogger(__name__)

#: bytes per read: progress, pause and cancel act at this granularity
CHUNK_BYTES = 1 << 18
#: transient connection failures retried (after a second each) before giving up; the
#: count restarts whenever data arrives (as huggingface_hub's http_get does)
RETRIES = 5
RETRY_WAIT_S = 1.0


class BodyTooLongError(OSError):
    """The server sent more bytes than the size announced for the file (a broken mirror
    or proxy, or an endless body). Raised by :func:`download_to` before the first byte
    past ``expected_size`` is written or reported, so the file never grows beyond it.

    Attributes:
        expected_size: the size announced (bytes).
        received: bytes of the file the server had sent when the transfer stopped
            (resumed bytes included); always more than ``expected_size``.
    """

    def __init__(self, expected_size: int, received: int) -> None:
        super().__init__(f"the server sent more than the {expected_size} bytes announced"
                         f" (at least {received})")
        self.expected_size = expected_size
        self.received = received


@contextlib.contextmanager
def open_stream(method: Literal["GET", "HEAD"], url: str, headers: dict[str, str], *,
                transfer: bool = False) -> Iterator[Any]:
    """A streamed ``httpx`` response from the hub's HTTP client, redirects followed. The
    caller checks the status (``huggingface_hub.hf_raise_for_status``) and reads
    ``iter_bytes``.

    Retries with backoff follow huggingface_hub's defaults (timeouts, network errors,
    408/429/5xx), or with ``transfer`` its download rules (only 408 and 429: a long
    transfer resumes from where it stopped instead, see :func:`download_to`).

    Raises:
        httpx2.HTTPError: the request could not be made.
    """
    from huggingface_hub import constants
    from huggingface_hub.utils import http_stream_backoff  # type: ignore[attr-defined]

    retry: dict[str, Any] = (
        {"retry_on_exceptions": (), "retry_on_status_codes": (408, 429)} if transfer else {})
    with http_stream_backoff(method, url, headers=headers, follow_redirects=True,
                             timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT, **retry) as response:
        yield response


def download_to(
    url: str,
    fh: BinaryIO,
    *,
    resume_size: int,
    headers: dict[str, str],
    expected_size: int,
    on_bytes: Callable[[int], None],
    chunk_bytes: int = CHUNK_BYTES,
    resume: bool = True,
) -> None:
    """Append the rest of ``url`` to ``fh``, which holds its first ``resume_size`` bytes.

    ``on_bytes(n)`` is called before each chunk of ``n`` bytes is written (so raising
    from it stops the transfer with everything reported on disk), and with a negative
    ``n`` when a server that ignores the Range header makes the download start over.

    With ``resume=False`` a connection dropped after data arrived is not retried from where
    it stopped (the error is raised): for a file whose resumed bytes nothing could check
    afterwards.

    A chunk that would take the file past ``expected_size`` is neither reported nor
    written: the transfer stops there (:class:`BodyTooLongError`), so a server that sends
    an endless body costs at most one chunk of memory and no disk.

    Raises:
        huggingface_hub.errors.HfHubHTTPError: the server refused (416 for a range past
            the end, 404, 5xx…).
        httpx2.HTTPError: the connection failed and :data:`RETRIES` retries did not help.
        BodyTooLongError: the server sent more than ``expected_size`` bytes; the file
            holds at most ``expected_size`` bytes, the last ones possibly not the file's.
        OSError: writing failed, or (without an errno) the server sent fewer bytes than
            ``expected_size``.
    """
    import httpx2
    from huggingface_hub import hf_raise_for_status

    have = resume_size
    retries = RETRIES
    while have < expected_size:
        h = dict(headers)
        if have:
            h["Range"] = f"bytes={have}-"
        try:
            with open_stream("GET", url, h, transfer=True) as response:
                hf_raise_for_status(response)
                if have and response.status_code == 200:
                    # The server ignored the range: drop what we had and take it all.
                    fh.seek(fh.tell() - have)
                    fh.truncate()
                    on_bytes(-have)
                    have = 0
                for chunk in response.iter_bytes(chunk_bytes):
                    if have + len(chunk) > expected_size:
                        raise BodyTooLongError(expected_size, have + len(chunk))
                    if chunk:
                        on_bytes(len(chunk))
                        fh.write(chunk)
                        have += len(chunk)
                        retries = RETRIES
            break
        except (httpx2.ConnectError, httpx2.TimeoutException, httpx2.RemoteProtocolError) as exc:
            if retries <= 0 or (have and not resume):
                raise
            retries -= 1
            log.warning("download of %s interrupted (%s); resuming at byte %d", url, exc, have)
            time.sleep(RETRY_WAIT_S)
    if have != expected_size:
        raise OSError(f"the server sent {have} bytes of {expected_size}")
