"""Record what a real serving engine answers, as fixtures for the recorded-contract tests.

Sends Tandem's probes and one chat request (streamed, then the same not streamed) to a
running OpenAI-compatible server and saves the answers byte for byte, with the engine's
version, so ``tests/remote/test_contract.py`` pins the parsers to what the engine really
produced (field names, metric names, stream framing):

    python bench/record_server_contract.py --server http://127.0.0.1:8080 \\
        --engine llama-server --out tests/remote/data/llama-server-b1-0c1e570 \\
        --command "llama-server -m SmolLM2-135M-Instruct.Q4_1.gguf --spec-type ngram-simple --metrics"

Files written (a probe that answers other than 200 is left out): ``manifest.json``
(engine, version, server command, prompt, date), ``models.json``, ``props.json``,
``slots.json``, ``version.json``, ``metrics_before.txt``, ``chat_stream.sse``,
``metrics_after_stream.txt``, ``chat.json``, ``metrics_after_chat.txt``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import httpx

#: a prompt whose answer repeats its own text, so n-gram drafters draft and get accepted
PROMPT = "Copy this list exactly, line by line:\n" + "apple banana cherry\n" * 6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True, help="base URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--engine", required=True, help="engine name for the manifest")
    ap.add_argument("--out", required=True, type=Path, help="folder to write")
    ap.add_argument("--command", default="", help="the command the server was started with")
    ap.add_argument("--max-tokens", type=int, default=60)
    ap.add_argument("--prompt", default=PROMPT,
                    help="the user message (default: a list to copy, which n-gram drafters "
                         "draft perfectly; a prompt whose answer strays gives partial acceptance)")
    args = ap.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with httpx.Client(base_url=args.server.rstrip("/"), timeout=300.0) as http:
        models = http.get("/v1/models")
        models.raise_for_status()
        (out / "models.json").write_bytes(models.content)
        model = models.json()["data"][0]["id"]
        for name, path in (("props", "/props"), ("version", "/version")):
            r = http.get(path)
            if r.status_code == 200:
                (out / f"{name}.json").write_bytes(r.content)
        body = {"model": model, "messages": [{"role": "user", "content": args.prompt}],
                "max_tokens": args.max_tokens, "temperature": 0}
        (out / "metrics_before.txt").write_bytes(http.get("/metrics").content)
        with http.stream("POST", "/v1/chat/completions",
                         json={**body, "stream": True,
                               "stream_options": {"include_usage": True}}) as r:
            r.raise_for_status()
            (out / "chat_stream.sse").write_bytes(r.read())
        (out / "metrics_after_stream.txt").write_bytes(http.get("/metrics").content)
        r = http.post("/v1/chat/completions", json=body)
        r.raise_for_status()
        (out / "chat.json").write_bytes(r.content)
        (out / "metrics_after_chat.txt").write_bytes(http.get("/metrics").content)
        r = http.get("/slots")
        if r.status_code == 200:
            (out / "slots.json").write_bytes(r.content)
        version = None
        if (out / "props.json").exists():
            version = json.loads((out / "props.json").read_text()).get("build_info")
        if (out / "version.json").exists():
            version = json.loads((out / "version.json").read_text()).get("version")
    manifest = {"engine": args.engine, "version": version, "command": args.command,
                "model": model, "prompt": args.prompt, "max_tokens": args.max_tokens,
                "temperature": 0,
                "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds")}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"recorded {args.engine} {version} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
