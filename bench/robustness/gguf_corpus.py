"""Malformed and unexpected GGUFs against ``models inspect`` and ``generate``: counts.

Writes a corpus of tiny llama GGUFs (generated here, nothing committed) and runs
``python -m app models inspect --json FILE`` and ``python -m app generate --model FILE``
on each in a fresh process, as a user would. Counted per file: crashes (death by a
signal), Python tracebacks, hangs (past ``--timeout``), and whether inspect and generate
agree (inspect says the file loads exactly when generate produces a reply).

The corpus (about 230 files):

* ``types/``: well-formed files with one tensor role (token_embd, output_norm, output,
  attn_norm, attn_q/k/v, attn_output, ffn_norm, ffn_gate/up/down) stored in another
  GGML type (F16, BF16, F64, I8, I16, I32, I64, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1): 144
  files; llama.cpp 0c1e57098 aborts or segfaults at the first decode on many of them;
* ``values/``: well-formed files whose hyperparameters or tokenizer keys are absurd
  (block_count 0 or 600, head counts that do not divide, unknown architecture or
  tokenizer, BOS out of range, rope scaling "bogus", missing or misshapen tensors…);
* ``bytes/``: a good file truncated at many offsets and with bytes flipped in its header.

Usage::

    .venv/bin/python bench/robustness/gguf_corpus.py [--jobs 2] [--limit N] [--json]

Writes ``bench/out/robustness-gguf.json``; prints one line per failure and a summary.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
from gguf import GGUFWriter

from bench.robustness._run import OUT, run_app
from tests.synthetic import add_typed_tensor, tiny_vocab, write_tiny_llama

ROLES = ["token_embd.weight", "output_norm.weight", "output.weight", "attn_norm.weight",
         "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
         "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"]
TYPES = ["F16", "BF16", "F64", "I8", "I16", "I32", "I64", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]

N_VOCAB, N_EMBD, N_FF, N_HEAD = 512, 64, 128, 4


def write_model(path: Path, *, kv: dict[str, Any] | None = None, drop: set[str] = frozenset(),
                tensors: dict[str, np.ndarray | None] | None = None, arch: str = "llama") -> Path:
    """A tiny llama GGUF written key by key, so any key or tensor can be changed.

    ``kv``: key → value (int → UINT32 unless it needs 64 bits, float → FLOAT32, str, bool,
    list → array) replacing or adding keys; ``drop``: keys left out; ``tensors``: name →
    array replacing a tensor (None drops it).
    """
    rng = np.random.default_rng(0)
    tokens, scores, types = tiny_vocab(N_VOCAB)
    base: dict[str, Any] = {
        "general.name": "corpus",
        f"{arch}.context_length": 2048, f"{arch}.embedding_length": N_EMBD, f"{arch}.block_count": 2,
        f"{arch}.feed_forward_length": N_FF, f"{arch}.attention.head_count": N_HEAD,
        f"{arch}.attention.head_count_kv": N_HEAD, f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{arch}.rope.dimension_count": N_EMBD // N_HEAD, "general.file_type": 0,
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores, "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.add_bos_token": True,
    }
    base.update(kv or {})
    w = GGUFWriter(str(path), arch)
    for key, value in base.items():
        if key in drop or key == "general.architecture":
            continue
        _add_kv(w, key, value)

    def t(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3 / np.sqrt(shape[-1])).astype(np.float32)

    all_tensors: dict[str, np.ndarray | None] = {
        "token_embd.weight": t(N_VOCAB, N_EMBD), "output_norm.weight": np.ones(N_EMBD, np.float32),
        "output.weight": t(N_VOCAB, N_EMBD),
    }
    for i in range(2):
        p = f"blk.{i}."
        all_tensors.update({
            p + "attn_norm.weight": np.ones(N_EMBD, np.float32), p + "attn_q.weight": t(N_EMBD, N_EMBD),
            p + "attn_k.weight": t(N_EMBD, N_EMBD), p + "attn_v.weight": t(N_EMBD, N_EMBD),
            p + "attn_output.weight": t(N_EMBD, N_EMBD), p + "ffn_norm.weight": np.ones(N_EMBD, np.float32),
            p + "ffn_gate.weight": t(N_FF, N_EMBD), p + "ffn_up.weight": t(N_FF, N_EMBD),
            p + "ffn_down.weight": t(N_EMBD, N_FF),
        })
    all_tensors.update(tensors or {})
    for name, arr in all_tensors.items():
        if arr is not None:
            add_typed_tensor(w, name, arr, None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _add_kv(w: GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        if value < 0:
            w.add_int32(key, value) if value >= -(2**31) else w.add_int64(key, value)
        else:
            w.add_uint32(key, value) if value < 2**32 else w.add_uint64(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, list):
        w.add_array(key, value)
    else:
        w.add_key_value(key, value[0], value[1])  # (value, GGUFValueType)


def value_cases() -> dict[str, dict[str, Any]]:
    """Well-formed files with values llama.cpp may refuse or assert on."""
    a = "llama"
    cases: dict[str, dict[str, Any]] = {
        "block-count-0": {"kv": {f"{a}.block_count": 0}},
        "block-count-600": {"kv": {f"{a}.block_count": 600}},
        "block-count-huge": {"kv": {f"{a}.block_count": 2**31}},
        "embd-0": {"kv": {f"{a}.embedding_length": 0}},
        "embd-odd": {"kv": {f"{a}.embedding_length": 63}},
        "heads-0": {"kv": {f"{a}.attention.head_count": 0}},
        "heads-not-dividing": {"kv": {f"{a}.attention.head_count": 3}},
        "kv-heads-0": {"kv": {f"{a}.attention.head_count_kv": 0}},
        "kv-heads-5": {"kv": {f"{a}.attention.head_count_kv": 5}},
        "ctx-0": {"kv": {f"{a}.context_length": 0}},
        "ctx-huge": {"kv": {f"{a}.context_length": 2**40}},
        "rope-dim-0": {"kv": {f"{a}.rope.dimension_count": 0}},
        "rope-dim-1000": {"kv": {f"{a}.rope.dimension_count": 1000}},
        "rope-scaling-bogus": {"kv": {f"{a}.rope.scaling.type": "bogus"}},
        "ff-0": {"kv": {f"{a}.feed_forward_length": 0}},
        "eps-negative": {"kv": {f"{a}.attention.layer_norm_rms_epsilon": -1.0}},
        "eps-nan": {"kv": {f"{a}.attention.layer_norm_rms_epsilon": float("nan")}},
        "experts-used-over-count": {"kv": {f"{a}.expert_count": 4, f"{a}.expert_used_count": 8}},
        "tokenizer-gpt2-no-merges": {"kv": {"tokenizer.ggml.model": "gpt2"}},
        "tokenizer-bert": {"kv": {"tokenizer.ggml.model": "bert"}},
        "tokenizer-unknown": {"kv": {"tokenizer.ggml.model": "nonesuch"}},
        "tokenizer-none": {"kv": {"tokenizer.ggml.model": "none"}},
        "no-tokenizer": {"drop": {"tokenizer.ggml.model"}},
        "no-tokens": {"drop": {"tokenizer.ggml.tokens"}},
        "empty-token-list": {"kv": {"tokenizer.ggml.tokens": [], "tokenizer.ggml.scores": [],
                                    "tokenizer.ggml.token_type": []}},
        "scores-short": {"kv": {"tokenizer.ggml.scores": [0.0] * 10}},
        "types-short": {"kv": {"tokenizer.ggml.token_type": [1] * 10}},
        "bos-out-of-range": {"kv": {"tokenizer.ggml.bos_token_id": 10**6}},
        "eos-out-of-range": {"kv": {"tokenizer.ggml.eos_token_id": 10**6}},
        "alignment-0": {"kv": {"general.alignment": 0}},
        "alignment-3": {"kv": {"general.alignment": 3}},
        "split-count-5": {"kv": {"split.count": 5}},
        "no-block-count": {"drop": {f"{a}.block_count"}},
        "no-embedding-length": {"drop": {f"{a}.embedding_length"}},
        "missing-output-norm": {"tensors": {"output_norm.weight": None}},
        "missing-attn-q": {"tensors": {"blk.0.attn_q.weight": None}},
        "attn-q-wrong-shape": {"tensors": {"blk.0.attn_q.weight": np.zeros((32, N_EMBD), np.float32)}},
        "token-embd-wrong-shape": {"tensors": {"token_embd.weight": np.zeros((100, N_EMBD), np.float32)}},
        "extra-unknown-tensor": {"tensors": {"blk.0.mystery.weight": np.zeros(8, np.float32)}},
        "norm-nan": {"tensors": {"output_norm.weight": np.full(N_EMBD, np.nan, np.float32)}},
        "weights-inf": {"tensors": {"output.weight": np.full((N_VOCAB, N_EMBD), np.inf, np.float32)}},
        "chat-template-huge-center": {"kv": {"tokenizer.chat_template": "{{ 'x'|center(5000000000) }}"}},
    }
    return cases


def byte_cases(good: bytes) -> dict[str, bytes]:
    """A good file cut short at many offsets and with header bytes flipped."""
    out: dict[str, bytes] = {}
    header_end = good.index(b"token_embd.weight") + 200  # inside the tensor infos
    cuts = sorted({0, 3, 4, 7, 8, 15, 16, 23, 24, 40, 100, 1000, 5000, header_end // 2, header_end - 1,
                   header_end, header_end + 1, len(good) // 2, len(good) - 1000, len(good) - 1})
    for c in cuts:
        out[f"truncated-at-{c}"] = good[:c]
    rng = random.Random(12)
    for i in range(25):
        b = bytearray(good)
        pos = rng.randrange(4, header_end)
        b[pos] ^= 1 << rng.randrange(8)
        out[f"header-bitflip-{i}-at-{pos}"] = bytes(b)
    for value, name in ((2**63, "u64-max-ish"), (0, "zero")):
        for field, off in (("tensor-count", 8), ("kv-count", 16), ("first-key-length", 24)):
            b = bytearray(good)
            b[off:off + 8] = value.to_bytes(8, "little")
            out[f"{field}-{name}"] = bytes(b)
    out["version-1"] = good[:4] + (1).to_bytes(4, "little") + good[8:]
    out["version-99"] = good[:4] + (99).to_bytes(4, "little") + good[8:]
    out["wrong-magic"] = b"GGML" + good[4:]
    return out


def build_corpus(root: Path) -> list[tuple[str, str, Path]]:
    """(group, case, path) of every file, written under ``root``."""
    files: list[tuple[str, str, Path]] = []
    (root / "types").mkdir(parents=True)
    for role in ROLES:
        for kind in TYPES:
            p = root / "types" / f"{kind}-{role.removesuffix('.weight')}.gguf"
            try:
                write_tiny_llama(p, tensor_types={role: kind})
            except Exception as exc:  # a shape the gguf package cannot quantize
                print(f"skip {p.name}: {exc}", file=sys.stderr)
                continue
            files.append(("types", p.stem, p))
    (root / "values").mkdir()
    for name, spec in value_cases().items():
        p = root / "values" / f"{name}.gguf"
        write_model(p, **spec)
        files.append(("values", name, p))
    (root / "bytes").mkdir()
    good = write_model(root / "good.gguf").read_bytes()
    for name, blob in byte_cases(good).items():
        p = root / "bytes" / f"{name}.gguf"
        p.write_bytes(blob)
        files.append(("bytes", name, p))
    return files


def check(group: str, name: str, path: Path, home: Path, timeout: float) -> dict[str, Any]:
    inspect = run_app(["models", "inspect", "--json", str(path)], home=home, timeout=timeout)
    loads: bool | None = None
    try:
        loads = json.loads(inspect.stdout).get("loads")
    except ValueError:
        pass
    generate = run_app(["generate", "--model", str(path), "--max-tokens", "2", "--n-ctx", "64", "hi"],
                       home=home, timeout=timeout)
    refused_as = ""
    if generate.returncode == 2:
        refused_as = generate.stderr.strip().splitlines()[-1] if generate.stderr.strip() else ""
    return {
        "group": group, "case": name,
        "crashed": inspect.crashed or generate.crashed,
        "traceback": inspect.traceback or generate.traceback,
        "hung": inspect.hung or generate.hung,
        "inspect_rc": inspect.returncode, "inspect_loads": loads,
        "generate_rc": generate.returncode,
        "agree": (loads is True) == (generate.returncode == 0),
        "probe_caught_a_crash": "crashed" in refused_as or "cannot use this file" in refused_as,
        "message": refused_as[:300],
        "inspect": inspect.brief() if inspect.crashed or inspect.traceback or inspect.hung else None,
        "generate": generate.brief() if generate.crashed or generate.traceback or generate.hung else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="files checked at once (2)")
    ap.add_argument("--limit", type=int, default=None,
                    help="check only N files spread evenly over the corpus (dry run)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a process counts as hung")
    ap.add_argument("--json", action="store_true", help="print the whole result as JSON")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tandem-gguf-corpus-"))
    try:
        files = build_corpus(work / "corpus")
        if args.limit and args.limit < len(files):
            step = len(files) / args.limit  # every group is represented
            files = [files[int(i * step)] for i in range(args.limit)]
        homes = [work / f"home-{i}" for i in range(len(files))]  # no verdict shared by two files
        def one(fh: tuple[tuple[str, str, Path], Path]) -> dict[str, Any]:
            row = check(*fh[0], fh[1], args.timeout)
            flags = [k for k in ("crashed", "traceback", "hung") if row[k]] + ([] if row["agree"] else ["disagree"])
            print(f"{row['group']}/{row['case']}: generate rc {row['generate_rc']} {' '.join(flags)}",
                  file=sys.stderr, flush=True)
            return row

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            rows = list(pool.map(one, zip(files, homes)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {
        "files": len(rows),
        "by_group": {g: sum(1 for r in rows if r["group"] == g) for g in ("types", "values", "bytes")},
        "crashes": sum(r["crashed"] for r in rows),
        "tracebacks": sum(r["traceback"] for r in rows),
        "hangs": sum(r["hung"] for r in rows),
        "inspect_generate_disagree": sum(not r["agree"] for r in rows),
        "load": sum(r["generate_rc"] == 0 for r in rows),
        "refused": sum(r["generate_rc"] == 2 for r in rows),
        "crashes_caught_by_the_probe": sum(r["probe_caught_a_crash"] for r in rows),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "robustness-gguf.json").write_text(json.dumps({"summary": summary, "files": rows}, indent=1))
    for r in rows:
        if r["crashed"] or r["traceback"] or r["hung"] or not r["agree"]:
            print(f"FAIL {r['group']}/{r['case']}: rc inspect {r['inspect_rc']} (loads {r['inspect_loads']}),"
                  f" generate {r['generate_rc']}; {r['message']}")
    print(json.dumps(summary if not args.json else {"summary": summary, "files": rows}, indent=1))
    return 0 if not (summary["crashes"] or summary["tracebacks"] or summary["hangs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
