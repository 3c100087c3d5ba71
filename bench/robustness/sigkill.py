"""SIGKILL mid-reply and mid-download: what survives, and is anything corrupt?

Mid-reply: a child process streams a reply of the tiny synthetic model into the chat
history through the window's own Qt-free path (``ChatController`` on a ``ChatService``:
the reply row created as ``streaming``, its text saved every
:data:`app.chat.reply.SAVE_EVERY_S`), printing what it has streamed. While it streams, a second
instance opens the same history with start-up recovery (it must leave the reply alone).
Then the child is killed with SIGKILL at a random moment. Checked: the database passes
``PRAGMA integrity_check``, the reply is marked ``interrupted`` by the next start, its
text is a prefix of what was streamed, and how much text (characters, seconds) was lost.

Mid-download: a child process downloads an 8 MB file from the fake hub (rate-limited)
and is killed with SIGKILL at a random moment; a new run then finishes the download.
Checked: the file in the models folder has the hub's bytes (never a corrupt file marked
complete), no lock file is left, and how many bytes were fetched again.

Usage::

    .venv/bin/python bench/robustness/sigkill.py [--replies 12] [--downloads 12] [--json]

Writes ``bench/out/robustness-sigkill.json``. POSIX only (SIGKILL).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.robustness._run import OUT, REPO

from app.chat.reply import SAVE_EVERY_S  # how often the chat controller saves a streaming reply

# The window's own path without Qt: ChatController on a ChatService with the real engine,
# events handed over on the main thread as the window's bridge does. The service calls
# subscribers on its worker thread; pausing there 20 ms per token streamed holds the
# engine at about 50 tokens/s, as a real model streams (the tiny one is far faster).
REPLY_CHILD = textwrap.dedent(
    """
    import queue, sys, time
    from pathlib import Path
    from app.chat.conversation import ChatController, open_history
    from app.chat.events import ReplyStreamed
    from app.chat.service import ChatService
    from app.options import SamplingParams
    from app.store.settings import Settings

    class View:  # what the window does with a reply, as far as this check cares
        def __init__(self, side):
            self.side, self.written = side, 0
        def reply_started(self, reply):
            print("begin", reply.message_id, flush=True)
        def reply_progressed(self, reply):
            self.side.write(reply.text[self.written:])  # everything streamed, for the check
            self.side.flush()
            self.written = len(reply.text)
            print("streamed", len(reply.text), time.monotonic(), flush=True)
        def reply_finished(self, *args):
            print("finished", flush=True)
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    emitted = [0]
    def pace(event):
        if isinstance(event, ReplyStreamed) and event.deltas:
            n = event.deltas[-1].n_tokens  # reply tokens so far
            time.sleep(0.02 * max(1, n - emitted[0]))
            emitted[0] = n

    settings = Settings()
    settings.model.target_path = Path(sys.argv[1])
    settings.model.n_ctx = 2048
    settings.sampling = SamplingParams(temperature=0.8, seed=3, max_tokens=1800)
    store, problems = open_history()  # with start-up recovery, as the window opens it
    side = open(sys.argv[2], "w", encoding="utf-8", newline="")
    service = ChatService()
    events = queue.Queue()
    service.subscribe(pace)
    service.subscribe(events.put)
    c = ChatController(settings, store, service, View(side))
    c.start(problems=problems)
    while c.loading:
        c.handle(events.get(timeout=60))
    assert c.model_info is not None
    assert c.send_message("tell me a long story")
    while c.reply is not None:
        c.handle(events.get(timeout=60))
    c.close()
    """
)

DOWNLOAD_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from app.catalog.hub import Download
    print("start", flush=True)
    Download(sys.argv[1], sys.argv[2], models_dir=Path(sys.argv[3]), endpoint=sys.argv[4]).run()
    print("finished", flush=True)
    """
)


