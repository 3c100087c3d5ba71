"""Benchmarks of speculation off vs on: ``python -m app bench`` and the k sweep.

This module measures what speculative decoding buys on the user's own machine, with the
engine's own :class:`~app.engine.session.Session` (no Qt). It serves three callers:

* the CLI subcommand ``python -m app bench`` (:func:`add_cli_parsers`), which runs a
  prompt set with speculation off and at one or more draft lengths k, *interleaved in one
  process*, and reports per configuration: median decode tok/s, per-token latency
  p50/p95, median TTFT, α, τ, c, predicted speedup, measured speedup against "off" from
  the same run (ratio of medians), and how many outputs were identical to "off";
* the race view's k sweep (:func:`run_k_sweep`): one prompt over k = 1, 2, 3, 4, 5, 6, 8,
  measured tok/s per k next to the predicted curve E(α, k) / (1 + c·k) and a
  recommended k;
* ``bench/`` scripts, which compare Tandem with llama.cpp's own tools.

Prompt sets are data: ``builtin:code`` and ``builtin:chat`` live in
``resources/prompts/{code,chat}.json``; a user file may be JSON, JSON Lines or plain
text (see :func:`load_prompts`). Timings come from the engine's events
(``time.perf_counter``); nothing here asserts on speed.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.engine.chat import ChatMessage, tokenize_plain
from app.engine.cli_options import (
    add_drafting_args,
    add_model_args,
    check_model_files,
    drafter_mode,
    session_config,
    speculation_configs,
)
from app.engine.events import Event, Finished
from app.engine.session import Session
from app.engine.stats import SpecStats, best_draft_length, predicted_speedup, round_mix_speedup
from app.errors import TandemError
from app.options import SamplingParams, SpecMode, SpeculationConfig

PromptFormat = Literal["auto", "plain", "chat"]

#: Draft lengths of the race view's k sweep (issue 5).
DEFAULT_SWEEP_KS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8)

BUILTIN_SETS = ("code", "chat")


# -- prompt sets ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BenchPrompt:
    """One benchmark prompt in both formats.

    ``plain``: a completion prompt for base models (Gemma 3 270M has no chat template), so
    that the model continues sensibly; ``chat``: the user message for models with a chat
    template; ``stop``: stop strings used with ``plain`` (a chat reply ends at the
    template's end-of-turn token instead).
    """

    name: str
    plain: str
    chat: str
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PreparedPrompt:
    """Prompt token ids (starting with exactly one BOS where the model adds one) and the
    stop strings that go with them."""

    tokens: tuple[int, ...]
    stop: tuple[str, ...] = ()
    name: str = ""
    format: Literal["plain", "chat"] = "plain"


def resources_dir() -> Path:
    """The ``resources/`` folder: next to the ``app`` package in a checkout, or inside a
    PyInstaller bundle (``sys._MEIPASS``)."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        candidate = Path(bundle) / "resources"
        if candidate.is_dir():
            return candidate
    return Path(__file__).resolve().parents[2] / "resources"


def _prompt_from_obj(obj: Any, index: int, source: str) -> BenchPrompt:
    if isinstance(obj, str):
        return BenchPrompt(name=f"prompt-{index + 1}", plain=obj, chat=obj)
    if isinstance(obj, dict):
        text = obj.get("text")
        plain = obj.get("plain", text)
        chat = obj.get("chat", text if text is not None else plain)
        if not isinstance(plain, str) or not isinstance(chat, str):
            raise TandemError(
                f"{source}: prompt {index + 1} needs a 'text' string (or 'plain' and 'chat')."
            )
        stop = obj.get("stop", [])
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise TandemError(f"{source}: prompt {index + 1}: 'stop' must be a list of strings.")
        name = obj.get("name") or f"prompt-{index + 1}"
        return BenchPrompt(name=str(name), plain=plain, chat=chat, stop=tuple(stop))
    raise TandemError(f"{source}: prompt {index + 1} is neither a string nor an object.")


def load_prompts(spec: str) -> list[BenchPrompt]:
    """Load a prompt set.

    Args:
        spec: ``builtin:code`` or ``builtin:chat``, or a file path:

            * ``.json``: a list of prompts, or an object with a ``prompts`` list (the
              builtin format); each prompt is a string or an object with ``text`` (or
              ``plain`` and ``chat``), optional ``name`` and ``stop``;
            * ``.jsonl``: one such prompt per line;
            * anything else: plain text, prompts separated by lines holding only ``---``.

    Returns:
        At least one prompt.

    Raises:
        TandemError: unknown builtin set, missing or unreadable file, no prompts.
    """
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        if name not in BUILTIN_SETS:
            raise TandemError(
                f"Unknown builtin prompt set {spec!r}; choose "
                + " or ".join(f"builtin:{n}" for n in BUILTIN_SETS)
                + "."
            )
        path = resources_dir() / "prompts" / f"{name}.json"
    else:
        path = Path(spec)
    if not path.is_file():
        raise TandemError(f"Prompt file not found: {path}")
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TandemError(f"Could not read the prompt file {path}: {exc}") from exc
    suffix = path.suffix.lower()
    items: list[Any]
    try:
        if suffix == ".json":
            data = json.loads(raw)
            items = data.get("prompts", []) if isinstance(data, dict) else data
            if not isinstance(items, list):
                raise TandemError(f"{path}: expected a list of prompts.")
        elif suffix == ".jsonl":
            items = [json.loads(line) for line in raw.splitlines() if line.strip()]
        else:
            blocks: list[list[str]] = [[]]
            for line in raw.splitlines():
                if line.strip() == "---":
                    blocks.append([])
                else:
                    blocks[-1].append(line)
            items = ["\n".join(b).strip("\n") for b in blocks]
            items = [t for t in items if t.strip()]
    except json.JSONDecodeError as exc:
        raise TandemError(f"{path} is not valid JSON: {exc}") from exc
    prompts = [_prompt_from_obj(obj, i, str(path)) for i, obj in enumerate(items)]
    if not prompts:
        raise TandemError(f"{path} holds no prompts.")
    return prompts


def resolve_format(session: Session, fmt: PromptFormat) -> Literal["plain", "chat"]:
    """``auto``: ``chat`` when the model has its own chat template, else ``plain``."""
    if fmt == "auto":
        return "plain" if session.chat_format.uses_fallback else "chat"
    return fmt


def prepare_prompt(
    session: Session, prompt: BenchPrompt, fmt: PromptFormat = "auto"
) -> PreparedPrompt:
    """Tokenize a benchmark prompt for this session's target in the chosen format."""
    resolved = resolve_format(session, fmt)
    if resolved == "chat":
        return prepare_chat(session, [ChatMessage("user", prompt.chat)], name=prompt.name)
    return PreparedPrompt(
        tokens=tuple(tokenize_plain(session.target, prompt.plain)),
        stop=prompt.stop,
        name=prompt.name,
        format="plain",
    )


def prepare_chat(
    session: Session, messages: Sequence[ChatMessage], name: str = ""
) -> PreparedPrompt:
    """A conversation through the model's chat template (or the plain fallback
    transcript), with the format's stop strings."""
    return PreparedPrompt(
        tokens=tuple(session.chat_prompt(messages)),
        stop=tuple(session.chat_format.stop),
        name=name,
        format="chat",
    )


# -- statistics ----------------------------------------------------------------------


def median(values: Iterable[float]) -> float | None:
    """The median, or None for no values."""
    v = list(values)
    return statistics.median(v) if v else None


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0 ≤ q ≤ 100) by linear interpolation between closest ranks.

    The same definition as NumPy's default (``method="linear"``) and Excel's
    PERCENTILE.INC: position (n − 1)·q/100 in the sorted values. None for no values.

    Raises:
        ValueError: q outside [0, 100].
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    v = sorted(values)
    if not v:
        return None
    pos = (len(v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    frac = pos - lo
    return v[lo] + (v[hi] - v[lo]) * frac


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first token where two outputs differ; None when they are identical.

    When one is a strict prefix of the other, the length of the shorter one.
    """
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else n


def token_latencies(token_times: Sequence[float]) -> list[float]:
    """Seconds between consecutive tokens (the first token's wait is TTFT, not a gap).

    Tokens accepted from one draft are sampled in one pass, so speculation gives many
    near-zero gaps and one longer gap per round: p50 falls, p95 shows the round time.
    """
    return [b - a for a, b in zip(token_times, token_times[1:])]


# -- runs and their summary ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One timed generation of a benchmark.

    ``label``: the configuration (``off``, ``k=4``…). ``token_times``: seconds since the
    request started, one per reply token. ``identical_to_off``: the token ids equal those
    of the ``off`` run of the same prompt and repeat (None for ``off`` itself or when no
    such run exists); ``first_difference``: the first differing token index.
    """

    label: str
    prompt_name: str
    prompt_index: int
    repeat: int
    mode: str
    draft_max: int
    finish_reason: str
    token_ids: tuple[int, ...]
    token_times: tuple[float, ...]
    stats: SpecStats
    identical_to_off: bool | None = None
    first_difference: int | None = None

    @property
    def decode_tps(self) -> float | None:
        return self.stats.decode_tps

    def to_dict(self, include_tokens: bool = False) -> dict[str, Any]:
        """JSON-ready; token ids and times only with ``include_tokens``."""
        d: dict[str, Any] = {
            "label": self.label,
            "prompt": self.prompt_name,
            "prompt_index": self.prompt_index,
            "repeat": self.repeat,
            "mode": self.mode,
            "draft_max": self.draft_max,
            "finish_reason": self.finish_reason,
            "emitted": len(self.token_ids),
            "decode_tps": self.stats.decode_tps,
            "ttft_s": self.stats.ttft,
            "identical_to_off": self.identical_to_off,
            "first_difference": self.first_difference,
            "stats": self.stats.to_dict(),
        }
        if include_tokens:
            d["token_ids"] = list(self.token_ids)
            d["token_times"] = list(self.token_times)
        return d


@dataclass(frozen=True, slots=True)
class ConfigSummary:
    """Aggregates of every run of one configuration.

    Definitions (times in seconds, rates per second):

    * ``decode_tps_median``: median over runs of emitted / decode time (prefill excluded);
    * ``token_latency_p50``/``p95``: percentiles of the gaps between consecutive tokens,
      pooled over all runs (:func:`token_latencies`, :func:`percentile`);
    * ``ttft_median``: median time to first token;
    * ``acceptance_rate`` α and ``mean_acceptance_length`` τ: pooled over runs
      (Σ accepted / Σ drafted, Σ emitted / Σ rounds), so long runs weigh more, exactly as
      if all runs were one;
    * ``draft_cost_ratio`` c: median of the runs' c;
    * ``predicted_speedup``: from the pooled α, the median c and the pooled mean draft
      length and share of plain rounds (:func:`app.engine.stats.round_mix_speedup`);
    * ``measured_speedup``: ``decode_tps_median`` / that of ``off`` from the same
      benchmark (ratio of medians);
    * ``identical``/``compared``: runs whose token ids equal the ``off`` run of the same
      prompt and repeat / runs that had one to compare with.
    """

    label: str
    mode: str
    draft_max: int
    runs: int
    emitted: int
    decode_tps_median: float | None
    end_to_end_tps_median: float | None
    token_latency_p50: float | None
    token_latency_p95: float | None
    ttft_median: float | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    draft_cost_ratio: float | None
    predicted_speedup: float | None
    measured_speedup: float | None
    identical: int
    compared: int
    acceptance_at: tuple[float | None, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "mode": self.mode,
            "draft_max": self.draft_max,
            "runs": self.runs,
            "emitted": self.emitted,
            "decode_tps_median": self.decode_tps_median,
            "end_to_end_tps_median": self.end_to_end_tps_median,
            "token_latency_p50_s": self.token_latency_p50,
            "token_latency_p95_s": self.token_latency_p95,
            "ttft_median_s": self.ttft_median,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "draft_cost_ratio": self.draft_cost_ratio,
            "predicted_speedup": self.predicted_speedup,
            "measured_speedup": self.measured_speedup,
            "identical_to_off": self.identical,
            "compared_to_off": self.compared,
            "acceptance_at": list(self.acceptance_at),
        }


def summarize(records: Sequence[RunRecord], labels: Sequence[str] | None = None) -> list[ConfigSummary]:
    """One :class:`ConfigSummary` per configuration label, in ``labels`` order (default:
    order of first appearance). The ``off`` label is the speedup baseline."""
    order: list[str] = list(labels) if labels is not None else []
    for r in records:
        if r.label not in order:
            order.append(r.label)
    by_label: dict[str, list[RunRecord]] = {lab: [] for lab in order}
    for r in records:
        by_label[r.label].append(r)

    def med_tps(rs: Sequence[RunRecord]) -> float | None:
        return median(t for r in rs if (t := r.stats.decode_tps) is not None)

    off_tps = med_tps(by_label.get("off", []))
    out: list[ConfigSummary] = []
    for lab in order:
        rs = by_label[lab]
        if not rs:
            continue
        mode = rs[0].mode
        k = rs[0].draft_max
        verified = sum(r.stats.verified for r in rs)
        accepted = sum(r.stats.accepted for r in rs)
        rounds = sum(r.stats.rounds for r in rs)
        emitted = sum(r.stats.emitted for r in rs)
        alpha = accepted / verified if verified else None
        tau = emitted / rounds if rounds else None
        c = median(cr for r in rs if (cr := r.stats.draft_cost_ratio) is not None)
        draft_rounds = sum(r.stats.draft_rounds for r in rs)
        proposed = sum(r.stats.proposed for r in rs)
        pred = None
        if alpha is not None and c is not None and k > 0:
            # k̄ and the share of plain rounds as the runs actually had them (the adaptive
            # policy drafts less than k, sometimes nothing), as SpecStats does per run.
            pred = (round_mix_speedup(alpha, c, proposed / draft_rounds, draft_rounds,
                                      rounds - draft_rounds)
                    if draft_rounds else predicted_speedup(alpha, k, c))
        tps = med_tps(rs)
        gaps = [g for r in rs for g in token_latencies(r.token_times)]
        width = max((len(r.stats.verified_at) for r in rs), default=0)
        at: list[float | None] = []
        for i in range(width):
            d_i = sum(r.stats.verified_at[i] for r in rs if i < len(r.stats.verified_at))
            a_i = sum(r.stats.accepted_at[i] for r in rs if i < len(r.stats.accepted_at))
            at.append(a_i / d_i if d_i else None)
        compared = [r for r in rs if r.identical_to_off is not None]
        out.append(
            ConfigSummary(
                label=lab,
                mode=mode,
                draft_max=k,
                runs=len(rs),
                emitted=emitted,
                decode_tps_median=tps,
                end_to_end_tps_median=median(
                    t for r in rs if (t := r.stats.end_to_end_tps) is not None
                ),
                token_latency_p50=percentile(gaps, 50),
                token_latency_p95=percentile(gaps, 95),
                ttft_median=median(r.stats.ttft for r in rs if r.token_ids),
                acceptance_rate=alpha,
                mean_acceptance_length=tau,
                draft_cost_ratio=c,
                predicted_speedup=pred,
                measured_speedup=(tps / off_tps) if tps is not None and off_tps else None,
                identical=sum(1 for r in compared if r.identical_to_off),
                compared=len(compared),
                acceptance_at=tuple(at),
            )
        )
    return out


def config_label(spec: SpeculationConfig) -> str:
    """``off`` for plain decoding, else ``k=<draft_max>``."""
    return "off" if spec.mode is SpecMode.OFF else f"k={spec.draft_max}"


@dataclass
class BenchReport:
    """Everything one benchmark measured, with the settings it ran under.

    ``records``: grouped by (repeat, prompt), ``off`` first in each group;
    ``summaries`` come from :func:`summarize`.
    ``settings`` is free-form (model paths, threads, prompt set…) and is printed as is.
    """

    settings: dict[str, Any]
    records: list[RunRecord]
    summaries: list[ConfigSummary]
    cancelled: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self, include_tokens: bool = False) -> dict[str, Any]:
        """JSON-ready: ``settings``, ``configs`` (one summary each), ``runs``, ``notes``."""
        return {
            "settings": self.settings,
            "configs": [s.to_dict() for s in self.summaries],
            "runs": [r.to_dict(include_tokens) for r in self.records],
            "cancelled": self.cancelled,
            "notes": list(self.notes),
        }

    def table(self) -> tuple[list[str], list[list[str]]]:
        """Header and rows of the per-configuration table (human units: ms, ×, %)."""
        header = [
            "config", "runs", "decode tok/s", "lat p50 ms", "lat p95 ms", "TTFT ms",
            "α", "τ", "c", "pred ×", "meas ×", "identical",
        ]
        rows: list[list[str]] = []
        for s in self.summaries:
            rows.append([
                s.label,
                str(s.runs),
                _fmt(s.decode_tps_median, "{:.1f}"),
                _fmt(_ms(s.token_latency_p50), "{:.1f}"),
                _fmt(_ms(s.token_latency_p95), "{:.1f}"),
                _fmt(_ms(s.ttft_median), "{:.0f}"),
                _fmt(s.acceptance_rate, "{:.2f}"),
                _fmt(s.mean_acceptance_length, "{:.2f}"),
                _fmt(s.draft_cost_ratio, "{:.3f}"),
                _fmt(s.predicted_speedup, "{:.2f}"),
                _fmt(s.measured_speedup, "{:.2f}"),
                f"{s.identical}/{s.compared}" if s.compared else "—",
            ])
        return header, rows

    def to_markdown(self) -> str:
        """A Markdown table plus a line of settings and the notes."""
        header, rows = self.table()
        lines = [
            "| " + " | ".join(header) + " |",
            "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |",
        ]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines.append("")
        lines.append(_settings_line(self.settings))
        for n in self.notes:
            lines.append("")
            lines.append(f"> {n}")
        return "\n".join(lines) + "\n"

    def to_text(self) -> str:
        """An aligned plain-text table for a terminal."""
        header, rows = self.table()
        widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]

        def fmt_row(r: Sequence[str]) -> str:
            return "  ".join(
                c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)
            )

        lines = [fmt_row(header)] + [fmt_row(r) for r in rows]
        lines.append("")
        lines.append(_settings_line(self.settings))
        lines += self.notes
        return "\n".join(lines) + "\n"


