"""Text for the model picker's tables: counts, sizes, rules and predictions (no Qt).

Kept apart from the widgets so the wording can be tested without a window. Sizes use
:mod:`app.formatting` (decimal units, as the Hugging Face Hub shows them).
"""

from __future__ import annotations

from app.catalog.hub import DownloadProgress
from app.catalog.library import Source
from app.engine.drafter_kinds import DrafterPrediction
from app.engine.stats import predicted_speedup
from app.formatting import MISSING, format_bytes, format_duration
from app.options import DrafterInfo

#: The acceptance rate assumed for the "predicted speedup" column of the draft list.
#: α depends on the text (code and repetition: high; free prose: lower); 0.7 is a
#: middle value for a same-family draft. The column header says it is an assumption.
ASSUMED_ACCEPTANCE_RATE = 0.7

#: What each pairing rule (``PairCheck.rule``) checks, in the user's words.
RULE_LABELS: dict[str, str] = {
    "vocab_type": "Same vocabulary type",
    "bos_token": "Same BOS token",
    "eos_token": "Same EOS token",
    "vocab_size": "Vocabulary sizes within 128",
    "token_text": "Identical token texts from id 5",
    "readable": "File readable",
    "assistant_arch": "An assistant of the target's architecture",
    "hidden_size": "Takes the target's hidden size",
}

SOURCE_LABELS: dict[str, str] = {
    "models": "models folder",
    "folder": "added folder",
    "file": "opened file",
    "lmstudio": "LM Studio",
    "ollama": "Ollama",
    "llama.cpp": "llama.cpp cache",
    "jan": "Jan",
    "hf-cache": "Hugging Face cache",
}


def source_label(source: Source | str) -> str:
    return SOURCE_LABELS.get(source, source)


def rule_label(rule: str) -> str:
    return RULE_LABELS.get(rule, rule)


def format_cost_ratio(c: float | None) -> str:
    """The estimated draft cost ratio: ``c ≈ 0.39``; ``—`` when a size is unknown."""
    return MISSING if c is None else f"≈ {c:.2f}"


def format_predicted_speedup(c: float | None, k: int, alpha: float = ASSUMED_ACCEPTANCE_RATE) -> str:
    """E(α, k) / (1 + c·k) as ``1.9×`` (``—`` without c). See :func:`predicted_speedup`."""
    if c is None:
        return MISSING
    return f"{predicted_speedup(alpha, k, c):.1f}×"


def prediction_status(p: DrafterPrediction) -> str:
    """A drafter's predicted gain for the picker's status column: ``predicted gain (α
    0.85 assumed, k = 3, c measured)`` or ``no gain predicted: its head costs too much here``."""
    if p.helps:
        return f"predicted gain (α {p.acceptance_rate:.2f} assumed, k = {p.k}, c measured)"
    return "no gain predicted: drafting costs too much here"


def prediction_words(info: DrafterInfo, p: DrafterPrediction) -> str:
    """The prediction in a sentence: ``Predicted speedup 1.6× at k = 3: α = 0.85 assumed
    (the rate DeepSeek-V3 reports for its MTP head), c = 0.33 measured by the load
    check.``"""
    source = f" {p.cost_source}" if p.cost_source else ""
    return (f"Predicted speedup {p.speedup:.1f}× with {info.words} at k = {p.k}: "
            f"α = {p.acceptance_rate:.2f} assumed, c = {p.cost_ratio:.2f}{source} "
            "(E(α, k) / (1 + c·k)).")


def format_download(progress: DownloadProgress | None) -> str:
    """``1.23 GB of 4.68 GB · 12.3 MB/s · 4 min 40 s left`` (parts unknown yet are left out)."""
    if progress is None:
        return "waiting"
    parts = [
        f"{format_bytes(progress.downloaded)} of {format_bytes(progress.total)}"
        if progress.total is not None else format_bytes(progress.downloaded)
    ]
    if progress.phase == "downloading" and progress.speed > 0:
        parts.append(f"{format_bytes(progress.speed)}/s")
        if progress.eta is not None:
            parts.append(f"{format_duration(progress.eta)} left")
    return " · ".join(parts)
