"""What verification and rollback cost on a hybrid target of a realistic size, on this
machine: an LFM2-shaped hybrid (short-convolution + attention layers, recurrent state
rolled back from snapshots) against an attention-only model of the same width, depth and
weights type, both written with ``gguf`` so that their greedy output is known.

Both models follow a successor chain by construction (``bench/gpu_check.py``'s method:
the output matrix maps the embedding of token t to the logit of ``succ(t)``, small random
layer weights do not overturn it), and each prompt already holds the whole stretch of
the chain the reply will write, so prompt lookup and suffix lookup draft what the target
writes (α ≈ 1), as in a reply that copies its input: the figures show what the
architecture lets speculation gain where α allows it, not what real text gives.

Measured per model, in one session each, one after the other:

* the verification pass time t(n) for n = 1 … 17 tokens (median of interleaved
  repetitions), as a multiple of t(1);
* the rollback after a 9-token pass that keeps 3 (``llama_memory_seq_rm``; on the hybrid
  it restores a recurrent-state snapshot) as a fraction of t(1), median of repetitions;
* the memory of the hybrid's recurrent-state snapshots (the load note's figure);
* decode speed with speculation off and with prompt lookup and suffix lookup (the default
  draft length, k ≤ 16, adaptive), interleaved off/on, medians, and × plain.

    .venv/bin/python bench/hybrid_cost.py --threads 2 --json

Results go to ``bench/out/hybrid_cost-<time>.json`` (``_common.write_result``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _common as C
import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, quants
from gpu_check import FIRST_WORD, chain, successor_map

from app.engine.measure.bench import run_bench
from app.engine.measure.prompts import PreparedPrompt
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig
from tests.synthetic import BOS, add_tiny_tokenizer

#: 16 layers, 10 short convolution (c) and 6 attention (a)
HYBRID_LAYERS = "ccaccaccacacacac"


def write_chain_model(path: Path, layers: str, *, n_vocab: int, n_embd: int, n_ff: int,
                      n_head: int, succ: np.ndarray, seed: int, layer_scale: float = 0.05,
                      logit_scale: float = 20.0, l_cache: int = 3) -> Path:
    """An LFM2 GGUF (Q8_0 matrices, F32 norms) whose greedy next token is ``succ[t]``.

    ``layers``: one letter per block, ``c`` short convolution or ``a`` attention. Without
    a ``c`` the file is a ``llama`` model with the same matrices (llama.cpp's LFM2 aborts
    without any recurrent layer); it lacks only LFM2's per-head q/k norms.
    """
    rng = np.random.default_rng(seed)
    d, hd = n_embd, n_embd // n_head
    arch = "lfm2" if "c" in layers else "llama"
    w = GGUFWriter(str(path), arch)
    w.add_name(f"chain-{layers}-{d}")
    w.add_context_length(4096)
    w.add_embedding_length(d)
    w.add_block_count(len(layers))
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    if arch == "lfm2":
        w.add_head_count_kv([n_head if c == "a" else 0 for c in layers])
        w.add_uint32("lfm2.shortconv.l_cache", l_cache)
    else:
        w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    w.add_file_type(7)  # MOSTLY_Q8_0
    add_tiny_tokenizer(w, n_vocab)

    def q8(a: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        return quants.quantize(a.astype(np.float32), GGMLQuantizationType.Q8_0), {
            "raw_dtype": GGMLQuantizationType.Q8_0}

    def add_q8(name: str, a: np.ndarray) -> None:
        data, kw = q8(a)
        w.add_tensor(name, data, **kw)

    emb = rng.standard_normal((n_vocab, d), dtype=np.float32)
    out = np.zeros_like(emb)
    words = np.arange(FIRST_WORD, n_vocab)
    out[succ[words]] = emb[words] * (logit_scale / d)
    add_q8("token_embd.weight", emb)
    w.add_tensor("token_embd_norm.weight" if arch == "lfm2" else "output_norm.weight",
                 np.ones(d, dtype=np.float32))
    add_q8("output.weight", out)
    del emb, out

    def lin(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32)
                * np.float32(layer_scale / np.sqrt(cols))).astype(np.float32)

    ones = np.ones(d, dtype=np.float32)
    for i, kind in enumerate(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "ffn_norm.weight", ones)
        add_q8(p + "ffn_gate.weight", lin(n_ff, d))
        add_q8(p + "ffn_up.weight", lin(n_ff, d))
        add_q8(p + "ffn_down.weight", lin(d, n_ff))
        if kind == "a":
            if arch == "lfm2":
                w.add_tensor(p + "attn_q_norm.weight", np.ones(hd, dtype=np.float32))
                w.add_tensor(p + "attn_k_norm.weight", np.ones(hd, dtype=np.float32))
            for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
                add_q8(p + name + ".weight", lin(d, d))
        elif kind == "c":
            w.add_tensor(p + "shortconv.conv.weight", lin(d, l_cache))
            add_q8(p + "shortconv.in_proj.weight", lin(3 * d, d))
            add_q8(p + "shortconv.out_proj.weight", lin(d, d))
        else:
            raise ValueError(f"layer kinds are 'a' and 'c', not {kind!r}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def copy_prompts(succ: np.ndarray, n_vocab: int, count: int, length: int, seed: int
                 ) -> list[list[int]]:
    """BOS + 24 random words + a stretch of the successor chain ``length`` + 8 tokens
    long + its first 8 tokens again: the model continues the chain from its 9th token,
    and the whole reply (up to ``length`` tokens) is already in the prompt, as when a
    reply copies what it was given (α ≈ 1 for lookup drafters)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        noise = rng.integers(FIRST_WORD, n_vocab, 24).tolist()
        c = chain(succ, int(rng.integers(FIRST_WORD, n_vocab)), length + 8)
        out.append([BOS, *noise, *c, *c[:8]])
    return out


