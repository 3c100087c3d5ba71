"""A partial download that another process is writing (its lock held) is never deleted
or offered as paused from here: discard_partial, cancel and a second run leave it
alone, and the other process completes its download. A lock file that nobody holds (left
by a process that was killed) does not block anything."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock

from app.catalog.hub import PARTIAL_DIR, Download, pending_downloads
from app.errors import DownloadError
from tests.catalog.fake_hub import FakeHub

REPO = "acme/shared-GGUF"
FILE = "shared-Q8_0.gguf"
KEY = f"{REPO}/{FILE}"
SIZE = 3_000_000
ROOT = Path(__file__).resolve().parents[2]

#: The other process: a plain Download of the same file into the same models folder.
OTHER_PROCESS = textwrap.dedent("""
    import sys
    from pathlib import Path
    from app.catalog.hub import Download
    path = Download(sys.argv[1], sys.argv[2], models_dir=Path(sys.argv[3])).run()
    print(path)
""")


@pytest.fixture
def payload() -> bytes:
    return random.Random(5).randbytes(SIZE)


def _partial(models: Path) -> Path:
    return models / REPO / PARTIAL_DIR / (FILE + ".incomplete")


def _companions(partial: Path) -> tuple[Path, Path, Path]:
    """The partial file, its note and its lock file."""
    return (partial, partial.with_name(partial.name + ".json"),
            partial.with_name(partial.name + ".lock"))


def _wait_for_bytes(partial: Path, proc: subprocess.Popen[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the other process ended early: {proc.communicate()}")
        if partial.is_file() and partial.stat().st_size > 0:
            return
        time.sleep(0.02)
    pytest.fail("the other process wrote nothing")


def test_a_download_in_another_process_is_left_alone(hub: FakeHub, payload: bytes,
                                                     tmp_path: Path) -> None:
    hub.add(REPO, FILE, payload)
    hub.hold = threading.Event()  # the other download stays running until released
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS, REPO, FILE, str(tmp_path)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        partial = _partial(tmp_path)
        _wait_for_bytes(partial, proc)
        [pending] = pending_downloads(tmp_path)
        assert pending.in_use and pending.filename == FILE
        ours = Download(REPO, FILE, models_dir=tmp_path)
        assert ours.discard_partial() == [FILE]  # the Remove of a failed job
        assert ours.cancel() == [FILE]  # the Cancel of a paused job
        with pytest.raises(DownloadError, match="already being downloaded"):
            Download(REPO, FILE, models_dir=tmp_path).run()
        assert all(p.exists() for p in _companions(partial))
        hub.hold.set()
        out, err = proc.communicate(timeout=60)
    finally:
        hub.hold.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert Path(out.strip()) == tmp_path / REPO / FILE
    assert (tmp_path / REPO / FILE).read_bytes() == payload
    assert pending_downloads(tmp_path) == []


def test_a_partial_locked_by_another_holder_is_not_deleted_until_released(tmp_path: Path) -> None:
    partial = _partial(tmp_path)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"x" * 1000)
    note = partial.with_name(partial.name + ".json")
    note.write_text(f'{{"repo_id": "{REPO}", "filename": "{FILE}", "etag": "e", "size": 5000}}')
    job = Download(REPO, FILE, models_dir=tmp_path, endpoint="http://127.0.0.1:9")
    holder = FileLock(str(partial.with_name(partial.name + ".lock")), timeout=0)
    with holder:  # a transfer elsewhere (another thread or process) holds it
        assert [p.in_use for p in pending_downloads(tmp_path)] == [True]
        assert job.discard_partial() == [FILE]
        assert partial.read_bytes() == b"x" * 1000 and note.exists()
    [pending] = pending_downloads(tmp_path)
    assert not pending.in_use and pending.downloaded == 1000
    assert job.discard_partial() == []
    assert list(partial.parent.iterdir()) == []  # partial file, note and lock file gone


def test_a_lock_file_left_by_a_killed_process_does_not_block(tmp_path: Path) -> None:
    partial, note, lock = _companions(_partial(tmp_path))
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"y" * 10)
    note.write_text(f'{{"repo_id": "{REPO}", "filename": "{FILE}", "etag": "e", "size": 50}}')
    lock.touch()  # nobody holds it: the OS released it with its process
    assert [p.in_use for p in pending_downloads(tmp_path)] == [False]
    assert Download(REPO, FILE, models_dir=tmp_path, endpoint="http://127.0.0.1:9").cancel() == []
    assert list(partial.parent.iterdir()) == []


def test_discarding_nothing_creates_nothing(tmp_path: Path) -> None:
    job = Download(REPO, FILE, models_dir=tmp_path, endpoint="http://127.0.0.1:9")
    assert job.discard_partial() == []
    assert not (tmp_path / REPO).exists()  # no .partial/ made just to take a lock


def test_a_stale_partial_is_judged_only_under_its_lock(hub: FakeHub, payload: bytes,
                                                       tmp_path: Path) -> None:
    """A partial whose note no longer matches the hub is deleted before a new download
    only by whoever holds its lock: held elsewhere, it survives the attempt; once
    released, the download starts over and leaves no lock file behind."""
    hub.add(REPO, FILE, payload)
    partial, note, lock = _companions(_partial(tmp_path))
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"z" * 1000)
    note.write_text(f'{{"repo_id": "{REPO}", "filename": "{FILE}", "etag": "old", "size": 5}}')
    with FileLock(str(lock), timeout=0):
        with pytest.raises(DownloadError, match="already being downloaded"):
            Download(REPO, FILE, models_dir=tmp_path).run()
        assert partial.read_bytes() == b"z" * 1000 and note.exists()
    assert Download(REPO, FILE, models_dir=tmp_path).run().read_bytes() == payload
    assert not partial.parent.exists()  # partial, note and lock file all gone
