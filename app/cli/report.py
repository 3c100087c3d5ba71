"""The command line's words for measured figures: the benchmark table (aligned text or
Markdown) and the one-line statistics after a streamed reply.

The engine returns numbers (:class:`~app.engine.measure.bench.BenchReport`,
:class:`~app.engine.stats.SpecStats`); this module is where the command line turns them
into text. Missing figures print as an em dash (:func:`app.formatting.or_dash`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.engine.events import Finished
from app.engine.measure.bench import BenchReport
from app.formatting import MISSING, or_dash
from app.options import SpecMode

#: Said under a benchmark in which some "on" run's tokens differ from "off".
DIFFERS_FROM_OFF_NOTE = (
    "Some outputs differ from 'off': the target verifies drafts in batches, and a batch is "
    "computed with a different order of floating-point operations than one token, so at "
    "a near-tie the target can pick the other token. Both are valid outputs of the target."
)

#: Said under a multi-turn benchmark (:mod:`app.engine.measure.multiturn`).
MULTITURN_NOTE = (
    "Multi-turn: each turn's prompt holds the conversation so far with the 'off' run's "
    "replies; "
)
MULTITURN_SHARED = "finished replies feed the suffix index (emptied each repeat)."
MULTITURN_UNSHARED = "the suffix index stays empty."

BENCH_HEADER = (
    "config", "runs", "decode tok/s", "lat p50 ms", "lat p95 ms", "TTFT ms",
    "α", "τ", "c", "pred ×", "meas ×", "identical",
)


def _ms(v: float | None) -> float | None:
    return v * 1000.0 if v is not None else None


def bench_rows(report: BenchReport) -> list[list[str]]:
    """One row per configuration, in :data:`BENCH_HEADER`'s columns (ms, ×, %)."""
    rows: list[list[str]] = []
    for s in report.summaries:
        rows.append([
            s.label,
            str(s.runs),
            or_dash(s.decode_tps_median, ".1f"),
            or_dash(_ms(s.token_latency_p50), ".1f"),
            or_dash(_ms(s.token_latency_p95), ".1f"),
            or_dash(_ms(s.ttft_median), ".0f"),
            or_dash(s.acceptance_rate, ".2f"),
            or_dash(s.mean_acceptance_length, ".2f"),
            or_dash(s.draft_cost_ratio, ".3f"),
            or_dash(s.predicted_speedup, ".2f"),
            or_dash(s.measured_speedup, ".2f"),
            f"{s.identical}/{s.compared}" if s.compared else MISSING,
        ])
    return rows


def bench_notes(report: BenchReport) -> list[str]:
    """The engine's notes, then :data:`MULTITURN_NOTE`, what auto chose, and
    :data:`DIFFERS_FROM_OFF_NOTE` where they apply."""
    notes = list(report.notes)
    if report.settings.get("multiturn"):
        shared = report.settings.get("share_history", True)
        notes.append(MULTITURN_NOTE + (MULTITURN_SHARED if shared else MULTITURN_UNSHARED))
    choices = report.settings.get("auto_choices")
    if choices:
        counts: dict[str, int] = {}
        for c in choices:
            key = "off" if c["mode"] == SpecMode.OFF.value else f"{c['mode']} k={c['draft_max']}"
            counts[key] = counts.get(key, 0) + 1
        worst = max(c.get("choose_s", 0.0) for c in choices)
        notes.append("auto chose: " + ", ".join(f"{k} ×{n}" for k, n in sorted(counts.items()))
                     + f" (deciding took up to {worst * 1000:.0f} ms, not in decode tok/s)")
    if report.differs_from_off:
        notes.append(DIFFERS_FROM_OFF_NOTE)
    return notes


def bench_json(report: BenchReport, include_tokens: bool = False) -> dict[str, Any]:
    """``report.to_dict()`` with the notes this module adds."""
    data = report.to_dict(include_tokens)
    data["notes"] = bench_notes(report)
    return data


def _settings_line(settings: dict[str, Any]) -> str:
    keys = ("model", "draft", "mode", "prompts", "format", "repeat", "max_tokens", "threads",
            "temperature", "seed")
    parts = [f"{k}={settings[k]}" for k in keys if settings.get(k) is not None]
    return "settings: " + ", ".join(parts)


def bench_markdown(report: BenchReport) -> str:
    """A Markdown table plus a line of settings and the notes."""
    header, rows = list(BENCH_HEADER), bench_rows(report)
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines.append("")
    lines.append(_settings_line(report.settings))
    for n in bench_notes(report):
        lines.append("")
        lines.append(f"> {n}")
    return "\n".join(lines) + "\n"


def bench_text(report: BenchReport) -> str:
    """An aligned plain-text table for a terminal."""
    header, rows = list(BENCH_HEADER), bench_rows(report)
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]

    def fmt_row(r: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)
        )

    lines = [fmt_row(header)] + [fmt_row(r) for r in rows]
    lines.append("")
    lines.append(_settings_line(report.settings))
    lines += bench_notes(report)
    return "\n".join(lines) + "\n"


def reply_stats_line(result: Finished) -> str:
    """One line of statistics after a streamed reply (the CLI prints it on stderr)."""
    s = result.stats
    parts = [
        f"[{result.reason}] {s.emitted} tokens",
        f"{or_dash(s.decode_tps, '.1f')} tok/s",
        f"TTFT {or_dash(s.ttft * 1000 if s.emitted else None, '.0f', ' ms')}",
    ]
    if s.mode is not SpecMode.OFF:
        parts += [
            f"{s.mode.value} k≤{s.draft_max}",
            f"α {or_dash(s.acceptance_rate, '.2f')}",
            f"τ {or_dash(s.mean_acceptance_length, '.2f')}",
            f"c {or_dash(s.draft_cost_ratio, '.3f')}",
            f"predicted {or_dash(s.predicted_speedup, '.2f', '×')}",
        ]
    return " · ".join(parts)
