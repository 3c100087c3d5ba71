"""The measurements of bench/gpu_check.sh: a realistic-size synthetic pair, pass times,
speedups, and Tandem ÷ llama-speculative-simple.

Writes, with the ``gguf`` package, a target and a draft model that share one vocabulary
and whose greedy agreement is set by construction, then measures with the engine:

* the target's verification pass time for n = 1 … 17 tokens (median of interleaved
  repetitions, logits read back so that the GPU has finished);
* decode speed with speculation off, with the draft model (k = 4, fixed) and with prompt
  lookup and the suffix drafter (k = 8), their acceptance rates and speedups;
* Tandem ÷ ``llama-bench`` tg (plain) and Tandem ÷ ``llama-speculative-simple``
  (draft model, same k), when the tools were built.

The models (``--shapes gpu``): a TinyLlama-1.1B-shaped target (n_embd 2048, 22 layers,
32 heads, 4 KV heads, n_ff 5632, vocabulary 32000, F16) and a ~100 M draft (n_embd 768,
6 layers, 12 heads, n_ff 2048, F16). ``--shapes cpu`` writes small ones for a dry run.

How α is set by construction: each model's output matrix maps the embedding of token t to
the logit of ``succ(t)``, a fixed permutation of the word tokens (a bigram successor),
with a margin that the small random layer weights (scale ``--layer-scale``) do not
overturn; so greedy decoding follows t → succ(t). The draft's successor map differs from
the target's on a fraction ``--disagree`` of the tokens, so the draft's greedy acceptance
rate is about 1 − disagree. Prompts contain the target's own successor chain, so prompt
lookup and the suffix drafter find the continuation in the context (α ≈ 1 for them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as C
import numpy as np
from gguf import GGUFWriter

from app.engine.measure.bench import generate_once, run_bench
from app.engine.measure.prompts import PreparedPrompt
from app.engine.session import Session, SessionConfig
from app.options import SamplingParams, SpeculationConfig
from tests.synthetic import BOS, N_SPECIAL, add_tiny_tokenizer

FIRST_WORD = N_SPECIAL + 256  # ids below are control and byte tokens


@dataclass(frozen=True)
class Shape:
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int

    @property
    def params(self) -> int:
        d, f, hd = self.n_embd, self.n_ff, self.n_embd // self.n_head
        kv = self.n_head_kv * hd
        per_layer = 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d
        return 2 * self.n_vocab * d + self.n_layer * per_layer + d


SHAPES = {
    "gpu": (Shape(32000, 2048, 22, 32, 4, 5632), Shape(32000, 768, 6, 12, 4, 2048)),
    "cpu": (Shape(4096, 256, 4, 4, 2, 512), Shape(4096, 128, 1, 4, 2, 256)),
}


def successor_map(n_vocab: int, seed: int) -> np.ndarray:
    """A random permutation of the word tokens (ids ≥ FIRST_WORD, never EOS)."""
    rng = np.random.default_rng(seed)
    words = np.arange(FIRST_WORD, n_vocab)
    succ = np.arange(n_vocab)
    succ[words] = rng.permutation(words)
    return succ


def write_model(path: Path, shape: Shape, succ: np.ndarray, *, seed: int, layer_scale: float,
                logit_scale: float = 20.0, ftype: str = "f16") -> Path:
    """A llama GGUF whose greedy next token is ``succ[current]`` (see the module doc)."""
    rng = np.random.default_rng(seed)
    dt = np.float16 if ftype == "f16" else np.float32
    d = shape.n_embd
    hd = d // shape.n_head
    kv = shape.n_head_kv * hd
    w = GGUFWriter(str(path), "llama")
    w.add_name(f"gpu-check-{d}x{shape.n_layer}")
    w.add_context_length(4096)
    w.add_embedding_length(d)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    w.add_file_type(1 if ftype == "f16" else 0)
    add_tiny_tokenizer(w, shape.n_vocab)
    emb = rng.standard_normal((shape.n_vocab, d), dtype=np.float32)
    out = np.zeros_like(emb)
    words = np.arange(FIRST_WORD, shape.n_vocab)
    # logit of succ[t] after t = logit_scale · (normalised emb[t] · emb[t]) / d ≈ logit_scale
    out[succ[words]] = emb[words] * (logit_scale / d)
    w.add_tensor("token_embd.weight", emb.astype(dt))
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    w.add_tensor("output.weight", out.astype(dt))
    del emb, out

    def lin(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * (layer_scale / np.sqrt(cols))).astype(dt)

    for i in range(shape.n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", lin(d, d))
        w.add_tensor(p + "attn_k.weight", lin(kv, d))
        w.add_tensor(p + "attn_v.weight", lin(kv, d))
        w.add_tensor(p + "attn_output.weight", lin(d, d))
        w.add_tensor(p + "ffn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", lin(shape.n_ff, d))
        w.add_tensor(p + "ffn_up.weight", lin(shape.n_ff, d))
        w.add_tensor(p + "ffn_down.weight", lin(d, shape.n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def chain(succ: np.ndarray, start: int, n: int) -> list[int]:
    out = [start]
    while len(out) < n:
        out.append(int(succ[out[-1]]))
    return out


def prompts(succ: np.ndarray, n_vocab: int, count: int, seed: int) -> list[list[int]]:
    """BOS + 24 random words + a 48-token stretch of the successor chain + its first 8
    tokens again: the model continues the chain, which the context already holds."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        noise = rng.integers(FIRST_WORD, n_vocab, 24).tolist()
        c = chain(succ, int(rng.integers(FIRST_WORD, n_vocab)), 48)
        out.append([BOS, *noise, *c, *c[:8]])
    return out