def pass_and_rollback_times(session: Session, prompt: list[int], max_n: int,
                            repeat: int) -> tuple[dict[int, float], float]:
    """Median seconds of a target pass over n = 1 … ``max_n`` tokens (logits for all,
    read back), and of the rollback of 6 positions after a 9-token pass.

    As in a verification, each pass keeps its first token: a recurrent state's snapshots
    undo the positions after a batch's first token, not the batch's own start (so the
    context grows by one token per pass, by three per rollback).
    """
    ctx = session.ctx
    session.reset_cache()
    q = len(prompt) - 1
    ctx.decode(prompt[:-1], 0, logits="none")
    filler = (prompt * 4)[:max_n]
    times: dict[int, list[float]] = {n: [] for n in range(1, max_n + 1)}
    rollbacks: list[float] = []

    def one(n: int) -> float:
        nonlocal q
        t = time.perf_counter()
        ctx.decode(filler[:n], q, logits="all")
        ctx.logits(n - 1)
        dt = time.perf_counter() - t
        if not ctx.seq_rm(q + 1, -1):
            raise RuntimeError("seq_rm refused a rollback")
        q += 1
        return dt

    order = list(range(1, max_n + 1))
    for n in order:  # warm-up: one pass of every size builds its graph
        one(n)
    for rep in range(repeat):
        rot = rep % len(order)
        for n in order[rot:] + order[:rot]:
            times[n].append(one(n))
        ctx.decode(filler[:9], q, logits="all")
        ctx.logits(8)
        t = time.perf_counter()
        if not ctx.seq_rm(q + 3, -1):
            raise RuntimeError("seq_rm refused a rollback")
        rollbacks.append(time.perf_counter() - t)
        q += 3
    session.reset_cache()
    return {n: statistics.median(v) for n, v in times.items()}, statistics.median(rollbacks)