def _ms(v: float | None) -> float | None:
    return v * 1000.0 if v is not None else None


def _fmt(v: float | None, spec: str) -> str:
    return "—" if v is None else spec.format(v)


def _settings_line(settings: dict[str, Any]) -> str:
    keys = ("model", "draft", "mode", "prompts", "format", "repeat", "max_tokens", "threads",
            "temperature", "seed")
    parts = [f"{k}={settings[k]}" for k in keys if settings.get(k) is not None]
    return "settings: " + ", ".join(parts)


# -- running -------------------------------------------------------------------------


def generate_once(
    session: Session,
    prompt: PreparedPrompt,
    sampling: SamplingParams,
    speculation: SpeculationConfig,
    cancel: threading.Event | None = None,
    *,
    fresh_cache: bool = True,
    on_event: Callable[[Event], None] | None = None,
) -> Finished:
    """Run one generation to completion and return its :class:`Finished` event.

    Args:
        prompt: tokens and stop strings; the stop strings are added to ``sampling``'s.
        fresh_cache: empty the target's KV cache first, so that every run pays the same
            prefill and TTFT compares like with like (otherwise a repeated prompt is
            served from the cache).
        on_event: called with every event (text deltas, stats updates, the finish).

    Raises:
        TandemError: the engine failed (see :meth:`Session.generate`).
    """
    if prompt.stop:
        sampling = sampling.model_copy(update={"stop": tuple(sampling.stop) + prompt.stop})
    if fresh_cache:
        session.reset_cache()
    gc.collect()
    finished: Finished | None = None
    interval = 0.1 if on_event is not None else math.inf
    for ev in session.generate(list(prompt.tokens), sampling, speculation, cancel,
                               stats_interval=interval):
        if on_event is not None:
            on_event(ev)
        if isinstance(ev, Finished):
            finished = ev
    if finished is None:  # the engine guarantees one; stay explicit for type checkers
        raise TandemError("The generation ended without a result.")
    return finished


