"""How numbers are written for people: figures that may be missing, sizes, durations,
parameter counts; file names that are not valid Unicode; and JSON text read back
without the ``RecursionError`` of a file nested too deep (:func:`loads_json`).

The bottom of the app next to :mod:`app.options` (it imports nothing from it), so that
the window, the command line and the catalog's messages write a missing figure, a size
or a duration the same way. Sizes use decimal units, as the Hugging Face Hub shows them.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

class JSONTooDeepError(ValueError):
    """JSON nested deeper than Python's recursion limit lets :func:`loads_json` read."""


def loads_json(raw: str | bytes, **kwargs: Any) -> Any:
    """``json.loads(raw, **kwargs)``, where JSON nested too deep to parse (``[[[[…``
    50,000 deep, which ``json`` meets with a ``RecursionError``) is a ``ValueError``
    like any other text that is not JSON, so that a settings file, a manifest another
    app wrote or a server's answer is refused as unreadable, never a traceback.

    Raises:
        JSONTooDeepError: nested too deep (a ``ValueError``).
        ValueError: not JSON (``json.JSONDecodeError``, invalid UTF-8).
    """
    try:
        return json.loads(raw, **kwargs)
    except RecursionError:
        raise JSONTooDeepError("JSON nested too deep to read") from None


#: What a figure that was not measured (or cannot be computed) is shown as.
MISSING = "—"

#: Why a reply ended, in the words a message's footer (and an export) uses; ``stop``
#: (the model finished) needs none.
REASON_WORDS = {"length": "hit the token limit", "cancelled": "stopped",
                "interrupted": "interrupted (the app closed)", "error": "failed"}


