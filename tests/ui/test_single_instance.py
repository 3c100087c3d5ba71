"""A second start hands its file to the running window instead of opening another window
on the same history and settings (app/ui/single_instance.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from app.ui.single_instance import InstanceServer, hand_over

REPO = Path(__file__).resolve().parents[2]
SECOND_START = ("import sys; from pathlib import Path; "
                "from PySide6.QtCore import QCoreApplication; app = QCoreApplication([]); "
                "from app.ui.single_instance import hand_over; "
                "sys.exit(0 if hand_over(Path(sys.argv[1]) if sys.argv[1] else None) else 3)")


def _second_start(arg: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", SECOND_START, arg], cwd=REPO)


def test_a_second_start_hands_its_file_to_the_running_window(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    assert not hand_over(tmp_path / "a.gguf")  # nothing runs yet: this start opens a window
    assert time.monotonic() - t0 < 3
    opened: list[Path | None] = []
    server = InstanceServer(opened.append)
    try:
        second = _second_start(str(tmp_path / "model.gguf"))
        qtbot.waitUntil(lambda: len(opened) == 1, timeout=20_000)
        assert second.wait(20) == 0  # it was taken: the second start exits
        assert opened == [tmp_path / "model.gguf"]
        third = _second_start("")  # no file: the window only comes forward
        qtbot.waitUntil(lambda: len(opened) == 2, timeout=20_000)
        assert third.wait(20) == 0 and opened[1] is None
    finally:
        server.server.close()
    assert not hand_over(None)  # closed: the next start is the running one again
