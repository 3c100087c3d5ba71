"""``python -m app serve`` as a child process, for the tests that talk to a real Tandem
server (the openai client's, the remote client's)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO


@contextlib.contextmanager
def served(model: Path, home: Path, *options: str) -> Iterator[str]:
    """Serve ``model`` with prompt lookup on 127.0.0.1 (a free port, n_ctx 512, its own
    TANDEM_HOME ``home``) plus ``options``; yields the base URL it prints (…/v1) and
    stops it afterwards. Fails the test when it does not start."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--model", str(model), "--prompt-lookup",
         "--port", "0", "--n-ctx", "512", *options],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TANDEM_HOME": str(home)})
    assert proc.stdout is not None
    base = proc.stdout.readline().strip()  # the first line once it serves
    if not base.startswith("http://"):
        proc.kill()
        pytest.fail(f"serve did not start: {proc.stderr.read() if proc.stderr else ''}")
    try:
        yield base
    finally:
        proc.terminate()
        proc.wait(60)
