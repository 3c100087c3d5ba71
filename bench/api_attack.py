"""The local API under the attacks it must survive, bounded (about a minute): half-sent
connections, deeply nested JSON, client disconnects, a client that never reads.

Starts ``python -m app serve`` (SmolLM2-135M-Instruct, prompt lookup, on 127.0.0.1 with
an API key) as a child and measures:

* **half-sent**: ``--half-sent`` connections (300) each send part of a request head and
  stop, kept at that number for ``--hold-s`` seconds (a connection the server closes is
  opened again), while a client with the key sends ``GET /v1/models`` and short
  completions on fresh connections: requests served / refused / failed, and how many
  half-sent connections the server closed;
* **deep JSON**: bodies nested 10^5 deep (arrays), 5,000 deep (objects) and 2,000 deep
  (inside message content): each status and error code (400 ``invalid_json`` expected);
* **disconnects**: ``--disconnects`` (20) streamed completions, each closed after its
  first token: the time from the client's close to the job's end (the server records
  ``ended``; same clock), median and max, and the server's own share (from noticing the
  disconnect to the end);
* **never-reading client**: a stream (no ``max_tokens``: the server's Max tokens, 512)
  whose client never reads; how long until it is dropped and the next request is answered
  (bounded by ``--never-reading-wait-s``), and how many bytes the client's kernel
  accepted without the client reading them (a Linux receiver grows its buffer as data
  trickles in, so at token rates it may hold a whole reply before any write blocks).

Only 127.0.0.1 is contacted. Run:

    .venv/bin/python bench/api_attack.py
"""

from __future__ import annotations

import argparse
import array
import fcntl
import socket
import statistics
import termios
import time
from typing import Any

import httpx
from _common import SMOLLM, machine_note, report, require_model
from _serve import ServeChild

KEY = "bench-attack-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
MODEL = "SmolLM2-135M-Instruct.Q4_1"
PARTIAL_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-"


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1].split("/")[0])


def half_sent(base: str, n: int, hold_s: float) -> dict[str, Any]:
    port = _port(base)
    socks: list[socket.socket] = []
    closed_by_server = 0

    def open_one() -> socket.socket:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(PARTIAL_HEAD)
        s.setblocking(False)
        return s

    for _ in range(n):
        socks.append(open_one())
    counts = {"served": 0, "refused": 0, "failed": 0}
    statuses: dict[str, int] = {}
    latencies: tuple[list[float], list[float]] = ([], [])  # /v1/models, completions
    t_end = time.monotonic() + hold_s
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 4, "temperature": 0}
    i = 0
    while time.monotonic() < t_end:
        # keep n half-sent connections held: reopen what the server closed
        for j, s in enumerate(socks):
            try:
                if s.recv(4096) == b"":
                    raise ConnectionResetError
            except BlockingIOError:
                continue
            except OSError:
                pass
            s.close()
            closed_by_server += 1
            socks[j] = open_one()
        try:
            t0 = time.monotonic()
            with httpx.Client(headers=AUTH, timeout=30) as client:  # a fresh connection
                r = (client.get(base + "/models") if i % 2 == 0
                     else client.post(base + "/chat/completions", json=body))
            latencies[i % 2].append(time.monotonic() - t0)
            statuses[str(r.status_code)] = statuses.get(str(r.status_code), 0) + 1
            counts["served" if r.status_code == 200 else "refused"] += 1
        except httpx.HTTPError as exc:
            counts["failed"] += 1
            statuses[type(exc).__name__] = statuses.get(type(exc).__name__, 0) + 1
        i += 1
        time.sleep(0.05)
    for s in socks:
        s.close()
    return {"half_sent": n, "hold_s": hold_s, **counts, "statuses": statuses,
            "latency_s": {name: {"median": round(statistics.median(lat), 3),
                                 "max": round(max(lat), 3)}
                          for name, lat in zip(("models", "chat"), latencies) if lat},
            "half_sent_closed_by_server": closed_by_server}


def deep_json(base: str) -> dict[str, Any]:
    def chat(content: str) -> bytes:
        return (f'{{"model":"{MODEL}","messages":[{{"role":"user","content":{content}}}]}}'
                ).encode()

    bodies = {
        "arrays_100000": b"[" * 100_000 + b"]" * 100_000,
        "objects_5000": b'{"a":' * 5000 + b"1" + b"}" * 5000,
        "content_2000": chat("[" * 2000 + "]" * 2000),
    }
    out: dict[str, Any] = {}
    for name, body in bodies.items():
        t0 = time.perf_counter()
        r = httpx.post(base + "/chat/completions", content=body, timeout=30,
                       headers={**AUTH, "Content-Type": "application/json"})
        code = r.json().get("error", {}).get("code") if r.headers.get(
            "content-type", "").startswith("application/json") else None
        out[name] = {"status": r.status_code, "code": code,
                     "ms": round((time.perf_counter() - t0) * 1000, 1)}
    return out


