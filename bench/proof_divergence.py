"""Measure every difference between speculation off and on (docs/proof.md).

For each prompt of a set and each temperature, the prompt is decoded once with
speculation off and once per draft length k (prompt lookup, fixed k), every run recorded
with a :class:`~app.engine.divergence.SamplingTrace`; each "on" run is compared with its
"off" run by :func:`~app.engine.divergence.compare_traces`. Printed: identical /
near-tie / suspect per (temperature, k), every divergence with both runs' probabilities
of both tokens and the evidence, and the floating-point noise seen at positions where
the two runs agree (the same logit-shift statistic, over the chosen token and its
runner-up). Loader and context settings can be varied to look for a batch-invariant
configuration (``--no-repack``, ``--flash-attn``, ``--ubatch``, ``--kv-type``,
``--threads``, env ``GGML_CPU_TILED_MM``), and a fault can be injected (``--fault``) to see
what a real bug looks like.

Outcomes (identical or not) do not depend on timing, so this may run on a busy machine.

    .venv/bin/python bench/proof_divergence.py --k 1-8 --temps 0,0.8 --seed 11 \\
        --json bench/out/proof-default.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _common  # puts the repo on sys.path

from app.engine.divergence import SamplingTrace, compare_traces
from app.engine.reply import ReplyRecord
from app.engine.llama import LlamaContext, LlamaModel
from app.engine.measure.prompts import load_prompts, prepare_prompt
from tests.faults import FAULTS
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig

GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30}
FLASH = {"auto": -1, "off": 0, "on": 1}


def parse_ks(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return sorted(set(out))


def open_session(args: argparse.Namespace) -> Session:
    if args.exact:
        # the app's own exact-verification path (SessionConfig.exact_verification)
        s = Session.open(SessionConfig(target_path=args.model, n_ctx=args.n_ctx,
                                       n_threads=args.threads, n_gpu_layers=0,
                                       exact_verification=True))
        if not s.exact_verification:
            s.close()
            raise SystemExit("exact verification is not possible for this model here")
        return s
    target = LlamaModel(args.model, n_gpu_layers=0, use_extra_bufts=not args.no_repack)
    kv = GGML_TYPES[args.kv_type] if args.kv_type else None
    ctx = LlamaContext(
        target, n_ctx=args.n_ctx, n_batch=512, n_threads=args.threads,
        n_ubatch=args.ubatch, flash_attn=FLASH[args.flash_attn], type_k=kv, type_v=kv,
    )
    cfg = SessionConfig(target_path=args.model, n_ctx=args.n_ctx, n_threads=args.threads,
                        n_gpu_layers=0)
    return Session(cfg, target, ctx)


def run_once(session: Session, tokens: list[int], sampling: SamplingParams,
             spec: SpeculationConfig) -> tuple[ReplyRecord, SamplingTrace, float]:
    session.reset_cache()
    trace = SamplingTrace()
    fin = None
    t = time.perf_counter()
    for ev in session.generate(tokens, sampling, spec, trace=trace, stats_interval=1e9):
        if isinstance(ev, ReplyRecord):
            fin = ev
    assert fin is not None
    return fin, trace, time.perf_counter() - t


def agreeing_noise(off: SamplingTrace, on: SamplingTrace, upto: int) -> list[float]:
    """The logit-shift statistic at positions where both runs chose the same token:
    |Δ(ℓ(chosen) − ℓ(runner-up))| between the runs, for the best other listed token."""
    out = []
    for j in range(min(upto, len(off.records), len(on.records))):
        ro, rn = off.records[j], on.records[j]
        c = ro.token
        others = [t for t in ro.top_ids if t != c]
        if not others:
            continue
        t = others[0]
        l_on_t, exact = rn.logit_of(t)
        if not exact:
            continue
        out.append(abs((ro.logit - ro.logit_of(t)[0]) - (rn.logit - l_on_t)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=_common.GEMMA)
    ap.add_argument("--prompts", default="builtin:code")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--k", type=parse_ks, default=parse_ks("1-8"))
    ap.add_argument("--temps", default="0,0.8")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-repack", action="store_true", help="use_extra_bufts = false")
    ap.add_argument("--flash-attn", choices=sorted(FLASH), default="auto")
    ap.add_argument("--ubatch", type=int, default=None)
    ap.add_argument("--kv-type", choices=sorted(GGML_TYPES), default=None)
    ap.add_argument("--exact", action="store_true",
                    help="open the session with exact verification (the app's settings)")
    ap.add_argument("--fault", choices=("keep-rejected-kv", "extra-draw"), default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()

    _common.require_model(args.model)
    temps = [float(t) for t in args.temps.split(",")]
    prompts = load_prompts(args.prompts)[: args.limit]
    session = open_session(args)
    if args.fault:
        session.verifier = FAULTS[args.fault]()
    piece = session.target.token_to_piece
    rows: list[dict[str, Any]] = []
    noise: dict[str, list[float]] = {}
    off_s = on_s = 0.0
    t_start = time.time()
    load0 = os.getloadavg()[0]
    with session:
        prepared = [prepare_prompt(session, p, "plain") for p in prompts]
        for temp in temps:
            for pp in prepared:
                sampling = SamplingParams(temperature=temp, seed=args.seed, max_tokens=args.max_tokens,
                                          stop=pp.stop)
                _off, off_trace, dt = run_once(session, list(pp.tokens), sampling, SpeculationConfig())
                off_s += dt
                for k in args.k:
                    spec = SpeculationConfig(mode="prompt-lookup", draft_max=k, adaptive=False)
                    on, on_trace, dt = run_once(session, list(pp.tokens), sampling, spec)
                    on_s += dt
                    d = compare_traces(off_trace, on_trace,
                                       lambda t: piece(t).decode("utf-8", "backslashreplace"))
                    upto = d.index if d.index is not None else len(off_trace.records)
                    noise.setdefault(f"{temp:g}", []).extend(agreeing_noise(off_trace, on_trace, upto))
                    row = {"temp": temp, "k": k, "prompt": pp.name, "alpha": on.stats.acceptance_rate,
                           **d.to_dict(), **d.evidence()}
                    rows.append(row)
                    if not args.quiet:
                        extra = ""
                        if d.index is not None:
                            extra = (f" @{d.index} {d.off_text!r}->{d.on_text!r} off {_p(d.off_probs)} "
                                     f"on {_p(d.on_probs)} shift {d.logit_shift:.3f}"
                                     + (f" draw {d.draw:.4f}/{d.draw_consistent}" if d.sampled else ""))
                        print(f"T={temp:g} k={k} {pp.name}: {d.verdict}{extra}", file=sys.stderr, flush=True)
    print(summary(rows, temps, args.k, noise))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        settings["GGML_CPU_TILED_MM"] = os.environ.get("GGML_CPU_TILED_MM")
        args.json.write_text(json.dumps({
            "settings": settings, "rows": rows,
            "noise": {t: _stats(v) for t, v in noise.items()},
            "off_s": off_s, "on_s": on_s, "wall_s": time.time() - t_start,
            "loadavg_before": load0, "loadavg_after": os.getloadavg()[0],
        }, indent=1, ensure_ascii=False))
    return 0


def _p(pair: tuple[float, float] | None) -> str:
    return "-" if pair is None else f"[{pair[0]:.3f}, {pair[1]:.3f}]"


def _stats(v: list[float]) -> dict[str, float | int | None]:
    if not v:
        return {"n": 0, "max": None, "p99": None, "median": None}
    s = sorted(v)
    out: dict[str, float | int | None] = {
        "n": len(s), "max": s[-1], "p99": s[min(len(s) - 1, int(0.99 * len(s)))],
        "p999": s[min(len(s) - 1, int(0.999 * len(s)))], "median": statistics.median(s)}
    for t in (0.5, 1.0, 1.5, 2.0):
        out[f"above_{t:g}"] = sum(1 for x in s if x > t)
    return out


def summary(rows: list[dict[str, Any]], temps: list[float], ks: list[int],
            noise: dict[str, list[float]]) -> str:
    lines = ["| T | k | identical | near-tie | suspect |", "| --- | --- | --- | --- | --- |"]
    for temp in temps:
        for k in ks:
            rs = [r for r in rows if r["temp"] == temp and r["k"] == k]
            c = {v: sum(1 for r in rs if r["verdict"] == v) for v in ("identical", "near-tie", "suspect")}
            lines.append(f"| {temp:g} | {k} | {c['identical']} | {c['near-tie']} | {c['suspect']} |")
    lines.append("")
    lines.append("| T | k | prompt | index | off → on | off_probs | on_probs | shift | draw | verdict |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r["index"] is None:
            continue
        draw = "" if r["draw"] is None else f"{r['draw']:.4f} ({r['draw_consistent']})"
        lines.append(
            f"| {r['temp']:g} | {r['k']} | {r['prompt']} | {r['index']} | {r['off_text']!r} → "
            f"{r['on_text']!r} | {_p(tuple(r['off_probs']))} | {_p(tuple(r['on_probs']))} | "
            f"{r['logit_shift']:.3f} | {draw} | {r['verdict']} |"
        )
    lines.append("")
    for t, v in noise.items():
        s = _stats(v)
        if s["n"]:
            lines.append(f"agreeing positions, T={t}: n={s['n']} shift median {s['median']:.4f} "
                         f"p99 {s['p99']:.4f} p99.9 {s['p999']:.4f} max {s['max']:.4f}; above "
                         f"0.5/1/1.5/2: {s['above_0.5']}/{s['above_1']}/{s['above_1.5']}/{s['above_2']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
