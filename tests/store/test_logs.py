"""Log files: where they go, the header, levels, and an unwritable folder."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.store import logs, paths


@pytest.fixture(autouse=True)
def _clean_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for kind in logs.LOG_FILES:
        logs.stop_log(kind)
    root.handlers[:] = handlers
    root.setLevel(level)


def test_log_file_with_a_header_in_the_log_folder(tandem_home: Path) -> None:
    path = logs.start_log("cli", {"Backend": "CPU (test)", "llama.cpp": "commit abc"})
    assert path == paths.log_dir() / "tandem-cli.log" and path.parent == tandem_home / "logs"
    logging.getLogger("app.test").info("after the header")
    text = path.read_text()
    from app import __version__

    lines = [ln.split(": ", 1)[1] for ln in text.splitlines()]
    assert lines[0].startswith(f"==== Tandem {__version__} (command line) started ")
    assert lines[1].startswith("OS: ") and lines[2].startswith("Python: ")
    assert "Backend: CPU (test)" in lines and "llama.cpp: commit abc" in lines
    assert lines[-1] == "after the header"
    assert logs.start_log("cli") == path  # a second call adds nothing
    assert text.count("==== Tandem") == 1


def test_terminal_handlers_keep_their_level(tandem_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logging.basicConfig(level=logging.WARNING, force=True)
    logs.start_log("cli")
    logging.getLogger("app.test").info("only in the file")
    logging.getLogger("app.test").warning("in both")
    err = capsys.readouterr().err
    assert "in both" in err and "only in the file" not in err
    text = (paths.log_dir() / "tandem-cli.log").read_text()
    assert "only in the file" in text and "in both" in text


def test_default_folder_is_platformdirs_log_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    monkeypatch.delenv("TANDEM_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    if sys.platform.startswith("linux"):
        assert paths.log_dir() == tmp_path / "state" / "Tandem" / "log"
    assert "cache" not in str(paths.log_dir()).lower()


def test_unwritable_log_folder_means_no_file_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail() -> Path:
        raise PermissionError("read-only")

    monkeypatch.setattr(paths, "log_dir", fail)
    assert logs.start_log("gui") is None


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGBUS"), reason="POSIX signals")
def test_a_fatal_signal_is_reported_and_said_at_the_next_start(tandem_home: Path) -> None:
    """A bus error (what a model file shortened while it is memory-mapped raises) ends
    the window's process at once: faulthandler's report lands in crash.log, the next
    start says what happened once, with the likely cause; the command line prints the
    report on the terminal."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TANDEM_HOME": str(tandem_home)}
    crash = ("import os, signal; from app.store.logs import watch_fatal_errors; "
             "watch_fatal_errors({kind!r}); os.kill(os.getpid(), signal.SIGBUS)")
    gui = subprocess.run([sys.executable, "-c", crash.format(kind="gui")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert gui.returncode != 0 and "Bus error" in (paths.log_dir() / "crash.log").read_text()
    words = logs.take_last_crash()
    assert words is not None
    assert words.startswith("Tandem stopped unexpectedly last time (Bus error). Most often "
                            "a model file was shortened or overwritten while it was loaded")
    assert str(paths.log_dir() / "crash.log.1") in words
    assert logs.take_last_crash() is None  # said once
    cli = subprocess.run([sys.executable, "-c", crash.format(kind="cli")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode != 0 and "Fatal Python error: Bus error" in cli.stderr
    assert logs.take_last_crash() is None  # the command line leaves no crash.log

