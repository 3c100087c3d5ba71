"""Fixtures of the remote-engine tests: one llama-server for the whole folder, and a
misbehaving server (:class:`~tests.remote.broken_server.BrokenServer`) per module.

Without a built ``llama-server`` (``bench/build_llama_tools.sh``) the tests that need it
are skipped, except under CI (``CI=true``), where ``.ci/run`` builds it and its absence
is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.remote.broken_server import BrokenServer
from tests.remote.llama_server import SPEC_ARGS, LlamaServer, llama_server_binary


def require_llama_server() -> Path:
    """The llama-server binary, or a skip (a failure under CI)."""
    exe = llama_server_binary()
    if exe is None:
        message = ("llama-server is not built: run bench/build_llama_tools.sh "
                   "(it builds bench/.llama-tools/bin/llama-server)")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " — CI must build it (.ci/run)")
        pytest.skip(message)
    return exe


@pytest.fixture(scope="package")
def llama_server(smollm_path: Path) -> Iterator[LlamaServer]:
    """llama-server with SmolLM2-135M-Instruct, n-gram speculation and ``--metrics`` on
    127.0.0.1, one for all the tests of this folder (tests run one at a time, so a
    test's ``/metrics`` change is its own requests')."""
    exe = require_llama_server()
    with LlamaServer(exe, smollm_path, SPEC_ARGS) as server:
        yield server


@pytest.fixture
def fresh_llama_server(smollm_path: Path) -> Iterator[LlamaServer]:
    """A llama-server of the test's own (about half a second to start), for a test whose
    assertion needs the n-gram drafter to draft on :data:`PROMPT`. A prompt the shared
    server has already seen is served from its cached prefix, and that changes SmolLM2's
    greedy reply on some CPU builds: measured with the AVX-512 build, the prompt's first
    reply drafted 38 tokens and the same request repeated drafted none."""
    exe = require_llama_server()
    with LlamaServer(exe, smollm_path, SPEC_ARGS) as server:
        yield server


@pytest.fixture(scope="module")
def broken() -> Iterator[BrokenServer]:
    """A local server that misbehaves as its ``mode`` says, one per test module."""
    server = BrokenServer()
    yield server
    server.stop()
