"""Downloads and the remote pairing check, with the real huggingface_hub client against a
local imitation of the hub (tests/catalog/fake_hub.py) reached through HF_ENDPOINT."""

from __future__ import annotations

import json
import random
import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from app.catalog.curated import find_pair
from app.catalog.gguf_meta import inspect_gguf
from app.catalog.hub import (
    PARTIAL_DIR,
    Download,
    DownloadProgress,
    DownloadStopped,
    RemoteFile,
    check_curated_pair,
    check_remote_pair,
    curated_downloads,
    pending_downloads,
    resolve_endpoint,
)
from app.catalog.library import Library, LibraryConfig, save_library_config
from app.errors import (
    DownloadError,
    HubAccessError,
    HubError,
    HubFileNotFoundError,
    HubGatedRepoError,
    HubOfflineError,
    HubRateLimitError,
    HubRepoNotFoundError,
    HubServerError,
    HubUnreachableError,
)
from app.store import paths
from tests.catalog.fake_hub import FakeHub
from tests.catalog.ggufs import token_list, write_small_model, write_vocab_gguf

REPO = "acme/tiny-GGUF"
FILE = "tiny-Q8_0.gguf"
KEY = f"{REPO}/{FILE}"
SIZE = 5_000_000


@pytest.fixture
def payload() -> bytes:
    return random.Random(0).randbytes(SIZE)


def _final(repo: str = REPO, file: str = FILE) -> Path:
    return paths.models_dir() / repo / file


def _partials(repo: str = REPO) -> list[Path]:
    d = paths.models_dir() / repo / PARTIAL_DIR
    return sorted(p for p in d.glob("*") if p.suffix != ".lock") if d.is_dir() else []


def _library_paths() -> list[Path]:
    return [e.path for e in Library(LibraryConfig(scan_hf_cache=False, scan_lmstudio=False)).scan()]


