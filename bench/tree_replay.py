"""Would verifying a token tree (several candidate continuations in one pass) pay?

Issue 14 asks whether the suffix drafter should have the target verify several candidate
continuations in one batch. This script answers it on recorded replies, without timing
noise, with two bounds computed by the same dynamic programme
(:func:`app.engine.measure.draft_replay.oracle_replay`):

* **chain oracle**: each round verifies a prefix of the suffix drafter's chain draft
  (what Tandem does); the least target time in which the replies can be verified that
  way, knowing what the target accepts;
* **tree oracle**: each round may instead verify the first b nodes of the drafter's
  best-first token tree (:meth:`app.engine.suffix.SuffixDrafter.draft_tree`,
  SuffixDecoding's tree speculation), b = 2 … k, at ``--tree-cost`` × the time of a
  chain pass over the same number of tokens, and accepts the longest matching path.

Both come from one pass of the drafter over each reply, and the tree oracle may also take
any chain round, so tree ÷ chain oracle ≥ 1 is what best-first trees of up to k nodes,
grown from the chain's own occurrence set, could add over chains with these drafts on
this machine's measured pass times (other tree shapes are not tried); no real policy
gets all of either bound. ``--tree-cost`` is the ratio t(tree) ÷
t(chain of the same total) that ``bench/multi_candidate.py`` measures (llama.cpp's
sequence ids over a shared KV cache), taken as at least 1; by default the median of its
``shapes`` in
the newest ``bench/out/multi_candidate-*.json``. ``--flat`` also replays with every pass costing t(1)
(a GPU-like regime where a pass of up to k + 1 tokens costs what one does), where trees
pay most.

Replies and pass times are those of ``bench/policy_replay.py`` (the same cache file:
record them there or with ``--rerecord`` here).

Usage:
    .venv/bin/python bench/tree_replay.py --prompts builtin:code --k 8,16
    .venv/bin/python bench/tree_replay.py --prompts builtin:agent --k 16 --flat --json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import _common as C
import policy_replay as PR

from app.engine.llama import LlamaModel
from app.engine.measure.draft_replay import least_time, matching_prefix
from app.engine.suffix import SuffixDrafter, SuffixIndex
from app.options import SamplingParams


def tree_oracle(drafter: SuffixDrafter, prompt: Sequence[int], reply: Sequence[int], k: int,
                pass_time: Callable[[int], float], tree_cost: float, *, ends_with_eog: bool,
                max_tokens: int, draft_end: Callable[[int, Sequence[int]], int] | None
                ) -> tuple[float, float, float, dict[str, int]]:
    """(least target seconds with chain rounds only, the same with tree rounds allowed,
    plain seconds, counts), from one pass of the drafter over the reply.

    At each position i the chain options are those of
    :func:`~app.engine.measure.draft_replay.oracle_replay` (m ≤ L_i chain tokens for
    t(1 + m), emitting min(m, a_i) + 1); the tree options add, for b = 2 … k, the first b
    tree nodes for ``tree_cost`` · t(1 + b) when they branch (t(1 + b) when they are a
    chain), emitting the accepted path + 1. Counts: positions where the whole tree
    accepts more than the chain ("tree_longer"), and the rounds the tree optimum takes
    as trees and as chains (a pass that samples only the end-of-generation token is no
    round, as in the engine)."""
    context = list(prompt)
    drafter.begin(context)
    n = len(reply)
    end = n + 1 if ends_with_eog else n
    # (seconds, advance, is a tree round) per position
    chain_opts: list[list[tuple[float, int, bool]]] = []
    tree_opts: list[list[tuple[float, int, bool]]] = []
    longer = 0
    for i in range(end):
        chain = [(pass_time(1), 1, False)]
        trees: list[tuple[float, int, bool]] = []
        n_max = min(k, max_tokens - i - 1)
        if i < n and n_max > 0:
            d = drafter.draft(context, n_max)[:n_max]
            if draft_end is not None and d:
                del d[draft_end(i, d):]
            a = matching_prefix(d, reply, i)
            chain += [(pass_time(1 + m), min(m, a) + 1, False) for m in range(1, len(d) + 1)]
            tree = drafter.draft_tree(context, n_max, n_max)
            rest = list(reply[i:i + n_max])
            if draft_end is not None and rest:
                del rest[draft_end(i, rest):]  # a path is cut where the chain's would be
            branched = False
            best_tree = 0
            for b in range(2, len(tree) + 1):
                branched = branched or tree.parents[b - 1] != b - 2
                if not branched:
                    continue  # an unbranched prefix is a chain option already
                acc = tree.accepted(rest, b)
                best_tree = max(best_tree, acc)
                trees.append((tree_cost * pass_time(1 + b), acc + 1, True))
            longer += best_tree > a
        chain_opts.append(chain)
        tree_opts.append(trees)
        if i < n:
            context.append(reply[i])

    chain_s, _ = least_time(chain_opts)
    tree_s, path = least_time([c + t for c, t in zip(chain_opts, tree_opts)])
    # a pass that samples only the end-of-generation position (i = n) is no round
    tree_rounds = sum(is_tree for i, is_tree in path if i < n)
    chain_rounds = sum(not is_tree for i, is_tree in path if i < n)
    assert tree_s <= chain_s + 1e-12
    return chain_s, tree_s, end * pass_time(1), {
        "positions": end, "tree_longer": longer, "tree_rounds": tree_rounds,
        "chain_rounds": chain_rounds}


def default_tree_cost() -> float | None:
    """Median tree ÷ chain-of-the-same-total ratio in the newest
    bench/out/multi_candidate-*.json (None: there is none)."""
    runs = sorted(C.OUT.glob("multi_candidate-*.json"))
    if not runs:
        return None
    data = json.loads(runs[-1].read_text())
    return statistics.median(r["tree_over_chain_same_total"] for r in data["shapes"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/tree_replay.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=C.GEMMA)
    ap.add_argument("--prompts", default="builtin:code")
    ap.add_argument("--k", default="8,16", help="draft lengths (and tree budgets), e.g. 8,16")
    ap.add_argument("--tree-cost", type=float, default=None,
                    help="t(tree) ÷ t(chain of the same total); default: the newest bench/out/multi_candidate-*.json")
    ap.add_argument("--flat", action="store_true",
                    help="also replay with every pass costing t(1) (a GPU-like regime)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--no-stop", action="store_true",
                    help="replies recorded without the set's stop strings (bench/vs_ngram.py)")
    ap.add_argument("--rerecord", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    C.require_model(args.model)
    ks = C.value_list(ap, "--k", args.k, int)
    measured_cost = args.tree_cost if args.tree_cost is not None else default_tree_cost()
    if measured_cost is None:
        ap.error("no --tree-cost and no bench/out/multi_candidate-*.json: run bench/multi_candidate.py")
    # a tree pass is a chain pass of the same size plus a mask; a measured ratio below 1
    # is noise and would make trees look cheaper than the chains they contain
    tree_cost = max(1.0, measured_cost)
    recorded, times, turns = PR.load_recording(
        args.model, args.prompts, SamplingParams(temperature=0.0, max_tokens=args.n_predict),
        args.threads, max(ks), no_stop=args.no_stop, rerecord=args.rerecord)
    vocab = LlamaModel(args.model, vocab_only=True)
    regimes: list[tuple[str, Callable[[int], float]]] = [("measured", lambda n: times[n])]
    if args.flat:
        regimes.append(("flat", lambda n: times[1]))
    rows = []
    for regime, pass_time in regimes:
        for k in ks:
            index = SuffixIndex()
            chain_s = tree_s = plain_s = 0.0
            counts = {"positions": 0, "tree_longer": 0, "tree_rounds": 0, "chain_rounds": 0}
            for t in turns:
                by_eog, end = PR.stop_cut(vocab, t)
                ch, tr, pl, c = tree_oracle(SuffixDrafter(index), t["prompt"], t["reply"], k,
                                            pass_time, tree_cost, ends_with_eog=by_eog,
                                            max_tokens=args.n_predict, draft_end=end)
                chain_s += ch
                tree_s += tr
                plain_s += pl
                for key in counts:
                    counts[key] += c[key]
                index.add_reply(t["reply"])
            rows.append({"regime": regime, "k": k, "chain_oracle": plain_s / chain_s,
                         "tree_oracle": plain_s / tree_s, "tree_over_chain": chain_s / tree_s,
                         **counts})
    out = {"schema_version": 1, "prompts": args.prompts, "turns": len(turns),
           "tokens": sum(len(t["reply"]) for t in turns), "tree_cost": tree_cost,
           "tree_cost_measured": measured_cost,
           "pass_x_t1": {n: t / times[1] for n, t in times.items()},
           "recorded_while": recorded["recorded_while"], "rows": rows}

    def text(data: dict[str, Any]) -> None:
        print(f"{data['prompts']}: {data['turns']} turns, {data['tokens']} reply tokens; "
              f"tree pass = {data['tree_cost']:.3f} × chain pass of the same total "
              f"(measured {data['tree_cost_measured']:.3f}, at least 1 used)")
        print(f"{'regime':<9} {'k':>3} {'chain orc':>9} {'tree orc':>8} {'tree÷chain':>10} "
              f"{'tree longer':>11} {'tree rounds':>11}")
        for r in data["rows"]:
            print(f"{r['regime']:<9} {r['k']:>3} {r['chain_oracle']:>9.3f} {r['tree_oracle']:>8.3f} "
                  f"{r['tree_over_chain']:>10.3f} {r['tree_longer']:>5}/{r['positions']:<5} "
                  f"{r['tree_rounds']:>4}/{r['tree_rounds'] + r['chain_rounds']:<5}")

    return C.report("tree_replay", out, args.json, text)


if __name__ == "__main__":
    raise SystemExit(main())
