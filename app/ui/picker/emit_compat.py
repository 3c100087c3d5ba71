"""A second PySide6 6.12.0 reference-count bug, neutralised like the first.

:mod:`app.ui.qt_compat` handles void methods dropping a reference to ``None``. On the
same PySide6 6.12.0 / Python 3.11, every ``Signal.emit()`` called from Python drops one
reference to ``True`` (the bool it returns) that it never took; after a few thousand
emits the count reaches zero and the interpreter aborts ("Fatal Python error:
bool_dealloc: deallocating True or False"), or corrupts memory first. The picker emits
a signal for every progress report, so it is hit within minutes. The fix is the one
qt_compat uses for ``None``: where the leak is measured, ``True`` and ``False`` are made
effectively immortal, as Python 3.12 (PEP 683) makes them.

This belongs in :func:`app.ui.qt_compat.apply_qt_workarounds`, next to the None fix (it
affects every signal emitted from Python, the generation worker's included); it lives
here until that module takes it over, and is harmless to apply twice.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

_PROBE_EMITS = 256
_IMMORTAL_REFCOUNT = 1 << 60
_applied = False


def true_references_dropped_per_emit() -> float:
    """How many references to True one ``Signal.emit()`` drops (0 when the bug is absent)."""
    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        probed = Signal()

    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(_PROBE_EMITS):
        probe.probed.emit()
    after = sys.getrefcount(True)
    return max(0.0, (before - after) / _PROBE_EMITS)


def apply_emit_workaround() -> bool:
    """Detect the True-reference leak of ``Signal.emit`` and neutralise it. Idempotent.

    Returns:
        True when the work-around was applied (now or earlier).
    """
    global _applied
    if _applied:
        return True
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False
    if true_references_dropped_per_emit() < 0.5:
        return False
    # ob_refcnt is the first field of every CPython object (a Py_ssize_t).
    for singleton in (True, False):
        ctypes.c_ssize_t.from_address(id(singleton)).value = _IMMORTAL_REFCOUNT
    _applied = True
    log.warning("PySide6 drops references to True in Signal.emit on this Python; True and "
                "False were made immortal to keep the app alive.")
    return True
