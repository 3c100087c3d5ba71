"""What the proof costs in speed, as ratios measured in one interleaved run.

``--what recorder``: one session, one prompt set; each prompt is decoded with and without
a :class:`~app.engine.divergence.SamplingTrace`, alternating which goes first, for plain
decoding and for prompt lookup at k. Printed: median decode tok/s of each and the ratio
traced / untraced (the chat path never records; bench and the race would).

``--what exact``: two sessions side by side, the default one on ``--model`` and one with
exact verification on ``--exact-model`` (a Q5_1/Q4_1 file, or the same Q4_K_M file:
docs/proof.md); each prompt is decoded by both, alternating, plain and with the drafter
(``--drafter``) at k (fixed, or the default cost-aware length with ``--adaptive``).
Printed: median decode tok/s of each, the median prompt-processing rate (prompt tokens ÷
prefill seconds of the plain runs), and the ratios exact / default. This process runs
with ``GGML_CPU_TILED_MM=0`` (Q4_K/Q6_K weights need it for exact verification, and ggml
reads it once, so the default configuration, which uses that kernel for weights it does
not repack — Q6_K on x86-64 — must not have it), each arm runs in a process of its own:
one per arm and repeat, alternating which goes first, the default one with the variable
unset and the exact one with ``GGML_CPU_TILED_MM=0``.

Timings on a busy machine are disturbed: the load average before and other processes' CPU
time during the run (``_common.OtherCpu``) are printed.

    .venv/bin/python bench/proof_cost.py --what recorder --repeat 3
    .venv/bin/python bench/proof_cost.py --what exact \\
        --exact-model .cache/proof-models/gemma-3-270m-Q5_1.gguf --repeat 3
    .venv/bin/python bench/proof_cost.py --what exact --exact-model same \\
        --drafter suffix --k 16 --adaptive --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common  # puts the repo on sys.path

from app.engine.divergence import SamplingTrace
from app.engine.reply import ReplyRecord
from app.engine.measure.prompts import load_prompts, prepare_prompt
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig


def decode_tps(session: Session, tokens: list[int], sampling: SamplingParams,
               spec: SpeculationConfig, traced: bool) -> tuple[float, float]:
    """(decode tok/s, prompt tokens ÷ prefill seconds) of one run on an empty cache."""
    session.reset_cache()
    fin = None
    tr = SamplingTrace() if traced else None
    for ev in session.generate(tokens, sampling, spec, trace=tr, stats_interval=1e9):
        if isinstance(ev, ReplyRecord):
            fin = ev
    assert fin is not None and fin.stats.decode_tps
    return fin.stats.decode_tps, len(tokens) / fin.stats.prefill_time


def long_prefill_tps(session: Session, prompts: list[Any], n: int = 1024, reps: int = 5) -> float:
    """Median prompt-processing rate (tok/s) over a prompt of ``n`` tokens made of the
    set's prompts one after another, on an empty cache (the first pass is not counted)."""
    toks: list[int] = []
    while len(toks) < n:
        for pr in prompts:
            toks += list(prepare_prompt(session, pr, "plain").tokens)
    toks = toks[:n]
    rates = []
    for r in range(reps + 1):
        session.reset_cache()
        t0 = time.perf_counter()
        session.ctx.decode(toks, 0, logits="last")
        if r:
            rates.append(n / (time.perf_counter() - t0))
    session.reset_cache()
    return statistics.median(rates)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", choices=("recorder", "exact"), required=True)
    ap.add_argument("--model", type=Path, default=_common.GEMMA)
    ap.add_argument("--exact-model", type=Path, default=None)
    ap.add_argument("--prompts", default="builtin:code")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--drafter", choices=("prompt-lookup", "suffix"), default="prompt-lookup")
    ap.add_argument("--adaptive", action="store_true",
                    help="the default cost-aware draft length (k a ceiling); default: fixed k")
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--arm", choices=("default", "exact"), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--raw", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.what == "exact":
        if args.exact_model is None:
            ap.error("--what exact needs --exact-model")
        if str(args.exact_model) == "same":
            args.exact_model = args.model
    prompts = load_prompts(args.prompts)[: args.limit]
    if not prompts:
        ap.error("no prompts (--limit 0?)")
    load0 = os.getloadavg()
    other_cpu = _common.OtherCpu()
    specs = {"off": SpeculationConfig(),
             f"{args.drafter} k={args.k}": SpeculationConfig(mode=args.drafter, draft_max=args.k,
                                                            adaptive=args.adaptive)}
    tps: dict[tuple[str, str], list[float]] = {}
    prefill: dict[str, list[float]] = {}

    def cfg(path: Path, exact: bool) -> SessionConfig:
        extra: dict[str, Any] = {"exact_verification": True} if exact else {}
        return SessionConfig(target_path=path, n_ctx=2048, n_threads=args.threads, n_gpu_layers=0, **extra)

    if args.what == "exact" and args.arm is None:
        return exact_parent(args, specs, load0, other_cpu)
    if args.what == "recorder":
        sessions = {"untraced": Session.open(cfg(args.model, False))}
        sessions["traced"] = sessions["untraced"]
    else:  # one arm of --what exact, in its own process (exact_parent)
        exact = args.arm == "exact"
        sessions = {args.arm: Session.open(cfg(args.exact_model if exact else args.model, exact))}
        if exact and not sessions["exact"].exact_verification:
            sys.exit("error: exact verification is not possible here: "
                     + " ".join(sessions["exact"].notes))
    arms = list(sessions)
    try:
        for rep in range(args.repeat):
            for pi, pr in enumerate(prompts):
                sampling_base = SamplingParams(temperature=args.temp, seed=args.seed,
                                               max_tokens=args.max_tokens, stop=pr.stop)
                order = arms if (rep + pi) % 2 == 0 else arms[::-1]
                for label, spec in specs.items():
                    for arm in order:
                        s = sessions[arm]
                        toks = list(prepare_prompt(s, pr, "plain").tokens)
                        v, pp = decode_tps(s, toks, sampling_base, spec, traced=(arm == "traced"))
                        tps.setdefault((arm, label), []).append(v)
                        if label == "off":
                            prefill.setdefault(arm, []).append(pp)
                print(f"repeat {rep + 1} prompt {pi + 1}/{len(prompts)} done", file=sys.stderr, flush=True)
        long_pp: dict[str, float] = {}
        if args.what == "exact":  # a long prompt: every prompt of the set, 1,024 tokens
            long_pp = {arm: long_prefill_tps(sessions[arm], prompts) for arm in arms}
    finally:
        for s in set(sessions.values()):
            s.close()
    if args.arm is not None:
        args.raw.write_text(json.dumps({
            "tps": {label: tps[(args.arm, label)] for label in specs},
            "prefill": prefill[args.arm], "long_pp": long_pp[args.arm]}))
        return 0
    return report(args, arms, specs, tps, prefill, {}, load0, other_cpu)


