"""``python -m app install-launcher`` / ``uninstall-launcher``: what :mod:`app.launcher`
did, printed for the user."""

from __future__ import annotations

import argparse
import sys

from app.launcher import install_launcher, uninstall_launcher


def _cmd_install(args: argparse.Namespace) -> int:
    result = install_launcher()
    for p in result.paths:
        print(f"wrote {p}")
    for n in result.notes:
        print(n)
    where = {"win32": "the Start menu", "darwin": "~/Applications (Launchpad, Spotlight)"}
    print(f"Tandem can now be started from {where.get(sys.platform, 'the applications menu')}.")
    return 0


def _cmd_uninstall(args: argparse.Namespace) -> int:
    result = uninstall_launcher()
    for p in result.paths:
        print(f"removed {p}")
    if not result.paths:
        print("No launcher was installed.")
    return 0


def add_cli_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``install-launcher`` and ``uninstall-launcher`` to the CLI."""
    p = sub.add_parser("install-launcher",
                       help="add Tandem to the applications menu / desktop / Start menu")
    p.set_defaults(handler=_cmd_install)
    p = sub.add_parser("uninstall-launcher", help="remove what install-launcher added")
    p.set_defaults(handler=_cmd_uninstall)
