"""Decode tok/s through the local API vs in process, on the same prompts (goal ≥ 0.95).

In process: the prompts run as completions of a :class:`~app.chat.service.ChatService`
in this process, as the window runs its replies. Through the API: the same prompts,
streamed from ``python -m app serve`` (a child process with its own copy of the model)
with httpx. Runs alternate (in process, API, in process, API…) so that a change in the
machine's load hits both. Greedy, one seed, the same drafter and k on both sides.

Two figures per run:

* consumer decode tok/s: (tokens − first chunk's) / (time of the last text − time of
  the first text), timed where the text arrives — the events of the job in process, the
  SSE chunks through HTTP; the API's token counts per chunk come from the engine's own
  (``usage.completion_tokens`` and, for the first chunk, 1 token per chunk since
  ``batch_s=0`` sends each round's text as it comes: the first chunk is the first
  round's sample);
* engine decode tok/s: what the engine measured (``SpecStats.decode_tps`` in process,
  ``timings.predicted_per_second`` through the API): whether serving slows the engine.

Medians per side and their ratios (API / in process) are printed and written to
bench/out/. Run on a quiet machine:

    .venv/bin/python bench/api_vs_inprocess.py --prompt-lookup --max-tokens 128 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from _common import GEMMA, machine_note, median, report, require_model
from _serve import ServeChild

from app.chat.events import JobDone, ReplyStreamed
from app.chat.service import ChatService
from app.engine.measure.prompts import load_prompts
from app.engine.session import SessionConfig
from app.options import SamplingParams, SpecMode, SpeculationConfig


def in_process(service: ChatService, prompt: str, sampling: SamplingParams,
               spec: SpeculationConfig) -> dict[str, Any]:
    job = service.complete(prompt, sampling, spec, origin="bench", batch_s=0.0)
    first: tuple[float, int] | None = None
    last: tuple[float, int] | None = None
    result = None
    for ev in job.events():
        if isinstance(ev, ReplyStreamed) and ev.deltas:
            now = time.perf_counter()
            if first is None:
                first = (now, ev.deltas[-1].n_tokens)
            last = (now, ev.deltas[-1].n_tokens)
        elif isinstance(ev, JobDone):
            result = ev.value
    assert result is not None and first is not None and last is not None
    stats = result.stats
    span = last[0] - first[0]
    return {"tokens": stats.emitted,
            "consumer_tps": (stats.emitted - first[1]) / span if span > 0 else None,
            "engine_tps": stats.decode_tps}


def through_api(client: httpx.Client, base: str, model: str, prompt: str,
                sampling: SamplingParams, spec: SpeculationConfig) -> dict[str, Any]:
    body = {"model": model, "prompt": prompt, "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature, "seed": sampling.seed,
            "stop": list(sampling.stop) or None, "stream": True,
            "stream_options": {"include_usage": True},
            "speculation": spec.model_dump(mode="json")}
    t_first = t_last = None
    usage = timings = None
    with client.stream("POST", base + "/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data["choices"] and data["choices"][0]["text"]:
                now = time.perf_counter()
                t_first = t_first or now
                t_last = now
            if data.get("usage"):
                usage, timings = data["usage"], data["timings"]
    assert usage is not None and timings is not None and t_first is not None
    n = usage["completion_tokens"]
    span = (t_last or t_first) - t_first
    return {"tokens": n, "consumer_tps": (n - 1) / span if span > 0 else None,
            "engine_tps": timings["predicted_per_second"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=GEMMA)
    ap.add_argument("--prompt-lookup", action="store_true", help="draft by prompt lookup")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--prompts", default="builtin:code")
    ap.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3, help="runs per prompt and side (3)")
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    model = require_model(args.model)
    mode = SpecMode.PROMPT_LOOKUP if args.prompt_lookup else SpecMode.OFF
    spec = SpeculationConfig(mode=mode, draft_max=args.k)
    prompts = load_prompts(args.prompts)[: args.limit]
    before = machine_note()

    threads = [] if args.threads is None else ["--threads", str(args.threads)]
    child = ServeChild(model, ["--n-ctx", str(args.n_ctx), *threads,
                               *(["--prompt-lookup"] if args.prompt_lookup else [])])
    service = ChatService()
    rows: list[dict[str, Any]] = []
    try:
        service.load(SessionConfig(target_path=model, n_ctx=args.n_ctx,
                                   n_threads=args.threads)).result()
        with httpx.Client() as client:
            mid = client.get(child.base_url + "/models").json()["data"][0]["id"]
            for p in prompts:
                sampling = SamplingParams(temperature=0.0, seed=1234, max_tokens=args.max_tokens,
                                          stop=p.stop)
                # one untimed run each: the first generation maps weights and builds graphs
                in_process(service, p.plain, sampling, spec)
                through_api(client, child.base_url, mid, p.plain, sampling, spec)
                for i in range(args.repeat):
                    a = in_process(service, p.plain, sampling, spec)
                    b = through_api(client, child.base_url, mid, p.plain, sampling, spec)
                    rows.append({"prompt": p.name, "run": i, "in_process": a, "api": b})
                    print(f"{p.name} #{i}: in process {a['consumer_tps'] or 0:.1f} tok/s, "
                          f"API {b['consumer_tps'] or 0:.1f} tok/s", file=sys.stderr)
    finally:
        service.shutdown()
        child.stop()

    def med(side: str, key: str) -> float | None:
        return median([r[side][key] for r in rows if r[side][key] is not None])

    summary = {}
    for key in ("consumer_tps", "engine_tps"):
        a, b = med("in_process", key), med("api", key)
        summary[key] = {"in_process": a, "api": b, "ratio": b / a if a and b else None}
    data = {"model": model.name, "speculation": spec.model_dump(mode="json"),
            "prompts": args.prompts, "max_tokens": args.max_tokens, "repeat": args.repeat,
            "summary": summary, "goal": 0.95, "machine_before": before,
            "machine_after": machine_note(), "runs": rows}

    def text(d: dict[str, Any]) -> None:
        for key, label in (("consumer_tps", "decode tok/s where the text arrives"),
                           ("engine_tps", "decode tok/s the engine measured")):
            s = d["summary"][key]
            ratio = "—" if s["ratio"] is None else f"{s['ratio']:.3f}"
            print(f"{label}: in process {s['in_process'] or 0:.1f}, API {s['api'] or 0:.1f}, "
                  f"API / in process = {ratio} (goal ≥ 0.95)")
        if d["machine_before"]["disturbed"] or d["machine_after"]["disturbed"]:
            print("note: the machine was busy (load average); these timings are disturbed")

    return report("api_vs_inprocess", data, args.json, text)


if __name__ == "__main__":
    raise SystemExit(main())