def exact_parent(args: argparse.Namespace, specs: dict[str, SpeculationConfig],
                 load0: tuple[float, float, float], other_cpu: Any) -> int:
    """``--what exact``: each arm in its own process, per repeat, alternating the order."""
    tps: dict[tuple[str, str], list[float]] = {}
    prefill: dict[str, list[float]] = {}
    long_pp: dict[str, list[float]] = {}
    arms = ["default", "exact"]
    # this command line again, one repeat of one arm (argparse: the last value wins)
    argv = [sys.executable, __file__, *sys.argv[1:], "--repeat", "1"]
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            for arm in (arms if rep % 2 == 0 else arms[::-1]):
                raw = Path(tmp) / f"{arm}-{rep}.json"
                subprocess.run([*argv, "--arm", arm, "--raw", str(raw)],
                               env=_common.tiled_kernel_env(arm == "exact"), check=True)
                data = json.loads(raw.read_text())
                for label, v in data["tps"].items():
                    tps.setdefault((arm, label), []).extend(v)
                prefill.setdefault(arm, []).extend(data["prefill"])
                long_pp.setdefault(arm, []).append(data["long_pp"])
                print(f"repeat {rep + 1}: {arm} done", file=sys.stderr, flush=True)
    return report(args, arms, specs, tps, prefill,
                  {arm: statistics.median(v) for arm, v in long_pp.items()}, load0, other_cpu)


def report(args: argparse.Namespace, arms: list[str], specs: dict[str, SpeculationConfig],
           tps: dict[tuple[str, str], list[float]], prefill: dict[str, list[float]],
           long_pp: dict[str, float], load0: tuple[float, float, float], other_cpu: Any) -> int:
    """Print and write the medians and ratios."""
    load1 = os.getloadavg()
    during = other_cpu.note()
    result: dict[str, Any] = {"what": args.what, "loadavg_before": load0, "loadavg_after": load1,
                              "machine_during": during,
                              "settings": {k: str(v) for k, v in vars(args).items()}, "rows": []}
    busy = during["other_cores"]
    print(f"load average before {load0[0]:.2f}; other processes kept "
          + (f"{busy} cores busy during the run" if busy is not None else "(not measured here)")
          + (" (disturbed: a dry figure)" if during["disturbed"] else ""))
    base, other = arms
    for label in specs:
        a = statistics.median(tps[(base, label)])
        b = statistics.median(tps[(other, label)])
        print(f"{label}: {base} {a:.1f} tok/s, {other} {b:.1f} tok/s, ratio {other}/{base} {b / a:.3f}"
              f" (medians of {len(tps[(base, label)])})")
        result["rows"].append({"config": label, base: a, other: b, "ratio": b / a,
                               "n": len(tps[(base, label)])})
    if args.what == "exact":
        a, b = statistics.median(prefill[base]), statistics.median(prefill[other])
        print(f"prompt processing: {base} {a:.0f} tok/s, {other} {b:.0f} tok/s, "
              f"ratio {other}/{base} {b / a:.3f}")
        result["prefill_tps"] = {base: a, other: b, "ratio": b / a}
        a, b = long_pp[base], long_pp[other]
        print(f"prompt processing, 1,024 tokens (median over repeats of each one's median "
              f"of 5 passes): {base} {a:.0f} tok/s, {other} {b:.0f} tok/s, "
              f"ratio {other}/{base} {b / a:.3f}")
        result["prefill_1024_tps"] = {base: a, other: b, "ratio": b / a}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
