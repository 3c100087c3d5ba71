"""A server that sends more than the size it announced (a broken mirror or proxy, or an
endless body) is stopped at that size: the disk never fills, nothing is marked complete,
and the partial file is discarded so that a retry starts clean. Against the local
imitation of the hub (tests/catalog/fake_hub.py) with its ``endless_body`` fault."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from app.catalog import hf_transport
from app.catalog.hub import (
    PARTIAL_DIR,
    Download,
    DownloadProgress,
    DownloadStopped,
    pending_downloads,
)
from app.errors import DownloadError
from tests.catalog.fake_hub import FakeHub

REPO = "acme/endless-GGUF"
FILE = "endless-Q8_0.gguf"
KEY = f"{REPO}/{FILE}"
SIZE = 1 << 20  # the size the hub announces (X-Linked-Size; the HEAD agrees)


@pytest.fixture
def payload() -> bytes:
    return b"GGUF" + random.Random(3).randbytes(SIZE - 4)


def _leftovers(models: Path) -> list[Path]:
    d = models / REPO / PARTIAL_DIR
    return sorted(d.iterdir()) if d.is_dir() else []


def test_download_to_stops_before_writing_past_the_expected_size(hub: FakeHub,
                                                                  payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    hub.endless_body.add(KEY)
    fh = io.BytesIO()
    reported: list[int] = []
    with pytest.raises(hf_transport.BodyTooLongError) as caught:
        hf_transport.download_to(hub.cdn_url(KEY), fh, resume_size=0, headers={},
                                 expected_size=SIZE, on_bytes=reported.append)
    assert caught.value.expected_size == SIZE and caught.value.received > SIZE
    assert caught.value.errno is None  # not a disk error
    assert fh.getvalue() == payload  # every byte up to the size, none after it
    assert sum(reported) == SIZE


def test_a_resumed_request_that_overruns_is_stopped_too(hub: FakeHub, payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    hub.endless_body.add(KEY)
    have = SIZE - 1000
    fh = io.BytesIO(payload[:have])
    fh.seek(0, io.SEEK_END)
    with pytest.raises(hf_transport.BodyTooLongError):
        hf_transport.download_to(hub.cdn_url(KEY), fh, resume_size=have, headers={},
                                 expected_size=SIZE, on_bytes=lambda n: None)
    assert len(fh.getvalue()) <= SIZE
    assert hub.ranges(KEY) == [f"bytes={have}-"]


def test_an_endless_body_is_stopped_and_nothing_is_kept(hub: FakeHub, payload: bytes,
                                                        tmp_path: Path) -> None:
    hub.add(REPO, FILE, payload)
    hub.endless_body.add(KEY)
    events: list[DownloadProgress] = []
    with pytest.raises(DownloadError) as caught:
        Download(REPO, FILE, models_dir=tmp_path).run(events.append)
    msg = str(caught.value)
    assert "larger than the hub says" in msg and f"sent more than the {SIZE} bytes" in msg
    assert "the download was stopped and the partial file discarded" in msg
    assert not (tmp_path / REPO / FILE).exists()
    assert [p.name for p in _leftovers(tmp_path)] == []  # no partial file, note or lock
    assert pending_downloads(tmp_path) == []  # nothing offered to resume
    assert not (tmp_path / REPO / ".tandem-downloads.json").exists()  # nothing complete
    assert events and all(e.downloaded <= SIZE and e.total in (None, SIZE) for e in events)
    # the server fixed, a retry starts clean from byte 0 and completes
    hub.endless_body.clear()
    path = Download(REPO, FILE, models_dir=tmp_path).run()
    assert path.read_bytes() == payload
    assert hub.ranges(KEY)[-1] is None


def test_an_overrun_after_a_kept_partial_discards_it(hub: FakeHub, payload: bytes,
                                                     tmp_path: Path) -> None:
    hub.add(REPO, FILE, payload)
    hub.rate = 4e6
    first = Download(REPO, FILE, models_dir=tmp_path)
    with pytest.raises(DownloadStopped):
        first.run(lambda p: first.pause() if p.downloaded >= SIZE // 2 else None)
    assert pending_downloads(tmp_path)[0].downloaded >= SIZE // 2
    hub.rate = None
    hub.endless_body.add(KEY)  # the resumed request never ends
    with pytest.raises(DownloadError, match="larger than the hub says"):
        Download(REPO, FILE, models_dir=tmp_path).run()
    assert hub.ranges(KEY)[-1] is not None  # it was a resumed request
    assert _leftovers(tmp_path) == [] and pending_downloads(tmp_path) == []
    assert not (tmp_path / REPO / FILE).exists()
