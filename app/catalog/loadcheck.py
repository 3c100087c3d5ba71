"""Whether llama.cpp can load *and run* a GGUF, found in a child process first.

llama.cpp rejects structural damage (truncation, absurd counts, offsets) with an error,
but some files make it kill the whole process instead: values it asserts on
(``block_count`` 0 or above its layer limit, an unknown RoPE scaling type, a tokenizer
that does not fit the architecture: ``GGML_ASSERT`` → SIGABRT) and, in well-formed files,
tensor types its compute kernels do not expect (an F16 ``output_norm``, Q8_0 norms, I32
token embeddings, I8/I16/F64 weights: ``binary_op: unsupported types`` → SIGABRT, or a
SIGSEGV with no message at the first decode). Neither can be caught in-process, so before
the app touches a file, a child process (:func:`probe_command`, which runs
:mod:`app.engine.probe`) loads it, creates a small context and decodes one token and then
a short batch, which runs every tensor of the model through the kernels a reply uses. If
the child dies, the file is refused with the reason (the assertion or kernel message and
the stage it died in).

The child is the only code here that touches llama.cpp; this module only starts it and
reads its answer, so the catalog (the library's status column, ``models inspect``) and
the engine (before a load) ask the same question and get the same answer.

Verdicts are cached by *content identity* (:func:`content_identity`: the size and a
hash of the header region of every part, where everything llama.cpp checks lives), by
the llama-cpp-python version and by whether layers go to a GPU, in this process and in
``load-checks.json`` in the cache folder. A renamed, moved or copied file is not probed
again; a file rewritten in place (same path and mtime, other bytes) is. Only definite
answers are cached: a timeout, a cancel, a SIGKILL (often the out-of-memory killer) or a
Python error inside the child are not the file's verdict.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.catalog.gguf_meta import model_parts, split_parts
from app.catalog.model_file import check_model_file
from app.errors import LoadCancelledError, ModelLoadError
from app.formatting import loads_json

log = logging.getLogger(__name__)

#: the module the child runs (``python -m``); it prints :data:`MARK` lines on stdout
PROBE_MODULE = "app.engine.probe"
#: hidden first argument with which a frozen Tandem executable runs the probe child
PROBE_ARG = "--tandem-probe-gguf"
#: prefix of the child's protocol lines on stdout (stage reached, final answer as JSON)
MARK = "tandem-probe:"
#: exit statuses of the child: loads / llama.cpp refused it with an error / Python error
EXIT_OK, EXIT_REFUSED, EXIT_PYTHON_ERROR = 0, 2, 3
#: stands for the file's name in a refusal the child words (a cached verdict is shared by
#: copies of the file under other names)
NAME_MARK = "\x00model\x00"

#: bytes of each part hashed from the start (GGUF metadata and tensor infos: the largest
#: vocabularies take about 10 MB) and from the end (catches a truncated or extended file)
IDENTITY_HEAD_BYTES = 64 << 20
IDENTITY_TAIL_BYTES = 1 << 20
_CACHE_VERSION = 1
_CACHE_MAX_ENTRIES = 2000

Outcome = Literal["loads", "refused", "crashed"]

_lock = threading.Lock()
_verdicts: dict[str, LoadVerdict] = {}
_identities: dict[str, str] = {}


@dataclass(frozen=True, slots=True)
class LoadVerdict:
    """What the probe found.

    Attributes:
        outcome: ``loads``; ``refused`` (llama.cpp reported an error); ``crashed`` (the
            child was killed by a signal: llama.cpp would take the app down with it).
        stage: where it stopped: ``load``, ``context``, ``decode`` (None when it loads).
        detail: llama.cpp's own words (an assertion, a kernel or loader message), or the
            signal's name when it printed nothing.
        mtp: for a model that loads and carries multi-token-prediction (nextn) layers:
            ``ok`` when its MTP head also ran in the child, else why not (llama.cpp's
            words, or the crash); None for a model without them, or when the build
            cannot run them. A head that fails does not stop the model from loading:
            the MTP drafter is then not offered.
            For an MTP assistant probed with its target (``check_loads(target=…)``):
            ``ok`` when the pair ran (None in verdicts remembered before it was timed).
        mtp_cost_ratio: when the head ran: its draft cost ratio c (one head step, or
            one assistant step, over one plain target step, timed in the child on the
            CPU cores it had; None in verdicts remembered before it was measured).
    """

    outcome: Outcome
    stage: str | None = None
    detail: str | None = None
    mtp: str | None = None
    mtp_cost_ratio: float | None = None

    @property
    def loads(self) -> bool:
        return self.outcome == "loads"

    def message(self, name: str) -> str:
        """The refusal for the user, naming the file ``name``; "" when it loads."""
        if self.loads:
            return ""
        detail = self.detail or "no message"
        if self.outcome == "refused":
            # the child words it as a whole sentence, with the file's name left out
            return detail.replace(NAME_MARK, name)
        if self.stage in ("context", "decode"):
            doing = "computing the first token" if self.stage == "decode" else "building the compute graph"
            return (
                f"llama.cpp cannot use {name}: it crashed {doing} ({detail}). The file may be "
                "well-formed, but it holds something this llama.cpp cannot compute with, such as a "
                "tensor type its kernels do not expect. Use another quantization or conversion of "
                "this model."
            )
        return (
            f"Could not load {name}: llama.cpp cannot use this file ({detail}). Its metadata holds "
            "values llama.cpp does not support; the file may be corrupt or made for another program."
        )

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "stage": self.stage, "detail": self.detail,
                "mtp": self.mtp, "mtp_cost_ratio": self.mtp_cost_ratio}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoadVerdict:
        outcome = d["outcome"]
        if outcome not in ("loads", "refused", "crashed"):
            raise ValueError(outcome)
        stage, detail, mtp = d.get("stage"), d.get("detail"), d.get("mtp")
        c = d.get("mtp_cost_ratio")
        return cls(outcome, str(stage) if stage is not None else None,
                   str(detail) if detail is not None else None,
                   str(mtp) if mtp is not None else None,
                   float(c) if isinstance(c, (int, float)) and c >= 0 else None)


# --------------------------------------------------------------------------- child command


def probe_command(path: Path, *, n_gpu_layers: int | None = None,
                  target: Path | None = None) -> list[str]:
    """The probe child's command line for ``path``: the one place it is built.

    ``python -m app.engine.probe PATH [--gpu-layers N]`` from source or an installed
    package. A frozen (PyInstaller) app has no ``-m``: it runs its own executable with
    the hidden first argument :data:`PROBE_ARG`, which its entry point hands to
    :func:`app.engine.probe.child_main` before anything else (so the probe never opens
    a second window). Tests and packaging hook the probe here.
    """
    if getattr(sys, "frozen", False):
        cmd = [sys.executable, PROBE_ARG, os.fsdecode(path)]
    else:
        cmd = [sys.executable, "-m", PROBE_MODULE, os.fsdecode(path)]
    if n_gpu_layers is not None:
        cmd += ["--gpu-layers", str(n_gpu_layers)]
    if target is not None:  # an MTP assistant, probed with the target it drafts for
        cmd += ["--target", os.fsdecode(target)]
    return cmd


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # ggml prints a backtrace through gdb when it aborts: slow, and noise in the reason
    env["GGML_NO_BACKTRACE"] = "1"
    return env


def probe_timeout_s(size_bytes: int) -> float:
    """Seconds before a probe counts as hung: 2 minutes plus reading the file at 25 MB/s
    (loading maps every weight; a slow disk or a first read from a network share)."""
    return 120.0 + size_bytes / 25e6


# --------------------------------------------------------------------------- identity


def _stat_key(st: os.stat_result) -> str:
    # ctime changes on any write or rename and cannot be set by cp -p or touch, so a stat
    # match means the bytes were not rewritten since they were hashed
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _hash_part(path: Path, st: os.stat_result) -> str:
    h = hashlib.sha256(b"tandem-gguf-identity-1\0")
    h.update(st.st_size.to_bytes(8, "little"))
    with path.open("rb") as f:
        left = min(st.st_size, IDENTITY_HEAD_BYTES)
        while left > 0 and (chunk := f.read(min(left, 1 << 20))):
            h.update(chunk)
            left -= len(chunk)
        if st.st_size > IDENTITY_HEAD_BYTES:
            f.seek(max(IDENTITY_HEAD_BYTES, st.st_size - IDENTITY_TAIL_BYTES))
            h.update(f.read(IDENTITY_TAIL_BYTES))
    return h.hexdigest()


def content_identity(path: Path) -> str:
    """A hex digest that changes whenever what llama.cpp checks in a model changes.

    Per part (every part of a split model): its size, its first
    :data:`IDENTITY_HEAD_BYTES` (the GGUF header: metadata and tensor infos) and its last
    :data:`IDENTITY_TAIL_BYTES`. Independent of the path, so copies share a verdict. A
    part's digest is remembered under its device, inode, size, mtime and ctime, so an
    unchanged file is not read again.

    Raises:
        OSError: a part cannot be read.
    """
    h = hashlib.sha256()
    for part in model_parts(path):
        st = part.stat()
        key = _stat_key(st)
        with _lock:
            digest = _identities.get(key)
        if digest is None:
            digest = _hash_part(part, st)
            with _lock:
                _identities[key] = digest
        h.update(digest.encode())
    return h.hexdigest()


def _runtime_key(n_gpu_layers: int | None) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        llama = version("llama_cpp_python")
    except PackageNotFoundError:
        llama = "?"
    device = "cpu" if n_gpu_layers == 0 else "offload"
    return f"llama-cpp-python {llama} {device}"


# --------------------------------------------------------------------------- cache


def _cache_file() -> Path:
    from app.store import paths

    return paths.cache_dir() / "load-checks.json"


def _read_cache() -> dict[str, Any]:
    try:
        data = loads_json(_cache_file().read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("version") == _CACHE_VERSION:
            return data
    except (OSError, ValueError):
        pass
    return {"version": _CACHE_VERSION, "verdicts": {}, "identities": {}}


def _write_cache(data: dict[str, Any]) -> None:
    for section in ("verdicts", "identities"):
        entries = data.get(section) or {}
        if len(entries) > _CACHE_MAX_ENTRIES:  # dicts keep insertion order: drop the oldest
            data[section] = dict(list(entries.items())[-_CACHE_MAX_ENTRIES:])
    try:
        f = _cache_file()
        tmp = f.with_name(f".{f.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, f)
    except OSError as exc:  # a read-only cache folder only costs a re-probe next time
        log.info("could not record a load check: %s", exc)


def _load_disk_memo() -> None:
    data = _read_cache()
    with _lock:
        for k, v in (data.get("identities") or {}).items():
            if isinstance(k, str) and isinstance(v, str):
                _identities.setdefault(k, v)
        for k, v in (data.get("verdicts") or {}).items():
            try:
                _verdicts.setdefault(k, LoadVerdict.from_dict(v))
            except (KeyError, TypeError, ValueError):
                continue


def _remember(key: str, verdict: LoadVerdict) -> None:
    with _lock:
        _verdicts[key] = verdict
        identities = dict(_identities)
    data = _read_cache()
    data.setdefault("verdicts", {})[key] = verdict.to_dict()
    data.setdefault("identities", {}).update(identities)
    _write_cache(data)


def _verdict_key(path: Path, n_gpu_layers: int | None, target: Path | None = None) -> str:
    pair = f" with {content_identity(target)}" if target is not None else ""
    return f"{content_identity(path)}{pair} {_runtime_key(n_gpu_layers)}"


def cached_verdict(path: Path, *, n_gpu_layers: int | None = None,
                   target: Path | None = None) -> LoadVerdict | None:
    """The remembered verdict for ``path``'s content (an MTP assistant's: probed with
    ``target``'s), or None when it was never probed.

    Raises:
        ModelPathError: ``path`` (or ``target``) is not a readable file.
    """
    p = check_model_file(path)
    tp = check_model_file(target) if target is not None else None
    _load_disk_memo()
    try:
        key = _verdict_key(p, n_gpu_layers, tp)
    except OSError:
        return None
    with _lock:
        return _verdicts.get(key)


# --------------------------------------------------------------------------- the probe


def _signal_name(returncode: int) -> str:
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"exit status {returncode}"
    desc = {"SIGSEGV": "segmentation fault", "SIGABRT": "aborted", "SIGBUS": "bus error",
            "SIGFPE": "arithmetic error", "SIGILL": "illegal instruction"}.get(sig.name)
    return f"{sig.name}, {desc}" if desc else sig.name


def _crash_detail(stderr: str) -> str | None:
    """The most telling line of a crashed child's stderr (llama.cpp's own words)."""
    for pattern in (
        r"GGML_ASSERT\((.*)\) failed",
        r"(\w+: unsupported types?:.*)",
    ):
        m = re.search(pattern, stderr)
        if m and m.group(1).strip():
            return m.group(1).strip()[:300]
    # GGML_ABORT("fatal error") and friends: "…/ggml-cpu/ops.cpp:5422: fatal error"
    m = re.search(r"([\w.+-]+\.(?:c|cc|cpp|cu|h|m|mm)):(\d+): ([^\n]+)", stderr)
    if m:
        return f"{m.group(3).strip()[:240]} at {m.group(1)}:{m.group(2)}"
    for pattern in (r"fatal error[: \t]*([^\n]*)", r"error[: \t]+([^\n]+)"):
        m = re.search(pattern, stderr)
        if m and m.group(1).strip():
            return m.group(1).strip()[:300]
    return None


def _parse_child(stdout: str) -> tuple[str | None, dict[str, Any] | None]:
    stage: str | None = None
    answer: dict[str, Any] | None = None
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        rest = line[len(MARK):].strip()
        if rest.startswith("stage "):
            stage = rest[len("stage "):].strip()
        elif rest.startswith("{"):
            try:
                answer = loads_json(rest)
            except ValueError:
                pass
    return stage, answer


def check_loads(
    path: str | os.PathLike[str],
    *,
    n_gpu_layers: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    use_cache: bool = True,
    target: str | os.PathLike[str] | None = None,
) -> LoadVerdict:
    """Whether llama.cpp loads ``path`` and decodes with it, probed in a child process.

    Args:
        path: a GGUF (for a split model: any part; part 1 is probed).
        n_gpu_layers: as the load will use it (None: the build's default); the CPU and
            GPU backends support different tensor types, so the answer is kept per kind.
        should_stop: polled every 0.1 s; True kills the child (LoadCancelledError).
        use_cache: consult and fill the verdict cache.
        target: for an MTP assistant (which llama.cpp runs only with its target's
            context), the target: the child runs the pair (:mod:`app.engine.probe`)
            and the verdict is kept for the two files' contents together.

    Returns:
        The :class:`LoadVerdict` (a refusal is a value, not an exception).

    Raises:
        ModelPathError: ``path`` is not a readable regular file.
        ModelLoadError: the probe could not give a verdict: it hung past
            :func:`probe_timeout_s`, was killed (out of memory?), or failed with a Python
            error (a bug in Tandem, not the file's fault).
        LoadCancelledError: ``should_stop`` returned True.
    """
    p = check_model_file(path)
    sp = split_parts(p)
    if sp is not None:
        p = check_model_file(sp[0])
    tp = check_model_file(target) if target is not None else None
    key: str | None = None
    if use_cache:
        _load_disk_memo()
        try:
            key = _verdict_key(p, n_gpu_layers, tp)
        except OSError as exc:
            raise ModelLoadError(f"Cannot read {p}: {exc.strerror or exc}.") from exc
        with _lock:
            hit = _verdicts.get(key)
        # a verdict remembered before the MTP head's (or the assistant's) cost was
        # measured: probe again (once), so it can be priced
        untimed = hit is not None and hit.loads and hit.mtp_cost_ratio is None and (
            hit.mtp == "ok" or (tp is not None and hit.mtp is None))
        if hit is not None and not untimed:
            return hit
    args = probe_command(p, n_gpu_layers=n_gpu_layers, target=tp)
    try:
        size = sum(q.stat().st_size for q in (*model_parts(p), *(model_parts(tp) if tp else ())) if q.exists())
    except OSError:
        size = 0
    limit = probe_timeout_s(size)
    t0 = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=_child_env())
    try:
        while True:
            try:
                out_b, err_b = proc.communicate(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() - t0 > limit:
                    raise ModelLoadError(
                        f"Could not load {p.name}: checking it with llama.cpp did not finish within "
                        f"{limit:.0f} s. The disk may be very slow, or llama.cpp hangs on this file."
                    ) from None
                if should_stop is not None and should_stop():
                    raise LoadCancelledError(f"Loading {p.name} was cancelled.") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    stdout = out_b.decode("utf-8", "replace")
    stderr = err_b.decode("utf-8", "replace")
    verdict = _verdict(p, proc.returncode, stdout, stderr)
    if key is not None and not _transient(verdict):
        _remember(key, verdict)
    return verdict


def _verdict(p: Path, rc: int, stdout: str, stderr: str) -> LoadVerdict:
    """The verdict from the child's exit status and output (see :mod:`app.engine.probe`).

    Raises:
        ModelLoadError: no verdict: a Python error in the child, or it was killed.
    """
    stage, answer = _parse_child(stdout)
    verdict: LoadVerdict
    if rc == EXIT_OK and answer is not None and answer.get("ok"):
        mtp, c = answer.get("mtp"), answer.get("mtp_cost_ratio")
        verdict = LoadVerdict("loads", mtp=str(mtp) if mtp is not None else None,
                              mtp_cost_ratio=float(c) if isinstance(c, (int, float))
                              and c >= 0 else None)
    elif _mtp_stage(stage) and not 0 <= rc < 256 and rc != -getattr(signal, "SIGKILL", 9):
        # the trunk loaded and decoded; only the MTP head took the child down
        said = _crash_detail(stderr)
        verdict = LoadVerdict("loads", mtp=f"llama.cpp crashed running it ({said or _signal_name(rc)})")
        log.info("llama.cpp crashed running the MTP head of %s:\n%s", p, stderr[-4000:])
    elif rc == EXIT_REFUSED and answer is not None:
        verdict = LoadVerdict("refused", answer.get("stage") or stage, str(answer.get("why") or "llama.cpp refused it"))
    elif 0 <= rc < 256:
        # A Python failure in the child (ours, 3, or the interpreter's own 1 for an
        # exception escaping before our handler): a crash of llama.cpp is a signal on
        # POSIX (a negative status) and an NTSTATUS above 255 on Windows.
        why = (answer or {}).get("why") or _last_exception_line(stderr) or f"exit status {rc}"
        log.error("the probe child failed on %s:\n%s", p, stderr[-4000:])
        raise ModelLoadError(
            f"Could not check {p.name}: Tandem's load check failed with a Python error ({why}). This "
            "is a bug in Tandem, not in the file; the log has the details."
        )
    elif rc == -getattr(signal, "SIGKILL", 9):
        raise ModelLoadError(
            f"Could not load {p.name}: the process checking it was killed while "
            f"{_stage_words(stage)}, usually because the computer ran out of memory."
        )
    else:
        said = _crash_detail(stderr)
        detail = f"{said}; {_signal_name(rc)}" if said else _signal_name(rc)
        verdict = LoadVerdict("crashed", stage or "load", detail)
        log.info("llama.cpp crashed probing %s (%s) at %s:\n%s", p, _signal_name(rc), stage, stderr[-4000:])
    return verdict


_TRANSIENT_RE = re.compile(
    r"out of memory|(failed|unable|cannot|could not) to allocate|cannot allocate|cudaMalloc|OutOfDeviceMemory",
    re.IGNORECASE,
)


def _mtp_stage(stage: str | None) -> bool:
    """The child's stage line is the MTP stage's: ``mtp``, or one of its chained heads
    (``mtp head 1``)."""
    return stage is not None and (stage == "mtp" or stage.startswith("mtp "))


def _transient(verdict: LoadVerdict) -> bool:
    """A refusal that may not hold next time (memory, a context the GPU had no room for):
    reported, never remembered as the file's verdict."""
    if verdict.loads:
        return False
    return verdict.stage == "context" and verdict.outcome == "refused" or bool(
        _TRANSIENT_RE.search(verdict.detail or "")
    )


def _last_exception_line(stderr: str) -> str | None:
    lines = [ln.strip() for ln in stderr.splitlines() if re.match(r"^\w+(\.\w+)*(Error|Exception)\b", ln.strip())]
    return lines[-1][:300] if lines else None


def _stage_words(stage: str | None) -> str:
    return {"load": "loading it", "context": "creating a context", "decode": "computing the first token"}.get(
        stage or "load", "loading it"
    )


def require_loads(
    path: str | os.PathLike[str],
    *,
    n_gpu_layers: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    target: str | os.PathLike[str] | None = None,
) -> None:
    """Raise unless :func:`check_loads` says the file loads.

    Raises:
        ModelLoadError: the file makes llama.cpp fail or crash (the message says why and
            at which stage), or the probe could not finish.
        ModelPathError, LoadCancelledError: as :func:`check_loads`.
    """
    p = Path(path)
    verdict = check_loads(p, n_gpu_layers=n_gpu_layers, should_stop=should_stop, target=target)
    if not verdict.loads:
        raise ModelLoadError(verdict.message(p.name))


def forget(paths: Sequence[Path] = ()) -> None:
    """Drop remembered verdicts (all, when ``paths`` is empty) from this process's memo;
    the disk cache is left alone (tests use this to force a fresh probe)."""
    with _lock:
        if not paths:
            _verdicts.clear()
            _identities.clear()
            return
    for p in paths:
        try:
            ident = content_identity(Path(p))
        except OSError:
            continue
        with _lock:
            for k in [k for k in _verdicts if k.startswith(ident)]:
                del _verdicts[k]