#: control characters (Unicode category Cc: C0, DEL, C1) other than newline and tab
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NAMED = {"\r": "\\r", "\x0b": "\\v", "\x0c": "\\f"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    return _NAMED.get(ch) or f"\\x{ord(ch):02x}"


def printable(text: str) -> str:
    """``text`` with every control character except newline and tab written as a
    backslash escape (ESC as ``\\x1b``, CR as ``\\r``, C1's CSI as ``\\x9b``), so that it
    shows as text on a terminal instead of acting on it. Other characters are kept."""
    return _CONTROL.sub(_escape, text)


def valid_text(s: str) -> str:
    """``s`` as valid Unicode (for SQLite, JSON and labels): in a file name that is not
    UTF-8 (PEP 383 surrogate escapes, U+DC80–U+DCFF) each undecodable byte becomes the
    text ``\\xNN``; when ``s`` holds any other lone surrogate (an unpaired one from a
    Windows file name), every surrogate becomes ``\\uXXXX``. Valid text comes back as
    it is."""
    try:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


def or_dash(value: float | None, spec: str = "", unit: str = "", *, none: str = MISSING) -> str:
    """``value`` formatted with the format spec ``spec`` and followed by ``unit``, or
    ``none`` (an em dash) when it is None: ``or_dash(0.8123, ".2f")`` → ``"0.81"``,
    ``or_dash(12.0, ".0f", " ms")`` → ``"12 ms"``, ``or_dash(None, ".1f")`` → ``"—"``."""
    return none if value is None else f"{value:{spec}}{unit}"


def format_count(n: int | None) -> str:
    """``262,144``; ``—`` when unknown."""
    return or_dash(n, ",")


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


class DivergenceLike(Protocol):
    """The fields of :class:`app.engine.divergence.Divergence` the wording reads (this
    module sits below the engine, so it names the shape, not the class)."""

    # read-only properties: a frozen dataclass's fields match them, and narrower types
    # (a Literal for a str) do too
    @property
    def verdict(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def index(self) -> int | None: ...
    @property
    def off_text(self) -> str | None: ...
    @property
    def on_text(self) -> str | None: ...
    @property
    def off_probs(self) -> tuple[float, float] | None: ...
    @property
    def on_probs(self) -> tuple[float, float] | None: ...
    @property
    def sampled(self) -> bool: ...
    @property
    def logit_shift(self) -> float | None: ...
    @property
    def threshold(self) -> float: ...


def percent(p: float) -> str:
    """A probability for people: ``41%``, ``2.5%``, ``0.3%``, ``< 0.1%``."""
    v = 100.0 * p
    if v >= 9.95:
        return f"{v:.0f}%"
    if v >= 0.1:
        return f"{v:.1f}%"
    return "< 0.1%" if v > 0 else "0%"


def token_words(text: str | None) -> str:
    """A token's text in quotes with its spaces and newlines visible: ``' x'``, ``'\\n'``."""
    return repr(text if text is not None else "")


def shortened(text: str, most: int) -> str:
    """``text`` cut to at most ``most`` characters, ending with "…" when cut."""
    return text if len(text) <= most else text[: most - 1].rstrip() + "…"


def divergence_words(d: DivergenceLike) -> str:
    """The first difference of a plain and a speculative run, and the verdict, in words.

    For example: "At token 14 plain decoding chose ' >' (27%), speculation chose ' <'
    (27% in the plain run; 26% and 28% in the speculative run): a near-tie — the runs'
    preference between the two moved by 0.08 logits, within the 1.5 that counts as a
    floating-point difference between batch sizes." Sampled runs say "drew", that both
    drew the same random number, and that the number fell at the boundary between the two
    tokens (a near-tie of the draw, however unequal their chances). Probabilities are
    each run's final sampling distribution. ``identical`` runs: "identical to plain
    decoding, token for token".
    """
    if d.verdict == "identical" or d.index is None or d.off_probs is None or d.on_probs is None:
        return "identical to plain decoding, token for token"
    chose = "drew" if d.sampled else "chose"
    a, b = token_words(d.off_text), token_words(d.on_text)
    head = (
        f"At token {d.index + 1} plain decoding {chose} {a} ({percent(d.off_probs[0])}), "
        f"speculation {chose} {b} ({percent(d.off_probs[1])} in the plain run; "
        f"{percent(d.on_probs[0])} and {percent(d.on_probs[1])} in the speculative run)"
    )
    if d.sampled:
        head += ", with the same random number"
    shift = or_dash(d.logit_shift, ".2f")
    if d.verdict == "near-tie" and d.sampled:
        # the tie is the draw's: however unequal the two tokens' chances, the random number
        # fell where so small a shift moves the boundary between them
        return (f"{head}: a near-tie of the draw — the random number fell at the boundary "
                f"between the two tokens, which the runs' preference moved by {shift} "
                f"logits, within the {d.threshold:g} that counts as a floating-point "
                "difference between batch sizes.")
    if d.verdict == "near-tie":
        return (f"{head}: a near-tie — the runs' preference between the two moved by {shift} "
                f"logits, within the {d.threshold:g} that counts as a floating-point "
                "difference between batch sizes.")
    why = {
        "logit-shift": (f"the runs' preference between the two moved by {shift} logits, more "
                        f"than the {d.threshold:g} that counts as a floating-point difference "
                        "between batch sizes"),
        "unlisted-token": "one token was not among the other run's best candidates at all",
        "draw-out-of-step": "a choice does not follow the random number both runs drew: the "
                            "sampler is out of step",
    }.get(d.reason, "the measurement does not fit a floating-point difference")
    return f"{head}: suspect — {why}. Treat it as a bug until shown otherwise."


#: the draft-length rule of thumb in words (codes of app.engine.stats.draft_length_advice)
ADVICE_WORDS = {
    "larger-k": "Mean acceptance length τ is close to k + 1: a larger k would likely pay.",
    "other-drafter-or-smaller-k": ("Mean acceptance length τ stays below 2: try another "
                                   "drafter or a smaller k."),
}


def advice_words(code: str | None) -> str:
    """The draft-length advice for a code of ``draft_length_advice`` ("" for None or an
    unknown code)."""
    return ADVICE_WORDS.get(code or "", "")


#: What each note of a server launch command (``app.catalog.server_command.ServeNote``,
#: keyed by its value) says to the user, in the window and on the command line.
SERVE_NOTE_WORDS: dict[str, str] = {
    "vllm-needs-weights": (
        "vLLM loads no GGUF files: replace the model with its Hugging Face repository "
        "(safetensors weights) or a folder holding them."),
    "local-path": "A model is named by its path on this machine: copy it to the server "
                  "or change the path.",
    "suffix-approximated": (
        "llama.cpp has no suffix-tree drafter; ngram-mod, whose n-gram pool is shared "
        "by all requests, is the nearest."),
    "suffix-needs-arctic": "vLLM's suffix decoding needs `pip install arctic-inference` "
                           "on the server.",
    "mtp-needs-heads": "MTP needs a target whose weights carry multi-token-prediction "
                       "heads (DeepSeek-V3, Qwen3-Next, GLM-4.5, MiMo …).",
    "api-key-from-env": (
        "The server listens on every interface and asks for a key: set {key} "
        "(e.g. `export {key}=$(openssl rand -hex 24)`) before starting it, "
        "and give Tandem the same key when you connect."),
}


def serve_note_words(note: str, *, api_key_env: str) -> str:
    """The sentence for one launch-command note (its value); the API-key note names
    ``api_key_env``. An unknown note is returned as it is."""
    words = SERVE_NOTE_WORDS.get(note, note)
    return words.replace("{key}", api_key_env)
