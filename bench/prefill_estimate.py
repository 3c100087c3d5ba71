"""How right the "… s left" beside a reply reading its prompt is: the time left as the
prefill said it after each chunk, against the time the rest then took.

One long prompt (README.md repeated, cut to ``--tokens``) is read by
:meth:`Session.generate` for one reply token; after each chunk of ``n_batch`` tokens the
script records the estimate the session yielded (:class:`app.engine.events.PrefillClock`:
a token's cost ``a + b·position`` fitted to the chunks so far) and the average-rate
rule's (the time so far ÷ tokens so far × tokens left), and
afterwards the truth (the prefill's end minus that moment). Reported per chunk and as
the median of estimate ÷ truth over the chunks from the second to the one before last
(1.00 is right; below 1 says too little). Timings are disturbed by other work (the
``disturbed`` flag); the ratios within one run are not, much.

Usage:
    .venv/bin/python bench/prefill_estimate.py --model .cache/test-models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --n-ctx 8192 --tokens 8000 --threads 1 --json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import _common as C

from app.engine.events import PrefillProgress
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams


def run(model: Path, n_ctx: int, tokens: int, threads: int | None) -> dict[str, Any]:
    """One prefill of ``tokens`` prompt tokens; the estimates after each chunk."""
    before, busy = C.machine_note(), C.OtherCpu()
    config = SessionConfig(target_path=model, n_ctx=n_ctx, n_threads=threads)
    seen: list[PrefillProgress] = []
    with Session.open(config) as s:
        text = (C.REPO / "README.md").read_text() * 20
        prompt = s.target.tokenize(text, add_special=True, parse_special=False)[:tokens]
        for ev in s.generate(prompt, SamplingParams(temperature=0.0, max_tokens=1)):
            if isinstance(ev, PrefillProgress):
                seen.append(ev)
        threads_used = s.n_threads
    end = seen[-1].elapsed
    rows = [{"done": p.done, "elapsed_s": round(p.elapsed, 3),
             "true_left_s": round(end - p.elapsed, 3),
             "clock_left_s": None if p.seconds_left is None else round(p.seconds_left, 3),
             "average_rate_left_s": round(p.elapsed / p.done * (p.total - p.done), 3)}
            for p in seen if 0 < p.done]
    inner = rows[1:-1]  # the first has one chunk to go by (both rules agree), the last 0 left
    ratio = {rule: C.median([r[f"{rule}_left_s"] / r["true_left_s"] for r in inner
                             if r["true_left_s"] > 0 and r[f"{rule}_left_s"] is not None])
             for rule in ("clock", "average_rate")}
    return {"model": model.name, "n_ctx": n_ctx, "prompt_tokens": seen[-1].total,
            "n_threads": threads_used,
            "prefill_s": round(end, 2), "median_estimate_over_truth": {
                k: None if v is None else round(v, 3) for k, v in ratio.items()},
            "chunks": rows, "machine": before, **busy.note(),
            "disturbed": C.disturbed(before, busy.note())}


def print_text(data: dict[str, Any]) -> None:
    print(f"{data['model']}: {data['prompt_tokens']} prompt tokens read in "
          f"{data['prefill_s']} s at {data['n_threads']} thread(s)")
    print(f"{'done':>6} {'true left':>10} {'clock':>8} {'avg rate':>9}")
    for r in data["chunks"]:
        print(f"{r['done']:>6} {r['true_left_s']:>10.1f} {r['clock_left_s'] or 0:>8.1f} "
              f"{r['average_rate_left_s']:>9.1f}")
    m = data["median_estimate_over_truth"]
    print(f"median estimate ÷ truth: clock {m['clock']}, average rate {m['average_rate']}")
    if data["disturbed"]:
        print(C.disturbed_line(data["machine"], data))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=C.SMOLLM)
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--tokens", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    data = run(C.require_model(args.model), args.n_ctx, args.tokens, args.threads)
    return C.report("prefill_estimate", data, args.json, print_text)


if __name__ == "__main__":
    sys.exit(main())
