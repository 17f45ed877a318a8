"""The `medpanel` command line. Thin on purpose: it parses, calls the library, and prints.

Every option can also be set by an environment variable named MEDPANEL_<OPTION> (shown in --help).
Bad input exits with status 2 and a short message saying what to fix; no tracebacks.
Each module below registers its commands on the shared Typer app.
"""

from __future__ import annotations

import sys

from rich.markup import escape

from medpanel.cli import core, board, judge, debate, osce, consult, scoring, replay, report  # noqa: F401, I001  (importing registers the commands, in help order)
from medpanel.cli.common import app, err
from medpanel.errors import MedpanelError


def main() -> None:
    try:
        app()
    except MedpanelError as exc:
        # The problem and fix are plain text: '[local]' in an install hint is not markup.
        err.print("[bold red]Error:[/] " + escape(exc.problem))
        if exc.fix:
            err.print(exc.fix, markup=False)
        sys.exit(exc.exit_code)


__all__ = ["app", "main"]
