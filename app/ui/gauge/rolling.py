"""Rolling decode speed from streamed text events (no Qt; unit-testable).

The engine reports, with each piece of released text, when it was released and how many
reply tokens had been emitted (:class:`app.engine.events.TextDelta` ``t`` and
``n_tokens``). The rolling rate is tokens per second over the most recent ``window``
seconds of those samples.
"""

from __future__ import annotations

from collections import deque


class RollingRate:
    """Tokens per second over the last ``window`` seconds.

    Args:
        window: seconds of history to average over (> 0).
    """

    def __init__(self, window: float = 1.0) -> None:
        if window <= 0:
            raise ValueError("window must be > 0 seconds")
        self.window = window
        self._samples: deque[tuple[float, int]] = deque()

    def reset(self) -> None:
        self._samples.clear()

    def add(self, t: float, n_tokens: int) -> None:
        """Record that ``n_tokens`` reply tokens existed at time ``t`` (seconds)."""
        if self._samples and t < self._samples[-1][0]:
            self.reset()
        self._samples.append((t, n_tokens))
        while len(self._samples) > 2 and t - self._samples[1][0] >= self.window:
            self._samples.popleft()

    def rate(self) -> float | None:
        """Tokens/s over the window, or None before two samples exist."""
        if len(self._samples) < 2:
            return None
        (t0, n0), (t1, n1) = self._samples[0], self._samples[-1]
        if t1 - t0 <= 0:
            return None
        return (n1 - n0) / (t1 - t0)
