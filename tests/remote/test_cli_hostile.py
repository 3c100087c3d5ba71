"""``generate --server`` against a hostile or broken server (in-process through
``app.cli.main``): Ctrl-C stops it at any point, every failure is one ``error:`` line
and exit status 2 (never a traceback), nothing secret or acting on the terminal is
printed, and figures that are not counts are not shown."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import pytest

from app.cli import main
from tests.remote.broken_server import ESCAPED_ID, ESCAPED_TEXT, BrokenServer


def _generate(broken: BrokenServer, *extra: str, server: str | None = None) -> list[str]:
    return ["generate", "--server", server or broken.base_url, "--model", "broken",
            "--max-tokens", "20", *extra, "hi"]


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_ctrl_c_stops_generate_while_the_model_list_trickles(
        broken: BrokenServer, capsys: pytest.CaptureFixture[str]) -> None:
    """The model list comes one byte every 0.05 s: Ctrl-C (twice, as a user would) stops
    the command at once with status 130; it waited for the whole list before (100,000
    bytes), whatever Ctrl-C did."""
    broken.mode, broken.paths = "models-trickle", []

    def press_ctrl_c() -> None:
        deadline = time.monotonic() + 10
        while "/v1/models" not in broken.paths and time.monotonic() < deadline:
            time.sleep(0.02)
        for _ in range(2):
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGINT)

    # a Ctrl-C that comes after the command ended must not stop pytest
    before = signal.signal(signal.SIGINT, lambda _sig, _frame: None)
    presser = threading.Thread(target=press_ctrl_c)
    presser.start()
    t0 = time.monotonic()
    try:
        assert main(_generate(broken)) == 130
    finally:
        presser.join()
        signal.signal(signal.SIGINT, before)
        broken.mode = "ok"
    assert time.monotonic() - t0 < 5
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(("mode", "words"), [
    ("models-deep", "not OpenAI-compatible (JSON nested too deep"),
    ("deep-json", "JSON that is not a chat completion"),
    ("deep-error", "answered 500 to the chat request"),
    ("deep-chunk", "not an OpenAI-compatible stream"),
    ("empty-deltas", "lines without reply text"),
    ("comments", "lines without reply text"),
    ("raw-text", "not an OpenAI-compatible stream"),
    ("endless-field", "not an OpenAI-compatible stream"),
])
def test_a_hostile_answer_is_one_error_line(broken: BrokenServer, mode: str, words: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    broken.mode = mode
    try:
        assert main(_generate(broken)) == 2
    finally:
        broken.mode = "ok"
    line = _one_error_line(capsys.readouterr().err)
    assert words in line and len(line) < 400


def test_figures_that_are_not_counts_are_not_shown(
        broken: BrokenServer, capsys: pytest.CaptureFixture[str]) -> None:
    broken.mode = "bad-figures"
    try:
        assert main(_generate(broken)) == 0
    finally:
        broken.mode = "ok"
    err = capsys.readouterr().err
    assert "2 tokens" in err and "reports nothing about speculation" in err
    assert "-5" not in err and "1000000000" not in err and "Traceback" not in err


@pytest.mark.parametrize(("server", "words"), [
    ("http://[::1", "Invalid IPv6 URL"),
    ("http://127.0.0.1:18450%00x", "not a server address"),
    ("http://127.0.0.1:99999", "Port out of range"),
    ("http://127.0.0.1:1/" + "a" * 70_000, "characters long"),
])
def test_a_bad_server_address_is_one_error_line(
        server: str, words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--server", server, "--model", "m", "hi"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert words in line and len(line) < 400


@pytest.mark.parametrize("key", ["clé", "sk-sec\x1bret-1234"])
def test_a_bad_api_key_is_one_error_line_without_it(
        key: str, broken: BrokenServer, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TANDEM_TEST_KEY", key)
    assert main(_generate(broken, "--api-key-env", "TANDEM_TEST_KEY")) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "API key has a character" in line and key not in line and "sec" not in line


def test_a_key_file_with_a_windows_line_end_works(
        broken: BrokenServer, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TANDEM_TEST_KEY", "sk-supersecret-123\r\n")
    broken.mode = "ok"
    assert main(_generate(broken, "--api-key-env", "TANDEM_TEST_KEY")) == 0
    assert broken.last_auth == "Bearer sk-supersecret-123"
    assert capsys.readouterr().out == "Hello, world\n"


def test_secrets_are_not_printed(broken: BrokenServer, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that repeats the key in its 401, and a password in the address: the
    error line shows ``***`` for both."""
    monkeypatch.setenv("TANDEM_TEST_KEY", "sk-supersecret-123")
    broken.mode = "models-echo-key"
    try:
        assert main(_generate(broken, "--api-key-env", "TANDEM_TEST_KEY")) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert "sk-supersecret-123" not in line and "Bearer ***" in line
        assert "\x1b" not in line
        broken.mode = "models-401"
        with_password = broken.base_url.replace("http://", "http://user:s3cretpass@")
        assert main(_generate(broken, server=with_password)) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert "s3cretpass" not in line and "user:***@127.0.0.1" in line
    finally:
        broken.mode = "ok"


def test_a_model_id_with_escapes_is_printed_escaped(
        broken: BrokenServer, capsys: pytest.CaptureFixture[str]) -> None:
    broken.mode = "models-escapes"
    try:
        assert main(_generate(broken)) == 2
    finally:
        broken.mode = "ok"
    line = _one_error_line(capsys.readouterr().err)
    assert "\x1b" not in line and "\x07" not in line
    assert "it offers: m\\x1b]0;PWNED\\x07\\x1b[2J." in line
    assert ESCAPED_ID.startswith("m\x1b")


def test_reply_text_is_escaped_on_a_terminal_only(
        broken: BrokenServer, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal the reply's control characters print as escapes; piped (or with
    --json) the reply is data and keeps them."""
    broken.mode = "escapes"
    try:
        assert main(_generate(broken)) == 0
        assert capsys.readouterr().out == ESCAPED_TEXT + "\n"  # piped: as sent
        assert main(_generate(broken, "--json")) == 0
        assert json.loads(capsys.readouterr().out)["text"] == ESCAPED_TEXT
        monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
        assert main(_generate(broken)) == 0
        out = capsys.readouterr().out
    finally:
        broken.mode = "ok"
    assert out == "a\\x00b\\x1b[2J\\x1b]0;PWN\\x07\\x9bc\n"
