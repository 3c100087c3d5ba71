"""Rolling decode speed from streamed text events (no Qt; unit-testable).

The engine reports, with each piece of released text, when it was released and how many
reply tokens had been emitted (:class:`app.engine.events.TextDelta` ``t`` and
``n_tokens``). The rolling rate is tokens per second over the most recent ``window``
seconds of those samples; when nothing arrives for longer than the window (a server that
stalls), the silence counts too, so the rate falls instead of holding its last value.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class RollingRate:
    """Tokens per second over the last ``window`` seconds.

    Args:
        window: seconds of history to average over (> 0).
        clock: the monotonic clock the silence since the last sample is read from.
    """

    def __init__(self, window: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if window <= 0:
            raise ValueError("window must be > 0 seconds")
        self.window = window
        self._clock = clock
        self._samples: deque[tuple[float, int]] = deque()
        self._last_arrival = 0.0

    def reset(self) -> None:
        self._samples.clear()

    def add(self, t: float, n_tokens: int) -> None:
        """Record that ``n_tokens`` reply tokens existed at time ``t`` (seconds)."""
        if self._samples and t < self._samples[-1][0]:
            self.reset()
        self._samples.append((t, n_tokens))
        self._last_arrival = self._clock()
        while len(self._samples) > 2 and t - self._samples[1][0] >= self.window:
            self._samples.popleft()

    def silence(self) -> float:
        """Seconds since the last sample arrived (0 before the first)."""
        return max(0.0, self._clock() - self._last_arrival) if self._samples else 0.0

    def rate(self) -> float | None:
        """Tokens/s over the window, the silence past one window included; None before
        two samples exist."""
        if len(self._samples) < 2:
            return None
        (t0, n0), (t1, n1) = self._samples[0], self._samples[-1]
        if t1 - t0 <= 0:
            return None
        return (n1 - n0) / (t1 - t0 + max(0.0, self.silence() - self.window))
