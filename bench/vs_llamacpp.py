"""Tandem vs llama.cpp's own tools: same model, draft, k, threads, prompt; one run.

Measures, interleaved in one invocation so that drifts of the machine hit both sides:

* plain decoding: Tandem's decode tok/s (speculation off) ÷ ``llama-bench``'s tg tok/s,
  with llama-bench generating at the depth of Tandem's prompt (``-d <prompt tokens>``,
  ``-p 0 -n <n-predict>``), so both decode the same number of tokens at the same
  positions; llama-bench samples nothing (random next tokens), Tandem takes the argmax
  of 262,144 logits per token, so this ratio includes Tandem's sampling and Python cost;
* speculative decoding with a draft model: Tandem's decode tok/s ÷
  ``llama-speculative-simple``'s ("decoded N tokens in T seconds"), same prompt,
  ``-n``, k (``--spec-draft-n-max``), ``--spec-draft-n-min 0``, ``--spec-draft-p-min``,
  greedy. Both time the decode loop from the end of the prompt prefill to the last
  token. llama-speculative-simple may decode up to k tokens more than ``-n``; its own
  count is used for its speed.

Goal: both ratios ≥ 0.95. Report medians over ``--repeat`` rounds.

Tools: build them first with ``bench/build_llama_tools.sh`` (same llama-cpp-python sdist,
same CPU flags, packaging/cpu_flags.sh). Results go to stdout and bench/out/vs_llamacpp-*.json.

Usage:
    .venv/bin/python bench/vs_llamacpp.py                       # Gemma 3 270M, draft = itself
    .venv/bin/python bench/vs_llamacpp.py --k 4 --threads 2 --n-predict 128 --repeat 5
    .venv/bin/python bench/vs_llamacpp.py --model A.gguf --draft B.gguf --json

Timings on a machine where other work runs are disturbed; the script records the load
average before and other processes' CPU time during the run (``_common.OtherCpu``)
and marks such a run ``disturbed``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import _common as C

from app.engine.chat import tokenize_plain
from app.engine.measure.bench import generate_once
from app.engine.measure.prompts import PreparedPrompt, load_prompts
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig

_DECODED_RE = re.compile(r"decoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds, speed:\s+([\d.]+)\s+t/s")
_ENCODED_RE = re.compile(r"encoded\s+(\d+)\s+tokens in")
_DRAFTED_RE = re.compile(r"n_drafted\s*=\s*(\d+)")
_ACCEPT_RE = re.compile(r"n_accept\s*=\s*(\d+)")


def default_prompt() -> str:
    """The first builtin:code prompt, plain format: the reply repeats code (long, no EOS)."""
    return load_prompts("builtin:code")[0].plain


def run_llama_bench(args: argparse.Namespace, depth: int,
                    env: dict[str, str] | None = None) -> dict[str, Any]:
    argv = [
        str(C.tool("llama-bench", args.tools)), "-m", str(args.model),
        "-p", "0", "-n", str(args.n_predict), "-d", str(depth),
        "-t", str(args.threads), "-r", "1", "-o", "json",
    ]
    if args.n_gpu_layers is not None:
        argv += ["-ngl", str(args.n_gpu_layers)]
    res = C.run_child(argv, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({res.returncode}): {res.stderr[-2000:]}")
    data = json.loads(res.stdout)
    rec = data[0]
    samples = rec.get("samples_ts") or [rec["avg_ts"]]
    return {"tg_tps": float(samples[0]), "n_gen": rec.get("n_gen"), "n_depth": rec.get("n_depth"),
            "argv": argv}


def run_spec_simple(args: argparse.Namespace, prompt: str) -> dict[str, Any]:
    argv = [
        str(C.tool("llama-speculative-simple", args.tools)),
        "-m", str(args.model), "-md", str(args.draft),
        "--spec-type", "draft-simple",
        "--spec-draft-n-max", str(args.k), "--spec-draft-n-min", "0",
        "--spec-draft-p-min", str(args.draft_p_min),
        "-p", prompt, "-n", str(args.n_predict), "-c", str(args.n_ctx),
        "-t", str(args.threads), "-td", str(args.threads),
        "--temp", "0", "--seed", "1",
    ]
    if args.n_gpu_layers is not None:
        argv += ["-ngl", str(args.n_gpu_layers), "-ngld", str(args.n_gpu_layers)]
    res = C.run_child(argv)
    log = res.stdout + "\n" + res.stderr
    m = _DECODED_RE.search(log)
    if res.returncode != 0 or m is None:
        raise RuntimeError(
            f"llama-speculative-simple failed ({res.returncode}): {res.stderr[-3000:]}"
        )
    enc = _ENCODED_RE.search(log)
    drafted = _DRAFTED_RE.search(log)
    accepted = _ACCEPT_RE.search(log)
    n_dr = int(drafted.group(1)) if drafted else 0
    n_acc = int(accepted.group(1)) if accepted else 0
    return {
        "decoded": int(m.group(1)),
        "seconds": float(m.group(2)),
        "tps": int(m.group(1)) / float(m.group(2)),
        "prompt_tokens": int(enc.group(1)) if enc else None,
        "drafted": n_dr,
        "accepted": n_acc,
        "acceptance_rate": n_acc / n_dr if n_dr else None,
        "stdout": res.stdout,
        "argv": argv[:argv.index("-p") + 1] + ["<prompt>"] + argv[argv.index("-p") + 2:],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=C.GEMMA)
    ap.add_argument("--draft", type=Path, default=None, help="default: the target itself")
    ap.add_argument("--k", type=int, default=4, help="draft length (4)")
    ap.add_argument("--draft-p-min", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--n-gpu-layers", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--prompt", default=None, help="prompt text (default: builtin:code #1)")
    ap.add_argument("--tools", type=Path, default=C.TOOLS)
    ap.add_argument("--skip-plain", action="store_true")
    ap.add_argument("--skip-spec", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the JSON result")
    args = ap.parse_args(argv)
    args.draft = args.draft or args.model
    C.require_model(args.model)
    C.require_model(args.draft)
    prompt_text = args.prompt or default_prompt()
    before = C.machine_note()
    other_cpu = C.OtherCpu()

    config = SessionConfig(target_path=args.model, draft_path=args.draft, n_ctx=args.n_ctx,
                           n_threads=args.threads, n_gpu_layers=args.n_gpu_layers)
    sampling = SamplingParams(temperature=0.0, max_tokens=args.n_predict)
    off = SpeculationConfig(mode="off")
    # Like llama-speculative-simple: draft up to k every round (no cost-aware policy).
    on = SpeculationConfig(mode="draft-model", draft_max=args.k, draft_min=0,
                           draft_p_min=args.draft_p_min, adaptive=False)
    # Tandem's default, for information: verify only what the measured costs justify.
    on_adaptive = on.model_copy(update={"adaptive": True})
    rows: list[dict[str, Any]] = []
    with Session.open(config) as session:
        prompt = PreparedPrompt(tuple(tokenize_plain(session.target, prompt_text)))
        n_prompt = len(prompt.tokens)
        # warm up both Tandem paths (page in weights, build graphs); untimed
        warm = sampling.model_copy(update={"max_tokens": 8})
        generate_once(session, prompt, warm, off)
        generate_once(session, prompt, warm, on)
        plain_ids: tuple[int, ...] | None = None
        for rep in range(args.repeat):
            row: dict[str, Any] = {"repeat": rep}
            if not args.skip_plain:
                row["llama_bench"] = run_llama_bench(args, depth=n_prompt)
                fin = generate_once(session, prompt, sampling, off)
                plain_ids = fin.token_ids
                row["tandem_plain"] = {"tps": fin.stats.decode_tps, "emitted": len(fin.token_ids),
                                       "reason": fin.reason}
            if not args.skip_spec:
                spec = run_spec_simple(args, prompt_text)
                fin = generate_once(session, prompt, sampling, on)
                s = fin.stats
                # llama-speculative-simple prints prompt + reply on stdout and may decode up
                # to k tokens more than -n, so Tandem's reply must appear in it verbatim.
                same_as_llama = (fin.text in spec["stdout"]) if fin.text else None
                spec.pop("stdout")
                row["llama_spec"] = spec
                row["tandem_spec"] = {
                    "tps": s.decode_tps, "emitted": s.emitted, "reason": fin.reason,
                    "acceptance_rate": s.acceptance_rate, "verified": s.verified,
                    "accepted": s.accepted, "rounds": s.rounds,
                    "identical_to_plain": (fin.token_ids == plain_ids) if plain_ids is not None else None,
                    "reply_found_in_llama_output": same_as_llama,
                }
                fin_a = generate_once(session, prompt, sampling, on_adaptive)
                row["tandem_spec_adaptive"] = {
                    "tps": fin_a.stats.decode_tps, "verified": fin_a.stats.verified,
                    "acceptance_rate": fin_a.stats.acceptance_rate,
                }
            rows.append(row)
            _progress(row)

    after = C.machine_note()
    during = other_cpu.note()
    result: dict[str, Any] = {
        "model": str(args.model), "draft": str(args.draft), "k": args.k,
        "threads": args.threads, "n_predict": args.n_predict, "n_ctx": args.n_ctx,
        "prompt_tokens": n_prompt, "repeat": args.repeat,
        "machine_before": before, "machine_after": after,
        "machine_during": during,
        "disturbed": C.disturbed(before, during),
        "rounds": rows,
    }
    summary: dict[str, Any] = {}
    if not args.skip_plain:
        lb = C.median([r["llama_bench"]["tg_tps"] for r in rows])
        tp = C.median([r["tandem_plain"]["tps"] for r in rows if r["tandem_plain"]["tps"]])
        summary["plain"] = {"llama_bench_tg_tps": lb, "tandem_tps": tp,
                            "ratio": tp / lb if tp and lb else None}
    if not args.skip_spec:
        ls = C.median([r["llama_spec"]["tps"] for r in rows])
        ts = C.median([r["tandem_spec"]["tps"] for r in rows if r["tandem_spec"]["tps"]])
        summary["speculative"] = {
            "llama_speculative_simple_tps": ls, "tandem_tps": ts,
            "ratio": ts / ls if ts and ls else None,
            "llama_acceptance_rate": C.median([r["llama_spec"]["acceptance_rate"] for r in rows
                                               if r["llama_spec"]["acceptance_rate"] is not None]),
            "tandem_acceptance_rate": C.median([r["tandem_spec"]["acceptance_rate"] for r in rows
                                                if r["tandem_spec"]["acceptance_rate"] is not None]),
            "tandem_adaptive_tps": C.median([r["tandem_spec_adaptive"]["tps"] for r in rows
                                             if r["tandem_spec_adaptive"]["tps"]]),
        }
    result["summary"] = summary
    return C.report("vs_llamacpp", result, args.json, _print_summary)


def _progress(row: dict[str, Any]) -> None:
    parts = [f"round {row['repeat'] + 1}:"]
    if "llama_bench" in row:
        parts.append(f"llama-bench tg {row['llama_bench']['tg_tps']:.1f}")
        tp = row["tandem_plain"]["tps"]
        parts.append(f"tandem plain {tp:.1f}" if tp else "tandem plain —")
    if "llama_spec" in row:
        parts.append(f"spec-simple {row['llama_spec']['tps']:.1f}")
        ts = row["tandem_spec"]["tps"]
        parts.append(f"tandem spec {ts:.1f}" if ts else "tandem spec —")
        ta = row.get("tandem_spec_adaptive", {}).get("tps")
        parts.append(f"(adaptive {ta:.1f})" if ta else "")
    print("  ".join(parts), file=sys.stderr, flush=True)


def _print_summary(result: dict[str, Any]) -> None:
    s = result["summary"]
    print(f"model {result['model']}  draft {result['draft']}  k {result['k']}  "
          f"threads {result['threads']}  n_predict {result['n_predict']}  "
          f"prompt {result['prompt_tokens']} tokens  repeat {result['repeat']}")
    if "plain" in s:
        p = s["plain"]
        print(f"plain decode:  tandem {p['tandem_tps']:.2f} tok/s / llama-bench tg "
              f"{p['llama_bench_tg_tps']:.2f} tok/s = {p['ratio']:.3f}  (goal >= 0.95)")
    if "speculative" in s:
        p = s["speculative"]
        print(f"speculative:   tandem {p['tandem_tps']:.2f} tok/s / llama-speculative-simple "
              f"{p['llama_speculative_simple_tps']:.2f} tok/s = {p['ratio']:.3f}  (goal >= 0.95)")
        print(f"               acceptance rate: tandem {p['tandem_acceptance_rate']}, "
              f"llama.cpp {p['llama_acceptance_rate']}")
        ta = p.get("tandem_adaptive_tps")
        if ta:
            print(f"               tandem with its cost-aware draft length (default): {ta:.2f} tok/s")
    if result["disturbed"]:
        print(C.disturbed_line(result["machine_before"], result["machine_during"]))


if __name__ == "__main__":
    raise SystemExit(main())