ProgressFn = Callable[[int, int, RunRecord], None]
"""Called after each timed run with (runs done, runs total, the run's record)."""


def run_bench(
    session: Session,
    prompts: Sequence[PreparedPrompt],
    speculations: Sequence[SpeculationConfig],
    sampling: SamplingParams,
    *,
    repeat: int = 3,
    warmup: bool = True,
    fresh_cache: bool = True,
    cancel: threading.Event | None = None,
    progress: ProgressFn | None = None,
    settings: dict[str, Any] | None = None,
) -> BenchReport:
    """Run every prompt with speculation off and with each configuration, interleaved.

    For each repeat and each prompt, ``off`` and every configuration run back to back,
    in an order rotated by one each time, so that slow drifts of the machine (thermal,
    other processes) spread over all configurations instead of favouring one.

    Args:
        prompts: prepared prompts (:func:`prepare_prompt`).
        speculations: the "on" configurations (an ``off`` one is always added first;
            give each a distinct draft length).
        sampling: sampling settings; with a fixed seed (≥ 0) every run draws the same
            random numbers, so "identical to off" is meaningful at any temperature.
        repeat: runs per prompt and configuration (≥ 1).
        warmup: first run each configuration once on the first prompt (16 tokens,
            not recorded), which maps the weights in and builds the compute graphs.
        cancel: stops after the current run; the report is marked ``cancelled``.

    Returns:
        The report. Its records are grouped by (repeat, prompt) and listed in
        configuration order, ``off`` first, whatever order they ran in.

    Raises:
        ValueError: no prompts, repeat < 1, or two configurations with the same label.
        TandemError: the engine failed.
    """
    if not prompts:
        raise ValueError("no prompts")
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    configs = [SpeculationConfig()] + [s for s in speculations if s.speculating]
    labels = [config_label(s) for s in configs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"configurations must have distinct draft lengths: {labels}")
    if sampling.seed < 0:
        # One seed for every run, so that off and on draw the same random numbers.
        sampling = sampling.model_copy(update={"seed": 0})

    if warmup:
        warm = sampling.model_copy(update={"max_tokens": min(16, sampling.max_tokens)})
        for spec in configs:
            if cancel is not None and cancel.is_set():
                break
            generate_once(session, prompts[0], warm, spec, cancel, fresh_cache=fresh_cache)

    records: list[RunRecord] = []
    total = repeat * len(prompts) * len(configs)
    step = 0
    cancelled = False
    for rep in range(repeat):
        for pi, prompt in enumerate(prompts):
            rot = (rep * len(prompts) + pi) % len(configs)
            order = configs[rot:] + configs[:rot]
            group: dict[str, RunRecord] = {}
            for spec in order:
                if cancel is not None and cancel.is_set():
                    cancelled = True
                    break
                fin = generate_once(session, prompt, sampling, spec, cancel, fresh_cache=fresh_cache)
                if fin.reason == "cancelled":
                    cancelled = True
                    break
                rec = RunRecord(
                    label=config_label(spec),
                    prompt_name=prompt.name or f"prompt-{pi + 1}",
                    prompt_index=pi,
                    repeat=rep,
                    mode=fin.stats.mode,
                    draft_max=fin.stats.draft_max,
                    finish_reason=fin.reason,
                    token_ids=fin.token_ids,
                    token_times=fin.token_times,
                    stats=fin.stats,
                )
                group[rec.label] = rec
                step += 1
                if progress is not None:
                    progress(step, total, rec)
            off = group.get("off")
            for lab in labels:
                rec_or_none = group.get(lab)
                if rec_or_none is None:
                    continue
                rec = rec_or_none
                if lab != "off" and off is not None:
                    diff = first_difference(off.token_ids, rec.token_ids)
                    rec = _replace(rec, identical_to_off=diff is None, first_difference=diff)
                records.append(rec)
            if cancelled:
                break
        if cancelled:
            break
    notes: list[str] = []
    fallback = {r.stats.fallback_reason for r in records if r.stats.fallback_reason}
    notes += sorted(fallback)
    report = BenchReport(
        settings=dict(settings or {}),
        records=records,
        summaries=summarize(records, labels),
        cancelled=cancelled,
        notes=notes,
    )
    if any(s.compared and s.identical < s.compared for s in report.summaries):
        report.notes.append(
            "Some outputs differ from 'off': the target verifies drafts in batches, and a "
            "batch is computed with a different order of floating-point operations than "
            "one token, so at a near-tie the target can pick the other token. Both are "
            "valid outputs of the target."
        )
    return report


