"""Ctrl-C as the Stop button: it sets a cancel event instead of raising
KeyboardInterrupt wherever Python happens to be (inside a ctypes callback of llama.cpp
the exception is printed and dropped, and a run goes on as if nothing happened). Work
polls the event: a load stops with "cancelled", a reply ends within one round and the
figures of what finished are still printed; the command exits 130 (docs/cli.md)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def ctrl_c_sets(cancel: threading.Event) -> Iterator[threading.Event]:
    """Within the block, Ctrl-C (SIGINT) sets ``cancel``; the handler before it comes
    back after (a second Ctrl-C changes nothing). Main thread only (Python's rule for
    signal handlers)."""
    previous = signal.signal(signal.SIGINT, lambda _sig, _frame: cancel.set())
    try:
        yield cancel
    finally:
        signal.signal(signal.SIGINT, previous)


def with_cancel(run: Callable[[threading.Event], int]) -> int:
    """``run(cancel)`` with Ctrl-C setting ``cancel``; 130 when it was pressed and
    ``run`` returned 0, else what ``run`` returned."""
    cancel = threading.Event()
    with ctrl_c_sets(cancel):
        status = run(cancel)
    return 130 if cancel.is_set() and status == 0 else status
