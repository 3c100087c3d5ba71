"""Races, k sweeps and lookup estimates as jobs of the chat service.

The race window does not own a thread or the session: it asks the service, which runs
these one at a time with every other job (a chat reply never runs during a race, and
vice versa). Each function queues one job and returns its :class:`~app.chat.service.Job`;
progress arrives as :class:`~app.chat.requests.RaceProgressed` /
:class:`~app.chat.requests.SweepProgressed` events, the result as the job's value:

* :func:`start_race` → :class:`~app.chat.recording.RaceRecording`;
* :func:`start_sweep` → :class:`~app.engine.measure.sweep.KSweepResult`;
* :func:`start_lookup_estimate` → :class:`~app.engine.measure.lookup.LookupEstimate`.

Cancel a job to stop it within one engine round; a cancelled race or sweep still returns
what it measured.
"""

from __future__ import annotations

import dataclasses

import time
from collections.abc import Callable

from app.chat.recording import LaneRecorder, RaceRecording
from app.chat.requests import (
    LookupRequest,
    PromptSpec,
    RaceProgressed,
    RaceRequest,
    SweepProgressed,
    SweepRequest,
)
from app.chat.service import ChatService, Job, JobContext
from app.engine.context_fit import ContextFit, fit_conversation
from app.engine.events import Event
from app.engine.measure.bench import RunRecord, generate_once
from app.engine.measure.lookup import LookupEstimate, estimate_lookup_hit_rate, model_tokenizer
from app.engine.measure.prompts import BenchPrompt, PreparedPrompt, prepare_prompt
from app.engine.measure.race import RacePair, run_race
from app.engine.measure.sweep import KSweepResult, run_k_sweep
from app.engine.session import Session
from app.errors import TandemError
from app.options import SamplingParams, SpecMode, SpeculationConfig

#: progress events at most this often (seconds); the engine reports every token
PROGRESS_INTERVAL_S = 0.1


def prepare(session: Session, spec: PromptSpec,
            sampling: SamplingParams) -> tuple[PreparedPrompt, ContextFit | None]:
    """Tokenize ``spec`` for the session's target (see :class:`PromptSpec`); a
    conversation longer than the context window is shortened as a chat reply's would be
    (``sampling.context_overflow``, :func:`~app.engine.context_fit.fit_conversation`),
    and what was dropped comes second (None: nothing).

    Raises:
        TandemError: the prompt is empty, or the chat template failed.
        ContextOverflowError: the conversation does not fit and the policy is ``stop``.
    """
    if spec.messages:
        tokens, fit = fit_conversation(spec.messages, session.chat_prompt, session.n_ctx,
                                       sampling.max_tokens, sampling.context_overflow)
        return PreparedPrompt(tuple(tokens), tuple(session.chat_format.stop), spec.name,
                              "chat"), fit
    if not spec.text.strip():
        raise TandemError("The prompt is empty.")
    return prepare_prompt(session, BenchPrompt(spec.name or "prompt", spec.text, spec.text,
                                               spec.stop)), None


def drafter_words(session: Session, speculation: SpeculationConfig) -> str:
    """The "on" side in words: "prompt lookup" or "draft model <file>"."""
    if speculation.mode is SpecMode.DRAFT_MODEL:
        model = session.draft_model
        return f"{speculation.mode.words} {model.path.name}" if model is not None \
            else speculation.mode.words
    return speculation.mode.words


def prompt_words(spec: PromptSpec) -> str:
    """What was raced, for the export: the conversation as "role: text" blocks, or the text."""
    if spec.messages:
        return "\n\n".join(f"{m.role}: {m.content}" for m in spec.messages)
    return spec.text


def start_race(service: ChatService, request: RaceRequest, *, origin: str = "race") -> Job:
    """Queue a race of ``request.prompt`` off vs on (see the module docstring)."""
    return service.submit("race", lambda ctx: _race(ctx, request), origin=origin)


def start_sweep(service: ChatService, request: SweepRequest, *, origin: str = "race") -> Job:
    """Queue a k sweep (see the module docstring)."""
    return service.submit("sweep", lambda ctx: _sweep(ctx, request), origin=origin)


def start_lookup_estimate(service: ChatService, request: LookupRequest, *,
                          origin: str = "race") -> Job:
    """Queue the prompt-lookup hit-rate estimate over past conversations."""
    return service.submit("lookup", lambda ctx: _lookup(ctx, request), origin=origin)


def _race(ctx: JobContext, request: RaceRequest) -> RaceRecording:
    session = ctx.session
    prompt, fit = prepare(session, request.prompt, request.sampling)
    if request.warm_up:
        warm = request.sampling.with_changes(max_tokens=2)
        for spec in (SpeculationConfig(), request.speculation):
            if ctx.cancel.is_set():
                break
            ctx.emit(RaceProgressed(ctx.job_id, "warm-up", 0, 2))
            generate_once(session, prompt, warm, spec, ctx.cancel)
    recorders = {"off": LaneRecorder(), "on": LaneRecorder()}
    last_emit = 0.0
    max_tokens = request.sampling.max_tokens

    def on_event(lane: str, ev: Event) -> None:
        nonlocal last_emit
        rec = recorders[lane]
        rec.add(ev)
        now = time.monotonic()
        if now - last_emit >= PROGRESS_INTERVAL_S:
            last_emit = now
            ctx.emit(RaceProgressed(ctx.job_id, lane, rec.tokens, max_tokens))

    def on_pair(done: int, total: int, pair: RacePair) -> None:
        if total > 1:
            ctx.emit(RaceProgressed(ctx.job_id, "pairs", done, total, pair))

    result = run_race(session, prompt, request.sampling, request.speculation, ctx.cancel,
                      on_event=on_event, pairs=request.pairs, on_pair=on_pair)
    return RaceRecording(
        result=result,
        off=recorders["off"].finish(result.off),
        on=recorders["on"].finish(result.on),
        model_name=session.config.target_path.name,
        drafter=drafter_words(session, request.speculation),
        prompt_text=prompt_words(request.prompt),
        max_tokens=max_tokens,
        cpu_backend=session.n_gpu_layers == 0,
        adaptive=request.speculation.adaptive,
        exact_verification=session.exact_verification,
        context=fit,
    )


def _sweep(ctx: JobContext, request: SweepRequest) -> KSweepResult:
    session = ctx.session
    prompt, fit = prepare(session, request.prompt, request.sampling)

    def progress(done: int, total: int, rec: RunRecord) -> None:
        ctx.emit(SweepProgressed(ctx.job_id, done, total, rec.label, rec.stats.decode_tps))

    result = run_k_sweep(session, prompt, request.sampling, request.speculation, request.ks,
                         repeat=request.repeat, warmup=request.warm_up, cancel=ctx.cancel,
                         progress=progress)
    return dataclasses.replace(result, context=fit)


def _lookup(ctx: JobContext, request: LookupRequest) -> LookupEstimate:
    tokenize: Callable[[str], list[int]] = model_tokenizer(ctx.session.target)
    cancel = ctx.cancel
    # a generator, so that a window closing mid-estimate stops it between conversations
    # instead of waiting for all of them
    conversations = (c.messages for c in request.conversations if not cancel.is_set())
    return estimate_lookup_hit_rate(conversations, tokenize, request.ngram_sizes)
