"""Would verifying several candidate continuations in one pass pay on this machine?

A drafter with several plausible continuations (the suffix drafter's second-best
branch) could have the target verify them together: one root token (the last accepted
token, in every sequence) and S branches of L draft tokens, each branch its own llama.cpp
sequence id sharing the prompt's KV cells (a token tree, as SpecInfer and SuffixDecoding's
tree mode do). That pays only if a pass over the tree costs little more than a pass over
one branch. This script measures, on the target model and the same context:

* chain(n): one sequence of n tokens (what Tandem verifies today: 1 + draft);
* tree(S×L): 1 + S·L tokens as S sequences.

It reports median pass times, t(tree) / t(chain of the same total), and t(tree) / t(chain
1 + L) — the price of adding S − 1 alternatives to a single draft of depth L — and the
break-even: the alternatives must add at least ``(ratio − 1) · E_chain`` accepted tokens
per round (E_chain: expected tokens of the single chain) to pay.

Interleaved: every repetition runs every shape once, in rotated order, and medians are
taken, so a busy machine disturbs all shapes alike (the ratios are still from one run;
the script records the load average).

Usage:
    .venv/bin/python bench/experiments/multi_candidate.py --threads 2 --repeat 15
    .venv/bin/python bench/experiments/multi_candidate.py --model X.gguf --shapes 2x4,4x2,2x8 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _common
import _common as C

from app.engine.measure.prompts import load_prompts
from app.engine.chat import tokenize_plain
from app.engine.llama import LlamaModel, lib

DEFAULT_SHAPES = "2x1,2x2,4x1,2x4,4x2,8x1,2x8,4x4"


def parse_shapes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        s, _, length = part.partition("x")
        out.append((int(s), int(length)))
    return out


class _Ctx:
    """A context with ``n_seq`` sequences sharing one (unified) KV cache."""

    def __init__(self, model: LlamaModel, n_ctx: int, n_seq: int, threads: int, n_out: int) -> None:
        L = lib()
        p = L.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = 512
        p.n_ubatch = 512
        p.n_seq_max = n_seq
        p.kv_unified = True
        p.n_threads = threads
        p.n_threads_batch = threads
        p.no_perf = True
        p.n_outputs_max = n_out
        p.swa_full = False
        self.L = L
        self.ptr = L.llama_init_from_model(model.ptr, p)
        if not self.ptr:
            raise SystemExit("could not create the context")
        self.mem = L.llama_get_memory(self.ptr)
        self.batch = L.llama_batch_init(512, 0, n_seq)

    def decode(self, items: list[tuple[int, int, list[int], bool]]) -> float:
        """items: (token, pos, seq ids, logits); returns the pass's wall time, s."""
        b = self.batch
        for i, (tok, pos, seqs, out) in enumerate(items):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = len(seqs)
            for j, s in enumerate(seqs):
                b.seq_id[i][j] = s
            b.logits[i] = 1 if out else 0
        b.n_tokens = len(items)
        t = time.perf_counter()
        rc = self.L.llama_decode(self.ptr, b)
        dt = time.perf_counter() - t
        if rc != 0:
            raise SystemExit(f"llama_decode failed: {rc}")
        return dt

    def drop_from(self, pos: int) -> None:
        if not self.L.llama_memory_seq_rm(self.mem, -1, pos, -1):
            raise SystemExit("llama_memory_seq_rm refused")

    def close(self) -> None:
        self.L.llama_batch_free(self.batch)
        self.L.llama_free(self.ptr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=C.GEMMA)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"S×L tree shapes ({DEFAULT_SHAPES})")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    C.require_model(args.model)
    shapes = parse_shapes(args.shapes)
    n_seq = max(s for s, _ in shapes)
    chains = sorted({1 + s * length for s, length in shapes} | {1 + length for _, length in shapes} | {1})
    before = C.machine_note()
    other_cpu = C.OtherCpu()
    model = LlamaModel(args.model, n_gpu_layers=0)
    ctx = _Ctx(model, 2048, n_seq, args.threads, max(chains) + 1)
    prompt = tokenize_plain(model, load_prompts("builtin:code")[0].plain)
    P = len(prompt) - 1
    ctx.decode([(t, i, [0], False) for i, t in enumerate(prompt[:-1])])
    for s in range(1, n_seq):
        ctx.L.llama_memory_seq_cp(ctx.mem, 0, s, -1, -1)
    filler = prompt[1:] * 4
    root = prompt[-1]

    def chain(n: int) -> list[tuple[int, int, list[int], bool]]:
        return [(root if i == 0 else filler[i], P + i, list(range(n_seq)) if i == 0 else [0], True)
                for i in range(n)]

    def tree(s: int, length: int) -> list[tuple[int, int, list[int], bool]]:
        items = [(root, P, list(range(n_seq)), True)]
        for b in range(s):
            items += [(filler[b * length + j], P + 1 + j, [b], True) for j in range(length)]
        return items

    variants: list[tuple[str, list[tuple[int, int, list[int], bool]]]] = (
        [(f"chain({n})", chain(n)) for n in chains]
        + [(f"tree({s}x{length})", tree(s, length)) for s, length in shapes]
    )
    times: dict[str, list[float]] = {name: [] for name, _ in variants}
    for name, items in variants:  # warm-up: graphs for every shape
        ctx.decode(items)
        ctx.drop_from(P)
    for rep in range(args.repeat):
        rot = rep % len(variants)
        for name, items in variants[rot:] + variants[:rot]:
            times[name].append(ctx.decode(items))
            ctx.drop_from(P)
    ctx.close()
    model.close()
    after = C.machine_note()
    during = other_cpu.note()
    med = {k: statistics.median(v) for k, v in times.items()}
    rows = []
    for s, length in shapes:
        t_tree = med[f"tree({s}x{length})"]
        same = med[f"chain({1 + s * length})"]
        one = med[f"chain({1 + length})"]
        rows.append({"shape": f"{s}x{length}", "tokens": 1 + s * length,
                     "tree_ms": t_tree * 1e3, "chain_same_total_ms": same * 1e3,
                     "chain_one_branch_ms": one * 1e3,
                     "tree_over_chain_same_total": t_tree / same,
                     "tree_over_chain_one_branch": t_tree / one})
    result: dict[str, Any] = {
        "model": str(args.model), "threads": args.threads, "repeat": args.repeat,
        "context_tokens": P, "chain_ms": {k: v * 1e3 for k, v in med.items() if k.startswith("chain")},
        "shapes": rows, "machine_before": before, "machine_after": after,
        "machine_during": during,
        "disturbed": C.disturbed(before, during),
    }
    C.write_result("multi_candidate", result)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"model {args.model.name}, {args.threads} threads, context {P} tokens, "
          f"median of {args.repeat} interleaved passes")
    print("chain(n) ms: " + ", ".join(f"{k[6:-1]}: {v:.1f}" for k, v in result["chain_ms"].items()))
    print(f"{'tree S×L':>9} {'tokens':>6} {'tree ms':>8} {'chain same':>10} {'chain 1+L':>9} "
          f"{'÷ same':>7} {'÷ 1+L':>6}")
    for r in rows:
        print(f"{r['shape']:>9} {r['tokens']:>6} {r['tree_ms']:>8.1f} {r['chain_same_total_ms']:>10.1f} "
              f"{r['chain_one_branch_ms']:>9.1f} {r['tree_over_chain_same_total']:>7.2f} "
              f"{r['tree_over_chain_one_branch']:>6.2f}")
    print("break-even: S−1 alternatives pay only if they add ≥ (÷ 1+L − 1) × E_chain accepted "
          "tokens per round")
    if result["disturbed"]:
        print(C.disturbed_line(before, during))
    return 0


if __name__ == "__main__":
    sys.exit(main())
