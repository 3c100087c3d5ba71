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
token decoded there, the path a rejected draft takes on a hybrid model.

Protocol on stdout (lines starting with :data:`app.catalog.loadcheck.MARK`): the stage
reached (``stage load``, ``stage context``, ``stage decode``), then one JSON answer.
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
import traceback
from collections.abc import Callable
from pathlib import Path

from app.catalog import loadcheck
from app.errors import TandemError

#: context length of the probe's context (tokens): enough for the batch below
PROBE_N_CTX = 64
#: tokens in the second decode (a verification-sized batch with logits at every position)
PROBE_BATCH = 8
#: the first argument that makes a frozen executable run this child instead of the app
PROBE_ARG = loadcheck.PROBE_ARG


def probe_model(
    path: Path,
    cancel: threading.Event | None = None,
    *,
    n_gpu_layers: int | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> None:
    """Raise unless llama.cpp loads ``path`` and decodes with it (checked in a child).

    Args:
        cancel: when set, the check stops (LoadCancelledError).
        n_gpu_layers: as the load will use it.
        should_stop: a callable polled while the child runs; True cancels.

    Raises:
        ModelLoadError: the file makes llama.cpp fail or crash; the message says why.
        ModelPathError: the path is not a readable file.
        LoadCancelledError: cancelled while the probe ran.
    """

    def stop() -> bool:
        if cancel is not None and cancel.is_set():
            return True
        return should_stop is not None and should_stop()

    loadcheck.require_loads(path, n_gpu_layers=n_gpu_layers, should_stop=stop)


def _say(line: str) -> None:
    sys.stdout.write(f"{loadcheck.MARK} {line}\n")
    sys.stdout.flush()  # the parent must see the stage even if the next call kills us


def _answer(**fields: object) -> None:
    _say(json.dumps(fields))


def child_main(argv: list[str]) -> int:
    """The child: ``argv`` is ``PATH [--gpu-layers N]``; returns the exit status (see the
    module docstring). For a frozen app's entry point, given the arguments after
    :data:`PROBE_ARG`."""
    n_gpu_layers: int | None = None
    args = list(argv)
    if len(args) == 3 and args[1] == "--gpu-layers":
        n_gpu_layers = int(args[2])
        args = args[:1]
    if len(args) != 1:
        print("usage: python -m app.engine.probe PATH [--gpu-layers N]", file=sys.stderr)
        return loadcheck.EXIT_PYTHON_ERROR
    path = Path(os.fsdecode(args[0]))
    stage = "load"
    try:
        from app.engine.llama import LlamaContext, LlamaModel

        _say("stage load")
        model = LlamaModel(path, n_gpu_layers=n_gpu_layers, use_mmap=True)
        try:
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
            finally:
                ctx.close()
        finally:
            model.close()
    except TandemError as exc:
        _answer(ok=False, stage=stage, why=str(exc).replace(path.name, loadcheck.NAME_MARK))
        return loadcheck.EXIT_REFUSED
    except Exception as exc:  # a bug here, not the file's fault: say so, with the traceback
        traceback.print_exc()
        _answer(ok=False, stage=stage, python_error=True, why=f"{type(exc).__name__}: {exc}")
        return loadcheck.EXIT_PYTHON_ERROR
    _answer(ok=True)
    return loadcheck.EXIT_OK


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
