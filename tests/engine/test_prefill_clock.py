"""The prefill's time left: fitted to the chunks' times, a token's cost growing with its
position (attention over the tokens before it)."""

from __future__ import annotations

import pytest

from app.engine.events import PrefillClock


def _chunks(clock: PrefillClock, a: float, b: float, start: int, n: int, chunk: int) -> None:
    for first in range(start, start + n, chunk):
        size = min(chunk, start + n - first)
        clock.add(first, size, sum(a + b * p for p in range(first, first + size)))


def test_a_cost_that_grows_with_position_is_recovered_from_two_chunks() -> None:
    """Two chunks of a + b·p per token say exactly what the rest takes, where the average
    rate so far says less than half of it."""
    a, b = 0.005, 2.4e-6  # SmolLM2 135M at one thread, the fit to bench/prefill_estimate.py
    clock = PrefillClock()
    _chunks(clock, a, b, 0, 1024, 512)
    truth = sum(a + b * p for p in range(1024, 8175))
    assert clock.seconds_left(1024, 8175) == pytest.approx(truth, rel=1e-9)
    average = sum(a + b * p for p in range(1024)) / 1024 * (8175 - 1024)
    assert average < 0.5 * truth  # what the average-rate rule says


def test_a_cached_prefix_puts_the_chunks_further_along() -> None:
    clock = PrefillClock()
    _chunks(clock, 0.001, 1e-6, 3000, 1536, 512)
    truth = sum(0.001 + 1e-6 * p for p in range(4536, 6000))
    assert clock.seconds_left(4536, 6000) == pytest.approx(truth, rel=1e-9)


def test_no_chunk_one_chunk_noise_and_the_end() -> None:
    clock = PrefillClock()
    assert clock.seconds_left(0, 100) is None  # nothing read yet
    clock.add(0, 100, 1.0)
    assert clock.seconds_left(100, 300) == pytest.approx(2.0)  # one chunk: its rate
    clock.add(100, 100, 0.5)  # a later chunk was faster (the machine got quiet): b < 0
    assert clock.seconds_left(200, 400) == pytest.approx(200 * 1.5 / 200)  # the average
    assert clock.seconds_left(400, 400) == 0.0
    clock.add(200, 0, 3.0)  # an empty chunk counts for nothing
    assert clock.seconds_left(200, 400) == pytest.approx(1.5)