def _replace(rec: RunRecord, **changes: Any) -> RunRecord:
    import dataclasses

    return dataclasses.replace(rec, **changes)


# -- the k sweep ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KSweepPoint:
    """Measured figures at one draft length k (medians over repeats; α pooled)."""

    k: int
    decode_tps: float | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    draft_cost_ratio: float | None
    predicted_speedup: float | None
    measured_speedup: float | None
    identical: bool


@dataclass(frozen=True, slots=True)
class KSweepResult:
    """A k sweep: plain decode speed, one point per k, and the predicted curve.

    ``acceptance_rate`` α is pooled over every k (Σ accepted / Σ drafted) and
    ``draft_cost_ratio`` c is the median over every k; ``predicted_curve`` holds
    (k, E(α, k) / (1 + c·k)) for k = 1 … max k, and ``predicted_tps`` the same times the
    plain decode speed, for drawing on the measured tok/s axis. ``recommended_k`` is the
    fastest measured k (ties: the smaller); ``predicted_best_k`` the model's choice.
    """

    plain_decode_tps: float | None
    points: tuple[KSweepPoint, ...]
    acceptance_rate: float | None
    draft_cost_ratio: float | None
    predicted_curve: tuple[tuple[int, float], ...]
    recommended_k: int | None
    predicted_best_k: int | None
    cancelled: bool = False

    @property
    def predicted_tps(self) -> tuple[tuple[int, float], ...]:
        if self.plain_decode_tps is None:
            return ()
        return tuple((k, s * self.plain_decode_tps) for k, s in self.predicted_curve)

    def to_dict(self) -> dict[str, Any]:
        return {
            "plain_decode_tps": self.plain_decode_tps,
            "points": [
                {
                    "k": p.k,
                    "decode_tps": p.decode_tps,
                    "acceptance_rate": p.acceptance_rate,
                    "mean_acceptance_length": p.mean_acceptance_length,
                    "draft_cost_ratio": p.draft_cost_ratio,
                    "predicted_speedup": p.predicted_speedup,
                    "measured_speedup": p.measured_speedup,
                    "identical": p.identical,
                }
                for p in self.points
            ],
            "acceptance_rate": self.acceptance_rate,
            "draft_cost_ratio": self.draft_cost_ratio,
            "predicted_curve": [list(x) for x in self.predicted_curve],
            "predicted_tps": [list(x) for x in self.predicted_tps],
            "recommended_k": self.recommended_k,
            "predicted_best_k": self.predicted_best_k,
            "cancelled": self.cancelled,
        }