def disconnects(base: str, n: int) -> dict[str, Any]:
    root = base.removesuffix("/v1")
    total: list[float] = []
    server_side: list[float] = []
    for i in range(n):
        body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 400,
                "stream": True, "temperature": 0.8, "seed": i}
        with httpx.stream("POST", base + "/completions", json=body, headers=AUTH,
                          timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    break
            t_close = time.time()
        while True:  # until the server records the job's end
            latest = httpx.get(root + "/tandem/requests", headers=AUTH).json()["requests"][0]
            if latest["ended"] is not None:
                break
            time.sleep(0.01)
        total.append(latest["ended"] - t_close)
        if latest["disconnected_at"] is not None:
            server_side.append(latest["ended"] - latest["disconnected_at"])
    return {"n": n, "close_to_end_s": {"median": statistics.median(total), "max": max(total)},
            "noticed_to_end_s": ({"median": statistics.median(server_side),
                                  "max": max(server_side)} if server_side else None),
            "all_close_to_end_s": [round(t, 3) for t in total]}


def never_reading(base: str, wait_s: float) -> dict[str, Any]:
    root = base.removesuffix("/v1")
    # counting rarely reaches EOS: the reply runs to the server's Max tokens (none named)
    body = (b'{"model":"%s","prompt":"1, 2, 3, 4, 5, 6, 7, 8, 9, 10,","stream":true,'
            b'"temperature":0}' % MODEL.encode())
    s = socket.create_connection(("127.0.0.1", _port(base)))  # default buffers
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
              + KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    t0 = time.monotonic()
    time.sleep(0.5)  # let it start
    # the next request waits behind the stalled stream (one generation at a time)
    try:
        r = httpx.post(base + "/completions", json={"model": MODEL, "prompt": "Hi",
                                                     "max_tokens": 4}, headers=AUTH,
                       timeout=wait_s)
        status: int | str = r.status_code
    except httpx.TimeoutException:
        status = f"no answer within {wait_s} s"
    waited = time.monotonic() - t0
    latest = httpx.get(root + "/tandem/requests", headers=AUTH).json()["requests"]
    first = next((x for x in latest if x["stream"]), None)
    # what the client's kernel accepted for it without the client reading a byte
    unread = array.array("i", [0])
    fcntl.ioctl(s, termios.FIONREAD, unread)
    s.close()
    return {"next_request": status, "next_answered_after_s": round(waited, 2),
            "unread_bytes_held_by_the_client_kernel": unread[0],
            "stalled_stream": {k: first[k] for k in ("status", "finish_reason",
                                                      "completion_tokens", "disconnected",
                                                      "predicted_per_second")}
            if first else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--half-sent", type=int, default=300)
    ap.add_argument("--hold-s", type=float, default=15.0)
    ap.add_argument("--disconnects", type=int, default=20)
    ap.add_argument("--never-reading-wait-s", type=float, default=90.0)
    ap.add_argument("--threads", type=int, default=None,
                    help="the server's CPU threads (default: the engine's)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    model = require_model(SMOLLM)
    threads = [] if args.threads is None else ["--threads", str(args.threads)]
    child = ServeChild(model, ["--prompt-lookup", "--api-key", KEY, *threads])
    try:
        data: dict[str, Any] = {"machine": machine_note(), "server": child.base_url,
                                "threads": args.threads}
        data["half_sent"] = half_sent(child.base_url, args.half_sent, args.hold_s)
        data["deep_json"] = deep_json(child.base_url)
        data["disconnects"] = disconnects(child.base_url, args.disconnects)
        data["never_reading"] = never_reading(child.base_url, args.never_reading_wait_s)
        data["health_after"] = httpx.get(child.base_url.removesuffix("/v1") + "/health"
                                         ).status_code
    finally:
        data_rc = child.stop()
    data["server_exit"] = data_rc

    def text(d: dict[str, Any]) -> None:
        h = d["half_sent"]
        print(f"half-sent: {h['half_sent']} held {h['hold_s']} s; keyed requests served "
              f"{h['served']}, refused {h['refused']}, failed {h['failed']} {h['statuses']}"
              f" (latency {h['latency_s']}); half-sent closed by the server "
              f"{h['half_sent_closed_by_server']}")
        for name, r in d["deep_json"].items():
            print(f"deep JSON {name}: {r['status']} {r['code']} ({r['ms']} ms)")
        c = d["disconnects"]
        print(f"disconnects: {c['n']}; close → job end median "
              f"{c['close_to_end_s']['median']:.3f} s, max {c['close_to_end_s']['max']:.3f} s;"
              f" noticed → end {c['noticed_to_end_s']}")
        nr = d["never_reading"]
        print(f"never-reading stream: next request {nr['next_request']} after "
              f"{nr['next_answered_after_s']} s; stalled stream {nr['stalled_stream']}; "
              f"unread bytes held by the client's kernel "
              f"{nr['unread_bytes_held_by_the_client_kernel']}")
        print(f"health after: {d['health_after']}; server exit {d['server_exit']}")

    return report("api_attack", data, args.json, text)


if __name__ == "__main__":
    raise SystemExit(main())
