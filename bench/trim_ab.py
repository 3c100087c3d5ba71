"""How a free draft's length is set: chosen before drafting, cut after drafting, or both,
as an A/B in one run.

For a drafter without a model (prompt lookup, suffix lookup) the session can propose the
longest draft and let :meth:`DraftLengthPolicy.trim` cut it where E(d) / t(d + 1) peaks
(per-token acceptance kept per drafter key; a draft must beat plain decoding by the
policy's ``margin``): the ``trim-m<margin>`` arms. The ``choose`` arm picks d from α̂
before drafting (:meth:`DraftLengthPolicy.choose`); ``both-m<margin>`` chooses, then cuts.
The session's own rule is :func:`app.engine.session.free_draft_rule`; this script forces
one rule per arm (``--rules``). ``--refresh`` runs every arm once per value of
:attr:`DraftLengthPolicy.refresh_every` (how often a batch size the policy does not pick
is timed again), ``--key-revert`` every cutting arm once per value of
:attr:`DraftLengthPolicy.key_revert`.

Every arm, and plain decoding (``off``), has a session of its own (its own pass times,
α̂, key counts and suffix index), so that one arm's learning cannot help another. Each
turn of the prompt set runs on every arm, the order rotated per turn; multi-turn sets
share history as ``bench`` does (every index receives the plain reply). Reported:
each arm's :class:`~app.engine.measure.bench.ConfigSummary` (median decode tok/s; over
plain: ratio of medians, median of per-turn pairs, and the set's throughput per repeat; τ),
and how many replies were token-identical to plain decoding's. A run with other work on the
machine is marked disturbed (``_common.OtherCpu``).

Usage:
    .venv/bin/python bench/trim_ab.py --prompts builtin:chat --drafter suffix --temp 0.8 --repeat 3
    .venv/bin/python bench/trim_ab.py --prompts builtin:agent --drafter suffix --margins 0,0.1
    .venv/bin/python bench/trim_ab.py --prompts builtin:code --rules choose --refresh 50,400 --repeat 2
    .venv/bin/python bench/trim_ab.py --prompts builtin:agent --rules choose,both --repeat 2
    .venv/bin/python bench/trim_ab.py --prompts builtin:chat --temp 0.8 --rules trim --key-revert 0.05,0.01 --repeat 5
"""

from __future__ import annotations

import argparse
import itertools
import sys
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, cast, get_args

import _common as C

from app.engine import session as session_module
from app.engine.measure.bench import RunRecord, first_difference, generate_once, summarize
from app.engine.measure.multiturn import load_conversations, prepare_turn
from app.engine.measure.prompts import resolve_format
from app.engine.policy import DraftLengthPolicy
from app.engine.session import FreeDraftRule, Session, SessionConfig
from app.formatting import or_dash
from app.options import SamplingParams, SpeculationConfig



