"""Is a verification batch computed bit-for-bit like one-token passes? (docs/proof.md)

For one configuration (model file, weight repacking, flash attention, KV cache type,
n_ubatch, threads, and the env switch ``GGML_CPU_TILED_MM``), a prompt is prefilled, and
the logits of the next n positions are computed twice on fresh contexts: token by token
(plain decoding) and as one batch of n (a verification pass of k = n − 1 drafts, then
also batches of 2 and 4). Printed: the largest |Δ logit| between the two, per batch
size, and whether every row is bit-identical. ``--long`` uses a prompt longer than 512
tokens (flash attention's single-query path splits the KV cache there).

Each configuration runs in its own child process (the ggml env switches are read once
per process). ``--all`` runs the table of docs/proof.md.

    .venv/bin/python bench/experiments/batch_invariance.py --all
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _common
import _common  # puts the repo on sys.path
import numpy as np

from app.engine.llama import LlamaContext, LlamaModel
from app.engine.measure.prompts import load_prompts, prepare_prompt
from app.engine.session import Session, SessionConfig

PROOF_MODELS = _common.REPO / ".cache" / "proof-models"
KV = {"f16": 1, "f32": 0, "q8_0": 8, "q4_0": 2}
FLASH = {"auto": -1, "off": 0, "on": 1}


def measure(args: argparse.Namespace) -> dict[str, object]:
    model = LlamaModel(args.model, n_gpu_layers=0, use_extra_bufts=not args.no_repack)
    try:
        cfg = SessionConfig(target_path=args.model, n_ctx=4096, n_threads=args.threads, n_gpu_layers=0)

        def fresh() -> LlamaContext:
            kv = KV[args.kv_type] if args.kv_type else None
            return LlamaContext(model, n_ctx=4096, n_batch=512, n_threads=args.threads,
                                n_ubatch=args.ubatch, flash_attn=FLASH[args.flash_attn],
                                type_k=kv, type_v=kv)

        prompts = load_prompts("builtin:code")
        ctx0 = fresh()
        s = Session(cfg, model, ctx0)  # only for prompt formatting
        text_tokens = list(prepare_prompt(s, prompts[0], "plain").tokens)
        if args.long:
            extra = [t for p in prompts[1:4] for t in prepare_prompt(s, p, "plain").tokens[1:]]
            text_tokens = [*text_tokens, *extra]
        ctx0.close()
        n = args.n
        # the continuation: greedy plain decoding from the prompt
        ctx = fresh()
        ctx.decode(text_tokens[:-1], 0, logits="none")
        seq = list(text_tokens)
        single: list[np.ndarray] = []
        for p in range(len(text_tokens) - 1, len(text_tokens) - 1 + n):
            ctx.decode([seq[p]], p, logits="last")
            row = np.array(ctx.logits(-1))
            single.append(row)
            if p + 1 >= len(seq):
                seq.append(int(np.argmax(row)))
        ctx.close()
        out: dict[str, object] = {"prompt_tokens": len(text_tokens)}
        for b in sorted({2, 4, n}):
            ctx = fresh()
            ctx.decode(text_tokens[:-1], 0, logits="none")
            p0 = len(text_tokens) - 1
            worst = 0.0
            same = True
            for start in range(0, n, b):
                chunk = seq[p0 + start : p0 + min(start + b, n)]
                ctx.decode(chunk, p0 + start, logits="all")
                for i in range(len(chunk)):
                    d = np.abs(np.array(ctx.logits(i)) - single[start + i])
                    worst = max(worst, float(d.max()))
                    same = same and bool(np.array_equal(ctx.logits(i), single[start + i]))
            ctx.close()
            out[f"batch{b}"] = {"max_abs_diff": worst, "bit_identical": same}
        return out
    finally:
        model.close()


CONFIGS: list[tuple[str, list[str], dict[str, str]]] = [
    ("Q4_K_M default (repack on, FA auto, F16 KV)", ["--model", "Q4_K_M"], {}),
    ("Q4_K_M repack off", ["--model", "Q4_K_M", "--no-repack"], {}),
    ("Q4_K_M repack off, FA off", ["--model", "Q4_K_M", "--no-repack", "--flash-attn", "off"], {}),
    ("Q4_K_M repack off, tiled K-quant matmul off (env)", ["--model", "Q4_K_M", "--no-repack"],
     {"GGML_CPU_TILED_MM": "0"}),
    ("Q4_K_M repack off, tiled off (env), long prompt", ["--model", "Q4_K_M", "--no-repack", "--long"],
     {"GGML_CPU_TILED_MM": "0"}),
    ("Q4_K_M repack off, tiled off (env), KV Q8_0, FA on, long prompt",
     ["--model", "Q4_K_M", "--no-repack", "--kv-type", "q8_0", "--flash-attn", "on", "--long"],
     {"GGML_CPU_TILED_MM": "0"}),
    ("Q4_K_M n_ubatch 1", ["--model", "Q4_K_M", "--ubatch", "1"], {}),
    ("Q4_K_M 1 thread", ["--model", "Q4_K_M", "--threads", "1"], {}),
    ("Q4_K_M repack off, KV Q8_0, FA on", ["--model", "Q4_K_M", "--no-repack", "--kv-type", "q8_0",
                                          "--flash-attn", "on"], {}),
    ("F32 weights", ["--model", "F32"], {}),
    ("F16 weights", ["--model", "F16"], {}),
    ("Q8_0 weights, repack off", ["--model", "Q8_0", "--no-repack"], {}),
    ("Q5_1 weights, FA on, F16 KV", ["--model", "Q5_1", "--flash-attn", "on"], {}),
    ("Q5_1 weights, FA on, F16 KV, long prompt", ["--model", "Q5_1", "--flash-attn", "on", "--long"], {}),
    ("Q5_1 weights, FA off, F16 KV", ["--model", "Q5_1", "--flash-attn", "off"], {}),
    ("Q5_1 weights, FA on, KV Q8_0", ["--model", "Q5_1", "--flash-attn", "on", "--kv-type", "q8_0"], {}),
    ("Q5_1 weights, FA on, KV Q8_0, long prompt",
     ["--model", "Q5_1", "--flash-attn", "on", "--kv-type", "q8_0", "--long"], {}),
    ("Q4_1 weights, FA on, KV Q8_0, long prompt",
     ["--model", "Q4_1", "--flash-attn", "on", "--kv-type", "q8_0", "--long"], {}),
]


def model_path(name: str) -> Path:
    if name == "Q4_K_M":
        return _common.GEMMA
    if name.endswith(".gguf"):
        return Path(name)
    return PROOF_MODELS / f"gemma-3-270m-{name}.gguf"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--only", default=None, help="with --all: only configurations whose label contains this")
    ap.add_argument("--model", default="Q4_K_M", help="Q4_K_M, F32, F16, Q8_0, Q5_1, Q4_1 or a .gguf path")
    ap.add_argument("--no-repack", action="store_true")
    ap.add_argument("--flash-attn", choices=sorted(FLASH), default="auto")
    ap.add_argument("--kv-type", choices=sorted(KV), default=None)
    ap.add_argument("--ubatch", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--long", action="store_true")
    ap.add_argument("--n", type=int, default=9, help="positions compared (a batch of k + 1)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not args.all:
        args.model = model_path(args.model)
        _common.require_model(args.model)
        print(json.dumps(measure(args)))
        return 0
    rows = []
    for label, argv, env in CONFIGS:
        if args.only and args.only not in label:
            continue
        path = model_path(argv[1])
        if not path.is_file():
            print(f"| {label} | (missing {path.name}; see docs/proof.md to make it) |")
            continue
        proc = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, check=False,
                              env={**os.environ, **env})
        if proc.returncode != 0:
            print(f"| {label} | failed: {proc.stderr.strip().splitlines()[-1:]} |")
            continue
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append({"config": label, **res})
        cells = " | ".join(
            f"{'identical' if v['bit_identical'] else 'differs'} ({v['max_abs_diff']:.2g})"
            for k, v in res.items() if k.startswith("batch")
        )
        print(f"| {label} | {res['prompt_tokens']} | {cells} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
