"""Race-window fixtures: one chat service with Gemma 3 270M and one with the tiny
self-drafting model per module (loading is the slow part), and per test a bridge to the
service, as the chat window has."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.chat.events import ModelInfo
from app.chat.service import ChatService
from app.engine.session import Session, SessionConfig
from app.ui.service_bridge import ServiceBridge

Loaded = tuple[ChatService, ModelInfo]


def _loaded(config: SessionConfig) -> Iterator[Loaded]:
    service = ChatService()
    try:
        yield service, service.load(config).result(300)
    finally:
        service.shutdown()


@pytest.fixture(scope="module")
def gemma_loaded(gemma_path: Path) -> Iterator[Loaded]:
    """Gemma 3 270M, n_ctx 512, 2 threads, no draft model (races use prompt lookup)."""
    yield from _loaded(SessionConfig(target_path=gemma_path, n_ctx=512, n_threads=2))


@pytest.fixture(scope="module")
def tiny_loaded(tiny_target: Path) -> Iterator[Loaded]:
    """The synthetic tiny model drafting for itself (α = 1): fast and exact."""
    yield from _loaded(SessionConfig(target_path=tiny_target, draft_path=tiny_target,
                                     n_ctx=512, n_threads=2))


def _bridge(loaded: Loaded) -> Iterator[ServiceBridge]:
    bridge = ServiceBridge(loaded[0])
    yield bridge
    bridge.detach()
    loaded[0].cancel_all()


@pytest.fixture
def tiny_bridge(tiny_loaded: Loaded) -> Iterator[ServiceBridge]:
    yield from _bridge(tiny_loaded)


@pytest.fixture
def gemma_bridge(gemma_loaded: Loaded) -> Iterator[ServiceBridge]:
    yield from _bridge(gemma_loaded)


def session_of(bridge: ServiceBridge) -> Session:
    """The session the service holds (tests read it between jobs only)."""
    session = bridge.service._session
    assert session is not None
    return session
