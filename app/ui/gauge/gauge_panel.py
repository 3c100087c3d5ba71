"""The live speculation gauge panel.

Inputs arrive as often as the engine produces them (text with every round, statistics
every 0.1 s), but the panel repaints from a 100 ms timer and only when something changed,
so it never repaints more than 10 times a second. While a reply streams it shows that
reply; afterwards it keeps the last reply's final figures.

Figures (the field's terms, :mod:`app.engine.stats`): decode tok/s rolling over the last second and for the whole
reply; acceptance rate α; mean acceptance length τ; acceptance by draft position 1..k;
draft cost ratio c; predicted speedup E(α, k) / (1 + c·k) next to the measured speedup,
which is this reply's decode rate against plain decoding timed under the same conditions
(:attr:`app.engine.stats.SpecStats.measured_speedup`: one-token passes of this reply, or
of the last seconds at the same thread count and load), with the spread of that baseline.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPaintEvent, QPen, QPolygonF
from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QGridLayout,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.engine.stats import (
    MIN_DRAFT_ROUNDS_FOR_SPEEDUP,
    MIN_VERIFIED_FOR_ESTIMATE,
    MIN_VERIFIED_FOR_SPEEDUP,
    SpecStats,
    best_draft_length,
    draft_length_advice,
)
from app.engine.cpu import free_threads, usable_cores
from app.formatting import MISSING, advice_words, draft_length_words, or_dash
from app.options import K_MAX, DrafterNeeds, SpecMode
from app.remote.figures import tokens_per_pass
from app.ui.gauge.rolling import RollingRate
from app.ui.labels import Label

log = logging.getLogger(__name__)

REFRESH_MS = 100
_ACCENT = QColor("#2b6cb0")
_DRAFT = QColor("#f0a63a")
_MUTED = QColor("#8a94a3")


def alpha_text(s: SpecStats, streaming: bool) -> str:
    """The acceptance rate in words: ``75%  (30/40)``; with fewer than
    :data:`~app.engine.stats.MIN_VERIFIED_FOR_ESTIMATE` draft tokens also its 95 %
    interval, so one lucky token does not read as 100 %; without drafts, why there is no
    figure."""
    alpha = s.acceptance_rate
    if alpha is None and s.declined:
        return (f"{MISSING} (none of {s.declined} draft{'s' if s.declined != 1 else ''} "
                "was worth checking on this machine)")
    if alpha is None:
        return (f"{MISSING} (nothing drafted yet)" if streaming
                else f"{MISSING} (nothing was drafted in this reply)")
    interval = s.acceptance_interval
    if s.few_drafts and interval is not None:
        lo, hi = interval
        return (f"{alpha * 100:.0f}%  ({s.accepted}/{s.verified}; few draft tokens, 95% range "
                f"{lo * 100:.0f}–{hi * 100:.0f}%)")
    return f"{alpha * 100:.0f}%  ({s.accepted}/{s.verified})"


def context_text(s: SpecStats) -> str:
    """``1,234 / 4,096 tokens (30%)``: the reply's prompt and its own tokens in the
    context window it ran in; a dash where the window is not known."""
    if s.n_ctx <= 0 or s.prompt_tokens <= 0:
        return MISSING
    used = min(s.prompt_tokens + s.emitted, s.n_ctx)  # the last token is not kept
    return f"{used:,} / {s.n_ctx:,} tokens ({min(100, round(used * 100 / s.n_ctx))}%)"


def remote_rows(s: SpecStats, remote: dict[str, Any]) -> dict[str, str]:
    """The gauge's figures for a reply from a remote server (``remote``:
    ``stats.extra["remote"]``, :func:`app.remote.session.remote_extra`): tok/s and TTFT
    as Tandem measured them on the stream, α and τ as the server reported them, with
    their scope; what servers do not report says so instead of showing zeros."""
    figures = remote.get("figures")
    rows = {"reply_tps": or_dash(remote.get("decode_tps"), ".1f", " tok/s"),
            "e2e_tps": or_dash(s.end_to_end_tps, ".1f", " tok/s"),
            "cost": f"{MISSING} (servers do not report it)",
            "predicted": f"{MISSING} (needs c)",
            "measured": f"{MISSING} (bench the server with speculation off)",
            "ttft": or_dash(s.ttft if s.emitted else None, ".2f", " s"),
            # the server's window where it says how large it is
            "context": context_text(s) if s.n_ctx > 0 and s.prompt_tokens > 0
            else f"{MISSING} (the server's own)"}
    if figures is None:
        nothing = f"{MISSING} (the server reports nothing)"
        rows.update(alpha=nothing, tau=nothing)
        return rows
    scope = " · server-wide" if figures.get("scope") == "server-wide" else ""
    alpha = figures.get("acceptance_rate")
    rows["alpha"] = (f"{MISSING} (nothing was drafted)" if alpha is None else
                     f"{alpha * 100:.0f}%  ({figures['accepted']}/{figures['draft_tokens']}"
                     f"{scope})")
    rows["tau"] = remote_tau_text(s, remote, figures)
    return rows


def remote_tau_text(s: SpecStats, remote: dict[str, Any], figures: dict[str, Any]) -> str:
    """τ of a remote reply as the gauge defines it, tokens per target pass over every
    round (:func:`app.remote.figures.tokens_per_pass`), then the server's τ per drafting
    round (1 + accepted / drafts), named as such; that alone where the first cannot be
    had."""
    if figures.get("acceptance_rate") is None:
        return f"{MISSING} (nothing was drafted)"
    per_draft = figures.get("mean_acceptance_length")
    drafting = "" if per_draft is None else f"{per_draft:.2f} per drafting round"
    if (per_pass := tokens_per_pass(s.emitted, remote)) is not None:
        return f"{per_pass:.2f} tok/round" + (f" ({drafting})" if drafting else "")
    if not drafting:
        return f"{MISSING} (the server does not count rounds)"
    return drafting + (" · server-wide" if figures.get("scope") == "server-wide" else "")


def remote_title(remote: dict[str, Any]) -> str:
    """``llama-server b1-0c1e570 · ngram-simple · k = 48`` (``method unknown`` when the
    server does not say)."""
    engine = remote.get("engine", "server") + (f" {remote['version']}" if remote.get("version")
                                               else "")
    method = remote.get("method") or "method unknown"
    k = remote.get("draft_max")
    return f"{engine} · {method}" + (f" · k = {k}" if k else "")


PREDICTION_ASSUMES = ("The prediction assumes the target checks a draft in the time of one "
                      "plain step.")


def prediction_caveat(s: SpecStats) -> str:
    """The note beside a prediction on a CPU: what a check of the draft cost in this
    reply (:attr:`~app.engine.stats.SpecStats.verification_cost`) when it is measured."""
    cost = s.verification_cost
    if cost is None:
        return (PREDICTION_ASSUMES + " On a CPU a batch costs more, so expect the measured "
                "speedup to be lower.")
    size, steps = cost
    then = ("so expect the measured speedup to be lower" if steps >= 1.5 else
            "close to that assumption")
    return (PREDICTION_ASSUMES + f" In this reply the target's checks of {size:.1f} tokens "
            f"on average took {steps:.1f} one-token steps each, {then}.")


def _reply_note(stats: SpecStats, note: str | None = None, threads_auto: bool = True) -> str:
    """The gauge's note under a finished reply: ``note`` (or why speculation fell back),
    the draft-length rule of thumb when it applies (:func:`reply_advice`), and, with a
    thread count fixed in the settings (not ``threads_auto``), :func:`threads_note`."""
    notes = [note or stats.fallback_reason or "", declined_note(stats), undrafted_note(stats),
             catch_up_note(stats),
             advice_words(reply_advice(stats)), "" if threads_auto else threads_note(stats)]
    return "\n".join(n for n in notes if n)


def undrafted_note(stats: SpecStats) -> str:
    """Why a reply of a drafter with a model (a draft model, MTP) under the adaptive
    draft length drafted nothing: the policy expected no draft to beat plain decoding
    at that model's measured cost and acceptance here; else ""."""
    info = stats.mode.info
    if (info is None or info.needs is DrafterNeeds.NOTHING or not stats.adaptive
            or stats.draft_rounds or not stats.emitted):
        return ""
    return ("The adaptive draft length drafted nothing in this reply: at the draft's "
            "measured cost and acceptance on this machine, no draft was expected to be "
            "faster than plain decoding (untick \u201cadaptive\u201d to draft every round).")


