"""How a free draft's length is set: cut after drafting by each token's measured acceptance,
against chosen before drafting from the running α̂, as an A/B in one run.

For a drafter without a model (prompt lookup, suffix lookup) the session can propose the
longest draft and let :meth:`DraftLengthPolicy.trim` cut it where E(d) / t(d + 1) peaks
(per-token acceptance kept per drafter key; a draft must beat plain decoding by the
policy's ``margin``): the ``trim-m<margin>`` arms. The ``choose`` arm picks d from α̂
before drafting (:meth:`DraftLengthPolicy.choose`). The session uses the cut when
sampling and the choice when greedy (``app.engine.session.TRIM_FREE_DRAFTS``); this
script forces one rule per arm.

Every arm, and plain decoding (``off``), has a session of its own (its own pass times,
α̂, key counts and suffix index), so that one arm's learning cannot help another. Each
turn of the prompt set runs on every arm, the order rotated per turn; multi-turn sets
share history as ``bench`` does (every index receives the plain reply). Reported:
median decode tok/s, ratio of medians and median of per-turn ratios over plain, τ, and
how many replies were token-identical to plain decoding's. A run with other work on the
machine is marked disturbed (``_common.OtherCpu``).

Usage:
    .venv/bin/python bench/trim_ab.py --prompts builtin:chat --drafter suffix --temp 0.8 --repeat 3
    .venv/bin/python bench/trim_ab.py --prompts builtin:agent --drafter suffix --margins 0,0.1
"""

from __future__ import annotations

import argparse
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import _common as C

from app.engine import session as session_module
from app.engine.measure.bench import generate_once
from app.engine.measure.multiturn import load_conversations, prepare_turn
from app.engine.measure.prompts import resolve_format
from app.engine.policy import DraftLengthPolicy
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/trim_ab.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=C.GEMMA)
    ap.add_argument("--prompts", default="builtin:agent")
    ap.add_argument("--drafter", choices=("suffix", "prompt-lookup"), default="suffix")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--margins", default="",
                    help="one trim arm per margin, e.g. 0,0.1 (default: the policy's margin)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    C.require_model(args.model)

    before = C.machine_note()
    other = C.OtherCpu()
    conversations = load_conversations(args.prompts)
    sampling = SamplingParams(temperature=args.temp, seed=args.seed, max_tokens=args.n_predict)
    default_margin = DraftLengthPolicy.margin
    spec = {"off": SpeculationConfig(mode="off"),
            "choose": SpeculationConfig(mode=args.drafter, draft_max=args.k)}
    margins: dict[str, float] = {}
    for mg in (args.margins.split(",") if args.margins else [str(default_margin)]):
        spec[f"trim-m{mg}"] = SpeculationConfig(mode=args.drafter, draft_max=args.k)
        margins[f"trim-m{mg}"] = float(mg)
    ARMS = tuple(spec)
    n_arms = len(ARMS)
    ons = ARMS[1:]
    rows: list[dict[str, Any]] = []
    try:
        with ExitStack() as stack:
            # one session per arm: each has its own pass times, α̂ and suffix index
            sess = {arm: stack.enter_context(Session.open(SessionConfig(
                target_path=args.model, n_ctx=4096, n_threads=args.threads))) for arm in ARMS}
            s = sess["off"]
            fmt = resolve_format(s, "auto")
            first = prepare_turn(s, conversations[0], 0, [], fmt)
            for arm in ARMS:  # warm-up: graphs and pass times for every arm
                session_module.TRIM_FREE_DRAFTS = arm in margins
                DraftLengthPolicy.margin = margins.get(arm, default_margin)
                generate_once(sess[arm], first, sampling.model_copy(update={"max_tokens": 16}), spec[arm])
            step = 0
            for rep in range(args.repeat):
                for x in sess.values():
                    x.suffix_index.clear()
                for conv in conversations:
                    replies: list[str] = []
                    for ti in range(len(conv.turns)):
                        p = prepare_turn(s, conv, ti, replies, fmt)
                        order = ARMS[step % n_arms:] + ARMS[: step % n_arms]
                        step += 1
                        row: dict[str, Any] = {"prompt": p.name, "repeat": rep}
                        texts: dict[str, tuple[int, ...]] = {}
                        for arm in order:
                            session_module.TRIM_FREE_DRAFTS = arm in margins
                            DraftLengthPolicy.margin = margins.get(arm, default_margin)
                            fin = generate_once(sess[arm], p, sampling, spec[arm])
                            row[arm] = fin.stats.decode_tps
                            row[arm + "_tau"] = fin.stats.emitted / max(1, fin.stats.rounds)
                            texts[arm] = tuple(fin.token_ids)
                            if arm == "off":
                                off_text = fin.text
                        row["identical"] = {a: texts[a] == texts["off"] for a in ons}
                        rows.append(row)
                        replies.append(off_text)
                        for x in sess.values():
                            x.suffix_index.add_reply(list(texts["off"]))
                        print(f"  {p.name:<28} " + "  ".join(
                            f"{a} {row[a]:6.1f}" for a in ARMS), file=sys.stderr, flush=True)
    finally:  # the module switches are process-wide
        session_module.TRIM_FREE_DRAFTS = None
        DraftLengthPolicy.margin = default_margin
    during = other.note()
    off_med = statistics.median(r["off"] for r in rows)
    summary = {
        arm: {"median_tps": statistics.median(r[arm] for r in rows),
              "ratio_of_medians": statistics.median(r[arm] for r in rows) / off_med,
              "median_of_pairs": statistics.median(r[arm] / r["off"] for r in rows),
              "median_tau": statistics.median(r[arm + "_tau"] for r in rows),
              "identical": sum(r["identical"][arm] for r in rows) if arm != "off" else None}
        for arm in ARMS}
    result = {"schema_version": 1, "model": str(args.model), "prompts": args.prompts,
              "drafter": args.drafter, "k": args.k, "threads": args.threads,
              "temperature": args.temp, "seed": args.seed, "margins": margins,
              "n_predict": args.n_predict, "repeat": args.repeat, "turns": len(rows),
              "summary": summary, "machine_before": before, "machine_during": during,
              "disturbed": C.disturbed(before, during), "runs": rows}

    def text(data: dict[str, Any]) -> None:
        for arm, v in data["summary"].items():
            ident = "" if v["identical"] is None else f"  identical {v['identical']}/{len(rows)}"
            print(f"{arm:<7} median {v['median_tps']:6.1f} tok/s  × off {v['ratio_of_medians']:.3f}"
                  f" (pairs {v['median_of_pairs']:.3f})  τ {v['median_tau']:.2f}{ident}")
        if data["disturbed"]:
            print(C.disturbed_line(before, during))
        else:
            print(f"other processes: {during.get('other_cores')} cores")

    return C.report("trim_ab", result, args.json, text)


if __name__ == "__main__":
    raise SystemExit(main())