def k_sweep_from_records(records: Sequence[RunRecord], cancelled: bool = False) -> KSweepResult:
    """Build a :class:`KSweepResult` from the runs of a sweep (exact pooled α)."""
    summaries = summarize(records)
    off = next((s for s in summaries if s.label == "off"), None)
    on = sorted((s for s in summaries if s.label != "off"), key=lambda s: s.draft_max)
    verified = sum(r.stats.verified for r in records if r.label != "off")
    accepted = sum(r.stats.accepted for r in records if r.label != "off")
    alpha = accepted / verified if verified else None
    return _sweep_result(off, on, alpha, cancelled)


def _sweep_result(
    off: ConfigSummary | None,
    on: Sequence[ConfigSummary],
    alpha: float | None,
    cancelled: bool,
) -> KSweepResult:
    c = median(s.draft_cost_ratio for s in on if s.draft_cost_ratio is not None)
    points = tuple(
        KSweepPoint(
            k=s.draft_max,
            decode_tps=s.decode_tps_median,
            acceptance_rate=s.acceptance_rate,
            mean_acceptance_length=s.mean_acceptance_length,
            draft_cost_ratio=s.draft_cost_ratio,
            predicted_speedup=s.predicted_speedup,
            measured_speedup=s.measured_speedup,
            identical=s.compared > 0 and s.identical == s.compared,
        )
        for s in on
    )
    k_max = max((p.k for p in points), default=0)
    curve: tuple[tuple[int, float], ...] = ()
    best_pred: int | None = None
    if alpha is not None and c is not None and k_max > 0:
        curve = tuple((k, predicted_speedup(alpha, k, c)) for k in range(1, k_max + 1))
        best_pred = best_draft_length(alpha, c, k_max)
    measured = [p for p in points if p.decode_tps is not None]
    rec = max(measured, key=lambda p: (p.decode_tps or 0.0, -p.k)).k if measured else None
    return KSweepResult(
        plain_decode_tps=off.decode_tps_median if off is not None else None,
        points=points,
        acceptance_rate=alpha,
        draft_cost_ratio=c,
        predicted_curve=curve,
        recommended_k=rec,
        predicted_best_k=best_pred,
        cancelled=cancelled,
    )