def kill_mid_reply(model: Path, home: Path, rng: random.Random) -> dict[str, Any]:
    from app.store.history import HistoryStore

    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TANDEM_HOME": str(home), "PYTHONPATH": str(REPO)}
    db = home / "data" / "history.sqlite3"
    side = home / "streamed.txt"
    proc = subprocess.Popen([sys.executable, "-c", REPLY_CHILD, str(model), str(side)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    streamed: list[tuple[int, float]] = []
    rid = None
    wait_s = rng.uniform(0.3, 3.0)
    t_begin = None
    second_instance_claimed = None
    while True:
        line = proc.stdout.readline()
        if not line:
            break
        parts = line.split()
        if parts[0] == "begin":
            rid, t_begin = int(parts[1]), time.monotonic()
        elif parts[0] == "streamed":
            streamed.append((int(parts[1]), float(parts[2])))
        if t_begin is not None and second_instance_claimed is None and streamed:
            other = HistoryStore.open(db, recover=True)  # a second window starting now
            second_instance_claimed = other.message(rid).status != "streaming"
            other.close()
        if t_begin is not None and time.monotonic() - t_begin > wait_s:
            break
    killed_at = time.monotonic()
    alive = proc.poll() is None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    err = proc.stderr.read() if proc.stderr else ""
    with sqlite3.connect(db) as conn:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
    store = HistoryStore.open(db, recover=True)  # the next start
    msg = store.message(rid) if rid is not None else None
    store.close()
    last_len, last_t = streamed[-1] if streamed else (0, killed_at)
    saved_len = len(msg.content) if msg is not None else 0
    first_t = streamed[0][1] if streamed else killed_at
    saved_t = max((t for n, t in streamed if n <= saved_len), default=first_t)
    return {
        "killed_after_s": round(wait_s, 2), "returncode": proc.returncode, "mid_reply": alive,
        "integrity": integrity, "traceback": "Traceback" in err,
        "second_instance_claimed_live_reply": bool(second_instance_claimed),
        "marked_interrupted": msg is not None and msg.finish_reason == "interrupted",
        "streamed_chars": last_len, "saved_chars": saved_len,
        "lost_chars": max(0, last_len - saved_len), "lost_seconds": round(max(0.0, last_t - saved_t), 3),
        "saved_text_is_streamed_prefix": msg is not None and side.read_bytes().decode("utf-8").startswith(msg.content),
    }


def kill_mid_download(kind: str, data: bytes, work: Path, rng: random.Random) -> dict[str, Any]:
    from app.catalog.hub import Download
    from tests.catalog.fake_hub import FakeHub

    repo, name = "acme/kill-GGUF", "model.gguf"
    key = f"{repo}/{name}"
    models = work / f"models-{kind}-{rng.random():.6f}"
    env = {**os.environ, "TANDEM_HOME": str(work / "home"), "PYTHONPATH": str(REPO),
           "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}
    with FakeHub() as hub:
        hub.add(repo, name, data)
        if kind != "lfs":
            hub.etag_kind[key] = kind
        hub.rate = 4e6
        proc = subprocess.Popen([sys.executable, "-c", DOWNLOAD_CHILD, repo, name, str(models), hub.endpoint],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()
        target = int(rng.uniform(0.05, 0.95) * len(data))  # kill once this much was sent
        t0 = time.monotonic()
        while hub.sent[key] < target and proc.poll() is None and time.monotonic() - t0 < 60:
            time.sleep(0.005)
        wait_s = time.monotonic() - t0
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        err = proc.stderr.read() if proc.stderr else ""
        sent_before = hub.sent[key]
        final = models / repo / name
        complete_before = final.exists()
        corrupt_before = complete_before and final.read_bytes() != data
        hub.rate = None
        Download(repo, name, models_dir=models, endpoint=hub.endpoint).run()
        fetched_again = hub.sent[key] - sent_before
    return {
        "kind": kind, "killed_after_s": round(wait_s, 2), "returncode": proc.returncode,
        "mid_download": 0 < sent_before < len(data),
        "traceback": "Traceback" in err,
        "corrupt_marked_complete": corrupt_before or final.read_bytes() != data,
        "bytes_before_kill": sent_before, "bytes_fetched_after": fetched_again,
        "locks_left": len(list((models / repo).rglob("*.lock"))),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replies", type=int, default=12)
    ap.add_argument("--downloads", type=int, default=12)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from tests.synthetic import write_tiny_llama

    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="tandem-sigkill-"))
    replies, downloads = [], []
    try:
        model = write_tiny_llama(work / "tiny.gguf", n_ctx_train=4096)
        for i in range(args.replies):
            replies.append(kill_mid_reply(model, work / f"home-{i}", rng))
            r = replies[-1]
            print(f"reply {i:2}: killed after {r['killed_after_s']:.2f} s, lost {r['lost_chars']} chars"
                  f" ({r['lost_seconds']:.2f} s), {r['integrity']}, interrupted {r['marked_interrupted']}", flush=True)
        data = random.Random(2).randbytes(8_000_000)
        for i in range(args.downloads):
            kind = ("lfs", "git", "opaque")[i % 3]
            downloads.append(kill_mid_download(kind, data, work, rng))
            d = downloads[-1]
            print(f"download {i:2} ({kind}): killed after {d['killed_after_s']:.2f} s at {d['bytes_before_kill']} B,"
                  f" {d['bytes_fetched_after']} B fetched after, corrupt {d['corrupt_marked_complete']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {
        "sigkills": len(replies) + len(downloads),
        "replies": {
            "kills": len(replies),
            "killed_mid_reply": sum(r["mid_reply"] for r in replies),
            "database_not_ok": sum(r["integrity"] != "ok" for r in replies),
            "tracebacks": sum(r["traceback"] for r in replies),
            "not_marked_interrupted": sum(not r["marked_interrupted"] for r in replies),
            "saved_text_not_a_prefix": sum(not r["saved_text_is_streamed_prefix"] for r in replies),
            "second_instance_claimed_a_live_reply": sum(r["second_instance_claimed_live_reply"] for r in replies),
            "max_lost_chars": max((r["lost_chars"] for r in replies), default=0),
            "max_lost_seconds": max((r["lost_seconds"] for r in replies), default=0.0),
        },
        "downloads": {
            "kills": len(downloads),
            "killed_mid_download": sum(d["mid_download"] for d in downloads),
            "corrupt_files_marked_complete": sum(d["corrupt_marked_complete"] for d in downloads),
            "tracebacks": sum(d["traceback"] for d in downloads),
            "lock_files_left": sum(d["locks_left"] for d in downloads),
        },
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "robustness-sigkill.json").write_text(
        json.dumps({"summary": summary, "replies": replies, "downloads": downloads}, indent=1))
    print(json.dumps(summary if not args.json else {"summary": summary, "replies": replies, "downloads": downloads},
                     indent=1))
    r, d = summary["replies"], summary["downloads"]
    bad = (r["database_not_ok"] + r["tracebacks"] + r["not_marked_interrupted"] + r["saved_text_not_a_prefix"]
           + r["second_instance_claimed_a_live_reply"] + d["corrupt_files_marked_complete"] + d["tracebacks"])
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
