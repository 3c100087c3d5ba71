"""The CPU the engine shares with the rest of the desktop: free cores and the thread count.

llama.cpp's CPU backend splits every pass over its threads and makes them wait for each
other at each operation's barrier. When another process takes a core, one of those
threads is preempted and the others wait for it at every barrier: measured on a 2-core
machine (Gemma 3 270M Q4_K_M, plain decoding), 77 tok/s with 2 threads when quiet and
30 tok/s with one busy process beside them, against 59 tok/s with 1 thread
(``bench/thread_load.py``, docs/benchmarks.md). So the engine runs as many threads as
there are cores that other processes leave free, and :class:`ThreadGovernor` keeps it so
while the desktop's load changes.

Other processes' load comes from ``/proc/stat`` (all CPU time that is not idle) less this
process's own CPU time (:func:`os.times`); where ``/proc/stat`` does not exist (macOS,
Windows) it is unknown (None), the default uses every usable core and the governor does
nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass


def usable_cores() -> int:
    """Logical CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_cap(cores: int | None = None) -> int:
    """The most decoding threads worth running on ``cores`` logical CPUs: all of them up
    to 4, else half (beyond 4, the rest are usually hyper-threads of the same cores)."""
    n = usable_cores() if cores is None else cores
    return n if n <= 4 else max(4, n // 2)


@dataclass(frozen=True, slots=True)
class CpuSample:
    """One reading: ``busy`` CPU-seconds of the whole machine, ``own`` of this process,
    at ``at`` (monotonic seconds)."""

    busy: float
    own: float
    at: float


def cpu_sample() -> CpuSample | None:
    """Read the machine's and this process's CPU time now; None without ``/proc/stat``."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
    # Niced work counts too: measured, a niced test run beside a 2-thread decode still
    # cut it from 75 to 1–20 tok/s (llama.cpp's threads wait for each other).
    busy = sum(fields[:8]) - fields[3] - fields[4]
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system
    return CpuSample(busy / os.sysconf("SC_CLK_TCK"), own, time.monotonic())


def other_cores(start: CpuSample | None, end: CpuSample | None) -> float | None:
    """Mean number of cores that other processes kept busy between two samples (≥ 0);
    None when either sample is missing or no time passed."""
    if start is None or end is None or end.at <= start.at:
        return None
    return max(0.0, ((end.busy - start.busy) - (end.own - start.own)) / (end.at - start.at))


def measure_other_cores(seconds: float = 0.25) -> float | None:
    """Other processes' load over the next ``seconds`` (this thread sleeps meanwhile)."""
    start = cpu_sample()
    if start is None:
        return None
    time.sleep(seconds)
    return other_cores(start, cpu_sample())


def free_threads(other: float | None, cap: int, cores: int | None = None) -> int:
    """Threads for the cores other work leaves free: ⌊cores − other + 0.35⌋, within
    [1, cap]; ``cap`` when the load is unknown.

    The 0.35 keeps a core that other work uses for a third of the time or less: a
    thread there loses less to waiting than the core adds (with one busy process on 2
    cores, 1 thread ran 54 tok/s and 2 threads 13–26).
    """
    if other is None:
        return cap
    n = usable_cores() if cores is None else cores
    return max(1, min(cap, int(n - other + 0.35)))


class ThreadGovernor:
    """Between rounds, sets the target's thread count to the cores other work leaves free.

    Every :attr:`interval` seconds it measures other processes' load since the previous
    reading; when two readings in a row ask for the same count that differs from the
    current one, :meth:`poll` returns it (two readings, so that a short burst does not
    flip the count back and forth).

    Args:
        cap: the most threads (the thread count the context was created with).
        sample: the CPU reading (tests pass a fake); :func:`cpu_sample` by default.
        cores: logical CPUs (default: :func:`usable_cores`).
        adjust: False: only measure the load (the user fixed the thread count).
        clock: monotonic seconds, the clock of :class:`CpuSample`.
    """

    interval = 0.5

    def __init__(self, cap: int, sample: Callable[[], CpuSample | None] = cpu_sample,
                 cores: int | None = None, *, adjust: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cap = max(1, cap)
        self.adjust = adjust
        self._clock = clock
        self.cores = usable_cores() if cores is None else cores
        self._sample = sample
        self._last = sample()
        self._pending: int | None = None
        #: other processes' load at the latest reading, cores (None: unknown)
        self.other: float | None = None

    def poll(self, current: int) -> int | None:
        """The thread count to switch to now, or None to keep ``current``."""
        last = self._last
        if last is None or self._clock() - last.at < self.interval:
            return None
        sample = self._sample()
        self._last = sample
        self.other = other_cores(last, sample)
        want = free_threads(self.other, self.cap, self.cores)
        if not self.adjust or want == current:
            self._pending = None
            return None
        if self._pending == want:
            self._pending = None
            return want
        self._pending = want
        return None
