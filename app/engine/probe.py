"""The load check's child process: load a GGUF, create a small context, decode.

:mod:`app.catalog.loadcheck` starts this module in a child process before the app
touches a model file (``python -m app.engine.probe PATH [--gpu-layers N]``, or the frozen
app's own executable with :data:`PROBE_ARG`, which its entry point dispatches to
:func:`child_main`; :func:`app.catalog.loadcheck.probe_command` builds the command line).
Here llama.cpp loads the model (weights memory-mapped), creates a context of :data:`PROBE_N_CTX` tokens and decodes one token
and then a batch of :data:`PROBE_BATCH` tokens with logits at every position: every
tensor of the model passes through the kernels that a prefill, a plain step and a
verification pass use, so a tensor type llama.cpp cannot compute with kills this child,
not the app. The context keeps :data:`PROBE_BATCH` recurrent-state snapshots
(``n_rs_seq``; llama.cpp ignores it for models without recurrent state or whose
architecture cannot roll back), and the batch is then rolled back to its middle and one
token decoded there, the path a rejected draft takes on a hybrid model. The model is
loaded with its multi-token-prediction (nextn) layers, as a session loads it; when it
has them and the build can run them, a last stage (``stage mtp``) runs the MTP head
once on the trunk's hidden state, as the MTP drafter will
(:mod:`app.engine.drafter_kinds.mtp`), each head of a model with several chained
ones under its own stage line (``stage mtp head 0``, ``stage mtp head 1``, …); the
answer's ``mtp`` says how that went (and ``mtp_cost_ratio`` what one head step costs
over one target step, timed there), and a crash there leaves the model loadable
without the drafter.

An MTP assistant GGUF (Gemma 4's ``gemma4-assistant``) cannot run alone: llama.cpp
creates its context only with its target's (``ctx_other``). Probed alone it is refused
at the load stage in one sentence; ``--target TARGET`` probes the pair instead: the
target decodes two tokens with its hidden states out, then the assistant's MTP context
(reading the target's KV cache) evaluates a draft step on them, as
:class:`app.engine.drafter_kinds.mtp.AssistantDrafter` will, and one assistant step is
timed against one target step (the answer's ``mtp`` is ``ok`` and ``mtp_cost_ratio``
the assistant's c).

Protocol on stdout (lines starting with :data:`app.catalog.loadcheck.MARK`): the stage
reached (``stage load``, ``stage context``, ``stage decode``, ``stage mtp`` and its
heads), then one JSON answer.
Exit status 0: it loads and decodes; 2: llama.cpp refused it with an error (the answer
says why); 3: a Python exception here (a bug in Tandem, reported as such); death by a
signal: llama.cpp crashed, and the parent reads the reason from stderr.

:func:`probe_model` is the engine's entry: it raises unless the file loads.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app.catalog import loadcheck
from app.errors import TandemError

if TYPE_CHECKING:
    from app.engine.llama import LlamaContext, LlamaModel

#: context length of the probe's context (tokens): enough for the batch below
PROBE_N_CTX = 64
#: tokens in the second decode (a verification-sized batch with logits at every position)
PROBE_BATCH = 8
#: timed one-token passes of the target and of an MTP head, for the head's cost ratio c
TIMING_PASSES = 5
#: the first argument that makes a frozen executable run this child instead of the app
PROBE_ARG = loadcheck.PROBE_ARG


def probe_model(
    path: Path,
    cancel: threading.Event | None = None,
    *,
    n_gpu_layers: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    target: Path | None = None,
) -> None:
    """Raise unless llama.cpp loads ``path`` and decodes with it (checked in a child).

    Args:
        cancel: when set, the check stops (LoadCancelledError).
        n_gpu_layers: as the load will use it.
        should_stop: a callable polled while the child runs; True cancels.
        target: for an MTP assistant, the target it drafts for (the pair is probed).

    Raises:
        ModelLoadError: the file makes llama.cpp fail or crash; the message says why.
        ModelPathError: the path is not a readable file.
        LoadCancelledError: cancelled while the probe ran.
    """

    def stop() -> bool:
        if cancel is not None and cancel.is_set():
            return True
        return should_stop is not None and should_stop()

    loadcheck.require_loads(path, n_gpu_layers=n_gpu_layers, should_stop=stop, target=target)


def _say(line: str) -> None:
    sys.stdout.write(f"{loadcheck.MARK} {line}\n")
    sys.stdout.flush()  # the parent must see the stage even if the next call kills us


def _answer(**fields: object) -> None:
    _say(json.dumps(fields))


def _parse_args(argv: list[str]) -> tuple[Path, int | None, Path | None] | None:
    """``PATH [--gpu-layers N] [--target TARGET]`` → (path, n_gpu_layers, target)."""
    args = list(argv)
    opts: dict[str, str] = {}
    while len(args) >= 3 and args[-2] in ("--gpu-layers", "--target"):
        opts[args[-2]] = args[-1]
        args = args[:-2]
    if len(args) != 1:
        return None
    target = opts.get("--target")
    gpu = opts.get("--gpu-layers")
    return (Path(os.fsdecode(args[0])), int(gpu) if gpu is not None else None,
            Path(os.fsdecode(target)) if target is not None else None)


def child_main(argv: list[str]) -> int:
    """The child: ``argv`` is ``PATH [--gpu-layers N] [--target TARGET]``; returns the
    exit status (see the module docstring). For a frozen app's entry point, given the
    arguments after :data:`PROBE_ARG`."""
    parsed = _parse_args(argv)
    if parsed is None:
        print("usage: python -m app.engine.probe PATH [--gpu-layers N] [--target TARGET]",
              file=sys.stderr)
        return loadcheck.EXIT_PYTHON_ERROR
    path, n_gpu_layers, target = parsed
    stage = "load"
    mtp: str | None = None
    mtp_cost_ratio: float | None = None
    try:
        from app.engine.llama import LlamaContext, LlamaModel

        if target is not None:
            c = _probe_assistant(path, target, n_gpu_layers)
            _answer(ok=True, mtp="ok", mtp_cost_ratio=c)
            return loadcheck.EXIT_OK
        _say("stage load")
        model = LlamaModel(path, n_gpu_layers=n_gpu_layers, use_mmap=True, load_mtp=True)
        try:
            _refuse_assistant(model)
            stage = "context"
            _say("stage context")
            ctx = LlamaContext(
                model, n_ctx=PROBE_N_CTX, n_batch=PROBE_N_CTX, n_threads=min(4, os.cpu_count() or 1),
                n_outputs_max=PROBE_BATCH, n_rs_seq=PROBE_BATCH,
            )
            try:
                stage = "decode"
                _say("stage decode")
                first = model.bos if 0 <= model.bos < model.n_vocab else 0
                ctx.decode([first], 0, logits="last")
                ctx.logits(-1)
                batch = [(first + 1 + i) % max(1, model.n_vocab) for i in range(PROBE_BATCH)]
                ctx.decode(batch, 1, logits="all")
                ctx.logits(PROBE_BATCH - 1)
                keep = 1 + PROBE_BATCH // 2
                if ctx.seq_rm(keep, -1):  # False: no rollback here; the session says so
                    ctx.decode([first], keep, logits="last")
                    ctx.logits(-1)
                mtp, mtp_cost_ratio = _probe_mtp(model, ctx)
            finally:
                ctx.close()
        finally:
            model.close()
    except _Refused as exc:
        _answer(ok=False, stage=exc.stage, why=str(exc).replace(path.name, loadcheck.NAME_MARK))
        return loadcheck.EXIT_REFUSED
    except TandemError as exc:
        _answer(ok=False, stage=stage, why=str(exc).replace(path.name, loadcheck.NAME_MARK))
        return loadcheck.EXIT_REFUSED
    except Exception as exc:  # a bug here, not the file's fault: say so, with the traceback
        traceback.print_exc()
        _answer(ok=False, stage=stage, python_error=True, why=f"{type(exc).__name__}: {exc}")
        return loadcheck.EXIT_PYTHON_ERROR
    if mtp is None:
        _answer(ok=True)
    else:
        _answer(ok=True, mtp=mtp, mtp_cost_ratio=mtp_cost_ratio)
    return loadcheck.EXIT_OK


class _Refused(TandemError):
    """A refusal at a given stage (the assistant probe's stages)."""

    def __init__(self, stage: str, why: str) -> None:
        super().__init__(why)
        self.stage = stage


def _refuse_assistant(model: LlamaModel) -> None:
    """An MTP assistant alone is no model to chat with: refuse it in one sentence."""
    from app.catalog.pairing import ASSISTANT_TARGETS

    arch = model.meta("general.architecture") or ""
    if arch in ASSISTANT_TARGETS:
        raise TandemError(
            f"{model.path.name} is an MTP assistant ({arch}), not a model to chat with: "
            f"choose it as the MTP drafter of a {' or '.join(ASSISTANT_TARGETS[arch])} model.")


def _probe_assistant(path: Path, target_path: Path, n_gpu_layers: int | None) -> float | None:
    """Load ``target_path`` and the assistant ``path`` and run one draft step as
    :class:`app.engine.drafter_kinds.mtp.AssistantDrafter` does (the stages are the
    assistant's: load, context, decode); then time one assistant step against one plain
    target step (:func:`_assistant_cost_ratio`).

    Returns:
        The assistant's draft cost ratio c, or None when the target step took no
        measurable time.

    Raises:
        _Refused: llama.cpp refused a step (its words).
    """
    from app.engine.drafter_kinds.mtp import assistant_context
    from app.engine.llama import LlamaContext, LlamaModel

    stage = "load"
    try:
        _say("stage load")
        target = LlamaModel(target_path, n_gpu_layers=n_gpu_layers, use_mmap=True)
        try:
            assistant = LlamaModel(path, n_gpu_layers=n_gpu_layers, use_mmap=True)
            try:
                tctx = LlamaContext(target, n_ctx=PROBE_N_CTX, n_batch=PROBE_N_CTX,
                                    n_threads=min(4, os.cpu_count() or 1))
                rows: list[np.ndarray] = []
                tctx.set_decode_listener(lambda toks, _p: rows.append(tctx.hidden_states(len(toks))))
                first = target.bos if 0 <= target.bos < target.n_vocab else 0
                tctx.decode([first, (first + 1) % max(1, target.n_vocab)], 0, logits="last")
                stage = "context"
                _say("stage context")
                actx = assistant_context(assistant, tctx)
                stage = "decode"
                _say("stage decode")
                h = rows[0][1:2]
                for _ in range(2):  # the second step feeds the assistant's own state
                    actx.decode_with_hidden([first], [2], h, logits_last=True)
                    actx.logits(-1)
                    h = actx.hidden_states(1)
                ratio = _assistant_cost_ratio(tctx, actx, first, rows[0][1:2])
                tctx.close()  # closes actx first
            finally:
                assistant.close()
        finally:
            target.close()
    except TandemError as exc:
        raise _Refused(stage, str(exc)) from exc
    return ratio


def _assistant_cost_ratio(tctx: LlamaContext, actx: LlamaContext, token: int,
                          hidden: np.ndarray) -> float | None:
    """An MTP assistant's draft cost ratio c, as :func:`_head_cost_ratio` times a head:
    one assistant step (``token`` at position 2 with ``hidden``, logits out, over the two
    positions the target's cache holds; the assistant writes nothing there, so every step
    sees the same cache) over one plain target step (one token on an empty cache, timed
    last: it empties the cache the assistant reads), each the fastest of
    :data:`TIMING_PASSES` after one untimed pass. None when the target step took no
    measurable time."""
    t_assistant = _fastest(lambda: actx.decode_with_hidden([token], [2], hidden, logits_last=True))
    t_target = _fastest(lambda: tctx.decode([token], 0, logits="last"), tctx.clear)
    return t_assistant / t_target if t_target > 0 else None


def _fastest(step: Callable[[], object], clear: Callable[[], None] | None = None) -> float:
    """Seconds of the fastest of :data:`TIMING_PASSES` runs of ``step`` after one untimed
    run, ``clear`` before each (None: nothing to clear)."""
    times = []
    for i in range(TIMING_PASSES + 1):
        if clear is not None:
            clear()
        t = time.perf_counter()
        step()
        if i:
            times.append(time.perf_counter() - t)
    return min(times)


def _probe_mtp(model: LlamaModel, ctx: LlamaContext) -> tuple[str | None, float | None]:
    """Run the model's MTP head as the drafter does: the trunk decodes two tokens with
    its hidden states out, the head evaluates the second with the first one's state;
    then time one head step against one plain target step (:func:`_head_cost_ratio`).

    Returns:
        (``ok``, or why it cannot (llama.cpp's words), or None when the model has no
        nextn layers or the build cannot run them; the head's draft cost ratio c when it
        ran, else None). A crash here is the parent's to read (the stage line says
        ``mtp``).
    """
    from app.engine.llama import CONTEXT_TYPE_MTP, LlamaContext, mtp_staging_missing

    if model.n_layer_nextn <= 0 or mtp_staging_missing():
        return None, None
    _say("stage mtp")
    rows: list[np.ndarray] = []
    try:
        ctx.clear()
        ctx.set_decode_listener(lambda toks, _pos: rows.append(ctx.hidden_states(len(toks))))
        first = model.bos if 0 <= model.bos < model.n_vocab else 0
        second = (first + 1) % max(1, model.n_vocab)
        ctx.decode([first, second], 0, logits="last")
        ctx.set_decode_listener(None)
        head = LlamaContext(model, n_ctx=PROBE_N_CTX, n_batch=PROBE_N_CTX, n_threads=ctx.n_threads,
                            n_outputs_max=1, context_type=CONTEXT_TYPE_MTP)
        try:
            h = rows[0]
            if model.n_layer_nextn > 1:  # chained heads: each gets its stage line
                _say("stage mtp head 0")
            head.decode_with_hidden([first], [0], np.zeros_like(h[:1]), logits_last=False)
            head.decode_with_hidden([second], [1], h[:1], logits_last=True)
            head.logits(-1)
            head.hidden_states(1)
            _probe_chained_heads(model, head, second, h[:1])
            ratio = _head_cost_ratio(ctx, head, first, h[:1])
        finally:
            head.close()
    except TandemError as exc:
        return str(exc), None
    return "ok", ratio


def _probe_chained_heads(model: LlamaModel, head: LlamaContext, token: int,
                         hidden: np.ndarray) -> None:
    """Run every further head of a model with chained heads once (the drafter runs head
    i for draft token i: ``llama_set_nextn_layer_offset``) on ``token`` at position 1,
    where a graph that llama.cpp cannot build aborts this child, not the app; then
    select the first head again. Nothing to do for one head or a build without the
    function (the drafter then refuses the model). Each head gets its stage line
    (``stage mtp head i``): the parent reads a crash there as the MTP stage's."""
    from app.engine.llama import mtp_chain_missing

    if model.n_layer_nextn <= 1 or mtp_chain_missing():
        return
    for i in range(1, model.n_layer_nextn):
        _say(f"stage mtp head {i}")
        head.seq_rm(1, -1)
        head.set_nextn_layer_offset(i)
        head.decode_with_hidden([token], [1], hidden, logits_last=True)
        head.logits(-1)
    head.set_nextn_layer_offset(0)


def _head_cost_ratio(ctx: LlamaContext, head: LlamaContext, token: int,
                     hidden: np.ndarray) -> float | None:
    """The MTP head's draft cost ratio c: one head step (one token with a trunk hidden
    state, logits out) over one plain target step (one token, logits out), each on an
    empty cache, the fastest of :data:`TIMING_PASSES` after one untimed pass. None when
    the target step took no measurable time."""
    t_target = _fastest(lambda: ctx.decode([token], 0, logits="last"), ctx.clear)
    t_head = _fastest(lambda: head.decode_with_hidden([token], [0], hidden, logits_last=True),
                      head.clear)
    return t_head / t_target if t_target > 0 else None


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
