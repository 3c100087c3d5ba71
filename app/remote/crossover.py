"""The serving crossover: does speculation still pay on a server as load grows?

The standard way to decide it (vLLM's and SGLang's benchmarks do the same): the same
prompt set is sent to a server that speculates and to one that does not, at each
concurrency (1, 2, 4, 8 streams at once), and per level the per-stream decode rate, the
aggregate rate, TTFT and latency percentiles and the acceptance figures are compared. On
a busy server the verification batches of many streams compete for the same compute, so
the gain shrinks and, past some concurrency, speculation costs more than it saves:
that level is the crossover.

Each level runs ``max(len(prompts), concurrency)`` requests (the prompt set cycled)
through ``concurrency`` workers, each a :class:`~app.remote.client.RemoteClient` of its
own that takes the next prompt as soon as its last reply ended (a closed loop, so the
server always holds ``concurrency`` streams until the queue runs dry). The two servers
take turns level by level (the order alternates, so a drift in the machine's speed
does not favour one side). Greedy sampling with a fixed seed: both servers should write
the same replies.

Figures per level and side (seconds and tokens/s):

* ``stream_tps_median``: the median over requests of Tandem's decode rate on the stream
  (tokens after the first / time from the first to the last text);
* ``aggregate_tps``: all reply tokens / the level's wall time (first request sent to
  last reply ended);
* ``ttft_p50`` / ``ttft_p95``, ``latency_p50`` / ``latency_p95``: over requests; latency
  is request sent → stream ended;
* ``acceptance_rate`` α and ``mean_acceptance_length`` τ: from the change of the
  server's ``/metrics`` speculation counters over the level (the only client is this
  bench, so the change is the level's own), else summed from the responses' own figures.

``speedup`` = aggregate on / aggregate off per level; speculation *stops paying* at the
lowest concurrency from which the speedup stays below 1 at every higher level measured
(None: it paid at the highest level); :attr:`CrossoverResult.not_paying` lists every
level below 1 (on a busy machine a single level can dip by noise).

Before the levels every prompt is sent once to each server, untimed, so that every level
finds the prompts in the servers' prompt caches alike (otherwise the first level alone
pays for prefilling them) and the first replies' start-up costs are paid.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.engine.measure.bench import median, percentile
from app.errors import TandemError
from app.formatting import loads_json
from app.remote.client import ChatMessage, RemoteClient
from app.remote.stream import RemoteResult
from app.remote.errors import RemoteError
from app.remote.prometheus import SpecCounters

Side = Literal["on", "off"]
#: the version of :meth:`CrossoverResult.to_dict`'s layout (raised when a field changes meaning)
CROSSOVER_SCHEMA = 1
#: the most streams at once a level may ask for
MAX_CONCURRENCY = 256


@dataclass(frozen=True, slots=True)
class RequestFigures:
    """One request of a level: its timings, tokens and the server's figures.

    ``error`` is the message of a request that failed (its other figures are zero)."""

    prompt: str
    n_tokens: int
    ttft: float
    latency: float
    decode_tps: float | None
    draft_tokens: int | None = None
    accepted: int | None = None
    drafts: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "n_tokens": self.n_tokens, "ttft_s": self.ttft,
                "latency_s": self.latency, "decode_tps": self.decode_tps,
                "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "drafts": self.drafts, "error": self.error}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RequestFigures:
        return cls(prompt=str(d["prompt"]), n_tokens=int(d["n_tokens"]),
                   ttft=float(d["ttft_s"]), latency=float(d["latency_s"]),
                   decode_tps=_opt_float(d.get("decode_tps")),
                   draft_tokens=_opt_int(d.get("draft_tokens")),
                   accepted=_opt_int(d.get("accepted")), drafts=_opt_int(d.get("drafts")),
                   error=d.get("error"))


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


@dataclass(frozen=True, slots=True)
class LevelSide:
    """One side (speculation on or off) of one concurrency level."""

    side: Side
    concurrency: int
    wall_time: float
    requests: tuple[RequestFigures, ...]
    counters: SpecCounters | None = None

    @property
    def ok(self) -> tuple[RequestFigures, ...]:
        return tuple(r for r in self.requests if r.error is None)

    @property
    def errors(self) -> int:
        return len(self.requests) - len(self.ok)

    @property
    def tokens(self) -> int:
        return sum(r.n_tokens for r in self.ok)

    @property
    def aggregate_tps(self) -> float | None:
        """All reply tokens / the level's wall time."""
        return self.tokens / self.wall_time if self.wall_time > 0 and self.ok else None

    @property
    def stream_tps_median(self) -> float | None:
        return median(r.decode_tps for r in self.ok if r.decode_tps is not None)

    def _pct(self, what: str, q: float) -> float | None:
        return percentile((getattr(r, what) for r in self.ok), q)

    @property
    def draft_counts(self) -> tuple[int, int, int | None] | None:
        """(draft tokens, accepted, drafts): the ``/metrics`` change over the level, else
        the responses' own figures summed; None when the server reported neither."""
        if self.counters is not None:
            return self.counters.draft_tokens, self.counters.accepted, self.counters.drafts
        reported = [r for r in self.ok if r.draft_tokens is not None]
        if not reported:
            return None
        drafts = [r.drafts for r in reported]
        return (sum(r.draft_tokens or 0 for r in reported), sum(r.accepted or 0 for r in reported),
                None if any(d is None for d in drafts) else sum(d or 0 for d in drafts))

    @property
    def acceptance_rate(self) -> float | None:
        counts = self.draft_counts
        return counts[1] / counts[0] if counts and counts[0] > 0 else None

    @property
    def mean_acceptance_length(self) -> float | None:
        counts = self.draft_counts
        return 1.0 + counts[1] / counts[2] if counts and counts[2] else None

    def to_dict(self) -> dict[str, Any]:
        """Figures (see the module docstring) and each request's, JSON-ready."""
        c = self.counters
        return {
            "side": self.side, "concurrency": self.concurrency, "wall_s": self.wall_time,
            "requests": len(self.requests), "errors": self.errors, "tokens": self.tokens,
            "aggregate_tps": self.aggregate_tps, "stream_tps_median": self.stream_tps_median,
            "ttft_p50": self._pct("ttft", 50), "ttft_p95": self._pct("ttft", 95),
            "latency_p50": self._pct("latency", 50), "latency_p95": self._pct("latency", 95),
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "counters": None if c is None else {
                "prefix": c.prefix, "drafts": c.drafts, "draft_tokens": c.draft_tokens,
                "accepted": c.accepted, "accepted_per_pos": list(c.accepted_per_pos)},
            "per_request": [r.to_dict() for r in self.requests],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LevelSide:
        c = d.get("counters")
        counters = None if c is None else SpecCounters(
            prefix=str(c["prefix"]), drafts=int(c["drafts"]), draft_tokens=int(c["draft_tokens"]),
            accepted=int(c["accepted"]), accepted_per_pos=tuple(int(x) for x in c["accepted_per_pos"]))
        side: Side = "on" if d["side"] == "on" else "off"
        return cls(side=side, concurrency=int(d["concurrency"]), wall_time=float(d["wall_s"]),
                   requests=tuple(RequestFigures.from_dict(r) for r in d["per_request"]),
                   counters=counters)


@dataclass(frozen=True, slots=True)
class CrossoverResult:
    """Every level, both sides, and the settings they ran with."""

    server_on: str
    server_off: str
    model_on: str
    model_off: str
    max_tokens: int
    prompt_set: str
    levels: tuple[tuple[LevelSide, LevelSide], ...]  # (on, off) per concurrency, ascending
    started_at: str = ""
    notes: tuple[str, ...] = field(default=())
    load_average: tuple[float, float] | None = None  # 1-minute load before, after

    def speedup(self, level: int) -> float | None:
        """Aggregate tok/s on ÷ off at the ``level``-th concurrency (None: a side failed)."""
        on, off = self.levels[level]
        a, b = on.aggregate_tps, off.aggregate_tps
        return a / b if a is not None and b else None

    @property
    def not_paying(self) -> tuple[int, ...]:
        """Every concurrency at which speculation's aggregate rate is below plain decoding's."""
        return tuple(on.concurrency for i, (on, _off) in enumerate(self.levels)
                     if (s := self.speedup(i)) is not None and s < 1.0)

    @property
    def stops_paying_at(self) -> int | None:
        """The lowest concurrency from which speculation's aggregate rate stays below
        plain decoding's at every higher level measured; None when it paid at the
        highest level (or no level has both figures)."""
        found: int | None = None
        for i in reversed(range(len(self.levels))):
            s = self.speedup(i)
            if s is None or s >= 1.0:
                break
            found = self.levels[i][0].concurrency
        return found

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (docs/json.md, "bench --server-off")."""
        return {
            "kind": "serving-crossover", "crossover_schema": CROSSOVER_SCHEMA,
            "server_on": self.server_on, "server_off": self.server_off,
            "model_on": self.model_on, "model_off": self.model_off,
            "max_tokens": self.max_tokens, "prompt_set": self.prompt_set,
            "started_at": self.started_at, "notes": list(self.notes),
            "load_average": list(self.load_average) if self.load_average else None,
            "stops_paying_at": self.stops_paying_at, "not_paying": list(self.not_paying),
            "levels": [{"concurrency": on.concurrency, "speedup": self.speedup(i),
                        "on": on.to_dict(), "off": off.to_dict()}
                       for i, (on, off) in enumerate(self.levels)],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CrossoverResult:
        """Read what :meth:`to_dict` wrote.

        Raises:
            TandemError: not a serving-crossover object of a known layout.
        """
        if d.get("kind") != "serving-crossover" or d.get("crossover_schema") != CROSSOVER_SCHEMA:
            raise TandemError("This is not a serving-crossover result Tandem can read "
                              "(written by python -m app bench --server … --server-off …).")
        try:
            return cls(server_on=str(d["server_on"]), server_off=str(d["server_off"]),
                       model_on=str(d["model_on"]), model_off=str(d["model_off"]),
                       max_tokens=int(d["max_tokens"]), prompt_set=str(d["prompt_set"]),
                       started_at=str(d.get("started_at", "")),
                       notes=tuple(str(n) for n in d.get("notes", ())),
                       load_average=(float(d["load_average"][0]), float(d["load_average"][1]))
                       if d.get("load_average") else None,
                       levels=tuple((LevelSide.from_dict(lv["on"]), LevelSide.from_dict(lv["off"]))
                                    for lv in d["levels"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise TandemError(f"The serving-crossover result is damaged ({exc!r}).") from exc


def load_crossover(path: Path) -> CrossoverResult:
    """Read a crossover JSON file (the CLI's ``--json`` output or its ``--out`` file).

    Raises:
        TandemError: unreadable, not JSON, or not a crossover result.
    """
    try:
        data = loads_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TandemError(f"Cannot read {path}: {exc.strerror or exc}.") from exc
    except json.JSONDecodeError as exc:
        raise TandemError(f"{path} is not JSON ({exc.msg}, line {exc.lineno}).") from exc
    if not isinstance(data, dict):
        raise TandemError(f"{path} is not a serving-crossover result.")
    return CrossoverResult.from_dict(data)


@dataclass(frozen=True, slots=True)
class CrossoverPlan:
    """What to run: both servers, the prompts (user messages), the levels."""

    server_on: str
    server_off: str
    prompts: tuple[tuple[str, str], ...]  # (name, user message)
    concurrency: tuple[int, ...] = (1, 2, 4, 8)
    max_tokens: int = 128
    model_on: str | None = None
    model_off: str | None = None
    api_key: str | None = None
    seed: int = 1234
    prompt_set: str = ""

    def __post_init__(self) -> None:
        if not self.prompts:
            raise TandemError("The crossover needs at least one prompt.")
        if not self.concurrency or any(not 1 <= c <= MAX_CONCURRENCY for c in self.concurrency):
            raise TandemError(f"Concurrency levels must be within 1 … {MAX_CONCURRENCY}.")
        if self.max_tokens < 1:
            raise TandemError("--max-tokens must be at least 1.")


Progress = Callable[[str, int, int, int], None]
"""``(side, concurrency, requests done, requests in the level)``."""


def _one_request(client: RemoteClient, model: str, name: str, text: str,
                 plan: CrossoverPlan, cancel: threading.Event) -> RequestFigures:
    messages: list[ChatMessage] = [{"role": "user", "content": text}]
    try:
        result = client.chat(model, messages, max_tokens=plan.max_tokens, temperature=0.0,
                             seed=plan.seed, cancel=cancel, scrape_metrics=False)
    except RemoteError as exc:
        return RequestFigures(prompt=name, n_tokens=0, ttft=0.0, latency=0.0,
                              decode_tps=None, error=str(exc))
    return _figures(name, result)


def _figures(name: str, result: RemoteResult) -> RequestFigures:
    f = result.figures
    return RequestFigures(
        prompt=name, n_tokens=result.n_tokens, ttft=result.ttft, latency=result.total_time,
        decode_tps=result.decode_tps,
        draft_tokens=f.draft_tokens if f is not None else None,
        accepted=f.accepted if f is not None else None,
        drafts=f.drafts if f is not None else None)


def run_level(base_url: str, model: str, side: Side, concurrency: int, plan: CrossoverPlan,
              cancel: threading.Event, progress: Progress | None = None) -> LevelSide:
    """Send the level's requests to one server through ``concurrency`` workers.

    Raises:
        RemoteError: the server's ``/metrics`` could not be read at all (a request that
            fails is recorded with its error instead).
    """
    n = max(len(plan.prompts), concurrency)
    work: queue.Queue[tuple[int, str, str]] = queue.Queue()
    for i in range(n):
        name, text = plan.prompts[i % len(plan.prompts)]
        work.put((i, name, text))
    done: list[RequestFigures | None] = [None] * n
    lock = threading.Lock()

    def worker() -> None:
        with RemoteClient(base_url, api_key=plan.api_key) as client:
            while not cancel.is_set():
                try:
                    i, name, text = work.get_nowait()
                except queue.Empty:
                    return
                figures = _one_request(client, model, name, text, plan, cancel)
                with lock:
                    done[i] = figures
                    finished = sum(1 for d in done if d is not None)
                if progress is not None:
                    progress(side, concurrency, finished, n)

    with RemoteClient(base_url, api_key=plan.api_key) as probe:
        before = probe.spec_counters()
        t0 = time.perf_counter()
        threads = [threading.Thread(target=worker, name=f"crossover-{side}-{k}", daemon=True)
                   for k in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        after = probe.spec_counters() if before is not None else None
    counters = after.minus(before) if after is not None and before is not None else None
    return LevelSide(side=side, concurrency=concurrency, wall_time=wall,
                     requests=tuple(d for d in done if d is not None), counters=counters)


def _model_of(base_url: str, given: str | None, api_key: str | None) -> str:
    if given:
        return given
    with RemoteClient(base_url, api_key=api_key) as client:
        models = client.models()
    if not models:
        raise TandemError(f"{base_url} lists no model; name one with --model.")
    return models[0].id


def run_crossover(plan: CrossoverPlan, cancel: threading.Event | None = None,
                  progress: Progress | None = None) -> CrossoverResult:
    """Run every level on both servers (see the module docstring).

    Raises:
        RemoteError: a server cannot be reached or lists no model.
        TandemError: a server lists no model.
    """
    cancel = cancel or threading.Event()
    model_on = _model_of(plan.server_on, plan.model_on, plan.api_key)
    model_off = _model_of(plan.server_off, plan.model_off, plan.api_key)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_before = _load()
    # every prompt once, untimed: each level then finds them cached alike on both servers
    warm = CrossoverPlan(**{**_plan_fields(plan), "concurrency": (1,),
                            "max_tokens": min(plan.max_tokens, 8)})
    for url, model in ((plan.server_off, model_off), (plan.server_on, model_on)):
        run_level(url, model, "on", 1, warm, cancel)
    levels: list[tuple[LevelSide, LevelSide]] = []
    for i, c in enumerate(sorted(set(plan.concurrency))):
        order: list[tuple[Side, str, str]] = [("off", plan.server_off, model_off),
                                              ("on", plan.server_on, model_on)]
        if i % 2:
            order.reverse()
        got = {side: run_level(url, model, side, c, plan, cancel, progress)
               for side, url, model in order}
        levels.append((got["on"], got["off"]))
        if cancel.is_set():
            break
    load_after = _load()
    return CrossoverResult(server_on=plan.server_on, server_off=plan.server_off,
                           model_on=model_on, model_off=model_off, max_tokens=plan.max_tokens,
                           prompt_set=plan.prompt_set, levels=tuple(levels), started_at=started,
                           load_average=(load_before, load_after)
                           if load_before is not None and load_after is not None else None)


def _load() -> float | None:
    """The 1-minute load average of this machine (None where the OS has none): the
    crossover's figures are only as steady as the machine it ran on."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _plan_fields(plan: CrossoverPlan) -> dict[str, Any]:
    return {f: getattr(plan, f) for f in plan.__dataclass_fields__}