#: the share of a reply's decode time a draft model's catch-up must reach to be noted
CATCH_UP_NOTED = 0.1


def catch_up_note(stats: SpecStats) -> str:
    """When a draft model or MTP head spent at least :data:`CATCH_UP_NOTED` of the
    reply's decode time catching up with the tokens of rounds that drafted nothing (time
    that is in the reply's rate but in no draft step, so not in c), how much; else ""."""
    t, decode = stats.draft_catch_up_time, stats.decode_time
    if decode <= 0 or t < CATCH_UP_NOTED * decode:
        return ""
    who = "The MTP head" if stats.mode.needs is DrafterNeeds.MTP_HEAD else "The draft model"
    return (f"{who} spent {t:.2f} s ({t / decode:.0%} of this reply's time) "
            "catching up with text it had not read (the rounds that drafted nothing), "
            "before it could draft again.")


def declined_note(stats: SpecStats) -> str:
    """Why a reply whose drafter proposed tokens checked none (the adaptive policy found
    no check worth its measured cost here), else ""."""
    if stats.verified or not stats.declined:
        return ""
    drafts = f"{stats.declined} draft{'s' if stats.declined != 1 else ''}"
    return (f"The drafter proposed {drafts}, but on this machine a check was measured to "
            "cost more than the draft was expected to save, so the adaptive draft length "
            "checked none (untick \u201cadaptive\u201d to check every draft).")


