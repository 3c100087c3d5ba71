"""Whether the gauge's measured speedup tells the truth when other work shares the CPU.

For each prompt of ``--prompts`` (chat format, greedy, ``--max-tokens``), a plain reply
and a speculative one (``--mode``, default k, adaptive), in alternating order, on one
session with Tandem's default threads. The speculative reply's measured speedup (its
decode tok/s × its plain baseline, from the one-token passes timed during it, as the
gauge shows) is compared with the true one: the speculative reply's decode rate over the
plain reply's. Both baselines are taken from the same passes of the same reply: the mean
with the fastest and slowest tenth left out (what Tandem shows) and the median (the
unhindered step), so one run compares the two (over the replies whose own passes the
gauge used; the others took recent passes of the session).

Load: ``--busy`` processes beside Tandem, ``--pattern steady`` (busy loops) or ``bursty``
(each busy for 30 ms, then idle for 0–60 ms at random, as a test suite or a build
beside the app). The figures are medians over the prompts of measured ÷ true.

Usage:
    .venv/bin/python bench/gauge_truth.py                           # SmolLM2, bursty ×2
    .venv/bin/python bench/gauge_truth.py --busy 0 --json           # quiet machine
    .venv/bin/python bench/gauge_truth.py --model M.gguf --pattern steady --busy 1
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as C

STEADY = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end: pass\n"
BURSTY = ("import random, time\nend = time.monotonic() + {limit}\n"
          "while time.monotonic() < end:\n"
          "    t = time.monotonic() + 0.03\n"
          "    while time.monotonic() < t: pass\n"
          "    time.sleep(random.uniform(0.0, 0.06))\n")


def _replies(args: argparse.Namespace) -> list[dict[str, Any]]:
    from app.engine.chat import ChatMessage
    from app.engine.measure.prompts import load_prompts, prepare_chat
    from app.engine.reply import ReplyRecord
    from app.engine.rounds import PlainSteps
    from app.engine.session import Session, SessionConfig
    from app.options import SamplingParams, SpecMode, SpeculationConfig

    seen: list[list[float]] = []
    own_baseline = PlainSteps.baseline

    def recording(self: PlainSteps, own: Any, *rest: Any) -> Any:
        seen.append(sorted(own))
        return own_baseline(self, own, *rest)

    PlainSteps.baseline = recording  # type: ignore[method-assign]
    session = Session.open(SessionConfig(target_path=args.model, n_ctx=2048))
    sampling = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    on = SpeculationConfig(mode=SpecMode(args.mode))
    rows = []
    for i, p in enumerate(load_prompts(args.prompts)):
        prompt = list(prepare_chat(session, [ChatMessage("user", p.chat)], p.name).tokens)
        got: dict[str, Any] = {}
        for which in (("off", "on") if i % 2 == 0 else ("on", "off")):
            seen.clear()
            session.reset_cache()
            spec = on if which == "on" else SpeculationConfig()
            for ev in session.generate(prompt, sampling, spec):
                if isinstance(ev, ReplyRecord):
                    got[which] = ev.stats
                    got[which + "_passes"] = seen[-1] if seen else []
        off, spec_stats, passes = got["off"], got["on"], got["on_passes"]
        true = (spec_stats.decode_tps / off.decode_tps
                if spec_stats.decode_tps and off.decode_tps else None)
        shown = spec_stats.measured_speedup
        # (with fewer of its own passes than min_own the gauge took recent ones instead:
        # no median of the same passes then)
        median = (spec_stats.decode_tps * statistics.median(passes)
                  if shown is not None and len(passes) >= PlainSteps.min_own
                  and spec_stats.plain_step_source == "reply" and spec_stats.decode_tps
                  else None)
        rows.append({"prompt": p.name, "true": true, "shown": shown, "median_based": median,
                     "passes": len(passes), "threads": spec_stats.n_threads,
                     "alpha": spec_stats.acceptance_rate})
    session.close()
    return rows


def _f(x: float | None) -> str:
    return f"{x:6.2f}" if x is not None else "     —"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/gauge_truth.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=C.SMOLLM)
    ap.add_argument("--prompts", default="builtin:code")
    ap.add_argument("--mode", default="prompt-lookup", help="the drafter of the speculative replies")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--busy", type=int, default=2, help="busy processes beside Tandem")
    ap.add_argument("--pattern", choices=("steady", "bursty"), default="bursty")
    ap.add_argument("--limit", type=float, default=900.0,
                    help="seconds after which a busy process stops by itself")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    C.require_model(args.model)
    before = C.machine_note()
    code = (BURSTY if args.pattern == "bursty" else STEADY).format(limit=args.limit)
    hogs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(args.busy)]
    try:
        time.sleep(0.5 if hogs else 0.0)
        rows = _replies(args)
    finally:
        for h in hogs:
            h.kill()
            h.wait()

    # both baselines over the same replies: those whose own passes the gauge used
    paired = [r for r in rows if r["shown"] and r["median_based"] and r["true"]]

    def ratio(key: str, among: list[dict[str, Any]]) -> float | None:
        return C.median([r[key] / r["true"] for r in among if r[key] and r["true"]])

    out = {"model": args.model.name, "prompts": args.prompts, "mode": args.mode,
           "busy": args.busy, "pattern": args.pattern, "machine": before, "rows": rows,
           "shown_over_true": ratio("shown", rows), "paired": len(paired),
           "shown_over_true_paired": ratio("shown", paired),
           "median_based_over_true": ratio("median_based", paired),
           "true_median": C.median([r["true"] for r in rows if r["true"]])}

    def text(data: dict[str, Any]) -> None:
        print(f"{data['model']}, {data['prompts']}, {data['mode']}; {data['busy']} "
              f"{data['pattern']} busy processes")
        print(f"{'prompt':32} {'true':>6} {'shown':>6} {'median':>7} {'passes':>6} thr")
        for r in data["rows"]:
            print(f"{r['prompt'][:32]:32} {_f(r['true'])} {_f(r['shown'])} "
                  f" {_f(r['median_based'])} {r['passes']:>6} {r['threads']}")
        print(f"median shown ÷ true {_f(data['shown_over_true'])} (all replies with a "
              f"measured speedup); over the {data['paired']} that used their own passes: "
              f"shown {_f(data['shown_over_true_paired'])}, median-based "
              f"{_f(data['median_based_over_true'])} (true speedup, median "
              f"{_f(data['true_median'])})")

    C.report("gauge_truth", out, args.json, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