def pass_times(session: Session, prompt: list[int], max_n: int, repeat: int) -> dict[int, float]:
    """Median time of a target pass over n = 1 … max_n tokens (logits for all), seconds."""
    session.reset_cache()
    ctx = session.ctx
    p = len(prompt) - 1
    ctx.decode(prompt[:-1], 0, logits="none")
    filler = (prompt * 4)[: max_n]
    times: dict[int, list[float]] = {n: [] for n in range(1, max_n + 1)}
    order = list(range(1, max_n + 1))
    for n in order:  # warm-up: one pass of every size builds its graph
        ctx.decode(filler[:n], p, logits="all")
        ctx.logits(n - 1)
        ctx.seq_rm(p, -1)
    for rep in range(repeat):
        rot = rep % len(order)
        for n in order[rot:] + order[:rot]:
            t = time.perf_counter()
            ctx.decode(filler[:n], p, logits="all")
            ctx.logits(n - 1)  # reading the logits waits for the device
            times[n].append(time.perf_counter() - t)
            if not ctx.seq_rm(p, -1):
                raise RuntimeError("seq_rm refused")
    session.reset_cache()
    return {n: statistics.median(v) for n, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", choices=sorted(SHAPES), default="gpu")
    ap.add_argument("--models-dir", type=Path, default=C.OUT / "gpu-check-models")
    ap.add_argument("--tools", type=Path, default=None, help="folder with llama-bench and "
                    "llama-speculative-simple (skipped when absent)")
    ap.add_argument("--disagree", type=float, default=0.2,
                    help="share of tokens whose successor the draft gets wrong (0.2)")
    ap.add_argument("--layer-scale", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--n-gpu-layers", type=int, default=None, help="default: all")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pass-repeat", type=int, default=15)
    ap.add_argument("--deadline", type=float, default=None,
                    help="time.time() after which optional steps are skipped")
    args = ap.parse_args(argv)
    tshape, dshape = SHAPES[args.shapes]
    ftype = "f16" if args.shapes == "gpu" else "f32"
    args.models_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"shapes": args.shapes, "machine": C.machine_note(),
                              "target_params": tshape.params, "draft_params": dshape.params}
    skipped: list[str] = []

    def left() -> float:
        return (args.deadline - time.time()) if args.deadline else float("inf")

    t0 = time.perf_counter()
    succ_t = successor_map(tshape.n_vocab, seed=1)
    succ_d = succ_t.copy()
    rng = np.random.default_rng(2)
    words = np.arange(FIRST_WORD, tshape.n_vocab)
    wrong = rng.choice(words, int(len(words) * args.disagree), replace=False)
    succ_d[wrong] = rng.permutation(succ_t[wrong])  # the draft's successor differs there
    target = write_model(args.models_dir / "target.gguf", tshape, succ_t, seed=10,
                         layer_scale=args.layer_scale, ftype=ftype)
    draft = write_model(args.models_dir / "draft.gguf", dshape, succ_d, seed=20,
                        layer_scale=args.layer_scale, ftype=ftype)
    result["write_models_s"] = time.perf_counter() - t0
    print(f"models: target {tshape.params / 1e6:.0f} M params ({target.stat().st_size / 2**20:.0f} MiB), "
          f"draft {dshape.params / 1e6:.0f} M ({draft.stat().st_size / 2**20:.0f} MiB), "
          f"written in {result['write_models_s']:.1f} s", flush=True)

    cfg = SessionConfig(target_path=target, draft_path=draft, n_ctx=2048,
                        n_threads=args.threads, n_gpu_layers=args.n_gpu_layers)
    ps = prompts(succ_t, tshape.n_vocab, args.prompts, seed=3)
    with Session.open(cfg) as session:
        result["n_gpu_layers"] = session.n_gpu_layers
        result["threads"] = session.ctx.n_threads
        pt = pass_times(session, ps[0], 17, args.pass_repeat)
        result["pass_ms"] = {n: t * 1e3 for n, t in pt.items()}
        print(f"offloaded layers: {session.n_gpu_layers}; verification pass, median of "
              f"{args.pass_repeat} (ms; × one-token pass):")
        print("  " + "  ".join(f"n={n}: {t * 1e3:.2f} ({t / pt[1]:.2f}×)" for n, t in pt.items()),
              flush=True)

        sampling = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
        prepared = [PreparedPrompt(tuple(p), name=f"chain-{i + 1}") for i, p in enumerate(ps)]
        groups = {
            "draft-model": [SpeculationConfig(mode="draft-model", draft_max=4, adaptive=False)],
            "prompt-lookup": [SpeculationConfig(mode="prompt-lookup", draft_max=8, adaptive=False)],
            "suffix": [SpeculationConfig(mode="suffix", draft_max=8, adaptive=False)],
        }
        result["speedups"] = {}
        for name, specs in groups.items():
            if left() < 60:
                skipped.append(f"{name} speedup (time budget)")
                continue
            rep = run_bench(session, prepared, specs, sampling, repeat=args.repeat)
            off, on = rep.summaries[0], rep.summaries[1]
            result["speedups"][name] = {
                "off_tps": off.decode_tps_median, "on_tps": on.decode_tps_median,
                "speedup": on.measured_speedup, "acceptance_rate": on.acceptance_rate,
                "mean_acceptance_length": on.mean_acceptance_length,
                "identical": f"{on.identical}/{on.compared}", "k": on.draft_max,
            }
            s = result["speedups"][name]
            print(f"{name} k={s['k']}: off {s['off_tps']:.1f} tok/s, on {s['on_tps']:.1f} tok/s, "
                  f"speedup {s['speedup']:.2f}×, α {s['acceptance_rate']}, τ "
                  f"{s['mean_acceptance_length']:.2f}, identical to off {s['identical']}", flush=True)

        if args.tools is not None and (args.tools / "llama-speculative-simple").is_file():
            if left() < 60:
                skipped.append("llama.cpp comparison (time budget)")
            else:
                result["vs_llama"] = _vs_llama(args, session, target, draft, ps[0], sampling)
        else:
            skipped.append("llama.cpp comparison (tools not built)")
    result["skipped"] = skipped
    for s in skipped:
        print(f"skipped: {s}")
    path = C.write_result(f"gpu_check-{args.shapes}", result)
    print(f"written: {path}")
    return 0


