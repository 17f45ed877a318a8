"""The `medpanel` command line. Thin on purpose: it parses, calls the library, and prints.

Every option can also be set by an environment variable named MEDPANEL_<OPTION> (shown in --help).
Bad input exits with status 2 and a short message saying what to fix; no tracebacks.
Each module below registers its commands on the shared Typer app.
"""

from __future__ import annotations

import sys

from medpanel.cli import core, board, debate, consult, scoring, replay, report  # noqa: F401, I001  (importing registers the commands, in help order)
from medpanel.cli.common import app, err
from medpanel.errors import MedpanelError


def main() -> None:
    try:
        app()
    except MedpanelError as exc:
        err.print(f"[bold red]Error:[/] {exc.problem}")
        if exc.fix:
            err.print(exc.fix)
        sys.exit(exc.exit_code)


__all__ = ["app", "main"]
