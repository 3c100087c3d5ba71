"""The command line's words for measured figures: the benchmark table (aligned text or
Markdown) and the one-line statistics after a streamed reply; and the reply text itself
as it streams (:func:`write_reply_text`).

The engine returns numbers (:class:`~app.engine.measure.bench.BenchReport`,
:class:`~app.engine.stats.SpecStats`); this module is where the command line turns them
into text. Missing figures print as an em dash (:func:`app.formatting.or_dash`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from app.engine.reply import ReplyRecord
from app.engine.measure.bench import DISTURBED_CORES, BenchReport
from app.engine.measure.race import RaceResult
from app.formatting import MISSING, divergence_words, or_dash, printable
from app.options import SpecMode

#: Said under a multi-turn benchmark (:mod:`app.engine.measure.multiturn`).
MULTITURN_NOTE = (
    "Multi-turn: each turn's prompt holds the conversation so far with the 'off' run's "
    "replies; "
)
MULTITURN_SHARED = "finished replies feed the suffix index (emptied each repeat)."
MULTITURN_UNSHARED = "the suffix index stays empty."

BENCH_HEADER = (
    "config", "runs", "decode tok/s", "lat p50 ms", "lat p95 ms", "TTFT ms",
    "α", "τ", "c", "pred ×", "meas ×", "pairs ×", "set ×", "identical", "near-tie", "suspect",
)

#: what the columns are, said under the table
BENCH_LEGEND = (
    "lat: time between consecutive tokens (tokens accepted from one draft arrive "
    "together, so speculation's p50 can be near 0); TTFT: time to the first token; "
    "α: acceptance rate; τ: tokens per round; c: draft cost per token in target steps. "
    "pred ×: E(α, k̄)/(1 + c·k̄) from the measured α and c; meas ×: median decode tok/s "
    "over off's; pairs ×: median over prompts of on/off decode tok/s; set ×: the whole "
    "set's tokens per decode second over off's. A row whose τ is near 1 drafted almost "
    "nothing: its × is run-to-run variation. identical: replies equal to off's, token "
    "for token; near-tie / suspect: a difference measured as floating-point noise between "
    "batch sizes / one that does not fit it (docs/proof.md)."
)


#: whether reply text on stdout ended without a line end (an error line then starts a
#: line of its own: :func:`end_reply_line`)
_line_open = False


def write_reply_text(text: str) -> None:
    """Reply text (a local model's or a server's) on stdout as it arrives: its control
    characters escaped on a terminal (an escape sequence would act on it), as they are
    otherwise (piped, it is data)."""
    global _line_open
    sys.stdout.write(printable(text) if sys.stdout.isatty() else text)
    sys.stdout.flush()
    if text:
        _line_open = not text.endswith("\n")


def end_reply_line(always: bool = False) -> None:
    """End the reply's line on stdout: when text written by :func:`write_reply_text` left
    it open (an error or Ctrl-C cut the reply), or ``always`` (the reply ended)."""
    global _line_open
    if _line_open or always:
        sys.stdout.write("\n")
        sys.stdout.flush()
    _line_open = False


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
            or_dash(s.paired_speedup, ".2f"),
            or_dash(s.set_speedup, ".2f"),
            f"{s.identical}/{s.compared}" if s.compared else MISSING,
            str(s.near_tie) if s.compared else MISSING,
            str(s.suspect) if s.compared else MISSING,
        ])
    return rows


def comparison_note(report: BenchReport) -> str | None:
    """The note printed after the table: how many "on" runs were identical to their "off" run, and how
    many of the others were measured as near-ties or are suspect; None without "on" runs."""
    identical, near, suspect, compared = report.counts
    if not compared:
        return None
    unmeasured = sum(s.unmeasured for s in report.summaries)
    parts = [f"{identical} identical", f"{near} near-tie{'' if near == 1 else 's'}",
             f"{suspect} suspect"]
    if unmeasured:
        # "not measured" is not a failure: say why when nothing was recorded
        why = (" (this run recorded no divergence: runs played as conversations and "
               "--no-divergence do not)"
               if report.settings.get("divergence_recorded") is False else "")
        parts.append(f"{unmeasured} not measured{why}")
    note = (f"Compared with plain decoding of the same prompt: {', '.join(parts)} "
            f"(of {compared} runs).")
    if near or suspect:
        note += (" Each difference is measured at its first differing token from both runs' "
                 "sampling distributions; near-tie and suspect are defined in docs/proof.md.")
    if suspect:
        note += " A suspect difference does not fit floating-point noise: treat it as a bug."
    return note


def divergence_lines(report: BenchReport) -> list[str]:
    """One line per run that differs from its off run: where, which tokens, the verdict."""
    return [f"{r.prompt_name} {r.label}: {divergence_words(r.divergence)}"
            for r in report.records if r.divergence is not None]


def bench_notes(report: BenchReport) -> list[str]:
    """The engine's notes, then :data:`MULTITURN_NOTE` and what auto chose where they
    apply, then the comparison counts (:func:`comparison_note`)."""
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
    note = comparison_note(report)
    if note is not None:
        notes.append(note)
    if report.cancelled:
        notes.append("Stopped with Ctrl-C: the figures cover the runs that finished.")
    disturbed = sum(s.disturbed for s in report.summaries)
    if disturbed:
        total = sum(s.disturbed + s.undisturbed for s in report.summaries)
        notes.append(f"{disturbed} of {total} runs were disturbed: other processes kept more "
                     f"than {DISTURBED_CORES:g} cores busy. Speed figures need a quiet machine.")
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
    lines.append("")
    lines.append(BENCH_LEGEND)
    diffs = divergence_lines(report)
    if diffs:
        lines.append("")
        lines += [f"- {d}" for d in diffs]
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
    lines.append(BENCH_LEGEND)
    diffs = divergence_lines(report)
    if diffs:
        lines.append("")
        lines += diffs
    lines += bench_notes(report)
    return "\n".join(lines) + "\n"


def reply_stats_line(result: ReplyRecord) -> str:
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


def compare_text(result: RaceResult) -> str:
    """``generate --compare``: both replies, then where they first differ in words."""
    lines = ["--- speculation off ---", result.off.text, "",
             f"--- speculation on ({result.on.mode.words}, k = {result.on.draft_max}) ---",
             result.on.text, ""]
    if result.cancelled:
        lines.append("Stopped before both runs finished: nothing was compared.")
    elif result.identical:
        lines.append(f"Identical: both runs produced the same {len(result.off.token_ids)} "
                     f"tokens (seed {result.seed}, temperature {result.temperature:g}).")
    elif result.divergence is None:
        lines.append(f"The replies differ from token {(result.first_difference or 0) + 1} "
                     "on; the difference could not be measured.")
    else:
        lines.append(divergence_words(result.divergence))
    return "\n".join(lines) + "\n"


def compare_json(result: RaceResult) -> dict[str, Any]:
    """``generate --compare --json``: both runs, and ``divergence`` as in ``bench --json``
    (null when identical) with its evidence."""
    d = result.divergence
    return {
        "seed": result.seed,
        "temperature": result.temperature,
        "identical": result.identical,
        "cancelled": result.cancelled,
        "divergence": d.to_dict() if d is not None else None,
        "divergence_evidence": d.evidence() if d is not None else None,
        "words": divergence_words(d) if d is not None else None,
        "off": {"text": result.off.text, "token_ids": list(result.off.token_ids),
                "stats": result.off.stats.to_dict()},
        "on": {"text": result.on.text, "token_ids": list(result.on.token_ids),
               "stats": result.on.stats.to_dict()},
    }