def run_k_sweep(
    session: Session,
    prompt: PreparedPrompt,
    sampling: SamplingParams,
    speculation: SpeculationConfig,
    ks: Sequence[int] = DEFAULT_SWEEP_KS,
    *,
    repeat: int = 1,
    warmup: bool = True,
    cancel: threading.Event | None = None,
    progress: ProgressFn | None = None,
) -> KSweepResult:
    """Run one prompt with speculation off and at every k in ``ks`` (the race view's sweep).

    Args:
        speculation: the drafter settings (mode draft-model or prompt-lookup, draft_min,
            draft_p_min, n-gram sizes); its ``draft_max`` is replaced by each k and the
            cost-aware policy is switched off, so every point drafts up to exactly k.
        ks: distinct draft lengths ≥ 1 (default 1, 2, 3, 4, 5, 6, 8).
        repeat: runs per k (medians are taken).

    Returns:
        One :class:`KSweepPoint` per k, the predicted curve from the measured α and c,
        and the recommended k.

    Raises:
        ValueError: speculation mode "off", or an empty or invalid ``ks``.
        TandemError: the engine failed.
    """
    if not speculation.speculating:
        raise ValueError("a k sweep needs a drafter (draft-model or prompt-lookup)")
    ks = sorted(set(ks))
    if not ks or ks[0] < 1:
        raise ValueError(f"draft lengths must be >= 1, got {ks}")
    # Each point must measure exactly k: the cost-aware policy would shorten drafts.
    specs = [speculation.model_copy(update={"draft_max": k, "adaptive": False}) for k in ks]
    report = run_bench(
        session, [prompt], specs, sampling,
        repeat=repeat, warmup=warmup, cancel=cancel, progress=progress,
    )
    return k_sweep_from_records(report.records, cancelled=report.cancelled)


