"""Download faults against the local fake hub: is a corrupt file ever marked complete?

Runs the app's real :class:`app.catalog.hub.Download` (huggingface_hub underneath)
against tests/catalog/fake_hub.py with one fault injected per scenario, for each way the
hub can describe a file (``lfs``: sha256 ETag; ``git``: a git blob id; ``pointer``: a
mirror's id of the LFS pointer; ``opaque``: no hash at all), then once more without the
fault. Counted: corrupt files marked complete (a file in the models folder whose bytes
differ from the hub's), tracebacks (an exception other than the app's DownloadError),
hangs, messages that leak library advice ("force_download"…), lock files left after a
finished download, and whether the clean retry ends with the right bytes. A server that
sends the same wrong bytes to every request under an opaque ETag cannot be caught by any
client; those cases are counted apart (the manifest records them as verified by size).

Usage::

    .venv/bin/python bench/robustness/download_faults.py [--size BYTES] [--json]

Writes ``bench/out/robustness-downloads.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.robustness._run import OUT

REPO_ID, FILE = "acme/faults-GGUF", "model-Q4_0.gguf"
KEY = f"{REPO_ID}/{FILE}"
KINDS = ["lfs", "git", "pointer", "opaque"]
LEAKS = ("force_download", "huggingface_hub", "Traceback", "..", "HfHubHTTPError", "httpx")

Fault = Callable[[Any, bytes], None]
#: faults where the server sends the same wrong bytes to every request; with an opaque
#: ETag (no hash) nothing can tell them from the real file
UNDETECTABLE = {"corrupt-all-bytes", "one-byte-flipped"}


def per_kind_faults(size: int) -> dict[str, Fault]:
    half = size // 2
    flip = bytes(b ^ 0x5A for b in range(256)) * (size // 256 + 1)

    def corrupt_all(hub: Any, data: bytes) -> None:
        hub.corrupt[KEY] = bytes(a ^ b for a, b in zip(data, flip))

    def corrupt_resumed(hub: Any, data: bytes) -> None:
        hub.drop_after[KEY] = half
        hub.corrupt_resumed[KEY] = bytes(a ^ b for a, b in zip(data, flip))

    def one_byte(hub: Any, data: bytes) -> None:
        hub.corrupt[KEY] = data[:half] + bytes([data[half] ^ 1]) + data[half + 1:]

    def drop_then_ignore_range(hub: Any, data: bytes) -> None:
        hub.drop_after[KEY] = half
        hub.ignore_range = True

    return {
        "none": lambda hub, data: None,
        "drop-mid-body": lambda hub, data: hub.drop_after.__setitem__(KEY, half),
        "drop-at-first-byte": lambda hub, data: hub.drop_after.__setitem__(KEY, 1),
        "corrupt-all-bytes": corrupt_all,
        "one-byte-flipped": one_byte,
        "corrupt-resumed-range": corrupt_resumed,
        "size-claim-larger": lambda hub, data: hub.size_claims.__setitem__(KEY, size + 1000),
        "size-claim-smaller": lambda hub, data: hub.size_claims.__setitem__(KEY, size - 1000),
        "drop-then-range-ignored": drop_then_ignore_range,
    }


def hub_faults() -> dict[str, Fault]:
    return {
        "404-entry": lambda hub, data: hub.files.pop(KEY),
        "404-repo": lambda hub, data: hub.repos.discard(REPO_ID),
        "gated-401": lambda hub, data: hub.gated.__setitem__(REPO_ID, 401),
        "gated-403": lambda hub, data: hub.gated.__setitem__(REPO_ID, 403),
        "500-twice-then-ok": lambda hub, data: hub.fail_first.__setitem__(KEY, [500, 500]),
        "503-always": lambda hub, data: hub.fail_first.__setitem__(KEY, [503] * 50),
        "429-once": lambda hub, data: hub.fail_first.__setitem__(KEY, [429]),
    }


def run_with_timeout(fn: Callable[[], Any], seconds: float) -> tuple[str, Any]:
    """("ok", value) | ("error", DownloadError) | ("traceback", text) | ("hung", None)."""
    from app.errors import DownloadError

    result: list[tuple[str, Any]] = []

    def target() -> None:
        try:
            result.append(("ok", fn()))
        except DownloadError as exc:
            result.append(("error", exc))
        except BaseException:
            result.append(("traceback", traceback.format_exc()))

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    return result[0] if result else ("hung", None)


def scenario(kind: str, name: str, fault: Fault, data: bytes, root: Path, timeout: float,
             endpoint_override: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    from app.catalog.hub import Download
    from tests.catalog.fake_hub import FakeHub

    models = root / f"{kind}-{name}" / "models"
    row: dict[str, Any] = {"kind": kind, "fault": name}
    old_env = {k: os.environ.get(k) for k in (env or {})}
    with FakeHub() as hub:
        hub.add(REPO_ID, FILE, data)
        if kind != "lfs":
            hub.etag_kind[KEY] = kind
        fault(hub, data)
        endpoint = endpoint_override or hub.endpoint
        os.environ.update(env or {})
        try:
            status, value = run_with_timeout(lambda: Download(REPO_ID, FILE, models_dir=models, endpoint=endpoint).run(),
                                             timeout)
        finally:
            for k, v in old_env.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        final = models / REPO_ID / FILE
        row["first"] = status
        row["message"] = str(value) if status == "error" else (value[-800:] if status == "traceback" else None)
        wrong = final.exists() and final.read_bytes() != data
        # A server that sends the same wrong bytes to every request and no hash at all
        # cannot be caught by any client: counted apart, never hidden.
        row["undetectable"] = wrong and kind == "opaque" and name in UNDETECTABLE
        row["corrupt_marked_complete"] = wrong and not row["undetectable"]
        row["leaks_library_text"] = status == "error" and any(s in str(value) for s in LEAKS)
        # the same download again, with the hub healthy
        hub.corrupt.clear(); hub.corrupt_resumed.clear(); hub.size_claims.clear(); hub.drop_after.clear()
        hub.fail_first.clear(); hub.gated.clear(); hub.ignore_range = False
        from huggingface_hub import constants

        constants.HF_HUB_OFFLINE = False
        hub.add(REPO_ID, FILE, data)
        status2, value2 = run_with_timeout(lambda: Download(REPO_ID, FILE, models_dir=models, endpoint=hub.endpoint).run(),
                                           timeout)
        row["retry"] = status2
        row["retry_message"] = str(value2) if status2 != "ok" else None
        row["recovered"] = status2 == "ok" and final.exists() and final.read_bytes() == data
        if not row["undetectable"]:  # (an undetectable file stays complete on retry, rightly)
            row["corrupt_marked_complete"] |= final.exists() and final.read_bytes() != data
        row["locks_left"] = len(list((models / REPO_ID).rglob("*.lock"))) if (models / REPO_ID).exists() else 0
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=3_000_000, help="bytes of the hosted file (3 MB)")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    work = Path(tempfile.mkdtemp(prefix="tandem-download-faults-"))
    os.environ["TANDEM_HOME"] = str(work / "home")
    data = random.Random(1).randbytes(args.size)
    rows = []
    try:
        for kind in KINDS:
            for name, fault in per_kind_faults(args.size).items():
                rows.append(scenario(kind, name, fault, data, work, args.timeout))
                print(f"{kind:8} {name:26} {rows[-1]['first']:9} retry {rows[-1]['retry']}", flush=True)
        for name, fault in hub_faults().items():
            rows.append(scenario("lfs", name, fault, data, work, args.timeout))
            print(f"{'lfs':8} {name:26} {rows[-1]['first']:9} retry {rows[-1]['retry']}", flush=True)
        rows.append(scenario("lfs", "server-unreachable", lambda h, d: None, data, work, args.timeout,
                             endpoint_override="http://127.0.0.1:9"))
        from huggingface_hub import constants

        def offline(hub: Any, data: bytes) -> None:
            constants.HF_HUB_OFFLINE = True  # what HF_HUB_OFFLINE=1 sets when the library loads

        rows.append(scenario("lfs", "offline-mode", offline, data, work, args.timeout))
        for r in rows[-2:]:
            print(f"{'lfs':8} {r['fault']:26} {r['first']:9} retry {r['retry']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {
        "scenarios": len(rows),
        "corrupt_files_marked_complete": sum(r["corrupt_marked_complete"] for r in rows),
        "undetectable_wrong_bytes_without_any_hash": sum(r["undetectable"] for r in rows),
        "tracebacks": sum(r["first"] == "traceback" or r["retry"] == "traceback" for r in rows),
        "hangs": sum(r["first"] == "hung" or r["retry"] == "hung" for r in rows),
        "messages_leaking_library_text": sum(r["leaks_library_text"] for r in rows),
        "recovered_on_retry": sum(r["recovered"] for r in rows),
        "lock_files_left": sum(r["locks_left"] for r in rows),
        "clean_errors": sum(r["first"] == "error" for r in rows),
        "completed_despite_fault": sum(r["first"] == "ok" for r in rows),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "robustness-downloads.json").write_text(json.dumps({"summary": summary, "scenarios": rows}, indent=1))
    for r in rows:
        if r["first"] == "error":
            print(f"  {r['kind']}/{r['fault']}: {r['message']}")
    print(json.dumps(summary if not args.json else {"summary": summary, "scenarios": rows}, indent=1))
    bad = summary["corrupt_files_marked_complete"] + summary["tracebacks"] + summary["hangs"]
    return 0 if bad == 0 and summary["messages_leaking_library_text"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
