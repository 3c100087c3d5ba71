"""The command line as a user meets it: ``--version`` on every entry, the program name
they typed in every help text, ``-`` for a prompt on standard input, and exit statuses."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import app
from app import entry
from app.cli.main import program_name, read_prompt
from app.errors import TandemError

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("argv0, name", [
    ("/usr/bin/tandem-cli", "tandem-cli"),
    ("/opt/Tandem/tandem", "tandem"),
    ("C:\\Program Files\\Tandem\\tandem-cli.exe", "tandem-cli"),
    (str(REPO / "app" / "__main__.py"), "python -m app"),
    ("-c", "python -m app"),
    ("", "python -m app"),
])
def test_program_name(argv0: str, name: str) -> None:
    if "\\" in argv0:
        argv0 = argv0.replace("\\", "/")
    assert program_name(argv0) == name


@pytest.mark.parametrize("program, usage", [
    ("/usr/bin/tandem-cli", "usage: tandem-cli models pair "),
    ("/opt/Tandem/tandem", "usage: tandem models pair "),
    (str(REPO / "app" / "__main__.py"), "usage: python -m app models pair "),
])
def test_every_help_shows_the_program_name(program: str, usage: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        entry.main(["models", "pair", "--help"], program)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(usage), out[:120]
    assert "exit status: 0 compatible, 1 not compatible, 2 error" in out
    with pytest.raises(SystemExit):
        entry.main(["generate", "--help"], program)
    assert capsys.readouterr().out.startswith(usage.replace("models pair", "generate"))


def test_version_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        entry.main(["--version"], "/usr/bin/tandem")  # the window's program: still the CLI
    assert done.value.code == 0
    assert capsys.readouterr().out == f"Tandem {app.__version__}\n"


@pytest.mark.parametrize("command", [
    [sys.executable, "-m", "app", "--version"],
    [str(BIN / "tandem-cli"), "--version"],
    [str(BIN / "tandem"), "--version"],  # the window's script: --version does not open it
])
def test_version_on_every_installed_entry(command: list[str]) -> None:
    assert Path(command[0]).exists(), f"{command[0]} is not installed (pip install -e .)"
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "QT_QPA_PLATFORM": "offscreen",
                               "TANDEM_HOME": str(REPO / ".cache" / "no-home")})
    assert (proc.returncode, proc.stdout) == (0, f"Tandem {app.__version__}\n"), proc.stderr


def test_read_prompt_from_a_stream() -> None:
    assert read_prompt(io.StringIO("fix this:\n  x = 1\n")) == "fix this:\n  x = 1"
    assert read_prompt(io.StringIO("two\n\n")) == "two\n"  # only the one final newline goes
    assert read_prompt(io.StringIO("windows\r\n")) == "windows"
    with pytest.raises(TandemError, match="empty"):
        read_prompt(io.StringIO("\n"))


def _generate(tiny_target: Path, prompt: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", "generate", "--model", str(tiny_target), "--no-spec",
         "--max-tokens", "6", "--threads", "1", "--seed", "7", "--json", prompt],
        input=stdin, capture_output=True, text=True, timeout=300, cwd=REPO)


def test_a_prompt_of_dash_is_read_from_stdin(tiny_target: Path) -> None:
    text = "def add(a, b):\n    return a + b\n"
    given = _generate(tiny_target, text.rstrip("\n"))
    piped = _generate(tiny_target, "-", stdin=text)
    assert given.returncode == piped.returncode == 0, given.stderr + piped.stderr
    a, b = json.loads(given.stdout), json.loads(piped.stdout)
    assert a["stats"]["prompt_tokens"] == b["stats"]["prompt_tokens"] > 3
    assert a["token_ids"] == b["token_ids"]
    literal = _generate(tiny_target, "-", stdin="")
    assert literal.returncode == 2 and literal.stdout == ""
    assert literal.stderr.strip() == "error: The prompt read from standard input is empty."
