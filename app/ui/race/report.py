"""The end-of-race table, the measured first difference in words, and the Markdown
export. No Qt here: the race view shows :func:`race_table_rows` in a table widget and the
Markdown export writes :func:`race_markdown`, so both always show the same figures.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from app.chat.recording import RaceRecording
from app.engine.measure.race import DISTURBED_CORES, VERDICT_MARGIN, VERDICT_MIN_PAIRS, RaceResult
from app.engine.stats import MIN_VERIFIED_FOR_ESTIMATE
from app.formatting import MISSING, divergence_words, draft_length_words, or_dash
from app.options import DrafterNeeds, SpecMode


def race_table_rows(result: RaceResult) -> list[tuple[str, str, str]]:
    """(figure, speculation off, speculation on) rows of the end-of-race table: TTFT,
    decode tok/s, end-to-end time, tokens, α, τ, measured speedup (decode), end-to-end
    speedup (end-to-end time off ÷ on, prefill included), predicted speedup, identical
    text, a row when other work disturbed the replayed (first) pair, whose times the rows
    before the speedups are, and a status row when the race was stopped. When α rests on
    fewer than :data:`~app.engine.stats.MIN_VERIFIED_FOR_ESTIMATE` draft tokens, its row
    gives the count and the predicted speedup is held."""
    so, sn = result.off.stats, result.on.stats
    alpha = or_dash(sn.acceptance_rate, ".2f")
    predicted = or_dash(result.predicted_speedup, ".2f", "×")
    if sn.acceptance_rate is not None and sn.few_drafts:
        # α and the prediction built on it rest on a handful of drafts: say so.
        alpha = f"{sn.acceptance_rate:.2f} ({sn.accepted}/{sn.verified} draft tokens)"
        predicted = f"{MISSING} (needs {MIN_VERIFIED_FOR_ESTIMATE} draft tokens)"
    # with several pairs the lanes are the first (replayed) pair's runs: their times say so
    lanes = ", replayed pair" if len(result.pairs) > 1 else ""
    rows = [
        ("TTFT" + lanes, or_dash(so.ttft * 1000, ".0f", " ms"),
         or_dash(sn.ttft * 1000, ".0f", " ms")),
        decode_rate_row(result),
        ("end-to-end time" + lanes, or_dash(result.off.duration, ".2f", " s"),
         or_dash(result.on.duration, ".2f", " s")),
        ("tokens", str(len(result.off.token_ids)), str(len(result.on.token_ids))),
        ("acceptance rate α", MISSING, alpha),
        ("mean acceptance length τ", MISSING, or_dash(sn.mean_acceptance_length, ".2f")),
        ("measured speedup (decode)", "1.00×", speedup_cell(result)),
        ("end-to-end speedup" + lanes, "1.00×", or_dash(result.end_to_end_speedup, ".2f", "×")
         + (" (disturbed)" if result.first_pair_disturbed else "")),
        ("predicted speedup", MISSING, predicted),
        ("identical text", "",
         "yes" if result.identical else f"no (from token {(result.first_difference or 0) + 1})"),
    ]
    if len(result.pairs) > 1 or result.disturbed_runs:
        runs, kept = 2 * len(result.pairs), len(result.kept_speedups)
        busy = (f"; {_runs(result.disturbed_runs)} of {runs} disturbed by other work"
                if result.disturbed_runs else "")
        rows.append(("off/on pairs timed", "",
                     f"{len(result.pairs)}, {kept} kept{busy}" if kept != len(result.pairs)
                     else f"{len(result.pairs)}{busy}"))
    if result.first_pair_disturbed:
        rows.append(("replayed pair", "", "disturbed by other work: its times above are "
                     "not the verdict's"))
    if result.cancelled:
        rows.append(("status", "", "cancelled: figures are partial"))
    return rows


def decode_rate_row(result: RaceResult) -> tuple[str, str, str]:
    """The decode tok/s row, from the same runs as the measured speedup beside it: with
    several pairs timed, the median pair's ("decode tok/s, median of 3 pairs": their
    ratio is the speedup shown; :attr:`~app.engine.measure.race.RaceResult.median_decode_tps`
    for an even count); with one kept pair of several, that pair's; with none
    kept, the replayed (first) pair's, named so; with one pair, the lanes' own."""
    so, sn = result.off.stats, result.on.stats
    kept = result.kept_pairs
    medians = result.median_decode_tps
    if len(result.pairs) <= 1:
        return "decode tok/s", or_dash(so.decode_tps, ".1f"), or_dash(sn.decode_tps, ".1f")
    if medians is None:
        return ("decode tok/s, replayed pair", or_dash(so.decode_tps, ".1f"),
                or_dash(sn.decode_tps, ".1f"))
    name = (f"decode tok/s, median of {len(kept)} pairs" if len(kept) > 1
            else f"decode tok/s, pair {result.pairs.index(kept[0]) + 1} of {len(result.pairs)}")
    return name, f"{medians[0]:.1f}", f"{medians[1]:.1f}"


def speedup_cell(result: RaceResult) -> str:
    """The measured speedup with its spread: ``1.46× (1.38–1.52 over 3 pairs)``."""
    ms, r, n = result.measured_speedup, result.speedup_range, len(result.kept_speedups)
    if ms is None:
        return MISSING if not result.pairs else f"{MISSING} (every pair disturbed)"
    if r is None or n < 2:
        return f"{ms:.2f}×"
    return f"{ms:.2f}× ({r[0]:.2f}–{r[1]:.2f} over {n} pairs)"


def difference_text(result: RaceResult) -> str | None:
    """The first difference of the two texts in words, measured (None when identical or
    cancelled): where, which token each run chose, both runs' probabilities of both
    tokens and the verdict (:func:`app.formatting.divergence_words`). A difference that
    could not be measured says so."""
    if result.identical or result.first_difference is None or result.cancelled:
        return None
    if result.divergence is None:
        return (f"The texts differ from token {result.first_difference + 1} on; the "
                "difference was not measured, so nothing is said about its cause.")
    return divergence_words(result.divergence)


def identical_text(result: RaceResult) -> str:
    """A one-line verdict on the two texts."""
    if result.cancelled:
        return "Race stopped before both runs finished."
    if result.identical:
        n = len(result.off.token_ids)
        return f"Identical text: both runs produced the same {n} tokens."
    n = (result.first_difference or 0) + 1
    d = result.divergence
    if d is not None and d.verdict == "suspect":
        return f"The texts differ from token {n} on, and the difference is suspect (see below)."
    if d is not None:
        return f"The texts differ from token {n} on, at a near-tie (see below)."
    return f"The texts differ from token {n} on (see below)."


def speedup_headline(result: RaceResult) -> str:
    """The race's outcome in one or two sentences: the median decode speedup over the
    pairs that no other work disturbed, and a verdict only when at least three such pairs
    were kept and all agree (:attr:`RaceResult.verdict`); how many runs other work
    disturbed."""
    ms = result.measured_speedup
    busy = ""
    if result.disturbed_runs:
        n = result.disturbed_runs
        busy = (f" The machine was busy: {_runs(n)} of {2 * len(result.pairs)} "
                f"{'was' if n == 1 else 'were'} disturbed by other work and "
                f"{'its pair' if n == 1 else 'their pairs'} left out.")
    load = result.typical_load
    if load is not None and load >= DISTURBED_CORES and result.pairs:
        # a load through the whole race disturbs no pair (both sides ran under it), but
        # it is why both decoded slower than on a quiet machine
        busy += (f" Other programs kept {load:.1f} of this machine's "
                 f"{os.cpu_count() or '?'} cores busy through the race; both sides ran "
                 "under that load.")
    if ms is None and result.pairs and not result.cancelled and not result.kept_speedups:
        return ("No speedup to report: other work disturbed every pair." + busy
                + " Run the race again when the machine is quieter.").replace("  ", " ")
    if ms is None or (result.cancelled and not result.pairs):
        return "No speedup to report: the race did not finish."
    kept = result.kept_speedups
    r = result.speedup_range
    spread = (f" (median of {len(kept)} pairs, {r[0]:.2f}–{r[1]:.2f}×)"
              if r is not None and len(kept) >= 2 else "")
    if result.on.stats.proposed == 0:
        return nothing_drafted_headline(result, ms, spread) + busy
    sooner = ""
    if not result.pairs:  # one pair, the lanes': their end-to-end times too
        e2e = result.end_to_end_speedup
        sooner = f", and finished {e2e:.2f}× sooner" if e2e is not None and e2e >= 1.0 else (
            f", and took {1 / e2e:.2f}× as long end to end" if e2e else "")
    verdict = result.verdict if result.pairs else ("faster" if ms >= 1.0 else "slower")
    if verdict == "faster":
        return f"Speculation decoded {ms:.2f}× as fast{spread}{sooner}." + busy
    if verdict == "slower":
        return f"Speculation was slower here: {ms:.2f}× the decode speed{spread}{sooner}." + busy
    if len(kept) < 2:
        return (f"One undisturbed pair only: {ms:.2f}× the decode speed; one pair is no "
                "verdict, run the race again." + busy)
    assert r is not None  # two kept pairs or more
    if len(kept) < VERDICT_MIN_PAIRS and result.kept_side is not None:
        return (f"Only {len(kept)} undisturbed pairs, {r[0]:.2f}–{r[1]:.2f}× (median "
                f"{ms:.2f}×): a verdict needs {VERDICT_MIN_PAIRS} that agree, run the race "
                "again." + busy)
    return (f"No verdict: the pairs ran {r[0]:.2f}–{r[1]:.2f}× (median {ms:.2f}×); a "
            f"verdict needs every pair more than {VERDICT_MARGIN:.0%} to the same side of "
            "1×." + busy)


def nothing_drafted_headline(result: RaceResult, ms: float, spread: str) -> str:
    """The outcome of a race whose "on" runs proposed no draft token.

    No draft was checked, so no gain came from drafting; but the drafter still ran (a
    draft model reads the prompt and runs its steps, prompt lookup searches the context
    each round), so "on" is not plain decoding at plain cost. The pairs decide as for
    any race (:attr:`RaceResult.verdict`): when every kept pair ran "on" slower, it was
    slower (:func:`prediction_note` then names the drafter's measured work); only pairs
    that do not agree are called run-to-run variation. ``ms``: the measured speedup;
    ``spread``: its median-and-range words.
    """
    kept = result.kept_speedups
    verdict = result.verdict if result.pairs else None
    if verdict == "slower":
        return (f"Nothing was drafted, and speculation was still slower: {ms:.2f}× the decode "
                f"speed{spread}, slower in every pair.")
    if verdict == "faster":
        return (f"Nothing was drafted, yet speculation on ran faster in every pair: {ms:.2f}× "
                f"the decode speed{spread}. No draft token was checked, so the gap did not "
                "come from drafting.")
    if 2 <= len(kept) < VERDICT_MIN_PAIRS and result.kept_side is not None:
        return (f"Nothing was drafted. Only {len(kept)} undisturbed pairs ({ms:.2f}× the "
                f"decode speed{spread}): a verdict needs {VERDICT_MIN_PAIRS} that agree, run "
                "the race again.")
    if len(kept) >= 2 and result.speedup_range is not None:
        lo, hi = result.speedup_range
        return (f"Nothing was drafted, and the pairs do not agree: they ran {lo:.2f}–{hi:.2f}× "
                f"(median {ms:.2f}×), not all more than {VERDICT_MARGIN:.0%} to one side of "
                "1×: run-to-run variation, not a speedup.")
    return (f"Nothing was drafted. One pair only: {ms:.2f}× the decode speed; one pair "
            "cannot tell the drafter's own cost from run-to-run variation, run the race "
            "again.")


def drafter_cost_words(result: RaceResult) -> str:
    """What the "on" run's drafter cost though it proposed nothing, from the replayed
    pair's figures: a draft model's reading of the prompt (its TTFT against plain's,
    when more than :data:`VERDICT_MARGIN` longer), its draft steps or a model-free
    drafter's lookups (seconds, share of the decode time), and drafts the cost-aware
    policy declined. Empty when none of these was measured."""
    so, sn = result.off.stats, result.on.stats
    info = sn.mode.info
    model = info is not None and info.needs is not DrafterNeeds.NOTHING
    parts: list[str] = []
    if model and so.ttft > 0 and sn.ttft > so.ttft * (1.0 + VERDICT_MARGIN):
        parts.append(f"it read the prompt too (TTFT {sn.ttft * 1000:.0f} ms against "
                     f"{so.ttft * 1000:.0f} ms off)")
    if sn.draft_time > 0 and sn.decode_time > 0:
        share = f"{sn.draft_time / sn.decode_time:.0%} of the {sn.decode_time:.2f} s decode"
        if model and sn.draft_steps:
            parts.append(f"its {sn.draft_steps} draft steps took {sn.draft_time:.2f} s "
                         f"({share}) and no token was proposed")
        elif not model:  # what it found was declined, or there was nothing to find
            parts.append(f"its lookups in {sn.rounds} rounds took {sn.draft_time * 1000:.0f} "
                         f"ms ({share})" + ("" if sn.declined else
                                            " and found nothing to propose"))
    if model and sn.draft_catch_up_time > 0:
        parts.append(f"catching up with the tokens of rounds that drafted nothing took "
                     f"{sn.draft_catch_up_time:.2f} s")
    if sn.declined:
        parts.append(f"the cost-aware policy declined all {sn.declined} drafts (checking "
                     "them was expected to cost more than they would save)")
    if not parts:
        return ""
    who = ("The draft model" if sn.mode is SpecMode.DRAFT_MODEL
           else info.words.capitalize() if info is not None else "The drafter")
    return f"{who} still ran: " + "; ".join(parts) + "."


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def lane_winner(result: RaceResult) -> tuple[str, str] | None:
    """The lane ("off" or "on") to badge and the badge: "finished first" with its
    end-to-end seconds and how many times sooner, when both lanes wrote as many tokens;
    else (the texts differ in length: finishing first would compare unequal work) the
    lane that decoded more tokens per second, and how many each wrote. None when the
    race was stopped, when the replayed pair is within :data:`VERDICT_MARGIN` of a tie,
    or when the race's verdict over all its pairs is not that side (the lanes replay one
    pair: a badge beside "no verdict" would contradict it)."""
    off, on = result.off, result.on
    if result.cancelled or off.duration <= 0 or on.duration <= 0:
        return None
    same = off.stats.emitted == on.stats.emitted
    if same:
        off_t, on_t = off.duration, on.duration
    elif off.stats.decode_tps and on.stats.decode_tps:
        off_t, on_t = 1.0 / off.stats.decode_tps, 1.0 / on.stats.decode_tps
    else:
        return None
    side, ratio = ("on", off_t / on_t) if on_t < off_t else ("off", on_t / off_t)
    if ratio < 1.0 + VERDICT_MARGIN:
        return None
    if result.pairs and (result.verdict != ("faster" if side == "on" else "slower")
                         or result.pairs[0].disturbed(result.typical_load)):
        return None  # no verdict that side, or the replayed pair itself was left out
    won, lost = (on, off) if side == "on" else (off, on)
    if same:
        return side, f"finished first: {won.duration:.2f} s, {ratio:.2f}× sooner"
    return side, (f"decoded {ratio:.2f}× as fast ({won.stats.emitted} tokens against "
                  f"{lost.stats.emitted})")


def replay_status(result: RaceResult) -> str:
    """The line under the lanes once their replay ends: which run they showed."""
    if result.cancelled:
        return "Stopped: the figures below cover what ran before the stop."
    if len(result.pairs) > 1:
        return (f"Finished. The lanes replayed the first of {len(result.pairs)} off/on pairs "
                "at its pace" + ("; the speedup below is the median over the pairs kept."
                                 if result.kept_speedups else "."))
    return "Finished."


def prediction_note(result: RaceResult, cpu_backend: bool) -> str | None:
    """Why the measured speedup falls short of the predicted one, when it clearly does;
    for a race in which nothing was drafted, what the drafter cost all the same
    (:func:`drafter_cost_words`).

    The predicted speedup E(α, k) / (1 + c·k) assumes the target checks k + 1 tokens in
    the time of one plain step (Leviathan et al. 2023), which holds where decoding is
    limited by memory bandwidth (GPUs); on a CPU a batch costs more.
    """
    if result.on.stats.proposed == 0 and not result.cancelled:
        return drafter_cost_words(result) or None  # no prediction without drafts
    ms, ps = result.measured_speedup, result.predicted_speedup
    if ms is None or ps is None or ps < 1.25 * ms or result.on.stats.few_drafts:
        return None
    where = "on this CPU backend" if cpu_backend else "on this machine"
    cost = result.on.stats.verification_cost
    check = (f"the target's checks of {cost[0]:.1f} tokens on average took {cost[1]:.1f} "
             "one-token steps each" if cost is not None else
             f"checking {result.on.draft_max + 1} tokens at once costs more than that")
    return (f"The prediction ({ps:.2f}×) assumes the target checks k + 1 tokens in the time "
            f"of one; {where}, {check}, so the measured {ms:.2f}× is lower.")


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
    on_label = f"on ({rec.drafter}, {draft_length_words(r.on.draft_max, rec.adaptive)})"
    lines = [
        f"# Tandem race: {rec.model_name}",
        "",
        f"Target {rec.model_name}; speculation {on_label}; seed {r.seed}, temperature "
        f"{r.temperature:g}, at most {rec.max_tokens} tokens; "
        f"{'CPU' if rec.cpu_backend else 'GPU'} backend"
        f"{', exact verification' if rec.exact_verification else ''}.",
        "",
        speedup_headline(r) + " " + identical_text(r),
        "",
        f"| figure | speculation off | speculation {_cell(on_label)} |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {_cell(a)} | {_cell(b)} | {_cell(c)} |" for a, b, c in race_table_rows(r)]
    for note in (prediction_note(r, rec.cpu_backend), difference_text(r)):
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
