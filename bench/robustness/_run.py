"""Shared helpers of the robustness scripts: run ``python -m app …`` in a child process
and classify how it ended (not part of the app)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROBUSTNESS = Path(__file__).resolve().parent
REPO = ROBUSTNESS.parents[1]
OUT = REPO / "bench" / "out"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@dataclass
class Outcome:
    """How one child process ended.

    ``crashed``: killed by a signal other than our own timeout kill (SIGABRT, SIGSEGV…);
    ``traceback``: a Python traceback reached stderr; ``hung``: it ran past the timeout
    and was killed; ``peak_rss_mb``: its peak resident memory (wait4).
    """

    argv: list[str]
    returncode: int
    seconds: float
    peak_rss_mb: float
    crashed: bool
    traceback: bool
    hung: bool
    stdout: str
    stderr: str

    def brief(self) -> dict[str, Any]:
        d = asdict(self)
        d["stdout"] = self.stdout[-400:]
        d["stderr"] = self.stderr[-600:]
        return d


def run_app(args: list[str], *, home: Path, timeout: float = 120.0, env: dict[str, str] | None = None) -> Outcome:
    """``python -m app *args`` with TANDEM_HOME=home; waits with wait4 for its rusage."""
    full_env = {**os.environ, "TANDEM_HOME": str(home), "PYTHONPATH": str(REPO), **(env or {})}
    argv = [sys.executable, "-m", "app", *args]
    t0 = time.monotonic()
    out_path = home / f".out-{os.getpid()}-{time.monotonic_ns()}"
    err_path = out_path.with_suffix(".err")
    home.mkdir(parents=True, exist_ok=True)
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(argv, cwd=REPO, env=full_env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        hung = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                hung = True
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout = out_path.read_bytes().decode("utf-8", "replace")
    stderr = err_path.read_bytes().decode("utf-8", "replace")
    out_path.unlink()
    err_path.unlink()
    rc = proc.returncode
    crashed = (rc < 0 and not hung) or rc in (128 + signal.SIGABRT, 128 + signal.SIGSEGV)
    return Outcome(
        argv=args, returncode=rc, seconds=time.monotonic() - t0,
        peak_rss_mb=usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024) / 2**20,
        crashed=crashed, traceback="Traceback (most recent call last)" in stderr, hung=hung,
        stdout=stdout, stderr=stderr,
    )


def self_peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
