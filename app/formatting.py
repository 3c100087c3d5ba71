"""How numbers are written for people: figures that may be missing, sizes, durations,
parameter counts.

The bottom of the app next to :mod:`app.options` (it imports nothing from it), so that
the window, the command line and the catalog's messages write a missing figure, a size
or a duration the same way. Sizes use decimal units, as the Hugging Face Hub shows them.
"""

from __future__ import annotations

#: What a figure that was not measured (or cannot be computed) is shown as.
MISSING = "—"


def or_dash(value: float | None, spec: str = "", unit: str = "", *, none: str = MISSING) -> str:
    """``value`` formatted with the format spec ``spec`` and followed by ``unit``, or
    ``none`` (an em dash) when it is None: ``or_dash(0.8123, ".2f")`` → ``"0.81"``,
    ``or_dash(12.0, ".0f", " ms")`` → ``"12 ms"``, ``or_dash(None, ".1f")`` → ``"—"``."""
    return none if value is None else f"{value:{spec}}{unit}"


def format_bytes(n: float) -> str:
    """``4.68 GB``, ``531 MB``, ``12 KB``, ``900 B`` (powers of 1000, like the Hugging Face Hub)."""
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            if unit == "B":
                return f"{int(n)} B"
            return f"{n:.2f} {unit}" if abs(n) < 10 else f"{n:.1f} {unit}" if abs(n) < 100 else f"{n:.0f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def format_parameters(n: int | None) -> str:
    """``268M``, ``7.62B``, ``135M``; an em dash when unknown."""
    if n is None or n <= 0:
        return MISSING
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            v = n / div
            return f"{v:.2f}{unit}" if v < 10 else f"{v:.1f}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return str(n)


def draft_length_words(k: int, adaptive: bool) -> str:
    """The draft length in words: ``k = 4``, or ``k ≤ 4 (adaptive)`` when the engine's
    cost-aware policy may draft fewer tokens per round."""
    return f"k ≤ {k} (adaptive)" if adaptive else f"k = {k}"