# -- CLI -----------------------------------------------------------------------------


def _parse_ks(text: str) -> list[int]:
    try:
        ks = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--k wants comma-separated integers, got {text!r}") from exc
    if not ks or any(k < 1 or k > 64 for k in ks):
        raise argparse.ArgumentTypeError(f"--k wants draft lengths in 1..64, got {text!r}")
    return sorted(set(ks))


def add_cli_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bench`` to ``python -m app``'s subcommands (called by :mod:`app.cli`)."""
    p = sub.add_parser(
        "bench",
        help="benchmark speculation off vs on (interleaved, medians)",
        description=(
            "Run a prompt set with speculation off and on, interleaved in one process, and "
            "report per configuration: decode tok/s (median), per-token latency p50/p95, "
            "TTFT (median), acceptance rate α, mean acceptance length τ, draft cost ratio "
            "c, predicted and measured speedup, and outputs identical to 'off'. Without "
            "--draft or --prompt-lookup only 'off' runs."
        ),
    )
    add_model_args(p, n_ctx=4096)
    add_drafting_args(p)
    p.add_argument("--prompts", default="builtin:code",
                   help="builtin:code, builtin:chat, or a .json/.jsonl/.txt file (builtin:code)")
    p.add_argument("--k", type=_parse_ks, default=[4], metavar="K[,K…]",
                   help="draft lengths to compare with off, e.g. 1,3,5,8 (4)")
    p.add_argument("--repeat", type=int, default=3, help="runs per prompt and configuration (3)")
    p.add_argument("--max-tokens", type=int, default=128, help="reply tokens per run (128)")
    p.add_argument("--format", choices=("auto", "plain", "chat"), default="auto",
                   help="auto: chat template when the model has one, else plain completion")
    p.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (0)")
    p.add_argument("--seed", type=int, default=1234, help="one seed for every run (1234)")
    p.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up runs")
    p.add_argument("--keep-cache", action="store_true",
                   help="reuse the KV cache across runs (TTFT then measures cache hits)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.add_argument("--include-tokens", action="store_true",
                   help="with --json: add each run's token ids and times")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object")
    out.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.set_defaults(handler=_run_bench_cli)


