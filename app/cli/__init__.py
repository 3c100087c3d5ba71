"""The command line, ``python -m app …``: every argparse parser and every ``print``.

:mod:`app.cli.main` builds the parser and runs a subcommand; each feature adds its own
subcommands (:mod:`app.cli.models`, :mod:`app.cli.bench`, :mod:`app.cli.launcher`), the
model and drafter options are shared (:mod:`app.cli.options`), and figures are worded in
:mod:`app.cli.report`. The layers below never see an ``argparse.Namespace`` and never
print. No Qt.
"""

from app.cli.main import main

__all__ = ["main"]
