"""Tandem's memory vs llama.cpp's own: nothing of size n_ctx × n_vocab, RSS within 300 MB.

With n_ctx 8192 and Gemma 3's 262,144-token vocabulary, an n_ctx × n_vocab float32
buffer (what ``Llama(draft_model=…)`` keeps for its scores) would be 8 GiB. This script
runs, each in a fresh process and with the same model, context size and threads:

1. ``baseline``: Python with ``app.engine`` and ``llama_cpp`` imported, no model — the
   interpreter's own share;
2. Tandem, one context: the target with prompt lookup (no draft model), one reply;
3. llama.cpp, one context: ``llama-speculative-simple --spec-type ngram-simple`` (its
   n-gram drafter; no draft model), same prompt and ``-n``;
4. Tandem, two contexts: the target with a draft model (default: itself);
5. llama.cpp, two contexts: ``llama-speculative-simple --spec-type draft-simple -md …``.

For each it reports peak RSS (``ru_maxrss`` from ``wait4``), and for Tandem also the
peak of virtual memory (``VmPeak``: an untouched 8 GiB allocation would show here even
where RSS does not), the Python-side peak allocation traced by ``tracemalloc`` (NumPy
arrays included), and llama.cpp's own logged buffers (model, KV, compute, output; the
output buffer holds logits for at most k + 1 positions). Goal: Tandem's peak
RSS within 300 MB of llama.cpp's for the same work.

Usage:
    .venv/bin/python bench/memory.py                  # Gemma 3 270M, n_ctx 8192
    .venv/bin/python bench/memory.py --n-ctx 8192 --n-predict 64 --threads 2 --json

Needs ``bench/build_llama_tools.sh`` first. Results: stdout and bench/out/memory-*.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import _common as C

VOCAB_BYTES_PER_ROW = 4  # float32 logits
_KEEP: list[Any] = []


def _status() -> dict[str, int]:
    """VmRSS, VmHWM, VmPeak, VmSize of this process, bytes (Linux /proc)."""
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, val = line.partition(":")
            if key in ("VmRSS", "VmHWM", "VmPeak", "VmSize"):
                out[key] = int(val.split()[0]) * 1024
    except OSError:
        pass
    return out


def child_baseline() -> dict[str, Any]:
    import app.engine.measure.bench  # noqa: F401  (what the app imports before any model)
    from app.engine.llama import lib

    lib()
    return {"status": _status()}


def child_tandem(args: argparse.Namespace) -> dict[str, Any]:
    """Load, generate one reply, report memory. Runs inside the measured child."""
    import ctypes
    import tracemalloc

    tracemalloc.start()
    from app.engine.chat import tokenize_plain
    from app.engine.llama import lib
    from app.engine.measure.bench import generate_once
    from app.engine.measure.prompts import PreparedPrompt
    from app.engine.session import Session, SessionConfig
    from app.options import SamplingParams, SpeculationConfig

    L = lib()
    captured: list[str] = []

    # Replace the engine's log callback for this measurement: keep every line (info and
    # debug included) to read llama.cpp's buffer sizes.
    @L.llama_log_callback  # type: ignore[misc]
    def _log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        if text:
            captured.append(text.decode("utf-8", "replace"))

    L.llama_log_set(_log, ctypes.c_void_p(0))
    _KEEP.append(_log)  # the callback must outlive every native call that logs
    after_import = _status()
    draft = Path(args.draft) if args.mode == "draft-model" else None
    config = SessionConfig(target_path=Path(args.model), draft_path=draft, n_ctx=args.n_ctx,
                           n_threads=args.threads)
    with Session.open(config) as session:
        after_load = _status()
        n_vocab = session.target.n_vocab
        prompt = PreparedPrompt(tuple(tokenize_plain(session.target, args.prompt_text)))
        spec = SpeculationConfig(mode=args.mode, draft_max=args.k)
        fin = generate_once(session, prompt, SamplingParams(temperature=0.0, max_tokens=args.n_predict), spec)
        after_gen = _status()
        _, traced_peak = tracemalloc.get_traced_memory()
        stats = fin.stats
    return {
        "n_vocab": n_vocab,
        "n_ctx": args.n_ctx,
        "emitted": stats.emitted,
        "acceptance_rate": stats.acceptance_rate,
        "after_import": after_import,
        "after_load": after_load,
        "after_generate": after_gen,
        "tracemalloc_peak": traced_peak,
        "buffers_mib": C.parse_buffers("".join(captured)),
    }


def run_tandem(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", "tandem", "--mode", mode,
            "--model", str(args.model), "--draft", str(args.draft), "--n-ctx", str(args.n_ctx),
            "--threads", str(args.threads), "--n-predict", str(args.n_predict), "--k", str(args.k),
            "--prompt-text", args.prompt_text]
    res = C.run_child(argv)
    if res.returncode != 0:
        raise RuntimeError(f"tandem child failed: {res.stderr[-3000:]}")
    data = json.loads(res.stdout.strip().splitlines()[-1])
    data["max_rss"] = res.max_rss
    return data


def run_baseline() -> dict[str, Any]:
    res = C.run_child([sys.executable, __file__, "--child", "baseline"])
    if res.returncode != 0:
        raise RuntimeError(f"baseline child failed: {res.stderr[-3000:]}")
    data = json.loads(res.stdout.strip().splitlines()[-1])
    data["max_rss"] = res.max_rss
    return data


def run_llama(args: argparse.Namespace, spec_type: str) -> dict[str, Any]:
    argv = [str(C.tool("llama-speculative-simple", args.tools)), "-m", str(args.model),
            "--spec-type", spec_type, "--spec-draft-n-max", str(args.k),
            "--spec-draft-n-min", "0", "--spec-draft-p-min", "0",
            "-p", args.prompt_text, "-n", str(args.n_predict), "-c", str(args.n_ctx),
            "-t", str(args.threads), "--temp", "0", "-lv", "4"]  # -lv 4: buffer sizes
    if spec_type == "draft-simple":
        argv += ["-md", str(args.draft), "-td", str(args.threads)]
    else:
        argv += ["--spec-ngram-simple-size-m", str(args.k)]
    res = C.run_child(argv)
    if res.returncode != 0:
        raise RuntimeError(f"llama-speculative-simple failed: {res.stderr[-3000:]}")
    return {"max_rss": res.max_rss, "buffers_mib": C.parse_buffers(res.stderr + res.stdout),
            "spec_type": spec_type}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=C.GEMMA)
    ap.add_argument("--draft", type=Path, default=None, help="default: the target itself")
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-text", default=None)
    ap.add_argument("--tools", type=Path, default=C.TOOLS)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=("tandem", "baseline"), help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="prompt-lookup", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.draft = args.draft or args.model
    if args.prompt_text is None:
        from app.engine.measure.prompts import load_prompts

        args.prompt_text = load_prompts("builtin:code")[0].plain

    if args.child == "baseline":
        print(json.dumps(child_baseline()))
        return 0
    if args.child == "tandem":
        print(json.dumps(child_tandem(args)))
        return 0

    C.require_model(args.model)
    C.require_model(args.draft)
    C.tool("llama-speculative-simple", args.tools)
    before = C.machine_note()
    base = run_baseline()
    t1 = run_tandem(args, "prompt-lookup")
    l1 = run_llama(args, "ngram-simple")
    t2 = run_tandem(args, "draft-model")
    l2 = run_llama(args, "draft-simple")
    n_vocab = t1["n_vocab"]
    full = args.n_ctx * n_vocab * VOCAB_BYTES_PER_ROW
    result: dict[str, Any] = {
        "model": str(args.model), "draft": str(args.draft), "n_ctx": args.n_ctx,
        "n_vocab": n_vocab, "threads": args.threads, "n_predict": args.n_predict, "k": args.k,
        "n_ctx_x_n_vocab_f32_bytes": full,
        "baseline": base,
        "one_context": {"tandem": t1, "llama": l1, "rss_difference": t1["max_rss"] - l1["max_rss"]},
        "two_contexts": {"tandem": t2, "llama": l2, "rss_difference": t2["max_rss"] - l2["max_rss"]},
        "machine_before": before, "machine_after": C.machine_note(),
    }
    result["nothing_n_ctx_x_n_vocab"] = all(
        t["after_generate"].get("VmPeak", 0) < full and t["tracemalloc_peak"] < full // 8
        for t in (t1, t2)
    )
    return C.report("memory", result, args.json, _print)


def _mb(b: float) -> str:
    return f"{b / C.MiB:8.1f} MiB"


def _print(r: dict[str, Any]) -> None:
    print(f"model {r['model']}  n_ctx {r['n_ctx']}  n_vocab {r['n_vocab']}  threads {r['threads']}  "
          f"n_predict {r['n_predict']}  k {r['k']}")
    print(f"n_ctx × n_vocab × 4 B = {_mb(r['n_ctx_x_n_vocab_f32_bytes'])} (what must NOT be allocated)")
    print(f"Python baseline (app.engine + llama_cpp imported, no model): peak RSS {_mb(r['baseline']['max_rss'])}")
    for key, title in (("one_context", "one context (prompt lookup / ngram-simple)"),
                       ("two_contexts", "two contexts (draft model = draft-simple)")):
        t, lc = r[key]["tandem"], r[key]["llama"]
        print(f"\n{title}")
        print(f"  Tandem     peak RSS {_mb(t['max_rss'])}  VmPeak {_mb(t['after_generate'].get('VmPeak', 0))}  "
              f"tracemalloc peak {_mb(t['tracemalloc_peak'])}")
        print(f"             llama.cpp buffers (MiB): {_fmt_buf(t['buffers_mib'])}")
        print(f"  llama.cpp  peak RSS {_mb(lc['max_rss'])}")
        print(f"             llama.cpp buffers (MiB): {_fmt_buf(lc['buffers_mib'])}")
        d = r[key]["rss_difference"]
        print(f"  difference Tandem − llama.cpp: {d / C.MiB:+.1f} MiB  (goal ≤ 300 MB)")
    print(f"\nnothing of size n_ctx × n_vocab allocated: {r['nothing_n_ctx_x_n_vocab']}")
    if r["machine_before"]["disturbed"]:
        print(f"(machine busy: load {r['machine_before']['loadavg']}; RSS figures are not timing "
              "figures and are not disturbed by load)")


def _fmt_buf(b: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in b.items())


if __name__ == "__main__":
    raise SystemExit(main())
