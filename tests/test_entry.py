"""app.entry: which command lines open the window, which run the CLI, and the hidden
helpers of a frozen app (the probe child, the system-library check)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import entry, system_libs
from app.engine import probe
from app.engine.exact import TILED_MM_ENV

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_log_file_left_open():
    """entry starts the window's log file; close it so later tests do not write to it."""
    yield
    from app.store import logs

    logs.stop_log("gui")


@pytest.mark.parametrize(("args", "program", "window"), [
    ([], "tandem", True),
    (["model.gguf"], "/usr/bin/tandem", True),
    (["/models/Model.GGUF"], "tandem", True),
    (["--help"], "tandem", False),
    (["--version"], "tandem", False),
    (["models", "list"], "tandem", False),
    (["generate", "--model", "x.gguf", "hi"], "tandem", False),
    (["-x.gguf"], "tandem", False),
    ([], "/usr/bin/tandem-cli", False),
    (["model.gguf"], "tandem-cli", False),
])
def test_window_or_cli(args: list[str], program: str, window: bool) -> None:
    assert entry.wants_window(args, program) is window


def test_cli_runs_for_tandem_cli_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr("app.cli.main", lambda argv, prog=None: seen.append(list(argv)) or 7)
    monkeypatch.setattr(entry, "_gui", lambda path: pytest.fail("the window must not open"))
    assert entry.main(["--help"], "tandem") == 7
    assert entry.main([], "/opt/tandem/tandem-cli") == 7
    assert seen == [["--help"], []]


