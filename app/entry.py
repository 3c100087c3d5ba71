"""The one entry point of every Tandem executable: the ``tandem`` GUI script, ``python -m
app`` and the frozen (PyInstaller) ``tandem`` / ``tandem-cli``.

It decides, from the command line alone and before Qt is imported, what this process is:

* ``tandem`` with no arguments, or with one GGUF file (``tandem model.gguf``, what a
  desktop entry's ``Exec=tandem %f`` runs when a GGUF is opened from a file manager):
  the window, which loads that file. Qt's system libraries are checked first
  (:mod:`app.system_libs`): when some are missing the user gets a readable message with
  the install command instead of Qt's abort (exit status 134).
* Anything else (``tandem --help``, ``tandem --version``, ``tandem models list``), and
  every command line of an executable named ``tandem-cli``: the command line interface
  (:mod:`app.cli`). So a frozen app has its CLI without a second Python program.
* The hidden first argument :data:`app.engine.probe.PROBE_ARG`: the GGUF probe's child
  process (:mod:`app.engine.probe`). A frozen app has no ``python -m``, so the probe
  launches the app's own executable with this argument.
* The hidden first argument :data:`app.cli.crossover.RENDER_CHART_ARG` ``IN.json
  OUT.png``: draw a serving-crossover chart (``bench --server … --out``) with the
  window's chart, Qt offscreen; the CLI runs it as a child so that it holds no Qt.
* The hidden first argument :data:`CHECK_SYSTEM_ARG`: print which of Qt's system
  libraries are missing and the install lines (exit 0 when none, 1 otherwise); the Linux
  tarball's install script runs it.

Qt-free: nothing from :mod:`app.ui` is imported until the window is chosen.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

#: hidden argument: report Qt's missing system libraries and exit
CHECK_SYSTEM_ARG = "--check-system-libs"


def wants_window(args: Sequence[str], program: str) -> bool:
    """Whether a command line opens the window (True) or runs the CLI (False).

    Args:
        args: the arguments after the program name.
        program: the program name as invoked (``sys.argv[0]``); ``tandem-cli`` is
            always the CLI.
    """
    if Path(program).name.lower().startswith("tandem-cli"):
        return False
    if not args:
        return True
    return len(args) == 1 and args[0].lower().endswith(".gguf") and not args[0].startswith("-")


def main(argv: Sequence[str] | None = None, program: str | None = None) -> int:
    """Run Tandem: the window, the CLI, or a hidden helper (see the module docstring).

    Returns the process exit status.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    program = program if program is not None else (sys.argv[0] if sys.argv else "tandem")
    from app.engine import probe  # light: llama_cpp is imported by the child only

    if args[:1] == [probe.PROBE_ARG]:
        return probe.child_main(args[1:])
    if args[:1] and args[0].startswith("--tandem-render"):  # only then import the CLI
        from app.cli.crossover import RENDER_CHART_ARG

        if args[0] == RENDER_CHART_ARG:
            # the CLI's crossover chart: drawn by the window's own chart, Qt offscreen
            from app.ui.race.crossover_view import main as render_main

            return render_main(args[1:])
    if args[:1] == [CHECK_SYSTEM_ARG]:
        from app import system_libs

        return system_libs.main()
    if wants_window(args, program):
        exact_kernel_for_window()
        return _gui(Path(args[0]) if args else None)
    from app.cli import main as cli_main
    from app.cli.main import program_name

    return cli_main(args, prog=program_name(program))


def exact_kernel_for_window() -> bool:
    """Switch ggml's tiled K-quant kernel off for the window's process when the saved
    settings ask for exact verification (:func:`app.engine.exact.tiled_kernel_off_for_exact`;
    a command line's ``--exact`` is handled by :func:`app.cli.main` after parsing). Returns
    whether it was switched off here.

    The cost of the exact configuration on Gemma 3 270M Q4_K_M, 2 threads, is in
    docs/proof.md ("On Q4_K_M itself"): decoding about as fast, prompt processing slower.
    """
    from app.store.settings import saved_exact_verification

    if not saved_exact_verification():
        return False
    from app.engine.exact import tiled_kernel_off_for_exact

    return tiled_kernel_off_for_exact()


def _gui(open_path: Path | None) -> int:
    from app import system_libs
    from app.diagnostics import log_fields
    from app.store.logs import remember_last_crash, start_log, watch_fatal_errors

    start_log("gui", log_fields())  # first, so that a window that cannot open is logged too
    remember_last_crash()  # before watching anew empties crash.log
    watch_fatal_errors("gui")
    problem = system_libs.gui_problem()
    if problem is not None:
        system_libs.report_problem(problem)
        return 2
    try:
        from app.ui.launch import main as gui_main
    except ImportError as exc:  # Qt's own libraries (libEGL, libfontconfig …) are missing
        system_libs.report_problem(system_libs.import_problem(exc))
        return 2
    if open_path is not None:
        open_path = Path(os.path.abspath(open_path.expanduser()))
    return gui_main(open_path=open_path)
