"""The `medpanel` command line. Thin on purpose: it parses, calls the library, and prints.

Every option can also be set by an environment variable named MEDPANEL_<OPTION> (shown in --help); an
option whose meaning differs between commands has one variable per command (MEDPANEL_BOARD_MAX_TOKENS,
MEDPANEL_CONSULT_MAX_TOKENS, ...). The options every model-calling command shares (store, cache, timeout,
re-asks, prices, caps) are bound once, by common.bind_options.
Bad input exits with status 2 and a short message saying what to fix; no tracebacks.
Each module below registers its commands on the shared Typer app.
"""

from __future__ import annotations

import signal
import sys

from medpanel.cli import core, board, ask, judge, debate, osce, consult, scoring, healthbench, replay, report, serve, rate, curate, train, train_export  # noqa: F401, I001  (importing registers the commands, in help order)
from medpanel.cli.common import app, err, styled
from medpanel.errors import MedpanelError


def _stop_like_ctrl_c(signum, frame) -> None:
    # SIGTERM (kill, systemd, a job scheduler) and SIGHUP (a closed terminal) end a run as Ctrl-C does:
    # finished items stay saved, the run is marked interrupted, and the resume command is printed.
    # Hand the signal to whatever handles Ctrl-C now: inside asyncio.run that is the runner's own handler,
    # which cancels the main task cleanly (raising here instead could land inside the loop's internals).
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:  # SIGINT ignored (a background job): still stop
        raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> None:
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _stop_like_ctrl_c)
    try:
        app()
    except MedpanelError as exc:
        # The problem and fix are plain text: '[local]' in an install hint is not markup.
        err.print(styled(("Error:", "bold red"), " ", exc.problem))
        if exc.fix:
            err.print(exc.fix)
        sys.exit(exc.exit_code)


__all__ = ["app", "main"]
