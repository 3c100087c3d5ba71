"""The end-of-race table, the plain-words difference explanation, and the Markdown
export. No Qt here: the race view shows :func:`race_table_rows` in a table widget and the
Markdown export writes :func:`race_markdown`, so both always show the same figures.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.engine.race import RaceResult
from app.ui.race.recording import RaceRecording

#: Why k ≤ 2 stays bit-identical on the CPU backend and k ≥ 3 may not. A round verifies
#: k + 1 tokens in one batch; llama.cpp's CPU matrix multiplication switches to another
#: kernel for batches of 4 tokens or more, with a different order of additions.
CPU_KERNEL_NOTE = (
    "On this CPU backend llama.cpp multiplies batches of 4 or more tokens with a "
    "different kernel than single tokens, so with k ≥ 3 (batches of k + 1 ≥ 4 tokens) the "
    "two runs can part at a near-tie, while with k ≤ 2 they are bit-identical."
)


def race_table_rows(result: RaceResult) -> list[tuple[str, str, str]]:
    """(figure, speculation off, speculation on) rows of the end-of-race table.

    The engine's :meth:`RaceResult.summary_rows` (TTFT, decode tok/s, end-to-end time,
    tokens, α, τ, measured and predicted speedup, identical text) plus the end-to-end
    speedup (end-to-end time off ÷ on, prefill included) after the measured one.
    """
    rows = list(result.summary_rows())
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
    on_label = f"on ({rec.drafter}, k = {r.on.draft_max})"
    lines = [
        f"# Tandem race: {rec.model_name}",
        "",
        f"Target {rec.model_name}; speculation {on_label}; seed {r.seed}, temperature "
        f"{r.temperature:g}, at most {rec.max_tokens} tokens; "
        f"{'CPU' if rec.cpu_backend else 'GPU'} backend.",
        "",
        identical_text(r),
        "",
        f"| figure | speculation off | speculation {_cell(on_label)} |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {_cell(a)} | {_cell(b)} | {_cell(c)} |" for a, b, c in race_table_rows(r)]
    diff = difference_text(r, rec.cpu_backend, r.on.draft_max)
    if diff:
        lines += ["", diff]
    sections: Sequence[tuple[str, str]] = (
        ("Prompt", rec.prompt_text),
        ("Speculation off", r.off.text),
        (f"Speculation {on_label}", r.on.text),
    )
    for title, body in sections:
        fence = _fence(body)
        lines += ["", f"## {title}", "", f"{fence}text", body, fence]
    return "\n".join(lines) + "\n"
