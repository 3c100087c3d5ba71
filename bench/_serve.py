"""Starting ``python -m app serve`` as a child for the API benchmarks (not part of the app)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _common import REPO


class ServeChild:
    """``python -m app serve --model M [drafter args] --port 0`` as a child process; the
    base URL is the first line it prints once it accepts connections."""

    def __init__(self, model: Path, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--model", str(model), "--port", "0", *args],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ})
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()
        if not self.base_url.startswith("http://"):
            err = self.proc.stderr.read() if self.proc.stderr else ""
            self.proc.kill()
            sys.exit(f"error: python -m app serve did not start:\n{err}")
        self.pid = self.proc.pid

    def stop(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
