"""Race-window fixtures: one Gemma 3 270M session and one tiny self-drafting session per
module (loading is the slow part; each test uses the session on the race thread only)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.session import Session, SessionConfig


@pytest.fixture(scope="module")
def gemma_session(gemma_path: Path) -> Iterator[Session]:
    """Gemma 3 270M, n_ctx 512, 2 threads, no draft model (races use prompt lookup)."""
    s = Session.open(SessionConfig(target_path=gemma_path, n_ctx=512, n_threads=2))
    yield s
    s.close()


@pytest.fixture(scope="module")
def tiny_session(tiny_target: Path) -> Iterator[Session]:
    """The synthetic tiny model drafting for itself (α = 1): fast and exact."""
    s = Session.open(SessionConfig(target_path=tiny_target, draft_path=tiny_target,
                                   n_ctx=512, n_threads=2))
    yield s
    s.close()
