"""Where a verification pass's time goes: a pass of n tokens with logits at every
position (what verifying n − 1 draft tokens needs) against the same pass with logits at
its last position only (what prefill and ``llama-bench``'s pp need), as multiples of a
one-token step, on this machine.

The difference is the target's output layer (``n_vocab × n_embd``) run for n − 1 more
positions: on a model whose vocabulary is large beside its width (Gemma 3 270M: 262,144
× 640, more weights than its transformer blocks) it is a large part of what a
verification pass costs, which the draft-length policy reads from its pass-time table
(:mod:`app.engine.policy`). llama.cpp's own speculative tools request the same logits.

Each repetition times every (n, logits) pair once, in turn, after the same prompt (the
pass is removed from the KV cache again); medians over ``--repeat`` repetitions. The
other processes' CPU time during the run is recorded (``_common.OtherCpu``); the result
is also written under ``bench/out/``.

Usage:
    .venv/bin/python bench/verify_cost.py --model .cache/test-models/gemma-3-270m-q4_k_m.gguf \\
        --threads 2 --repeat 30 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402
from app.engine.llama import LlamaContext, LlamaModel  # noqa: E402

SIZES = (1, 2, 3, 4, 8, 16)
PROMPT = "Plan a two-week trip to Japan with a budget, day by day.\n" * 8


def measure(model_path: str, threads: int, repeat: int) -> dict[str, object]:
    """Median seconds of each (n, logits) pass; see the module docstring."""
    model = LlamaModel(model_path)
    ctx = LlamaContext(model, n_ctx=2048, n_threads=threads, n_threads_batch=threads)
    try:
        prompt = model.tokenize(PROMPT, add_special=True, parse_special=False)
        ctx.decode(prompt, 0, logits="last")
        pos, tok = len(prompt), prompt[-1]
        times: dict[tuple[int, str], list[float]] = {(n, m): [] for n in SIZES for m in ("all", "last")}
        for r in range(repeat + 2):  # the first two build the graphs: not counted
            for (n, mode), out in times.items():
                t0 = time.perf_counter()
                ctx.decode([tok] * n, pos, logits=mode)  # type: ignore[arg-type]
                dt = time.perf_counter() - t0
                ctx.seq_rm(pos, -1)
                if r >= 2:
                    out.append(dt)
        med = {key: statistics.median(v) for key, v in times.items()}
        step = med[(1, "last")]
        return {
            "model": Path(model_path).name,
            "n_vocab": model.n_vocab,
            "threads": threads,
            "repeat": repeat,
            "step_ms": step * 1000,
            "passes": [{"n": n,
                        "logits_all_ms": med[(n, "all")] * 1000,
                        "logits_last_ms": med[(n, "last")] * 1000,
                        "logits_all_steps": med[(n, "all")] / step,
                        "logits_last_steps": med[(n, "last")] / step} for n in SIZES],
        }
    finally:
        ctx.close()
        model.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="target GGUF")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30, help="timed repetitions (median)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    before, other = C.machine_note(), C.OtherCpu()
    r = measure(args.model, args.threads, args.repeat)
    during = other.note()
    r.update(machine_before=before, machine_during=during,
             disturbed=C.disturbed(before, during))
    path = C.write_result("verify_cost", r)
    if args.json:
        print(json.dumps(r, indent=1))
    else:
        print(f"{r['model']} (vocabulary {r['n_vocab']:,}), {r['threads']} threads, "
              f"medians of {r['repeat']}; one-token step {r['step_ms']:.1f} ms")
        print("   n   logits at all n   logits at the last   (in one-token steps)")
        for row in r["passes"]:  # type: ignore[attr-defined]
            print(f"{row['n']:4}   {row['logits_all_ms']:7.1f} ms "
                  f"{row['logits_all_steps']:5.2f}   {row['logits_last_ms']:7.1f} ms "
                  f"{row['logits_last_steps']:5.2f}")
        print(f"other processes: {during.get('other_cores')} cores"
              + (f"; {C.disturbed_line(before, during)}" if r["disturbed"] else ""))
    print(f"written: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
