"""Draft-length rules replayed on recorded replies: an A/B without timing noise.

A timed A/B of two rules on this 2-core CPU scatters by ±10 % per run, more than most rule
changes are worth. Greedy, or seeded when sampling, the target's reply does not depend on
the rule (up to rounding, below), so this script

1. records, once, every turn of a prompt set with speculation off (prompt tokens, reply
   tokens, whether the reply ended with the end-of-generation token); multi-turn sets
   feed each reply into the next turn and into the suffix index, as ``bench`` does;
2. times the target's passes over n = 1..k + 1 tokens (each position then sampled as the
   engine samples it; medians of 7 interleaved passes, at the depth of the set's median
   prompt);
3. replays the drafter and :class:`~app.engine.policy.DraftLengthPolicy` through those
   replies under each rule (:func:`tests.policy_replay.replay_policy`):
   each round's pass costs the measured t(1 + d), the drafter and policy cost what they
   take here, and plain decoding costs t(1) per position.

Every rule sees the same replies and the same pass times, so their difference is theirs
alone. The ``oracle`` rule (:func:`tests.policy_replay.oracle_replay`) is
the least target time in which the reply can be verified from the drafter's drafts,
knowing what the target accepts: no rule that verifies a prefix of each round's draft
does better, so it bounds what any draft-length rule can get out of this drafter at this
k on this machine. Sampling works as well with a fixed seed (``--temp``, ``--seed``): speculation
draws the same random numbers as plain decoding.

What it does not model: a timed run's reply can differ from plain decoding's where a
batched pass rounds differently from a one-token pass and a near-tie flips (on Q4_K_M
weights 9 of 24 greedy ``builtin:code`` replies differed in one bench run; see
docs/proof.md for exact verification); the replay always replays plain decoding's text.
Its pass times are measured at one depth, once, so its absolute figures are off by up to
10 % against timed runs; compare rules within one recording.

Usage:
    .venv/bin/python bench/experiments/policy_replay.py --prompts builtin:agent
    .venv/bin/python bench/experiments/policy_replay.py --prompts builtin:code --rules choose,trim,oracle --k 8,16
    .venv/bin/python bench/experiments/policy_replay.py --prompts builtin:code --min-prob 0.1,0.3 --json
    .venv/bin/python bench/experiments/policy_replay.py --prompts builtin:chat --temp 0.8 --repeat 5
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast, get_args

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _common
import _common as C

from app.engine.llama import LlamaContext, LlamaModel
from app.engine.measure.bench import generate_once
from tests.policy_replay import PolicyReplay, ReplayRule, replay_policy
from app.engine.measure.multiturn import load_conversations, prepare_turn
from app.engine.measure.prompts import resolve_format
from app.engine.drafter_kinds import suffix_lookup
from app.engine.drafters import PromptLookupDrafter
from app.engine.policy import DraftLengthPolicy, PassTimes
from app.engine.sampling import TargetSampler
from app.engine.session import Session, SessionConfig
from app.engine.suffix import DEFAULT_MIN_TOKEN_PROB, SuffixDrafter, SuffixIndex
from app.engine.text import TextStream, draft_length_before_end
from app.options import SamplingParams, SpecMode, SpeculationConfig

RULES: tuple[ReplayRule, ...] = get_args(ReplayRule)


def record(session: Session, prompts: str, sampling: SamplingParams,
           stop_strings: bool = True) -> list[dict[str, Any]]:
    """Every turn of the set with speculation off: prompt and reply tokens (without the
    set's stop strings when ``stop_strings`` is False, as bench/vs_ngram.py runs)."""
    fmt = resolve_format(session, "auto")
    turns: list[dict[str, Any]] = []
    for conv in load_conversations(prompts):
        replies: list[str] = []
        for ti in range(len(conv.turns)):
            p = prepare_turn(session, conv, ti, replies, fmt)
            if not stop_strings:
                p = dataclasses.replace(p, stop=())
            fin = generate_once(session, p, sampling, SpeculationConfig(mode="off"))
            turns.append({"name": p.name, "conversation": conv.name, "prompt": list(p.tokens),
                          "reply": list(fin.token_ids), "reason": fin.reason,
                          "stop": [*sampling.stop, *p.stop]})
            replies.append(fin.text)
    return turns


def time_passes(session: Session, context: list[int], sizes: range, threads: int,
                sampling: SamplingParams, reps: int = 7) -> dict[int, float]:
    """Median seconds of a target pass over n tokens at depth len(context), per n, each
    position then sampled as the engine samples it (:class:`TargetSampler`)."""
    ctx = LlamaContext(session.target, n_ctx=4096, n_threads=threads)
    sampler = TargetSampler(session.target, sampling)
    try:
        ctx.decode(context, 0, logits="none")
        depth = len(context)
        samples: dict[int, list[float]] = {n: [] for n in sizes}
        order = list(sizes)
        for r in range(reps + 1):
            for n in (order if r % 2 == 0 else order[::-1]):
                t0 = time.perf_counter()
                ctx.decode(context[:n], depth, logits="all")
                for i in range(n):
                    sampler.sample(ctx, i)
                dt = time.perf_counter() - t0
                ctx.seq_rm(depth, -1)
                if r:  # the first sweep builds the graphs
                    samples[n].append(dt)
        return {n: statistics.median(v) for n, v in samples.items()}
    finally:
        ctx.close()


def stop_cut(model: LlamaModel, turn: dict[str, Any]) -> tuple[bool, Callable[[int, Sequence[int]], int]]:
    """Whether the turn's reply ended with the end-of-generation token (not at a stop
    string), and the engine's cut of a draft after i reply tokens
    (:func:`~app.engine.text.draft_length_before_end`)."""
    reply, stop = turn["reply"], turn["stop"]
    whole = TextStream(stop)
    for t in reply:
        whole.push(model.token_to_piece(t), False)
    by_eog = turn["reason"] == "stop" and not whole.stopped
    stream, fed = TextStream(stop), 0

    def cut(i: int, draft: Sequence[int]) -> int:
        nonlocal fed
        for t in reply[fed:i]:
            stream.push(model.token_to_piece(t), False)
        fed = max(fed, i)
        return draft_length_before_end(draft, stream, model.token_to_piece, model.is_eog)

    return by_eog, cut


def replay_set(turns: list[dict[str, Any]], times: dict[int, float], model: LlamaModel, *,
               drafter_kind: str, rule: ReplayRule, k: int, min_prob: float, n_predict: int,
               margin: float, repeat: int = 1, cut: bool = True,
               cold: bool = False, calibrated: bool = False) -> list[PolicyReplay]:
    """One rule over the whole set ``repeat`` times, one replay per turn and repeat.

    History is shared across turns in recorded order and the reply index restarts empty
    each repeat, while the policy carries over, as in one ``bench`` session. ``model``:
    the target's vocabulary (which replies ended with the end-of-generation token, and
    the engine's cut of drafts before the end of the reply; ``cut`` False: no cut).
    ``cold``: the policy starts as in a freshly loaded session, with only the one-token
    pass timed (as :meth:`Session._calibrate_target_step` leaves it), and observes every
    replayed pass, so it pays the exploration of batch sizes that a new session pays;
    ``calibrated`` with it: every size is also calibrated with its recorded time, as
    :meth:`Session._calibrate_pass_sizes` leaves a fresh session."""
    pt = PassTimes()
    for n, t in times.items():
        if calibrated:
            pt.calibrate(n, t)
        if cold and n > 1:
            continue
        for _ in range(PassTimes.trusted_after):
            pt.observe(n, t)
    # the drafter's own priors, as the session gives them (Session: getattr(drafter, "key_prior"))
    policy = DraftLengthPolicy(pt, key_prior=(SuffixDrafter.key_prior if drafter_kind == "suffix"
                                              else PromptLookupDrafter.key_prior))
    policy.margin = margin
    index = SuffixIndex()
    out: list[PolicyReplay] = []
    for _ in range(repeat):
        index.clear()
        for t in turns:
            drafter = (suffix_lookup.replay(SpeculationConfig(
                           mode=SpecMode.SUFFIX, adaptive=rule in ("trim", "oracle"),
                           suffix_min_prob=min_prob), index) if drafter_kind == "suffix"
                       else PromptLookupDrafter())
            by_eog, end = stop_cut(model, t)
            out.append(replay_policy(drafter, policy, t["prompt"], t["reply"], k, rule,
                                     lambda n: times[n], ends_with_eog=by_eog,
                                     max_tokens=n_predict, draft_end=end if cut else None,
                                     observe_passes=cold))
            index.add_reply(t["reply"])
    return out


def load_recording(model: Path, prompts: str, sampling: SamplingParams, threads: int,
                   k_max: int, *, no_stop: bool, rerecord: bool
                   ) -> tuple[dict[str, Any], dict[int, float], list[dict[str, Any]]]:
    """The set's recorded plain replies and pass times t(1)…t(k_max + 1): read from
    bench/out/replay-<set>-<model>-n<max_tokens>-t<threads>[-temp…][-nostop].json, or
    recorded there first (``rerecord``: always). Exits with a message when the file has
    too few pass sizes. Returns (the file's data, pass seconds per size, the turns)."""
    set_name = prompts.replace("builtin:", "").replace("/", "_")
    tag = (f"-temp{sampling.temperature:g}-s{sampling.seed}" if sampling.temperature > 0
           else "") + ("-nostop" if no_stop else "")
    cache = C.OUT / (f"replay-{set_name}-{model.stem}-n{sampling.max_tokens}-t{threads}"
                     f"{tag}.json")
    other = C.OtherCpu()
    if cache.is_file() and not rerecord:
        recorded = json.loads(cache.read_text())
    else:
        with Session.open(SessionConfig(target_path=model, n_ctx=4096,
                                        n_threads=threads)) as s:
            turns = record(s, prompts, sampling, stop_strings=not no_stop)
            depth = int(statistics.median(len(t["prompt"]) for t in turns))
            deepest = max(turns, key=lambda t: len(t["prompt"]))
            context = (deepest["prompt"] + deepest["reply"])[:max(depth, 17)]
            times = time_passes(s, context, range(1, k_max + 2), threads, sampling)
        recorded = {"model": str(model), "prompts": prompts, "depth": len(context),
                    "threads": threads, "n_predict": sampling.max_tokens,
                    "pass_s": {str(n): t for n, t in times.items()}, "turns": turns,
                    "recorded_while": other.note()}
        C.OUT.mkdir(exist_ok=True)
        cache.write_text(json.dumps(recorded))
    times = {int(n): t for n, t in recorded["pass_s"].items()}
    if k_max + 1 > max(times):
        sys.exit(f"error: {cache} has pass times up to {max(times)} tokens; use --rerecord")
    if any("stop" not in t for t in recorded["turns"]):
        sys.exit(f"error: {cache} predates stop strings in the record; use --rerecord")
    return recorded, times, recorded["turns"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/experiments/policy_replay.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=C.GEMMA)
    ap.add_argument("--prompts", default="builtin:agent")
    ap.add_argument("--drafter", choices=("suffix", "prompt-lookup"), default="suffix")
    ap.add_argument("--k", default="8", help="draft lengths, e.g. 8,16")
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--min-prob", default=f"{DEFAULT_MIN_TOKEN_PROB:g}",
                    help="the suffix drafter's min_token_prob values, e.g. 0.1,0.3")
    ap.add_argument("--margin", type=float, default=DraftLengthPolicy.margin,
                    help="the trim rule's margin over plain decoding")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--temp", type=float, default=0.0,
                    help="sampling temperature of the recorded replies (seeded: speculation "
                         "draws the same random numbers as plain decoding)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--repeat", type=int, default=1,
                    help="replay the set this many times with one policy, as bench --repeat")
    ap.add_argument("--no-stop", action="store_true",
                    help="record without the set's stop strings (replies run to --n-predict "
                         "or the end-of-generation token, as in bench/vs_ngram.py)")
    ap.add_argument("--no-cut", action="store_true",
                    help="also verify the draft tokens from the one that ends the reply (an "
                         "end-of-generation token or a stop string) on; the engine cuts them")
    ap.add_argument("--cold", action="store_true",
                    help="start the policy with only t(1) timed, as a freshly loaded session, "
                         "and let it time sizes as it goes (the cost of exploration); "
                         "the first repeat's first 8 per-turn speedups are listed")
    ap.add_argument("--calibrated", action="store_true",
                    help="with --cold: the sizes are calibrated at load as a session does "
                         "(Session._calibrate_pass_sizes), with the recorded pass times")
    ap.add_argument("--rerecord", action="store_true",
                    help="record the replies and pass times again instead of reusing them")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    C.require_model(args.model)
    ks = C.value_list(ap, "--k", args.k, int)
    rules = [cast(ReplayRule, r) for r in C.value_list(ap, "--rules", args.rules, str)]
    probs = C.value_list(ap, "--min-prob", args.min_prob, float)
    if args.calibrated and not args.cold:
        ap.error("--calibrated calibrates a fresh session's policy: give --cold with it")
    if min(ks) < 1 or any(r not in RULES for r in rules):
        ap.error(f"--k: values ≥ 1; --rules: a subset of {','.join(RULES)}")

    sampling = SamplingParams(temperature=args.temp, seed=args.seed, max_tokens=args.n_predict)
    recorded, times, turns = load_recording(args.model, args.prompts, sampling, args.threads,
                                            max(ks), no_stop=args.no_stop,
                                            rerecord=args.rerecord)
    t1 = times[1]
    vocab = LlamaModel(args.model, vocab_only=True)

    rows = []
    for k, mp, rule in itertools.product(ks, probs, rules):
        per = replay_set(turns, times, vocab, drafter_kind=args.drafter, rule=rule, k=k,
                         min_prob=mp, n_predict=args.n_predict, margin=args.margin,
                         repeat=args.repeat, cut=not args.no_cut,
                         cold=args.cold, calibrated=args.calibrated)
        r = sum(per[1:], per[0])
        c = r.counts
        turn_x = [x for p in per if (x := p.speedup) is not None]
        rows.append({"k": k, "min_prob": mp, "rule": rule,
                     "speedup": r.speedup,
                     "turn_speedup_median": statistics.median(turn_x),
                     "turns_below_0_97": sum(x < 0.97 for x in turn_x),
                     "acceptance_rate": c.acceptance_rate,
                     "mean_acceptance_length": c.mean_acceptance_length,
                     "draft_rounds": c.draft_rounds, "rounds": c.rounds,
                     "verified": c.verified, "accepted": c.accepted,
                     "draft_ms_per_round": 1000 * r.draft_s / c.rounds,
                     "first_turns": [round(x, 3) if (x := p.speedup) is not None else None
                                     for p in per[:len(turns)]][:8]})
    out = {"schema_version": 2, "prompts": args.prompts, "drafter": args.drafter,
           "cold": args.cold, "calibrated": args.calibrated,
           "temperature": args.temp, "seed": args.seed, "repeat": args.repeat,
           "cut_at_end": not args.no_cut,
           "turns": len(turns), "tokens": sum(len(t["reply"]) for t in turns),
           "pass_x_t1": {n: t / t1 for n, t in times.items()}, "t1_ms": 1000 * t1,
           "recorded_while": recorded["recorded_while"], "margin": args.margin, "rows": rows}
    out["depth"] = recorded["depth"]

    def text(data: dict[str, Any]) -> None:
        print(f"{data['prompts']}: {data['turns']} turns, {data['tokens']} reply tokens; "
              f"t(1) = {data['t1_ms']:.1f} ms at depth {data['depth']}; "
              f"recorded while {data['recorded_while']}")
        print("pass × t(1): " + "  ".join(f"{n}:{x:.2f}" for n, x in data["pass_x_t1"].items()))
        print(f"{'k':>3} {'min_p':>5} {'rule':<7} {'×plain':>7} {'turns ×':>7} "
              f"{'<0.97':>5} {'α':>6} {'τ':>5} {'drafted':>9} {'draft ms':>8}")
        for r in data["rows"]:
            print(f"{r['k']:>3} {r['min_prob']:>5g} {r['rule']:<7} "
                  f"{r['speedup']:>7.3f} {r['turn_speedup_median']:>7.3f} "
                  f"{r['turns_below_0_97']:>5} {r['acceptance_rate'] or 0:>6.3f} "
                  f"{r['mean_acceptance_length']:>5.2f} "
                  f"{r['draft_rounds']:>4}/{r['rounds']:<4} {r['draft_ms_per_round']:>7.2f}")
            if data["cold"]:
                print("      first turns ×plain: "
                      + " ".join(f"{x:.2f}" if x is not None else "-" for x in r["first_turns"]))

    return C.report("policy_replay", out, args.json, text)


if __name__ == "__main__":
    raise SystemExit(main())
