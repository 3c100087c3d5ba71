"""Decode speed when other programs use the CPU: Tandem's default threads against fixed
thread counts, quiet and with busy processes beside it.

Each configuration runs in a process of its own that loads the model while the machine is
quiet (as an app opened before the browser got busy), then this script starts the busy
processes (``python -c "while True: pass"``, bounded by a timeout), and the child decodes
``--replies`` plain replies (speculation off, greedy) of ``--max-tokens`` tokens; the
figure is the median decode tok/s. The busy processes are stopped before the next
configuration starts. Configurations: ``default`` (threads left to Tandem: the free
cores at load, then the governor between rounds), and each of ``--fixed``.

What to read from it (2-core machine): the share of its quiet speed the default keeps
with one busy process (the threshold set for it is 80 %), and how far the default's quiet
speed is from the best fixed count's (within 3 %).

Usage:
    .venv/bin/python bench/thread_load.py                       # Gemma 3 270M, busy 0,1,2
    .venv/bin/python bench/thread_load.py --model M.gguf --busy 0,1 --fixed 1,2 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as C

BUSY_LOOP = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end: pass\n"


def child(args: argparse.Namespace) -> int:
    """Load quietly, say "ready", wait for "go", decode, print one JSON line."""
    from app.engine.cpu import measure_other_cores
    from app.engine.reply import ReplyRecord
    from app.engine.session import Session, SessionConfig
    from app.options import SamplingParams, SpeculationConfig

    threads = None if args.threads == "default" else int(args.threads)
    session = Session.open(SessionConfig(target_path=args.model, n_threads=threads, n_ctx=1024))
    prompt = session.target.tokenize("Once upon a time, in a small village by the sea,",
                                     add_special=True, parse_special=False)
    sampling = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    print("ready", flush=True)
    sys.stdin.readline()
    time.sleep(0.5)  # let the busy processes get going
    other = measure_other_cores(0.5)
    rates, threads_seen = [], []
    for _ in range(args.replies + 1):  # the first builds the graphs: not counted
        session.reset_cache()
        for ev in session.generate(prompt, sampling, SpeculationConfig()):
            if isinstance(ev, ReplyRecord):
                rates.append(ev.stats.decode_tps)
                threads_seen.append(ev.stats.n_threads)
    session.close()
    print(json.dumps({"rates": rates[1:], "threads": threads_seen[1:],
                      "other_cores_before": other}), flush=True)
    return 0


def run_config(args: argparse.Namespace, threads: str, busy: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--threads", threads, "--model", str(args.model),
           "--replies", str(args.replies), "--max-tokens", str(args.max_tokens)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"the child did not load: {line!r}")
        hogs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(limit=args.limit)])
                for _ in range(busy)]
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out = json.loads(proc.stdout.readline())
        proc.wait(timeout=60)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        if proc.poll() is None:
            proc.kill()
    rates = out["rates"]
    return {"threads": threads, "busy": busy, "decode_tps_median": statistics.median(rates),
            "decode_tps": rates, "threads_used": out["threads"],
            "other_cores_before": out["other_cores_before"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/thread_load.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=C.GEMMA)
    ap.add_argument("--busy", default="0,1,2", help="busy processes beside Tandem, e.g. 0,1,2")
    ap.add_argument("--fixed", default="1,2", help="fixed thread counts to compare, e.g. 1,2")
    ap.add_argument("--replies", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--limit", type=float, default=120.0,
                    help="seconds after which a busy process stops by itself")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", default="default", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    C.require_model(args.model)
    busy_levels = C.value_list(ap, "--busy", args.busy, int)
    configs = ["default", *[str(n) for n in C.value_list(ap, "--fixed", args.fixed, int)]]
    rows = [run_config(args, threads, busy) for busy in busy_levels for threads in configs]
    quiet = {r["threads"]: r["decode_tps_median"] for r in rows if r["busy"] == 0}
    for r in rows:
        base = quiet.get(r["threads"])
        r["of_own_quiet"] = r["decode_tps_median"] / base if base else None
        r["of_default_quiet"] = (r["decode_tps_median"] / quiet["default"]
                                 if quiet.get("default") else None)
    # ggml's barrier is OpenMP's in this build: its waiting policy changes every figure
    omp_env = {k: v for k, v in sorted(os.environ.items())
               if k.startswith(("OMP_", "GOMP_", "KMP_"))}
    out = {"model": args.model.name, "replies": args.replies, "max_tokens": args.max_tokens,
           "cores": C.machine_note()["cores"], "openmp_env": omp_env, "rows": rows}

    def text(data: dict[str, Any]) -> None:
        print(f"{data['model']}, {data['replies']} replies of {data['max_tokens']} tokens, "
              f"plain decoding, {data['cores']} cores")
        if data["openmp_env"]:
            print("OpenMP settings: " + " ".join(f"{k}={v}" for k, v in data["openmp_env"].items()))
        print(f"{'busy':>4} {'threads':>8} {'tok/s':>7} {'÷ own quiet':>11} "
              f"{'÷ default quiet':>15} {'threads used':>13}")
        for r in data["rows"]:
            used = sorted(set(r["threads_used"]))
            own = r["of_own_quiet"]
            dq = r["of_default_quiet"]
            print(f"{r['busy']:>4} {r['threads']:>8} {r['decode_tps_median']:>7.1f} "
                  f"{own if own is not None else float('nan'):>11.2f} "
                  f"{dq if dq is not None else float('nan'):>15.2f} {str(used):>13}")

    return C.report("thread_load", out, args.json, text)


if __name__ == "__main__":
    raise SystemExit(main())
