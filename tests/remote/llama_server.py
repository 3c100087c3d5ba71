"""llama.cpp's ``llama-server`` as a child process on 127.0.0.1, for tests and bench/.

The binary is built from the same llama-cpp-python sdist as the app's engine by
``bench/build_llama_tools.sh`` into ``bench/.llama-tools/bin`` (``$LLAMA_TOOLS_DIR/bin``
when set). :class:`LlamaServer` starts it on a free port and waits until ``/health``
answers 200; :func:`llama_server_binary` finds the binary (None when it was not built).
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

REPO = Path(__file__).resolve().parents[2]
#: the arguments every test server gets: n-gram speculation and the Prometheus metrics
SPEC_ARGS = ("--spec-type", "ngram-simple", "--metrics")


def llama_server_binary() -> Path | None:
    """``<tools>/bin/llama-server`` if it was built and is executable, else None."""
    tools = Path(os.environ.get("LLAMA_TOOLS_DIR", REPO / "bench" / ".llama-tools"))
    exe = tools / "bin" / "llama-server"
    return exe if exe.is_file() and os.access(exe, os.X_OK) else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """``llama-server -m MODEL --host 127.0.0.1 --port P [args]`` until :meth:`stop`.

    Args:
        binary: the llama-server executable.
        model: a GGUF file.
        args: more llama-server arguments (for example :data:`SPEC_ARGS`).
        threads: ``-t`` (1 by default: with 2 threads llama.cpp's threads wait for each
            other in a spin loop, which a busy machine turns into long stalls).
        ready_timeout: seconds to wait for ``/health`` before giving up.
        port: the port (None: a free one).

    Raises:
        RuntimeError: the server exited or did not become ready; the message holds the
            end of its log.
    """

    def __init__(self, binary: Path, model: Path, args: tuple[str, ...] | list[str] = (), *,
                 threads: int = 1, ctx: int = 2048, ready_timeout: float = 180.0,
                 nice: bool = True, port: int | None = None) -> None:
        self.port = port if port is not None else free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log",
                                                delete=False)
        argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port",
                str(self.port), "-t", str(threads), "-c", str(ctx), "-np", "1", *args]
        if nice:
            argv = ["nice", "-n", "19", *argv]
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        try:
            self._wait_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise

    def log_tail(self, n: int = 3000) -> str:
        """The last ``n`` characters of the server's log."""
        return Path(self._log.name).read_text(errors="replace")[-n:]

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"llama-server did not answer /health in {timeout:g} s:\n"
                           f"{self.log_tail()}")

    def stop(self) -> None:
        """Terminate the server and wait for it; remove its log."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