def threads_note(stats: SpecStats, cores: int | None = None) -> str:
    """When the reply ended with more threads than the cores other programs left free
    (:func:`~app.engine.cpu.free_threads`), as a thread count fixed in the settings
    does (Auto follows the load): why it was slow and what to change; "" otherwise.
    ``cores``: logical CPUs (default this process's)."""
    other, n = stats.other_cores, stats.n_threads
    if other is None or n <= 1:
        return ""
    cores = usable_cores() if cores is None else cores
    if n <= free_threads(other, n, cores):
        return ""
    return (f"Other programs kept {other:.1f} of {cores} cores busy: with {n} threads each "
            "step waits for the busy core. CPU threads: Auto (Sampling → Model) uses the "
            "free cores.")


def rate_words(tps: float) -> str:
    """A rate with the digits it needs: ``74``, ``7.4``, ``0.31`` (a slow plain step must
    not read as 0 tok/s)."""
    return f"{tps:.0f}" if tps >= 9.5 else f"{tps:.1f}" if tps >= 0.95 else f"{tps:.2f}"


def measured_speedup_text(s: SpecStats, streaming: bool) -> str:
    """The measured speedup in words: ``1.93×  (1.88–1.99; plain 74 tok/s, timed in this
    reply)``, or why there is none (speculation off, too few drafts, no plain pass under
    these conditions yet)."""
    if s.mode is SpecMode.OFF:
        return "1× (off)"
    x = s.measured_speedup
    if x is None:
        if s.draft_rounds < MIN_DRAFT_ROUNDS_FOR_SPEEDUP or s.verified < MIN_VERIFIED_FOR_SPEEDUP:
            return (f"{MISSING} (too few drafts yet)" if streaming
                    else f"{MISSING} (too few drafts to measure: {s.draft_rounds} drafting "
                         f"rounds, {s.verified} draft tokens)")
        return (f"{MISSING} (timing plain steps when the reply ends)" if streaming
                else f"{MISSING} (no plain step was timed under these conditions)")
    base = s.plain_step_time
    where = "timed in this reply" if s.plain_step_source == "reply" else "timed just before, same load"
    spread = ""
    r = s.measured_speedup_range
    if r is not None and r[1] - r[0] >= 0.005:
        spread = f"{min(r):.2f}–{max(r):.2f}; "
    plain = f"plain {rate_words(1.0 / base)} tok/s, " if base else ""
    return f"{x:.2f}×  ({spread}{plain}{where})"


#: below this font size (points, or pixels for a pixel-sized font) the bar values are
#: left to the tooltip
MIN_LABEL_SIZE = 6.0


def bar_labels(slot: float, value_width: float, number_width: float, font_size: float
               ) -> tuple[float | None, int]:
    """How to label bars ``slot`` pixels apart so that labels never run into each other.

    Args:
        slot: pixels per bar; value_width: width of "100" in the font, pixels;
            number_width: width of the largest position number, pixels; font_size: the
            font's size (points, or pixels for a pixel-sized font; the result's unit).

    Returns:
        (font size for the values, shrunk to fit their slot; None below
        :data:`MIN_LABEL_SIZE`: no values, the tooltip has them; write the position
        numbers 1, 1 + step, 1 + 2·step, …).
    """
    value_size: float | None = font_size
    need = value_width + 3
    if slot < need:
        value_size = font_size * slot / need
        if value_size < MIN_LABEL_SIZE:
            value_size = None
    step = max(1, math.ceil((number_width + 4) / slot)) if slot > 0 else 1
    return value_size, step


def reply_advice(s: SpecStats) -> str | None:
    """The draft-length advice code for one reply, local or remote (None: none).

    Locally it rests on τ per drafting round, 1 + accepted / drafting rounds (as a
    remote server counts it): the reply's own τ also counts the rounds in which nothing
    was drafted or the adaptive policy verified nothing, which says nothing about k or
    the drafter's fit. "A larger k" is given only where the reply's own α and c agree
    (:func:`~app.engine.stats.best_draft_length` above k): with a dear drafter (c near
    1, a draft model nearly as large as its target) whole acceptance does not make a
    longer draft pay."""
    remote = s.extra.get("remote")
    if isinstance(remote, dict):
        return remote.get("advice")
    if s.mode is SpecMode.OFF or not s.draft_rounds:
        return None
    advice = draft_length_advice(1 + s.accepted / s.draft_rounds, s.draft_max, s.draft_rounds)
    alpha, c = s.acceptance_rate, s.draft_cost_ratio
    if advice == "larger-k" and alpha is not None and c is not None and (
            best_draft_length(alpha, c, K_MAX) <= s.draft_max):
        return None
    return advice


