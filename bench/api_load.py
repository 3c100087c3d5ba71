"""A bounded load test of the local API: many concurrent clients, every request answered
or refused with a documented error, none lost, the server serving afterwards, memory flat.

Starts ``python -m app serve`` (a child) with a queue of ``--queue-limit`` and sends
``--requests`` completions from ``--clients`` concurrent clients (threads with one httpx
client each). Every ``--disconnect-every``-th request streams and hangs up after its
first chunk (the cancel path). Each request ends as one of:

* ``answered``: 200 with a complete body (or a stream that ended with ``data: [DONE]``);
* ``hung_up``: a stream the client closed on purpose after its first chunk;
* ``refused``: a documented refusal — 429 ``queue_full`` with ``Retry-After`` (the
  queue is full) or 503 with ``Retry-After``;
* ``lost``: anything else (a connection error, another status, a 429 without
  Retry-After, a stream without ``[DONE]``): there should be none.

Afterwards: ``/health`` must say ok, one more completion must be answered, and the
server's resident memory (``psutil``) before the load, after it, and after a second
identical round shows whether it grows. Run on a quiet machine:

    .venv/bin/python bench/api_load.py --clients 40 --requests 200 --max-tokens 16
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psutil
from _common import GEMMA, machine_note, report, require_model
from _serve import ServeChild

PROMPT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"


def one_request(client: httpx.Client, base: str, model: str, i: int, max_tokens: int,
                hang_up: bool) -> str:
    body: dict[str, Any] = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens,
                            "temperature": 0}
    try:
        if hang_up or i % 2:
            body["stream"] = True
            with client.stream("POST", base + "/completions", json=body, timeout=600) as r:
                if r.status_code != 200:
                    r.read()
                    return refusal(r)
                done = False
                for line in r.iter_lines():
                    if hang_up and line.startswith("data: {"):
                        return "hung_up"
                    done = done or line == "data: [DONE]"
                return "answered" if done else "lost"
        r = client.post(base + "/completions", json=body, timeout=600)
        if r.status_code == 200:
            return "answered" if r.json()["choices"][0]["finish_reason"] else "lost"
        return refusal(r)
    except httpx.HTTPError:
        return "lost"


def refusal(r: httpx.Response) -> str:
    try:
        code = r.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return "lost"
    if r.status_code in (429, 503) and r.headers.get("retry-after", "").isdigit() and code:
        return "refused"
    return "lost"


def load_round(base: str, model: str, clients: int, requests: int, max_tokens: int,
               disconnect_every: int) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    todo = iter(range(requests))

    def worker() -> None:
        with httpx.Client() as client:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                hang = disconnect_every > 0 and i % disconnect_every == disconnect_every - 1
                outcome = one_request(client, base, model, i, max_tokens, hang)
                with lock:
                    outcomes[outcome] += 1

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=GEMMA)
    ap.add_argument("--clients", type=int, default=40)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--queue-limit", type=int, default=16)
    ap.add_argument("--disconnect-every", type=int, default=5,
                    help="every Nth request hangs up after its first chunk (0: none)")
    ap.add_argument("--prompt-lookup", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    model = require_model(args.model)
    before_note = machine_note()
    child = ServeChild(model, ["--n-ctx", "1024", "--queue-limit", str(args.queue_limit),
                               *(["--prompt-lookup"] if args.prompt_lookup else [])])
    proc = psutil.Process(child.pid)
    try:
        with httpx.Client() as c:
            mid = c.get(child.base_url + "/models").json()["data"][0]["id"]
            warm = one_request(c, child.base_url, mid, 0, args.max_tokens, False)
        rss = [proc.memory_info().rss]
        rounds = []
        for _ in range(2):
            outcomes = load_round(child.base_url, mid, args.clients, args.requests,
                                  args.max_tokens, args.disconnect_every)
            rounds.append(dict(outcomes))
            rss.append(proc.memory_info().rss)
            print(f"round: {dict(outcomes)}, RSS {rss[-1] / 2**20:.0f} MiB", file=sys.stderr)
        health = httpx.get(child.base_url.removesuffix("/v1") + "/health").json()
        with httpx.Client() as c:
            after = one_request(c, child.base_url, mid, 0, args.max_tokens, False)
        log = httpx.get(child.base_url.removesuffix("/v1") + "/tandem/requests").json()
    finally:
        code = child.stop()
    lost = sum(r.get("lost", 0) for r in rounds)
    total = sum(sum(r.values()) for r in rounds)
    data = {"model": model.name, "clients": args.clients, "requests_per_round": args.requests,
            "queue_limit": args.queue_limit, "max_tokens": args.max_tokens,
            "rounds": rounds, "total": total, "lost": lost, "warm_up": warm,
            "health_after": health, "request_after": after, "server_exit": code,
            "rss_mib": [round(x / 2**20, 1) for x in rss],
            "server_refused_count": log["refused"],
            "ok": lost == 0 and total == 2 * args.requests and after == "answered"
            and health.get("status") == "ok",
            "machine_before": before_note, "machine_after": machine_note()}

    def text(d: dict[str, Any]) -> None:
        for i, r in enumerate(d["rounds"], 1):
            print(f"round {i}: {json.dumps(r)}")
        print(f"lost: {d['lost']} of {d['total']}; after the load: health "
              f"{d['health_after'].get('status')}, one more request {d['request_after']}")
        print(f"server RSS MiB: before {d['rss_mib'][0]}, after the first round {d['rss_mib'][1]}, "
              f"after the second round {d['rss_mib'][2]}")
        print("OK" if d["ok"] else "FAILED")

    report("api_load", data, args.json, text)
    return 0 if data["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
