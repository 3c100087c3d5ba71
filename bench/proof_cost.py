"""What the proof costs in speed, as ratios measured in one interleaved run (issue 8).

``--what recorder``: one session, one prompt set; each prompt is decoded with and without
a :class:`~app.engine.divergence.SamplingTrace`, alternating which goes first, for plain
decoding and for prompt lookup at k. Printed: median decode tok/s of each and the ratio
traced / untraced (the chat path never records; bench and the race would).

``--what exact``: two sessions side by side, the default one on ``--model`` and one with
exact verification on ``--exact-model`` (a Q5_1/Q4_1 file, docs/proof.md); each prompt
is decoded by both, alternating, plain and with prompt lookup at k. Printed: median
decode tok/s of each and the ratios exact / default.

Timings on a busy machine are disturbed: the load average before and other processes' CPU
time during the run (``_common.OtherCpu``) are printed.

    .venv/bin/python bench/proof_cost.py --what recorder --repeat 3
    .venv/bin/python bench/proof_cost.py --what exact \\
        --exact-model .cache/proof-models/gemma-3-270m-Q5_1.gguf --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import _common  # puts the repo on sys.path

from app.engine.divergence import SamplingTrace
from app.engine.events import Finished
from app.engine.measure.prompts import load_prompts, prepare_prompt
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig


def decode_tps(session: Session, tokens: list[int], sampling: SamplingParams,
               spec: SpeculationConfig, traced: bool) -> float:
    session.reset_cache()
    fin = None
    tr = SamplingTrace() if traced else None
    for ev in session.generate(tokens, sampling, spec, trace=tr, stats_interval=1e9):
        if isinstance(ev, Finished):
            fin = ev
    assert fin is not None and fin.stats.decode_tps
    return fin.stats.decode_tps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", choices=("recorder", "exact"), required=True)
    ap.add_argument("--model", type=Path, default=_common.GEMMA)
    ap.add_argument("--exact-model", type=Path, default=None)
    ap.add_argument("--prompts", default="builtin:code")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    prompts = load_prompts(args.prompts)[: args.limit]
    load0 = os.getloadavg()
    other_cpu = _common.OtherCpu()
    specs = {"off": SpeculationConfig(),
             f"k={args.k}": SpeculationConfig(mode="prompt-lookup", draft_max=args.k, adaptive=False)}
    tps: dict[tuple[str, str], list[float]] = {}

    def cfg(path: Path, exact: bool) -> SessionConfig:
        extra: dict[str, Any] = {"exact_verification": True} if exact else {}
        return SessionConfig(target_path=path, n_ctx=2048, n_threads=args.threads, n_gpu_layers=0, **extra)

    if args.what == "recorder":
        sessions = {"untraced": Session.open(cfg(args.model, False))}
        sessions["traced"] = sessions["untraced"]
    else:
        if args.exact_model is None:
            ap.error("--what exact needs --exact-model")
        sessions = {"default": Session.open(cfg(args.model, False)),
                    "exact": Session.open(cfg(args.exact_model, True))}
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
                        v = decode_tps(s, toks, sampling_base, spec, traced=(arm == "traced"))
                        tps.setdefault((arm, label), []).append(v)
                print(f"repeat {rep + 1} prompt {pi + 1}/{len(prompts)} done", file=sys.stderr, flush=True)
    finally:
        for s in set(sessions.values()):
            s.close()
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
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