class AcceptanceBarsWidget(QWidget):
    """Acceptance rate per draft position 1..k as small vertical bars (0–100 %)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._rates: list[float | None] = []
        self.setMinimumHeight(74)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_positions(self, accepted_at: Sequence[int], verified_at: Sequence[int]) -> None:
        """Per-position counts from :class:`SpecStats`; a position never verified is None."""
        self._rates = [a / v if v else None
                       for a, v in zip(accepted_at, verified_at, strict=False)]
        self.setToolTip("\n".join(
            f"position {i + 1}: {rate * 100:.0f}% accepted ({a} of {v})"
            for i, (rate, a, v) in enumerate(zip(self._rates, accepted_at, verified_at))
            if rate is not None))
        self.update()

    @property
    def rates(self) -> list[float | None]:
        return list(self._rates)

    def paintEvent(self, event: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        r = self.rect().adjusted(2, 2, -2, -2)
        label_h = 14
        chart = QRectF(r.left(), r.top() + label_h, r.width(), r.height() - 2 * label_h)
        p.setPen(QPen(QColor("#d5dbe3"), 1))
        p.drawLine(chart.bottomLeft(), chart.bottomRight())
        n = len(self._rates)
        if n == 0:
            p.setPen(_MUTED)
            p.drawText(r, Qt.AlignmentFlag.AlignCenter, "no drafts yet")
            return
        slot = chart.width() / n
        bar_w = min(28.0, slot * 0.7)
        base = p.font()
        fm = QFontMetricsF(base)
        size = base.pointSizeF() if base.pointSizeF() > 0 else float(base.pixelSize())
        value_size, step = bar_labels(slot, fm.horizontalAdvance("100"),
                                      fm.horizontalAdvance(str(n)), size)
        value_font = QFont(base)
        if value_size is not None and value_size != size:
            if base.pointSizeF() > 0:
                value_font.setPointSizeF(value_size)
            else:
                value_font.setPixelSize(max(1, round(value_size)))
        show_values = value_size is not None
        for i, rate in enumerate(self._rates):
            x = chart.left() + i * slot + (slot - bar_w) / 2
            if rate is not None:
                h = chart.height() * rate
                p.fillRect(QRectF(x, chart.bottom() - h, bar_w, h), _DRAFT)
                if show_values:
                    p.setFont(value_font)
                    p.setPen(QColor("#4a5568"))
                    p.drawText(QRectF(x - (slot - bar_w) / 2, r.top(), slot, label_h),
                               Qt.AlignmentFlag.AlignCenter, f"{rate * 100:.0f}")
                    p.setFont(base)
            if i % step == 0:
                p.setPen(_MUTED)
                p.drawText(QRectF(x - 8, chart.bottom() + 1, bar_w + 16, label_h),
                           Qt.AlignmentFlag.AlignCenter, str(i + 1))


class SparklineWidget(QWidget):
    """The rolling decode tok/s of the current reply over time (last 60 refreshes)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._values: deque[float] = deque(maxlen=60)
        self.setMinimumHeight(34)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def clear(self) -> None:
        self._values.clear()
        self.update()

    def add(self, value: float) -> None:
        self._values.append(value)
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        if len(self._values) < 2:
            return
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        r = QRectF(self.rect()).adjusted(1, 3, -1, -3)
        top = max(self._values) * 1.15 or 1.0
        step = r.width() / (self._values.maxlen - 1 if self._values.maxlen else 1)
        pts = [QPointF(r.right() - (len(self._values) - 1 - i) * step,
                       r.bottom() - r.height() * v / top) for i, v in enumerate(self._values)]
        fill = QPolygonF([QPointF(pts[0].x(), r.bottom()), *pts, QPointF(pts[-1].x(), r.bottom())])
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(43, 108, 176, 40))
        p.drawPolygon(fill)
        p.setPen(QPen(_ACCENT, 1.6))
        p.drawPolyline(QPolygonF(pts))


