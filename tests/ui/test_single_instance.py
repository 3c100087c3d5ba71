"""A second start hands its file to the running window instead of opening another window
on the same history and settings (app/ui/single_instance.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from app.ui.single_instance import InstanceServer, hand_over, take_lock

REPO = Path(__file__).resolve().parents[2]
SECOND_START = ("import sys; from pathlib import Path; "
                "from app.ui.single_instance import hand_over, take_lock; "
                "assert take_lock() is None, 'the lock was free'; "
                "sys.exit(0 if hand_over(Path(sys.argv[1]) if sys.argv[1] else None) else 3)")


def _second_start(arg: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", SECOND_START, arg], cwd=REPO)


def test_a_second_start_hands_its_file_to_the_running_window(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lock = take_lock()
    assert lock is not None  # the first start runs
    opened: list[Path | None] = []
    # a start while the first is still building its window waits for it to listen
    early = _second_start(str(tmp_path / "early.gguf"))
    time.sleep(1.0)
    server = InstanceServer()
    server.open_requested.connect(opened.append)
    try:
        qtbot.waitUntil(lambda: len(opened) == 1, timeout=20_000)
        assert early.wait(20) == 0 and opened == [tmp_path / "early.gguf"]
        second = _second_start("")  # no file: the window only comes forward
        qtbot.waitUntil(lambda: len(opened) == 2, timeout=20_000)
        assert second.wait(20) == 0 and opened[1] is None
    finally:
        server.close()
    t0 = time.monotonic()
    assert not hand_over(None, wait_s=1.0)  # nobody listens: the caller says so
    assert time.monotonic() - t0 < 5
    lock.unlock()
    assert take_lock() is not None  # released: the next start runs


def test_a_lock_left_by_a_crash_is_taken_over(tmp_path: Path) -> None:
    crash = ("import os, signal; from app.ui.single_instance import take_lock; "
             "lock = take_lock(); assert lock is not None; os.kill(os.getpid(), signal.SIGKILL)")
    subprocess.run([sys.executable, "-c", crash], cwd=REPO, check=False)
    lock = take_lock()
    assert lock is not None
    lock.unlock()
