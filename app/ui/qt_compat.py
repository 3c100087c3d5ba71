"""Work-arounds for bugs in the Qt bindings, applied once at start-up.

PySide6 6.12.0 on Python 3.11 and older drops references it never took:

* every wrapped C++ method that returns ``void`` (``QLabel.setText``,
  ``QWidget.setEnabled``, ``QTimer.start``, ``QCoreApplication.processEvents`` …) drops
  one reference to ``None``;
* every Python ``emit`` of a signal with a ``bool`` argument drops one reference to
  ``True`` (whatever the value emitted).

On Python ≥ 3.12 these objects are immortal (PEP 683) and nothing happens; on 3.11 a
count reaches zero after a few thousand calls and the interpreter aborts ("Fatal Python
error: none_dealloc: deallocating None" / "bool_dealloc"). PySide6 6.11.3 does not have
the bug. A version pin cannot be relied on in users' environments, so the leak is
detected by measurement and, where present, ``None``, ``True`` and ``False`` are made
effectively immortal the way Python 3.12 does it: their reference counts are set so high
that no process lifetime can use them up.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

_PROBE_CALLS = 256
_IMMORTAL_REFCOUNT = 1 << 60  # ~36,000 years at a million leaked references a second
_applied = False


def none_references_dropped_per_call() -> float:
    """How many references to None one void PySide6 call drops (0 when the bug is absent).

    Measured with ``QObject.setObjectName``; other threads may touch None meanwhile, so
    the result is only an estimate (the bug gives exactly 1.0).
    """
    from PySide6.QtCore import QObject

    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(_PROBE_CALLS):
        probe.setObjectName("probe")
    after = sys.getrefcount(None)
    return max(0.0, (before - after) / _PROBE_CALLS)


def true_references_dropped_per_emit() -> float:
    """How many references to True one Python ``emit`` of a bool signal drops."""
    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        flag = Signal(bool)

    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(_PROBE_CALLS):
        probe.flag.emit(False)
    after = sys.getrefcount(True)
    return max(0.0, (before - after) / _PROBE_CALLS)


def apply_qt_workarounds() -> bool:
    """Detect the None/True reference leaks and neutralise them. Idempotent.

    Returns:
        True when the work-around was applied (now or earlier).
    """
    global _applied
    if _applied:
        return True
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False
    if none_references_dropped_per_call() < 0.5 and true_references_dropped_per_emit() < 0.5:
        return False
    # ob_refcnt is the first field of every CPython object (a Py_ssize_t).
    for singleton in (None, True, False):
        ctypes.c_ssize_t.from_address(id(singleton)).value = _IMMORTAL_REFCOUNT
    _applied = True
    try:
        import PySide6

        version = PySide6.__version__
    except Exception:  # pragma: no cover
        version = "?"
    log.warning("PySide6 %s drops references to None/True on this Python; they were made "
                "immortal to keep the app alive (use PySide6 6.11.3, or Python 3.12+).",
                version)
    return True