#: the gauge's figures: (key, name, tooltip). Each tooltip says what the figure means in
#: plain words first, then exactly how it is computed.
GAUGE_ROWS = [
    ("reply_tps", "This reply", "How fast this reply was written: its tokens per second "
     "from the end of reading the prompt to its last token."),
    ("e2e_tps", "End to end", "Tokens per second including the time spent reading the "
     "prompt before the first token."),
    ("alpha", "Acceptance α", "How often the model agreed with the drafter: the share of "
     "checked draft tokens it accepted (accepted / verified). Rounds that drafted nothing "
     "do not count, so α can be 100% while few tokens came from drafts (see τ). With "
     f"fewer than {MIN_VERIFIED_FOR_ESTIMATE} draft tokens checked, a 95% (Wilson) range "
     "is shown."),
    ("tau", "Mean accepted τ", "Tokens written per model pass: 1.00 is plain decoding; "
     "3.00 means each pass of the target model wrote three tokens on average (its own "
     "and two accepted draft tokens)."),
    ("cost", "Draft cost c", "What drafting one token costs, in steps of the target "
     "model: one draft model step ÷ one plain target step. A draft model's (or MTP "
     "head's) catch-up over rounds that drafted nothing is not a step: it counts in the "
     "reply's time, not in c. "
     "For a lookup drafter (prompt or suffix lookup): the reply's lookup time per round "
     "divided by its mean draft length (tokens proposed per drafting round), in target "
     "steps."),
    ("predicted", "Predicted speedup", "The speedup α and c promise if checking a draft "
     "took as long as one plain step: E(α, k̄) / (1 + c·k̄) (Leviathan et al. 2023) with "
     "k̄ the mean draft length, rounds that drafted nothing counting as plain steps "
     "(with their lookups, for a lookup drafter). "
     f"Held until α rests on {MIN_VERIFIED_FOR_ESTIMATE} draft tokens. Where a check of "
     "several tokens costs more than one step (on a CPU), a note below the figures says so."),
    ("measured", "Measured speedup", "How much faster this reply was than plain decoding "
     "on this machine now: its tok/s against one-token target passes timed under the "
     "same conditions (of this reply, or of the last 10 s at the same thread count and "
     "load); the range comes from the spread of those passes."),
    ("ttft", "Time to first token", "How long until the first token appeared: reading the "
     "prompt (the prefill; a draft model reads it too) and the first round."),
    ("context", "Context used", "How much of the context window this reply filled: its "
     "prompt (the conversation so far) and its own tokens. When the next message does "
     "not fit, earlier messages are dropped (Sampling → Too long for the context) and "
     "marked in the chat; a larger context length keeps more (Sampling → Model). "
     "Connected to a server: the server's window, set where it starts."),
]


