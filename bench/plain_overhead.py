"""Where plain decoding's time goes: Tandem's plain path against a bare decode loop and
``llama-bench`` tg, on the same prompts, depths, model and threads, in one run.

For each prompt of a set, three timings of ``--n-predict`` one-token passes after the
prompt (interleaved, the order rotated per prompt):

* ``tandem plain``: :meth:`Session.generate` with speculation off (greedy), as the app
  and ``bench`` run it: sampling, detokenizing, stop strings, statistics;
* ``bare decode``: the same session's :meth:`LlamaContext.decode` on one token at a
  time after the same prefill, with nothing else per token but an argmax over the
  logits (what any caller must do to pick the next token);
* ``llama-bench tg``: ``llama-bench -p 0 -n N -d depth -r 1`` from the same sdist.

``tandem ÷ bare`` is the cost of Tandem's per-token Python; ``bare ÷ llama-bench`` is
what the library and its settings cost against llama.cpp's own loop. Medians over the
prompts; ``--repeat`` runs the set again. A run with other work on the machine is
marked ``disturbed`` (``_common.OtherCpu``).

Usage:
    LLAMA_TOOLS_DIR=bench/.llama-tools .venv/bin/python bench/plain_overhead.py \\
        --prompts builtin:code --threads 2 --n-predict 128 --repeat 1 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import _common as C
import numpy as np
from vs_llamacpp import run_llama_bench

from app.engine.measure.bench import generate_once
from app.engine.measure.multiturn import load_conversations, prepare_turn
from app.engine.measure.prompts import resolve_format
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig


def _bare_decode(session: Session, tokens: list[int], n: int) -> float:
    """tok/s of ``n`` one-token passes after prefilling ``tokens[:-1]`` (argmax only)."""
    session.reset_cache()
    ctx = session.ctx
    ctx.decode(tokens[:-1], 0, logits="none")
    tok, pos = tokens[-1], len(tokens) - 1
    t0 = time.perf_counter()
    for _ in range(n):
        ctx.decode([tok], pos, logits="all")
        tok = int(np.argmax(ctx.logits(0)))
        pos += 1
    dt = time.perf_counter() - t0
    session.reset_cache()
    return n / dt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/plain_overhead.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=C.GEMMA)
    ap.add_argument("--prompts", default="builtin:code")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--n-gpu-layers", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--tools", type=Path, default=C.TOOLS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    C.require_model(args.model)

    before = C.machine_note()
    other = C.OtherCpu()
    conversations = load_conversations(args.prompts)
    # no stop strings, no end: every run decodes n_predict tokens unless the model stops
    sampling = SamplingParams(temperature=0.0, max_tokens=args.n_predict)
    off = SpeculationConfig(mode="off")
    rows: list[dict[str, Any]] = []
    labels = ("tandem plain", "bare decode", "llama-bench tg")
    with Session.open(SessionConfig(target_path=args.model, n_ctx=args.n_ctx,
                                    n_threads=args.threads,
                                    n_gpu_layers=args.n_gpu_layers)) as session:
        fmt = resolve_format(session, "auto")
        first = prepare_turn(session, conversations[0], 0, [], fmt)
        generate_once(session, first, sampling.model_copy(update={"max_tokens": 8}), off)
        step = 0
        for rep in range(args.repeat):
            for conv in conversations:
                prompt = prepare_turn(session, conv, 0, [], fmt)
                toks = list(prompt.tokens)
                row: dict[str, Any] = {"prompt": prompt.name, "repeat": rep,
                                       "prompt_tokens": len(toks)}
                order = labels[step % 3:] + labels[: step % 3]
                step += 1
                for label in order:
                    if label == "tandem plain":
                        # no stop strings: n_predict tokens, as the other two decode
                        fin = generate_once(session, replace(prompt, stop=()), sampling, off)
                        row[label] = fin.stats.decode_tps
                        row["tandem_emitted"] = fin.stats.emitted
                    elif label == "bare decode":
                        row[label] = _bare_decode(session, toks, args.n_predict)
                    else:
                        lb = run_llama_bench(argparse.Namespace(
                            tools=args.tools, model=args.model, n_predict=args.n_predict,
                            threads=args.threads, n_gpu_layers=args.n_gpu_layers),
                            depth=len(toks) - 1)
                        row[label] = lb["tg_tps"]
                rows.append(row)
                print(f"  {row['prompt']:<24} " + "  ".join(
                    f"{lab} {row[lab]:6.2f}" for lab in labels), file=sys.stderr)
    during = other.note()
    med = {lab: statistics.median(r[lab] for r in rows) for lab in labels}
    ratio = {
        "tandem_plain_over_bare_decode": statistics.median(
            r["tandem plain"] / r["bare decode"] for r in rows),
        "bare_decode_over_llama_bench_tg": statistics.median(
            r["bare decode"] / r["llama-bench tg"] for r in rows),
        "tandem_plain_over_llama_bench_tg": statistics.median(
            r["tandem plain"] / r["llama-bench tg"] for r in rows),
    }
    result = {"schema_version": 1, "model": str(args.model), "prompts": args.prompts,
              "threads": args.threads, "n_predict": args.n_predict, "repeat": args.repeat,
              "median_tps": med, "median_ratios": ratio, "machine_before": before,
              "machine_during": during,
              "disturbed": C.disturbed(before, during), "runs": rows}
    path = C.write_result("plain_overhead", result)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for lab in labels:
            print(f"{lab:<16} median {med[lab]:7.2f} tok/s")
        for k, v in ratio.items():
            print(f"{k:<34} {v:.3f}")
        if result["disturbed"]:
            print(C.disturbed_line(before, during))
    print(f"written: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