@dataclass(frozen=True)
class Arm:
    """One way of setting a free draft's length (:data:`app.engine.session.FreeDraftRule`:
    the choice before drafting, the cut, or both), with the policy's margin, refresh
    interval and key recovery rate for this arm."""

    rule: FreeDraftRule
    margin: float
    refresh_every: int
    key_revert: float = DraftLengthPolicy.key_revert

    def apply(self) -> None:
        """Set the process-wide switches for this arm's next reply."""
        session_module.FREE_DRAFT_RULE = self.rule
        DraftLengthPolicy.margin = self.margin
        DraftLengthPolicy.refresh_every = self.refresh_every
        DraftLengthPolicy.key_revert = self.key_revert


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
    ap.add_argument("--refresh", default="",
                    help="DraftLengthPolicy.refresh_every values, e.g. 50,400: every arm is run "
                         "once per value (default: the policy's)")
    ap.add_argument("--key-revert", default="",
                    help="DraftLengthPolicy.key_revert values, e.g. 0.05,0.01: every trim and "
                         "both arm once per value (default: the policy's)")
    ap.add_argument("--rules", default="choose,trim",
                    help="the rules to run (beside off): choose, trim, both; trim and both "
                         "once per margin")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    C.require_model(args.model)

    before = C.machine_note()
    other = C.OtherCpu()
    conversations = load_conversations(args.prompts)
    sampling = SamplingParams(temperature=args.temp, seed=args.seed, max_tokens=args.n_predict)
    default = Arm(rule="choose", margin=DraftLengthPolicy.margin,
                  refresh_every=DraftLengthPolicy.refresh_every)
    rules = C.value_list(ap, "--rules", args.rules, str)
    if any(r not in get_args(FreeDraftRule) for r in rules):
        ap.error(f"--rules: values of {', '.join(get_args(FreeDraftRule))}")
    reverts = C.value_list(ap, "--key-revert", args.key_revert, float, default.key_revert)
    refresh = C.value_list(ap, "--refresh", args.refresh, int, default.refresh_every)
    margin_values = C.value_list(ap, "--margins", args.margins, float, default.margin)
    if min(refresh) < 1:
        ap.error("--refresh: values ≥ 1")
    arms: dict[str, Arm] = {"off": default}
    for r in refresh:
        tail = f"-r{r}" if len(refresh) > 1 else ""
        for rule in rules:
            if rule == "choose":
                arms[f"choose{tail}"] = replace(default, refresh_every=r)
                continue
            for mg, kr in itertools.product(margin_values, reverts):
                kr_tail = f"-kr{kr:g}" if len(reverts) > 1 else ""
                arms[f"{rule}-m{mg:g}{kr_tail}{tail}"] = Arm(
                    rule=cast(FreeDraftRule, rule), margin=mg, refresh_every=r, key_revert=kr)
    spec = {name: SpeculationConfig(mode="off") if name == "off"
            else SpeculationConfig(mode=args.drafter, draft_max=args.k) for name in arms}
    ARMS = tuple(arms)
    n_arms = len(ARMS)
    ons = ARMS[1:]
    rows: list[dict[str, Any]] = []
    records: list[RunRecord] = []
    try:
        with ExitStack() as stack:
            # one session per arm: each has its own pass times, α̂ and suffix index
            sess = {arm: stack.enter_context(Session.open(SessionConfig(
                target_path=args.model, n_ctx=4096, n_threads=args.threads))) for arm in ARMS}
            s = sess["off"]
            fmt = resolve_format(s, "auto")
            first = prepare_turn(s, conversations[0], 0, [], fmt)
            for arm in ARMS:  # warm-up: graphs and pass times for every arm
                arms[arm].apply()
                generate_once(sess[arm], first, sampling.model_copy(update={"max_tokens": 16}), spec[arm])
            step = 0
            for rep in range(args.repeat):
                for x in sess.values():
                    x.suffix_index.clear()
                turn_index = 0  # the turn's place in the set: the same in every repeat
                for conv in conversations:
                    replies: list[str] = []
                    for ti in range(len(conv.turns)):
                        p = prepare_turn(s, conv, ti, replies, fmt)
                        order = ARMS[step % n_arms:] + ARMS[: step % n_arms]
                        step += 1
                        row: dict[str, Any] = {"prompt": p.name, "repeat": rep}
                        texts: dict[str, tuple[int, ...]] = {}
                        turn: dict[str, RunRecord] = {}
                        for arm in order:
                            arms[arm].apply()
                            fin = generate_once(sess[arm], p, sampling, spec[arm])
                            row[arm] = fin.stats.decode_tps
                            texts[arm] = tuple(fin.token_ids)
                            turn[arm] = RunRecord.from_finished(arm, p.name, turn_index,
                                                                rep, fin)
                            if arm == "off":
                                off_text = fin.text
                        for a in ons:
                            diff = first_difference(texts["off"], texts[a])
                            turn[a] = replace(turn[a], identical_to_off=diff is None,
                                              first_difference=diff)
                        records.extend(turn[a] for a in ARMS)
                        rows.append(row)
                        turn_index += 1
                        replies.append(off_text)
                        for x in sess.values():
                            x.suffix_index.add_reply(list(texts["off"]))
                        print(f"  {p.name:<28} " + "  ".join(
                            f"{a} {or_dash(row[a], '6.1f')}" for a in ARMS), file=sys.stderr, flush=True)
    finally:  # the module switches are process-wide
        default.apply()
        session_module.FREE_DRAFT_RULE = None
    during = other.note()
    summary = {
        c.label: {"median_tps": c.decode_tps_median, "ratio_of_medians": c.measured_speedup,
                  "median_of_pairs": c.paired_speedup, "set_speedup": c.set_speedup,
                  "tau": c.mean_acceptance_length,
                  "identical": c.identical if c.label != "off" else None}
        for c in summarize(records, ARMS)}
    result = {"schema_version": 2, "model": str(args.model), "prompts": args.prompts,
              "drafter": args.drafter, "k": args.k, "threads": args.threads,
              "temperature": args.temp, "seed": args.seed,
              "arms": {name: asdict(a) for name, a in arms.items() if name != "off"},
              "n_predict": args.n_predict, "repeat": args.repeat, "turns": len(rows),
              "summary": summary, "machine_before": before, "machine_during": during,
              "disturbed": C.disturbed(before, during), "runs": rows}

    def text(data: dict[str, Any]) -> None:
        width = max(len(a) for a in data["summary"])
        for arm, v in data["summary"].items():
            ident = "" if v["identical"] is None else f"  identical {v['identical']}/{len(rows)}"
            print(f"{arm:<{width}}  median {or_dash(v['median_tps'], '6.1f')} tok/s"
                  f"  × off {or_dash(v['ratio_of_medians'], '.3f')}"
                  f" (pairs {or_dash(v['median_of_pairs'], '.3f')},"
                  f" set {or_dash(v['set_speedup'], '.3f')})"
                  f"  τ {or_dash(v['tau'], '.2f')}{ident}")
        if data["disturbed"]:
            print(C.disturbed_line(before, during))
        else:
            print(f"other processes: {during.get('other_cores')} cores")

    return C.report("trim_ab", result, args.json, text)


if __name__ == "__main__":
    raise SystemExit(main())