class SpeculationGaugeWidget(QFrame):
    """Live figures for the reply in progress (or the last reply)."""

    tint_toggled = Signal(bool)
    """The "tint text from accepted drafts" box was toggled."""

    _stored_model: str | None = None  # the model that wrote the stored reply shown
    #: whether the thread count follows the free cores (Auto), else fixed in the settings
    #: (then a reply slowed by more threads than free cores says so: :func:`threads_note`)
    threads_auto: bool = True
    written_by: Callable[[str | None], str | None] = staticmethod(lambda model: None)
    """The line above a stored reply's figures for the model that wrote it ("Written by
    X, not the model loaded now"), None for none; the window sets it
    (``ChatController.written_by``)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("gauge")
        self._rolling = RollingRate(1.0)
        self._stats: SpecStats | None = None
        self._streaming, self._failed, self._mode_known, self._stored = False, False, True, False
        self._assistant: str | None = None  # the MTP assistant's file name, when loaded
        self._dirty = False
        self.repaints = 0  # how many refreshes actually ran (tests check the rate cap)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 10)
        layout.setSpacing(6)
        self.source_label = Label()
        self.source_label.setObjectName("gaugeSource")
        self.source_label.setWordWrap(True)  # "Written by <any file name>…": not wider
        self.source_label.hide()
        layout.addWidget(self.source_label)
        self.mode_label = Label("No reply yet")
        self.mode_label.setObjectName("gaugeMode")
        # wraps rather than widening the panel: "· last reply" is longer than "● live",
        # and an unwrapped header made the side panel grow and shrink with every reply
        self.mode_label.setWordWrap(True)
        layout.addWidget(self.mode_label)
        self.reason_label = Label()
        self.reason_label.setObjectName("gaugeReason")
        self.reason_label.setWordWrap(True)
        self.reason_label.hide()
        layout.addWidget(self.reason_label)

        self.tps_label = Label("—")
        self.tps_label.setObjectName("gaugeBig")
        self.tps_label.setToolTip(
            "Tokens per second being written now (over the last second while a reply "
            "runs; the whole reply's once it has ended). A token is a word or part of one.")
        layout.addWidget(self.tps_label)
        self.tps_caption = Label("decode tok/s")
        self.tps_caption.setObjectName("gaugeCaption")
        layout.addWidget(self.tps_caption)
        self.sparkline = SparklineWidget()
        layout.addWidget(self.sparkline)

        grid = QGridLayout()
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(4)
        self._rows: dict[str, QLabel] = {}
        for i, (key, title, tip) in enumerate(GAUGE_ROWS):
            name = Label(title)
            name.setToolTip(tip)
            name.setObjectName("gaugeName")
            value = Label("—")
            value.setObjectName("gaugeValue")
            value.setToolTip(tip)
            value.setWordWrap(True)
            value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            grid.addWidget(name, i, 0)
            grid.addWidget(value, i, 1)
            self._rows[key] = value
        grid.setColumnStretch(1, 1)
        layout.addLayout(grid)
        self.prediction_note = Label(PREDICTION_ASSUMES + " On a CPU a batch costs more, "
                                      "so expect the measured speedup to be lower.")
        self.prediction_note.setObjectName("gaugeNote")
        self.prediction_note.setWordWrap(True)
        self.prediction_note.hide()
        self._cpu_only = False
        layout.addWidget(self.prediction_note)

        bars_title = Label("Acceptance by draft position (%)")
        bars_title.setObjectName("gaugeName")
        layout.addWidget(bars_title)
        self.bars = AcceptanceBarsWidget()
        layout.addWidget(self.bars)

        self.tint_box = QCheckBox("Tint text from accepted drafts")
        self.tint_box.toggled.connect(self.tint_toggled)
        layout.addWidget(self.tint_box)
        self.note_label = Label()
        self.note_label.setObjectName("gaugeNote")
        self.note_label.setWordWrap(True)
        layout.addWidget(self.note_label)
        layout.addStretch(1)

        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        self._timer.start()

    def set_assistant(self, name: str | None) -> None:
        """The file name of the MTP assistant the session loaded (None: none): an MTP
        reply's title names it (:meth:`app.options.DrafterInfo.label_for`)."""
        self._assistant = name
        self._dirty = True

    def set_cpu_only(self, cpu_only: bool) -> None:
        """Whether the target runs on the CPU (then the prediction caveat is shown beside
        a speculative reply's prediction)."""
        self._cpu_only = cpu_only
        self._dirty = True

    # -- inputs (cheap; any rate) -----------------------------------------------------
    def begin_reply(self, mode: SpecMode | None, draft_max: int, adaptive: bool = False,
                    source: str | None = None, remote: dict[str, Any] | None = None) -> None:
        """A reply starts with this drafter mode, k, and whether k is only a maximum
        (adaptive draft length); None: not known yet (a request of another client: its
        first statistics say). ``source``: who asked, when not this window (``"API
        traffic · chat"``); shown above the figures until the next reply begins.
        ``remote``: the server's description (engine, version, method, k) when the reply
        runs on a remote server; its figures arrive with :meth:`end_reply`."""
        self.set_source(source)
        self._streaming = True
        self._stored = False
        self._failed = False
        self.set_explanation(None)
        self._rolling.reset()
        self.sparkline.clear()
        self._mode_known = mode is not None
        mode = mode or SpecMode.OFF
        k = draft_max if mode is not SpecMode.OFF else 0
        self._stats = SpecStats(mode=mode, draft_max=k, adaptive=adaptive and k > 0,
                                accepted_at=(0,) * k, verified_at=(0,) * k,
                                extra={"remote": remote} if remote is not None else {})
        self.note_label.setText("")
        self._dirty = True

    def set_source(self, source: str | None) -> None:
        """Whose reply the figures are, above them (None: the open conversation's, said
        by nothing); :meth:`begin_reply` sets it for each reply."""
        self.source_label.setText(source or "")
        self.source_label.setVisible(source is not None)

    def add_tokens(self, t: float, n_tokens: int) -> None:
        """Reply tokens emitted so far at time ``t`` (seconds since the request)."""
        self._rolling.add(t, n_tokens)
        self._dirty = True

    def set_stats(self, stats: SpecStats) -> None:
        """The latest statistics snapshot of the reply in progress (its drafter, k and
        adaptive flag are the reply's own, whatever the window's settings say)."""
        self._stats = stats
        self._mode_known = True
        self._dirty = True

    def set_explanation(self, text: str | None) -> None:
        """Why Auto chose the reply's drafter (or none), in words made from its figures
        (:mod:`app.ui.explain`), under the header; None: no explanation (not Auto)."""
        self.reason_label.setText(f"Auto: {text}" if text else "")
        self.reason_label.setVisible(bool(text))

    @property
    def explanation(self) -> str:
        return self.reason_label.text()

    @property
    def live(self) -> bool:
        """Whether the gauge shows a reply in progress."""
        return self._streaming

    def fail_reply(self, message: str) -> None:
        """The reply failed: stop showing it as live, keep the figures it reached, and
        say why in the note."""
        self._streaming = False
        self._failed = True
        self._mode_known = True
        self.note_label.setText(message)
        self._dirty = True
        self.refresh()

    def withdraw_reply(self) -> None:
        """The reply was never asked for after all (its message went back to the input
        box): stop showing it as live; the caller shows the last reply again."""
        self._streaming = False

    def end_reply(self, stats: SpecStats, note: str | None = None, *, stored: bool = False,
                  model: str | None = None) -> None:
        """The reply ended: show its final figures, and the draft-length rule of thumb
        when it applies (:func:`~app.engine.stats.draft_length_advice`). ``stored``: the
        reply was saved in the open conversation, by ``model``, so from now on it is shown
        as a stored reply (:meth:`update_stored_source`)."""
        self._streaming = False
        self._failed = False
        self._stats = stats
        self._stored, self._stored_model = stored, model
        self._mode_known = True
        self.note_label.setText(_reply_note(stats, note, self.threads_auto))
        self._dirty = True
        self.refresh()

    def show_stored(self, stats: SpecStats | None, model: str | None = None,
                    note: str | None = None) -> None:
        """Show a stored reply's statistics (opening a conversation, showing a version;
        None: no figures, :meth:`show_no_reply`) with the note (``note``: the one it was
        stored with) and advice it ended with; no-op while streaming. ``model``: the one
        that wrote it
        (:meth:`update_stored_source`). The rate curve is cleared: it belongs to the
        reply that last streamed, and a stored reply keeps none."""
        if stats is None:
            self.show_no_reply()
            return
        if self._streaming:
            return
        self._failed = False
        self._stats = stats
        self._stored, self._stored_model = True, model
        self.update_stored_source()
        self._mode_known = True
        self.sparkline.clear()
        self.note_label.setText(_reply_note(stats, note, threads_auto=self.threads_auto))
        self.refresh()  # at once: nothing streams, and the last figures were cleared

    def show_stored_figures(self, raw: Mapping[str, Any] | None, model: str | None,
                            empty: str, note: str | None = None) -> None:
        """:meth:`show_stored` of a stored reply's statistics as the history keeps them
        (``StoredMessage.stats``, and its ``note``); without any, or unreadable ones
        (logged), no figures with the header ``empty`` (:meth:`show_no_reply`)."""
        try:
            stats = SpecStats.from_dict(dict(raw)) if raw else None
        except (TypeError, ValueError):
            log.warning("a stored reply's statistics are unreadable: %.200r", raw)
            stats = None
        if stats is None:
            self.show_no_reply(empty)
        else:
            self.show_stored(stats, model, note)

    def update_stored_source(self) -> None:
        """Show or hide the line above a stored reply's figures (:attr:`written_by` of the
        model that wrote it), as after loading another model. No-op while a reply streams
        or when no stored reply is shown (a reply's own source stays)."""
        if self._streaming or not self._stored:
            return
        source = self.written_by(self._stored_model)
        self.source_label.setText(source or "")
        self.source_label.setVisible(source is not None)

    def show_no_reply(self, label: str = "No reply yet") -> None:
        """Show no figures (a new chat, a conversation without a measured reply, a reply
        version without figures): figures of another reply must not look like this one's.
        ``label`` says which. No-op while a reply streams (the gauge follows whatever
        runs)."""
        if self._streaming:
            return
        self._stats = None
        self._stored = False
        self._mode_known = True
        self.source_label.hide()
        self.prediction_note.hide()  # no prediction to qualify
        self.mode_label.setText(label)
        self.tps_label.setText(MISSING)
        self.tps_caption.setText("decode tok/s")  # not what a reply that streamed said
        self.sparkline.clear()
        for row in self._rows.values():
            row.setText(MISSING)
        self.bars.set_positions((), ())
        self.note_label.setText("")
        self._dirty = False

    def set_tint(self, tint: bool) -> None:
        self.tint_box.blockSignals(True)
        self.tint_box.setChecked(tint)
        self.tint_box.blockSignals(False)

    # -- output (≤ 10 Hz) -------------------------------------------------------------
    @Slot()
    def _on_timer_timeout(self) -> None:
        # a stream gone quiet is repainted too: its rolling rate falls with the silence
        if self._dirty or (self._streaming and self._rolling.silence() > self._rolling.window):
            self.refresh()

    def value_text(self, key: str) -> str:
        """The text shown for one figure (tests read the panel through this)."""
        return self._rows[key].text()

    def refresh(self) -> None:
        """Repaint from the latest inputs (called by the timer; public for tests)."""
        self._dirty = False
        self.repaints += 1
        s = self._stats
        if s is None:
            return
        remote = s.extra.get("remote")
        if isinstance(remote, dict):
            self._refresh_remote(s, remote)
            return
        spec = s.mode is not SpecMode.OFF
        info = s.mode.info
        title = ((info.label_for(self._assistant) if info is not None else s.mode.label)
                 if spec else "Speculation off")
        if spec:
            title += " · " + draft_length_words(s.draft_max, s.adaptive)
        if not self._mode_known:
            title = "Starting…"
        # no-break spaces: when the header wraps, the state moves to the next line whole
        state = ("  ●\u00a0live" if self._streaming else "  ·\u00a0failed" if self._failed
                 else "  ·\u00a0last\u00a0reply")
        self.mode_label.setText(title + state)

        rolling = self._rolling.rate() if self._streaming else None
        big = rolling if rolling is not None else s.decode_tps
        self.tps_label.setText(or_dash(big, ".1f"))
        quiet = self._rolling.silence() if self._streaming else 0.0
        self.tps_caption.setText(
            f"decode tok/s (nothing for {quiet:.0f} s)" if rolling is not None and quiet >= 3
            else "decode tok/s (last second)" if rolling is not None
            else "decode tok/s (whole reply)" if not self._streaming
            else "decode tok/s (so far)" if s.emitted else "reading the prompt…"
        )
        if rolling is not None:
            self.sparkline.add(rolling)

        self._rows["reply_tps"].setText(or_dash(s.decode_tps, ".1f", " tok/s"))
        self._rows["e2e_tps"].setText(or_dash(s.end_to_end_tps, ".1f", " tok/s"))
        self._rows["alpha"].setText(alpha_text(s, self._streaming) if spec else "off")
        tau = s.mean_acceptance_length
        self._rows["tau"].setText(or_dash(tau, ".2f", " tok/round") if spec else "1 (off)")
        self._rows["cost"].setText(or_dash(s.draft_cost_ratio, ".3f") if spec else MISSING)
        pred = s.predicted_speedup
        # the caveat qualifies a prediction shown: none beside "off" or "—", nor on a GPU
        caveat = self._cpu_only and spec and pred is not None and not s.few_drafts
        if caveat:
            self.prediction_note.setText(prediction_caveat(s))
        self.prediction_note.setVisible(caveat)
        if not spec:
            self._rows["predicted"].setText("1× (off)")
        elif pred is not None and s.few_drafts:
            # E(α, k) from one or two drafts is an extrapolation, not a prediction.
            self._rows["predicted"].setText(f"{MISSING} (needs {MIN_VERIFIED_FOR_ESTIMATE} draft tokens)")
        else:
            self._rows["predicted"].setText(or_dash(pred, ".2f", "×"))
        self._rows["measured"].setText(self._measured_text(s))
        self._rows["ttft"].setText(or_dash(s.ttft if s.emitted else None, ".2f", " s"))
        self._rows["context"].setText(context_text(s))
        self.bars.set_positions(s.accepted_at, s.verified_at)

    def _refresh_remote(self, s: SpecStats, remote: dict[str, Any]) -> None:
        self.prediction_note.hide()
        if self._streaming:  # the server's figures come with the end of the reply
            self.mode_label.setText(remote_title(remote) + "  ●\u00a0live")
            rolling = self._rolling.rate()
            self.tps_label.setText(or_dash(rolling, ".1f"))
            self.tps_caption.setText("decode tok/s (last second)" if rolling is not None
                                     else "waiting for the server's first tokens…")
            if rolling is not None:
                self.sparkline.add(rolling)
            for key in self._rows:
                self._rows[key].setText(f"{MISSING} (when the reply ends)")
            return
        self.mode_label.setText(remote_title(remote) + "  ·\u00a0last\u00a0reply")
        self.tps_label.setText(or_dash(remote.get("decode_tps"), ".1f"))
        self.tps_caption.setText("decode tok/s (whole reply, measured by Tandem)")
        for key, text in remote_rows(s, remote).items():
            self._rows[key].setText(text)
        self._remote_positions(s, remote)

    def _remote_positions(self, s: SpecStats, remote: dict[str, Any]) -> None:
        """Servers export a counter for every position up to their k (48 for
        llama-server's n-gram drafter): the bars end at the first position after the
        last accepted one that drafts reached (its 0 % shows where acceptance
        stopped); the tooltip says what was left out."""
        last = max((i + 1 for i, a in enumerate(s.accepted_at) if a), default=0)
        figures = remote.get("figures") or {}
        drafted = figures.get("mean_draft_length") or 0
        n = min(len(s.accepted_at), max(last + (1 if drafted > last else 0), 4))
        self.bars.set_positions(s.accepted_at[:n], s.verified_at[:n])
        if n < len(s.accepted_at):
            self.bars.setToolTip(self.bars.toolTip() + f"\npositions {n + 1}–"
                                 f"{len(s.accepted_at)}: none accepted")

    def _measured_text(self, s: SpecStats) -> str:
        return measured_speedup_text(s, self._streaming)
