"""Contract test of app/catalog/hf_transport.py, the one module that uses huggingface_hub
helpers outside its documented API: if an upgrade renames or changes them, this fails
here, by name, instead of somewhere in a download."""

from __future__ import annotations

import inspect
import io
import random
from collections.abc import Iterator

import pytest

from app.catalog import hf_transport
from tests.catalog.fake_hub import FakeHub

DATA = random.Random(1).randbytes(3 * hf_transport.CHUNK_BYTES + 123)
REPO, FILE = "acme/contract", "blob.bin"


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with FakeHub() as h:
        h.add(REPO, FILE, DATA)
        yield h


def _url(hub: FakeHub) -> str:
    return f"{hub.endpoint}/cdn/{REPO}/{FILE}"


def test_the_private_helpers_we_use_still_exist_with_the_arguments_we_pass() -> None:
    from huggingface_hub import constants
    from huggingface_hub.utils import http_stream_backoff  # type: ignore[attr-defined]

    params = inspect.signature(http_stream_backoff).parameters
    assert list(params)[:2] == ["method", "url"]
    for name in ("retry_on_exceptions", "retry_on_status_codes"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())  # headers…
    assert isinstance(constants.HF_HUB_DOWNLOAD_TIMEOUT, (int, float))


def test_open_stream_serves_a_range_with_redirects_followed(hub: FakeHub) -> None:
    from huggingface_hub import hf_raise_for_status

    url = f"{hub.endpoint}/{REPO}/resolve/main/{FILE}"  # answers 302 to the "CDN"
    with hf_transport.open_stream("GET", url, {"Range": "bytes=10-19"}) as response:
        hf_raise_for_status(response)
        assert response.status_code == 206
        assert b"".join(response.iter_bytes()) == DATA[10:20]


def test_open_stream_leaves_the_status_to_the_caller(hub: FakeHub) -> None:
    from huggingface_hub import hf_raise_for_status
    from huggingface_hub.errors import HfHubHTTPError

    with hf_transport.open_stream("GET", f"{hub.endpoint}/cdn/{REPO}/missing.bin", {}) as response:
        with pytest.raises(HfHubHTTPError):
            hf_raise_for_status(response)


def test_download_to_resumes_in_chunks_and_reports_before_writing(hub: FakeHub) -> None:
    have = 1000
    fh = io.BytesIO(DATA[:have])
    fh.seek(0, io.SEEK_END)
    reports: list[tuple[int, int]] = []  # (bytes reported, bytes written before the report)
    hf_transport.download_to(_url(hub), fh, resume_size=have, headers={},
                             expected_size=len(DATA),
                             on_bytes=lambda n: reports.append((n, fh.tell())))
    assert fh.getvalue() == DATA
    assert all(0 < n <= hf_transport.CHUNK_BYTES for n, _ in reports)  # our chunks, not 10 MB
    assert sum(n for n, _ in reports) == len(DATA) - have
    assert [at for _, at in reports] == [have + sum(n for n, _ in reports[:i])
                                         for i in range(len(reports))]  # reported, then written
    assert hub.ranges(f"{REPO}/{FILE}") == [f"bytes={have}-"]


def test_download_to_stops_when_the_callback_raises_and_keeps_what_was_written(hub: FakeHub) -> None:
    fh = io.BytesIO()

    def stop_after_two(n: int) -> None:
        if fh.tell() >= 2 * hf_transport.CHUNK_BYTES:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        hf_transport.download_to(_url(hub), fh, resume_size=0, headers={},
                                 expected_size=len(DATA), on_bytes=stop_after_two)
    assert fh.getvalue() == DATA[: 2 * hf_transport.CHUNK_BYTES]


def test_download_to_resumes_after_a_dropped_connection(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hf_transport, "RETRY_WAIT_S", 0.0)
    hub.drop_after[f"{REPO}/{FILE}"] = hf_transport.CHUNK_BYTES + 7
    fh = io.BytesIO()
    hf_transport.download_to(_url(hub), fh, resume_size=0, headers={},
                             expected_size=len(DATA), on_bytes=lambda n: None)
    assert fh.getvalue() == DATA
    ranges = hub.ranges(f"{REPO}/{FILE}")
    assert ranges[0] is None and ranges[1] is not None and ranges[1].startswith("bytes=")


def test_no_library_constant_is_changed(hub: FakeHub) -> None:
    from huggingface_hub import constants

    before = constants.DOWNLOAD_CHUNK_SIZE
    hf_transport.download_to(_url(hub), io.BytesIO(), resume_size=0, headers={},
                             expected_size=len(DATA), on_bytes=lambda n: None)
    assert constants.DOWNLOAD_CHUNK_SIZE == before
