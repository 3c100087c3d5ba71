"""``python -m app serve``: every option and the port are checked before the model loads,
and each refusal is one line in the app's words (no pydantic text, no traceback)."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import pytest

import app.chat.service
from app.cli.main import build_parser, main


class _NoLoad:
    """Stands in for ChatService: serve must refuse before it creates the service."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("serve created the chat service (to load the model) before "
                             "refusing its options")


@pytest.fixture
def no_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app.chat.service, "ChatService", _NoLoad)


def _serve_error(capsys: pytest.CaptureFixture[str], model: Path, *argv: str) -> str:
    """Run ``serve`` in-process; it must fail with status 2 and one ``error:`` line,
    which is returned."""
    code = main(["serve", "--model", str(model), "--port", "0", *argv])
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert not out and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def _help(command: str) -> str:
    parser = build_parser("tandem-cli")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return " ".join(sub.choices[command].format_help().split())


def test_a_port_in_use_is_said_at_once_before_the_model_loads(
        capsys: pytest.CaptureFixture[str], smollm_path: Path, no_load: None) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        line = _serve_error(capsys, smollm_path, "--port", str(port))
    finally:
        taken.close()
    assert line == f"error: Cannot listen on 127.0.0.1:{port}: Address already in use."


@pytest.mark.parametrize(("argv", "expect"), [
    (["--n-ctx", "0"], "error: Invalid option --n-ctx: "),
    (["--threads", "0"], "error: Invalid option --threads: "),
    (["--max-tokens", "0"], "error: Invalid option --max-tokens: "),
    (["--max-body-bytes", "10"], "error: Invalid option --max-body-bytes: "),
])
def test_an_option_out_of_range_is_one_line_naming_it_before_the_model_loads(
        capsys: pytest.CaptureFixture[str], smollm_path: Path, no_load: None,
        argv: list[str], expect: str) -> None:
    line = _serve_error(capsys, smollm_path, *argv)
    assert line.startswith(expect), line
    assert "validation error" not in line and "pydantic" not in line


def test_a_queue_limit_of_0_is_refused_by_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    """The service queues every job before it runs it: 0 would refuse them all (the
    model's load first), so the help says ≥ 1 and 0 is a usage error."""
    parser = build_parser("tandem-cli")
    assert parser.parse_args(["serve", "--model", "m.gguf", "--queue-limit", "1"]
                             ).queue_limit == 1
    for bad in ("0", "-1", "many"):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(["serve", "--model", "m.gguf", "--queue-limit", bad])
        assert exc.value.code == 2
        assert "--queue-limit" in capsys.readouterr().err
    assert "requests that may wait behind the running one (≥ 1; default 16)" in _help("serve")


def test_max_tokens_help_says_it_is_the_default_of_requests() -> None:
    """README: a request's own max_tokens is honoured; --max-tokens is what a request
    that names none gets."""
    text = _help("serve")
    assert "reply tokens for requests that name no max_tokens (a request may ask for " \
           "more) (1 … 1000000; default 512)" in text
    assert "the most tokens one reply may have" not in text


def test_wide_cors_origins_are_warned_about() -> None:
    from app.cli.serve import cors_warnings

    assert cors_warnings(["http://editor.local"], None) == []
    star, null = cors_warnings(["*", "null", "*"], None)
    assert star.startswith("warning: --cors-origin * lets any web page call this API")
    assert "file://" in null and "sandboxed" in null
    assert "no --api-key" in star
    [keyed] = cors_warnings(["*"], "a-secret-of-24-characters")
    assert keyed.endswith("they still need the API key.")


def test_the_cors_warnings_reach_stderr_before_the_model_loads(
        capsys: pytest.CaptureFixture[str], smollm_path: Path, no_load: None) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        code = main(["serve", "--model", str(smollm_path), "--port",
                     str(taken.getsockname()[1]), "--cors-origin", "*",
                     "--cors-origin", "null"])
    finally:
        taken.close()
    lines = capsys.readouterr().err.splitlines()
    assert code == 2
    assert [ln.split(" lets ")[0] for ln in lines[:2]] == [
        "warning: --cors-origin *", "warning: --cors-origin null"]
    assert lines[2].startswith("error: Cannot listen")


def test_the_port_taken_before_the_load_refuses_connections_until_it_serves() -> None:
    """serve binds its port before the model loads but listens only once it serves: a
    client during the load is refused at once (it would otherwise wait unanswered), and
    the port is free again once the socket is closed (a failed load)."""
    from app.api.server import bind

    sock = bind("127.0.0.1", 0, listen=False)
    port = sock.getsockname()[1]
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
    finally:
        sock.close()
    bind("127.0.0.1", port).close()


def test_ctrl_c_ends_a_running_stream_with_a_shutting_down_error_and_done(
        smollm_path: Path, tmp_path: Path) -> None:
    """Ctrl-C while a reply streams: the stream ends as the docs say, with a
    ``shutting_down`` error event and [DONE], not cut and not as a finished reply (a
    client would take either for a whole reply); a request waiting behind it gets 503."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import threading

    import httpx

    from tests.conftest import REPO

    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--model", str(smollm_path), "--port", "0",
         "--n-ctx", "1024"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, env={**os.environ, "TANDEM_HOME": str(tmp_path)},
        # started as a shell's background job (`tandem serve … &`), with SIGINT ignored
        # until the server's own handler takes it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stdout is not None
        base = proc.stdout.readline().strip()
        assert base.startswith("http://")
        body = {"model": smollm_path.stem, "stream": True, "max_tokens": 2000,
                "messages": [{"role": "user", "content": "Tell a long story."}]}
        lines: list[str] = []
        queued: list[object] = []  # a request waiting behind the stream (or its error)

        def wait_behind() -> None:
            try:
                queued.append(httpx.post(f"{base}/chat/completions",
                                         json={**body, "stream": False}, timeout=60))
            except httpx.HTTPError as exc:
                queued.append(exc)

        waiting = threading.Thread(target=wait_behind)
        with httpx.stream("POST", f"{base}/chat/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                lines.append(line)
                if len(lines) == 2:
                    waiting.start()
                if len(lines) == 40:  # twenty chunks in (a line and a blank each): Ctrl-C
                    proc.send_signal(signal.SIGINT)
        data = [ln[len("data: "):] for ln in lines if ln.startswith("data: ")]
        assert data, lines
        assert data[-1] == "[DONE]"
        # not a finished reply: OpenAI's error, after the text already sent
        assert json.loads(data[-3])["choices"][0]["delta"].get("content") is not None
        error = json.loads(data[-2])["error"]
        assert error["code"] == "shutting_down" and "shutting down" in error["message"]
        waiting.join(30)
        assert isinstance(queued[0], httpx.Response), queued
        assert queued[0].status_code == 503
        assert queued[0].json()["error"]["message"].startswith(
            "Tandem stopped this request before it began")
        assert proc.wait(30) == 0  # the server stopped as asked
    finally:
        if proc.poll() is None:
            proc.kill()
