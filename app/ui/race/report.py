"""The end-of-race table, the plain-words difference explanation, and the Markdown
export. No Qt here: the race view shows :func:`race_table_rows` in a table widget and the
Markdown export writes :func:`race_markdown`, so both always show the same figures.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.engine.race import RaceResult
from app.engine.stats import MIN_DRAFTED_FOR_ESTIMATE
from app.ui.race.recording import RaceRecording

#: Why k ≤ 2 stays bit-identical on the CPU backend and k ≥ 3 may not. A round verifies
#: k + 1 tokens in one batch; llama.cpp's CPU matrix multiplication switches to another
#: kernel for batches of 4 tokens or more, with a different order of additions.
CPU_KERNEL_NOTE = (
    "On this CPU backend llama.cpp multiplies batches of 4 or more tokens with a "
    "different kernel than single tokens, so with k ≥ 3 (batches of k + 1 ≥ 4 tokens) the "
    "two runs can part at a near-tie, while with k ≤ 2 they are bit-identical."
)


def k_words(k: int, adaptive: bool) -> str:
    """The draft length in words: "k = 4", or "k ≤ 4 (adaptive)" when the engine's
    cost-aware policy may draft fewer tokens per round."""
    return f"k ≤ {k} (adaptive)" if adaptive else f"k = {k}"


def race_table_rows(result: RaceResult) -> list[tuple[str, str, str]]:
    """(figure, speculation off, speculation on) rows of the end-of-race table.

    The engine's :meth:`RaceResult.summary_rows` (TTFT, decode tok/s, end-to-end time,
    tokens, α, τ, measured and predicted speedup, identical text) plus the end-to-end
    speedup (end-to-end time off ÷ on, prefill included) after the measured one. When α
    rests on fewer than :data:`~app.engine.stats.MIN_DRAFTED_FOR_ESTIMATE` drafts, its
    row gives the count and the predicted speedup is held.
    """
    rows = list(result.summary_rows())
    s = result.on.stats
    if s.acceptance_rate is not None and s.few_drafts:
        # α and the prediction built on it rest on a handful of drafts: say so.
        for i, (name, off, _on) in enumerate(rows):
            if name == "acceptance rate α":
                rows[i] = (name, off, f"{s.acceptance_rate:.2f} ({s.accepted}/{s.drafted} drafts)")
            elif name == "predicted speedup":
                rows[i] = (name, off, f"— (needs {MIN_DRAFTED_FOR_ESTIMATE} drafts)")
    e2e = result.end_to_end_speedup
    extra = ("end-to-end speedup", "1.00×", "—" if e2e is None else f"{e2e:.2f}×")
    for i, row in enumerate(rows):
        if row[0] == "measured speedup":
            rows[i] = ("measured speedup (decode)", row[1], row[2])
            rows.insert(i + 1, extra)
            break
    else:
        rows.append(extra)
    if result.cancelled:
        rows.append(("status", "", "cancelled: figures are partial"))
    return rows


def difference_text(result: RaceResult, cpu_backend: bool, draft_max: int) -> str | None:
    """Plain words for a race whose texts differ (None when identical or cancelled).

    The engine's explanation (the first differing token index, floating-point differences
    between batch sizes at a near-tie, both valid outputs of the target), plus on the CPU
    backend :data:`CPU_KERNEL_NOTE` when k ≥ 3.
    """
    text = result.difference_explanation
    if text is None or result.cancelled:
        return None
    if cpu_backend and draft_max >= 3:
        text += " " + CPU_KERNEL_NOTE
    return text


def identical_text(result: RaceResult) -> str:
    """A one-line verdict on the two texts."""
    if result.cancelled:
        return "Race stopped before both runs finished."
    if result.identical:
        n = len(result.off.token_ids)
        return f"Identical text: both runs produced the same {n} tokens."
    return f"The texts differ from token {result.first_difference} on (see below)."


def speedup_headline(result: RaceResult) -> str:
    """The race's outcome in one sentence (measured decode and end-to-end speedup)."""
    ms, e2e = result.measured_speedup, result.end_to_end_speedup
    if result.cancelled or ms is None:
        return "No speedup to report: the race did not finish."
    sooner = f", and finished {e2e:.2f}× sooner" if e2e is not None and e2e >= 1.0 else (
        f", and took {1 / e2e:.2f}× as long end to end" if e2e else "")
    if ms >= 1.0:
        return f"Speculation decoded {ms:.2f}× as fast{sooner}."
    return f"Speculation was slower here: {ms:.2f}× the decode speed{sooner}."


def prediction_note(result: RaceResult, cpu_backend: bool) -> str | None:
    """Why the measured speedup falls short of the predicted one, when it clearly does.

    The predicted speedup E(α, k) / (1 + c·k) assumes the target checks k + 1 tokens in
    the time of one plain step (Leviathan et al. 2023), which holds where decoding is
    limited by memory bandwidth (GPUs); on a CPU a batch costs more.
    """
    ms, ps = result.measured_speedup, result.predicted_speedup
    if ms is None or ps is None or ps < 1.25 * ms or result.on.stats.few_drafts:
        return None
    where = "on this CPU backend" if cpu_backend else "on this machine"
    return (f"The prediction ({ps:.2f}×) assumes the target checks k + 1 tokens in the time "
            f"of one; {where}, checking {result.on.draft_max + 1} tokens at once costs more "
            f"than that, so the measured {ms:.2f}× is lower.")


def _fence(text: str) -> str:
    """A backtick fence longer than any backtick run inside ``text`` (at least 3)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def race_markdown(rec: RaceRecording) -> str:
    """The race as Markdown: the settings, the table, any difference explanation, the
    prompt and both texts (each in a fence longer than any backticks inside it)."""
    r = rec.result
    on_label = f"on ({rec.drafter}, {k_words(r.on.draft_max, rec.adaptive)})"
    lines = [
        f"# Tandem race: {rec.model_name}",
        "",
        f"Target {rec.model_name}; speculation {on_label}; seed {r.seed}, temperature "
        f"{r.temperature:g}, at most {rec.max_tokens} tokens; "
        f"{'CPU' if rec.cpu_backend else 'GPU'} backend.",
        "",
        speedup_headline(r) + " " + identical_text(r),
        "",
        f"| figure | speculation off | speculation {_cell(on_label)} |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {_cell(a)} | {_cell(b)} | {_cell(c)} |" for a, b, c in race_table_rows(r)]
    for note in (prediction_note(r, rec.cpu_backend),
                 difference_text(r, rec.cpu_backend, r.on.draft_max)):
        if note:
            lines += ["", note]
    sections: Sequence[tuple[str, str]] = (
        ("Prompt", rec.prompt_text),
        ("Speculation off", r.off.text),
        (f"Speculation {on_label}", r.on.text),
    )
    for title, body in sections:
        fence = _fence(body)
        lines += ["", f"## {title}", "", f"{fence}text", body, fence]
    return "\n".join(lines) + "\n"