def _vs_llama(args: argparse.Namespace, session: Session, target: Path, draft: Path,
              prompt: list[int], sampling: SamplingParams) -> dict[str, Any]:
    from vs_llamacpp import run_llama_bench, run_spec_simple

    text = session.target.detokenize(prompt[1:])
    ns = argparse.Namespace(tools=args.tools, model=target, draft=draft, k=4, draft_p_min=0.0,
                            n_predict=args.max_tokens, n_ctx=2048,
                            threads=session.ctx.n_threads,
                            n_gpu_layers=99 if session.n_gpu_layers else 0)
    tokens = PreparedPrompt(tuple(session.target.tokenize(text, add_special=True, parse_special=False)))
    off = SpeculationConfig(mode="off")
    on = SpeculationConfig(mode="draft-model", draft_max=4, adaptive=False)
    rows = []
    for _ in range(args.repeat):
        lb = run_llama_bench(ns, depth=len(tokens.tokens))
        fin_off = generate_once(session, tokens, sampling, off)
        for attempt in range(3):  # its summary lines can be lost at exit (see vs_ngram.py)
            try:
                sp = run_spec_simple(ns, text)
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        fin_on = generate_once(session, tokens, sampling, on)
        rows.append((lb["tg_tps"], fin_off.stats.decode_tps, sp["tps"], fin_on.stats.decode_tps,
                     sp["prompt_tokens"]))
    med = [statistics.median(r[i] for r in rows if r[i]) for i in range(4)]
    out = {"llama_bench_tg_tps": med[0], "tandem_plain_tps": med[1],
           "llama_spec_simple_tps": med[2], "tandem_draft_tps": med[3],
           "plain_ratio": med[1] / med[0], "spec_ratio": med[3] / med[2],
           "prompt_tokens": {"tandem": len(tokens.tokens), "llama": rows[0][4]}}
    print(f"Tandem plain ÷ llama-bench tg: {out['plain_ratio']:.3f} ({med[1]:.1f} / {med[0]:.1f} tok/s); "
          f"Tandem draft model ÷ llama-speculative-simple (k=4): {out['spec_ratio']:.3f} "
          f"({med[3]:.1f} / {med[2]:.1f} tok/s); prompt tokens {out['prompt_tokens']}", flush=True)
    return out


if __name__ == "__main__":
    sys.exit(main())
