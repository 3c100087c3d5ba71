"""Check that llama.cpp can read a GGUF's metadata, in a child process, before loading it.

llama.cpp rejects structural damage (truncation, absurd counts, offsets) with an error,
but some *values* make it abort the whole process instead: ``block_count`` 0 or above
its layer limit, more experts used than exist, an unknown RoPE scaling type, a tokenizer
model that does not fit the architecture (``GGML_ASSERT`` → SIGABRT). An abort cannot be
caught in-process, so before a file is loaded for the first time a child process loads
its hyperparameters, vocabulary and tensor list (``no_alloc``: no weights are read or
allocated; about a second for a 262k vocabulary); if the child dies, the file is refused with the assertion text as the
reason. A file that passed is remembered by path, size and modification time (in this
process and in the cache folder), so the probe runs once per file.

Run as ``python -m app.engine.probe PATH``: exit 0 when the metadata loads, 2 with the
error on stderr when llama.cpp refuses it; any other status means it crashed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from app.errors import LoadCancelledError, ModelLoadError

log = logging.getLogger(__name__)

#: seconds before a probe is considered hung (loading metadata takes well under one)
PROBE_TIMEOUT_S = 120.0

_ok: set[tuple[str, int, int]] = set()
_lock = threading.Lock()


def _key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (os.fsdecode(path.resolve()), st.st_size, st.st_mtime_ns)


def _cache_file() -> Path:
    from app.store import paths

    return paths.cache_dir() / "probed-ggufs.json"


def _load_cache() -> set[tuple[str, int, int]]:
    try:
        raw = json.loads(_cache_file().read_text(encoding="utf-8"))
        return {(str(p), int(s), int(m)) for p, s, m in raw}
    except (OSError, ValueError, TypeError):
        return set()


def _save_cache(entries: set[tuple[str, int, int]]) -> None:
    try:
        f = _cache_file()
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(sorted(entries)[-500:]), encoding="utf-8")
        tmp.replace(f)
    except OSError as exc:  # a read-only cache folder only costs a re-probe next time
        log.info("could not record a probed GGUF: %s", exc)


def _reason(stderr: str) -> str:
    """The most telling line of a crashed child's stderr."""
    for pattern in (r"GGML_ASSERT\((.*)\) failed", r"fatal error[:\s]*(.*)", r"error[:\s]+(.*)"):
        m = re.search(pattern, stderr)
        if m and m.group(1).strip():
            return m.group(1).strip()
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else "llama.cpp stopped the process"


def probe_model(path: Path, cancel: threading.Event | None = None) -> None:
    """Raise unless llama.cpp can read ``path``'s hyperparameters and vocabulary.

    Raises:
        ModelLoadError: the file makes llama.cpp fail or abort (the message says why).
        LoadCancelledError: ``cancel`` was set while the probe ran.
    """
    try:
        key = _key(path)
    except OSError as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc.strerror or exc}") from exc
    with _lock:
        if key in _ok:
            return
        disk = _load_cache()
        if key in disk:
            _ok.add(key)
            return
    if getattr(sys, "frozen", False):
        return  # a frozen app has no "python -m"; it relies on llama.cpp's own checks
    cmd = [sys.executable, "-m", "app.engine.probe", os.fsdecode(path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    waited = 0.0
    try:
        while True:
            try:
                _, err_b = proc.communicate(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                waited += 0.1
                if waited > PROBE_TIMEOUT_S:
                    raise ModelLoadError(
                        f"Could not load {path.name}: reading its metadata did not finish."
                    ) from None
                if cancel is not None and cancel.is_set():
                    proc.kill()
                    proc.communicate()
                    raise LoadCancelledError(f"Loading {path.name} was cancelled.") from None
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        raise
    err = err_b.decode("utf-8", "replace")
    if proc.returncode == 0:
        with _lock:
            _ok.add(key)
            disk = _load_cache()
            disk.add(key)
            _save_cache(disk)
        return
    if proc.returncode == 2:
        msg = err.strip().splitlines()[-1] if err.strip() else "llama.cpp could not read it"
        raise ModelLoadError(msg)
    raise ModelLoadError(
        f"Could not load {path.name}: llama.cpp cannot use this file ({_reason(err)}). "
        "Its metadata holds values llama.cpp does not support; the file may be corrupt or "
        "made for another program."
    )


def _main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m app.engine.probe PATH", file=sys.stderr)
        return 2
    from app.engine.llama import LlamaModel
    from app.errors import TandemError

    try:
        LlamaModel(Path(os.fsdecode(argv[0])), n_gpu_layers=0, use_mmap=False, no_alloc=True).close()
    except TandemError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