def test_complete_download(hub: FakeHub, payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    events: list[DownloadProgress] = []
    path = Download(REPO, FILE).run(events.append)
    assert path == _final()
    assert path.read_bytes() == payload
    assert hub.sent[KEY] == SIZE
    phases = [e.phase for e in events]
    assert phases[0] == "checking" and phases[-1] == "done"
    assert phases.index("downloading") < phases.index("verifying") < phases.index("done")
    counts = [e.downloaded for e in events if e.phase == "downloading"]
    assert counts == sorted(counts) and counts[-1] == SIZE
    assert events[-1].total == SIZE and events[-1].fraction == 1.0
    assert _partials() == []
    assert _library_paths() == [path]
    # a second run finds the file complete and transfers nothing
    before = len(hub.ranges(KEY))
    assert Download(REPO, FILE).run() == path
    assert len(hub.ranges(KEY)) == before


def test_dropped_connection_resumes_to_identical_file(hub: FakeHub, payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    hub.drop_after[KEY] = 2_500_000
    path = Download(REPO, FILE).run()
    assert path.read_bytes() == payload
    first, second = hub.ranges(KEY)
    assert first is None
    assert second is not None and second.startswith("bytes=")
    resumed_at = int(second.removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at <= 2_500_000
    assert hub.sent[KEY] == 2_500_000 + SIZE - resumed_at  # nothing fetched twice but the lost tail


def test_pause_then_resume_after_restart(hub: FakeHub, payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    hub.rate = 10e6
    job = Download(REPO, FILE)

    def pause_midway(p: DownloadProgress) -> None:
        if p.downloaded >= 2 << 20:
            job.pause()

    with pytest.raises(DownloadStopped) as stopped:
        job.run(pause_midway)
    assert stopped.value.paused
    assert not _final().exists()
    partial = next(p for p in _partials() if p.suffix == ".incomplete")
    have = partial.stat().st_size
    assert 0 < have < SIZE
    assert [(d.repo_id, d.filename, d.downloaded, d.size) for d in pending_downloads()] == [(REPO, FILE, have, SIZE)]

    # a new process: a fresh job object picks up the partial file
    path = Download(REPO, FILE).run()
    assert path.read_bytes() == payload
    assert hub.ranges(KEY)[-1] == f"bytes={have}-"
    assert pending_downloads() == []


def test_progress_reports_speed_and_eta(hub: FakeHub, payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    hub.rate = 10e6
    events: list[DownloadProgress] = []
    Download(REPO, FILE).run(events.append)
    moving = [e for e in events if e.phase == "downloading" and e.speed > 0]
    assert len(moving) >= 3
    assert all(2e6 < e.speed < 30e6 for e in moving)  # the server sends 10 MB/s
    for e in moving:
        assert e.eta is not None and e.eta == pytest.approx((SIZE - e.downloaded) / e.speed)


def test_paused_job_resumes_on_the_same_object_even_without_range_support(hub: FakeHub, payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    hub.rate = 10e6
    job = Download(REPO, FILE)
    with pytest.raises(DownloadStopped):
        job.run(lambda p: job.pause() if p.downloaded >= 2 << 20 else None)
    have = next(p for p in _partials() if p.suffix == ".incomplete").stat().st_size
    assert have > 0
    hub.rate = None
    hub.ignore_range = True  # the resume request gets the whole file: start over cleanly
    assert job.run().read_bytes() == payload
    assert hub.ranges(KEY)[-1] == f"bytes={have}-"


def test_cancel_of_a_paused_download_deletes_its_partial_file(hub: FakeHub, payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    hub.rate = 10e6
    job = Download(REPO, FILE)
    with pytest.raises(DownloadStopped):
        job.run(lambda p: job.pause() if p.downloaded >= 1 << 20 else None)
    assert _partials()
    Download(REPO, FILE).cancel()  # e.g. after a restart, from the downloads panel
    assert _partials() == [] and pending_downloads() == []


def test_cancel_deletes_the_partial_file(hub: FakeHub, payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    hub.rate = 10e6
    job = Download(REPO, FILE)
    with pytest.raises(DownloadStopped) as stopped:
        job.run(lambda p: job.cancel() if p.downloaded >= 1 << 20 else None)
    assert not stopped.value.paused
    assert _partials() == [] and not _final().exists()


def test_missing_file_and_repo(hub: FakeHub, payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    with pytest.raises(DownloadError, match=f"nope.gguf was not found in {REPO}") as missing_file:
        Download(REPO, "nope.gguf").run()
    assert isinstance(missing_file.value, HubFileNotFoundError)
    with pytest.raises(DownloadError, match="Repository acme/missing-GGUF was not found on http://127.0.0.1") as missing_repo:
        Download("acme/missing-GGUF", FILE).run()
    assert isinstance(missing_repo.value, HubRepoNotFoundError)


@pytest.mark.parametrize("status", [401, 403])
def test_gated_repo_names_the_repo_and_the_licence_page(hub: FakeHub, payload: bytes, status: int) -> None:
    hub.add("acme/gated-GGUF", FILE, payload)
    hub.gated["acme/gated-GGUF"] = status
    with pytest.raises(DownloadError) as err:
        Download("acme/gated-GGUF", FILE).run()
    assert isinstance(err.value, HubGatedRepoError) and err.value.status == status
    msg = str(err.value)
    assert "acme/gated-GGUF is a gated repository" in msg
    assert "accept its licence on https://huggingface.co/acme/gated-GGUF" in msg.replace("Accept", "accept")
    assert "hf auth login" in msg
    assert hub.ranges("acme/gated-GGUF/" + FILE) == []


def test_wrong_size_is_never_marked_complete(hub: FakeHub, payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    hub.size_claims[KEY] = SIZE + 100  # the hub promises more than arrives
    with pytest.raises(DownloadError, match="stopped at"):
        Download(REPO, FILE).run()
    assert not _final().exists() and _library_paths() == []
    # resuming asks for bytes past the real end: the partial file is dropped, still nothing complete
    with pytest.raises(DownloadError, match="does not match the file on the hub"):
        Download(REPO, FILE).run()
    assert not _final().exists() and _library_paths() == []
    assert [p for p in _partials() if p.suffix == ".incomplete" and p.stat().st_size] == []

    hub.size_claims[KEY] = SIZE - 100  # more arrives than promised
    with pytest.raises(DownloadError, match="larger than the hub says"):
        Download(REPO, FILE).run()
    assert not _final().exists() and _library_paths() == []


def test_corrupt_bytes_fail_the_sha256_check(hub: FakeHub, payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    hub.corrupt[KEY] = payload[:1000] + bytes([payload[1000] ^ 0xFF]) + payload[1001:]
    with pytest.raises(DownloadError, match="sha256 does not match"):
        Download(REPO, FILE).run()
    assert not _final().exists() and _partials() == [] and _library_paths() == []


def test_free_space_is_checked_before_starting(hub: FakeHub, payload: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add(REPO, FILE, payload)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10**9, 10**9 - 1_000_000, 1_000_000))
    with pytest.raises(DownloadError, match=r"Not enough free disk space .* needs 5.00 MB more but only 1.00 MB is free"):
        Download(REPO, FILE).run()
    assert hub.ranges(KEY) == [] and not _final().exists()


def test_split_gguf_downloads_every_part(hub: FakeHub, tmp_path: Path) -> None:
    parts = write_small_model(tmp_path / "model.gguf", split_max_tensors=3)
    for p in parts:
        hub.add("acme/split-GGUF", p.name, p)
    job = Download("acme/split-GGUF", parts[0].name)
    assert [f.filename for f in job.files] == [p.name for p in parts]
    path = job.run()
    for p in parts:
        assert _final("acme/split-GGUF", p.name).read_bytes() == p.read_bytes()
    info = inspect_gguf(path)
    assert info.split_count == 3 and info.file_size == sum(p.stat().st_size for p in parts)
    assert _library_paths() == [path]


def test_split_download_paused_in_a_later_part_resumes_with_exact_counts(hub: FakeHub, tmp_path: Path) -> None:
    parts = [tmp_path / f"big-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    rng = random.Random(1)
    for p in parts:
        p.write_bytes(rng.randbytes(3_000_000))
        hub.add("acme/big-GGUF", p.name, p)
    hub.rate = 10e6
    job = Download("acme/big-GGUF", parts[0].name)
    with pytest.raises(DownloadStopped):
        job.run(lambda p: job.pause() if p.file_index == 1 and p.downloaded >= 3_000_000 + (2 << 20) else None)
    hub.rate = None
    events: list[DownloadProgress] = []
    Download("acme/big-GGUF", parts[0].name).run(events.append)
    have = next(e for e in events if e.phase == "downloading").downloaded
    assert 3_000_000 + (1 << 20) <= have < 6_000_000  # part 1 and the kept part of part 2
    assert events[-1].downloaded == events[-1].total == 9_000_000
    assert [e.downloaded for e in events] == sorted(e.downloaded for e in events)
    for p in parts:
        assert _final("acme/big-GGUF", p.name).read_bytes() == p.read_bytes()


def test_the_same_file_is_not_downloaded_twice_at_once(hub: FakeHub, payload: bytes) -> None:
    import threading

    hub.add(REPO, FILE, payload)
    hub.rate = 5e6
    first = Download(REPO, FILE)
    started = threading.Event()
    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(first.run(lambda p: started.set() if p.downloaded else None)))
    t.start()
    assert started.wait(10)
    with pytest.raises(DownloadError, match="is already being downloaded"):
        Download(REPO, FILE).run()
    t.join(20)
    assert result == [_final()] and _final().read_bytes() == payload


def test_remote_pair_check_reads_under_5_percent(hub: FakeHub, gemma_path: Path, smollm_path: Path) -> None:
    hub.add("google/gemma-target-GGUF", "gemma.gguf", gemma_path)
    hub.add("google/gemma-draft-GGUF", "gemma.gguf", gemma_path)
    hub.add("hf/smol-GGUF", "smol.gguf", smollm_path)
    same = check_remote_pair(RemoteFile("google/gemma-target-GGUF", "gemma.gguf"),
                             RemoteFile("google/gemma-draft-GGUF", "gemma.gguf"))
    assert same.result.compatible
    other = check_remote_pair(RemoteFile("google/gemma-target-GGUF", "gemma.gguf"), RemoteFile("hf/smol-GGUF", "smol.gguf"))
    assert not other.result.compatible
    assert other.result.first_failure is not None and other.result.first_failure.rule == "vocab_type"
    gemma_size, smol_size = gemma_path.stat().st_size, smollm_path.stat().st_size
    # counted by the server: two header reads of the target, one of each draft
    assert hub.sent["google/gemma-target-GGUF/gemma.gguf"] / 2 < 0.05 * gemma_size
    assert hub.sent["google/gemma-draft-GGUF/gemma.gguf"] < 0.05 * gemma_size
    assert hub.sent["hf/smol-GGUF/smol.gguf"] < 0.05 * smol_size
    assert other.draft.bytes_fetched == hub.sent["hf/smol-GGUF/smol.gguf"]
    local = inspect_gguf(gemma_path)
    remote = other.target.vocab.info
    assert (remote.n_vocab, remote.bos_id, remote.eos_id, remote.add_bos, remote.file_size, remote.parameter_count) == (
        local.n_vocab, local.bos_id, local.eos_id, local.add_bos, local.file_size, local.parameter_count)
    assert all(r.range is None or r.range.startswith("bytes=") for r in hub.requests if r.method == "GET")


def test_remote_check_refuses_a_server_without_range_support(hub: FakeHub, smollm_path: Path) -> None:
    hub.add("hf/smol-GGUF", "smol.gguf", smollm_path)
    hub.ignore_range = True
    with pytest.raises(DownloadError, match="ignores HTTP range requests"):
        check_remote_pair(RemoteFile("hf/smol-GGUF", "smol.gguf"), RemoteFile("hf/smol-GGUF", "smol.gguf"))
    # it stopped after the first request instead of reading through the whole file
    assert len(hub.ranges("hf/smol-GGUF/smol.gguf")) == 2


def test_endpoint_setting_and_unreachable_hub(hub: FakeHub, payload: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add(REPO, FILE, payload)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(DownloadError, match="Cannot reach http://127.0.0.1:9") as unreachable:
        Download(REPO, FILE).run()
    assert isinstance(unreachable.value, HubUnreachableError)
    assert Download(REPO, FILE, endpoint=hub.endpoint).run().read_bytes() == payload
    monkeypatch.delenv("HF_ENDPOINT")
    save_library_config(LibraryConfig(hf_endpoint=hub.endpoint + "/"))
    assert resolve_endpoint() == hub.endpoint


def test_server_errors_are_retried(hub: FakeHub, payload: bytes) -> None:
    hub.add(REPO, FILE, payload)
    hub.fail_first[KEY] = [503]
    assert Download(REPO, FILE).run().read_bytes() == payload


def test_mirror_that_serves_files_directly(hub: FakeHub, payload: bytes) -> None:
    hub.redirect = False
    hub.add(REPO, FILE, payload)
    assert Download(REPO, FILE).run().read_bytes() == payload


def test_curated_pair_is_checked_then_downloaded(hub: FakeHub, tmp_path: Path) -> None:
    pair = find_pair("qwen2.5-coder-7b-instruct")
    target_file, draft_file = pair.target.file_for(), pair.draft.file_for()
    big = token_list(152064)
    kw = dict(model="gpt2", pre="qwen2", bos=151643, eos=151645, add_bos=False)
    hub.add(pair.target.repo, target_file.file, write_vocab_gguf(tmp_path / "t.gguf", big, **kw))  # type: ignore[arg-type]
    hub.add(pair.draft.repo, draft_file.file, write_vocab_gguf(tmp_path / "d.gguf", big[:151936], **kw))  # type: ignore[arg-type]
    check = check_curated_pair(pair)
    assert check.result.compatible, check.result.reason()
    target_job, draft_job = curated_downloads(pair)
    assert target_job.run().name == target_file.file
    assert draft_job.run().name == draft_file.file
    assert sorted(p.name for p in _library_paths_of([pair.target.repo, pair.draft.repo])) == sorted(
        [target_file.file, draft_file.file])


def _library_paths_of(repos: list[str]) -> list[Path]:
    return [p for p in _library_paths() if any(str(paths.models_dir() / r) in str(p) for r in repos)]


def test_bad_names_are_refused_before_any_request(hub: FakeHub) -> None:
    with pytest.raises(DownloadError, match="not a repository id"):
        Download("no-slash", FILE)
    with pytest.raises(DownloadError, match="not a file name"):
        Download(REPO, "../../etc/passwd")
    assert hub.requests == []


@pytest.mark.parametrize(("text", "repo", "file", "rev"), [
    ("bartowski/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q8_0.gguf",
     "bartowski/SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct-Q8_0.gguf", "main"),
    ("  hf:acme/x-GGUF/sub/dir/m.gguf ", "acme/x-GGUF", "sub/dir/m.gguf", "main"),
    ("acme/x-GGUF m-Q4_K_M.gguf", "acme/x-GGUF", "m-Q4_K_M.gguf", "main"),
    ("acme/x-GGUF:m.gguf", "acme/x-GGUF", "m.gguf", "main"),
    ("https://huggingface.co/acme/x-GGUF/blob/main/m.gguf", "acme/x-GGUF", "m.gguf", "main"),
    ("https://hf-mirror.example/acme/x-GGUF/resolve/abc123/m.gguf?download=true",
     "acme/x-GGUF", "m.gguf", "abc123"),
])
def test_pasted_hub_references_are_parsed(text: str, repo: str, file: str, rev: str) -> None:
    from app.catalog.hub import parse_hub_file

    f = parse_hub_file(text)
    assert (f.repo_id, f.filename, f.revision) == (repo, file, rev)


@pytest.mark.parametrize(("text", "match"), [
    ("", "does not name a repository"),
    ("acme/x-GGUF", "does not name a repository"),
    ("acme/x-GGUF/README.md", "not a GGUF file"),
    ("https://huggingface.co/acme/x-GGUF", "not a link to a file"),
    ("../x/m.gguf", "not a repository id"),
])
def test_bad_pasted_references_are_clear_errors(text: str, match: str) -> None:
    from app.catalog.hub import parse_hub_file

    with pytest.raises(DownloadError, match=match):
        parse_hub_file(text)


def test_an_unreachable_endpoint_says_where_the_setting_is(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.catalog.hub import ENDPOINT_SETTING_HINT, remote_file_info

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on port 9
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    with pytest.raises(DownloadError) as err:
        remote_file_info(RemoteFile("acme/x-GGUF", "m.gguf"))
    assert "Models → Catalog" in str(err.value) and ENDPOINT_SETTING_HINT in str(err.value)


@pytest.mark.parametrize("kind", ["git", "pointer", "opaque"])
def test_resumed_bytes_without_a_sha256_are_checked_or_never_used(hub: FakeHub, payload: bytes, kind: str) -> None:
    """No sha256 (a file kept in git, a mirror without LFS headers, an opaque ETag) and a
    resumed range that returns wrong bytes of the right length: a check by size alone
    would let the file into the library."""
    hub.add(REPO, FILE, payload)
    hub.etag_kind[KEY] = kind
    hub.drop_after[KEY] = 2_500_000
    hub.corrupt_resumed[KEY] = bytes(b ^ 0x5A for b in payload)
    with pytest.raises(DownloadError) as err:
        Download(REPO, FILE).run()
    if kind == "opaque":  # nothing to check a resume against: no resume, the partial is dropped
        assert "no checksum" in str(err.value) and [r for r in hub.ranges(KEY) if r] == []
    else:  # resumed, then the git object id (of the content, or of its LFS pointer) caught it
        assert "git hash does not match" in str(err.value)
    assert not _final().exists() and _library_paths() == [] and _partials() == []
    path = Download(REPO, FILE).run()  # the next try, without faults: from the start
    assert path.read_bytes() == payload
    expected = "size" if kind == "opaque" else "git hash"
    assert json.loads((path.parent / ".tandem-downloads.json").read_text())[FILE]["verified"] == expected


def test_no_lock_files_are_left_behind(hub: FakeHub, tmp_path: Path) -> None:
    parts = write_small_model(tmp_path / "model.gguf", split_max_tensors=3)
    for p in parts:
        hub.add("acme/split-GGUF", p.name, p)
    Download("acme/split-GGUF", parts[0].name).run()
    repo_dir = paths.models_dir() / "acme/split-GGUF"
    assert not (repo_dir / PARTIAL_DIR).exists() and not list(repo_dir.rglob("*.lock"))


def test_split_parts_are_ordered_whatever_order_they_are_named_in(tmp_path: Path) -> None:
    names = ["m-00002-of-00003.gguf", "m-00001-of-00003.gguf"]
    job = Download("acme/split-GGUF", names, models_dir=tmp_path, endpoint="http://127.0.0.1:9")
    assert [f.filename for f in job.files] == ["m-00001-of-00003.gguf", "m-00002-of-00003.gguf",
                                               "m-00003-of-00003.gguf"]
    assert job.model_path.name == "m-00001-of-00003.gguf"
    job = Download("acme/split-GGUF", "sub/m-00003-of-00003.gguf", models_dir=tmp_path, endpoint="http://127.0.0.1:9")
    assert job.model_path == tmp_path / "acme/split-GGUF/sub/m-00001-of-00003.gguf"


def test_hub_messages_are_in_the_apps_words(hub: FakeHub, payload: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add(REPO, FILE, payload)
    hub.size_claims[KEY] = SIZE + 100  # huggingface_hub's own "Consistency check failed"
    with pytest.raises(DownloadError) as err:
        Download(REPO, FILE).run()
    assert "force_download" not in str(err.value) and "connection was lost" in str(err.value)
    with pytest.raises(DownloadError) as err:
        Download(REPO, FILE, endpoint="http://127.0.0.1:9").run()
    assert str(err.value).startswith("Cannot reach http://127.0.0.1:9 (connection refused). Check")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DownloadError) as err:
        Download(REPO, FILE).run()
    assert str(err.value) == ("Downloads are switched off: the HF_HUB_OFFLINE environment variable is set."
                              " Unset it to download models.")
    assert isinstance(err.value, HubOfflineError)


@pytest.mark.parametrize(("status", "kind"), [
    (404, HubFileNotFoundError), (401, HubAccessError), (403, HubAccessError),
    (429, HubRateLimitError), (503, HubServerError), (418, HubError),
])
def test_hub_http_statuses_are_typed_errors_with_their_status(status: int, kind: type) -> None:
    """Callers catch the class, not the message: each status the hub answers with maps
    onto one Tandem error class, which keeps the status."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    from app.catalog.hub import _hub_error

    response = httpx2.Response(status, request=httpx2.Request("GET", "http://127.0.0.1/x"))
    err = _hub_error(HfHubHTTPError("refused", response=response), RemoteFile(REPO, FILE),
                     "http://127.0.0.1")
    assert type(err) is kind and isinstance(err, HubError) and err.status == status
    assert f"HTTP {status}" in str(err)


def test_a_remote_mtp_assistant_is_checked_by_the_assistant_rules(hub: FakeHub, tmp_path: Path) -> None:
    """A curated Gemma 4 entry's assistant is checked on the hub as an assistant (its
    architecture drafts for the target's, its input width is the target's hidden size),
    not as a draft model."""
    from tests.synthetic import write_tiny_gemma4, write_tiny_gemma4_assistant

    target = write_tiny_gemma4(tmp_path / "gemma4.gguf")
    assistant = write_tiny_gemma4_assistant(tmp_path / "assistant.gguf")
    narrow = write_tiny_gemma4_assistant(tmp_path / "narrow.gguf", n_embd_target=32)
    hub.add("g/gemma-4-GGUF", "gemma4.gguf", target)
    hub.add("g/gemma-4-GGUF", "mtp.gguf", assistant)
    hub.add("g/gemma-4-GGUF", "narrow.gguf", narrow)
    ok = check_remote_pair(RemoteFile("g/gemma-4-GGUF", "gemma4.gguf"), RemoteFile("g/gemma-4-GGUF", "mtp.gguf"))
    assert ok.result.compatible
    assert {"assistant_arch", "hidden_size"} <= {c.rule for c in ok.result.checks}
    bad = check_remote_pair(RemoteFile("g/gemma-4-GGUF", "gemma4.gguf"), RemoteFile("g/gemma-4-GGUF", "narrow.gguf"))
    assert not bad.result.compatible
    assert bad.result.first_failure is not None and bad.result.first_failure.rule == "hidden_size"
