"""``python -m app bench --server URL_ON --server-off URL_OFF --concurrency 1,2,4,8``.

The serving crossover on the command line (:mod:`app.remote.crossover` measures): the
same prompt set sent to a server with speculation and one without at each concurrency,
a table per level (per-stream and aggregate tok/s, TTFT and latency p50/p95, α, τ,
speedup) and the concurrency where speculation stops paying. ``--json`` prints the
result; ``--out FILE.json`` saves it and a chart beside it (``FILE.png``, drawn by the
window's own chart in a child process with Qt offscreen, since the CLI holds no Qt).
The race window opens the JSON too (Race… → Open crossover…).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from app.cli.json_output import print_json
from app.engine.measure.prompts import load_prompts
from app.errors import TandemError
from app.formatting import MISSING
from app.remote.crossover import CrossoverPlan, CrossoverResult, run_crossover

#: hidden first argument: the entry point renders a crossover JSON to a PNG (Qt offscreen)
RENDER_CHART_ARG = "--tandem-render-crossover"


def add_crossover_args(p: argparse.ArgumentParser) -> None:
    """Add the crossover's options to ``bench``'s parser (``--server`` and
    ``--api-key-env`` come from :func:`app.cli.remote.add_server_args`; ``bench`` makes
    ``--model`` optional, and a local bench checks it itself)."""
    g = p.add_argument_group("serving crossover (remote servers)")
    g.add_argument("--server-off", metavar="URL",
                   help="the same model served without speculation: with --server, the "
                        "crossover")
    g.add_argument("--concurrency", default="1,2,4,8", type=_levels,
                   help="streams at once, comma-separated (1,2,4,8)")
    g.add_argument("--out", type=Path, default=None,
                   help="save the result as this .json file, with a .png chart beside it")


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("concurrency levels are integers ≥ 1, like 1,2,4,8")
    return levels


def run_server_bench(args: argparse.Namespace) -> int:
    """The crossover; 2 with one line for bad options or an unreachable server."""
    if not args.server or not args.server_off:
        raise TandemError("Invalid option: the serving crossover needs both --server (with "
                          "speculation) and --server-off (without).")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise TandemError(f"The environment variable {args.api_key_env} is not set.")
    prompts = load_prompts(args.prompts)
    if args.limit is not None:
        prompts = prompts[: max(1, args.limit)]
    model = str(args.model) if args.model is not None else None
    plan = CrossoverPlan(server_on=args.server, server_off=args.server_off,
                         prompts=tuple((p.name, p.chat) for p in prompts),
                         concurrency=args.concurrency, max_tokens=args.max_tokens,
                         model_on=model, model_off=model, api_key=api_key,
                         seed=args.seed if args.seed is not None else 1234,
                         prompt_set=args.prompts)

    def progress(side: str, concurrency: int, done: int, total: int) -> None:
        if not args.quiet:
            print(f"[c={concurrency} {side}] {done}/{total}", file=sys.stderr, flush=True)

    cancel = threading.Event()
    try:
        result = run_crossover(plan, cancel, progress)
    except KeyboardInterrupt:
        cancel.set()
        raise
    data = result.to_dict()
    if args.out is not None:
        chart = save_with_chart(data, args.out)
        print(f"saved {args.out}" + (f" and {chart}" if chart else ""), file=sys.stderr)
    if args.json:
        print_json(data)
    else:
        sys.stdout.write(crossover_text(result))
    return 0


def save_with_chart(data: dict[str, object], out: Path) -> Path | None:
    """Write ``data`` to ``out`` and the chart to ``out`` with ``.png``; the chart's path,
    or None (with the reason on stderr) when it could not be drawn."""
    try:
        out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise TandemError(f"Cannot write {out}: {exc.strerror or exc}.") from exc
    png = out.with_suffix(".png")
    if getattr(sys, "frozen", False):
        cmd = [sys.executable, RENDER_CHART_ARG, str(out), str(png)]
    else:
        cmd = [sys.executable, "-m", "app", RENDER_CHART_ARG, str(out), str(png)]
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    if done.returncode != 0 or not png.is_file():
        print(f"note: the chart was not drawn: {done.stderr.strip()[-400:]}", file=sys.stderr)
        return None
    return png


def _f(value: float | None, spec: str) -> str:
    return MISSING if value is None else format(value, spec)


def crossover_text(result: CrossoverResult) -> str:
    """The table a person reads: one row per level and side, then the verdict."""
    head = (f"{'c':>3} {'side':<4} {'stream tok/s':>12} {'aggregate':>10} {'speedup':>8} "
            f"{'TTFT p50':>9} {'p95':>7} {'latency p50':>12} {'p95':>7} {'α':>5} {'τ':>5} "
            f"{'errors':>6}")
    lines = [f"speculation on:  {result.server_on} ({result.model_on})",
             f"speculation off: {result.server_off} ({result.model_off})",
             f"prompts: {result.prompt_set}, max {result.max_tokens} tokens, greedy", "", head]
    for i, (on, off) in enumerate(result.levels):
        for side in (on, off):
            d = side.to_dict()
            speed = result.speedup(i) if side is on else None
            lines.append(
                f"{side.concurrency:>3} {side.side:<4} {_f(d['stream_tps_median'], '.1f'):>12} "
                f"{_f(d['aggregate_tps'], '.1f'):>10} "
                f"{(_f(speed, '.2f') + '×') if speed is not None else '':>8} "
                f"{_f(d['ttft_p50'], '.3f'):>9} {_f(d['ttft_p95'], '.3f'):>7} "
                f"{_f(d['latency_p50'], '.2f'):>12} {_f(d['latency_p95'], '.2f'):>7} "
                f"{_f(d['acceptance_rate'], '.2f'):>5} {_f(d['mean_acceptance_length'], '.2f'):>5} "
                f"{side.errors:>6}")
    lines += ["", "times in seconds; aggregate = all reply tokens / the level's wall time; "
                  "speedup = aggregate on / off"]
    if result.load_average is not None:
        lines.append(f"load average (1 min) on this machine: {result.load_average[0]:.1f} "
                     f"before, {result.load_average[1]:.1f} after")
    lines.append(verdict_text(result))
    return "\n".join(lines) + "\n"


def verdict_text(result: CrossoverResult) -> str:
    """Where speculation stops paying, and any level below 1× before that."""
    stop, below = result.stops_paying_at, result.not_paying
    if stop is not None:
        speedup = result.speedup([on.concurrency for on, _ in result.levels].index(stop))
        text = (f"speculation stops paying at concurrency {stop} ({speedup:.3f}×): from there "
                "on the server without it serves more tokens per second in total")
    else:
        text = "speculation still paid at the highest concurrency measured"
    dips = [c for c in below if stop is None or c < stop]
    if dips:
        text += (f"; below 1× also at {', '.join(map(str, dips))}, though a higher level "
                 "paid: noise of a busy machine or a real dip (rerun to tell)")
    return text