def measure(path: Path, label: str, ps: list[list[int]], args: argparse.Namespace) -> dict[str, Any]:
    cfg = SessionConfig(target_path=path, n_ctx=2048, n_threads=args.threads)
    res: dict[str, Any] = {"model": label, "file_mib": path.stat().st_size / 2**20}
    with Session.open(cfg) as s:
        res["threads"] = s.ctx.n_threads
        res["snapshot_bytes"] = s.snapshot_bytes
        res["n_rs_seq"] = s.ctx.n_rs_seq
        pt, rb = pass_and_rollback_times(s, ps[0], 17, args.pass_repeat)
        res["pass_ms"] = {n: t * 1e3 for n, t in pt.items()}
        res["rollback_ms"] = rb * 1e3
        sampling = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
        prepared = [PreparedPrompt(tuple(p), name=f"chain-{i + 1}") for i, p in enumerate(ps)]
        res["speedups"] = {}
        for mode in ("prompt-lookup", "suffix"):
            rep = run_bench(s, prepared, [SpeculationConfig(mode=mode, draft_max=16)], sampling,
                            repeat=args.repeat)
            off, on = rep.summaries[0], rep.summaries[1]
            res["speedups"][mode] = {
                "off_tps": off.decode_tps_median, "on_tps": on.decode_tps_median,
                "speedup": on.measured_speedup, "paired": on.paired_speedup,
                "acceptance_rate": on.acceptance_rate,
                "mean_acceptance_length": on.mean_acceptance_length,
                "identical": f"{on.identical}/{on.compared}",
            }
    t1 = res["pass_ms"][1]
    print(f"{label}: {res['file_mib']:.0f} MiB, {res['threads']} threads; pass ms (× t1): "
          + "  ".join(f"{n}: {t:.1f} ({t / t1:.2f})" for n, t in res["pass_ms"].items()
                      if n in (1, 2, 3, 4, 5, 8, 9, 12, 16, 17)), flush=True)
    print(f"  rollback of 6 positions {res['rollback_ms']:.3f} ms = {res['rollback_ms'] / t1:.3f} of t1;"
          f" recurrent snapshots {res['n_rs_seq']} × = {res['snapshot_bytes'] / 2**10:.1f} KiB", flush=True)
    for mode, sp in res["speedups"].items():
        print(f"  {mode}: off {sp['off_tps']:.1f} on {sp['on_tps']:.1f} tok/s = {sp['speedup']:.2f}× "
              f"(pairs {sp['paired']:.2f}), α {sp['acceptance_rate']}, τ {sp['mean_acceptance_length']:.2f}, "
              f"identical {sp['identical']}", flush=True)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models-dir", type=Path, default=C.OUT / "hybrid-cost-models")
    ap.add_argument("--n-embd", type=int, default=1024)
    ap.add_argument("--n-ff", type=int, default=4096)
    ap.add_argument("--n-vocab", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pass-repeat", type=int, default=15)
    ap.add_argument("--json", action="store_true", help="print the result as JSON too")
    ap.add_argument("--reuse", action="store_true",
                    help="use the models already in --models-dir (written with the same sizes)")
    args = ap.parse_args(argv)
    args.models_dir.mkdir(parents=True, exist_ok=True)
    succ = successor_map(args.n_vocab, seed=1)
    common = dict(n_vocab=args.n_vocab, n_embd=args.n_embd, n_ff=args.n_ff, n_head=16, succ=succ)
    t0 = time.perf_counter()
    hybrid, dense = args.models_dir / "hybrid.gguf", args.models_dir / "attention.gguf"
    if not (args.reuse and hybrid.is_file() and dense.is_file()):
        write_chain_model(hybrid, HYBRID_LAYERS, seed=10, **common)
        write_chain_model(dense, "a" * len(HYBRID_LAYERS), seed=10, **common)
        print(f"models written in {time.perf_counter() - t0:.0f} s", flush=True)
    ps = copy_prompts(succ, args.n_vocab, args.prompts, args.max_tokens + 8, seed=3)
    result: dict[str, Any] = {"machine": C.machine_note(), "layers": HYBRID_LAYERS,
                              "n_embd": args.n_embd, "n_ff": args.n_ff, "n_vocab": args.n_vocab}
    other = C.OtherCpu()
    result["hybrid"] = measure(hybrid, "hybrid (10 conv + 6 attention)", ps, args)
    result["attention"] = measure(dense, "attention only (16)", ps, args)
    result.update(other.note())
    print(f"other processes used {result['other_cores']} cores on average meanwhile"
          f"{' (disturbed)' if result['disturbed'] else ''}")
    path = C.write_result("hybrid_cost", result)
    print(f"written: {path}")
    if args.json:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