def test_the_window_gets_the_gguf_as_an_absolute_path(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    opened: list[Path | None] = []
    monkeypatch.setattr(system_libs, "gui_problem", lambda: None)
    monkeypatch.setattr("app.ui.launch.main", lambda open_path=None: opened.append(open_path) or 0)
    monkeypatch.chdir(tmp_path)
    assert entry.main(["model.gguf"], "tandem") == 0
    assert entry.main([], "tandem") == 0
    assert opened == [tmp_path / "model.gguf", None]


def test_missing_qt_libraries_give_a_message_and_status_2(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    fake = system_libs.SystemLibrary("libxcb-cursor.so.0", "libxcb-cursor0", "xcb-util-cursor",
                                     "xcb-util-cursor")
    monkeypatch.setattr(system_libs, "gui_problem", lambda: system_libs._problem([fake]))
    shown: list[tuple[str, str]] = []
    monkeypatch.setattr(system_libs, "_desktop_dialog", lambda t, x: shown.append((t, x)))
    monkeypatch.setattr("app.ui.launch.main", lambda open_path=None: pytest.fail("Qt must not start"))
    assert entry.main([], "tandem") == 2
    err = capsys.readouterr().err
    assert "libxcb-cursor.so.0" in err and "sudo apt install libxcb-cursor0" in err
    assert "sudo dnf install xcb-util-cursor" in err and "sudo pacman -S --needed xcb-util-cursor" in err
    assert shown and shown[0][0] == "Tandem cannot open its window"  # stderr is no terminal here


def test_probe_child_runs_through_the_entry_point(tiny_target: Path, tiny_model_dir: Path) -> None:
    """What a frozen app does: its own executable with the hidden argument."""
    from tests.synthetic import write_tiny_llama

    env = dict(os.environ, PYTHONPATH=str(REPO))
    ok = subprocess.run([sys.executable, "-c", "import sys; from app.entry import main; sys.exit(main())",
                         probe.PROBE_ARG, str(tiny_target)], env=env, capture_output=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    broken = write_tiny_llama(tiny_model_dir / "entry-no-layers.gguf", n_layer=0)
    bad = subprocess.run([sys.executable, "-c", "import sys; from app.entry import main; sys.exit(main())",
                          probe.PROBE_ARG, str(broken)], env=env, capture_output=True, timeout=120)
    assert bad.returncode not in (0, 2)  # llama.cpp aborts in the child, which is the point


def test_probe_command_in_a_frozen_app(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.catalog import loadcheck

    assert loadcheck.probe_command(Path("/m/x.gguf"))[1:] == ["-m", "app.engine.probe", "/m/x.gguf"]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/tandem/tandem")
    assert loadcheck.probe_command(Path("/m/x.gguf")) == ["/opt/tandem/tandem", probe.PROBE_ARG, "/m/x.gguf"]


def test_python_m_app_version() -> None:
    out = subprocess.run([sys.executable, "-m", "app", "--version"], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    from app import __version__

    assert out.returncode == 0 and out.stdout.strip() == f"Tandem {__version__}"


def _no_tiled_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset GGML_CPU_TILED_MM for this test and have it unset again afterwards, whatever
    the code under test writes into os.environ."""
    monkeypatch.setenv(TILED, "test")
    monkeypatch.delenv(TILED)


TILED = TILED_MM_ENV


def test_the_window_switches_the_tiled_kernel_off_when_settings_ask_for_exact(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Exact verification in the saved settings sets GGML_CPU_TILED_MM=0 before the window
    loads llama.cpp (ggml reads it once); bad files read as "no" and stay where they are;
    a value the user set is kept."""
    import json

    from app.store import paths

    _no_tiled_switch(monkeypatch)
    assert entry.exact_kernel_for_window() is False  # no settings file: the default
    assert TILED not in os.environ
    settings = paths.settings_path()
    for text, wanted in (("{not json", False),
                         (json.dumps({"model": {"exact_verification": "yes"}}), False),
                         (json.dumps({"schema_version": 2, "model": {"exact_verification": False}}),
                          False),
                         (json.dumps({"schema_version": 2, "model": {"exact_verification": True}}),
                          True)):
        settings.write_text(text, encoding="utf-8")
        assert entry.exact_kernel_for_window() is wanted
        assert (os.environ.get(TILED) == "0") is wanted
        assert settings.read_text(encoding="utf-8") == text  # read, never set aside
        os.environ.pop(TILED, None)
    monkeypatch.setenv(TILED, "1")  # the user's own choice stands
    assert entry.exact_kernel_for_window() is False
    assert os.environ[TILED] == "1"
    # the window's start goes through it
    monkeypatch.delenv(TILED)
    monkeypatch.setattr(system_libs, "gui_problem", lambda: None)
    monkeypatch.setattr("app.ui.launch.main", lambda open_path=None: 0)
    assert entry.main([], "tandem") == 0
    assert os.environ.get(TILED) == "0"


def test_exact_on_a_command_line_switches_the_tiled_kernel_off(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``--exact``, as argparse reads it (abbreviated too), sets GGML_CPU_TILED_MM=0 in
    the CLI itself, so ``tandem-cli`` (app.cli:main) gets it as well; a prompt that reads
    "--exact" does not."""
    from app.cli import main as cli_main

    missing = str(tmp_path / "missing.gguf")
    _no_tiled_switch(monkeypatch)
    assert cli_main(["generate", "--model", missing, "--", "--exact"]) != 0
    assert TILED not in os.environ
    assert cli_main(["generate", "--model", missing, "--exa", "hi"]) != 0
    assert os.environ.get(TILED) == "0"
    monkeypatch.setenv(TILED, "1")
    assert cli_main(["generate", "--model", missing, "--exact", "hi"]) != 0
    assert os.environ[TILED] == "1"


@pytest.mark.slow
def test_exact_on_the_command_line_makes_gemma_q4_k_m_exact(gemma_path: Path) -> None:
    """Q4_K_M needs the tiled kernel off at the start; ``--exact`` alone now gets it."""
    import json

    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}
    proc = subprocess.run(
        [sys.executable, "-m", "app", "bench", "--model", str(gemma_path), "--prompt-lookup",
         "--exact", "--prompts", "builtin:chat", "--limit", "1", "--k", "2", "--repeat", "1",
         "--max-tokens", "4", "--threads", "1", "--no-warmup", "-q", "--json"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["settings"]["exact_verification"] is True
    assert "Exact verification needs" not in proc.stderr + proc.stdout
