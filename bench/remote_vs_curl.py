"""Tandem's client against ``curl`` on the same request to a remote server.

The question: does Tandem's remote client (``app.remote``: httpx, SSE parsing, events,
the ``/metrics`` scrapes around the request) slow down what the user sees? Both send the
same streamed chat request (same body bytes, greedy, fixed seed) to one llama-server,
alternating ``curl, Tandem, curl, Tandem…`` so that drifts in machine load fall on both,
and both are timed the same way: decode tok/s = (completion tokens − 1) / (time of the
last text chunk − time of the first), the chunks timestamped as their lines arrive
(curl's through a pipe read by this script, Tandem's inside its client). The server's
own ``timings.predicted_per_second`` of every run is reported next to them: when the
two sides' server rates differ as much as the client rates, the difference is the
machine, not the client; so each run's client rate is also divided by the server's own
rate of that run (the share of what the server produced that the client saw), and the
two sides' median shares are compared. Goal: Tandem ÷ curl ≥ 0.97 (medians).

    python bench/remote_vs_curl.py                   # starts llama-server itself
    python bench/remote_vs_curl.py --server http://127.0.0.1:8080 --runs 9

Writes bench/out/remote_vs_curl-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import REPO, OtherCpu, disturbed, disturbed_line, machine_note, median, report

from app.remote import RemoteClient, RemoteResult

PROMPT = ("Write a Python function that parses a CSV line into fields, handling quoted "
          "fields, and then write three unit tests for it.")


def curl_run(url: str, body: bytes) -> dict[str, Any]:
    """One streamed request with curl; lines timestamped as they arrive."""
    proc = subprocess.Popen(["curl", "-sN", "--no-buffer", "-X", "POST", url,
                             "-H", "Content-Type: application/json", "--data-binary", "@-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    t0 = time.perf_counter()
    proc.stdin.write(body)
    proc.stdin.close()
    first = last = None
    usage: dict[str, Any] = {}
    timings: dict[str, Any] = {}
    for raw in proc.stdout:
        line = raw.decode().strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[5:])
        usage = chunk.get("usage") or usage
        timings = chunk.get("timings") or timings
        choices = chunk.get("choices") or []
        if choices and (choices[0].get("delta") or {}).get("content"):
            now = time.perf_counter() - t0
            first = now if first is None else first
            last = now
    proc.wait()
    n = int(usage["completion_tokens"])
    assert first is not None and last is not None and last > first
    return {"n_tokens": n, "ttft_s": first, "decode_tps": (n - 1) / (last - first),
            "server_decode_tps": timings.get("predicted_per_second")}


def tandem_run(client: RemoteClient, model: str, max_tokens: int, seed: int) -> dict[str, Any]:
    """The same request through Tandem's client (with its /metrics scrapes around it)."""
    r = client.chat(model, [{"role": "user", "content": PROMPT}], max_tokens=max_tokens,
                    temperature=0.0, seed=seed)
    assert isinstance(r, RemoteResult)
    return {"n_tokens": r.n_tokens, "ttft_s": r.ttft, "decode_tps": r.decode_tps,
            "server_decode_tps": r.server_decode_tps}


def measure(base_url: str, runs: int, max_tokens: int, seed: int) -> dict[str, Any]:
    with RemoteClient(base_url) as client:
        info = client.identify()
        model = info.models[0].id
        # the body Tandem's client sends, byte for byte what curl sends too
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": PROMPT}],
                           "stream": True, "stream_options": {"include_usage": True},
                           "max_tokens": max_tokens, "temperature": 0.0,
                           "seed": seed}).encode()
        url = info.base_url + "/v1/chat/completions"
        curl_run(url, body)  # warm-up: the server's first request builds its graphs
        tandem_run(client, model, max_tokens, seed)
        before, cpu = machine_note(), OtherCpu()
        curl, tandem = [], []
        for i in range(runs):  # the order alternates within pairs: no side always goes first
            if i % 2:
                tandem.append(tandem_run(client, model, max_tokens, seed))
                curl.append(curl_run(url, body))
            else:
                curl.append(curl_run(url, body))
                tandem.append(tandem_run(client, model, max_tokens, seed))
        during = cpu.note()
        info = client.refresh_speculation(info)
    for r in (*curl, *tandem):  # what the client saw of what the server produced
        r["client_share"] = (r["decode_tps"] / r["server_decode_tps"]
                             if r["server_decode_tps"] else None)
    med = {side: {k: median([r[k] for r in rs if r[k] is not None])
                  for k in ("decode_tps", "ttft_s", "server_decode_tps", "client_share")}
           for side, rs in (("curl", curl), ("tandem", tandem))}
    ratio = med["tandem"]["decode_tps"] / med["curl"]["decode_tps"]
    server_ratio = (med["tandem"]["server_decode_tps"] / med["curl"]["server_decode_tps"]
                    if med["curl"]["server_decode_tps"] else None)
    return {"server": {"engine": info.engine.value, "version": info.version,
                       "method": info.speculation_method, "model": model},
            "runs": runs, "max_tokens": max_tokens, "seed": seed,
            "ratio_decode_tps": ratio, "ratio_server_decode_tps": server_ratio,
            "ratio_client_share": med["tandem"]["client_share"] / med["curl"]["client_share"],
            "medians": med, "curl_runs": curl, "tandem_runs": tandem,
            "machine_before": before, "machine_during": during,
            "disturbed": disturbed(before, during)}


def print_text(d: dict[str, Any]) -> None:
    m = d["medians"]
    print(f"{d['server']['engine']} {d['server']['version']} ({d['server']['method']}), "
          f"{d['runs']} runs each, {d['max_tokens']} tokens, medians:")
    for side in ("curl", "tandem"):
        print(f"  {side:6s} decode {m[side]['decode_tps']:.1f} tok/s · TTFT "
              f"{m[side]['ttft_s'] * 1000:.0f} ms · server's own {m[side]['server_decode_tps']:.1f} tok/s")
    print(f"Tandem ÷ curl, decode tok/s: {d['ratio_decode_tps']:.3f} (goal ≥ 0.97); "
          f"the server's own rates in the same runs: {d['ratio_server_decode_tps']:.3f}")
    print(f"client tok/s ÷ the server's own, per run (median): curl "
          f"{m['curl']['client_share']:.3f}, Tandem {m['tandem']['client_share']:.3f}; "
          f"ratio {d['ratio_client_share']:.3f}")
    if d["disturbed"]:
        print(disturbed_line(d["machine_before"], d["machine_during"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=None, help="base URL (default: start llama-server)")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1, help="llama-server -t when started here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if shutil.which("curl") is None:
        sys.exit("error: curl is not installed")
    if args.server:
        data = measure(args.server, args.runs, args.max_tokens, args.seed)
    else:
        sys.path.insert(0, str(REPO))
        from tests.remote.llama_server import SPEC_ARGS, LlamaServer, llama_server_binary

        exe = llama_server_binary()
        if exe is None:
            sys.exit("error: llama-server is not built: run bench/build_llama_tools.sh")
        model = REPO / ".cache/test-models/SmolLM2-135M-Instruct.Q4_1.gguf"
        with LlamaServer(exe, Path(model), SPEC_ARGS, threads=args.threads, nice=False) as s:
            data = measure(s.base_url, args.runs, args.max_tokens, args.seed)
            data["server"]["command"] = " ".join(s.argv)
    return report("remote_vs_curl", data, args.json, print_text)


if __name__ == "__main__":
    sys.exit(main())