def _run_bench_cli(args: argparse.Namespace) -> int:
    check_model_files(args)
    if args.repeat < 1:
        raise TandemError("Invalid option: --repeat must be at least 1.")
    if args.max_tokens < 1:
        raise TandemError("Invalid option: --max-tokens must be at least 1.")
    prompts = load_prompts(args.prompts)
    if args.limit is not None:
        prompts = prompts[: max(1, args.limit)]

    mode = drafter_mode(args)
    try:
        specs = speculation_configs(args, mode, args.k) if mode is not SpecMode.OFF else []
        sampling = SamplingParams(
            temperature=args.temp, seed=args.seed, max_tokens=args.max_tokens
        )
        config = session_config(args, mode)
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        raise TandemError(f"Invalid option: {str(exc).splitlines()[0]}") from exc

    def progress(done: int, total: int, rec: RunRecord) -> None:
        if args.quiet:
            return
        tps = rec.stats.decode_tps
        extra = ""
        if rec.stats.acceptance_rate is not None:
            extra = f"  α {rec.stats.acceptance_rate:.2f}"
        print(
            f"[{done}/{total}] {rec.prompt_name} {rec.label}: {len(rec.token_ids)} tokens, "
            f"{tps:.1f} tok/s{extra}" if tps else f"[{done}/{total}] {rec.prompt_name} {rec.label}",
            file=sys.stderr,
            flush=True,
        )

    cancel = threading.Event()
    with Session.open(config) as session:
        fmt = resolve_format(session, args.format)
        prepared = [prepare_prompt(session, pr, fmt) for pr in prompts]
        settings: dict[str, Any] = {
            "model": str(args.model),
            "draft": str(args.draft) if args.draft else None,
            "mode": mode.value,
            "k": list(args.k) if mode is not SpecMode.OFF else [],
            "prompts": args.prompts,
            "n_prompts": len(prepared),
            "format": fmt,
            "repeat": args.repeat,
            "max_tokens": args.max_tokens,
            "n_ctx": session.n_ctx,
            "threads": session.ctx.n_threads,
            "n_gpu_layers": session.n_gpu_layers,
            "temperature": args.temp,
            "seed": args.seed,
            "fresh_cache": not args.keep_cache,
            "llama_cpp_python": _llama_cpp_version(),
        }
        try:
            report = run_bench(
                session, prepared, specs, sampling,
                repeat=args.repeat, warmup=not args.no_warmup,
                fresh_cache=not args.keep_cache, cancel=cancel, progress=progress,
                settings=settings,
            )
        except KeyboardInterrupt:
            cancel.set()
            raise
    if args.json:
        json.dump(report.to_dict(include_tokens=args.include_tokens), sys.stdout,
                  ensure_ascii=False, indent=1)
        sys.stdout.write("\n")
    elif args.markdown:
        sys.stdout.write(report.to_markdown())
    else:
        sys.stdout.write(report.to_text())
    return 0


def _llama_cpp_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("llama-cpp-python")
    except Exception:
        return None
